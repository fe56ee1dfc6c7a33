import Foundation
import PostgresNIO
public import StorageProtocol

/// Locks on PostgreSQL (`LockLedger`): each call one statement; leases on the database's clock
/// (`stow_now()`), one clock for every replica.
extension PostgresMetadataStore {
    public func lockSet(_ key: LockSetKey) async throws -> LockSetState {
        let found = try await rows(
            """
            SELECT l.version, l.locks,
                   ARRAY(SELECT s.id FROM lock_sessions s
                         WHERE s.namespace = l.namespace AND s.expires_ns > stow_now()
                           AND s.id IN (SELECT jsonb_array_elements(l.locks::jsonb)->>'session')) AS alive
            FROM lock_sets l WHERE l.namespace = \(key.namespace.name) AND l.ino = \(Int64(key.ino)) AND l.kind = \(key.kind.rawValue)
            """)
        guard let row = found.first else { return LockSetState(version: 0, locks: []) }
        let locks = try LockSetCoding.decode(try row["locks"].decode(String.self))
        let alive = Set(try row["alive"].decode([String].self))
        return LockSetState(version: try row["version"].decode(Int64.self), locks: locks.filter { alive.contains($0.session) })
    }

    public func replaceLockSet(_ key: LockSetKey, expected: Int64, locks: [HeldLock]) async throws -> Bool {
        let ns = key.namespace.name, ino = Int64(key.ino), kind = key.kind.rawValue
        let text = LockSetCoding.encode(locks), version = LockSetCoding.newVersion()
        let changed: [PostgresRandomAccessRow]
        if expected == 0 {
            changed = try await rows(
                """
                INSERT INTO lock_sets(namespace, ino, kind, version, locks) VALUES (\(ns), \(ino), \(kind), \(version), \(text))
                ON CONFLICT DO NOTHING RETURNING 1 AS one
                """)
        } else if locks.isEmpty {
            changed = try await rows(
                "DELETE FROM lock_sets WHERE namespace = \(ns) AND ino = \(ino) AND kind = \(kind) AND version = \(expected) RETURNING 1 AS one")
        } else {
            changed = try await rows(
                """
                UPDATE lock_sets SET version = \(version), locks = \(text)
                WHERE namespace = \(ns) AND ino = \(ino) AND kind = \(kind) AND version = \(expected) RETURNING 1 AS one
                """)
        }
        return changed.count == 1
    }

    public func renewLockSession(_ ns: Namespace, id: String, leaseNs: Int64) async throws -> Bool {
        let r = try await rows(
            """
            WITH old AS (SELECT expires_ns FROM lock_sessions WHERE namespace = \(ns.name) AND id = \(id)),
                 up AS (INSERT INTO lock_sessions(namespace, id, expires_ns) VALUES (\(ns.name), \(id), stow_now() + \(leaseNs))
                        ON CONFLICT (namespace, id) DO UPDATE SET expires_ns = EXCLUDED.expires_ns RETURNING 1)
            SELECT coalesce((SELECT expires_ns > stow_now() FROM old), false) AS existed, (SELECT count(*) FROM up) AS n
            """)
        return try r.first?["existed"].decode(Bool.self) ?? false
    }

    public func endLockSession(_ ns: Namespace, id: String) async throws {
        _ = try await rows("DELETE FROM lock_sessions WHERE namespace = \(ns.name) AND id = \(id)")
    }

    public func trimLocks(graceNs: Int64) async throws -> Int {
        // Sets none of whose locks belongs to a live session (or that hold none).
        let dead = try await rows(
            """
            DELETE FROM lock_sets l
            WHERE NOT EXISTS (SELECT 1 FROM lock_sessions s
                              WHERE s.namespace = l.namespace AND s.expires_ns > stow_now()
                                AND s.id IN (SELECT jsonb_array_elements(l.locks::jsonb)->>'session'))
            RETURNING 1 AS one
            """)
        let sessions = try await rows("DELETE FROM lock_sessions WHERE expires_ns < stow_now() - \(graceNs) RETURNING 1 AS one")
        return dead.count + sessions.count
    }
}
