public import StorageProtocol

/// Everything `stowfs mount` was asked for.
public struct MountOptions: Sendable {
    public var namespace: Namespace?
    public var mountpoint: String
    public var endpoint: String?
    public var token: String?
    /// A PEM file of the certificate authorities an https endpoint's certificate must verify
    /// against; nil: the system's trust store. Not used by the embedded (plain http) server.
    public var caFile: String?
    public var cacheDirectory: String?
    public var cacheSize: Int64 = 2 << 30
    public var fuseOptions: [String] = []
    public var foreground = false
    public var createNamespace = false
    /// Refuse to mount when the server cannot be reached (instead of mounting from the cache).
    public var requireServer = false
    /// Read files from a local stowd's own blob files when it offers them (`--no-local-reads`: never).
    public var localReads = true
    public var uid: UInt32?
    public var gid: UInt32?
    public var umask: UInt32 = 0o022
    public var attributeTTL: Double = 5
    public var uploadParallelism = 8
    public var readOnly = false
    /// `--bwlimit`: bytes per second up and down, 0 for no limit.
    public var bandwidth: (up: Int64, down: Int64) = (0, 0)
    /// `--metrics HOST:PORT`: where to serve the mount's Prometheus metrics (nil: nowhere).
    public var metricsAddress: String?
    /// Where the embedded stowd keeps its data (no `--endpoint`).
    public var embeddedDataDirectory: String?

    public init(namespace: Namespace?, mountpoint: String) {
        self.namespace = namespace
        self.mountpoint = mountpoint
    }
}

/// A problem a user can fix, said so that they can.
public struct MountProblem: Error, CustomStringConvertible, Sendable {
    public var problem: String
    public var fix: String
    /// The server could not be reached (it did not refuse): a mount may then start from its cache.
    public var unreachable = false
    public init(_ problem: String, fix: String, unreachable: Bool = false) {
        self.problem = problem
        self.fix = fix
        self.unreachable = unreachable
    }
    public var description: String { "\(problem)\n  → \(fix)" }
}
