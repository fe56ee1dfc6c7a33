import Foundation
import GRDB
public import StorageProtocol

/// Locks on SQLite (`LockLedger`): a record per lock set, changed by compare-and-swap on its
/// version, and the sessions with their leases. One server: its clock is the leases' clock.
extension SQLiteMetadataStore {
    static func locksMigration(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE lock_sets (
                    namespace TEXT NOT NULL,
                    ino INTEGER NOT NULL,
                    kind TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    locks TEXT NOT NULL,
                    PRIMARY KEY (namespace, ino, kind)
                ) WITHOUT ROWID;
                CREATE TABLE lock_sessions (
                    namespace TEXT NOT NULL,
                    id TEXT NOT NULL,
                    expires_ns INTEGER NOT NULL,
                    PRIMARY KEY (namespace, id)
                ) WITHOUT ROWID;
                """)
    }

    public func lockSet(_ key: LockSetKey) async throws -> LockSetState {
        try await pool.read { db in
            guard
                let row = try Row.fetchOne(
                    try db.cachedStatement(sql: "SELECT version, locks FROM lock_sets WHERE namespace = ? AND ino = ? AND kind = ?"),
                    arguments: [key.namespace.name, Int64(key.ino), key.kind.rawValue])
            else { return LockSetState(version: 0, locks: []) }
            let locks = try LockSetCoding.decode(row["locks"])
            let sessions = Set(locks.map(\.session))
            var alive = Set<String>()
            let now = Timestamp.nowNanoseconds()
            for id in sessions {
                let expires = try Int64.fetchOne(
                    try db.cachedStatement(sql: "SELECT expires_ns FROM lock_sessions WHERE namespace = ? AND id = ?"), arguments: [key.namespace.name, id])
                if let expires, expires > now { alive.insert(id) }
            }
            return LockSetState(version: row["version"], locks: locks.filter { alive.contains($0.session) })
        }
    }

    /// Starts session `id` of `ns`, or moves its end, to `expires`.
    static func startSession(_ db: Database, _ ns: Namespace, id: String, expires: Int64) throws {
        try db.executeCached(
            sql: "INSERT INTO lock_sessions(namespace, id, expires_ns) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET expires_ns = excluded.expires_ns",
            arguments: [ns.name, id, expires])
    }

    /// A set for `key` where none is kept; false when one is.
    static func insertLockSet(_ db: Database, _ key: LockSetKey, _ locks: String) throws -> Bool {
        try db.executeCached(
            sql: "INSERT INTO lock_sets(namespace, ino, kind, version, locks) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            arguments: [key.namespace.name, Int64(key.ino), key.kind.rawValue, LockSetCoding.newVersion(), locks])
        return db.changesCount == 1
    }

    public func replaceLockSet(_ key: LockSetKey, expected: Int64, locks: [HeldLock]) async throws -> Bool {
        let text = LockSetCoding.encode(locks)
        return try await write { db in
            let args: StatementArguments = [key.namespace.name, Int64(key.ino), key.kind.rawValue]
            if expected == 0 {
                return try Self.insertLockSet(db, key, text)
            } else if locks.isEmpty {
                try db.executeCached(sql: "DELETE FROM lock_sets WHERE namespace = ? AND ino = ? AND kind = ? AND version = ?", arguments: args + [expected])
            } else {
                try db.executeCached(
                    sql: "UPDATE lock_sets SET version = ?, locks = ? WHERE namespace = ? AND ino = ? AND kind = ? AND version = ?",
                    arguments: [LockSetCoding.newVersion(), text] + args + [expected])
            }
            return db.changesCount == 1
        }
    }

    public func renewLockSession(_ ns: Namespace, id: String, leaseNs: Int64) async throws -> Bool {
        try await write { db in
            let now = Timestamp.nowNanoseconds()
            let expires = try Int64.fetchOne(
                try db.cachedStatement(sql: "SELECT expires_ns FROM lock_sessions WHERE namespace = ? AND id = ?"), arguments: [ns.name, id])
            try Self.startSession(db, ns, id: id, expires: now + leaseNs)
            return (expires ?? 0) > now
        }
    }

    public func endLockSession(_ ns: Namespace, id: String) async throws {
        try await write { db in
            try db.executeCached(sql: "DELETE FROM lock_sessions WHERE namespace = ? AND id = ?", arguments: [ns.name, id])
        }
    }

    public func trimLocks(graceNs: Int64) async throws -> Int {
        let now = Timestamp.nowNanoseconds()
        // Sets first, while their sessions' records still tell which ended.
        let sets = try await pool.read { db in
            try Row.fetchAll(try db.cachedStatement(sql: "SELECT namespace, ino, kind, version, locks FROM lock_sets LIMIT 1000"))
                .map { ($0["namespace"] as String, $0["ino"] as Int64, $0["kind"] as String, $0["version"] as Int64, $0["locks"] as String) }
        }
        var gone = 0
        for (namespace, ino, kind, version, _) in sets {
            guard let ns = try? Namespace(namespace), let kind = LockKind(rawValue: kind) else { continue }
            let key = LockSetKey(namespace: ns, ino: UInt64(ino), kind: kind)
            let live = try await lockSet(key)
            if live.locks.isEmpty, live.version == version, try await replaceLockSet(key, expected: version, locks: []) { gone += 1 }
        }
        let trimmedSets = gone
        return try await write { db in
            try db.executeCached(sql: "DELETE FROM lock_sessions WHERE expires_ns < ?", arguments: [now - graceNs])
            return trimmedSets + db.changesCount
        }
    }
}
