import AsyncHTTPClient
import CStowSystem
import Foundation
import Prometheus
import HTTPTypes
import Hummingbird
import HummingbirdCore
public import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import ServiceLifecycle
public import UnixSignals
import StorageProtocol
import Synchronization

/// The storage service: opens a data directory and serves the API of PROTOCOL.md over HTTP, or
/// over https when the configuration has `tls` (a certificate and key loaded and checked by `init`).
///
/// ```swift
/// let server = try StowServer(configuration: config, logger: logger)
/// try await server.run { url in print(url) }   // until SIGINT/SIGTERM
/// ```
///
/// The data directory holds `stowd.sqlite` (metadata), `blobs/` (file contents by id),
/// `uploads/` (uploads in progress) and `secret.key` (the URL-signing secret).
public final class StowServer: Sendable {
    let service: StowService
    private let group = Mutex<ServiceGroup?>(nil)
    /// The exclusive lock on the data directory, held for the server's lifetime.
    private let lockDescriptor: Int32
    /// The certificate and key of an https server; nil for plain http.
    private let tlsConfiguration: TLSConfiguration?

    /// Buffers of 1 MiB and more (an S3 part, 8 MiB) are mapped and given back when freed: glibc
    /// would otherwise keep freed ones in its heap (its threshold grows with each freed mapping),
    /// and a server's resident memory would only grow with the parts it sent.
    static let mallocTuned: Bool = CStowSystem_fix_mmap_threshold(1 << 20) == 1

    public init(configuration: ServerConfiguration, logger: Logger = Logger(label: "stowd")) throws {
        _ = Self.mallocTuned
        let dir = configuration.dataDirectory
        // Before the lock: a certificate that cannot serve is said before anything is opened.
        tlsConfiguration = try configuration.tls.map { files throws(ServerError) in try ServerTLS.configuration(files) }
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        guard let lock = try Posix.lockExclusively(dir + "/stowd.lock") else {
            throw ServerError(message: "another stowd is already using \(dir); stop it, or give this one its own --data-dir")
        }
        lockDescriptor = lock
        let secret: Data
        if let file = configuration.signingKeyFile {
            secret = try Self.readSecret(file)
        } else if configuration.database == nil {
            secret = try Self.loadOrCreateSecret(at: dir + "/secret.key")
        } else {
            // Replaced by the database's before the server listens (see `run`).
            secret = Self.randomSecret()
        }
        let store: any MetadataStore = try configuration.database.map {
            try PostgresMetadataStore($0, blobGraceSeconds: configuration.blobGrace, logger: logger)
        } ?? SQLiteMetadataStore(path: dir + "/stowd.sqlite", blobGraceSeconds: configuration.blobGrace)
        let blobs: any BlobStore = try configuration.objectStore.map {
            try S3BlobStore($0, ledger: store, stagingRoot: dir, sweepAge: TimeInterval(configuration.orphanSweepAge))
        } ?? LocalBlobStore(root: dir)
        service = StowService(config: configuration, store: store, blobs: blobs, signer: URLSigner(secret: secret), logger: logger)
    }

    /// The metadata store (for tests and tools that inspect the server's state).
    public var store: any MetadataStore { service.store }

    /// The ids of every stored blob, whatever its age (for tests and tools that count them).
    public func storedBlobIDs() async throws -> [String] {
        try await service.blobs.allBlobIDs()
    }

    /// Serves until a graceful-shutdown signal arrives (or the task is cancelled).
    /// - Parameters:
    ///   - signals: the signals that start a graceful shutdown.
    ///   - onListening: called once with the base URL the server listens on.
    ///   - onShutdown: called once when the graceful shutdown begins (before connections drain).
    public func run(
        signals: [UnixSignal] = [.sigterm, .sigint], onListening: @escaping @Sendable (String) async -> Void = { _ in },
        onShutdown: @escaping @Sendable () -> Void = {}
    ) async throws {
        let gc = GarbageCollector(service: service)
        do {
            try await start()
        } catch {
            await service.store.close()
            throw error
        }
        // The client `uploads/copy` fetches with: no redirects, bounded waits. Shut down when the server stops.
        var httpConfig = HTTPClient.Configuration(redirectConfiguration: .disallow, timeout: .init(connect: .seconds(10), read: .seconds(60)))
        httpConfig.connectionPool = .init(idleTimeout: .seconds(30))
        let http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: httpConfig)
        let app = makeApplication(http: http, onListening: onListening)
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: app), .init(service: gc), .init(service: ChangeSignalCloser(signal: service.changeSignal)),
                    .init(service: ChangeSignalCloser(signal: service.lockSignal)),
                    .init(service: OtherServersFollower(store: service.store, lockSignal: service.lockSignal)),
                    .init(service: ShutdownHook(action: onShutdown)),
                ],
                gracefulShutdownSignals: signals, logger: service.logger))
        self.group.withLock { $0 = group }
        defer { try? FileManager.default.removeItem(atPath: service.config.dataDirectory + "/stowd.url") }
        do {
            try await group.run()
        } catch {
            try? await http.shutdown()
            await service.store.close()
            throw error
        }
        try? await http.shutdown()
        await service.store.close()
    }

    /// Before the port opens: the database (migrated), the shared signing secret, the bucket, the orphan sweep.
    private func start() async throws {
        do {
            try await service.store.prepare()
        } catch {
            throw ServerError(message: "cannot use the database \(service.config.database?.description ?? ""): \(Self.describe(error))")
        }
        if service.config.signingKeyFile == nil, let shared = try await service.store.sharedSetting("url-signing-secret", proposed: Self.randomSecret()) {
            service.useSigningSecret(shared)
        }
        // A generated admin token: the first replica's, for all (one token opens every replica).
        if let file = service.config.generatedAdminTokenFile,
            let local = FileManager.default.contents(atPath: file).flatMap({ String(data: $0, encoding: .utf8) })?
                .trimmingCharacters(in: .whitespacesAndNewlines), !local.isEmpty,
            let shared = try await service.store.sharedSetting("admin-token", proposed: Data(local.utf8)),
            let token = String(data: shared, encoding: .utf8), token != local
        {
            service.useTokens(.single(adminToken: token))
            try Posix.writeAtomically(file, token + "\n", mode: 0o600)
            service.logger.info("the admin token is the one every replica of this database shares: \(file)")
        }
        // A bucket that cannot be reached, or that refuses the credentials, is said at start.
        try await service.blobs.prepare()
        try await GarbageCollector(service: service).sweepOrphans()
    }

    /// An error as an operator reads it (PostgreSQL's own message where there is one).
    static func describe(_ error: any Error) -> String {
        if let e = error as? PSQLError {
            if let message = e.serverInfo?[.message] { return message }
            return "\(e.code)" + (e.underlying.map { ": \($0)" } ?? "")
        }
        if let e = error as? PostgresTransactionError, let inner = e.closureError ?? e.beginError ?? e.commitError { return describe(inner) }
        return "\(error)"
    }

    /// Starts a graceful shutdown: stop accepting connections, finish the requests in flight, return from `run`.
    public func shutdown() async {
        await group.withLock { $0 }?.triggerGracefulShutdown()
    }

    /// One pass of the garbage collector, now (it also runs on its own every `gcInterval`).
    @discardableResult
    public func collectGarbage(now: Int64? = nil) async throws -> (uploads: Int, blobs: Int) {
        try await GarbageCollector(service: service).runOnce(now: now ?? Timestamp.nowNanoseconds())
    }

    func makeApplication(http: HTTPClient, onListening: @escaping @Sendable (String) async -> Void) -> some ApplicationProtocol {
        let router = Router()
        router.add(middleware: MetricsMiddleware(metrics: service.metrics))
        router.add(middleware: ErrorMiddleware())
        router.add(middleware: LogRequestsMiddleware(.debug))
        router.add(middleware: OriginMiddleware(signal: service.changeSignal))
        service.addUploadRoutes(to: router)
        service.addChangeRoutes(to: router)
        service.addLockRoutes(to: router)
        if service.config.uploadExtensions { service.addBatchRoutes(to: router) }
        service.addFileRoutes(to: router)
        service.addNamespaceRoutes(to: router)
        service.addSearchRoutes(to: router)
        service.addDownloadRoutes(to: router)
        service.addTusRoutes(to: router)
        service.addFormRoutes(to: router)
        service.addCopyRoutes(to: router, http: http)
        let config = service.config
        return Application(
            router: router,
            server: tlsConfiguration.map { HTTPSChannel.builder(tlsConfiguration: $0) } ?? .http1(configuration: Self.http1Configuration),
            configuration: ApplicationConfiguration(address: .hostname(config.host, port: config.port), serverName: "stowd"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? config.port
                let host = config.host.contains(":") ? "[\(config.host)]" : config.host
                let url = "\(config.scheme)://\(host):\(port)"
                // For clients that start or find the server by its data directory (the embedded stowfs).
                try? Posix.writeAtomically(config.dataDirectory + "/stowd.url", url + "\n")
                await onListening(url)
            },
            logger: service.logger)
    }

    /// HTTP/1.1 as stowd serves it, with or without TLS: `Expect: 100-continue` answered at once.
    static var http1Configuration: HTTP1Channel.Configuration { .init(additionalChannelHandlers: [ExpectContinueHandler()]) }

    deinit { close(lockDescriptor) }

    static func randomSecret() -> Data {
        var rng = SystemRandomNumberGenerator()
        return Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) })
    }

    /// `--signing-key-file`: at least 32 bytes, used as they are.
    static func readSecret(_ path: String) throws -> Data {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ServerError(message: "cannot read the signing key file \(path)")
        }
        guard data.count >= 32 else {
            throw ServerError(message: "the signing key file \(path) holds \(data.count) bytes; it needs at least 32 (e.g. head -c 32 /dev/urandom > \(path))")
        }
        return data
    }

    static func loadOrCreateSecret(at path: String) throws -> Data {
        if let data = FileManager.default.contents(atPath: path), data.count >= 32 { return data }
        let secret = randomSecret()
        let tmp = path + ".tmp"
        guard FileManager.default.createFile(atPath: tmp, contents: secret, attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: tmp])
        }
        try Posix.fsync(path: tmp)
        try Posix.rename(tmp, path)
        try Posix.fsyncDirectory((path as NSString).deletingLastPathComponent)
        return secret
    }
}

/// Counts answers by route and status, and times them.
struct MetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let route = { context.endpointPath ?? "unmatched" }
        do {
            let response = try await next(request, context)
            metrics.countRequest(method: request.method.rawValue, route: route(), status: response.status.code, duration: ContinuousClock.now - start)
            return response
        } catch {
            // Answered by the error (a 4xx of a bad request, a 404 of no route): counted as well.
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            metrics.countRequest(method: request.method.rawValue, route: route(), status: status, duration: ContinuousClock.now - start)
            throw error
        }
    }
}

/// Runs a request with its `Stow-Origin` (`ChangeOrigin.current`, recorded with its changes), and
/// after a request that may have changed something, wakes the readers of the change feed.
struct OriginMiddleware<Context: RequestContext>: RouterMiddleware {
    let signal: ChangeSignal
    static var originHeader: HTTPField.Name { HTTPField.Name(Routes.originHeader)! }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let origin = ChangeOrigin.validated(request.headers[Self.originHeader])
        let changing = ![.get, .head, .options].contains(request.method)
        do {
            let response = try await ChangeOrigin.$current.withValue(origin) { try await next(request, context) }
            if changing { signal.bump() }
            return response
        } catch {
            // A refusal may still follow a change (a batch stores some files and refuses others).
            if changing { signal.bump() }
            throw error
        }
    }
}

/// A reason the server cannot start.
public struct ServerError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
