import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import NIOSSL
import StorageClient
import StorageProtocol
import StorageServer
import Synchronization
import Testing

/// A real `stowd` (in this process) on a loopback port, with its own data directory, an admin
/// token, a reader and a writer token, and clients. Use `withServer`, which always stops it.
struct TestServer: Sendable {
    let url: String
    let dataDirectory: String
    let server: StowServer
    let admin: HTTPObjectStore
    let raw: RawHTTP
    /// The CA file the clients trust (an https server's).
    var caFile: String? = nil
    static let adminToken = "admin-token-0001"
    static let writerToken = "writer-token-0001"
    static let readerToken = "reader-token-0001"

    func client(token: String?) -> HTTPObjectStore {
        var c = HTTPObjectStore.Configuration(endpoint: url, token: token)
        c.retry = RetryPolicy(attempts: 2, baseDelay: .milliseconds(20))
        c.caFile = caFile
        return HTTPObjectStore(configuration: c)
    }

    /// Number of stored blobs, in the blob folder or the bucket (to check that failures leave nothing behind).
    func blobCount() async throws -> Int {
        try await server.storedBlobIDs().count
    }

    /// Uploads in progress: staging files in the data directory, and uploads staged in an object
    /// store (recorded in the metadata store's staging ledger).
    func stagedCount() async throws -> Int {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: dataDirectory + "/uploads").count) ?? 0
        return files + (try await server.store.stagings().count)
    }
}

func makeTempDirectory(_ label: String) -> String {
    let path = FileManager.default.temporaryDirectory.path + "/stow-\(label)-\(UUID().uuidString.prefix(8))"
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Runs `body` against a fresh server and namespace `test`; stops the server and removes its data even when `body` throws.
/// - Parameter caFile: the CA file the clients trust, for a server that `configure` makes https.
func withServer(
    dataDirectory: String? = nil, caFile: String? = nil, configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: (TestServer) async throws -> Void
) async throws {
    let dir = dataDirectory ?? makeTempDirectory("server")
    defer { if dataDirectory == nil { try? FileManager.default.removeItem(atPath: dir) } }
    var tokens = TokenStore()
    tokens.add(token: TestServer.adminToken, pattern: "*", permission: .admin)
    tokens.add(token: TestServer.writerToken, pattern: "test*", permission: .write)
    tokens.add(token: TestServer.readerToken, pattern: "test", permission: .read)
    var config = ServerConfiguration(dataDirectory: dir, tokens: tokens)
    config.port = 0
    config.objectStore = TestBackend.s3Location(for: dir)
    config.database = TestBackend.database(for: dir)
    configure(&config)
    var logger = Logger(label: "stowd-test")
    logger.logLevel = .warning
    let server = try StowServer(configuration: config, logger: logger)
    let (urls, continuation) = AsyncStream.makeStream(of: String.self)
    // A server that fails before it listens ends the stream: its error is thrown here, no wait.
    let task = Task {
        defer { continuation.finish() }
        try await server.run(signals: []) { url in continuation.yield(url) }
    }
    var iterator = urls.makeAsyncIterator()
    guard let url = await iterator.next() else {
        try await task.value
        throw StorageError(.unavailable, "server did not start")
    }
    var c = HTTPObjectStore.Configuration(endpoint: url, token: TestServer.adminToken)
    c.retry = RetryPolicy(attempts: 2, baseDelay: .milliseconds(20))
    c.caFile = caFile
    let admin = HTTPObjectStore(configuration: c)
    let raw = RawHTTP(base: url, caFile: caFile)
    let test = TestServer(url: url, dataDirectory: dir, server: server, admin: admin, raw: raw, caFile: caFile)
    var failure: (any Error)?
    do {
        if try await admin.namespaces().isEmpty { _ = try await admin.createNamespace(try Namespace("test")) }
        try await body(test)
        // Whatever the test did, the tree it leaves is sound (both backends, every test).
        let problems = try await server.store.integrityProblems(limit: 20)
        #expect(problems.isEmpty, "the metadata store is not sound after the test: \(problems)")
    } catch {
        failure = error
    }
    try? await admin.shutdown()
    try? await raw.shutdown()
    await server.shutdown()
    _ = try? await task.value
    if let failure { throw failure }
}

/// A client made with `configuration`, shut down however `body` ends.
func withHTTPClient(_ configuration: HTTPObjectStore.Configuration, _ body: (HTTPObjectStore) async throws -> Void) async throws {
    let client = HTTPObjectStore(configuration: configuration)
    do {
        try await body(client)
    } catch {
        try? await client.shutdown()
        throw error
    }
    try? await client.shutdown()
}

/// Runs `body` against `count` servers that share one metadata store and one blob store (replicas,
/// each with its own data directory) when the backend allows it (PostgreSQL and S3); otherwise
/// against one server `count` times (its single process then plays every replica: replicas on
/// PostgreSQL with blobs in their own folders could not read each other's files).
/// Stops them all and removes their data, whatever happens.
func withReplicas(_ count: Int, configure: @escaping (inout ServerConfiguration) -> Void = { _ in }, _ body: ([TestServer]) async throws -> Void) async throws {
    guard TestBackend.isPostgres, TestBackend.isS3, count > 1 else {
        try await withServer(configure: configure) { s in try await body(Array(repeating: s, count: max(count, 1))) }
        return
    }
    let directories = (0..<count).map { _ in makeTempDirectory("replica") }
    defer { for d in directories { try? FileManager.default.removeItem(atPath: d) } }
    for d in directories.dropFirst() { TestBackend.share(directories[0], with: d) }
    func nest(_ i: Int, _ started: [TestServer]) async throws {
        if i == count { return try await body(started) }
        try await withServer(dataDirectory: directories[i], configure: configure) { s in try await nest(i + 1, started + [s]) }
    }
    try await nest(0, [])
}

/// Raw HTTP requests, where the protocol's details are what a test checks.
final class RawHTTP: Sendable {
    let base: String
    let client: HTTPClient

    init(base: String, caFile: String? = nil) {
        self.base = base
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile { tls.trustRoots = .file(caFile) }
        client = HTTPClient(
            eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: .init(tlsConfiguration: tls, redirectConfiguration: .disallow))
    }

    struct Answer: Sendable {
        var status: Int
        var headers: [(String, String)]
        var body: Data
        /// The redirect followed to get this answer (a download from a server whose files are in
        /// an object store: 307 to a presigned GET), if any: its status and headers.
        var redirect: (status: Int, headers: [(String, String)])?
        func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
        /// The file's ETag, as the server gave it: in the redirect when there was one (the store's
        /// own ETag is another).
        var fileETag: String? {
            redirect.flatMap { r in r.headers.first { $0.0.lowercased() == "etag" }?.1 } ?? header("ETag")
        }
        var text: String { String(decoding: body, as: UTF8.self) }
        var error: ErrorBody? { try? JSONDecoder().decode(ErrorBody.self, from: body) }
        func json<T: Decodable>(_ type: T.Type) throws -> T { try JSONDecoder().decode(T.self, from: body) }
    }

    /// `path` may be absolute (`http://…`) or relative to the server. A GET answered with a
    /// redirect to another host (the object store) is followed once, as browsers and `curl -L`
    /// do: the same headers, but no token (`follow: false` returns the redirect itself).
    func send(
        _ method: String, _ path: String, token: String? = TestServer.adminToken, headers: [(String, String)] = [], body: Data? = nil, chunked: Bool = false,
        follow: Bool = true
    ) async throws -> Answer {
        let first = try await sendOnce(method, path, token: token, headers: headers, body: body, chunked: chunked)
        guard follow, method == "GET", [301, 302, 303, 307, 308].contains(first.status), let location = first.header("Location") else { return first }
        var followed = try await sendOnce("GET", location, token: nil, headers: headers, body: nil, chunked: false)
        followed.redirect = (first.status, first.headers)
        return followed
    }

    func sendOnce(_ method: String, _ path: String, token: String?, headers: [(String, String)], body: Data?, chunked: Bool) async throws -> Answer {
        var request = HTTPClientRequest(url: path.hasPrefix("http") ? path : base + path)
        request.method = .init(rawValue: method)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        for (k, v) in headers { request.headers.add(name: k, value: v) }
        if let body {
            request.body = chunked ? .stream([ByteBuffer(data: body)].async, length: .unknown) : .bytes(ByteBuffer(data: body))
        }
        let response = try await client.execute(request, timeout: .seconds(60))
        let bytes = try await response.body.collect(upTo: 256 << 20)
        return Answer(status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) }, body: Data(bytes.readableBytesView))
    }

    func json(_ method: String, _ path: String, _ object: some Encodable, token: String? = TestServer.adminToken) async throws -> Answer {
        try await send(method, path, token: token, headers: [("Content-Type", "application/json")], body: WireJSON.encode(object))
    }

    func shutdown() async throws { try await client.shutdown() }
}

let testNamespace = try! Namespace("test")

func path(_ s: String) -> StoragePath { try! StoragePath(s) }

func randomBytes(_ n: Int, seed: UInt64 = 42) -> [UInt8] {
    var state = seed &* 6364136223846793005 &+ 1442695040888963407
    var out = [UInt8](repeating: 0, count: n)
    for i in 0..<n {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        out[i] = UInt8(truncatingIfNeeded: state >> 33)
    }
    return out
}

extension HTTPObjectStore {
    /// Uploads bytes and returns the record.
    func put(_ bytes: [UInt8], _ p: String, options: UploadOptions = UploadOptions()) async throws -> FileRecord {
        try await upload(.bytes(ByteBuffer(bytes: bytes)), size: Int64(bytes.count), to: testNamespace, path(p), options: options)
    }

    /// The whole content of a file, through a signed URL.
    func get(_ p: String) async throws -> [UInt8] {
        let url = try await signedURLs(testNamespace, [path(p)], expiry: 60)[0].signedUrl
        return Array(try await read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView)
    }
}

extension Array where Element: Sendable {
    /// The elements as an async sequence.
    var async: AsyncStream<Element> {
        AsyncStream { c in
            for e in self { c.yield(e) }
            c.finish()
        }
    }
}
