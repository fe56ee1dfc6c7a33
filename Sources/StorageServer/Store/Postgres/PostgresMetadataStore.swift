public import Foundation
public import Logging
import NIOCore
import NIOFoundationCompat
import NIOSSL
import PostgresNIO
public import StorageProtocol
import Synchronization

/// The PostgreSQL metadata store (`stowd --database postgres://…`): the SQLite store's model and
/// behaviour, shared by every stowd replica that names the same database.
///
/// Every method is one statement, most of them one call of a PL/pgSQL function of `PostgresSchema`
/// (one round trip, one transaction at READ COMMITTED, rows locked in inode order inside). A call
/// that lost a race (serialization failure, deadlock, a unique name taken meanwhile, `SN040`) runs
/// again, up to `attempts` times, with a short random backoff; the refusals of the schema come back
/// as `StoreError`s. While the database cannot be reached, a call waits at most `leaseTimeout` for a
/// connection and then fails with `StoreError.unavailable` (503), so a request never hangs on it.
///
/// LOCK ORDERING: none in Swift (no lock is held across an await); PostgreSQL's row locks are taken
/// in ascending inode order by the functions.
public final class PostgresMetadataStore: MetadataStore {
    let location: DatabaseLocation
    let client: PostgresClient
    let blobGraceNs: Int64
    let logger: Logger
    private let runner: Task<Void, Never>
    /// How long a call waits for a connection before it answers "unavailable".
    let leaseTimeout: Duration
    /// False after a call found the database away, until one gets through: meanwhile calls wait
    /// only `retryLeaseTimeout`, so that requests fail at once during an outage instead of each
    /// waiting `leaseTimeout`.
    private let reachable = Atomic<Bool>(true)
    static let retryLeaseTimeout: Duration = .milliseconds(500)
    /// How many times a call that lost a race is run.
    static let attempts = 8

    public init(_ location: DatabaseLocation, blobGraceSeconds: Int64, logger: Logger, leaseTimeout: Duration = .seconds(5)) throws {
        self.location = location
        blobGraceNs = blobGraceSeconds * 1_000_000_000
        self.logger = logger
        self.leaseTimeout = leaseTimeout
        var config: PostgresClient.Configuration
        if let folder = location.socketFolder {
            config = .init(unixSocketPath: folder + "/.s.PGSQL.\(location.port)", username: location.user, password: location.password, database: location.database)
        } else {
            config = .init(host: location.host ?? "127.0.0.1", port: location.port, username: location.user, password: location.password,
                           database: location.database, tls: try Self.tls(location))
        }
        config.options.maximumConnections = location.poolSize
        config.options.connectTimeout = .seconds(5)
        // A statement never runs unbounded; a session never sits in an open transaction.
        // No JIT: stowd's statements are short, and a search whose plan is estimated large (a
        // folder's entries: 600,000 rows estimated, 1,000 read) spent 340 ms compiling for 20 ms of work.
        var startup: [(String, String)] = [("statement_timeout", "60000"), ("idle_in_transaction_session_timeout", "60000"),
                                           ("application_name", "stowd"), ("jit", "off")]
        if let schema = location.schema { startup.append(("search_path", schema)) }
        config.options.additionalStartupParameters = startup
        let client = PostgresClient(configuration: config)
        self.client = client
        runner = Task { await client.run() }
    }

    deinit { runner.cancel() }

    /// The TLS settings of `sslmode`: nil for disable; else the configuration, and whether TLS is required.
    static func tlsSettings(_ location: DatabaseLocation) -> (configuration: TLSConfiguration, required: Bool)? {
        var tls = TLSConfiguration.makeClientConfiguration()
        switch location.tls {
        case .disable:
            return nil
        case .prefer, .require:
            // As libpq's prefer and require: encrypted, the certificate not checked.
            tls.certificateVerification = .none
            return (tls, location.tls == .require)
        case .verifyFull:
            if let file = location.rootCertificates { tls.trustRoots = .file(file) }
            return (tls, true)
        }
    }

    static func tls(_ location: DatabaseLocation) throws -> PostgresClient.Configuration.TLS {
        guard let (tls, required) = tlsSettings(location) else { return .disable }
        return required ? .require(tls) : .prefer(tls)
    }

    // MARK: - Running statements

    /// Runs one statement and returns its rows (with the retries and error mapping described above).
    func rows(_ q: PostgresQuery) async throws -> [PostgresRandomAccessRow] {
        var attempt = 0
        while true {
            attempt += 1
            do {
                let rows = try await withConnection { [logger] connection in
                    var out: [PostgresRandomAccessRow] = []
                    for try await row in try await connection.query(q, logger: logger) { out.append(row.makeRandomAccess()) }
                    return out
                }
                reachable.store(true, ordering: .relaxed)
                return rows
            } catch let error as PSQLError where Self.isRetryable(error) && attempt < Self.attempts {
                reachable.store(true, ordering: .relaxed)
                try await Task.sleep(for: .microseconds(Int.random(in: 200...(1000 << min(attempt, 6)))))
            } catch {
                // The database answered (a refusal is an answer): it is there. A connection that
                // failed: it is not. A wait for a connection that ran out proves neither (a busy pool).
                if let e = error as? PSQLError {
                    if e.serverInfo != nil { reachable.store(true, ordering: .relaxed) } else if Self.isConnectionFailure(e) {
                        reachable.store(false, ordering: .relaxed)
                    }
                }
                throw Self.mapError(error)
            }
        }
    }

    /// A connection for `body`, or `StoreError.unavailable` when none comes within `leaseTimeout`.
    /// Exactly one side wins: the lease (then the body runs to its end, however long) or the timer
    /// (then the body never starts, and nothing was sent).
    func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let lease = LeaseRace()
        let client = self.client, timeout = reachable.load(ordering: .relaxed) ? leaseTimeout : Self.retryLeaseTimeout
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await client.withConnection { connection in
                    guard lease.leased() else { throw StoreError.unavailable("no connection to the database within \(timeout)") }
                    return try await body(connection)
                }
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                guard lease.timedOut() else { return nil }
                throw StoreError.unavailable("no connection to the database within \(timeout)")
            }
            while let result = try await group.next() {
                if let result {
                    group.cancelAll()
                    return result
                }
            }
            throw CancellationError()
        }
    }

    /// The connection failed (no answer from the database at all).
    static func isConnectionFailure(_ error: PSQLError) -> Bool {
        switch error.code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed: true
        default: false
        }
    }

    static func isRetryable(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState] else { return false }
        // serialization failure, deadlock, a unique key taken meanwhile, a lock not available, a name moved (SN040)
        return ["40001", "40P01", "23505", "55P03", "SN040"].contains(state)
    }

    /// The schema's refusals as `StoreError`s; a database that is away as `unavailable`.
    static func mapError(_ error: any Error) -> any Error {
        guard let e = error as? PSQLError else { return error }
        if let state = e.serverInfo?[.sqlState] {
            let message = e.serverInfo?[.message] ?? ""
            let detail = e.serverInfo?[.detail] ?? ""
            let path = detail.isEmpty ? StoragePath.root : ((try? StoragePath(detail)) ?? .root)
            switch state {
            case "SN001": return (try? Namespace(detail)).map { StoreError.namespaceNotFound($0) } ?? StoreError.badRequest(message)
            case "SN002": return StoreError.notFound(path)
            case "SN003": return StoreError.exists(path)
            case "SN004": return StoreError.notEmpty(path)
            case "SN005": return StoreError.notADirectory(path)
            case "SN006": return StoreError.isADirectory(path)
            case "SN007": return StoreError.invalidRename(message)
            case "SN008": return StoreError.preconditionFailed(message)
            case "SN009": return StoreError.conflict(message)
            case "SN010": return StoreError.badRequest(message)
            case "SN041": return FolderMove.needsTreeLock
            case "SN040", "40001", "40P01", "23505", "55P03":
                return StoreError.conflict("the same names were being changed by other requests; try again")
            default: break
            }
            // Data the database refuses (a NUL in text, a number out of range): the request's fault.
            if state.hasPrefix("22") { return StoreError.badRequest("the database refused a value: \(message)") }
            // Connection failures, the server shutting down or starting, too many connections.
            if state.hasPrefix("08") || ["57P01", "57P02", "57P03", "53300", "57014"].contains(state) {
                return StoreError.unavailable("the database answered \(state): \(message)")
            }
            return error
        }
        switch e.code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed, .sslUnsupported,
            .failedToAddSSLHandler:
            return StoreError.unavailable("the database connection failed: \(e.code)")
        default:
            return error
        }
    }

    // MARK: - Schema

    public func prepare() async throws {
        do {
            try await migrate()
        } catch StoreError.unavailable(let why) {
            // The pool only knows it waited; one connection of its own says why (refused, a password, TLS).
            throw StoreError.unavailable(await connectionProblem() ?? why)
        }
    }

    /// The settings of one connection outside the pool (the pool's, with its `search_path`).
    func singleConnectionConfiguration(applicationName: String = "stowd") throws -> PostgresConnection.Configuration {
        var config: PostgresConnection.Configuration
        if let folder = location.socketFolder {
            config = .init(unixSocketPath: folder + "/.s.PGSQL.\(location.port)", username: location.user, password: location.password, database: location.database)
        } else {
            var tls = PostgresConnection.Configuration.TLS.disable
            if let (c, required) = Self.tlsSettings(location) {
                do {
                    let context = try NIOSSLContext(configuration: c)
                    tls = required ? .require(context) : .prefer(context)
                } catch {
                    throw StoreError.unavailable("its TLS settings cannot be used: \(error)")
                }
            }
            config = .init(host: location.host ?? "127.0.0.1", port: location.port, username: location.user, password: location.password,
                           database: location.database, tls: tls)
        }
        config.options.connectTimeout = .seconds(5)
        var startup: [(String, String)] = [("application_name", applicationName)]
        if let schema = location.schema { startup.append(("search_path", schema)) }
        config.options.additionalStartupParameters = startup
        return config
    }

    /// Why a connection cannot be made, from one attempt outside the pool; nil when it can.
    func connectionProblem() async -> String? {
        let config: PostgresConnection.Configuration
        do {
            config = try singleConnectionConfiguration()
        } catch StoreError.unavailable(let why) {
            return why
        } catch {
            return "\(error)"
        }
        do {
            let connection = try await PostgresConnection.connect(configuration: config, id: 0, logger: logger)
            try? await connection.close()
            return nil
        } catch let e as PSQLError {
            if let message = e.serverInfo?[.message] { return message }
            return "\(e.code)" + (e.underlying.map { ": \($0)" } ?? "")
        } catch {
            return "\(error)"
        }
    }

    private func migrate() async throws {
        let schema = location.schema
        try await withConnection { [logger] connection in
            // One stowd migrates at a time; the others wait here, then find it done.
            let key = "stowd migrations \(schema ?? "public")"
            _ = try await connection.query("SELECT pg_advisory_lock(hashtextextended(\(key), 0))", logger: logger).collect()
            do {
                try await Self.migrate(connection, schema: schema, logger: logger)
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(hashtextextended(\(key), 0))", logger: logger).collect()
                throw error
            }
            _ = try await connection.query("SELECT pg_advisory_unlock(hashtextextended(\(key), 0))", logger: logger).collect()
        }
    }

    static func migrate(_ connection: PostgresConnection, schema: String?, logger: Logger) async throws {
        if let schema {
            // A plain identifier (checked by DatabaseLocation): safe to put in the statement.
            _ = try await connection.query(PostgresQuery(unsafeSQL: "CREATE SCHEMA IF NOT EXISTS \(schema)"), logger: logger).collect()
        }
        _ = try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS stow_migrations (
                version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())
            """, logger: logger
        ).collect()
        var applied = Set<Int>()
        for row in try await connection.query("SELECT version FROM stow_migrations", logger: logger).collect() {
            applied.insert(Int(try row.decode(Int32.self)))
        }
        let known = PostgresSchema.migrations.map(\.version).max() ?? 0
        if let newest = applied.max(), newest > known {
            throw ServerError(message: "the database was migrated by a newer stowd (schema version \(newest); this stowd knows up to \(known)): run the newer stowd")
        }
        for migration in PostgresSchema.migrations where !applied.contains(migration.version) {
            try await connection.withTransaction(logger: logger) { c in
                for statement in migration.statements {
                    _ = try await c.query(PostgresQuery(unsafeSQL: statement), logger: logger).collect()
                }
                _ = try await c.query("INSERT INTO stow_migrations(version, name) VALUES (\(Int32(migration.version)), \(migration.name))", logger: logger).collect()
            }
            logger.info("database: applied migration \(migration.version) (\(migration.name))")
        }
    }

    public func close() async {
        runner.cancel()
        await runner.value
    }

    public func sharedSetting(_ key: String, proposed: Data) async throws -> Data? {
        for _ in 0..<3 {
            // The first replica's value wins; a concurrent insert is seen by the next statement.
            let rows = try await rows(
                """
                WITH made AS (INSERT INTO settings(key, value) VALUES (\(key), \(ByteBuffer(data: proposed)))
                              ON CONFLICT (key) DO NOTHING RETURNING value)
                SELECT value FROM made UNION ALL SELECT value FROM settings WHERE key = \(key)
                """)
            if let first = rows.first {
                let buffer = try first["value"].decode(ByteBuffer.self)
                return Data(buffer.readableBytesView)
            }
        }
        throw StoreError.conflict("the setting \(key) could not be read from the database")
    }

    // MARK: - Namespaces

    public func createNamespace(_ ns: Namespace) async throws -> (NamespaceInfo, created: Bool) {
        let rows = try await rows("SELECT o_root, o_created_ns, o_created FROM stow_create_namespace(\(ns.name))")
        guard let row = rows.first else { throw StoreError.conflict("the namespace was not made") }
        let info = NamespaceInfo(namespace: ns, rootInode: UInt64(try row["o_root"].decode(Int64.self)), createdNs: try row["o_created_ns"].decode(Int64.self))
        return (info, try row["o_created"].decode(Bool.self))
    }

    public func deleteNamespace(_ ns: Namespace, recursive: Bool) async throws {
        do {
            _ = try await rows("SELECT stow_delete_namespace(stow_o(\(ns.name), \(ChangeOrigin.current)), \(recursive), \(blobGraceNs))")
        } catch StoreError.notEmpty {
            throw StoreError.notEmpty(.root)
        }
    }

    public func namespaces() async throws -> [NamespaceInfo] {
        try await rows("SELECT name, root, created_ns FROM namespaces ORDER BY name").compactMap { row in
            guard let ns = try? Namespace(try row["name"].decode(String.self)) else { return nil }
            return NamespaceInfo(namespace: ns, rootInode: UInt64(try row["root"].decode(Int64.self)), createdNs: try row["created_ns"].decode(Int64.self))
        }
    }

    public func namespace(_ ns: Namespace) async throws -> NamespaceInfo? {
        try await rows("SELECT root, created_ns FROM namespaces WHERE name = \(ns.name)").first.map { row in
            NamespaceInfo(namespace: ns, rootInode: UInt64(try row["root"].decode(Int64.self)), createdNs: try row["created_ns"].decode(Int64.self))
        }
    }

    // MARK: - Reading

    public func node(_ ns: Namespace, _ path: StoragePath) async throws -> Node {
        let rows = try await rows(
            "SELECT \(unescaped: Self.inodeColumns()) FROM inodes WHERE ino = stow_resolve(stow_root(\(ns.name)), \(path.segments))")
        guard let row = rows.first else { throw StoreError.notFound(path) }
        return Node(namespace: ns, path: path, inode: try Self.decodeInode(row))
    }

    public func node(inode: UInt64) async throws -> Node? {
        guard let ino = Int64(exactly: inode) else { return nil }
        let rows = try await rows(
            "SELECT \(unescaped: Self.inodeColumns()), namespace AS ns, stow_path(ino) AS segments FROM inodes WHERE ino = \(ino)")
        guard let row = rows.first, let segments = try row["segments"].decode([String]?.self),
            let ns = try? Namespace(try row["ns"].decode(String.self)), let path = try? StoragePath(segments: segments)
        else { return nil }
        return Node(namespace: ns, path: path, inode: try Self.decodeInode(row))
    }

    public func list(_ ns: Namespace, _ query: ListQuery) async throws -> ListResult {
        // Each row: the folder's count of matching names, and a name with its inode (no name: an
        // empty page, the count alone). Taken as they are decoded, into nodes: an array of
        // (count, name, inode?) tuples between, or the inode's cells gathered in one tuple first,
        // were copied through the runtime's generic witnesses (`tuple_initializeWithCopy`): 5–10%
        // more of stowd's instructions for a page of 1,000 (`perf stat -e instructions:u`).
        var nodes: [Node] = []
        var total = 0
        var lastKey: String?
        var named = 0
        func take(_ count: Int64, _ name: String?, _ inode: @autoclosure () throws -> Inode?) throws {
            total = Int(count)
            guard let name else { return }
            named += 1
            guard nodes.count < query.limit else { return }
            let path = query.recursive
                ? try StoragePath(segments: query.folder.segments + (try StoragePath(name)).segments)
                : try query.folder.appending(name)
            guard let inode = try inode() else { return }
            nodes.append(Node(namespace: ns, path: path, inode: inode))
            lastKey = name
        }
        if query.recursive {
            let rows = try await self.rows(
                """
                SELECT total, entry_name, \(unescaped: Self.inodeColumns("(node).")) FROM stow_list_tree(
                    \(ns.name), \(query.folder.segments), \(query.namePrefix), \(query.search), \(query.after), \(Int64(query.offset)), \(Int64(query.limit) + 1))
                """)
            let columns = rows.first.map { (InodeColumns($0), total: $0["total"].columnIndex, name: $0["entry_name"].columnIndex) }
            nodes.reserveCapacity(min(rows.count, query.limit))
            for row in rows {
                guard let columns else { break }
                try take(try row[columns.total].decode(Int64.self), try row[columns.name].decode(String?.self), try Self.decodeInode(row, columns.0))
            }
        } else {
            // What stow_list_level does, as a query of its own: planned for its values each time, it
            // reads the page in the index's order and stops at its end. Inside the function, the
            // plan PostgreSQL keeps after five calls cannot tell which filters are off, and joined
            // and sorted the whole folder for every page (13 ms for 1 name of a folder of 1,000).
            // The folder and its count are a materialized CTE, read once (written inline, the
            // planner ran the count once per row). The rows come in the order of the names (the
            // column's collation is "C"), sorted once: the join that read the page beside the
            // count sorted it twice. An empty page asks for the count by itself. The function
            // stays for replicas of an older version.
            let prefix = query.namePrefix, search = query.search, after = query.after
            let rows = try await self.rows(
                """
                WITH f AS MATERIALIZED (
                    SELECT r.folder, (SELECT count(*) FROM entries c WHERE c.parent = r.folder
                        AND (\(prefix) = '' OR (c.name >= \(prefix) AND starts_with(c.name, \(prefix))))
                        AND (\(search)::text IS NULL OR \(search) = '' OR strpos(lower(c.name), lower(\(search)::text COLLATE "C")) > 0)) AS total
                    FROM (SELECT stow_resolve_folder(stow_root(\(ns.name)), \(query.folder.segments)) AS folder) r)
                SELECT (SELECT total FROM f) AS total, e.name::text AS entry_name, \(unescaped: Self.inodeColumns("i."))
                FROM entries e JOIN inodes i ON i.ino = e.ino
                WHERE e.parent = (SELECT folder FROM f)
                  AND (\(prefix) = '' OR (e.name >= \(prefix) AND starts_with(e.name, \(prefix))))
                  AND (\(search)::text IS NULL OR \(search) = '' OR strpos(lower(e.name), lower(\(search)::text COLLATE "C")) > 0)
                  AND (\(after)::text IS NULL OR e.name > \(after))
                ORDER BY e.name LIMIT \(Int64(query.limit) + 1) OFFSET \(Int64(query.after == nil ? query.offset : 0))
                """
            )
            let columns = rows.first.map { (InodeColumns($0), total: $0["total"].columnIndex, name: $0["entry_name"].columnIndex) }
            nodes.reserveCapacity(min(rows.count, query.limit))
            for row in rows {
                guard let columns else { break }
                try take(try row[columns.total].decode(Int64.self), try row[columns.name].decode(String.self), try Self.decodeInode(row, columns.0))
            }
            if rows.isEmpty {
                // The folder resolved in a target list, so that a missing folder (or a file) is
                // refused whatever the plan: in a WHERE clause, a scan of no rows never called it.
                let total = try await self.rows(
                    """
                    WITH f AS MATERIALIZED (SELECT stow_resolve_folder(stow_root(\(ns.name)), \(query.folder.segments)) AS folder)
                    SELECT (SELECT count(*) FROM entries c WHERE c.parent = f.folder
                        AND (\(prefix) = '' OR (c.name >= \(prefix) AND starts_with(c.name, \(prefix))))
                        AND (\(search)::text IS NULL OR \(search) = '' OR strpos(lower(c.name), lower(\(search)::text COLLATE "C")) > 0)) AS total
                    FROM f
                    """
                )
                try take(try total.first?["total"].decode(Int64.self) ?? 0, nil, nil)
            }
        }
        let more = named > query.limit
        var splits: [String] = []
        if query.splits > 0, more, !query.recursive {
            // As stow_list_level filters, over the first pages' worth of names only (the index's
            // order): the names at every `limit`-th place from the page's start, followed by another.
            let offset = Int64(query.after == nil ? query.offset : 0)
            let scan = offset + Int64(query.limit) * Int64(query.splits) + 1
            let names = try await self.rows(
                """
                SELECT name FROM (
                    SELECT name, row_number() OVER w AS r, lead(name) OVER w IS NOT NULL AS more FROM (
                        SELECT e.name::text AS name FROM entries e
                        WHERE e.parent = stow_resolve_folder(stow_root(\(ns.name)), \(query.folder.segments))
                          AND (\(query.namePrefix) = '' OR (e.name >= \(query.namePrefix) AND starts_with(e.name, \(query.namePrefix))))
                          AND (\(query.search)::text IS NULL OR \(query.search) = '' OR strpos(lower(e.name), lower(\(query.search)::text COLLATE "C")) > 0)
                          AND (\(query.after)::text IS NULL OR e.name > \(query.after))
                        ORDER BY e.name LIMIT \(scan)) page
                    WINDOW w AS (ORDER BY name COLLATE "C")) numbered
                WHERE r > \(offset) AND (r - \(offset)) % \(Int64(query.limit)) = 0 AND more ORDER BY name COLLATE "C" LIMIT \(Int64(query.splits))
                """)
            splits = try names.map { try $0["name"].decode(String.self) }
        }
        return ListResult(nodes: nodes, total: total, next: more ? lastKey : nil, splits: splits)
    }

    // MARK: - Changing the tree

    public func makeFolder(_ ns: Namespace, _ path: StoragePath, attributes: NewNodeAttributes, parents: Bool, existOk: Bool) async throws -> Node {
        try await node(
            ns, path,
            """
            SELECT \(unescaped: Self.inodeColumns()) FROM stow_make_folder(stow_o(\(ns.name), \(ChangeOrigin.current)), \(path.segments), \(attributes.mode.map(Int64.init)),
                \(attributes.uid.map(Int64.init)), \(attributes.gid.map(Int64.init)), \(parents), \(existOk))
            """)
    }

    /// One statement, so one commit: the folder, the session's renewal and the lease.
    public func makeFolder(
        _ ns: Namespace, _ path: StoragePath, attributes: NewNodeAttributes, parents: Bool, namesLeaseFor session: String, leaseNs: Int64
    ) async throws -> (node: Node, leased: Bool) {
        let lease = LockSetCoding.namesLease(session: session), version = LockSetCoding.newVersion()
        let rows = try await rows(
            """
            WITH made AS MATERIALIZED (
                    SELECT \(unescaped: Self.inodeColumns()) FROM stow_make_folder(stow_o(\(ns.name), \(ChangeOrigin.current)), \(path.segments),
                        \(attributes.mode.map(Int64.init)), \(attributes.uid.map(Int64.init)), \(attributes.gid.map(Int64.init)), \(parents), false)),
                renewed AS (
                    INSERT INTO lock_sessions(namespace, id, expires_ns) VALUES (\(ns.name), \(session), stow_now() + \(leaseNs))
                    ON CONFLICT (namespace, id) DO UPDATE SET expires_ns = EXCLUDED.expires_ns RETURNING 1),
                leased AS (
                    INSERT INTO lock_sets(namespace, ino, kind, version, locks)
                    SELECT \(ns.name), made.ino, \(LockKind.names.rawValue), \(version), \(lease) FROM made
                    ON CONFLICT DO NOTHING RETURNING 1)
            SELECT made.*, (SELECT count(*) FROM leased) AS leased, (SELECT count(*) FROM renewed) AS renewed FROM made
            """)
        guard let row = rows.first else { throw StoreError.conflict("`\(path)` changed while it was being changed; try again") }
        return (Node(namespace: ns, path: path, inode: try Self.decodeInode(row)), try row["leased"].decode(Int64.self) == 1)
    }

    public func removeFolder(_ ns: Namespace, _ path: StoragePath) async throws {
        _ = try await rows("SELECT stow_remove_folder(stow_o(\(ns.name), \(ChangeOrigin.current)), \(path.segments))")
    }

    public func removeFile(_ ns: Namespace, _ path: StoragePath, ifMatch: String?) async throws {
        _ = try await rows("SELECT stow_remove_file(stow_o(\(ns.name), \(ChangeOrigin.current)), \(path.segments), \(ifMatch), \(blobGraceNs))")
    }

    /// One call and one transaction for the lot (`stow_remove_files`), each file deleted or
    /// refused on its own. In path order, so that two batches lock the folders they share in the
    /// same order; answered in the caller's.
    public func removeFiles(_ ns: Namespace, _ files: [FileDeletion]) async throws -> [Result<Void, any Error>] {
        guard !files.isEmpty else { return [] }
        let order = files.indices.sorted { a, b in files[a].path < files[b].path || (files[a].path == files[b].path && a < b) }
        let paths = order.map { files[$0].path.segments.joined(separator: "/") }
        // An If-Match with a NUL cannot match an ETag (none has one), and PostgreSQL's text cannot
        // carry it: sent as a value that matches nothing, as the SQLite store compares it.
        let ifMatch = order.map { i -> String in
            guard let m = files[i].ifMatch else { return "" }
            return m.utf8.contains(0) ? "\"\u{1}\"" : m
        }
        let match = order.map { files[$0].ifMatch != nil }
        // 0 for none; an inode no row can have (beyond Int64) as -1, which matches nothing.
        let inodes = order.map { i -> Int64 in files[i].inode.map { Int64(exactly: $0) ?? -1 } ?? 0 }
        let rows = try await rows(
            """
            SELECT idx, err_code, err_message, err_detail FROM stow_remove_files(
                stow_o(\(ns.name), \(ChangeOrigin.current)), \(paths), \(ifMatch), \(match), \(inodes), \(blobGraceNs))
            """)
        var results: [Result<Void, any Error>?] = Array(repeating: nil, count: files.count)
        for row in rows {
            let k = Int(try row["idx"].decode(Int32.self)) - 1
            guard order.indices.contains(k) else { continue }
            results[order[k]] = try Self.refusal(row).map { .failure($0) } ?? .success(())
        }
        return results.map { $0 ?? .failure(StoreError.conflict("the file was not deleted; try again")) }
    }

    public func rename(_ ns: Namespace, from: StoragePath, to: StoragePath, replace: Bool, exchange: Bool, expecting: ExchangeExpectation?) async throws -> Node {
        // Shared tree lock first; a rename that turns out to move a folder (SN041) runs again holding it exclusively.
        for exclusive in [false, true] {
            do {
                if exchange, let expecting {
                    return try await node(
                        ns, to,
                        """
                        SELECT \(unescaped: Self.inodeColumns()) FROM stow_exchange_if(stow_o(\(ns.name), \(ChangeOrigin.current)), \(from.segments), \(to.segments),
                            \(Int64(bitPattern: expecting.from)), \(Int64(bitPattern: expecting.to)), \(from.isWithin(to)), \(blobGraceNs), \(exclusive))
                        """)
                }
                return try await node(
                    ns, to,
                    """
                    SELECT \(unescaped: Self.inodeColumns()) FROM stow_rename(stow_o(\(ns.name), \(ChangeOrigin.current)), \(from.segments), \(to.segments), \(replace), \(exchange),
                        \(to.isWithin(from) && to != from), \(from.isWithin(to)), \(blobGraceNs), \(exclusive))
                    """)
            } catch FolderMove.needsTreeLock where !exclusive {
                continue
            }
        }
        throw StoreError.conflict("`\(from)` could not be renamed; try again")
    }

    /// `stow_rename` found that it moves a folder (SN041): run it again with the tree lock.
    enum FolderMove: Error { case needsTreeLock }

    public func makeNode(_ ns: Namespace, _ path: StoragePath, kind: NodeKind, attributes: NewNodeAttributes, target: String?, rdev: UInt64?) async throws -> Node {
        try await node(
            ns, path,
            """
            SELECT \(unescaped: Self.inodeColumns()) FROM stow_make_node(stow_o(\(ns.name), \(ChangeOrigin.current)), \(path.segments), \(kind.rawValue),
                \(attributes.mode.map(Int64.init)), \(attributes.uid.map(Int64.init)), \(attributes.gid.map(Int64.init)), \(target),
                \(rdev.map { Int64(bitPattern: $0) }))
            """)
    }

    public func link(_ ns: Namespace, from: StoragePath, to: StoragePath) async throws -> Node {
        try await node(
            ns, to,
            "SELECT \(unescaped: Self.inodeColumns()) FROM stow_link(stow_o(\(ns.name), \(ChangeOrigin.current)), \(from.segments), \(to.segments))")
    }

    public func patch(_ ns: Namespace, _ path: StoragePath, _ patch: FilePatch, ifMatch: String?) async throws -> Node {
        let change = PatchDeclaration(patch)
        return try await node(
            ns, path,
            """
            SELECT \(unescaped: Self.inodeColumns()) FROM stow_patch(stow_o(\(ns.name), \(ChangeOrigin.current)), \(path.segments), \(Self.json(change))::jsonb, \(ifMatch))
            """)
    }

    public func swapBlob(_ ns: Namespace, _ path: StoragePath, expectedBlob: String, newBlob: BlobInfo, inline: Data?, mtimeNs: Int64?) async throws -> Node {
        try await node(
            ns, path,
            """
            SELECT \(unescaped: Self.inodeColumns()) FROM stow_swap_blob(stow_o(\(ns.name), \(ChangeOrigin.current)), \(path.segments), \(expectedBlob), \(newBlob.id),
                \(newBlob.size), \(newBlob.sha256), \(inline.map { ByteBuffer(data: $0) }), \(mtimeNs), \(blobGraceNs))
            """)
    }

    /// The one node a tree function returns.
    private func node(_ ns: Namespace, _ path: StoragePath, _ query: PostgresQuery) async throws -> Node {
        guard let row = try await rows(query).first else { throw StoreError.conflict("`\(path)` changed while it was being changed; try again") }
        return Node(namespace: ns, path: path, inode: try Self.decodeInode(row))
    }

    // MARK: - Uploads

    public func createUpload(_ u: UploadRecord) async throws {
        let rows = try await rows(
            """
            INSERT INTO uploads(id, namespace, path, size, content_type, tags, params, created_ns, expires_at, state, result_ino, auto_complete)
            SELECT \(u.id), \(u.namespace.name), \(u.path.string), \(u.size), \(u.contentType), \(u.tags.map { Self.json($0) }),
                   \(Self.json(u.params)), \(u.createdNs), \(u.expiresAt), \(u.state.rawValue), \(u.resultInode.map { Int64($0) }), \(u.autoComplete)
            WHERE EXISTS (SELECT 1 FROM namespaces WHERE name = \(u.namespace.name))
            RETURNING id
            """)
        if rows.isEmpty { throw StoreError.namespaceNotFound(u.namespace) }
    }

    public func upload(id: String) async throws -> UploadRecord? {
        try await rows("SELECT \(unescaped: Self.uploadColumns) FROM uploads WHERE id = \(id)").first.map(Self.decodeUpload)
    }

    public func deleteUpload(id: String) async throws {
        _ = try await rows("DELETE FROM uploads WHERE id = \(id)")
    }

    public func extendUpload(id: String, until: Int64) async throws {
        _ = try await rows("UPDATE uploads SET expires_at = \(until) WHERE id = \(id) AND state = 'open' AND expires_at < \(until)")
    }

    public func publish(_ upload: UploadRecord, blob: BlobInfo) async throws -> Node {
        try await node(
            upload.namespace, upload.path,
            """
            SELECT \(unescaped: Self.inodeColumns()) FROM stow_publish(\(upload.id), stow_o(\(upload.namespace.name), \(ChangeOrigin.current)), \(upload.path.segments),
                \(Self.json(PlaceDeclaration(upload, blob: blob)))::jsonb, \(blob.id), \(blob.size), \(blob.sha256), \(blobGraceNs))
            """)
    }

    public func publishInline(_ files: [InlineFile]) async throws -> [Result<Node, any Error>] {
        guard !files.isEmpty else { return [] }
        // Stored in path order, so that two batches lock the folders they share in the same order
        // (fewer deadlocks to detect and retry); answered in the caller's order.
        let order = files.indices.sorted { a, b in
            let x = files[a].upload, y = files[b].upload
            return (x.namespace.name, x.path) < (y.namespace.name, y.path)
        }
        let declarations = order.map { Self.json(PlaceDeclaration(files[$0].upload, blob: files[$0].blob)) }
        let bytes = order.map { ByteBuffer(data: files[$0].bytes) }
        let rows = try await rows(
            """
            SELECT idx, err_code, err_message, err_detail, \(unescaped: Self.inodeColumns("(node).")) FROM stow_publish_inline(
                stow_o(\(declarations)::jsonb[], \(ChangeOrigin.current)), \(bytes), \(blobGraceNs))
            """)
        var results: [Result<Node, any Error>?] = Array(repeating: nil, count: files.count)
        for row in rows {
            let k = Int(try row["idx"].decode(Int32.self)) - 1
            guard order.indices.contains(k) else { continue }
            let i = order[k]
            let f = files[i]
            if let refused = try Self.refusal(row) {
                results[i] = .failure(refused)
            } else {
                results[i] = .success(Node(namespace: f.upload.namespace, path: f.upload.path, inode: try Self.decodeInode(row)))
            }
        }
        return results.map { $0 ?? .failure(StoreError.conflict("the file was not stored; try again")) }
    }

    /// The refusal a batch function's row reports (`err_code`, `err_message`, `err_detail`), if any.
    static func refusal(_ row: PostgresRandomAccessRow) throws -> (any Error)? {
        guard let code = try row["err_code"].decode(String?.self) else { return nil }
        return storeError(code: code, message: try row["err_message"].decode(String?.self) ?? "", detail: try row["err_detail"].decode(String?.self) ?? "")
    }

    /// A refusal reported in a row (`publishInline`, `removeFiles`) as the error it stands for.
    static func storeError(code: String, message: String, detail: String) -> any Error {
        let path = detail.isEmpty ? StoragePath.root : ((try? StoragePath(detail)) ?? .root)
        switch code {
        case "SN001": return (try? Namespace(detail)).map { StoreError.namespaceNotFound($0) } ?? StoreError.badRequest(message)
        case "SN002": return StoreError.notFound(path)
        case "SN003": return StoreError.exists(path)
        case "SN004": return StoreError.notEmpty(path)
        case "SN005": return StoreError.notADirectory(path)
        case "SN006": return StoreError.isADirectory(path)
        case "SN007": return StoreError.invalidRename(message)
        case "SN008": return StoreError.preconditionFailed(message)
        case "SN010": return StoreError.badRequest(message)
        case let c where c.hasPrefix("22"): return StoreError.badRequest("the database refused a value: \(message)")
        default: return StoreError.conflict(message)
        }
    }

    public func inlineBlob(_ id: String) async throws -> Data? {
        try await rows("SELECT data FROM inline_blobs WHERE id = \(id)").first.map { Data(try $0["data"].decode(ByteBuffer.self).readableBytesView) }
    }

    // MARK: - Garbage collection

    public func expiredUploads(before seconds: Int64, limit: Int) async throws -> [UploadRecord] {
        try await rows("SELECT \(unescaped: Self.uploadColumns) FROM uploads WHERE expires_at < \(seconds) ORDER BY expires_at LIMIT \(Int64(limit))")
            .map(Self.decodeUpload)
    }

    public func claimExpiredUpload(id: String, before seconds: Int64) async throws -> Bool {
        try await !rows("DELETE FROM uploads WHERE id = \(id) AND expires_at < \(seconds) RETURNING id").isEmpty
    }

    public func claimDeadBlobs(before nanoseconds: Int64, lease: Int64, limit: Int) async throws -> [String] {
        // SKIP LOCKED: collectors on other replicas take other rows; the lease keeps a claimed row
        // from them until this one forgets it (or stops before it could: then it is due again).
        try await rows(
            """
            UPDATE dead_blobs SET delete_after = \(nanoseconds + lease)
            WHERE blob IN (SELECT blob FROM dead_blobs WHERE delete_after < \(nanoseconds) ORDER BY delete_after
                           LIMIT \(Int64(limit)) FOR UPDATE SKIP LOCKED)
            RETURNING blob
            """
        ).map { try $0["blob"].decode(String.self) }
    }

    public func forgetDeadBlobs(_ ids: [String]) async throws {
        guard !ids.isEmpty else { return }
        _ = try await rows(
            """
            WITH gone AS (DELETE FROM dead_blobs WHERE blob = ANY(\(ids)) RETURNING blob)
            DELETE FROM inline_blobs b WHERE b.id IN (SELECT blob FROM gone)
                AND NOT EXISTS (SELECT 1 FROM inodes i WHERE i.blob = b.id)
            """)
    }

    public func isBlobInUse(_ id: String) async throws -> Bool {
        try await rows("SELECT EXISTS (SELECT 1 FROM inodes WHERE blob = \(id)) AS used").first?["used"].decode(Bool.self) ?? false
    }

    public func referencedBlobs(among ids: [String]) async throws -> Set<String> {
        guard !ids.isEmpty else { return [] }
        let rows = try await rows(
            """
            SELECT x AS id FROM unnest(\(ids)) x
            WHERE EXISTS (SELECT 1 FROM inodes WHERE blob = x)
               OR EXISTS (SELECT 1 FROM uploads WHERE id = x AND state = 'open')
               OR EXISTS (SELECT 1 FROM dead_blobs WHERE blob = x)
            """)
        return Set(try rows.map { try $0["id"].decode(String.self) })
    }

    public func statistics() async throws -> StoreStatistics {
        guard let row = try await rows(
            """
            SELECT (SELECT count(*) FROM namespaces) AS namespaces,
                   (SELECT count(*) FROM inodes WHERE kind = 'file') AS files,
                   (SELECT coalesce(sum(size), 0)::bigint FROM inodes WHERE kind = 'file') AS bytes,
                   (SELECT count(*) FROM uploads WHERE state = 'open') AS open_uploads,
                   (SELECT count(*) FROM dead_blobs) AS dead_blobs
            """
        ).first else { throw StoreError.conflict("no statistics") }
        return StoreStatistics(
            namespaces: Int(try row["namespaces"].decode(Int64.self)), files: Int(try row["files"].decode(Int64.self)),
            bytes: try row["bytes"].decode(Int64.self), openUploads: Int(try row["open_uploads"].decode(Int64.self)),
            deadBlobs: Int(try row["dead_blobs"].decode(Int64.self)))
    }

    // MARK: - The staging ledger

    public func stagingState(_ id: String) async throws -> StagingState? {
        guard let row = try await rows(
            """
            SELECT s3_upload_id, part_size, tail_key, tail_size, version,
                   coalesce((SELECT array_agg(number ORDER BY number) FROM upload_parts p WHERE p.upload_id = s.upload_id), '{}') AS numbers,
                   coalesce((SELECT array_agg(size ORDER BY number) FROM upload_parts p WHERE p.upload_id = s.upload_id), '{}') AS sizes,
                   coalesce((SELECT array_agg(etag ORDER BY number) FROM upload_parts p WHERE p.upload_id = s.upload_id), '{}') AS etags
            FROM upload_staging s WHERE s.upload_id = \(id)
            """
        ).first else { return nil }
        let numbers = try row["numbers"].decode([Int32].self), sizes = try row["sizes"].decode([Int64].self), etags = try row["etags"].decode([String].self)
        guard numbers.count == sizes.count, sizes.count == etags.count else { throw StoreError.conflict("the parts of \(id) do not add up") }
        return StagingState(
            uploadID: id, s3UploadID: try row["s3_upload_id"].decode(String.self), partSize: try row["part_size"].decode(Int64.self),
            parts: numbers.indices.map { StagedPart(number: Int(numbers[$0]), size: sizes[$0], etag: etags[$0]) },
            tailKey: try row["tail_key"].decode(String?.self), tailSize: try row["tail_size"].decode(Int64.self),
            version: try row["version"].decode(Int64.self))
    }

    public func beginStaging(_ id: String, s3UploadID: String, partSize: Int64) async throws -> StagingState {
        _ = try await rows(
            "INSERT INTO upload_staging(upload_id, s3_upload_id, part_size) VALUES (\(id), \(s3UploadID), \(partSize)) ON CONFLICT (upload_id) DO NOTHING")
        guard let state = try await stagingState(id) else { throw StoreError.conflict("the staging of \(id) vanished") }
        return state
    }

    public func commitStaging(_ id: String, expected: Int64, keep: Int, added: [StagedPart], tailKey: String?, tailSize: Int64) async throws -> Bool {
        let rows = try await rows(
            """
            SELECT stow_commit_staging(\(id), \(expected), \(Int32(keep)), \(added.map { Int32($0.number) }), \(added.map(\.size)),
                \(added.map(\.etag)), \(tailKey), \(tailSize)) AS done
            """)
        return try rows.first?["done"].decode(Bool.self) ?? false
    }

    public func dropStaging(_ id: String) async throws {
        _ = try await rows(
            "WITH p AS (DELETE FROM upload_parts WHERE upload_id = \(id)) DELETE FROM upload_staging WHERE upload_id = \(id)")
    }

    public func stagings() async throws -> [(id: String, s3UploadID: String, begunNs: Int64)] {
        try await rows("SELECT upload_id, s3_upload_id, begun_ns FROM upload_staging").map {
            (try $0["upload_id"].decode(String.self), try $0["s3_upload_id"].decode(String.self), try $0["begun_ns"].decode(Int64.self))
        }
    }

    public func integrityProblems(limit: Int) async throws -> [String] {
        var problems: [String] = []
        for sql in IntegrityChecks.queries where problems.count < limit {
            let q = PostgresQuery(unsafeSQL: "SELECT problem FROM (\(sql)) p LIMIT \(limit - problems.count)")
            problems += try await rows(q).map { try $0["problem"].decode(String.self) }
        }
        return problems
    }

    // MARK: - Rows

    static let inodeFields = [
        "ino", "kind", "mode", "uid", "gid", "nlink", "size", "blob", "sha256", "content_type", "public", "target", "rdev", "atime_ns",
        "mtime_ns", "ctime_ns", "btime_ns",
    ]

    /// The select list of an inode, from a table (`source` "") or a composite column (`"(node)."`).
    static func inodeColumns(_ source: String = "") -> String {
        (inodeFields.map { "\(source)\($0) AS \($0)" } + ["\(source)tags::text AS tags", "\(source)metadata::text AS metadata"])
            .joined(separator: ", ")
    }

    /// Where an inode's columns are in the rows of one query: found by name once, then read by
    /// position (a lookup by name for every cell was a fifth of stowd's time listing 1,000 files).
    struct InodeColumns {
        let ino, kind, mode, uid, gid, nlink, size, blob, sha256, contentType, isPublic, target, rdev: Int
        let atime, mtime, ctime, btime, tags, metadata: Int

        init(_ row: PostgresRandomAccessRow) {
            func at(_ name: String) -> Int { row[name].columnIndex }
            (ino, kind, mode, uid, gid, nlink, size) = (at("ino"), at("kind"), at("mode"), at("uid"), at("gid"), at("nlink"), at("size"))
            (blob, sha256, contentType, isPublic, target, rdev) = (at("blob"), at("sha256"), at("content_type"), at("public"), at("target"), at("rdev"))
            (atime, mtime, ctime, btime, tags, metadata) = (at("atime_ns"), at("mtime_ns"), at("ctime_ns"), at("btime_ns"), at("tags"), at("metadata"))
        }
    }

    /// The inode of a row that has `inodeColumns()`; `columns` from any earlier row of the same query.
    static func decodeInode(_ row: PostgresRandomAccessRow, _ columns: InodeColumns? = nil) throws -> Inode {
        let c = columns ?? InodeColumns(row)
        func u32(_ index: Int) throws -> UInt32? { try row[index].decode(Int64?.self).map { UInt32(truncatingIfNeeded: $0) } }
        let tags = try row[c.tags].decode(String.self)
        let metadata = try row[c.metadata].decode(String.self)
        return Inode(
            ino: UInt64(try row[c.ino].decode(Int64.self)),
            kind: NodeKind(rawValue: try row[c.kind].decode(String.self)) ?? .file,
            mode: try u32(c.mode),
            uid: try u32(c.uid),
            gid: try u32(c.gid),
            nlink: UInt32(truncatingIfNeeded: try row[c.nlink].decode(Int64.self)),
            size: try row[c.size].decode(Int64.self),
            blob: try row[c.blob].decode(String?.self),
            sha256: try row[c.sha256].decode(String?.self),
            contentType: try row[c.contentType].decode(String?.self),
            // Most files have neither, and a JSONDecoder per row is costly (a listing of 1,000
            // files through a replica: 44.5 → 36 ms).
            tags: tags == "[]" ? [] : ((try? JSONDecoder().decode([String].self, from: Data(tags.utf8))) ?? []),
            metadata: metadata == "{}" ? [:] : ((try? JSONDecoder().decode([String: String].self, from: Data(metadata.utf8))) ?? [:]),
            isPublic: try row[c.isPublic].decode(Bool.self),
            target: try row[c.target].decode(String?.self),
            rdev: try row[c.rdev].decode(Int64?.self).map { UInt64(bitPattern: $0) },
            atimeNs: try row[c.atime].decode(Int64.self),
            mtimeNs: try row[c.mtime].decode(Int64.self),
            ctimeNs: try row[c.ctime].decode(Int64.self),
            btimeNs: try row[c.btime].decode(Int64.self))
    }

    static let uploadColumns = "id, namespace, path, size, content_type, tags, params, created_ns, expires_at, state, result_ino, auto_complete"

    static func decodeUpload(_ row: PostgresRandomAccessRow) throws -> UploadRecord {
        let tags = try row["tags"].decode(String?.self)
        let params = try row["params"].decode(String.self)
        return UploadRecord(
            id: try row["id"].decode(String.self),
            namespace: try Namespace(try row["namespace"].decode(String.self)),
            path: try StoragePath(try row["path"].decode(String.self)),
            size: try row["size"].decode(Int64.self),
            contentType: try row["content_type"].decode(String.self),
            tags: tags.flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) },
            params: (try? JSONDecoder().decode(UploadParams.self, from: Data(params.utf8))) ?? UploadParams(),
            createdNs: try row["created_ns"].decode(Int64.self),
            expiresAt: try row["expires_at"].decode(Int64.self),
            state: UploadRecord.State(rawValue: try row["state"].decode(String.self)) ?? .open,
            resultInode: try row["result_ino"].decode(Int64?.self).map { UInt64($0) },
            autoComplete: try row["auto_complete"].decode(Bool.self))
    }

    static func json(_ value: some Encodable) -> String {
        String(decoding: WireJSON.encode(value), as: UTF8.self)
    }
}

/// What `stow_place_file` is told about a file: the fields of its upload that are set.
struct PlaceDeclaration: Encodable {
    var namespace: String
    var segments: [String]
    var blob: String
    var size: Int64
    var sha256: String?
    var contentType: String
    var tags: [String]?
    var metadata: [String: String]?
    var isPublic: Bool?
    var mode: UInt32?
    var uid: UInt32?
    var gid: UInt32?
    var mtimeNs: Int64?
    var atimeNs: Int64?
    var ctimeNs: Int64?
    var ifMatch: String?
    var ifNoneMatch: String?

    enum CodingKeys: String, CodingKey {
        case namespace, segments, blob, size, sha256, tags, metadata, mode, uid, gid
        case contentType = "content_type", isPublic = "public", mtimeNs = "mtime_ns", atimeNs = "atime_ns", ctimeNs = "ctime_ns"
        case ifMatch = "if_match", ifNoneMatch = "if_none_match"
    }

    init(_ u: UploadRecord, blob b: BlobInfo) {
        let p = u.params
        namespace = u.namespace.name
        segments = u.path.segments
        blob = b.id
        size = b.size
        sha256 = b.sha256
        contentType = u.contentType
        tags = u.tags
        metadata = p.metadata
        isPublic = p.isPublic
        mode = p.mode
        uid = p.uid
        gid = p.gid
        mtimeNs = p.mtimeNs
        atimeNs = p.atimeNs
        ctimeNs = p.ctimeNs
        ifMatch = p.ifMatch
        ifNoneMatch = p.ifNoneMatch
    }
}

/// A `FilePatch` as `stow_patch` reads it: only the fields that are set.
struct PatchDeclaration: Encodable {
    var patch: FilePatch
    init(_ patch: FilePatch) { self.patch = patch }

    enum CodingKeys: String, CodingKey {
        case tags, metadata, mode, uid, gid
        case metadataSet = "metadata_set", metadataRemove = "metadata_remove", contentType = "content_type", isPublic = "public"
        case atimeNs = "atime_ns", mtimeNs = "mtime_ns", ctimeNs = "ctime_ns"
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encodeIfPresent(patch.tags, forKey: .tags)
        try c.encodeIfPresent(patch.metadata, forKey: .metadata)
        try c.encodeIfPresent(patch.metadataSet, forKey: .metadataSet)
        try c.encodeIfPresent(patch.metadataRemove, forKey: .metadataRemove)
        try c.encodeIfPresent(patch.contentType, forKey: .contentType)
        try c.encodeIfPresent(patch.isPublic, forKey: .isPublic)
        try c.encodeIfPresent(patch.mode, forKey: .mode)
        try c.encodeIfPresent(patch.uid, forKey: .uid)
        try c.encodeIfPresent(patch.gid, forKey: .gid)
        try c.encodeIfPresent(patch.atimeNs, forKey: .atimeNs)
        try c.encodeIfPresent(patch.mtimeNs, forKey: .mtimeNs)
        try c.encodeIfPresent(patch.ctimeNs, forKey: .ctimeNs)
    }
}

/// Who won between a call's connection and its timer (see `PostgresMetadataStore.withConnection`).
final class LeaseRace: Sendable {
    /// 0: waiting, 1: leased, 2: timed out.
    private let state = Atomic<Int>(0)
    /// The connection came first: true, and the timer loses.
    func leased() -> Bool { state.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged }
    /// The timer came first: true, and the connection, if it comes, goes back unused.
    func timedOut() -> Bool { state.compareExchange(expected: 0, desired: 2, ordering: .acquiringAndReleasing).exchanged }
}
