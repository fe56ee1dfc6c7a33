/// Everything `stowd` can be told. The defaults suit the embedded, single-machine case.
public struct ServerConfiguration: Sendable {
    /// Where the database, the blobs and the signing secret live.
    public var dataDirectory: String
    public var host: String = "127.0.0.1"
    /// 0 picks a free port.
    public var port: Int = 0
    /// The base URL put into links (`upload.url`, `cdn`); default: from the request's Host header.
    public var publicURL: String?
    /// Serve https with this certificate and key; nil (the default, and the embedded server's): plain http.
    public var tls: TLSFiles?
    public var tokens: TokenStore
    /// Where the admin token was generated, when no token was configured (`<data-dir>/admin.token`).
    /// With `database`, every replica takes the first one's (kept in the database) and writes it here.
    public var generatedAdminTokenFile: String?
    /// Metadata in PostgreSQL (`--database postgres://USER[:PASS]@HOST:PORT/DB`), shared by every
    /// replica that names it; nil (the default): SQLite in the data directory.
    public var database: DatabaseLocation?
    /// The URL-signing secret from this file (at least 32 bytes) instead of the data directory's
    /// `secret.key` or, with `database`, the secret kept in the database.
    public var signingKeyFile: String?
    /// Blobs in an S3-compatible bucket (`--object-store s3://BUCKET[/PREFIX]`); nil (the
    /// default): files in the data directory.
    public var objectStore: S3Location?
    /// How old an object of a shared bucket must be before a start-up sweep may remove it as an
    /// orphan (another replica may be about to record one it just sent), in seconds.
    public var orphanSweepAge: Int64 = 3600
    /// How long a storage link (upload URL) stays valid, in seconds.
    public var uploadLinkLifetime: Int64 = 1800
    /// How long after its link expires an unfinished upload is kept before it is deleted, in seconds.
    public var abandonedUploadGrace: Int64 = 600
    /// How long a superseded or deleted blob is kept for reads that already started, in seconds.
    public var blobGrace: Int64 = 600
    /// With an object store: answer a download (`GET /cdn/…`) with the bytes themselves, through
    /// the server, instead of a redirect to a presigned GET of the store (the default), for
    /// clients that do not follow redirects or cannot reach the store.
    public var proxyDownloads = false
    /// How long the presigned GET a download is redirected to stays valid, in seconds: well within
    /// `blobGrace`, so a blob superseded just after the redirect is still there for its lifetime.
    public var directReadLifetime: Int { Int(max(1, min(300, blobGrace / 2))) }
    /// Whether a download may be answered with the path of the version's blob file, for a client
    /// on this machine that asks (`Stow-Local-Read: 1`) and may read the file itself: only while
    /// the server listens on a loopback address (every client that reaches it is on this machine),
    /// and not with `proxyDownloads`.
    public var localReads: Bool { offersLocalPaths && !proxyDownloads && Self.isLoopback(host) }
    /// `--no-local-reads`: never give a blob file's path (a loopback stowd behind a proxy that
    /// other machines reach, say).
    public var offersLocalPaths = true

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }
    /// How long the change feed keeps a change, in seconds: a reader further behind is reset.
    public var changeRetention: Int64 = 3600
    /// How often a reader of the change feed waiting for changes looks for ones another server
    /// made (its own it hears of at once).
    public var changePollInterval: Duration = .milliseconds(50)
    /// How long a mount's lock session lives without a renewal, in seconds: a mount that dies
    /// (or loses the network) holds its locks this long at most (`--lock-lease`).
    public var lockLease: Int64 = 20
    /// How often a lock request waiting for a lock looks whether another server released it (its
    /// own releases wake it at once).
    public var lockPollInterval: Duration = .milliseconds(10)
    /// How often the garbage collector runs.
    public var gcInterval: Duration = .seconds(60)
    /// The largest upload accepted, in bytes.
    public var maxUploadSize: Int64 = 1 << 40
    /// Files up to this size sent with a direct upload are kept inside the database, written in
    /// the transaction that records them (at most `ServerConfiguration.inlineCeiling`; 0: never).
    public var inlineLimit: Int64 = 64 << 10
    /// The largest inline blob there can be: readers look for inline bytes only for files up to this size.
    public static let inlineCeiling: Int64 = 1 << 20
    /// Serve StowFS's own upload routes (`upload/direct`, `upload/batch`). Off, the server answers
    /// them 404 as a stowd from before them did: for testing clients against older servers.
    public var uploadExtensions = true
    /// The largest JSON body accepted, in bytes.
    public var maxJSONBody: Int = 1 << 20
    /// The longest validity a signed download URL may be given, in seconds.
    public var maxSignedURLExpiry: Int = 7 * 24 * 3600
    /// Hosts that `uploads/copy` may fetch from (`host` or `host:port`). Empty: copy is refused.
    public var copyAllowedHosts: [String] = []
    /// Who may read `/metrics`: anyone who reaches the port (the default), only an admin token, or nobody.
    public var metricsAccess: MetricsAccess = .open

    /// The PEM files an https server presents (`stowd --tls-cert FILE --tls-key FILE`).
    public struct TLSFiles: Sendable, Equatable {
        /// The server's certificate, then the intermediate certificates that lead to its CA, if any.
        public var certificateChain: String
        /// The certificate's private key.
        public var privateKey: String

        public init(certificateChain: String, privateKey: String) {
            self.certificateChain = certificateChain
            self.privateKey = privateKey
        }
    }

    /// The scheme of the server's URL and of the links it makes: `https` with `tls`, else `http`.
    public var scheme: String { tls == nil ? "http" : "https" }

    /// Who may read `/metrics`.
    public enum MetricsAccess: String, Sendable, CaseIterable {
        /// Anyone who reaches the port (a scraper on the same host or network).
        case open
        /// A request with a token that is admin on every namespace (`Authorization: Bearer`).
        case admin
        /// Nobody: the route answers 404.
        case off
    }

    public init(dataDirectory: String, tokens: TokenStore) {
        self.dataDirectory = dataDirectory
        self.tokens = tokens
    }
}
