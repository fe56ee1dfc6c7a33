import Foundation
public import StorageProtocol

/// The locks of one inode of a namespace, of one kind (`flock` and POSIX locks never meet).
public struct LockSetKey: Hashable, Sendable {
    public var namespace: Namespace
    public var ino: UInt64
    public var kind: LockKind

    public init(namespace: Namespace, ino: UInt64, kind: LockKind) {
        self.namespace = namespace
        self.ino = ino
        self.kind = kind
    }
}

/// A lock set as kept: its locks (those of live sessions only) and the version of the record
/// (0 when none is kept; otherwise random, see `LockSetCoding.newVersion`).
public struct LockSetState: Sendable, Equatable {
    public var version: Int64
    public var locks: [HeldLock]

    public init(version: Int64, locks: [HeldLock]) {
        self.version = version
        self.locks = locks
    }
}

/// Where the locks and lock sessions are kept: both metadata stores, so that every replica on one
/// database sees the same locks. A lock set is one record per (namespace, inode, kind) changed by
/// compare-and-swap on its version, so that the rules (`LockArithmetic`) are Swift, the same on
/// every store, and each change is two statements with no transaction held open between them.
/// A session lives until its lease ends; the locks of a session that is not alive are passed
/// over when a set is read, and dropped when it is next written.
public protocol LockLedger: Sendable {
    /// The set of `key` (only the locks of sessions alive now).
    func lockSet(_ key: LockSetKey) async throws -> LockSetState
    /// Replaces the set of `key` with `locks` if its version is still `expected`; false when
    /// another request changed it first (read it again).
    func replaceLockSet(_ key: LockSetKey, expected: Int64, locks: [HeldLock]) async throws -> Bool
    /// Starts or renews session `id` of `ns` for `leaseNs` from now (the store's clock); whether it
    /// was alive before (false: new, or its lease had run out and its locks are gone).
    func renewLockSession(_ ns: Namespace, id: String, leaseNs: Int64) async throws -> Bool
    /// Ends a session: its locks go at once.
    func endLockSession(_ ns: Namespace, id: String) async throws
    /// Drops sessions that ended more than `graceNs` ago and sets that hold no lock of a live
    /// session; returns how many records went.
    func trimLocks(graceNs: Int64) async throws -> Int
}

/// What a lock request came to.
public struct LockOutcome: Sendable, Equatable {
    public var granted: Bool
    public var conflict: HeldLock?
}

extension LockLedger {
    /// Applies `request` unless a live lock of another owner is in the way (then returns it). An
    /// unlock always applies. `test`: only looks.
    public func applyLock(_ ns: Namespace, _ request: LockRequest, test: Bool) async throws -> LockOutcome {
        let key = LockSetKey(namespace: ns, ino: request.ino, kind: request.kind)
        var wanted = request.asHeld
        if request.kind == .flock {
            wanted.start = 0
            wanted.end = UInt64.max
        }
        for _ in 0..<64 {
            let set = try await lockSet(key)
            if let conflict = LockArithmetic.conflict(set.locks, wanted) { return LockOutcome(granted: false, conflict: conflict) }
            if test { return LockOutcome(granted: true, conflict: nil) }
            let next = LockArithmetic.apply(set.locks, wanted)
            // Nothing to write: an unlock of what was not held, a lock held already.
            if next == set.locks { return LockOutcome(granted: true, conflict: nil) }
            if try await replaceLockSet(key, expected: set.version, locks: next) { return LockOutcome(granted: true, conflict: nil) }
        }
        throw StoreError.unavailable("the locks of inode \(request.ino) changed 64 times while this request tried to change them")
    }
}

/// The JSON a lock set is kept as, in both stores.
enum LockSetCoding {
    /// A record's version is random, never a counter: a set removed and made again could
    /// otherwise come back with a version a slow request read from the old one, and its
    /// compare-and-swap would succeed on a set it never saw.
    static func newVersion() -> Int64 { Int64.random(in: 1...Int64.max) }

    static func encode(_ locks: [HeldLock]) -> String { String(decoding: WireJSON.encode(locks), as: UTF8.self) }

    /// The set a `names` lease of `session` is: what `applyLock` makes of an empty set and a
    /// write lock of owner 0 over the whole range (`FolderRequest.namesLease`).
    static func namesLease(session: String) -> String {
        encode(LockArithmetic.apply([], HeldLock(session: session, owner: 0, type: .write, start: 0, end: .max, pid: 0)))
    }

    static func decode(_ text: String) throws -> [HeldLock] {
        do {
            return try WireJSON.decoder().decode([HeldLock].self, from: Data(text.utf8))
        } catch {
            throw StoreError.unavailable("a lock record could not be read: \(error)")
        }
    }
}
