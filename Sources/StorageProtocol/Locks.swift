/// Advisory locks shared by every mount of a namespace (a StowFS extension): `flock(2)` locks
/// and POSIX record locks (`fcntl` F_SETLK / F_SETLKW / F_GETLK, and open file description
/// locks), held on the server by a mount's *lock session*, which lives while the mount renews its
/// lease. A mount that dies stops renewing, and its locks go when the lease ends.
///
/// A lock names a stored inode (`ino`, the server's number), an owner inside the session (the
/// kernel's lock owner: a process for POSIX locks, an open file for `flock` and OFD locks), a
/// kind (flock and POSIX locks never conflict with each other, as on Linux), a type and a byte
/// range. Two locks conflict when they overlap, belong to different owners (or sessions), and at
/// least one of them is a write lock.

/// `flock` locks cover the whole file; POSIX locks cover byte ranges. A `names` lock is a
/// mount's lease on a folder's exclusive creates: while it holds one (a write lock, owner 0), it
/// decides `O_CREAT|O_EXCL` in that folder itself; another client's exclusive create there first
/// recalls it (a `recall` change in the feed), and the holder stores what it made and lets go.
public enum LockKind: String, Codable, Sendable, CaseIterable {
    case flock
    case posix
    case names
}

/// Shared (`read`: `LOCK_SH`, `F_RDLCK`), exclusive (`write`: `LOCK_EX`, `F_WRLCK`) or `unlock`.
public enum LockType: String, Codable, Sendable {
    case read
    case write
    case unlock
}

/// A lock held by an owner of a session. `end` is inclusive; `UInt64.max` means "to the end of
/// the file, however it grows" (a POSIX length of 0), and a `flock` lock is `0...UInt64.max`.
public struct HeldLock: Codable, Sendable, Equatable, Hashable {
    public var session: String
    public var owner: UInt64
    public var type: LockType
    public var start: UInt64
    public var end: UInt64
    /// The process that took it, as its machine numbers it (what F_GETLK reports).
    public var pid: Int32

    public init(session: String, owner: UInt64, type: LockType, start: UInt64, end: UInt64, pid: Int32) {
        self.session = session
        self.owner = owner
        self.type = type
        self.start = start
        self.end = end
        self.pid = pid
    }

    /// Same session and owner.
    public func sameOwner(_ other: HeldLock) -> Bool { session == other.session && owner == other.owner }

    public func overlaps(_ start: UInt64, _ end: UInt64) -> Bool { self.start <= end && start <= self.end }

    /// Whether `other` (a lock wanted) cannot be held beside this one.
    public func conflicts(with other: HeldLock) -> Bool {
        !sameOwner(other) && overlaps(other.start, other.end) && (type == .write || other.type == .write)
    }
}

/// `POST …/namespaces/{ns}/locks` (take, change or release a lock) and `…/locks/test` (F_GETLK).
public struct LockRequest: Codable, Sendable, Equatable {
    /// The lock session (`PUT …/locks/sessions/{id}`), 16–64 of `A-Z a-z 0-9 . _ -`.
    public var session: String
    public var ino: UInt64
    public var owner: UInt64
    public var kind: LockKind
    public var type: LockType
    public var start: UInt64
    public var end: UInt64
    public var pid: Int32
    /// How long to wait for a lock held by another owner (F_SETLKW, `flock` without LOCK_NB), in
    /// milliseconds, at most 30,000; 0 or absent: answer at once.
    public var waitMs: Int?
    /// The asker's change-feed cursor (`ChangesResponse.cursor`), if it follows the feed: a grant
    /// then carries the changes after it, up to the grant (`LockResponse.changes`), which saves a
    /// read of the feed before the lock can be used.
    public var since: String?

    public init(
        session: String, ino: UInt64, owner: UInt64, kind: LockKind, type: LockType, start: UInt64, end: UInt64, pid: Int32, waitMs: Int? = nil,
        since: String? = nil
    ) {
        self.session = session
        self.ino = ino
        self.owner = owner
        self.kind = kind
        self.type = type
        self.start = start
        self.end = end
        self.pid = pid
        self.waitMs = waitMs
        self.since = since
    }

    enum CodingKeys: String, CodingKey {
        case session, ino, owner, kind, type, start, end, pid, since
        case waitMs = "wait_ms"
    }

    public var asHeld: HeldLock { HeldLock(session: session, owner: owner, type: type, start: start, end: end, pid: pid) }
}

/// The answer to a lock request.
public struct LockResponse: Codable, Sendable, Equatable {
    /// The lock is held (or released) as asked. False: `conflict` holds it (the wait, if any, ran out).
    public var granted: Bool
    /// A lock in the way (of another owner); for `…/locks/test`, nil when the lock could be taken.
    public var conflict: HeldLock?
    /// Where the namespace's change feed stood when the lock was granted: every change committed
    /// before the grant is at or before it. A mount that reads its feed up to this point has
    /// dropped whatever the previous holder changed (the lock is also a data barrier).
    public var fence: String?
    /// For a grant asked with `since`: the changes after it, read after the grant, and the cursor
    /// they end at (at most 1,000: a `cursor` short of the `fence` means more are to be read from
    /// the feed). Absent when the `since` was too old (the feed's `reset`).
    public var changes: [ChangeRecord]?
    public var cursor: String?
    /// For a granted `flock` or `posix` lock: the locked file's etag as the grant found it, so
    /// that a mount holding a copy of the file can tell without asking whether the copy is current.
    public var etag: String?

    public init(
        granted: Bool, conflict: HeldLock? = nil, fence: String? = nil, changes: [ChangeRecord]? = nil, cursor: String? = nil, etag: String? = nil
    ) {
        self.granted = granted
        self.conflict = conflict
        self.fence = fence
        self.changes = changes
        self.cursor = cursor
        self.etag = etag
    }

    enum CodingKeys: String, CodingKey {
        case granted, conflict, fence, changes, cursor, etag
    }

    /// As the synthesized decoder, and a conflict's range must be one (`start` ≤ `end`): a mount
    /// answers F_GETLK with its length, `end - start + 1`, which traps for a range that ends
    /// before it starts. Such an answer is a decoding error (the lock call fails with EIO).
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        granted = try c.decode(Bool.self, forKey: .granted)
        conflict = try c.decodeIfPresent(HeldLock.self, forKey: .conflict)
        fence = try c.decodeIfPresent(String.self, forKey: .fence)
        changes = try c.decodeIfPresent([ChangeRecord].self, forKey: .changes)
        cursor = try c.decodeIfPresent(String.self, forKey: .cursor)
        etag = try c.decodeIfPresent(String.self, forKey: .etag)
        if let conflict, conflict.start > conflict.end {
            throw DecodingError.dataCorruptedError(
                forKey: .conflict, in: c, debugDescription: "a lock from \(conflict.start) that ends before it, at \(conflict.end)")
        }
    }
}

/// `PUT …/namespaces/{ns}/locks/sessions/{id}`: starts or renews a lock session.
public struct LockSessionResponse: Codable, Sendable, Equatable {
    /// Seconds the session lives without another renewal.
    public var leaseSeconds: Int
    /// False when the session was not alive: new, or ended (its lease ran out, or it was deleted),
    /// in which case the locks it held are gone.
    public var existed: Bool

    public init(leaseSeconds: Int, existed: Bool) {
        self.leaseSeconds = leaseSeconds
        self.existed = existed
    }

    enum CodingKeys: String, CodingKey {
        case existed
        case leaseSeconds = "lease_seconds"
    }
}

/// The arithmetic of one inode's locks of one kind: what conflicts, and the set after a request
/// (POSIX rules: an owner's new lock replaces what it held over that range, splitting its
/// older locks; adjacent and overlapping locks of one owner and type merge; an unlock of part
/// of a range keeps the rest).
public enum LockArithmetic {
    /// The first lock of another owner that keeps `wanted` from being taken; nil for an unlock.
    public static func conflict(_ held: [HeldLock], _ wanted: HeldLock) -> HeldLock? {
        guard wanted.type != .unlock else { return nil }
        return held.first { $0.conflicts(with: wanted) }
    }

    /// The set after `request` is applied (the caller checked it does not conflict).
    public static func apply(_ held: [HeldLock], _ request: HeldLock) -> [HeldLock] {
        var out: [HeldLock] = []
        var mine: [HeldLock] = []
        for l in held {
            guard l.sameOwner(request) else {
                out.append(l)
                continue
            }
            guard l.overlaps(request.start, request.end) else {
                mine.append(l)
                continue
            }
            // The parts of the old lock outside the request's range stay.
            if l.start < request.start {
                var left = l
                left.end = request.start - 1
                mine.append(left)
            }
            if l.end > request.end {
                var right = l
                right.start = request.end + 1
                mine.append(right)
            }
        }
        if request.type != .unlock { mine.append(request) }
        return out + merged(mine)
    }

    /// One owner's locks, with those of one type that touch or overlap joined.
    static func merged(_ locks: [HeldLock]) -> [HeldLock] {
        var out: [HeldLock] = []
        for l in locks.sorted(by: { ($0.type.rawValue, $0.start) < ($1.type.rawValue, $1.start) }) {
            if var last = out.last, last.type == l.type, last.end == UInt64.max || l.start <= last.end + 1 {
                last.end = max(last.end, l.end)
                last.pid = l.pid
                out[out.count - 1] = last
            } else {
                out.append(l)
            }
        }
        return out
    }
}
