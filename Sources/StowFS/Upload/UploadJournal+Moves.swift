import Foundation
import GRDB
public import StorageProtocol

extension UploadJournal {
    /// A folder's move, or an exchange of two files or folders, that the server may have done
    /// while the records it carries still name their old paths. Written (synced) before the
    /// server is asked; its mark is written when the names change here; it goes in the commit
    /// that moves the records (`retarget(_:endingMove:)`). A mount started after a crash in
    /// between asks the server where the moved inode is, and moves the records the move carries
    /// (`StowFileSystem.settleMoves`): without it they went to their old paths, and after an
    /// exchange over the other side's files.
    public struct Move: Sendable, Equatable {
        public var id: Int64
        public var from: Location
        public var to: Location
        public var exchange: Bool
        /// The server's inode of what moves from `from`.
        public var inode: UInt64
        /// The journal's last id given out when the names changed here (`markMove`); nil: they had not.
        public var mark: Int64?

        public init(id: Int64, from: Location, to: Location, exchange: Bool, inode: UInt64, mark: Int64?) {
            self.id = id
            self.from = from
            self.to = to
            self.exchange = exchange
            self.inode = inode
            self.mark = mark
        }

        /// Whether the move carries `record`, one at its old paths: those made before the names
        /// changed here, and those whose content was taken before then (a release under way,
        /// its record written after: `contentAfter`, the last id given when it took the content).
        /// Not one made after, under a new folder of the old name (or the other side of an
        /// exchange, at that name now). Before the mark, nothing of the kind could be made.
        public func carries(_ record: Record) -> Bool {
            guard let mark else { return true }
            return record.id <= mark || (record.contentAfter.map { $0 <= mark } ?? false)
        }

        /// `path` as it is after this move (on the server: the move done).
        public func rebase(_ location: Location) -> Location {
            if location.isWithin(from) { return location.rebased(from: from, to: to) }
            if exchange, location.isWithin(to) { return location.rebased(from: to, to: from) }
            return location
        }

        /// Where `record` goes when the server did the move; nil: where it is.
        public func destination(of record: Record) -> Location? {
            guard carries(record) else { return nil }
            let there = rebase(record.location)
            return there == record.location ? nil : there
        }
    }

    /// Writes a move before the server is asked for it (synced: the server may do it as soon as
    /// the request leaves).
    public func beginMove(from: Location, to: Location, exchange: Bool, inode: UInt64) throws -> Int64 {
        guard let ns = from.namespace, to.namespace == ns else { throw FSError.invalidArgument }
        return try transaction(synced: true) { db, _ in
            try db.execute(
                sql: "INSERT INTO moves(namespace, from_path, to_path, exchange, inode) VALUES (?, ?, ?, ?, ?)",
                arguments: [ns.name, from.path.string, to.path.string, exchange ? 1 : 0, Int64(bitPattern: inode)])
            return db.lastInsertedRowID
        }
    }

    /// The names changed here when the journal had given out ids up to `mark` (synced, before a
    /// close can record a file under a folder made since at the old name).
    public func markMove(_ id: Int64, mark: Int64) throws {
        try transaction(synced: true) { db, _ in
            try db.execute(sql: "UPDATE moves SET mark = ? WHERE id = ?", arguments: [mark, id])
        }
    }

    /// A move that did not happen (the server refused it): forgotten. Not synced: left after a
    /// crash, the next mount finds it not done.
    public func endMove(_ id: Int64) throws {
        try transaction(synced: false) { db, _ in
            try db.execute(sql: "DELETE FROM moves WHERE id = ?", arguments: [id])
        }
    }

    /// At the start, before anything is written: the moves the last mount left without a mark (a
    /// crash before their names changed here) are marked with the last id it gave (one skipped
    /// after it), so that records this mount makes at their old paths before they are settled
    /// are not theirs.
    public func markMovesLeft() throws {
        let unmarked = try db.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM moves WHERE mark IS NULL") ?? 0 }
        guard unmarked > 0 else { return }
        let mark = lastGivenSkippingOne()
        try transaction(synced: true) { db, _ in
            try db.execute(sql: "UPDATE moves SET mark = ? WHERE mark IS NULL", arguments: [mark])
        }
    }

    /// The moves left unfinished, oldest first. A damaged row (a path that does not parse) is
    /// forgotten: its records stay where they are, as before moves were journaled.
    public func moves() throws -> [Move] {
        try transaction(synced: false) { db, _ in
            var out: [Move] = []
            var damaged: [Int64] = []
            for row in try Row.fetchAll(db, sql: "SELECT * FROM moves ORDER BY id") {
                guard let id: Int64 = Self.value(row, "id") else { continue }
                guard let ns = (Self.value(row, "namespace") as String?).flatMap({ try? Namespace($0) }),
                    let from = (Self.value(row, "from_path") as String?).flatMap({ try? StoragePath($0) }),
                    let to = (Self.value(row, "to_path") as String?).flatMap({ try? StoragePath($0) }),
                    let inode: Int64 = Self.value(row, "inode")
                else {
                    damaged.append(id)
                    continue
                }
                out.append(
                    Move(
                        id: id, from: Location(namespace: ns, path: from), to: Location(namespace: ns, path: to),
                        exchange: (Self.value(row, "exchange") as Int64?) == 1, inode: UInt64(bitPattern: inode), mark: Self.value(row, "mark")))
            }
            for id in damaged { try db.execute(sql: "DELETE FROM moves WHERE id = ?", arguments: [id]) }
            return out
        }
    }
}
