import Foundation
import GRDB
public import StorageProtocol

/// The change feed on SQLite: a `changes` table written by triggers on `entries` and `inodes`, in
/// the transaction of the change. SQLite has one writer, so the sequence number is commit order.
/// `stow_origin()` and `stow_now()` are functions of each connection (`addChangeFunctions`).
extension SQLiteMetadataStore {
    static func addChangeFunctions(_ db: Database, origin: WriteOrigin) {
        db.add(function: DatabaseFunction("stow_origin", argumentCount: 0, pure: false) { _ in origin.current })
        db.add(function: DatabaseFunction("stow_now", argumentCount: 0, pure: false) { _ in Timestamp.nowNanoseconds() })
    }

    /// kind: 0 an entry, 1 an inode, 2 the namespace was deleted, 3 a recall (`recordRecall`).
    static func changeFeedMigration(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE changes (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    namespace TEXT NOT NULL,
                    kind INTEGER NOT NULL,
                    parent INTEGER,
                    name TEXT,
                    ino INTEGER NOT NULL,
                    removed INTEGER NOT NULL,
                    origin TEXT,
                    at_ns INTEGER NOT NULL
                );
                CREATE INDEX changes_by_namespace ON changes(namespace, seq);
                CREATE INDEX changes_by_time ON changes(at_ns);
                CREATE TABLE change_trim (id INTEGER PRIMARY KEY CHECK (id = 1), upto INTEGER NOT NULL);
                CREATE TRIGGER changes_entry_made AFTER INSERT ON entries BEGIN
                    INSERT INTO changes(namespace, kind, parent, name, ino, removed, origin, at_ns)
                    SELECT namespace, 0, NEW.parent, NEW.name, NEW.ino, 0, stow_origin(), stow_now() FROM inodes WHERE ino = NEW.parent;
                END;
                CREATE TRIGGER changes_entry_repointed AFTER UPDATE ON entries BEGIN
                    INSERT INTO changes(namespace, kind, parent, name, ino, removed, origin, at_ns)
                    SELECT namespace, 0, NEW.parent, NEW.name, NEW.ino, 0, stow_origin(), stow_now() FROM inodes WHERE ino = NEW.parent;
                END;
                CREATE TRIGGER changes_entry_removed AFTER DELETE ON entries BEGIN
                    INSERT INTO changes(namespace, kind, parent, name, ino, removed, origin, at_ns)
                    SELECT namespace, 0, OLD.parent, OLD.name, OLD.ino, 1, stow_origin(), stow_now() FROM inodes WHERE ino = OLD.parent;
                END;
                CREATE TRIGGER changes_inode_changed AFTER UPDATE ON inodes BEGIN
                    INSERT INTO changes(namespace, kind, ino, removed, origin, at_ns) VALUES (NEW.namespace, 1, NEW.ino, 0, stow_origin(), stow_now());
                END;
                CREATE TRIGGER changes_inode_removed AFTER DELETE ON inodes BEGIN
                    INSERT INTO changes(namespace, kind, ino, removed, origin, at_ns) VALUES (OLD.namespace, 1, OLD.ino, 1, stow_origin(), stow_now());
                END;
                -- A deleted namespace's changes are replaced by one that says so (a namespace made
                -- again under the name is another tree: its readers must forget everything).
                CREATE TRIGGER changes_namespace_removed AFTER DELETE ON namespaces BEGIN
                    DELETE FROM changes WHERE namespace = OLD.name;
                    INSERT INTO changes(namespace, kind, ino, removed, origin, at_ns) VALUES (OLD.name, 2, 0, 1, stow_origin(), stow_now());
                END;
                """)
    }

    public func changes(_ ns: Namespace, after cursor: ChangeCursor?, limit: Int) async throws -> ChangeBatch {
        try await pool.read { db in
            let head = try Int64.fetchOne(try db.cachedStatement(sql: "SELECT seq FROM sqlite_sequence WHERE name = 'changes'")) ?? 0
            let headCursor = ChangeCursor(major: head, minor: 0)
            guard let cursor else { return ChangeBatch(changes: [], cursor: headCursor, reset: false, fence: headCursor) }
            let trimmed = try Int64.fetchOne(try db.cachedStatement(sql: "SELECT upto FROM change_trim WHERE id = 1")) ?? 0
            if cursor.major < trimmed || cursor.major > head || cursor.minor != 0 {
                return ChangeBatch(changes: [], cursor: headCursor, reset: true, fence: headCursor)
            }
            let rows = try Row.fetchAll(
                try db.cachedStatement(
                    sql: "SELECT seq, kind, parent, name, ino, removed, origin FROM changes WHERE namespace = ? AND seq > ? ORDER BY seq LIMIT ?"),
                arguments: [ns.name, cursor.major, max(1, limit)])
            let changes = rows.map { row -> ChangeRecord in
                let seq: Int64 = row["seq"]
                return Self.changeRecord(
                    cursor: ChangeCursor(major: seq, minor: 0), kind: row["kind"], parent: row["parent"], name: row["name"], ino: row["ino"],
                    removed: row["removed"], origin: row["origin"])
            }
            let next = rows.count >= max(1, limit) ? ChangeCursor(major: rows.last!["seq"], minor: 0) : headCursor
            return ChangeBatch(changes: changes, cursor: next, reset: false, fence: headCursor)
        }
    }

    public func recordRecall(_ ns: Namespace, folder ino: UInt64) async throws {
        let origin = ChangeOrigin.current
        try await write { db in
            try db.executeCached(
                sql: "INSERT INTO changes(namespace, kind, ino, removed, origin, at_ns) VALUES (?, 3, ?, 0, ?, ?)",
                arguments: [ns.name, Int64(ino), origin, Timestamp.nowNanoseconds()])
        }
    }

    public func trimChanges(before nanoseconds: Int64) async throws -> Int {
        try await write { db in
            guard let upto = try Int64.fetchOne(try db.cachedStatement(sql: "SELECT max(seq) FROM changes WHERE at_ns < ?"), arguments: [nanoseconds])
            else { return 0 }
            try db.executeCached(sql: "DELETE FROM changes WHERE seq <= ?", arguments: [upto])
            let gone = db.changesCount
            try db.executeCached(
                sql: "INSERT INTO change_trim(id, upto) VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET upto = max(upto, excluded.upto)", arguments: [upto])
            return gone
        }
    }

    /// A record of the feed from a row's columns (the kinds of `changeFeedMigration`).
    static func changeRecord(cursor: ChangeCursor, kind: Int64, parent: Int64?, name: String?, ino: Int64, removed: Bool, origin: String?) -> ChangeRecord {
        ChangeRecord(
            cursor: cursor.text, kind: kind == 0 ? .entry : kind == 1 ? .inode : kind == 3 ? .recall : .namespace, parent: parent.map { UInt64($0) }, name: name,
            ino: UInt64(ino), removed: removed, origin: origin)
    }
}
