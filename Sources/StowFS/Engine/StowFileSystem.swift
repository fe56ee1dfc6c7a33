import CStowSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif
public import Logging
public import StorageClient
import StorageProtocol
import Synchronization

/// The filesystem engine: FUSE-free and `async`, driven by FuseKit or directly by tests.
///
/// ## Model
/// Every inode the kernel knows is an `InodeEntry` in one table, keyed by the FUSE inode number:
/// the server's inode number for stored files (stable across remounts), a local number
/// (≥ `InodeNumber.firstLocal`) for files created here and not yet stored. An entry knows its
/// parent and name (its primary name), so its location is found by walking up to the root.
///
/// A file is either **remote** (its bytes are on the server; reads go through signed URLs into the
/// block cache) or has a **local copy** (`LocalContent`: a cache file that writes go to). A local copy
/// that changed is handed to the `UploadQueue` on close, as an immutable snapshot: later writes go
/// to a copy. When the queue reports it stored, the inode becomes remote with the new ETag and the
/// local copy is dropped.
///
/// Metadata changes are written through to the server (mkdir, rmdir, unlink, rename, chmod …),
/// except for files whose upload is still owed: those changes travel with the upload, and a
/// rename of such a file re-targets its upload instead of touching the server.
///
/// ## Caches
/// Attributes and directory listings from the server are trusted for `attributeTTL`; "no such
/// file" for `negativeTTL`. The mount's own changes update them at once. Local state (files with a
/// local copy or an upload owed) never expires.
///
/// ## Concurrency
/// All state is in one `Mutex<State>`, held only for short, synchronous steps, never across an
/// `await`. LOCK ORDERING: `state` is the only lock here; `BlockCache`, `SignedURLCache` and
/// `ProgressBoard` have their own, are never taken while `state` is held by code that then takes
/// `state` again, and the `UploadQueue` actor is never called with `state` held.
public final class StowFileSystem: Sendable {
    public let configuration: MountConfiguration
    let store: any ObjectStore
    let queue: UploadQueue
    let blocks: BlockCache
    /// Cached contents of files removed here, dropped from `blocks` off the caller's thread
    /// (`dropCachedSoon`): a drop can free a slot of the pack or delete a block file, and an
    /// unlink runs on the FUSE thread under the state lock.
    let cacheDrops = Mutex<(etags: [String], scheduled: Bool)>(([], false))
    let urls = SignedURLCache()
    let localBlobs = LocalBlobs()
    let fetching = InflightBlocks()
    let inodeLocks = InodeLocks()
    let flushLocks = FlushLocks()
    /// Tests: runs once a move's names have changed here, before it looks for the records it
    /// carries (what happens in that moment, made to happen).
    let afterMovedHere = Mutex<(@Sendable () async -> Void)?>(nil)
    /// Tests: runs once the server did a folder's move or an exchange, before the names change
    /// here (a crash in that moment, made to happen).
    let afterServerMove = Mutex<(@Sendable () async -> Void)?>(nil)
    /// Moves the last mount left unfinished that the server could not yet be asked about
    /// (`settleMoves`): what they carry waits meanwhile.
    let movesLeft = Mutex<[UploadJournal.Move]>([])
    let settlingMoves = Mutex<Task<Void, Never>?>(nil)
    /// Uploads recovered from the journal at the paths of `movesLeft`, not shown until those are settled.
    let recoveredHeld = Mutex<Set<Int64>>([])
    /// Folder moves and exchanges, one at a time (`rename`); its one key is 0.
    let moveTurn = InodeLocks()
    /// Tests: runs once a release has taken a file's content, before its record is written.
    let afterTake = Mutex<(@Sendable () async -> Void)?>(nil)
    /// Empty local copies for the next files written here: made ahead, or emptied after upload.
    let cacheFiles: CacheFilePool
    let streamSupport = StreamSupport()
    /// `stowfs pause`: read from the FUSE threads (no stream starts while it is set).
    let uploadsPaused = Atomic<Bool>(false)
    /// The subscription to the namespace's change feed (`StowFileSystem+Changes`).
    let feed = FeedState()
    /// The mounted namespace's `created_on` (nil for a mount of every namespace): kept with the
    /// tree at unmount, so that the next mount trusts its listings only for the same namespace.
    let namespaceCreatedOn: String?
    /// Locks shared with other mounts (`StowFileSystem+Locks`).
    let locks: LockState
    /// Until when exclusive creates are decided here without asking (the server did not answer one).
    let exclusiveOffline = Mutex<ContinuousClock.Instant?>(nil)
    /// Cache files open at once (`CacheFile.openCount`) before a create waits for uploads to
    /// store some: half the process's descriptor limit, which `init` raises to its hard limit.
    /// Each file written and not stored yet holds its copy open, and a mount that ran out of
    /// descriptors answered EIO to every create (a folder of 100,000 files, written faster than
    /// they were stored).
    public let cacheFileLimit: Int
    /// When a create last logged that it waits for descriptors.
    let descriptorWarning = Mutex<ContinuousClock.Instant?>(nil)
    let logger: Logger
    let state: Mutex<State>
    let filesDirectory: String

    /// The server's identity of an inode here. (Its record's `_id` is `FileRecord.id(inode:)`.)
    struct RemoteInfo: Sendable, Equatable {
        var ino: UInt64
        var etag: String

        /// A delete of this file only (its inode, and its ETag when known), as the journal keeps it.
        var deletion: UploadJournal.Deletion { UploadJournal.Deletion(remoteIno: ino, ifMatch: etag.isEmpty ? nil : etag) }
    }

    /// xattr-visible metadata of a file. The content type is kept inline (most files have one,
    /// and a short one needs no allocation); the rest, which most files do not have, out of line:
    /// 24 bytes in each inode record instead of 56.
    struct FileMeta: Sendable, Equatable {
        var contentType: String?
        private var more = OutOfLine<More>(nil)

        private struct More: Sendable, Equatable {
            var tags: [String] = []
            var metadata: [String: String] = [:]
            var isPublic = false
            var target: String?
        }

        init(tags: [String] = [], metadata: [String: String] = [:], contentType: String? = nil, isPublic: Bool = false, target: String? = nil) {
            self.contentType = contentType
            change { $0 = More(tags: tags, metadata: metadata, isPublic: isPublic, target: target) }
        }

        var tags: [String] {
            get { more.value?.tags ?? [] }
            set { change { $0.tags = newValue } }
        }
        var metadata: [String: String] {
            get { more.value?.metadata ?? [:] }
            set { change { $0.metadata = newValue } }
        }
        var isPublic: Bool {
            get { more.value?.isPublic ?? false }
            set { change { $0.isPublic = newValue } }
        }
        var target: String? {
            get { more.value?.target }
            set { change { $0.target = newValue } }
        }

        /// Changes the out-of-line part; one that is back to nothing takes no box.
        private mutating func change(_ body: (inout More) -> Void) {
            var m = more.value ?? More()
            body(&m)
            more.value = m == More() ? nil : m
        }

        static func == (a: FileMeta, b: FileMeta) -> Bool {
            a.contentType == b.contentType && a.more.value == b.more.value
        }
    }

    struct LocalContent: Sendable {
        var file: CacheFile
        var size: Int64
        /// Written since the last snapshot went to the queue.
        var dirty: Bool
        var writers: Int
        /// Handed to the queue: writes must go to a copy.
        var frozen: Bool
        /// The journal record holding this content while the file is open (durable after flush).
        var heldUpload: Int64?
        /// Counts changes to the bytes (writes, truncates).
        var changes: UInt64 = 0
        /// `changes` as it was when a flush last made the bytes durable (an fsync, or the bytes in the
        /// journal record) and recorded them:
        /// while the two are equal, the file and its held record are durable as they are.
        var durableAt: UInt64?
        /// Written from empty by appends only, since it was created or opened with O_TRUNC: it may stream.
        var appendOnly = false
        /// The upload following the appends while the file is written (`ContentStream`).
        var stream: ContentStream?
        /// The server got this content by a stream: once closed, the copy is not needed.
        var streamed = false
        /// The stored file this content's upload is to replace at the file's path: a file written
        /// here and renamed over a stored one (`mv tmp P`) leaves the server's `P` in place until its
        /// upload lands there. If it never does (the file is removed, or renamed on, first), that
        /// stored file is deleted instead (else `mv tmp P; rm P` brought the old `P` back).
        var replaced: RemoteInfo?

        /// The bytes changed: dirty, and no longer known durable.
        mutating func changed() {
            dirty = true
            changes &+= 1
        }
    }

    struct DirectoryState: Sendable {
        /// Keyed by bytes (`FileName`): names that are canonically equivalent are still two files.
        var children: [FileName: InodeNumber] = [:]
        var complete = false
        var validUntil: ContinuousClock.Instant = .now
        /// The listing was taken (or the folder made here) with nothing since that expired it: while
        /// the change feed is followed, it stands past `validUntil` — another client's change in
        /// the folder comes through the feed and expires it (`expire`).
        var heldByFeed = false
        /// When the change feed last said another client changed the folder: a listing asked for
        /// before then may predate the change, and is not trusted.
        var expiredAt: ContinuousClock.Instant?
        var negative: [FileName: ContinuousClock.Instant] = [:]
        /// Made by this mount, which holds its `names` lease, and no recall nor change of another
        /// client seen in it since (through the change feed): exclusive creates in it are decided
        /// here (see `createExclusiveHere`).
        var madeHere = false
        /// A lookup found more names than it lists whole (`lookupListingCap`): until then,
        /// lookups of names not known ask for that one name instead of listing it again.
        var tooLargeToListUntil: ContinuousClock.Instant?
        /// When a lookup of a name not known last asked for that name alone (see `lookup`).
        var loneLookupAt: ContinuousClock.Instant?
        /// How many did so, each within `listAfterLoneLookupWithin` of the one before.
        var loneLookups: UInt8 = 0
        /// A whole listing was taken here once (a stale one is listed again on a lookup miss).
        var everListed = false

        /// Whether the listing answers without the server: complete, and within the TTL or held by
        /// a followed feed (`feedHolds`, read by the caller outside the state lock).
        func stands(now: ContinuousClock.Instant, feedHolds: Bool) -> Bool {
            complete && (validUntil > now || (heldByFeed && feedHolds))
        }

        /// `name` is `ino` here (and not missing): one access for both, since each access to a
        /// folder's state through the inode table moves it out of its box and back.
        mutating func place(_ name: FileName, _ ino: InodeNumber) {
            children[name] = ino
            negative[name] = nil
        }

        /// The listing is no longer trusted (the feed named the folder, or a create found a name
        /// it did not have).
        mutating func expire() {
            validUntil = .now
            heldByFeed = false
        }
    }

    struct InodeEntry: Sendable {
        var ino: InodeNumber
        var parent: InodeNumber
        var name: String
        var attributes: FileAttributes
        /// Until when the attributes are trusted without asking the server.
        var validUntil: ContinuousClock.Instant {
            get { _validUntil.instant }
            set { _validUntil = Moment(newValue) }
        }
        private var _validUntil: Moment
        var remote: RemoteInfo?
        var meta = FileMeta()
        var lookups: UInt64 = 0
        var openHandles: Int {
            get { Int(_openHandles) }
            set { _openHandles = Int32(clamping: newValue) }
        }
        /// Snapshots on their way into the queue (their upload id not known yet).
        var submitting: Int {
            get { Int(_submitting) }
            set { _submitting = Int32(clamping: newValue) }
        }
        private var _openHandles: Int32 = 0
        private var _submitting: Int32 = 0
        /// The local copy of a file written here (out of line: most records have none).
        var local: LocalContent? {
            get { _local.value }
            set { _local.value = newValue }
            _modify { yield &_local.value }
        }
        private var _local = OutOfLine<LocalContent>(nil)
        /// The newest upload owed for this inode, and older ones still running.
        var upload: Int64?
        var unlinked = false
        var olderUploads: Set<Int64> = []
        /// A folder's listing state (out of line: only folders have one).
        var directory: DirectoryState? {
            get { _directory.value }
            set { _directory.value = newValue }
            _modify { yield &_directory.value }
        }
        private var _directory: OutOfLine<DirectoryState>
        /// The ETag whose bytes the kernel's page cache may hold.
        var pageCacheETag: String?
        /// When this mount last changed the name or content (a listing older than that does not know it).
        var changedAt: ContinuousClock.Instant? {
            get { _changedAt == Moment.none ? nil : _changedAt.instant }
            set { _changedAt = newValue.map(Moment.init) ?? .none }
        }
        private var _changedAt = Moment.none

        init(
            ino: InodeNumber, parent: InodeNumber, name: String, attributes: FileAttributes, validUntil: ContinuousClock.Instant,
            remote: RemoteInfo? = nil, directory: DirectoryState? = nil
        ) {
            self.ino = ino
            self.parent = parent
            self.name = name
            self.attributes = attributes
            _validUntil = Moment(validUntil)
            self.remote = remote
            _directory = OutOfLine(directory)
        }

        var kind: NodeKind { attributes.kind }
        var hasLocalState: Bool { local != nil || upload != nil || !olderUploads.isEmpty || submitting > 0 }
        var owedUploads: [Int64] { (upload.map { [$0] } ?? []) + olderUploads.sorted() }
    }

    struct Handle: Sendable {
        var ino: InodeNumber
        var writable: Bool
        var etag: String?
        var readAhead: ReadAhead
        var listing: [ListedName]?
    }

    struct State: Sendable {
        var inodes = InodeTable()
        var byRemote: [UInt64: InodeNumber] = [:]
        var handles: [UInt64: Handle] = [:]
        var nextHandle: UInt64 = 1
        var nextLocal: InodeNumber = .firstLocal
        /// Which inode each owed upload belongs to.
        var uploadOwner: [Int64: InodeNumber] = [:]
        /// Contents taken for an upload and not yet recorded (`take` to `recorded` or `untake`),
        /// by a number of their own, with the path each read: a folder's rename or an exchange
        /// waits for those under it that read the old path (`markMove`, `carried`).
        var takes: [Int64: Location] = [:]
        var nextTake: Int64 = 0
        /// Takes moves wait for (`markMove`: how many moves), and the records they became (`recorded`).
        var watchedTakes: [Int64: Int] = [:]
        var takeRecords: [Int64: Int64] = [:]
        /// Folders being renamed and files being exchanged now (`beginMove`, once for each): no stream
        /// at or under them starts or completes.
        var moving: [Location] = []
        /// The paths of file renames under way outside the move turn, from and to (`renameNow`):
        /// a folder's move over them waits for them (`beginMove`).
        var fileRenames: [Location] = []
        /// Streams completing now (`finishStream`), by inode, with their paths.
        var finishing: [InodeNumber: Location] = [:]
        /// Server folders the change feed named (another client changed a name in them, or asked
        /// for their names lease) before this mount knew them, and when: a folder this mount makes
        /// is known only once its `makeFolder` answers, and a change in it meanwhile would be lost
        /// — then the folder is not taken as empty (`mkdir`). Kept a minute.
        var namedBeforeKnown: [UInt64: ContinuousClock.Instant] = [:]
        /// Server inodes the change feed named (their content or attributes changed elsewhere),
        /// known here or not, and when: a record read by a request sent before then (a listing on
        /// its way when the change came) is not trusted (`upsert`). Pruned as reads end.
        var feedNamed: [UInt64: ContinuousClock.Instant] = [:]
        /// `feedNamed` is pruned when it passes this size (then twice what was left, at least 4,096):
        /// a read that stays in flight keeps what is newer, and each batch would filter it all again.
        var feedNamedPruneAt = 4096
        /// Uploads recovered from the journal that no inode has claimed yet.
        var recovered: [Location: UploadJournal.Record] = [:]
        /// Deletes owed to the server (unlinks queued), by the server inode they delete, and those
        /// done while a read of the server began before them is still on its way: a listing or
        /// lookup that began before the server did one must not bring the file back
        /// (`OwedDelete.hides`).
        var owedDeletes: [UInt64: OwedDelete] = [:]
        /// How many of `owedDeletes` the server has not done yet.
        var deletesPending = 0
        /// The done ones, in the order they were done (from `doneDeletesHead` on): dropped from
        /// `owedDeletes` once no read in flight began before them (`pruneDoneDeletes`).
        var doneDeletes: [(remoteIno: UInt64, id: Int64, at: ContinuousClock.Instant)] = []
        var doneDeletesHead = 0
        /// Reads of the server's records on their way (lookups, getattrs, listings), by token:
        /// when each began — its `observedAt` (`beginRead`).
        var readsInFlight: [UInt64: ContinuousClock.Instant] = [:]
        var lastRead: UInt64 = 0
        /// Namespaces (the root listing of a `--all` mount), cached.
        var namespaces: [String: UInt64]?
        var namespacesValidUntil: ContinuousClock.Instant = .now
    }

    /// Creates the engine over a store and a cache folder; recovers uploads left in its journal.
    public init(configuration: MountConfiguration, store: any ObjectStore, logger: Logger = Logger(label: "stowfs")) async throws {
        self.configuration = configuration
        self.store = store
        self.logger = logger
        locks = LockState(sessionID: configuration.origin)
        let descriptors = CStowSystem_raise_file_limit()
        cacheFileLimit = descriptors > 0 ? max(64, Int(min(descriptors, 1 << 30)) / 2) : 512
        let dir = configuration.cacheDirectory
        filesDirectory = dir + "/files"
        cacheFiles = CacheFilePool(directory: filesDirectory)
        try FileManager.default.createDirectory(atPath: filesDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let journal = try UploadJournal(path: dir + "/journal.sqlite")
        queue = try UploadQueue(
            journal: journal, store: store, parallelism: configuration.uploadParallelism, chunkSize: configuration.uploadChunkSize, logger: logger)
        blocks = try BlockCache(directory: dir + "/blocks", blockSize: configuration.blockSize, capacity: configuration.cacheSize)

        var s = State()
        let now = TimeSpec.now
        let rootRemote: UInt64?
        // Offline: the tree the last clean unmount kept stands in for the server's.
        let offlineTree = configuration.startOffline ? Self.readKept(configuration) : nil
        if configuration.startOffline && offlineTree == nil {
            throw StorageError(.unavailable, "the server is unreachable, and this cache folder keeps no listing from a clean unmount to mount from")
        }
        var createdOn: String?
        switch configuration.scope {
        case .namespace(let ns):
            if let offlineTree {
                rootRemote = offlineTree.header.rootRemote
                createdOn = offlineTree.header.namespaceCreatedOn
            } else {
                let record = try await Self.namespaceRecord(store, ns)
                rootRemote = record.rootInode
                createdOn = record.createdOn
            }
        case .all:
            rootRemote = nil
        }
        namespaceCreatedOn = createdOn
        // Online: the tree kept is trusted where the change feed shows nothing changed since.
        var kept: (tree: KeptTree, changes: [ChangeRecord], cursor: String)?
        if !configuration.startOffline, case .namespace(let ns) = configuration.scope, let tree = Self.readKept(configuration),
            let since = tree.header.feedCursor, tree.header.rootRemote == rootRemote, tree.header.namespaceCreatedOn == createdOn
        {
            if let (changes, cursor) = await Self.catchUpKept(store, ns, since: since, logger: logger) { kept = (tree, changes, cursor) }
        }
        let rootAttributes = FileAttributes(
            ino: .root, kind: .directory, mode: 0o777 & ~configuration.umask, uid: configuration.defaultUID, gid: configuration.defaultGID,
            size: 0, nlink: 2, atime: now, mtime: now, ctime: now)
        s.inodes[.root] = InodeEntry(
            ino: .root, parent: 0, name: "", attributes: rootAttributes, validUntil: .now,
            remote: rootRemote.map { RemoteInfo(ino: $0, etag: "") }, directory: DirectoryState())
        if let rootRemote { s.byRemote[rootRemote] = .root }
        if let offlineTree, !Self.restoreKept(offlineTree, into: &s) {
            throw StorageError(.unavailable, "the server is unreachable, and the listing this cache folder keeps from the last clean unmount cannot be read")
        }
        if let tree = kept?.tree, !Self.restoreKept(tree, into: &s, trustedFor: configuration.attributeTTL) {
            logger.info("the listings kept at the last unmount are not used: the tree cannot be read")
            kept = nil
        }
        // What reading the tree took and let go of (a few bytes a name, in whichever threads'
        // heaps) goes back to the system: a mount of 100,000 names kept 26 MB of it in one of
        // two starts.
        if offlineTree != nil || kept != nil { _ = CStowSystem_release_free_memory() }
        // Moves a crash left unfinished go first: what they carry goes where the server has it.
        // (Offline, no question is asked: they wait for the server with what they carry.)
        let left = await Self.settleMoves(queue, store, ask: offlineTree == nil, logger: logger)
        let recovered = await queue.recovered
        // Not shown at a path a move left unfinished may carry it from (nor superseded by a file
        // written there meanwhile): shown once the move is settled (`settleMovesLeft`).
        let heldPaths = left.flatMap { [$0.from, $0.to] }
        var hidden: Set<Int64> = []
        for r in recovered {
            if heldPaths.contains(where: { r.location.isWithin($0) }) {
                hidden.insert(r.id)
            } else {
                s.recovered[r.location] = r
            }
        }
        // A name owed to the server shows its upload, not a kept listing's: its folder is listed
        // again (a folder with an upload owed is not kept whole, so this is a safeguard).
        if kept != nil { for r in recovered { Self.untrustKept(&s, r.location.path) } }
        let deletions = await queue.deletions
        for r in deletions { if let d = r.deletion { Self.noteDeleteOwed(&s, id: r.id, d) } }
        state = Mutex(s)
        movesLeft.withLock { $0 = left }
        recoveredHeld.withLock { $0 = hidden }
        if let kept {
            // What changed since the unmount goes as the feed's changes do; the follower goes on from
            // there. (A recall is of a names lease this mount does not hold.)
            _ = apply(kept.changes.filter { $0.kind != .recall }, counted: false)
            // A folder those changes named is listed again, and is not taken as whole meanwhile
            // (the offline fallbacks answer from a whole listing while the server is away).
            state.withLock { s in
                for ino in Array(s.inodes.keys) where s.inodes[ino]?.directory.map({ $0.complete && !$0.heldByFeed }) == true {
                    s.inodes[ino]?.directory?.complete = false
                }
            }
            feed.value.withLock { v in
                v.status.cursor = kept.cursor
                v.status.connected = true
                v.lastAnswer = .now
            }
            let held = state.withLock { s in s.inodes.values.count { $0.directory?.heldByFeed == true } }
            logger.info("the listings kept at the last unmount: \(held) folder(s) current (\(kept.changes.count) change(s) since, from the change feed)")
        }
        if !recovered.isEmpty { logger.info("resuming \(recovered.count) upload(s) left from the last mount") }
        if !deletions.isEmpty { logger.info("resuming \(deletions.count) delete(s) left from the last mount") }
        await queue.setOnFinished { [weak self] finished in self?.uploadFinished(finished) }
        await queue.setOnDeleted { [weak self] done in self?.deletesDone(done) }
        // Files the journal no longer names: the last mount's spares, or copies left by a crash
        // between an upload's end and its cleanup. Emptied and kept for the next files. Compared
        // by name (every copy is in `files/`): the journal keeps each copy's path as the last
        // mount spelled the cache folder (a trailing slash, a symlink), and an owed copy taken
        // for a spare would be emptied under its upload.
        let owed = Set(recovered.map { ($0.cacheFile as NSString).lastPathComponent })
        cacheFiles.adopt(
            ((try? FileManager.default.contentsOfDirectory(atPath: filesDirectory)) ?? []).filter { !owed.contains($0) }.map { filesDirectory + "/" + $0 })
    }

    /// Starts the background uploads.
    public func start() async {
        await queue.start()
        if !movesLeft.withLock({ $0.isEmpty }) {
            settlingMoves.withLock { $0 = Task { [weak self] in await self?.settleMovesLeft() } }
        }
    }

    static func namespaceRecord(_ store: any ObjectStore, _ ns: Namespace) async throws -> NamespaceRecord {
        guard let info = try await store.namespaces().first(where: { $0.name == ns.name }) else {
            throw StorageError(.notFound, "namespace `\(ns)` does not exist on the server", status: 404)
        }
        return info
    }

    // MARK: - Locations and attributes (call with the state held)

    /// The location of an inode, by walking its parents.
    func location(_ s: State, _ ino: InodeNumber) throws(FSError) -> Location {
        var names: [String] = []
        var current = ino
        while current != .root {
            guard let e = s.inodes[current], !e.unlinked || current == ino else { throw FSError.notFound }
            names.append(e.name)
            current = e.parent
            if names.count > 4096 { throw FSError.io("inode \(ino) has no path to the root") }
        }
        names.reverse()
        return try location(names: names)
    }

    /// The location of a path given as its names from the mount's root.
    func location(names: [String]) throws(FSError) -> Location {
        switch configuration.scope {
        case .namespace(let ns):
            return Location(namespace: ns, path: try Self.path(names))
        case .all:
            guard let first = names.first else { return Location(namespace: nil, path: .root) }
            guard let ns = try? Namespace(first) else { throw FSError.notFound }
            return Location(namespace: ns, path: try Self.path(Array(names.dropFirst())))
        }
    }

    /// The location of a path inside the mount (`a/b.txt`, as the control socket's commands name
    /// files: relative to the mountpoint), without looking anything up.
    func location(ofMountPath path: String) throws(FSError) -> Location {
        try location(names: path.split(separator: "/").map(String.init).filter { $0 != "." })
    }

    static func path(_ names: [String]) throws(FSError) -> StoragePath {
        do {
            return try StoragePath(segments: names)
        } catch .pathTooLong {
            throw FSError.nameTooLong
        } catch .segmentTooLong {
            throw FSError.nameTooLong
        } catch {
            throw FSError.invalidArgument
        }
    }

    /// Checks a name the kernel gave us.
    static func validate(name: String) throws(FSError) {
        do {
            try StoragePath.validate(segment: name)
        } catch .segmentTooLong {
            throw FSError.nameTooLong
        } catch {
            throw FSError.invalidArgument
        }
    }

    func child(_ parent: Location, _ name: String) throws(FSError) -> Location {
        if parent.namespace == nil {
            guard let ns = try? Namespace(name) else { throw FSError.notFound }
            return Location(namespace: ns, path: .root)
        }
        do {
            return Location(namespace: parent.namespace, path: try parent.path.appending(name))
        } catch .pathTooLong {
            throw FSError.nameTooLong
        } catch .segmentTooLong {
            throw FSError.nameTooLong
        } catch {
            throw FSError.invalidArgument
        }
    }

    /// `validUntil` of an inode expired on purpose (the feed named it, or the mount needs the
    /// server's answer): unlike one whose TTL ran out, never trusted from a standing listing.
    /// (As a record keeps it, so that the two compare equal.)
    /// How far back a change the feed named counts against a record whose request's start is not known.
    static let feedNamedWindow: Duration = .seconds(60)
    static let forcedStale: ContinuousClock.Instant = Moment(.now - .seconds(365 * 86_400)).instant

    func defaultMode(_ kind: NodeKind) -> UInt32 {
        switch kind {
        case .directory: 0o777 & ~configuration.umask
        case .symlink: 0o777
        default: 0o666 & ~configuration.umask
        }
    }

    func attributes(_ r: some EntryRecord, ino: InodeNumber) -> FileAttributes {
        FileAttributes(
            ino: ino, kind: r.kind, mode: r.mode ?? defaultMode(r.kind), uid: r.uid ?? configuration.defaultUID, gid: r.gid ?? configuration.defaultGID,
            size: UInt64(max(0, r.size)), nlink: max(1, r.nlink), atime: TimeSpec(nanoseconds: r.atimeNs), mtime: TimeSpec(nanoseconds: r.mtimeNs),
            ctime: TimeSpec(nanoseconds: r.ctimeNs), rdev: r.rdev ?? 0)
    }

    func entry(_ e: InodeEntry) -> Entry {
        let local = e.hasLocalState
        return Entry(
            attributes: e.attributes, attributeTTL: local ? configuration.attributeTTL : configuration.attributeTTL,
            entryTTL: configuration.entryTTL)
    }

    /// Records what the server said of `name` in `parent`; returns the inode.
    @discardableResult
    /// - Parameter observedAt: when the request that brought `r` was sent. A record observed before
    ///   this mount last changed the inode is older than what the mount shows: only its identity is taken.
    func upsert(_ s: inout State, _ r: some EntryRecord, parent: InodeNumber, name: String, observedAt: ContinuousClock.Instant? = nil) -> InodeNumber {
        // A record read by a request sent before the feed named its inode may be from before the
        // change: taken, but not trusted (the next lookup or stat asks again). Else a listing on
        // its way when another client rewrote a file put the old size back, and a listing the
        // feed holds answered with it for as long as it stood (and a kept tree kept it).
        // Without `observedAt` (the answer to a change of this mount's: chmod, truncate, a
        // folder's record), a change named within `feedNamedWindow` counts: the request may have
        // been sent before it.
        let namedSince = s.feedNamed[r.inode].map { named in named >= (observedAt ?? ContinuousClock.now - Self.feedNamedWindow) } ?? false
        let validUntil = namedSince ? Self.forcedStale : ContinuousClock.now + configuration.attributeTTL
        if let ino = s.byRemote[r.inode], var e = s.inodes[ino], e.kind == r.kind,
            let observedAt, let changed = e.changedAt, changed >= observedAt
        {
            e.remote = RemoteInfo(ino: r.inode, etag: e.remote?.etag ?? r.etag)
            s.inodes[ino] = e
            // The name too only if it is still the inode's name here: one this mount renamed or
            // removed after the record was observed (a listing on its way while an rsync renamed
            // its temp file) must not come back.
            if !e.unlinked && e.parent == parent && e.name.isSameName(name) {
                s.inodes[parent]?.directory?.place(FileName(name), ino)
            }
            return ino
        }
        if let ino = s.byRemote[r.inode], var e = s.inodes[ino], e.kind == r.kind {
            if e.local == nil && e.upload == nil {
                e.attributes = attributes(r, ino: ino)
            } else {
                // The local copy is newer than the server: keep its size and times.
                let local = e.attributes
                e.attributes = attributes(r, ino: ino)
                e.attributes.size = local.size
                e.attributes.mtime = local.mtime
                e.attributes.ctime = local.ctime
                e.attributes.mode = local.mode
                e.attributes.uid = local.uid
                e.attributes.gid = local.gid
            }
            if e.remote?.etag != r.etag, let old = e.remote?.etag, e.local == nil { blocks.drop(etag: old) }
            e.remote = RemoteInfo(ino: r.inode, etag: r.etag)
            if e.local == nil && e.upload == nil {
                e.meta = FileMeta(tags: r.tags, metadata: r.metadata, contentType: r.contentType, isPublic: r.isPublic, target: r.target)
            }
            e.validUntil = validUntil
            if s.inodes[e.parent]?.directory?.children[e.name] != ino {
                // Its old name is gone (renamed elsewhere, or a hard link's other name): this one is primary now.
                e.parent = parent
                e.name = name
                e.unlinked = false
            }
            if e.kind == .directory && e.directory == nil { e.directory = DirectoryState() }
            s.inodes[ino] = e
            s.inodes[parent]?.directory?.place(FileName(name), ino)
            return ino
        }
        if let existing = s.inodes[parent]?.directory?.children[name], var e = s.inodes[existing], e.kind == r.kind, !e.unlinked,
            e.remote == nil || e.hasLocalState
        {
            // The server's record of a file this mount made (or is changing): the same inode. Its local
            // state (size, times, owner) is newer than the record; only the server's identity is taken.
            if let old = e.remote, old.ino != r.inode, s.byRemote[old.ino] == existing { s.byRemote[old.ino] = nil }
            e.remote = RemoteInfo(ino: r.inode, etag: r.etag)
            e.validUntil = validUntil
            s.inodes[existing] = e
            s.byRemote[r.inode] = existing
            return existing
        }
        let ino = Self.inodeNumber(forRemote: r.inode, &s)
        var e = InodeEntry(
            ino: ino, parent: parent, name: name, attributes: attributes(r, ino: ino), validUntil: validUntil,
            remote: RemoteInfo(ino: r.inode, etag: r.etag))
        e.meta = FileMeta(tags: r.tags, metadata: r.metadata, contentType: r.contentType, isPublic: r.isPublic, target: r.target)
        if r.kind == .directory { e.directory = DirectoryState() }
        if let old = s.inodes[parent]?.directory?.children[name], old != ino, var o = s.inodes[old], !o.hasLocalState {
            // Another file took this name on the server.
            o.unlinked = true
            s.inodes[old] = o
        }
        s.inodes[ino] = e
        s.byRemote[r.inode] = ino
        s.inodes[parent]?.directory?.place(FileName(name), ino)
        return ino
    }

    /// The kernel's number for a server inode: the server's own, unless this mount uses it already
    /// (the root, a file made here, another entry) or it cannot be one (0) — then a local one.
    static func inodeNumber(forRemote r: UInt64, _ s: inout State) -> InodeNumber {
        if r > InodeNumber.root, r < InodeNumber.firstLocal, !s.inodes.contains(r) { return r }
        defer { s.nextLocal += 1 }
        return s.nextLocal
    }

    func newLocalInode(_ s: inout State) -> InodeNumber {
        defer { s.nextLocal += 1 }
        return s.nextLocal
    }

    /// A fresh path for a local copy.
    func newCacheFilePath() -> String { cacheFiles.newPath() }

    /// The inode, or `notFound`.
    func inode(_ s: State, _ ino: InodeNumber) throws(FSError) -> InodeEntry {
        guard let e = s.inodes[ino] else { throw FSError.notFound }
        return e
    }

    /// Upload parameters for an inode's content (mode, owner, times, metadata).
    /// The stored file an upload of `e` is to land over: the one it has, or the one a rename onto
    /// its name found there (journaled with the upload: `UploadJournal.Record.replaces`).
    static func replaces(_ e: InodeEntry) -> UploadJournal.Deletion? {
        (e.remote ?? e.local?.replaced)?.deletion
    }

    func uploadParams(_ e: InodeEntry) -> (UploadParams, contentType: String?, tags: [String]?) {
        let a = e.attributes
        let p = UploadParams(
            metadata: e.meta.metadata, isPublic: e.meta.isPublic, mode: a.mode, uid: a.uid, gid: a.gid, mtimeNs: a.mtime.nanoseconds,
            atimeNs: a.atime.nanoseconds, ctimeNs: a.ctime.nanoseconds)
        return (p, e.meta.contentType, e.meta.tags)
    }

    /// Runs a storage call, mapping its errors to `FSError`.
    func remote<T>(_ body: () async throws -> T) async throws(FSError) -> T {
        do {
            return try await body()
        } catch {
            throw FSError.from(error)
        }
    }

    func store(for location: Location) throws(FSError) -> Namespace {
        guard let ns = location.namespace else { throw FSError.notPermitted }
        return ns
    }
}
