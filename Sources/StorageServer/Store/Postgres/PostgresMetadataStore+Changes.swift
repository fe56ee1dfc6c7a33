import PostgresNIO
public import StorageProtocol

/// The change feed on PostgreSQL (`PostgresSchema.changeFeed`). Transaction ids are not commit
/// order: a transaction with a smaller id may commit after one with a larger. So a reader takes
/// only the changes of transactions below the oldest one still running (`pg_snapshot_xmin`): those
/// have all ended, and every transaction still to commit has a larger id — no change behind the
/// cursor can appear later. The cursor is (transaction id, change id). A long transaction anywhere
/// in the database holds the feed back until it ends (then the mounts' TTLs still bound staleness).
extension PostgresMetadataStore {
    public func changes(_ ns: Namespace, after cursor: ChangeCursor?, limit: Int) async throws -> ChangeBatch {
        let head = try await rows(
            """
            SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin, pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax,
                t.upto_xid, t.upto_id FROM (SELECT 1) AS one LEFT JOIN change_trim t ON t.id = 1
            """)
        guard let h = head.first else { throw StoreError.unavailable("the database answered no snapshot") }
        let xmin = try h["xmin"].decode(Int64.self), xmax = try h["xmax"].decode(Int64.self)
        let headCursor = ChangeCursor(major: xmin, minor: 0)
        guard let cursor else { return ChangeBatch(changes: [], cursor: headCursor, reset: false) }
        // Past the next transaction id: not a cursor of this database.
        if cursor.major > xmax { return ChangeBatch(changes: [], cursor: headCursor, reset: true) }
        if let uptoXid = try h["upto_xid"].decode(Int64?.self), let uptoID = try h["upto_id"].decode(Int64?.self),
            cursor < ChangeCursor(major: uptoXid, minor: uptoID)
        {
            return ChangeBatch(changes: [], cursor: headCursor, reset: true)
        }
        let wanted = Int64(max(1, limit))
        let found = try await rows(
            """
            SELECT id, xid, kind, parent, name, ino, removed, origin FROM changes
            WHERE namespace = \(ns.name) AND (xid, id) > (\(cursor.major), \(cursor.minor)) AND xid < \(xmin)
            ORDER BY xid, id LIMIT \(wanted)
            """)
        var changes: [ChangeRecord] = []
        var last = cursor
        for row in found {
            last = ChangeCursor(major: try row["xid"].decode(Int64.self), minor: try row["id"].decode(Int64.self))
            changes.append(
                SQLiteMetadataStore.changeRecord(
                    cursor: last, kind: Int64(try row["kind"].decode(Int16.self)), parent: try row["parent"].decode(Int64?.self),
                    name: try row["name"].decode(String?.self), ino: try row["ino"].decode(Int64.self), removed: try row["removed"].decode(Bool.self),
                    origin: try row["origin"].decode(String?.self)))
        }
        // All of them below xmin were read: the reader stands at xmin (never moving back).
        let next = Int64(found.count) >= wanted ? last : max(last, headCursor)
        return ChangeBatch(changes: changes, cursor: next, reset: false)
    }

    public func recordRecall(_ ns: Namespace, folder ino: UInt64) async throws {
        _ = try await rows(
            "INSERT INTO changes(namespace, kind, ino, removed, origin) VALUES (\(ns.name), 3, \(Int64(ino)), false, \(ChangeOrigin.current))")
    }

    public func trimChanges(before nanoseconds: Int64) async throws -> Int {
        let r = try await rows("SELECT stow_trim_changes(\(nanoseconds)) AS n")
        return Int(try r.first?["n"].decode(Int64.self) ?? 0)
    }

    /// The next transaction id: every transaction that committed before has a smaller one, and
    /// the head (`pg_snapshot_xmin`) passes it once every transaction that began before has ended.
    public func changeFence(_ ns: Namespace) async throws -> ChangeCursor {
        let r = try await rows("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax")
        guard let xmax = try r.first?["xmax"].decode(Int64.self) else { throw StoreError.unavailable("the database answered no snapshot") }
        return ChangeCursor(major: xmax, minor: 0)
    }
}
