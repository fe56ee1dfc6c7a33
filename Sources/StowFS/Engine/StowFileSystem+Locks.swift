import Foundation
import Logging
import NIOCore
import StorageClient
public import StorageProtocol
import Synchronization

/// A byte-range lock as the kernel gives it (POSIX: `l_len` 0 is "to the end", here `end` =
/// `UInt64.max`; `flock` locks are the whole file).
public struct FileLock: Sendable, Equatable {
    public var type: LockType
    public var start: UInt64
    public var end: UInt64
    public var pid: Int32

    public init(type: LockType, start: UInt64, end: UInt64, pid: Int32) {
        self.type = type
        self.start = start
        self.end = end
        self.pid = pid
    }
}

/// The mount's lock sessions (one per namespace it locked in) and which owners may hold locks.
final class LockState: Sendable {
    struct Value: Sendable {
        /// Namespaces whose session was started (and is renewed).
        var sessions: Set<String> = []
        var renewer: Task<Void, Never>?
        var lease: Duration = .seconds(20)
        /// (inode, owner, kind) that may hold a lock on the server: a close or release of such an
        /// owner sends an unlock, others send nothing.
        var held: Set<HeldKey> = []
        /// The server keeps no locks (an older stowd): the kernel keeps them, on this machine.
        var unsupported = false
        /// Sessions the server said had ended (their locks gone) since the mount began.
        var lost = 0
        /// Unlocks that could not reach the server, sent again by the renewer.
        var pendingUnlocks: [(Namespace, LockRequest)] = []
        /// Folders (server inodes) whose `names` lease this mount holds.
        var namesLeases: Set<UInt64> = []
    }

    struct HeldKey: Hashable, Sendable {
        var ino: InodeNumber
        var owner: UInt64
        var kind: LockKind
    }

    let value = Mutex(Value())
    /// This mount's session id, one for every namespace: its `Stow-Origin` (random: it is the
    /// session's only proof), so that the server knows a request's session by its origin.
    let sessionID: String

    init(sessionID: String?) {
        self.sessionID = sessionID ?? "l-" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
    }
}

/// Locks shared by every mount of a namespace (`flock`, POSIX record locks, OFD locks), held on
/// the server by this mount's lock session, which a task renews every third of its lease.
///
/// A lock is also a data barrier, as on NFS, since files are uploaded after close: before an
/// unlock goes to the server, everything written here is stored (`sync`); after a lock is
/// granted, the change feed is read up to the grant's fence and what it names is dropped from
/// the caches (the kernel's too) before the caller has the lock. So a read-modify-write under a
/// lock, passed between mounts, never works on old bytes.
extension StowFileSystem {
    /// Takes, changes or releases a lock of `owner` on `ino`. `wait`: until it can be taken
    /// (F_SETLKW, `flock` without LOCK_NB); cancelling the task stops the wait (EINTR).
    /// Without `wait`, a lock held elsewhere is `EAGAIN` (`FSError.wouldBlock`).
    public func setLock(_ ino: InodeNumber, owner: UInt64, kind: LockKind, _ lock: FileLock, wait: Bool) async throws(FSError) {
        if lock.type == .unlock {
            try await unlock(ino, owner: owner, kind: kind, lock)
            return
        }
        let (ns, remote) = try await lockTarget(ino)
        try await startLockSession(ns)
        let key = LockState.HeldKey(ino: ino, owner: owner, kind: kind)
        let heldBefore = locks.value.withLock { $0.held.contains(key) }
        // A wait is a series of short waits: the server goes on waiting for a request whose
        // client gave up (an interrupted flock), and may grant it the lock until its wait is over.
        var request = LockRequest(
            session: locks.sessionID, ino: remote, owner: owner, kind: kind, type: lock.type, start: lock.start, end: lock.end, pid: lock.pid,
            waitMs: wait ? Int(Self.lockWaitSlice.components.seconds * 1000) : 0)
        var answer: LockResponse
        do {
            repeat {
                // Where the feed stands as this request goes: the grant carries what came after.
                request.since = feedCursor()
                answer = try await store.lock(ns, request)
            } while wait && !answer.granted && !Task.isCancelled
        } catch {
            if Task.isCancelled && !heldBefore {
                // Interrupted: the server may have granted it as the wait was given up, or may
                // still grant it until that request's wait is over. Nobody holds it here, so it
                // goes: now, and once more after the wait.
                request.type = .unlock
                request.waitMs = nil
                let store = self.store, slice = Self.lockWaitSlice
                Task.detached {
                    _ = try? await store.lock(ns, request)
                    try? await Task.sleep(for: slice + .milliseconds(500))
                    _ = try? await store.lock(ns, request)
                }
            }
            throw lockError(error)
        }
        guard answer.granted else { throw Task.isCancelled ? FSError.interrupted : FSError.wouldBlock }
        locks.value.withLock { _ = $0.held.insert(key) }
        await catchUp(ns, to: answer.fence, from: request.since, carried: answer)
        // The file locked is often open already (a lock needs a descriptor): a copy made by that
        // open may predate the previous holder's last write.
        do throws(FSError) {
            try await refreshCleanCopy(ino, current: answer.etag)
        } catch {
            logger.warning("lock taken, but the locked file could not be brought up to date: \(error)")
        }
    }

    /// The lock of another owner that would keep `lock` from being taken (F_GETLK), or nil.
    public func testLock(_ ino: InodeNumber, owner: UInt64, kind: LockKind, _ lock: FileLock) async throws(FSError) -> FileLock? {
        let (ns, remote) = try await lockTarget(ino)
        try await startLockSession(ns)
        let request = LockRequest(
            session: locks.sessionID, ino: remote, owner: owner, kind: kind, type: lock.type, start: lock.start, end: lock.end, pid: lock.pid)
        let answer: LockResponse
        do {
            answer = try await store.testLock(ns, request)
        } catch {
            throw lockError(error)
        }
        return answer.conflict.map { FileLock(type: $0.type, start: $0.start, end: $0.end, pid: $0.pid) }
    }

    /// Whether `owner` may hold a lock of `kind` on `ino` (so that a close must release it).
    /// Answered without a task: most closes hold none.
    public func mayHoldLocks(_ ino: InodeNumber, owner: UInt64, kind: LockKind) -> Bool {
        locks.value.withLock { $0.held.contains(LockState.HeldKey(ino: ino, owner: owner, kind: kind)) }
    }

    /// Releases every lock of `kind` that `owner` holds on `ino` (a POSIX owner's close, the
    /// last close of a `flock`ed file), after storing what was written.
    public func releaseLocks(_ ino: InodeNumber, owner: UInt64, kind: LockKind) async {
        guard mayHoldLocks(ino, owner: owner, kind: kind) else { return }
        try? await unlock(ino, owner: owner, kind: kind, FileLock(type: .unlock, start: 0, end: .max, pid: 0))
    }

    private func unlock(_ ino: InodeNumber, owner: UInt64, kind: LockKind, _ lock: FileLock) async throws(FSError) {
        let key = LockState.HeldKey(ino: ino, owner: owner, kind: kind)
        guard locks.value.withLock({ $0.held.contains(key) }) else { return }
        // The barrier: the next holder reads what was written under the lock.
        let failures = await sync()
        if !failures.isEmpty {
            logger.warning("unlocking with \(failures.count) upload(s) the server refused: \(failures.map(\.path).prefix(3).joined(separator: ", "))")
        }
        let (ns, remote) = try await lockTarget(ino)
        let request = LockRequest(
            session: locks.sessionID, ino: remote, owner: owner, kind: kind, type: .unlock, start: lock.start, end: lock.end, pid: lock.pid)
        if lock.start == 0 && lock.end == .max { locks.value.withLock { _ = $0.held.remove(key) } }
        do {
            _ = try await store.lock(ns, request)
        } catch {
            // The kernel has let go: the server must too. Sent again until it takes it (or the
            // session ends with the mount).
            logger.warning("unlock of inode \(remote) did not reach the server (\(error)); sending it again")
            locks.value.withLock { $0.pendingUnlocks.append((ns, request)) }
        }
    }

    /// How long one lock request waits on the server; a wait for a lock is a series of them.
    static let lockWaitSlice: Duration = .seconds(2)

    /// The namespace and the server's inode number of a file to lock. A file not on the server yet
    /// (made here, not uploaded) is stored first: a lock names a stored inode.
    private func lockTarget(_ ino: InodeNumber) async throws(FSError) -> (Namespace, UInt64) {
        if locks.value.withLock({ $0.unsupported }) { throw FSError.notSupported }
        func find() throws(FSError) -> (Namespace, UInt64?) {
            try state.withLock { (s: inout State) throws(FSError) -> (Namespace, UInt64?) in
                let e = try inode(s, ino)
                guard let ns = try self.location(s, ino).namespace else { throw FSError.notSupported }
                return (ns, e.remote?.ino)
            }
        }
        let (ns, remote) = try find()
        if let remote { return (ns, remote) }
        _ = await sync()
        guard case (_, let stored?) = try find() else { throw FSError.io("the file could not be stored, so it cannot be locked") }
        return (ns, stored)
    }

    private func lockError(_ error: any Error) -> FSError {
        // A store without locks, or a stowd from before them (its router knows no such route).
        if let e = error as? StorageError, e.kind == .notFound, e.status == nil || e.message == "no such route" {
            locks.value.withLock { $0.unsupported = true }
            logger.notice("the server keeps no locks: flock and fcntl locks hold on this machine only")
            return .notSupported
        }
        return FSError.from(error)
    }

    /// Starts the namespace's lock session (once), and the task that renews every session.
    private func startLockSession(_ ns: Namespace) async throws(FSError) {
        guard !locks.value.withLock({ $0.sessions.contains(ns.name) }) else { return }
        let answer: LockSessionResponse
        do {
            answer = try await store.renewLockSession(ns, id: locks.sessionID)
        } catch {
            throw lockError(error)
        }
        locks.value.withLock { v in
            v.sessions.insert(ns.name)
            v.lease = .seconds(max(2, answer.leaseSeconds))
            guard v.renewer == nil else { return }
            v.renewer = Task { [weak self] in await self?.renewLockSessions() }
        }
    }

    private func renewLockSessions() async {
        while !Task.isCancelled {
            let (lease, names, pending) = locks.value.withLock { v in
                defer { v.pendingUnlocks = [] }
                return (v.lease, v.sessions, v.pendingUnlocks)
            }
            try? await Task.sleep(for: lease / 3)
            if Task.isCancelled { return }
            for name in names {
                guard let ns = try? Namespace(name) else { continue }
                do {
                    let answer = try await store.renewLockSession(ns, id: locks.sessionID)
                    if !answer.existed {
                        locks.value.withLock { $0.lost += 1 }
                        logger.warning("lock session of \(name) had ended (this mount did not renew it within its lease): locks held here may have been taken by others")
                    }
                } catch {
                    logger.info("lock session of \(name) not renewed (\(error)); trying again")
                }
            }
            for (ns, request) in pending {
                do {
                    _ = try await store.lock(ns, request)
                } catch {
                    locks.value.withLock { $0.pendingUnlocks.append((ns, request)) }
                }
            }
        }
    }

    /// Takes the `names` lease of a folder this mount just made, so that exclusive creates in it
    /// are decided here (`createExclusiveHere`); false when not taken (no feed to hear a
    /// recall on, a server without locks, another mount holds it).
    func takeNamesLease(_ ns: Namespace, folder remote: UInt64) async -> Bool {
        guard await namesLeaseSession(ns) != nil else { return false }
        let request = LockRequest(session: locks.sessionID, ino: remote, owner: 0, kind: .names, type: .write, start: 0, end: .max, pid: 0)
        guard (try? await store.lock(ns, request).granted) == true else { return false }
        locks.value.withLock { _ = $0.namesLeases.insert(remote) }
        return true
    }

    /// The lock session to hold a names lease with, started if need be; nil when this mount takes
    /// none (the feed is not followed, so a recall would not reach it, or the server keeps no locks).
    func namesLeaseSession(_ ns: Namespace) async -> String? {
        guard feed.value.withLock({ $0.status.connected }), !locks.value.withLock({ $0.unsupported }) else { return nil }
        do throws(FSError) {
            try await startLockSession(ns)
        } catch {
            return nil
        }
        return locks.sessionID
    }

    /// Another client waits to create a name in `folder` exclusively: the names of the files this
    /// mount made there and has not stored yet are reserved on the server (empty files, which
    /// their uploads then fill), then the lease goes — a moment's work, however much is queued.
    /// `madeHere` was already cleared (under the state lock), so no exclusive create decided here
    /// comes after the look at the folder's names below.
    func relinquishNamesLease(_ ns: Namespace, folder remote: UInt64) async {
        guard locks.value.withLock({ $0.namesLeases.remove(remote) != nil }) else { return }
        let unsent = state.withLock { s -> [(Location, FileAttributes)] in
            guard let dir = s.byRemote[remote], let children = s.inodes[dir]?.directory?.children else { return [] }
            return children.values.compactMap { ino -> (Location, FileAttributes)? in
                guard let e = s.inodes[ino], e.kind == .file, e.remote == nil, !e.unlinked, let location = try? self.location(s, ino) else { return nil }
                return (location, e.attributes)
            }
        }
        for (location, a) in unsent {
            let request = StartUploadRequest(
                fileName: location.path.string, size: 0,
                params: UploadParams(
                    ifNoneMatch: "*", mode: a.mode, uid: a.uid, gid: a.gid, mtimeNs: a.mtime.nanoseconds, atimeNs: a.atime.nanoseconds,
                    ctimeNs: a.ctime.nanoseconds))
            // A name taken meanwhile (a plain upload by another client) is left to the upload to come.
            _ = try? await store.uploadDirect(ns, request, from: .bytes(ByteBuffer()))
        }
        let request = LockRequest(session: locks.sessionID, ino: remote, owner: 0, kind: .names, type: .unlock, start: 0, end: .max, pid: 0)
        do {
            _ = try await store.lock(ns, request)
        } catch {
            locks.value.withLock { $0.pendingUnlocks.append((ns, request)) }
        }
    }

    /// Ends the lock sessions (at unmount): every lock this mount holds goes at once.
    public func endLockSessions() async {
        let (task, names) = locks.value.withLock { v in
            defer {
                v.renewer = nil
                v.sessions = []
                v.held = []
                v.namesLeases = []
            }
            return (v.renewer, v.sessions)
        }
        task?.cancel()
        await task?.value
        for name in names {
            guard let ns = try? Namespace(name) else { continue }
            try? await store.endLockSession(ns, id: locks.sessionID)
        }
    }

    public var lockStatus: LockStatus {
        locks.value.withLock { v in LockStatus(held: v.held.count, sessionsLost: v.lost, pendingUnlocks: v.pendingUnlocks.count, local: v.unsupported) }
    }
}

/// Locks in `stowfs status`.
public struct LockStatus: Codable, Sendable, Equatable {
    /// Owners here that may hold a lock on the server.
    public var held: Int
    /// Times the server said this mount's session had ended (its locks gone).
    public var sessionsLost: Int
    public var pendingUnlocks: Int
    /// The server keeps no locks: they hold on this machine only.
    public var local: Bool
}
