public import StorageClient
public import StorageProtocol

/// How a mount behaves. The defaults are what `stowfs mount` uses.
public struct MountConfiguration: Sendable {
    public enum Scope: Sendable, Equatable {
        /// One namespace is the root of the mount.
        case namespace(Namespace)
        /// The root lists the namespaces; mkdir/rmdir there create and delete them.
        case all
    }

    public var scope: Scope
    /// Where local copies, the block cache and the upload journal live.
    public var cacheDirectory: String
    /// Upper bound of the block cache on disk, in bytes.
    public var cacheSize: Int64 = 2 << 30
    /// Size of a cached block; reads from the server are multiples of it.
    public var blockSize: Int = 1 << 20
    /// How long lookups and attributes from the server are trusted (and the kernel may cache them).
    public var attributeTTL: Duration = .seconds(5)
    public var entryTTL: Duration = .seconds(5)
    /// How long a "no such file" answer is trusted.
    public var negativeTTL: Duration = .seconds(1)
    /// Uploads in flight at once.
    public var uploadParallelism: Int = 8
    /// Largest read-ahead window of a sequential reader, in blocks. 128 and GETs of 16 blocks
    /// read a 1 GiB file from S3 on the cluster in 2.78 s (median of 3) against 3.25 s for 32 and 8
    /// (an interleaved probe by hand; the S3 ceiling was 2.5–2.8 s).
    public var maxReadAheadBlocks: Int = 128
    /// Read files above `StowFileSystem.localReadMinimum` from the server's own blob files when
    /// the server is on this machine and offers their paths (`LocalBlobs`); else through HTTP.
    public var localReads: Bool = true
    /// Blocks fetched in one ranged GET at most.
    public var maxBlocksPerRequest: Int = 16
    /// Files above this go to the server in resumable chunks of this size.
    public var uploadChunkSize: Int64 = 64 << 20
    /// A file written from empty by appends starts streaming to the server once it is this large
    /// (0: never), in PATCHes of at least `streamChunkSize`; its last close then waits for the
    /// server instead of the disk (`ContentStream`).
    public var streamThreshold: Int64 = 16 << 20
    public var streamChunkSize: Int64 = 16 << 20
    /// How long a close waits for a stream to finish before it goes the usual way.
    public var streamFinishTimeout: Duration = .seconds(60)
    /// A rename or an exchange whose answer did not come: how long the server is asked whether it
    /// did it (the uploads at its paths wait meanwhile) before it is taken as not made.
    public var renameOutcomeWait: Duration = .seconds(30)
    /// How often a move the last mount left unfinished is asked about again while the server
    /// does not answer (`StowFileSystem.settleMovesLeft`).
    public var movesLeftRetry: Duration = .seconds(2)
    /// Defaults for inodes that carry no owner or mode.
    public var defaultUID: UInt32 = 0
    public var defaultGID: UInt32 = 0
    public var umask: UInt32 = 0o022
    public var readOnly: Bool = false
    /// How long signed read URLs are asked for.
    public var signedURLLifetime: Int = 3600
    /// How long `ln` of a file still owed, or reading its `user.stow.url`, waits for its upload
    /// before failing with EIO (the upload stays queued). fsync and sync are not bounded by it.
    public var uploadWaitLimit: Duration = .seconds(60)

    /// This mount's `Stow-Origin` (the store sends it with every request): its own changes in the
    /// feed are passed over. nil: every change is applied.
    public var origin: String?
    /// How long one read of the change feed waits for changes (a long poll).
    public var changeWait: Duration = .seconds(25)

    /// `--bwlimit`: the limiters the store's requests wait on, changed live by `stowfs set` (nil: none).
    public var bandwidth: BandwidthLimits?

    /// The server could not be reached at mount: start from the tree and blocks the last clean
    /// unmount kept in the cache folder (see `StowFileSystem+Snapshot`).
    public var startOffline = false

    public init(scope: Scope, cacheDirectory: String) {
        self.scope = scope
        self.cacheDirectory = cacheDirectory
    }
}
