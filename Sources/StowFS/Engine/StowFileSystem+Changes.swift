import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Logging
import StorageClient
import StorageProtocol
import Synchronization

/// Tells the kernel to forget what it cached (FuseKit implements it with libfuse's notify calls,
/// on a thread that serves no request).
public protocol KernelNotifier: Sendable {
    /// The kernel forgets the name `name` in folder `parent` (its dentry).
    func invalidateEntry(parent: InodeNumber, name: String)
    /// The kernel forgets the inode's attributes and cached pages.
    func invalidateInode(_ ino: InodeNumber)
    /// The kernel forgets the inode's attributes only: it asks for them before its next use, and
    /// drops the pages itself if the size or mtime it is given differ (FUSE's auto_inval_data).
    func invalidateAttributes(_ ino: InodeNumber)
    /// Returns once what was asked before has been told to the kernel (or `timeout` passed).
    func barrier(timeout: Duration) async
}

extension KernelNotifier {
    public func barrier(timeout: Duration) async {}
    public func invalidateAttributes(_ ino: InodeNumber) { invalidateInode(ino) }
}

/// What the kernel must forget after changes from the feed.
enum KernelInvalidation: Hashable, Sendable {
    case entry(parent: InodeNumber, name: FileName)
    case inode(InodeNumber)
    /// The attributes only (`KernelNotifier.invalidateAttributes`).
    case attributes(InodeNumber)
}

/// Where the mount's subscription to the change feed stands (`stowfs status`).
public struct FeedStatus: Codable, Sendable, Equatable {
    /// Following: a read of the feed answered since the last failure.
    public var connected: Bool
    public var cursor: String?
    /// Changes of others applied since the mount.
    public var applied: Int
    /// The mount's own changes seen come back, and passed over.
    public var echoes: Int
    /// Times the feed said to forget everything (a cursor too old, a namespace deleted).
    public var resets: Int
    /// Why the last read failed, while not connected.
    public var lastError: String?
    /// Seconds since the feed last answered.
    public var secondsSinceAnswer: Double?
}

/// The subscription's state, shared by the follower task and `status`.
final class FeedState: Sendable {
    struct Value: Sendable {
        var status = FeedStatus(connected: false, cursor: nil, applied: 0, echoes: 0, resets: 0, lastError: nil, secondsSinceAnswer: nil)
        var lastAnswer: ContinuousClock.Instant?
        var task: Task<Void, Never>?
        var notifier: (any KernelNotifier)?
    }

    let value = Mutex(Value())
}

/// Several mounts of one namespace: the mount follows the namespace's change feed and drops what
/// others change from its caches and the kernel's, so `stat`, `ls` and `cat` see it without
/// waiting for a TTL. Its own changes come back too (the server records this mount's
/// `Stow-Origin`) and are passed over. With the feed unreachable, the TTLs bound staleness as
/// before; after a reconnect the follower goes on from its cursor, and on `reset` it forgets
/// everything it cached of the namespace.
///
/// A file with local state (a local copy or an upload owed) is passed over: this mount's view of
/// it is newer than the server's until its upload lands.
extension StowFileSystem {
    /// Where the kernel is told to forget things (set by FuseKit once the session exists).
    public func setKernelNotifier(_ notifier: any KernelNotifier) {
        feed.value.withLock { $0.notifier = notifier }
    }

    /// Starts following the namespace's change feed (one-namespace mounts; a no-op otherwise).
    public func startFollowingChanges() {
        guard case .namespace(let ns) = configuration.scope else { return }
        let task = Task { [weak self] in
            guard let self else { return }
            await self.followChanges(ns)
        }
        feed.value.withLock { $0.task = task }
    }

    /// Stops following (before unmount).
    public func stopFollowingChanges() async {
        let task = feed.value.withLock { v -> Task<Void, Never>? in
            defer { v.task = nil }
            return v.task
        }
        task?.cancel()
        await task?.value
    }

    /// nil for a mount that follows no feed (one of every namespace).
    public var feedStatus: FeedStatus? {
        guard case .namespace = configuration.scope else { return nil }
        return feed.value.withLock { v in
            var s = v.status
            s.secondsSinceAnswer = v.lastAnswer.map { (ContinuousClock.now - $0) / .seconds(1) }
            return s
        }
    }

    func followChanges(_ ns: Namespace) async {
        // From where the kept listings were brought up to date (`catchUpKept`), if they were.
        var cursor: String? = feed.value.withLock { $0.status.cursor }
        var delay = Duration.milliseconds(250)
        while !Task.isCancelled {
            do {
                let answer = try await store.changes(ns, since: cursor, wait: configuration.changeWait)
                delay = .milliseconds(250)
                var forget: [KernelInvalidation] = []
                if answer.reset {
                    logger.info("change feed: reset (changes were missed); forgetting what was cached")
                    forget = forgetCached()
                } else if cursor != nil {
                    let (list, open) = apply(answer.changes)
                    forget = list
                    for (ino, before) in open { Task { await self.followOpen(ino, before: before) } }
                }
                cursor = answer.cursor
                feed.value.withLock { v in
                    v.status.connected = true
                    v.status.cursor = answer.cursor
                    v.status.lastError = nil
                    v.lastAnswer = .now
                    if answer.reset { v.status.resets += 1 }
                }
                notifyKernel(forget)
            } catch {
                if Task.isCancelled { break }
                if let e = error as? StorageError, e.kind == .notFound {
                    // A server without a feed (or the namespace is gone): the TTLs alone, as before.
                    logger.info("change feed: not available (\(e)); changes of other mounts show after the attribute TTL")
                    feed.value.withLock { v in
                        // (Also as a mount that kept its listings from the last unmount took it to be.)
                        v.status.connected = false
                        v.status.lastError = "the server has no change feed"
                    }
                    return
                }
                feed.value.withLock { v in
                    if v.status.connected { logger.info("change feed: lost (\(error)); retrying, the TTLs bound staleness meanwhile") }
                    v.status.connected = false
                    v.status.lastError = "\(error)"
                }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
            }
        }
    }

    /// Whether the feed is followed and answering: its last read answered within a long poll's
    /// wait (and some slack) and none failed since. Then a complete listing stands until the feed
    /// names its folder (`DirectoryState.stands`); otherwise the TTL bounds it, as without a feed.
    /// Read outside the state lock.
    func feedHolds() -> Bool {
        guard case .namespace = configuration.scope else { return false }
        let limit = configuration.changeWait + .seconds(5)
        return feed.value.withLock { v in v.status.connected && v.lastAnswer.map { ContinuousClock.now - $0 < limit } == true }
    }

    /// The feed's cursor while it is followed (and answering), else nil.
    func feedCursor() -> String? {
        guard case .namespace = configuration.scope else { return nil }
        return feed.value.withLock { v in v.status.connected ? v.status.cursor : nil }
    }

    /// After a lock was granted: reads the feed up to the grant's `fence` and drops what it names,
    /// and returns once the kernel has forgotten it too — so that the new holder reads what the
    /// previous one wrote. The grant itself carries the changes after `since` (the cursor the
    /// request was sent with) when the server could read them: most grants need no read of the
    /// feed. Without a followed feed or a fence, or when the feed does not get there within 2 s,
    /// forgets everything cached instead.
    func catchUp(_ ns: Namespace, to fence: String?, from since: String?, carried grant: LockResponse? = nil) async {
        if case .namespace = configuration.scope, let fence, let target = ChangeCursor(fence), var cursor = since ?? feedCursor() {
            if let grant, since != nil, let changes = grant.changes, let next = grant.cursor, ChangeCursor(next) != nil {
                let (list, open) = apply(changes, counted: false)
                notifyKernel(list)
                for (ino, before) in open { await followOpen(ino, before: before) }
                cursor = next
            }
            let deadline = ContinuousClock.now + .seconds(2)
            while ContinuousClock.now < deadline {
                if let c = ChangeCursor(cursor), c >= target {
                    await kernelBarrier()
                    return
                }
                guard let answer = try? await store.changes(ns, since: cursor, wait: .zero), !answer.reset else { break }
                let (list, open) = apply(answer.changes, counted: false)
                notifyKernel(list)
                for (ino, before) in open { await followOpen(ino, before: before) }
                if answer.changes.isEmpty && answer.cursor == cursor { try? await Task.sleep(for: .milliseconds(2)) }
                cursor = answer.cursor
            }
            logger.info("lock taken: the change feed did not reach the grant's position; forgetting everything cached instead")
        }
        notifyKernel(forgetCached())
        await kernelBarrier()
    }

    func kernelBarrier() async {
        guard let notifier = feed.value.withLock({ $0.notifier }) else { return }
        await notifier.barrier(timeout: .seconds(2))
    }

    /// Drops from the caches what the changes name; returns what the kernel must forget.
    /// `counted`: the follower's own reads count in `stowfs status` (a lock's catch-up does not).
    /// Also returns the files open here (for reading) that changed: their descriptors are to
    /// follow the new version (`followOpen`).
    func apply(_ changes: [ChangeRecord], counted: Bool = true) -> ([KernelInvalidation], [(ino: InodeNumber, before: FileAttributes)]) {
        let own = configuration.origin
        var out: [KernelInvalidation] = []
        var seen = Set<KernelInvalidation>()
        func add(_ i: KernelInvalidation) { if seen.insert(i).inserted { out.append(i) } }
        var applied = 0, echoes = 0, reset = false
        var recalls: [UInt64] = []
        var opened: [(ino: InodeNumber, before: FileAttributes)] = []
        var released: [CacheFile] = []
        defer { for f in released { giveBack(f) } }
        state.withLock { s in
            for c in changes {
                if let own, c.origin == own {
                    echoes += 1
                    continue
                }
                applied += 1
                switch c.kind {
                case .namespace:
                    reset = true
                case .recall:
                    // Another client waits to create a name here exclusively: from now on this
                    // mount asks the server too, and lets the lease go once its files are stored.
                    if let dir = s.byRemote[c.ino], s.inodes[dir]?.directory != nil {
                        s.inodes[dir]?.directory?.madeHere = false
                    } else {
                        s.namedBeforeKnown[c.ino] = .now
                    }
                    recalls.append(c.ino)
                case .entry:
                    if let parent = c.parent, s.byRemote[parent] == nil { s.namedBeforeKnown[parent] = .now }
                    guard let parent = c.parent, let p = s.byRemote[parent], let name = c.name, s.inodes[p]?.directory != nil else { continue }
                    if let child = s.inodes[p]?.directory?.children[name], let file = dropCleanCopy(&s, child) { released.append(file) }
                    if let child = s.inodes[p]?.directory?.children[name], let e = s.inodes[child], e.hasLocalState { continue }
                    s.inodes[p]?.directory?.expire()
                    s.inodes[p]?.directory?.expiredAt = .now
                    s.inodes[p]?.directory?.negative[name] = nil
                    s.inodes[p]?.directory?.madeHere = false
                    s.inodes[p]?.validUntil = Self.forcedStale
                    if let child = s.inodes[p]?.directory?.children[name], s.inodes[child]?.hasLocalState == false {
                        s.inodes[child]?.validUntil = Self.forcedStale
                    }
                    add(.entry(parent: p, name: FileName(name)))
                    add(.inode(p))
                case .inode:
                    s.feedNamed[c.ino] = .now
                    if let i = s.byRemote[c.ino], let file = dropCleanCopy(&s, i) { released.append(file) }
                    guard let i = s.byRemote[c.ino], let e = s.inodes[i], !e.hasLocalState else { continue }
                    s.inodes[i]?.validUntil = Self.forcedStale
                    if e.openHandles > 0, e.kind == .file, !c.removed {
                        // Read here now: its pages stay until the kernel has the new size (`followOpen`).
                        if !opened.contains(where: { $0.ino == i }) { opened.append((i, e.attributes)) }
                        add(.attributes(i))
                        continue
                    }
                    if e.directory != nil {
                        s.inodes[i]?.directory?.expire()
                        s.inodes[i]?.directory?.expiredAt = .now
                    }
                    add(.inode(i))
                }
            }
            if s.namedBeforeKnown.count > 4096 {
                let old = ContinuousClock.now - .seconds(60)
                s.namedBeforeKnown = s.namedBeforeKnown.filter { $0.value > old }
            }
            if s.feedNamed.count > s.feedNamedPruneAt {
                // Only a read sent before a change can bring what it changed back (and a record
                // whose request's start is not known, within `feedNamedWindow`).
                let oldest = min(s.readsInFlight.values.min() ?? .now, ContinuousClock.now - Self.feedNamedWindow)
                s.feedNamed = s.feedNamed.filter { $0.value >= oldest }
                s.feedNamedPruneAt = max(4096, s.feedNamed.count * 2)
            }
        }
        if counted {
            feed.value.withLock { v in
                v.status.applied += applied
                v.status.echoes += echoes
                if reset { v.status.resets += 1 }
            }
        }
        if !recalls.isEmpty, case .namespace(let ns) = configuration.scope {
            for folder in Set(recalls) { Task { await self.relinquishNamesLease(ns, folder: folder) } }
        }
        if logger.logLevel <= .debug && (applied > 0 || reset) {
            logger.debug("change feed: \(applied) change(s) applied, \(echoes) echo(es); the kernel forgets \(out)")
        }
        return reset ? (forgetCached(), []) : (out, opened)
    }

    /// A file open here for reading changed elsewhere: once its new attributes are in, its
    /// descriptors read the new version (each read whole in one version, S9), and the kernel
    /// drops the pages it read of the old one.
    ///
    /// The kernel is told to forget the attributes, not the pages, when the size changed: a
    /// `read(2)` takes the size before it looks for its pages, so a page dropped under a read
    /// already under way was asked for again, came from the new version and was cut at the old
    /// size ("the-se" of "the-second-version\n": `CoherenceMountTests/heldDescriptor`, once in
    /// ten to twenty runs). Given the new size, the kernel drops the pages itself, with the size
    /// already in place (FUSE's auto_inval_data). A change that keeps the size drops the pages
    /// from here, as the kernel would keep them: a read it cuts short is cut at the same length.
    /// `before`: its attributes when the change came (what the kernel may still have).
    func followOpen(_ ino: InodeNumber, before: FileAttributes) async {
        do throws(FSError) {
            try await refreshAfterChange(ino)
        } catch {
            return
        }
        let (moved, kernelKeepsPages) = state.withLock { s -> (Bool, Bool) in
            guard let e = s.inodes[ino], !e.hasLocalState, let etag = e.remote?.etag else { return (false, false) }
            var moved = false
            for (id, h) in s.handles where h.ino == ino && !h.writable && h.etag != etag {
                s.handles[id]?.etag = etag
                moved = true
            }
            return (moved, before.size == e.attributes.size && before.mtime == e.attributes.mtime)
        }
        if kernelKeepsPages {
            notifyKernel([.inode(ino)])
        } else if moved {
            notifyKernel([.attributes(ino)])
        }
    }

    /// A local copy the server has exactly (stored, closed, nothing owed) is no newer than the
    /// server: another client's change must not be hidden behind it. It goes (and is returned, to
    /// be given back to the pool once the state lock is let go).
    func dropCleanCopy(_ s: inout State, _ ino: InodeNumber) -> CacheFile? {
        guard var e = s.inodes[ino], e.remote != nil, let local = e.local, !local.dirty, local.writers == 0, local.stream == nil, local.heldUpload == nil,
            e.upload == nil, e.olderUploads.isEmpty, e.submitting == 0
        else { return nil }
        e.local = nil
        e.pageCacheETag = nil
        s.inodes[ino] = e
        return local.file
    }

    /// A copy dropped from an inode: emptied for the next file, unless a read still splices from it.
    func giveBack(_ file: consuming CacheFile) {
        var file = file
        if isKnownUniquelyReferenced(&file) { cacheFiles.give(file) } else { Glibc.unlink(file.path) }
    }

    /// Forgets every cached attribute, listing and name (not local state); returns what the
    /// kernel must forget with it.
    func forgetCached() -> [KernelInvalidation] {
        var released: [CacheFile] = []
        defer { for f in released { giveBack(f) } }
        return state.withLock { s in
            var out: [KernelInvalidation] = []
            for ino in Array(s.inodes.keys) {
                if let file = dropCleanCopy(&s, ino) { released.append(file) }
            }
            for (ino, e) in s.inodes where !e.hasLocalState {
                s.inodes[ino]?.validUntil = Self.forcedStale
                if let dir = e.directory {
                    s.inodes[ino]?.directory?.expire()
                    s.inodes[ino]?.directory?.expiredAt = .now
                    s.inodes[ino]?.directory?.complete = false
                    s.inodes[ino]?.directory?.negative = [:]
                    s.inodes[ino]?.directory?.madeHere = false
                    for name in dir.children.keys { out.append(.entry(parent: ino, name: name)) }
                }
                out.append(.inode(ino))
            }
            return out
        }
    }

    func notifyKernel(_ list: [KernelInvalidation]) {
        guard !list.isEmpty, let notifier = feed.value.withLock({ $0.notifier }) else { return }
        for item in list {
            switch item {
            case .entry(let parent, let name): notifier.invalidateEntry(parent: parent, name: name.string)
            case .inode(let ino): notifier.invalidateInode(ino)
            case .attributes(let ino): notifier.invalidateAttributes(ino)
            }
        }
    }
}
