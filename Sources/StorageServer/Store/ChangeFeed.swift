public import StorageProtocol
import Synchronization

/// Who makes the changes of the request being served: the `Stow-Origin` header, checked
/// (`ChangeOrigin.validated`), or nil. Set for the request by `OriginMiddleware`; the metadata
/// stores record it with each change, so a client can tell its own changes in the feed.
public enum ChangeOrigin {
    @TaskLocal public static var current: String?

    /// The header's value when it is 1–64 of `A-Z a-z 0-9 . _ -`, else nil (ignored, not refused).
    public static func validated(_ value: String?) -> String? {
        guard let value, (1...64).contains(value.utf8.count) else { return nil }
        let ok = value.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2E || b == 0x5F || b == 0x2D
        }
        return ok ? value : nil
    }
}

/// What a read of the change feed found.
public struct ChangeBatch: Sendable, Equatable {
    public var changes: [ChangeRecord]
    /// Where the reader stands after them.
    public var cursor: ChangeCursor
    /// The cursor asked from is older than the oldest change kept, or is not one of this store's:
    /// changes may have been missed. `cursor` is then the head, and `changes` is empty.
    public var reset: Bool
    /// A position every change committed before this read began is at or before (see
    /// `ChangeFeed.changeFence`): read with the changes, so one read serves a lock's grant.
    public var fence: ChangeCursor

    public init(changes: [ChangeRecord], cursor: ChangeCursor, reset: Bool, fence: ChangeCursor) {
        self.changes = changes
        self.cursor = cursor
        self.reset = reset
        self.fence = fence
    }
}

/// The change feed of a metadata store: every committed change to entries and inodes is recorded
/// in the transaction that makes it (by triggers, so that no mutation can forget to), with the
/// request's `ChangeOrigin`.
public protocol ChangeFeed: Sendable {
    /// The changes of `ns` after `cursor`, in order, at most `limit`; with no cursor, none and the
    /// feed's head.
    func changes(_ ns: Namespace, after cursor: ChangeCursor?, limit: Int) async throws -> ChangeBatch
    /// A position every change committed so far is at or before: a reader whose cursor reached it
    /// has read all of them. (SQLite: the head, where one writer commits in order. PostgreSQL: the
    /// next transaction id, which the head passes once every transaction that began before has
    /// ended.) Each batch of `changes` carries one too.
    func changeFence(_ ns: Namespace) async throws -> ChangeCursor
    /// Records a `recall` of folder `ino`'s `names` lease (with the request's origin), in commit order.
    func recordRecall(_ ns: Namespace, folder ino: UInt64) async throws
    /// Drops the changes recorded before `nanoseconds` (a Unix time) that are behind the feed's
    /// head (PostgreSQL: those of transactions older than the oldest still running, so that the
    /// head a reset reader is given is never itself before a dropped change); a cursor from before
    /// the last change dropped is answered `reset`. Returns how many went.
    func trimChanges(before nanoseconds: Int64) async throws -> Int
}

extension ChangeFeed {
    public func changeFence(_ ns: Namespace) async throws -> ChangeCursor {
        try await changes(ns, after: nil, limit: 1).fence
    }
}

/// The origin of the SQLite write transaction running now (one writer at a time).
final class WriteOrigin: Sendable {
    private let value = Mutex<String?>(nil)
    func set(_ origin: String?) { value.withLock { $0 = origin } }
    var current: String? { value.withLock { $0 } }
}
