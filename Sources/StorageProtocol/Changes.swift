/// The change feed of a namespace: every committed change to its tree, in inode terms, for
/// clients that cache it (mounts) to drop what changed.
///
/// A change is one of:
/// - `entry`: the name `name` in folder `parent` was made, removed, or pointed at another inode
///   (`ino` is the inode it names after the change, or before it for a removal — `removed`);
/// - `inode`: inode `ino` changed (content, size, attributes, tags, metadata, link count, times)
///   or, with `removed`, went away.
///
/// A rename is two `entry` changes (the old name removed, the new one made) in one transaction.
/// Clients do not apply changes: they forget what the change names and ask again.
public struct ChangeRecord: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        case entry
        case inode
        /// The namespace was deleted (and may have been made again): forget everything of it.
        case namespace
        /// Another client waits to create a name in folder `ino` exclusively: a mount holding
        /// that folder's `names` lease stores what it made there and lets the lease go.
        case recall
    }

    /// Where the feed stands after this change (opaque).
    public var cursor: String
    public var kind: Kind
    /// The folder of an `entry` change.
    public var parent: UInt64?
    /// The name of an `entry` change (bytes, as UTF-8).
    public var name: String?
    public var ino: UInt64
    public var removed: Bool
    /// The `Stow-Origin` of the request that made the change, if it named one.
    public var origin: String?

    public init(cursor: String, kind: Kind, parent: UInt64?, name: String?, ino: UInt64, removed: Bool, origin: String?) {
        self.cursor = cursor
        self.kind = kind
        self.parent = parent
        self.name = name
        self.ino = ino
        self.removed = removed
        self.origin = origin
    }
}

/// `GET …/namespaces/{ns}/changes?since=CURSOR`: the changes after the cursor, in commit order,
/// and where the feed stands after them.
public struct ChangesResponse: Codable, Sendable, Equatable {
    /// Give it as `since` next time. Without `since`, the feed's head: nothing before it is sent.
    public var cursor: String
    /// The cursor is older than the oldest change kept (or not one of this server's): changes were
    /// missed, so a client must forget everything it cached of the namespace. `cursor` is the head.
    public var reset: Bool
    public var changes: [ChangeRecord]

    public init(cursor: String, reset: Bool, changes: [ChangeRecord]) {
        self.cursor = cursor
        self.reset = reset
        self.changes = changes
    }
}

/// A position in a change feed. SQLite (one writer): the change's sequence number, in commit
/// order. PostgreSQL: the transaction id and the change's id in it, read only below the oldest
/// transaction still running (`pg_snapshot_xmin`), so a change that commits late is never skipped.
public struct ChangeCursor: Sendable, Equatable, Comparable {
    public var major: Int64
    public var minor: Int64

    public init(major: Int64, minor: Int64) {
        self.major = major
        self.minor = minor
    }

    /// `c<major>.<minor>`; nil for anything else.
    public init?(_ text: String) {
        guard text.utf8.count <= 48, text.hasPrefix("c") else { return nil }
        let parts = text.dropFirst().split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let a = HTTPNumber.nonNegative(parts[0]), let b = HTTPNumber.nonNegative(parts[1]) else { return nil }
        major = a
        minor = b
    }

    public var text: String { "c\(major).\(minor)" }

    public static func < (a: ChangeCursor, b: ChangeCursor) -> Bool { (a.major, a.minor) < (b.major, b.minor) }
}
