import ArgumentParser
import Foundation
import Logging
import StorageProtocol
import StorageServer
import SystemdNotify

@main
struct Stowd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stowd",
        abstract: "The StowFS storage service: namespaces of files over HTTP, with signed upload and download links.",
        discussion: """
            Metadata lives in SQLite and file contents in a local folder, both under --data-dir.
            With --database postgres://…, metadata lives in PostgreSQL instead, shared by every stowd
            that names it (with --object-store, those replicas can serve the same namespaces).
            With --object-store s3://BUCKET, file contents live in that bucket instead (uploads in
            progress stay under --data-dir until they complete).
            The first line of standard output is the URL the server listens on (useful with --port 0).
            With --tls-cert and --tls-key it serves https, and that URL and the links it makes are https.

            Tokens: --token-file FILE with one `token namespace-glob permission` per line
            (permission: read, write or admin), or STOWD_TOKEN for one admin token on every
            namespace. With neither, an admin token is generated once into <data-dir>/admin.token.
            """,
        version: StowVersion.string)

    @Option(help: "Folder for the database, the file contents and the signing secret.")
    var dataDir: String = Stowd.defaultDataDirectory()

    @Option(help: "Address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "Port to listen on; 0 picks a free one.")
    var port: Int = 8420

    @Option(help: "Token file: one `token namespace-glob permission` per line.")
    var tokenFile: String?

    @Option(help: "Base URL put into links, when clients reach the server under another name (e.g. behind a proxy).")
    var publicURL: String?

    @Option(help: "Serve https with this certificate (PEM: the server's certificate, then any intermediates). Needs --tls-key.")
    var tlsCert: String?

    @Option(help: "The private key of --tls-cert (PEM, unencrypted).")
    var tlsKey: String?

    @Option(help: "Largest upload accepted (e.g. 5G, 1T).")
    var maxUploadSize: String = "1T"

    @Option(help: "Seconds a storage (upload) link stays valid.")
    var uploadLinkLifetime: Int64 = 1800

    @Option(help: "Seconds between garbage-collection passes.")
    var gcInterval: Int = 60

    @Option(help: "Seconds a mount's lock session lives without renewal: the longest a dead mount's locks outlive it (2 to 3600).")
    var lockLease: Int64 = 20

    @Option(help: "A host that uploads/copy may fetch from (repeatable; none by default).")
    var copyAllowHost: [String] = []

    @Option(help: "Who may read /metrics: open (anyone who reaches the port), admin (an admin token), or off.")
    var metricsAccess: String = "open"

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    @Option(help: ArgumentHelp(
        """
        Keep metadata in PostgreSQL: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=…&schema=…&pool=N] \
        (default: $STOWD_DATABASE, else SQLite in --data-dir). The schema is made and migrated at start.
        """,
        valueName: "url"))
    var database: String?

    @Option(help: "The URL-signing secret (at least 32 bytes) from this file, instead of <data-dir>/secret.key or, with --database, the one kept in the database.")
    var signingKeyFile: String?

    @Option(help: ArgumentHelp(
        "Keep file contents in an S3-compatible bucket: s3://BUCKET[/PREFIX]. Credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.",
        valueName: "url"))
    var objectStore: String?

    @Option(help: "The S3 service's URL, for --object-store (default: AWS's endpoint for --s3-region). Addressing is path-style.")
    var s3Endpoint: String?

    @Option(help: "The S3 region, for --object-store.")
    var s3Region: String = "us-east-1"

    @Flag(help: "With --object-store, send downloads' bytes through stowd instead of redirecting clients to a presigned GET of the store (for clients that cannot reach the store or do not follow redirects).")
    var proxyDownloads = false

    @Flag(help: "Never answer a client on this machine with the path of a blob file to read itself (by default a stowd that listens on loopback only and keeps blobs in its data folder does, when asked).")
    var noLocalReads = false

    static func defaultDataDirectory() -> String {
        let env = ProcessInfo.processInfo.environment
        let base = env["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? ((env["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()) + "/.local/share")
        return base + "/stowfs/stowd"
    }

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be between 0 and 65535") }
        guard ByteSize.parse(maxUploadSize) != nil else { throw ValidationError("--max-upload-size: `\(maxUploadSize)` is not a size (try 5G)") }
        guard ServerConfiguration.MetricsAccess(rawValue: metricsAccess) != nil else {
            throw ValidationError("--metrics-access: `\(metricsAccess)` is not one of open, admin, off")
        }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("--log-level: `\(logLevel)` is not a level") }
        guard (tlsCert == nil) == (tlsKey == nil) else {
            throw ValidationError("--tls-cert and --tls-key go together: give both to serve https, or neither for http")
        }
        guard uploadLinkLifetime > 0, gcInterval > 0 else { throw ValidationError("--upload-link-lifetime and --gc-interval must be positive") }
        guard (2...3600).contains(lockLease) else { throw ValidationError("--lock-lease must be 2 to 3600 seconds") }
        _ = try s3Location()
        _ = try databaseLocation()
    }

    /// --database, else $STOWD_DATABASE; nil: SQLite.
    func databaseLocation() throws -> DatabaseLocation? {
        guard let url = database ?? ProcessInfo.processInfo.environment["STOWD_DATABASE"].flatMap({ $0.isEmpty ? nil : $0 }) else { return nil }
        do {
            return try DatabaseLocation(parsing: url)
        } catch {
            throw ValidationError("--database: \(error.description)")
        }
    }

    /// The bucket of --object-store, with its endpoint and the credentials from the environment.
    func s3Location() throws -> S3Location? {
        guard let objectStore else {
            guard s3Endpoint == nil else { throw ValidationError("--s3-endpoint goes with --object-store s3://BUCKET") }
            return nil
        }
        let env = ProcessInfo.processInfo.environment
        guard let key = env["AWS_ACCESS_KEY_ID"], !key.isEmpty, let secret = env["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty else {
            throw ValidationError("--object-store needs the bucket's credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        }
        let endpoint = s3Endpoint ?? "https://s3.\(s3Region).amazonaws.com"
        guard let url = URL(string: endpoint), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
            throw ValidationError("--s3-endpoint: `\(endpoint)` is not an http or https URL")
        }
        guard let location = S3Location.parse(objectStore, endpoint: endpoint, region: s3Region, accessKey: key, secretKey: secret) else {
            throw ValidationError("--object-store: `\(objectStore)` is not s3://BUCKET[/PREFIX] (a bucket name is 3 to 63 of a-z, 0-9, `.` and `-`)")
        }
        return location
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        JournalLogging.bootstrap(level: level)
        let logger = Logger(label: "stowd")
        let (tokens, source) = try TokenStore.resolve(tokenFile: tokenFile, environment: ProcessInfo.processInfo.environment, dataDirectory: dataDir)
        var config = ServerConfiguration(dataDirectory: dataDir, tokens: tokens)
        if tokenFile == nil, (ProcessInfo.processInfo.environment["STOWD_TOKEN"] ?? "").isEmpty {
            config.generatedAdminTokenFile = dataDir + "/admin.token"
        }
        config.host = host
        config.port = port
        config.publicURL = publicURL
        if let tlsCert, let tlsKey { config.tls = .init(certificateChain: tlsCert, privateKey: tlsKey) }
        config.maxUploadSize = ByteSize.parse(maxUploadSize) ?? config.maxUploadSize
        config.uploadLinkLifetime = uploadLinkLifetime
        config.gcInterval = .seconds(gcInterval)
        config.lockLease = lockLease
        config.copyAllowedHosts = copyAllowHost
        config.metricsAccess = ServerConfiguration.MetricsAccess(rawValue: metricsAccess) ?? .open
        config.objectStore = try s3Location()
        config.proxyDownloads = proxyDownloads
        config.offersLocalPaths = !noLocalReads
        config.database = try databaseLocation()
        config.signingKeyFile = signingKeyFile
        let server = try StowServer(configuration: config, logger: logger)
        logger.info("data in \(dataDir)\(config.database.map { ", metadata in \($0)" } ?? ""); \(source)")
        try await server.run(
            onListening: { url in
                FileHandle.standardOutput.write(Data((url + "\n").utf8))
                logger.info("listening on \(url)")
                // Type=notify: systemd says "started" now, not when the process began.
                SystemdNotify.ready(status: "listening on \(url)")
            },
            onShutdown: {
                logger.info("stopping: finishing the requests under way")
                SystemdNotify.stopping(status: "stopping: finishing the requests under way")
            })
        logger.info("stopped")
    }
}
