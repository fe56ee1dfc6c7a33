import PostgresNIO
public import StorageProtocol

/// The change feed on PostgreSQL (`PostgresSchema.changeFeed`). Transaction ids are not commit
/// order: a transaction with a smaller id may commit after one with a larger. So a reader takes
/// only the changes of transactions below the oldest one still running (`pg_snapshot_xmin`): those
/// have all ended, and every transaction still to commit has a larger id — no change behind the
/// cursor can appear later. The cursor is (transaction id, change id). A long transaction anywhere
/// in the database holds the feed back until it ends (then the mounts' TTLs still bound staleness).
extension PostgresMetadataStore {
    /// One statement, so one snapshot: its xmin bounds the changes read (every transaction below
    /// it has ended) and its xmax is the fence.
    public func changes(_ ns: Namespace, after cursor: ChangeCursor?, limit: Int) async throws -> ChangeBatch {
        let wanted = Int64(max(1, limit))
        // Without a cursor only the head is wanted: a position past every change reads none.
        let from = cursor ?? ChangeCursor(major: .max, minor: .max)
        let found = try await rows(
            """
            SELECT h.xmin, h.xmax, t.upto_xid, t.upto_id, c.id, c.xid, c.kind, c.parent, c.name, c.ino, c.removed, c.origin
            FROM (SELECT pg_snapshot_xmin(q.snap)::text::bigint AS xmin, pg_snapshot_xmax(q.snap)::text::bigint AS xmax
                  FROM (SELECT pg_current_snapshot() AS snap) AS q) AS h
            LEFT JOIN change_trim t ON t.id = 1
            LEFT JOIN LATERAL (
                SELECT id, xid, kind, parent, name, ino, removed, origin FROM changes
                WHERE namespace = \(ns.name) AND (xid, id) > (\(from.major), \(from.minor)) AND xid < h.xmin
                ORDER BY xid, id LIMIT \(wanted)) AS c ON true
            ORDER BY c.xid, c.id
            """)
        guard let h = found.first else { throw StoreError.unavailable("the database answered no snapshot") }
        let xmin = try h["xmin"].decode(Int64.self), xmax = try h["xmax"].decode(Int64.self)
        // Every transaction that committed before this snapshot has a smaller id than its xmax; the
        // head (xmin) passes it once every transaction that began before has ended.
        let headCursor = ChangeCursor(major: xmin, minor: 0), fence = ChangeCursor(major: xmax, minor: 0)
        guard let cursor else { return ChangeBatch(changes: [], cursor: headCursor, reset: false, fence: fence) }
        // Past the next transaction id: not a cursor of this database.
        if cursor.major > xmax { return ChangeBatch(changes: [], cursor: headCursor, reset: true, fence: fence) }
        if let uptoXid = try h["upto_xid"].decode(Int64?.self), let uptoID = try h["upto_id"].decode(Int64?.self),
            cursor < ChangeCursor(major: uptoXid, minor: uptoID)
        {
            return ChangeBatch(changes: [], cursor: headCursor, reset: true, fence: fence)
        }
        var changes: [ChangeRecord] = []
        var last = cursor
        for row in found {
            guard let id = try row["id"].decode(Int64?.self) else { continue }
            last = ChangeCursor(major: try row["xid"].decode(Int64.self), minor: id)
            changes.append(
                SQLiteMetadataStore.changeRecord(
                    cursor: last, kind: Int64(try row["kind"].decode(Int16.self)), parent: try row["parent"].decode(Int64?.self),
                    name: try row["name"].decode(String?.self), ino: try row["ino"].decode(Int64.self), removed: try row["removed"].decode(Bool.self),
                    origin: try row["origin"].decode(String?.self)))
        }
        // All of them below xmin were read: the reader stands at xmin (never moving back).
        let next = Int64(changes.count) >= wanted ? last : max(last, headCursor)
        return ChangeBatch(changes: changes, cursor: next, reset: false, fence: fence)
    }

    public func recordRecall(_ ns: Namespace, folder ino: UInt64) async throws {
        _ = try await rows(
            "INSERT INTO changes(namespace, kind, ino, removed, origin) VALUES (\(ns.name), 3, \(Int64(ino)), false, \(ChangeOrigin.current))")
    }

    public func trimChanges(before nanoseconds: Int64) async throws -> Int {
        let r = try await rows("SELECT stow_trim_changes(\(nanoseconds)) AS n")
        return Int(try r.first?["n"].decode(Int64.self) ?? 0)
    }
}
