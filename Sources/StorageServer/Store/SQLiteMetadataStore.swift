public import Foundation
import GRDB
import Synchronization
public import StorageProtocol

/// The SQLite metadata store (GRDB, WAL mode, `synchronous=FULL`: a commit is on disk when it returns).
///
/// Schema (see `migrator`): `namespaces`, `inodes`, `entries` (parent, name → inode),
/// `uploads`, `dead_blobs` and `inline_blobs` (the bytes of small files, see `publishInline`). Inode numbers start at 16 and are never reused, so clients may
/// keep them across remounts.
///
/// LOCK ORDERING: none in Swift; SQLite serializes writers, and every method is one transaction.
public final class SQLiteMetadataStore: MetadataStore {
    let pool: DatabasePool
    /// How long a superseded or deleted blob is kept for reads that already hold it.
    let blobGraceNs: Int64
    /// The `ChangeOrigin` of the write transaction running now (the change feed's triggers read it
    /// through `stow_origin()`). GUARDED_BY(pool's writer): set at the start of each write.
    let writeOrigin = WriteOrigin()
    /// How many `writeEach` batches were done again with a savepoint per item (one item failed).
    private let carefulPasses = Atomic<Int>(0)
    /// How many batches so far were done again item by item because one of their items failed (for tests).
    public var carefulBatches: Int { carefulPasses.load(ordering: .relaxed) }

    /// Opens (creating if needed) the database at `path`.
    public init(path: String, blobGraceSeconds: Int64) throws {
        var config = Configuration()
        config.busyMode = .timeout(30)
        let origin = writeOrigin
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA foreign_keys = OFF")
            Self.addChangeFunctions(db, origin: origin)
            Self.addSearchFunctions(db)
        }
        pool = try DatabasePool(path: path, configuration: config)
        // After the pool exists: GRDB sets the writer to `synchronous = NORMAL` when it turns WAL on
        // (after `prepareDatabase`), and NORMAL lets a power cut take back a commit that already
        // answered. Checked, so that no later GRDB can quietly undo it.
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            guard try Int.fetchOne(try db.cachedStatement(sql: "PRAGMA synchronous")) == 2 else {
                throw DatabaseError(message: "SQLite refused synchronous = FULL for \(path)")
            }
        }
        blobGraceNs = blobGraceSeconds * 1_000_000_000
        try Self.migrator.migrate(pool)
    }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE namespaces (
                        name TEXT PRIMARY KEY NOT NULL,
                        root INTEGER NOT NULL,
                        created_ns INTEGER NOT NULL
                    );
                    CREATE TABLE inodes (
                        ino INTEGER PRIMARY KEY AUTOINCREMENT,
                        namespace TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        mode INTEGER,
                        uid INTEGER,
                        gid INTEGER,
                        nlink INTEGER NOT NULL DEFAULT 1,
                        size INTEGER NOT NULL DEFAULT 0,
                        blob TEXT,
                        sha256 TEXT,
                        content_type TEXT,
                        tags TEXT NOT NULL DEFAULT '[]',
                        metadata TEXT NOT NULL DEFAULT '{}',
                        public INTEGER NOT NULL DEFAULT 0,
                        target TEXT,
                        rdev INTEGER,
                        atime_ns INTEGER NOT NULL,
                        mtime_ns INTEGER NOT NULL,
                        ctime_ns INTEGER NOT NULL,
                        btime_ns INTEGER NOT NULL
                    );
                    CREATE INDEX inodes_by_namespace ON inodes(namespace);
                    CREATE INDEX inodes_by_blob ON inodes(blob) WHERE blob IS NOT NULL;
                    INSERT INTO sqlite_sequence(name, seq) VALUES ('inodes', 15);
                    CREATE TABLE entries (
                        parent INTEGER NOT NULL,
                        name TEXT NOT NULL,
                        ino INTEGER NOT NULL,
                        PRIMARY KEY (parent, name)
                    ) WITHOUT ROWID;
                    CREATE INDEX entries_by_ino ON entries(ino);
                    CREATE TABLE uploads (
                        id TEXT PRIMARY KEY NOT NULL,
                        namespace TEXT NOT NULL,
                        path TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        content_type TEXT NOT NULL,
                        tags TEXT,
                        params TEXT NOT NULL,
                        created_ns INTEGER NOT NULL,
                        expires_at INTEGER NOT NULL,
                        state TEXT NOT NULL,
                        result_ino INTEGER,
                        auto_complete INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX uploads_by_expiry ON uploads(expires_at);
                    CREATE TABLE dead_blobs (
                        blob TEXT PRIMARY KEY NOT NULL,
                        delete_after INTEGER NOT NULL
                    );
                    """
            )
        }
        // Small files' bytes live here, written in the transaction that records the file: one
        // commit instead of a staging file created, fsynced, renamed and its folder fsynced (see
        // docs/architecture.md, "Small files inline"). The id is the inode's `blob`, as for files.
        m.registerMigration("v2 inline blobs") { db in
            try db.execute(sql: "CREATE TABLE inline_blobs (id TEXT PRIMARY KEY NOT NULL, data BLOB NOT NULL)")
        }
        // Uploads staged in an object store's multipart uploads (`StagingLedger`, `S3BlobStore`).
        m.registerMigration("v3 staging ledger") { db in
            try db.execute(
                sql: """
                    CREATE TABLE upload_staging (
                        upload_id TEXT PRIMARY KEY NOT NULL,
                        s3_upload_id TEXT NOT NULL,
                        part_size INTEGER NOT NULL,
                        tail_key TEXT,
                        tail_size INTEGER NOT NULL DEFAULT 0,
                        version INTEGER NOT NULL DEFAULT 0,
                        begun_ns INTEGER NOT NULL
                    );
                    CREATE TABLE upload_parts (
                        upload_id TEXT NOT NULL,
                        number INTEGER NOT NULL,
                        size INTEGER NOT NULL,
                        etag TEXT NOT NULL,
                        PRIMARY KEY (upload_id, number)
                    ) WITHOUT ROWID;
                    """)
        }
        m.registerMigration("v4 change feed") { db in try Self.changeFeedMigration(db) }
        m.registerMigration("v5 locks") { db in try Self.locksMigration(db) }
        m.registerMigration("v6 search") { db in try Self.searchMigration(db) }
        return m
    }

    /// A write transaction that records who made its changes (`ChangeOrigin.current`).
    func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let origin = ChangeOrigin.current, holder = writeOrigin
        return try await pool.write { db in
            holder.set(origin)
            defer { holder.set(nil) }
            return try body(db)
        }
    }

    /// Each item in one transaction (one commit), each stored or refused on its own; the results
    /// in the items' order.
    ///
    /// Tried first with no savepoint per item: a savepoint keeps the first image of every page it
    /// changes, and past 64 KiB SQLite spills those to a temporary file (`etilqs_*` in /var/tmp).
    /// A `tar x` of 2,000 small files wrote 160 MB there, about 20 pages a file, through 125 files
    /// made and deleted. Nearly every batch stores every item; when one fails, that transaction is
    /// rolled back whole and the batch is done again with a savepoint per item, so that the
    /// failure undoes only its own item.
    func writeEach<Item: Sendable, T: Sendable>(
        _ items: [Item], _ one: @escaping @Sendable (Database, Item) throws -> T
    ) async throws -> [Result<T, any Error>] {
        let origin = ChangeOrigin.current, holder = writeOrigin
        return try await pool.writeWithoutTransaction { db in
            holder.set(origin)
            defer { holder.set(nil) }
            var all: [T] = []
            do {
                try db.inTransaction {
                    all = try items.map { try one(db, $0) }
                    return .commit
                }
                return all.map { .success($0) }
            } catch {
                // Rolled back: nothing of it stays. Again, one savepoint per item.
                self.carefulPasses.add(1, ordering: .relaxed)
            }
            var results: [Result<T, any Error>] = []
            try db.inTransaction {
                results = items.map { item in
                    Result {
                        var value: T?
                        try db.inSavepoint {
                            value = try one(db, item)
                            return .commit
                        }
                        return value!
                    }
                }
                return .commit
            }
            return results
        }
    }

    // MARK: - Namespaces

    public func createNamespace(_ ns: Namespace) async throws -> (NamespaceInfo, created: Bool) {
        try await write { db in
            if let existing = try Self.namespaceInfo(db, ns) { return (existing, false) }
            let now = Timestamp.nowNanoseconds()
            let root = try Self.insertInode(db, ns: ns, kind: .directory, attributes: NewNodeAttributes(), nlink: 2, now: now)
            try db.executeCached(sql: "INSERT INTO namespaces(name, root, created_ns) VALUES (?, ?, ?)", arguments: [ns.name, root, now])
            return (NamespaceInfo(namespace: ns, rootInode: UInt64(root), createdNs: now), true)
        }
    }

    public func deleteNamespace(_ ns: Namespace, recursive: Bool) async throws {
        let grace = blobGraceNs
        try await write { db in
            guard let info = try Self.namespaceInfo(db, ns) else { throw StoreError.namespaceNotFound(ns) }
            let children = try Int.fetchOne(try db.cachedStatement(sql: "SELECT count(*) FROM entries WHERE parent = ?"), arguments: [info.rootInode]) ?? 0
            if children > 0 && !recursive { throw StoreError.notEmpty(.root) }
            let deadline = Timestamp.nowNanoseconds() + grace
            try db.executeCached(
                sql: """
                    INSERT OR IGNORE INTO dead_blobs(blob, delete_after)
                    SELECT blob, ? FROM inodes WHERE namespace = ? AND blob IS NOT NULL
                    """,
                arguments: [deadline, ns.name])
            try db.executeCached(sql: "DELETE FROM entries WHERE ino IN (SELECT ino FROM inodes WHERE namespace = ?)", arguments: [ns.name])
            try db.executeCached(sql: "DELETE FROM inodes WHERE namespace = ?", arguments: [ns.name])
            try db.executeCached(sql: "DELETE FROM namespaces WHERE name = ?", arguments: [ns.name])
            try db.executeCached(sql: "UPDATE uploads SET expires_at = 0 WHERE namespace = ? AND state = 'open'", arguments: [ns.name])
        }
    }

    public func namespaces() async throws -> [NamespaceInfo] {
        try await pool.read { db in
            try Row.fetchAll(try db.cachedStatement(sql: "SELECT name, root, created_ns FROM namespaces ORDER BY name")).compactMap { row in
                guard let ns = try? Namespace(row["name"] as String) else { return nil }
                return NamespaceInfo(namespace: ns, rootInode: UInt64(row["root"] as Int64), createdNs: row["created_ns"])
            }
        }
    }

    public func namespace(_ ns: Namespace) async throws -> NamespaceInfo? {
        try await pool.read { db in try Self.namespaceInfo(db, ns) }
    }

    static func namespaceInfo(_ db: Database, _ ns: Namespace) throws -> NamespaceInfo? {
        guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT root, created_ns FROM namespaces WHERE name = ?"), arguments: [ns.name]) else {
            return nil
        }
        return NamespaceInfo(namespace: ns, rootInode: UInt64(row["root"] as Int64), createdNs: row["created_ns"])
    }

    // MARK: - Reading

    public func node(_ ns: Namespace, _ path: StoragePath) async throws -> Node {
        try await pool.read { db in
            let ino = try Self.resolve(db, ns, path)
            return Node(namespace: ns, path: path, inode: try Self.inode(db, ino))
        }
    }

    public func node(inode: UInt64) async throws -> Node? {
        try await pool.read { db in
            guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT * FROM inodes WHERE ino = ?"), arguments: [Int64(inode)]) else { return nil }
            let ino = try Self.decodeInode(row)
            guard let ns = try? Namespace(row["namespace"] as String), let path = try Self.path(db, of: Int64(inode), in: ns) else {
                return nil
            }
            return Node(namespace: ns, path: path, inode: ino)
        }
    }

    public func list(_ ns: Namespace, _ query: ListQuery) async throws -> ListResult {
        try await pool.read { db in
            let folder = try Self.resolve(db, ns, query.folder)
            guard try Self.kind(db, folder) == .directory else { throw StoreError.notADirectory(query.folder) }
            return query.recursive ? try Self.listRecursive(db, ns, folder: folder, query) : try Self.listLevel(db, ns, folder: folder, query)
        }
    }

    private static func listLevel(_ db: Database, _ ns: Namespace, folder: Int64, _ q: ListQuery) throws -> ListResult {
        var filter = "e.parent = :folder"
        var args: [String: (any DatabaseValueConvertible)?] = ["folder": folder]
        if !q.namePrefix.isEmpty {
            filter += " AND e.name >= :prefix AND substr(e.name, 1, length(:prefix)) = :prefix"
            args["prefix"] = q.namePrefix
        }
        if let search = q.search, !search.isEmpty {
            filter += " AND instr(lower(e.name), lower(:search)) > 0"
            args["search"] = search
        }
        let total = try Int.fetchOne(try db.cachedStatement(sql: "SELECT count(*) FROM entries e WHERE \(filter)"), arguments: StatementArguments(args)) ?? 0
        var pageFilter = filter
        if let after = q.after {
            pageFilter += " AND e.name > :after"
            args["after"] = after
        }
        args["limit"] = q.limit + 1
        args["offset"] = q.after == nil ? q.offset : 0
        // Read row by row from the statement (not copied into rows first).
        let rows = try Row.fetchCursor(
            try db.cachedStatement(
                sql: "SELECT e.name AS entry_name, i.* FROM entries e JOIN inodes i ON i.ino = e.ino WHERE \(pageFilter) ORDER BY e.name LIMIT :limit OFFSET :offset"),
            arguments: StatementArguments(args))
        var nodes: [Node] = []
        nodes.reserveCapacity(min(q.limit, 1_000))
        var columns: InodeColumns?
        var more = false
        while let row = try rows.next() {
            guard nodes.count < q.limit else {
                more = true
                break
            }
            let c = try columns ?? InodeColumns(row)
            columns = c
            let name: String = row[0]
            nodes.append(Node(namespace: ns, path: try q.folder.appending(name), inode: try decodeInode(row, c)))
        }
        let next = more ? nodes.last?.path.name : nil
        var splits: [String] = []
        if q.splits > 0, next != nil {
            // The names at every `limit`-th place from the page's start, followed by another:
            // read from the first pages' worth of names only (the index's order).
            args["scan"] = (q.after == nil ? q.offset : 0) + q.limit * q.splits + 1
            args["size"] = q.limit
            args["splits"] = q.splits
            splits = try String.fetchAll(
                db,
                sql: """
                    SELECT name FROM (
                        SELECT name, row_number() OVER w AS r, lead(name) OVER w IS NOT NULL AS more
                        FROM (SELECT e.name AS name FROM entries e WHERE \(pageFilter) ORDER BY e.name LIMIT :scan)
                        WINDOW w AS (ORDER BY name))
                    WHERE r > :offset AND (r - :offset) % :size = 0 AND more ORDER BY name LIMIT :splits
                    """,
                arguments: StatementArguments(args))
        }
        return ListResult(nodes: nodes, total: total, next: next, splits: splits)
    }

    private static func listRecursive(_ db: Database, _ ns: Namespace, folder: Int64, _ q: ListQuery) throws -> ListResult {
        var args: [String: (any DatabaseValueConvertible)?] = ["folder": folder, "prefix": q.namePrefix]
        let tree = """
            WITH RECURSIVE tree(ino, name, path, kind) AS (
                SELECT e.ino, e.name, e.name, i.kind FROM entries e JOIN inodes i ON i.ino = e.ino
                    WHERE e.parent = :folder AND substr(e.name, 1, length(:prefix)) = :prefix
                UNION ALL
                SELECT e.ino, e.name, tree.path || '/' || e.name, i.kind FROM tree
                    JOIN entries e ON e.parent = tree.ino JOIN inodes i ON i.ino = e.ino
                    WHERE tree.kind = 'dir'
            )
            """
        var filter = "tree.kind != 'dir'"
        if let search = q.search, !search.isEmpty {
            filter += " AND instr(lower(tree.name), lower(:search)) > 0"
            args["search"] = search
        }
        let total = try Int.fetchOne(try db.cachedStatement(sql: "\(tree) SELECT count(*) FROM tree WHERE \(filter)"), arguments: StatementArguments(args)) ?? 0
        if let after = q.after {
            filter += " AND tree.path > :after"
            args["after"] = after
        }
        args["limit"] = q.limit + 1
        args["offset"] = q.after == nil ? q.offset : 0
        let rows = try Row.fetchAll(
            db,
            sql: "\(tree) SELECT tree.path AS rel_path, i.* FROM tree JOIN inodes i ON i.ino = tree.ino WHERE \(filter) ORDER BY tree.path LIMIT :limit OFFSET :offset",
            arguments: StatementArguments(args))
        var nodes: [Node] = []
        var lastKey: String?
        let columns = try rows.first.map(InodeColumns.init)
        for row in rows.prefix(q.limit) {
            let rel: String = row[0]
            let relPath = try StoragePath(rel)
            nodes.append(Node(namespace: ns, path: try StoragePath(segments: q.folder.segments + relPath.segments), inode: try decodeInode(row, columns!)))
            lastKey = rel
        }
        return ListResult(nodes: nodes, total: total, next: rows.count > q.limit ? lastKey : nil)
    }

    // MARK: - Changing the tree

    public func makeFolder(_ ns: Namespace, _ path: StoragePath, attributes: NewNodeAttributes, parents: Bool, existOk: Bool) async throws -> Node {
        try await write { db in try Self.makeFolder(db, ns, path, attributes: attributes, parents: parents, existOk: existOk) }
    }

    public func makeFolder(
        _ ns: Namespace, _ path: StoragePath, attributes: NewNodeAttributes, parents: Bool, namesLeaseFor session: String, leaseNs: Int64
    ) async throws -> (node: Node, leased: Bool) {
        let lease = LockSetCoding.namesLease(session: session)
        return try await write { db in
            let node = try Self.makeFolder(db, ns, path, attributes: attributes, parents: parents, existOk: false)
            try Self.startSession(db, ns, id: session, expires: Timestamp.nowNanoseconds() + leaseNs)
            return (node, try Self.insertLockSet(db, LockSetKey(namespace: ns, ino: node.inode.ino, kind: .names), lease))
        }
    }

    static func makeFolder(_ db: Database, _ ns: Namespace, _ path: StoragePath, attributes: NewNodeAttributes, parents: Bool, existOk: Bool) throws -> Node {
        let now = Timestamp.nowNanoseconds()
        if path.isRoot {
            guard existOk else { throw StoreError.exists(path) }
            return Node(namespace: ns, path: path, inode: try Self.inode(db, try Self.resolve(db, ns, path)))
        }
        let parent = parents
            ? try Self.ensureFolders(db, ns, path.parent, attributes: attributes, now: now)
            : try Self.resolveFolder(db, ns, path.parent)
        if let existing = try Self.lookup(db, parent, path.name) {
            let inode = try Self.inode(db, existing)
            guard inode.kind == .directory else { throw StoreError.exists(path) }
            guard existOk else { throw StoreError.exists(path) }
            return Node(namespace: ns, path: path, inode: inode)
        }
        let ino = try Self.insertDirectory(db, ns, parent: parent, name: path.name, attributes: attributes, now: now)
        return Node(namespace: ns, path: path, inode: try Self.inode(db, ino))
    }

    public func removeFolder(_ ns: Namespace, _ path: StoragePath) async throws {
        try await write { db in
            guard !path.isRoot else { throw StoreError.badRequest("the root folder of a namespace cannot be removed") }
            let parent = try Self.resolveFolder(db, ns, path.parent)
            guard let ino = try Self.lookup(db, parent, path.name) else { throw StoreError.notFound(path) }
            guard try Self.kind(db, ino) == .directory else { throw StoreError.notADirectory(path) }
            let children = try Int.fetchOne(try db.cachedStatement(sql: "SELECT count(*) FROM entries WHERE parent = ?"), arguments: [ino]) ?? 0
            guard children == 0 else { throw StoreError.notEmpty(path) }
            let now = Timestamp.nowNanoseconds()
            try Self.removeEntry(db, parent: parent, name: path.name, ino: ino, isDirectory: true, now: now, graceNs: 0)
        }
    }

    public func removeFile(_ ns: Namespace, _ path: StoragePath, ifMatch: String?) async throws {
        let grace = blobGraceNs
        try await write { db in try Self.removeFile(db, ns, path, ifMatch: ifMatch, now: Timestamp.nowNanoseconds(), graceNs: grace) }
    }

    /// One transaction (one commit) for the lot; each file stored or refused on its own (`writeEach`).
    public func removeFiles(_ ns: Namespace, _ files: [FileDeletion]) async throws -> [Result<Void, any Error>] {
        guard !files.isEmpty else { return [] }
        let grace = blobGraceNs
        let now = Timestamp.nowNanoseconds()
        return try await writeEach(files) { db, f in
            try Self.removeFile(db, ns, f.path, ifMatch: f.ifMatch, inode: f.inode, now: now, graceNs: grace)
        }
    }

    static func removeFile(_ db: Database, _ ns: Namespace, _ path: StoragePath, ifMatch: String?, inode expected: UInt64? = nil, now: Int64, graceNs: Int64) throws {
        guard !path.isRoot else { throw StoreError.isADirectory(path) }
        let parent = try Self.resolveFolder(db, ns, path.parent)
        guard let ino = try Self.lookup(db, parent, path.name) else { throw StoreError.notFound(path) }
        if let expected, UInt64(ino) != expected { throw StoreError.preconditionFailed("`\(path)` is another file now (inode \(ino))") }
        let inode = try Self.inode(db, ino)
        guard inode.kind != .directory else { throw StoreError.isADirectory(path) }
        if let ifMatch, !ETag.matches(ifMatch, inode.etag) {
            throw StoreError.preconditionFailed("`\(path)` has changed (ETag \(inode.etag))")
        }
        try Self.removeEntry(db, parent: parent, name: path.name, ino: ino, isDirectory: false, now: now, graceNs: graceNs)
    }

    public func rename(_ ns: Namespace, from: StoragePath, to: StoragePath, replace: Bool, exchange: Bool, expecting: ExchangeExpectation?) async throws -> Node {
        let grace = blobGraceNs
        return try await write { db in
            guard !from.isRoot, !to.isRoot else { throw StoreError.invalidRename("the root folder cannot be renamed") }
            let now = Timestamp.nowNanoseconds()
            let fromParent = try Self.resolveFolder(db, ns, from.parent)
            guard let ino = try Self.lookup(db, fromParent, from.name) else { throw StoreError.notFound(from) }
            let toParent = try Self.resolveFolder(db, ns, to.parent)
            let source = try Self.inode(db, ino)
            if source.kind == .directory && to.isWithin(from) && to != from {
                throw StoreError.invalidRename("cannot move folder `\(from)` into itself (`\(to)`)")
            }
            let existing = try Self.lookup(db, toParent, to.name)
            if exchange {
                guard let other = existing else { throw StoreError.notFound(to) }
                if let expecting, expecting.from != UInt64(ino) || expecting.to != UInt64(other) {
                    throw StoreError.preconditionFailed("`\(from)` and `\(to)` are not the files the exchange expected")
                }
                let target = try Self.inode(db, other)
                if target.kind == .directory && from.isWithin(to) {
                    throw StoreError.invalidRename("cannot exchange `\(to)` with something inside it")
                }
                try db.executeCached(sql: "UPDATE entries SET ino = ? WHERE parent = ? AND name = ?", arguments: [other, fromParent, from.name])
                try db.executeCached(sql: "UPDATE entries SET ino = ? WHERE parent = ? AND name = ?", arguments: [ino, toParent, to.name])
                if fromParent != toParent {
                    let delta = (source.kind == .directory ? 1 : 0) - (target.kind == .directory ? 1 : 0)
                    if delta != 0 {
                        try db.executeCached(sql: "UPDATE inodes SET nlink = nlink - ? WHERE ino = ?", arguments: [delta, fromParent])
                        try db.executeCached(sql: "UPDATE inodes SET nlink = nlink + ? WHERE ino = ?", arguments: [delta, toParent])
                    }
                }
                try db.executeCached(sql: "UPDATE inodes SET ctime_ns = ? WHERE ino IN (?, ?)", arguments: [now, ino, other])
                try Self.touchDirectories(db, [fromParent, toParent], now: now)
                return Node(namespace: ns, path: to, inode: try Self.inode(db, ino))
            }
            if let existing {
                if existing == ino {
                    // Same inode (the same entry, or two hard links of one file): nothing to do.
                    return Node(namespace: ns, path: to, inode: source)
                }
                guard replace else { throw StoreError.exists(to) }
                let target = try Self.inode(db, existing)
                if source.kind == .directory {
                    guard target.kind == .directory else { throw StoreError.notADirectory(to) }
                    let children = try Int.fetchOne(try db.cachedStatement(sql: "SELECT count(*) FROM entries WHERE parent = ?"), arguments: [existing]) ?? 0
                    guard children == 0 else { throw StoreError.notEmpty(to) }
                } else if target.kind == .directory {
                    throw StoreError.isADirectory(to)
                }
                try Self.removeEntry(db, parent: toParent, name: to.name, ino: existing, isDirectory: target.kind == .directory, now: now, graceNs: grace)
            }
            try db.executeCached(sql: "DELETE FROM entries WHERE parent = ? AND name = ?", arguments: [fromParent, from.name])
            try db.executeCached(sql: "INSERT INTO entries(parent, name, ino) VALUES (?, ?, ?)", arguments: [toParent, to.name, ino])
            if source.kind == .directory && fromParent != toParent {
                try db.executeCached(sql: "UPDATE inodes SET nlink = nlink - 1 WHERE ino = ?", arguments: [fromParent])
                try db.executeCached(sql: "UPDATE inodes SET nlink = nlink + 1 WHERE ino = ?", arguments: [toParent])
            }
            try db.executeCached(sql: "UPDATE inodes SET ctime_ns = ? WHERE ino = ?", arguments: [now, ino])
            try Self.touchDirectories(db, [fromParent, toParent], now: now)
            return Node(namespace: ns, path: to, inode: try Self.inode(db, ino))
        }
    }

    public func makeNode(_ ns: Namespace, _ path: StoragePath, kind: NodeKind, attributes: NewNodeAttributes, target: String?, rdev: UInt64?) async throws -> Node {
        try await write { db in
            guard !path.isRoot else { throw StoreError.exists(path) }
            let parent = try Self.resolveFolder(db, ns, path.parent)
            if try Self.lookup(db, parent, path.name) != nil { throw StoreError.exists(path) }
            let now = Timestamp.nowNanoseconds()
            let ino = try Self.insertInode(db, ns: ns, kind: kind, attributes: attributes, nlink: 1, now: now, target: target, rdev: rdev)
            try Self.insertEntry(db, parent: parent, name: path.name, ino: ino, now: now)
            return Node(namespace: ns, path: path, inode: try Self.inode(db, ino))
        }
    }

    public func link(_ ns: Namespace, from: StoragePath, to: StoragePath) async throws -> Node {
        try await write { db in
            guard !from.isRoot, !to.isRoot else { throw StoreError.badRequest("the root folder cannot be linked") }
            let ino = try Self.resolve(db, ns, from)
            guard try Self.kind(db, ino) != .directory else { throw StoreError.isADirectory(from) }
            let parent = try Self.resolveFolder(db, ns, to.parent)
            if try Self.lookup(db, parent, to.name) != nil { throw StoreError.exists(to) }
            let now = Timestamp.nowNanoseconds()
            try Self.insertEntry(db, parent: parent, name: to.name, ino: ino, now: now)
            try db.executeCached(sql: "UPDATE inodes SET nlink = nlink + 1, ctime_ns = ? WHERE ino = ?", arguments: [now, ino])
            return Node(namespace: ns, path: to, inode: try Self.inode(db, ino))
        }
    }

    public func patch(_ ns: Namespace, _ path: StoragePath, _ patch: FilePatch, ifMatch: String?) async throws -> Node {
        try await write { db in
            let ino = try Self.resolve(db, ns, path)
            var inode = try Self.inode(db, ino)
            if let ifMatch, !ETag.matches(ifMatch, inode.etag) {
                throw StoreError.preconditionFailed("`\(path)` has changed (ETag \(inode.etag))")
            }
            let now = Timestamp.nowNanoseconds()
            if let tags = patch.tags { inode.tags = tags }
            if let metadata = patch.metadata { inode.metadata = metadata }
            for (k, v) in patch.metadataSet ?? [:] { inode.metadata[k] = v }
            for k in patch.metadataRemove ?? [] { inode.metadata[k] = nil }
            if let ct = patch.contentType { inode.contentType = ct }
            if let p = patch.isPublic { inode.isPublic = p }
            if let mode = patch.mode { inode.mode = mode & 0o7777 }
            if let uid = patch.uid { inode.uid = uid }
            if let gid = patch.gid { inode.gid = gid }
            if let a = patch.atimeNs { inode.atimeNs = a }
            if let m = patch.mtimeNs { inode.mtimeNs = m }
            inode.ctimeNs = min(patch.ctimeNs ?? now, now)
            try db.executeCached(
                sql: """
                    UPDATE inodes SET tags = ?, metadata = ?, content_type = ?, public = ?, mode = ?, uid = ?, gid = ?,
                        atime_ns = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?
                    """,
                arguments: [
                    Self.json(inode.tags), Self.json(inode.metadata), inode.contentType, inode.isPublic, inode.mode, inode.uid,
                    inode.gid, inode.atimeNs, inode.mtimeNs, inode.ctimeNs, ino,
                ])
            return Node(namespace: ns, path: path, inode: inode)
        }
    }

    public func swapBlob(
        _ ns: Namespace, _ path: StoragePath, expectedBlob: String, newBlob: BlobInfo, inline: Data?, mtimeNs: Int64?
    ) async throws -> Node {
        let grace = blobGraceNs
        return try await write { db in
            let ino = try Self.resolve(db, ns, path)
            let inode = try Self.inode(db, ino)
            guard inode.blob == expectedBlob else { throw StoreError.preconditionFailed("`\(path)` changed while it was being truncated") }
            let now = Timestamp.nowNanoseconds()
            if let inline { try Self.insertInline(db, id: newBlob.id, inline) }
            try db.execute(
                sql: "UPDATE inodes SET blob = ?, size = ?, sha256 = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?",
                arguments: [newBlob.id, newBlob.size, newBlob.sha256, mtimeNs ?? now, now, ino])
            try Self.retire(db, blob: expectedBlob, now: now, graceNs: grace)
            return Node(namespace: ns, path: path, inode: try Self.inode(db, ino))
        }
    }

    // MARK: - Uploads

    public func createUpload(_ u: UploadRecord) async throws {
        try await write { db in
            guard try Self.namespaceInfo(db, u.namespace) != nil else { throw StoreError.namespaceNotFound(u.namespace) }
            try db.executeCached(
                sql: """
                    INSERT INTO uploads(id, namespace, path, size, content_type, tags, params, created_ns, expires_at, state, result_ino, auto_complete)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    u.id, u.namespace.name, u.path.string, u.size, u.contentType, u.tags.map { Self.json($0) },
                    String(decoding: WireJSON.encode(u.params), as: UTF8.self), u.createdNs, u.expiresAt, u.state.rawValue,
                    u.resultInode.map { Int64($0) }, u.autoComplete,
                ])
        }
    }

    public func upload(id: String) async throws -> UploadRecord? {
        try await pool.read { db in
            try Row.fetchOne(try db.cachedStatement(sql: "SELECT * FROM uploads WHERE id = ?"), arguments: [id]).map(Self.decodeUpload)
        }
    }

    public func deleteUpload(id: String) async throws {
        try await write { db in try db.executeCached(sql: "DELETE FROM uploads WHERE id = ?", arguments: [id]) }
    }

    public func extendUpload(id: String, until: Int64) async throws {
        try await write { db in
            try db.executeCached(
                sql: "UPDATE uploads SET expires_at = ? WHERE id = ? AND state = 'open' AND expires_at < ?", arguments: [until, id, until])
        }
    }

    public func publish(_ upload: UploadRecord, blob: BlobInfo) async throws -> Node {
        let grace = blobGraceNs
        return try await write { db in
            guard let current = try Row.fetchOne(try db.cachedStatement(sql: "SELECT * FROM uploads WHERE id = ?"), arguments: [upload.id]).map(Self.decodeUpload) else {
                throw StoreError.notFound(upload.path)
            }
            if current.state == .completed, let ino = current.resultInode {
                return Node(namespace: upload.namespace, path: upload.path, inode: try Self.inode(db, Int64(ino)))
            }
            let node = try Self.placeFile(db, upload, blob: blob, graceNs: grace)
            // The size too: a deferred-length upload learns it at complete.
            try db.executeCached(
                sql: "UPDATE uploads SET state = 'completed', result_ino = ?, size = ? WHERE id = ?", arguments: [Int64(node.inode.ino), blob.size, upload.id])
            return node
        }
    }

    public func publishInline(_ files: [InlineFile]) async throws -> [Result<Node, any Error>] {
        guard !files.isEmpty else { return [] }
        let grace = blobGraceNs
        return try await writeEach(files) { db, f in
            guard try Self.namespaceInfo(db, f.upload.namespace) != nil else { throw StoreError.namespaceNotFound(f.upload.namespace) }
            try Self.insertInline(db, id: f.blob.id, f.bytes)
            return try Self.placeFile(db, f.upload, blob: f.blob, graceNs: grace)
        }
    }

    public func inlineBlob(_ id: String) async throws -> Data? {
        try await pool.read { db in try Data.fetchOne(try db.cachedStatement(sql: "SELECT data FROM inline_blobs WHERE id = ?"), arguments: [id]) }
    }

    static func insertInline(_ db: Database, id: String, _ bytes: Data) throws {
        try db.executeCached(sql: "INSERT INTO inline_blobs(id, data) VALUES (?, ?)", arguments: [id, bytes])
    }

    /// Creates the file an upload names, or points the existing one at the new blob (inside a transaction).
    private static func placeFile(_ db: Database, _ upload: UploadRecord, blob: BlobInfo, graceNs grace: Int64) throws -> Node {
        let ns = upload.namespace, path = upload.path, p = upload.params
        let now = Timestamp.nowNanoseconds()
        guard !path.isRoot else { throw StoreError.isADirectory(path) }
        let parent = try Self.ensureFolders(db, ns, path.parent, attributes: NewNodeAttributes(uid: p.uid, gid: p.gid), now: now)
        let ino: Int64
        if let existing = try Self.lookup(db, parent, path.name) {
            var inode = try Self.inode(db, existing)
            if p.ifNoneMatch == "*" { throw StoreError.preconditionFailed("`\(path)` exists already") }
            if let ifMatch = p.ifMatch, !ETag.matches(ifMatch, inode.etag) {
                throw StoreError.preconditionFailed("`\(path)` has changed (ETag \(inode.etag))")
            }
            switch inode.kind {
            case .directory:
                throw StoreError.isADirectory(path)
            case .file:
                // Overwrite: the same inode (hard links see the new content), a new blob.
                let old = inode.blob
                inode.blob = blob.id
                inode.size = blob.size
                inode.sha256 = blob.sha256
                inode.contentType = upload.contentType
                if let tags = upload.tags { inode.tags = tags }
                if let m = p.metadata { inode.metadata = m }
                if let pub = p.isPublic { inode.isPublic = pub }
                if let mode = p.mode { inode.mode = mode & 0o7777 }
                if let uid = p.uid { inode.uid = uid }
                if let gid = p.gid { inode.gid = gid }
                inode.mtimeNs = p.mtimeNs ?? now
                if let a = p.atimeNs { inode.atimeNs = a }
                inode.ctimeNs = min(p.ctimeNs ?? now, now)
                try Self.updateContent(db, existing, inode)
                if let old, old != blob.id { try Self.retire(db, blob: old, now: now, graceNs: grace) }
                ino = existing
            default:
                try Self.removeEntry(db, parent: parent, name: path.name, ino: existing, isDirectory: false, now: now, graceNs: grace)
                ino = try Self.insertFile(db, upload, blob: blob, parent: parent, now: now)
            }
        } else {
            if let ifMatch = p.ifMatch, ifMatch != "*" { throw StoreError.preconditionFailed("`\(path)` does not exist (If-Match \(ifMatch))") }
            ino = try Self.insertFile(db, upload, blob: blob, parent: parent, now: now, touchParent: try Self.entryChangesFolder(db, parent, p))
        }
        return Node(namespace: ns, path: path, inode: try Self.inode(db, ino))
    }

    /// Whether a new entry made by an upload changes its folder's times. Not when the folder's
    /// attributes were set after the file last changed (its ctime, by the same client's clock):
    /// the file was created before that, only its upload lands now — `rsync -a` sets a folder's
    /// times after writing its files, and a mount sends the files later.
    static func entryChangesFolder(_ db: Database, _ parent: Int64, _ p: UploadParams) throws -> Bool {
        guard let fileChanged = p.ctimeNs else { return true }
        let folderChanged = try Int64.fetchOne(try db.cachedStatement(sql: "SELECT ctime_ns FROM inodes WHERE ino = ?"), arguments: [parent]) ?? 0
        return folderChanged <= fileChanged
    }

    private static func insertFile(_ db: Database, _ u: UploadRecord, blob: BlobInfo, parent: Int64, now: Int64, touchParent: Bool = true) throws -> Int64 {
        let p = u.params
        let ino = try insertInode(
            db, ns: u.namespace, kind: .file, attributes: NewNodeAttributes(mode: p.mode, uid: p.uid, gid: p.gid), nlink: 1, now: now)
        var inode = try inode(db, ino)
        inode.blob = blob.id
        inode.size = blob.size
        inode.sha256 = blob.sha256
        inode.contentType = u.contentType
        inode.tags = u.tags ?? []
        inode.metadata = p.metadata ?? [:]
        inode.isPublic = p.isPublic ?? false
        inode.mtimeNs = p.mtimeNs ?? now
        inode.atimeNs = p.atimeNs ?? now
        inode.ctimeNs = min(p.ctimeNs ?? now, now)
        try updateContent(db, ino, inode)
        try insertEntry(db, parent: parent, name: u.path.name, ino: ino, now: now, touchParent: touchParent)
        return ino
    }

    private static func updateContent(_ db: Database, _ ino: Int64, _ i: Inode) throws {
        try db.executeCached(
            sql: """
                UPDATE inodes SET blob = ?, size = ?, sha256 = ?, content_type = ?, tags = ?, metadata = ?, public = ?,
                    mode = ?, uid = ?, gid = ?, atime_ns = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?
                """,
            arguments: [
                i.blob, i.size, i.sha256, i.contentType, json(i.tags), json(i.metadata), i.isPublic, i.mode, i.uid, i.gid, i.atimeNs,
                i.mtimeNs, i.ctimeNs, ino,
            ])
    }

    // MARK: - Garbage collection

    public func expiredUploads(before seconds: Int64, limit: Int) async throws -> [UploadRecord] {
        try await pool.read { db in
            try Row.fetchAll(try db.cachedStatement(sql: "SELECT * FROM uploads WHERE expires_at < ? ORDER BY expires_at LIMIT ?"), arguments: [seconds, limit])
                .map(Self.decodeUpload)
        }
    }

    public func claimExpiredUpload(id: String, before seconds: Int64) async throws -> Bool {
        try await write { db in
            try db.executeCached(sql: "DELETE FROM uploads WHERE id = ? AND expires_at < ?", arguments: [id, seconds])
            return db.changesCount > 0
        }
    }

    public func claimDeadBlobs(before nanoseconds: Int64, lease: Int64, limit: Int) async throws -> [String] {
        try await write { db in
            let due = try String.fetchAll(
                try db.cachedStatement(sql: "SELECT blob FROM dead_blobs WHERE delete_after < ? ORDER BY delete_after LIMIT ?"), arguments: [nanoseconds, limit])
            for id in due {
                try db.executeCached(sql: "UPDATE dead_blobs SET delete_after = ? WHERE blob = ?", arguments: [nanoseconds + lease, id])
            }
            return due
        }
    }

    public func forgetDeadBlobs(_ ids: [String]) async throws {
        guard !ids.isEmpty else { return }
        try await write { db in
            for id in ids {
                try db.executeCached(sql: "DELETE FROM dead_blobs WHERE blob = ?", arguments: [id])
                try db.execute(
                    sql: "DELETE FROM inline_blobs WHERE id = ? AND NOT EXISTS (SELECT 1 FROM inodes WHERE blob = ?)", arguments: [id, id])
            }
        }
    }

    public func isBlobInUse(_ id: String) async throws -> Bool {
        try await pool.read { db in try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS(SELECT 1 FROM inodes WHERE blob = ?)"), arguments: [id]) ?? false }
    }

    public func referencedBlobs(among ids: [String]) async throws -> Set<String> {
        guard !ids.isEmpty else { return [] }
        return try await pool.read { db in
            var used = Set<String>()
            for id in ids {
                let inInodes = try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS(SELECT 1 FROM inodes WHERE blob = ?)"), arguments: [id]) ?? false
                let inUploads = try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS(SELECT 1 FROM uploads WHERE id = ? AND state = 'open')"), arguments: [id]) ?? false
                let dead = try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS(SELECT 1 FROM dead_blobs WHERE blob = ?)"), arguments: [id]) ?? false
                if inInodes || inUploads || dead { used.insert(id) }
            }
            return used
        }
    }

    public func statistics() async throws -> StoreStatistics {
        try await pool.read { db in
            let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT count(*) AS n, coalesce(sum(size), 0) AS bytes FROM inodes WHERE kind = 'file'"))
            return StoreStatistics(
                namespaces: try Int.fetchOne(try db.cachedStatement(sql: "SELECT count(*) FROM namespaces")) ?? 0,
                files: row?["n"] ?? 0,
                bytes: row?["bytes"] ?? 0,
                openUploads: try Int.fetchOne(try db.cachedStatement(sql: "SELECT count(*) FROM uploads WHERE state = 'open'")) ?? 0,
                deadBlobs: try Int.fetchOne(try db.cachedStatement(sql: "SELECT count(*) FROM dead_blobs")) ?? 0)
        }
    }
}

extension SQLiteMetadataStore {
    public func stagingState(_ id: String) async throws -> StagingState? {
        try await pool.read { db in try Self.stagingState(db, id) }
    }

    static func stagingState(_ db: Database, _ id: String) throws -> StagingState? {
        guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT * FROM upload_staging WHERE upload_id = ?"), arguments: [id]) else {
            return nil
        }
        let parts = try Row.fetchAll(try db.cachedStatement(sql: "SELECT number, size, etag FROM upload_parts WHERE upload_id = ? ORDER BY number"), arguments: [id])
            .map { StagedPart(number: $0["number"], size: $0["size"], etag: $0["etag"]) }
        return StagingState(
            uploadID: id, s3UploadID: row["s3_upload_id"], partSize: row["part_size"], parts: parts, tailKey: row["tail_key"],
            tailSize: row["tail_size"], version: row["version"])
    }

    public func beginStaging(_ id: String, s3UploadID: String, partSize: Int64) async throws -> StagingState {
        try await write { db in
            try db.executeCached(
                sql: "INSERT OR IGNORE INTO upload_staging(upload_id, s3_upload_id, part_size, begun_ns) VALUES (?, ?, ?, ?)",
                arguments: [id, s3UploadID, partSize, Timestamp.nowNanoseconds()])
            guard let state = try Self.stagingState(db, id) else { throw StoreError.conflict("staging of \(id) vanished") }
            return state
        }
    }

    public func commitStaging(_ id: String, expected: Int64, keep: Int, added: [StagedPart], tailKey: String?, tailSize: Int64) async throws -> Bool {
        try await write { db in
            try db.executeCached(
                sql: "UPDATE upload_staging SET version = version + 1, tail_key = ?, tail_size = ? WHERE upload_id = ? AND version = ?",
                arguments: [tailKey, tailSize, id, expected])
            guard db.changesCount > 0 else { return false }
            try db.executeCached(sql: "DELETE FROM upload_parts WHERE upload_id = ? AND number > ?", arguments: [id, keep])
            for p in added {
                try db.executeCached(
                    sql: "INSERT OR REPLACE INTO upload_parts(upload_id, number, size, etag) VALUES (?, ?, ?, ?)", arguments: [id, p.number, p.size, p.etag])
            }
            return true
        }
    }

    public func dropStaging(_ id: String) async throws {
        try await write { db in
            try db.executeCached(sql: "DELETE FROM upload_parts WHERE upload_id = ?", arguments: [id])
            try db.executeCached(sql: "DELETE FROM upload_staging WHERE upload_id = ?", arguments: [id])
        }
    }

    public func stagings() async throws -> [(id: String, s3UploadID: String, begunNs: Int64)] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT upload_id, s3_upload_id, begun_ns FROM upload_staging").map { ($0["upload_id"], $0["s3_upload_id"], $0["begun_ns"]) }
        }
    }

    public func integrityProblems(limit: Int) async throws -> [String] {
        try await pool.read { db in
            var problems: [String] = []
            for sql in IntegrityChecks.queries where problems.count < limit {
                problems += try String.fetchAll(db, sql: "SELECT problem FROM (\(sql)) LIMIT \(limit - problems.count)")
            }
            return problems
        }
    }
}

// MARK: - Helpers used inside transactions

extension SQLiteMetadataStore {
    static func rootInode(_ db: Database, _ ns: Namespace) throws -> Int64 {
        guard let root = try Int64.fetchOne(try db.cachedStatement(sql: "SELECT root FROM namespaces WHERE name = ?"), arguments: [ns.name]) else {
            throw StoreError.namespaceNotFound(ns)
        }
        return root
    }

    static func lookup(_ db: Database, _ parent: Int64, _ name: String) throws -> Int64? {
        try Int64.fetchOne(try db.cachedStatement(sql: "SELECT ino FROM entries WHERE parent = ? AND name = ?"), arguments: [parent, name])
    }

    static func kind(_ db: Database, _ ino: Int64) throws -> NodeKind {
        guard let raw = try String.fetchOne(try db.cachedStatement(sql: "SELECT kind FROM inodes WHERE ino = ?"), arguments: [ino]), let kind = NodeKind(rawValue: raw)
        else { throw StoreError.conflict("inode \(ino) is missing") }
        return kind
    }

    /// The inode a path names. Throws `notFound` or `notADirectory` (a file used as a folder).
    static func resolve(_ db: Database, _ ns: Namespace, _ path: StoragePath) throws -> Int64 {
        var ino = try rootInode(db, ns)
        for (i, name) in path.segments.enumerated() {
            if i > 0, try kind(db, ino) != .directory {
                throw StoreError.notADirectory(try StoragePath(segments: Array(path.segments.prefix(i))))
            }
            guard let next = try lookup(db, ino, name) else { throw StoreError.notFound(path) }
            ino = next
        }
        return ino
    }

    /// The inode of a folder; `notFound` when missing, `notADirectory` when something else.
    static func resolveFolder(_ db: Database, _ ns: Namespace, _ path: StoragePath) throws -> Int64 {
        let ino = try resolve(db, ns, path)
        guard try kind(db, ino) == .directory else { throw StoreError.notADirectory(path) }
        return ino
    }

    /// Like `mkdir -p`: the folder at `path`, creating what is missing.
    static func ensureFolders(_ db: Database, _ ns: Namespace, _ path: StoragePath, attributes: NewNodeAttributes, now: Int64) throws -> Int64 {
        var ino = try rootInode(db, ns)
        for (i, name) in path.segments.enumerated() {
            if let next = try lookup(db, ino, name) {
                guard try kind(db, next) == .directory else {
                    throw StoreError.notADirectory(try StoragePath(segments: Array(path.segments.prefix(i + 1))))
                }
                ino = next
            } else {
                ino = try insertDirectory(db, ns, parent: ino, name: name, attributes: attributes, now: now)
            }
        }
        return ino
    }

    static func insertDirectory(_ db: Database, _ ns: Namespace, parent: Int64, name: String, attributes: NewNodeAttributes, now: Int64) throws -> Int64 {
        let ino = try insertInode(db, ns: ns, kind: .directory, attributes: attributes, nlink: 2, now: now)
        try insertEntry(db, parent: parent, name: name, ino: ino, now: now)
        try db.executeCached(sql: "UPDATE inodes SET nlink = nlink + 1 WHERE ino = ?", arguments: [parent])
        return ino
    }

    static func insertInode(
        _ db: Database, ns: Namespace, kind: NodeKind, attributes: NewNodeAttributes, nlink: Int, now: Int64, target: String? = nil,
        rdev: UInt64? = nil
    ) throws -> Int64 {
        try db.executeCached(
            sql: """
                INSERT INTO inodes(namespace, kind, mode, uid, gid, nlink, size, target, rdev, atime_ns, mtime_ns, ctime_ns, btime_ns)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                ns.name, kind.rawValue, attributes.mode.map { $0 & 0o7777 }, attributes.uid, attributes.gid, nlink,
                kind == .symlink ? Int64(target?.utf8.count ?? 0) : 0, target, rdev.map { Int64(bitPattern: $0) }, now, now, now, now,
            ])
        return db.lastInsertedRowID
    }

    static func insertEntry(_ db: Database, parent: Int64, name: String, ino: Int64, now: Int64, touchParent: Bool = true) throws {
        try db.executeCached(sql: "INSERT INTO entries(parent, name, ino) VALUES (?, ?, ?)", arguments: [parent, name, ino])
        if touchParent { try touchDirectories(db, [parent], now: now) }
    }

    /// Removes one entry; drops the inode (and retires its blob) when no entry is left.
    static func removeEntry(_ db: Database, parent: Int64, name: String, ino: Int64, isDirectory: Bool, now: Int64, graceNs: Int64) throws {
        try db.executeCached(sql: "DELETE FROM entries WHERE parent = ? AND name = ?", arguments: [parent, name])
        try touchDirectories(db, [parent], now: now)
        if isDirectory {
            try db.executeCached(sql: "UPDATE inodes SET nlink = nlink - 1 WHERE ino = ?", arguments: [parent])
            try db.executeCached(sql: "DELETE FROM inodes WHERE ino = ?", arguments: [ino])
            return
        }
        let remaining = try Int.fetchOne(try db.cachedStatement(sql: "SELECT count(*) FROM entries WHERE ino = ?"), arguments: [ino]) ?? 0
        if remaining == 0 {
            if let blob = try String.fetchOne(try db.cachedStatement(sql: "SELECT blob FROM inodes WHERE ino = ?"), arguments: [ino]) {
                try retire(db, blob: blob, now: now, graceNs: graceNs)
            }
            try db.executeCached(sql: "DELETE FROM inodes WHERE ino = ?", arguments: [ino])
        } else {
            try db.executeCached(sql: "UPDATE inodes SET nlink = ?, ctime_ns = ? WHERE ino = ?", arguments: [remaining, now, ino])
        }
    }

    /// Queues a blob for deletion once no read can still need it.
    static func retire(_ db: Database, blob: String, now: Int64, graceNs: Int64) throws {
        try db.executeCached(sql: "INSERT OR REPLACE INTO dead_blobs(blob, delete_after) VALUES (?, ?)", arguments: [blob, now + graceNs])
    }

    static func touchDirectories(_ db: Database, _ inos: [Int64], now: Int64) throws {
        for ino in Set(inos) {
            try db.executeCached(sql: "UPDATE inodes SET mtime_ns = ?, ctime_ns = ? WHERE ino = ?", arguments: [now, now, ino])
        }
    }

    /// One path of an inode (the first entry found when it has several).
    static func path(_ db: Database, of ino: Int64, in ns: Namespace) throws -> StoragePath? {
        let root = try rootInode(db, ns)
        var names: [String] = []
        var current = ino
        while current != root {
            guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT parent, name FROM entries WHERE ino = ? LIMIT 1"), arguments: [current]) else {
                return nil
            }
            names.append(row["name"])
            current = row["parent"]
            if names.count > 4096 { return nil }
        }
        return try StoragePath(segments: names.reversed())
    }

    static func inode(_ db: Database, _ ino: Int64) throws -> Inode {
        guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT * FROM inodes WHERE ino = ?"), arguments: [ino]) else {
            throw StoreError.conflict("inode \(ino) is missing")
        }
        return try decodeInode(row)
    }

    static func decodeInode(_ row: Row) throws -> Inode {
        try decodeInode(row, InodeColumns(row))
    }

    /// Where an inode's columns are in the rows of one statement: found by name once, then read by
    /// position (GRDB finds a column by name case-insensitively, which took a fifth of a listing's
    /// time).
    struct InodeColumns {
        let ino, kind, mode, uid, gid, nlink, size, blob, sha256, contentType, tags, metadata, isPublic, target, rdev: Int
        let atime, mtime, ctime, btime: Int

        init(_ row: Row) throws {
            var at: [String: Int] = [:]
            for (i, name) in row.columnNames.enumerated() where at[name] == nil { at[name] = i }
            func column(_ name: String) throws -> Int {
                guard let i = at[name] else { throw StoreError.conflict("the database has no inode column `\(name)`") }
                return i
            }
            ino = try column("ino"); kind = try column("kind"); mode = try column("mode"); uid = try column("uid")
            gid = try column("gid"); nlink = try column("nlink"); size = try column("size"); blob = try column("blob")
            sha256 = try column("sha256"); contentType = try column("content_type"); tags = try column("tags")
            metadata = try column("metadata"); isPublic = try column("public"); target = try column("target"); rdev = try column("rdev")
            atime = try column("atime_ns"); mtime = try column("mtime_ns"); ctime = try column("ctime_ns"); btime = try column("btime_ns")
        }
    }

    /// An inode from a row. Cells are read as the plain types GRDB reads straight from SQLite
    /// (`Int64`, `String`, `Bool`), a nullable one after a look at whether it is NULL: read as an
    /// optional, each cell went through GRDB's generic path and the runtime's lookup of
    /// `Optional`'s metadata, 12% of stowd's CPU in a cold listing of 10,000 files.
    static func decodeInode(_ row: Row, _ c: InodeColumns) throws -> Inode {
        func integer(_ i: Int) -> Int64? { row.hasNull(atIndex: i) ? nil : row[i] as Int64 }
        func text(_ i: Int) -> String? { row.hasNull(atIndex: i) ? nil : row[i] as String }
        let tagsJSON = text(c.tags) ?? "[]"
        let metadataJSON = text(c.metadata) ?? "{}"
        return Inode(
            ino: UInt64(bitPattern: integer(c.ino) ?? 0),
            kind: text(c.kind).flatMap(NodeKind.init(rawValue:)) ?? .file,
            mode: integer(c.mode).map { UInt32(truncatingIfNeeded: $0) },
            uid: integer(c.uid).map { UInt32(truncatingIfNeeded: $0) },
            gid: integer(c.gid).map { UInt32(truncatingIfNeeded: $0) },
            nlink: UInt32(truncatingIfNeeded: integer(c.nlink) ?? 1),
            size: integer(c.size) ?? 0,
            blob: text(c.blob),
            sha256: text(c.sha256),
            contentType: text(c.contentType),
            // Most files have neither: no decoder for those.
            tags: tagsJSON == "[]" ? [] : ((try? JSONDecoder().decode([String].self, from: Data(tagsJSON.utf8))) ?? []),
            metadata: metadataJSON == "{}" ? [:] : ((try? JSONDecoder().decode([String: String].self, from: Data(metadataJSON.utf8))) ?? [:]),
            isPublic: (integer(c.isPublic) ?? 0) != 0,
            target: text(c.target),
            rdev: integer(c.rdev).map { UInt64(bitPattern: $0) },
            atimeNs: integer(c.atime) ?? 0,
            mtimeNs: integer(c.mtime) ?? 0,
            ctimeNs: integer(c.ctime) ?? 0,
            btimeNs: integer(c.btime) ?? 0)
    }

    static func decodeUpload(_ row: Row) throws -> UploadRecord {
        let tagsJSON: String? = row["tags"]
        let paramsJSON: String = row["params"]
        let resultIno: Int64? = row["result_ino"]
        return UploadRecord(
            id: row["id"],
            namespace: try Namespace(row["namespace"] as String),
            path: try StoragePath(row["path"] as String),
            size: row["size"],
            contentType: row["content_type"],
            tags: tagsJSON.flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) },
            params: (try? JSONDecoder().decode(UploadParams.self, from: Data(paramsJSON.utf8))) ?? UploadParams(),
            createdNs: row["created_ns"],
            expiresAt: row["expires_at"],
            state: UploadRecord.State(rawValue: row["state"]) ?? .open,
            resultInode: resultIno.map { UInt64($0) },
            autoComplete: row["auto_complete"])
    }

    static func json(_ value: some Encodable) -> String {
        String(decoding: WireJSON.encode(value), as: UTF8.self)
    }

}

extension Database {
    /// One statement with arguments, compiled once per connection and kept (GRDB's statement
    /// cache): stowd runs the same few statements for every file, and compiling them (parser and
    /// GRDB's authorizer) cost more than running them (perf, 2026-11-22).
    func executeCached(sql: String, arguments: StatementArguments) throws {
        try cachedStatement(sql: sql).execute(arguments: arguments)
    }
}
