import Foundation
import Logging
import StorageClient
public import StorageProtocol
import Synchronization

/// Tells the kernel to forget what it cached (FuseKit implements it with libfuse's notify calls,
/// on a thread that serves no request).
public protocol KernelNotifier: Sendable {
    /// The kernel forgets the name `name` in folder `parent` (its dentry).
    func invalidateEntry(parent: InodeNumber, name: String)
    /// The kernel forgets the inode's attributes and cached pages.
    func invalidateInode(_ ino: InodeNumber)
}

/// What the kernel must forget after changes from the feed.
enum KernelInvalidation: Hashable, Sendable {
    case entry(parent: InodeNumber, name: FileName)
    case inode(InodeNumber)
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
        var cursor: String?
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
                    forget = apply(answer.changes)
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
                    feed.value.withLock { $0.status.lastError = "the server has no change feed" }
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

    /// Drops from the caches what the changes name; returns what the kernel must forget.
    func apply(_ changes: [ChangeRecord]) -> [KernelInvalidation] {
        let own = configuration.origin
        var out: [KernelInvalidation] = []
        var seen = Set<KernelInvalidation>()
        func add(_ i: KernelInvalidation) { if seen.insert(i).inserted { out.append(i) } }
        var applied = 0, echoes = 0, reset = false
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
                case .entry:
                    guard let parent = c.parent, let p = s.byRemote[parent], let name = c.name, s.inodes[p]?.directory != nil else { continue }
                    if let child = s.inodes[p]?.directory?.children[name], let e = s.inodes[child], e.hasLocalState { continue }
                    s.inodes[p]?.directory?.validUntil = .now
                    s.inodes[p]?.directory?.negative[name] = nil
                    s.inodes[p]?.validUntil = .now
                    if let child = s.inodes[p]?.directory?.children[name], s.inodes[child]?.hasLocalState == false {
                        s.inodes[child]?.validUntil = .now
                    }
                    add(.entry(parent: p, name: FileName(name)))
                    add(.inode(p))
                case .inode:
                    guard let i = s.byRemote[c.ino], let e = s.inodes[i], !e.hasLocalState else { continue }
                    s.inodes[i]?.validUntil = .now
                    if e.directory != nil { s.inodes[i]?.directory?.validUntil = .now }
                    add(.inode(i))
                }
            }
        }
        feed.value.withLock { v in
            v.status.applied += applied
            v.status.echoes += echoes
            if reset { v.status.resets += 1 }
        }
        return reset ? forgetCached() : out
    }

    /// Forgets every cached attribute, listing and name (not local state); returns what the
    /// kernel must forget with it.
    func forgetCached() -> [KernelInvalidation] {
        state.withLock { s in
            var out: [KernelInvalidation] = []
            for (ino, e) in s.inodes where !e.hasLocalState {
                s.inodes[ino]?.validUntil = .now
                if let dir = e.directory {
                    s.inodes[ino]?.directory?.validUntil = .now
                    s.inodes[ino]?.directory?.complete = false
                    s.inodes[ino]?.directory?.negative = [:]
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
            }
        }
    }
}
