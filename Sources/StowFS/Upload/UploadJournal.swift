public import Foundation
import Synchronization
import GRDB
public import StorageProtocol

/// The durable record of every upload the mount owes the server, in SQLite (GRDB) in the cache
/// folder. A row is written (and fsynced) before `close(2)` returns for a changed file, and
/// deleted only after the server confirmed the upload: a crash loses nothing in between.
public final class UploadJournal: Sendable {
    /// One upload owed to the server.
    public struct Record: Sendable, Equatable {
        public enum State: String, Sendable {
            /// Flushed by close(2) but still open for writing: durable, not yet to be sent.
            case held
            /// Waiting for (or in) a send.
            case queued
            /// Refused by the server in a way retrying soon will not fix; still kept and retried slowly.
            case failed
        }

        public var id: Int64
        public var location: Location
        /// The local file holding the content to send (immutable while queued).
        public var cacheFile: String
        public var size: Int64
        public var params: UploadParams
        public var contentType: String?
        public var tags: [String]?
        /// Changes to apply once the upload completed (set after it started).
        public var patch: FilePatch?
        /// The server's session, once started: a resumed upload continues it.
        public var session: StartUploadResponse?
        public var state: State
        public var attempts: Int
        public var lastError: String?
        /// Milliseconds since the epoch before which no new attempt is made.
        public var nextAttempt: Int64
        public var created: Int64
        /// Set for a delete owed to the server (an unlink), not an upload: `location` goes, and
        /// the record has no content (`cacheFile` is empty).
        public var deletion: Deletion? = nil
        /// For an upload: the server's file it is to land over (the one at its path when it was
        /// written, or renamed onto). Should the upload be dropped (its file removed, or renamed on,
        /// first), that file is deleted instead, on the same conditions as a delete record's.
        /// Kept so that a mount started after a crash knows it too. The journal keeps it current
        /// as earlier uploads of the same path land (`finish`); this copy is what was written and
        /// may lag behind it — `all()` reads the current one.
        public var replaces: Deletion? = nil
        /// When its content was taken, on the clock of ids, where that is not its id: just after
        /// this id. A held record a later close changed (`updateHeld`) holds content newer than
        /// records after it; a record requeued at release (`requeue`) holds what the file had when
        /// release took it, older than a record a close made meanwhile (the file opened, written
        /// and closed again before the requeue was written).
        public var contentAfter: Int64? = nil

        public var isDeletion: Bool { deletion != nil }

        /// When the content was last set, on the clock of ids: a record's content is as old as its
        /// id, a held one changed later (`contentAfter`) just after that id. Of a path's records,
        /// the newest by this has what close last returned for.
        public var contentOrder: (Int64, Int) {
            if let after = contentAfter { return (after, 1) }
            return (id, 0)
        }
    }

    /// What a delete record removes: the server's file `remoteIno` at the record's path, only if
    /// its ETag is still `ifMatch` (when known) — never another file that took the name meanwhile.
    public struct Deletion: Sendable, Equatable {
        public var remoteIno: UInt64
        public var ifMatch: String?
        public init(remoteIno: UInt64, ifMatch: String?) {
            self.remoteIno = remoteIno
            self.ifMatch = ifMatch
        }
    }

    let db: DatabaseQueue
    private let path: String
    /// Where a close's record is made durable (`CloseLog`); nil: each such commit is synced instead.
    private let closeLog: CloseLog?
    /// This database's own random number, in the close log's header.
    let identity: UInt64

    /// Rows made durable by the close log and not yet in SQLite, in id order, and the next id.
    /// Every transaction puts them in first (`transaction`); a background drain does so soon after.
    /// Ids are given out here, under this lock, for every insert: a transaction that takes one
    /// takes every row pending at that moment too, so that no row below an id SQLite holds is
    /// missing from it (the close log's replay rule, `CloseLog`).
    private let pending: Mutex<Pending>
    private struct Pending {
        var rows: [PendingRow] = []
        var nextID: Int64
        var drainScheduled = false
        /// Rows whose close failed (neither the log nor SQLite could make them durable, and the
        /// close said EIO): never put in. They leave with the transaction that skips them.
        var withdrawn: Set<Int64> = []
    }
    private struct PendingRow {
        let id: Int64
        let row: LoggedRow
        let location: Location
    }
    private let drainQueue = DispatchQueue(label: "stowfs.journal.drain")
    /// Rows pending past this many are put in by the closing thread itself.
    static let pendingLimit = 1024
    /// Ids stay below this (a journal counting one a microsecond would take 146,000 years).
    static let idCeiling: Int64 = 1 << 62

    /// Uploads landed lately, by path, in order: what each replaced and what the path holds now.
    /// A record written after a landing with what the path held before it (the value was read
    /// from the inode before the landing reached it) is written with the newer one instead
    /// (`current`). Read and written only inside write transactions, which run one at a time.
    private let landed = Mutex(Landings())
    private struct Landings {
        var byPath: [Location: [(old: Deletion?, new: Deletion, at: UInt64)]] = [:]
        var pruned: UInt64 = 0

        mutating func note(_ location: Location, old: Deletion?, new: Deletion, now: UInt64) {
            // All at once, once per `landedMemory`: a copy of 100,000 files keeps only its last seconds.
            if now - pruned > UploadJournal.landedMemory {
                byPath = byPath.filter { $0.value.contains { now - $0.at <= UploadJournal.landedMemory } }
                pruned = now
            }
            byPath[location, default: []].append((old, new, now))
        }
    }
    /// How long a landing is remembered for that: far longer than a flush's read of the inode
    /// takes to reach the journal.
    static let landedMemory: UInt64 = 10_000_000_000

    /// `useCloseLog: false` leaves the close log out (every close's record a synced commit);
    /// `closeLogCapacity` is its size in bytes (a multiple of 4 KiB).
    public init(path: String, useCloseLog: Bool = true, closeLogCapacity: Int = 8 << 20) throws {
        var config = Configuration()
        config.busyMode = .timeout(10)
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        let queue = try DatabaseQueue(path: path, configuration: config)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            // A record must be on disk when close(2) returns (S1): checked, not assumed.
            guard try Int.fetchOne(db, sql: "PRAGMA synchronous") == 2 else {
                throw DatabaseError(message: "SQLite refused synchronous = FULL for \(path)")
            }
        }
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE uploads (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        namespace TEXT NOT NULL,
                        path TEXT NOT NULL,
                        cache_file TEXT NOT NULL,
                        size INTEGER NOT NULL,
                        params TEXT NOT NULL,
                        content_type TEXT,
                        tags TEXT,
                        patch TEXT,
                        session TEXT,
                        state TEXT NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        last_error TEXT,
                        next_attempt INTEGER NOT NULL DEFAULT 0,
                        created INTEGER NOT NULL
                    );
                    """)
        }
        // A small file's bytes in its record: one commit makes the record and the content durable,
        // where an fsync of the local copy and a commit took two (see `insert`).
        migrator.registerMigration("v2 content") { db in
            try db.execute(sql: "ALTER TABLE uploads ADD COLUMN content BLOB")
        }
        // Deletes owed to the server (unlink), in line with the uploads of the same paths.
        migrator.registerMigration("v3 deletes") { db in
            try db.execute(sql: "ALTER TABLE uploads ADD COLUMN delete_ino INTEGER")
            try db.execute(sql: "ALTER TABLE uploads ADD COLUMN delete_if_match TEXT")
        }
        // The stored file an upload is to replace (`Record.replaces`).
        migrator.registerMigration("v4 replaces") { db in
            try db.execute(sql: "ALTER TABLE uploads ADD COLUMN replaces_ino INTEGER")
            try db.execute(sql: "ALTER TABLE uploads ADD COLUMN replaces_if_match TEXT")
        }
        // Records by path: a landing brings the later records of its path up to date (`finish`).
        migrator.registerMigration("v5 path index") { db in
            try db.execute(sql: "CREATE INDEX uploads_by_path ON uploads(namespace, path)")
        }
        // What ties the close log to this database: a log found beside another one is not replayed into it.
        migrator.registerMigration("v6 close log") { db in
            try db.execute(sql: "CREATE TABLE journal_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            try db.execute(
                sql: "INSERT INTO journal_meta(key, value) VALUES ('identity', ?)", arguments: [Int64.random(in: 1...Int64.max)])
        }
        // A held record's content changed after later records of its path were written (`Record.contentAfter`).
        migrator.registerMigration("v7 content after") { db in
            try db.execute(sql: "ALTER TABLE uploads ADD COLUMN content_after INTEGER")
        }
        // Folder moves and exchanges under way on the server (`UploadJournal.Move`).
        migrator.registerMigration("v8 moves") { db in
            try db.execute(
                sql: """
                    CREATE TABLE moves (
                        id INTEGER PRIMARY KEY,
                        namespace TEXT NOT NULL,
                        from_path TEXT NOT NULL,
                        to_path TEXT NOT NULL,
                        exchange INTEGER NOT NULL,
                        inode INTEGER NOT NULL,
                        mark INTEGER
                    );
                    """)
        }
        try migrator.migrate(queue)
        let identity = UInt64(bitPattern: try queue.read { try Int64.fetchOne($0, sql: "SELECT value FROM journal_meta WHERE key = 'identity'") } ?? 0)
        closeLog = useCloseLog ? try Self.openCloseLog(queue, path: path + "-close.log", capacity: closeLogCapacity, identity: identity) : nil
        self.identity = identity
        self.path = path
        let last = try queue.read { db in
            max(
                try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'uploads'") ?? 0,
                try Int64.fetchOne(db, sql: "SELECT max(id) FROM uploads") ?? 0,
                // Past a move's mark and the id skipped after it (`markMove`): what this mount
                // takes reads a last id larger than the mark (`Move.carries`). A mark no journal
                // gives out is damage, and ignored.
                (try Int64.fetchOne(db, sql: "SELECT max(mark) FROM moves WHERE mark < ?", arguments: [Self.idCeiling - 2]) ?? -1) + 1)
        }
        guard last < Self.idCeiling else { throw DatabaseError(message: "\(path) holds a record id (\(last)) no journal gives out") }
        pending = Mutex(Pending(nextID: last + 1))
        db = queue
    }

    /// The last id given out: a record given an id after this call gets a larger one.
    public var lastGivenID: Int64 { pending.withLock { $0.nextID - 1 } }

    /// The last id given out, and the next one skipped: whatever reads `lastGivenID` after this
    /// call reads a larger number than it returns (a move's mark, `Move.carries`).
    func lastGivenSkippingOne() -> Int64 {
        pending.withLock { p in
            defer { p.nextID += 1 }
            return p.nextID - 1
        }
    }

    // MARK: - Transactions

    /// Runs `body` in one transaction, its commit synced or not (`synchronous = NORMAL` for this
    /// commit alone: the WAL is written in order, so the next synced commit, or `makeDurable`,
    /// makes it durable too). The rows pending from the close log go in first; `allocating` ids
    /// are given out with them, at once, for `body`'s own inserts.
    func transaction<T>(synced: Bool, allocating n: Int = 0, _ body: (Database, [Int64]) throws -> T) throws -> T {
        if failWrites.load(ordering: .relaxed) { throw FSError.io("the journal's disk failed (a fault put in by a test)") }
        var taken = 0
        let result = try db.writeWithoutTransaction { db -> T in
            if !synced { try db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute() }
            defer { if !synced { try? db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute() } }
            var out: T?
            try db.inTransaction {
                let (rows, ids, withdrawn) = pending.withLock { p -> ([PendingRow], [Int64], Set<Int64>) in
                    let ids = (0..<n).map { p.nextID + Int64($0) }
                    p.nextID += Int64(n)
                    return (p.rows, ids, p.withdrawn)
                }
                for r in rows where !withdrawn.contains(r.id) {
                    var row = r.row
                    Self.setReplaces(&row, self.current(r.location, Self.replaces(of: row)))
                    _ = try Self.insertRow(db, row, id: r.id)
                }
                taken = rows.count
                out = try body(db, ids)
                return .commit
            }
            committed.add(1, ordering: .relaxed)
            // Committed: they leave the list now, before the next transaction (on this serial
            // queue) can take them again — one that finished them meanwhile would bring them back.
            // A transaction undone leaves them pending.
            if taken > 0 {
                pending.withLock { p in
                    p.rows.removeFirst(taken)
                    if !p.withdrawn.isEmpty { p.withdrawn = p.withdrawn.filter { id in p.rows.contains { $0.id == id } } }
                }
            }
            return out!
        }
        return result
    }

    /// Puts the pending rows into SQLite soon, off the closing thread.
    private func scheduleDrain(after delay: DispatchTimeInterval = .milliseconds(5)) {
        drainQueue.asyncAfter(deadline: .now() + delay) { [weak self] in
            guard let self else { return }
            self.pending.withLock { $0.drainScheduled = false }
            do {
                try self.transaction(synced: false) { _, _ in }
            } catch {
                // Still pending (and durable in the close log): tried again.
                let again = self.pending.withLock { p -> Bool in
                    guard !p.drainScheduled, !p.rows.isEmpty else { return false }
                    p.drainScheduled = true
                    return true
                }
                if again { self.scheduleDrain(after: .milliseconds(100)) }
            }
        }
    }

    /// Opens the close log, puts back into SQLite the rows it holds that SQLite lost (a power cut
    /// before their commit reached the disk: ids above the AUTOINCREMENT sequence), makes SQLite
    /// durable, and starts the log's next generation. Nil when the log cannot be made (the
    /// journal then syncs each close's commit, as before the log); its replay failing is an error.
    private static func openCloseLog(_ db: DatabaseQueue, path: String, capacity: Int, identity: UInt64) throws -> CloseLog? {
        let entries = CloseLog.entries(atPath: path, identity: identity)
        try db.write { db in
            let seq = try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'uploads'") ?? 0
            // An id no journal gives out (they count up from 1) is not a row of this one: it would
            // also leave none for the next insert.
            for e in entries.sorted(by: { $0.id < $1.id }) where e.id > seq && e.id < Self.idCeiling {
                guard let row = LoggedRow(decoding: e.payload) else { continue }
                _ = try insertRow(db, row, id: e.id)
            }
        }
        // What SQLite holds now may sit in the page cache only (an earlier mount killed, not the
        // machine): on disk before the entries that stand for it go.
        try syncFiles([db.path + "-wal", db.path])
        guard let log = try? CloseLog(path: path, capacity: capacity), (try? log.reset(identity: identity)) != nil else { return nil }
        return log
    }

    /// What an upload written now to `location` replaces: `replaces`, unless uploads of that
    /// path landed since that value was current (then what the last of them stored).
    private func current(_ location: Location, _ replaces: Deletion?) -> Deletion? {
        landed.withLock { m in
            guard let list = m.byPath[location] else { return replaces }
            var v = replaces
            for e in list where e.old == v { v = e.new }
            return v
        }
    }

    /// Uploads the server stored: their records go, and the later uploads of each path now
    /// replace what it stored — in one transaction, so that a crash never leaves a record that
    /// names a file no longer there (its `rm` after the crash would then be refused, 412, and
    /// leave the stored file behind). Returns the records so updated, with their new value.
    @discardableResult
    public func finish(_ ids: [Int64], stored: [Int64: Deletion] = [:]) throws -> [(Int64, Deletion)] {
        try transaction(synced: true) { db, _ in
            var updated: [(Int64, Deletion)] = []
            let now = DispatchTime.now().uptimeNanoseconds
            for id in ids.sorted() {
                if let new = stored[id],
                    let row = try Row.fetchOne(
                        db.cachedStatement(sql: "SELECT namespace, path, replaces_ino, replaces_if_match FROM uploads WHERE id = ? AND delete_ino IS NULL"),
                        arguments: [id]),
                    let ns = (Self.value(row, "namespace") as String?).flatMap({ try? Namespace($0) }),
                    let path = (Self.value(row, "path") as String?).flatMap({ try? StoragePath($0) })
                {
                    // Read as `all` reads them (a damaged value is none, not a trap).
                    let old = (Self.value(row, "replaces_ino") as Int64?).map {
                        Deletion(remoteIno: UInt64(bitPattern: $0), ifMatch: Self.value(row, "replaces_if_match"))
                    }
                    let later = try Int64.fetchAll(
                        db.cachedStatement(sql: "SELECT id FROM uploads WHERE namespace = ? AND path = ? AND id > ? AND delete_ino IS NULL"),
                        arguments: [ns.name, path.string, id])
                    for l in later {
                        try Self.writeReplaces(db, l, new)
                        updated.append((l, new))
                    }
                    landed.withLock { $0.note(Location(namespace: ns, path: path), old: old, new: new, now: now) }
                }
                try db.cachedStatement(sql: "DELETE FROM uploads WHERE id = ?").execute(arguments: [id])
            }
            return updated
        }
    }

    /// Sets what uploads replace (a rename that moved them onto a stored file).
    public func setReplaces(_ ids: [Int64], _ replaces: Deletion?) throws {
        try transaction(synced: true) { db, _ in
            for id in ids { try Self.writeReplaces(db, id, replaces) }
        }
    }

    private static func writeReplaces(_ db: Database, _ id: Int64, _ replaces: Deletion?) throws {
        try db.cachedStatement(sql: "UPDATE uploads SET replaces_ino = ?, replaces_if_match = ? WHERE id = ?")
            .execute(arguments: [replaces.map { Int64(bitPattern: $0.remoteIno) }, replaces?.ifMatch, id])
    }

    /// The largest content kept in a record.
    public static let contentLimit: Int64 = 64 << 10

    static func json<T: Encodable>(_ v: T?) -> String? { v.map { String(decoding: WireJSON.encode($0), as: UTF8.self) } }
    static func decode<T: Decodable>(_ s: String?, _ t: T.Type) -> T? { s.flatMap { try? JSONDecoder().decode(T.self, from: Data($0.utf8)) } }

    /// Adds a record; returns its id. With `content` (the local copy's bytes, at most
    /// `contentLimit`), the copy need not have been fsynced: `restoreContents` writes it back after a crash.
    public func insert(
        location: Location, cacheFile: String, size: Int64, params: UploadParams, contentType: String?, tags: [String]?, patch: FilePatch?,
        state: Record.State, content: Data? = nil, replaces: Deletion? = nil, contentAfter: Int64? = nil
    ) throws -> Int64 {
        guard let ns = location.namespace else { throw FSError.notPermitted }
        let row = Self.row(ns, location, cacheFile, size, params, contentType, tags, patch, state, content: content, replaces: replaces)
        // The close log's rows carry no `content_after` (closes need none): a record with one, rare
        // (a release with no held record), is a synced commit of its own.
        if contentAfter == nil, let closeLog, !closeLog.isBroken { return try logged(row, location) }
        // No close log: a synced commit of its own.
        return try commit(synced: true) { db, id in
            var row = row
            Self.setReplaces(&row, self.current(location, replaces))
            let id = try Self.insertRow(db, row, id: id)
            if let contentAfter {
                try db.cachedStatement(sql: "UPDATE uploads SET content_after = ? WHERE id = ?").execute(arguments: [contentAfter, id])
            }
            return id
        }
    }

    /// Adds a delete record; returns its id. Not synced, as a local filesystem's unlink is not: the
    /// record is durable at the next synced commit (a landing makes one; the WAL is written in
    /// order; a close does not, since it writes the close log), at `makeDurable()` (fsyncdir), or
    /// once the server did it. A power
    /// cut before then can bring the file back (never a file lost). Synced, each unlink of
    /// `rm -rf` waited for the disk.
    public func insertDeletion(location: Location, _ deletion: Deletion) throws -> Int64 {
        guard let ns = location.namespace else { throw FSError.notPermitted }
        return try commit(synced: false) { db, id in
            try db.cachedStatement(
                sql: """
                    INSERT INTO uploads(id, namespace, path, cache_file, size, params, state, created, delete_ino, delete_if_match)
                    VALUES (?, ?, ?, '', 0, '{}', 'queued', ?, ?, ?)
                    """
            ).execute(arguments: [
                id, ns.name, location.path.string, Int64(Date().timeIntervalSince1970 * 1000), Int64(bitPattern: deletion.remoteIno), deletion.ifMatch,
            ])
            return id
        }
    }

    /// One transaction (`transaction`) that inserts one row: `work` gets its id.
    private func commit(synced: Bool, _ work: (Database, Int64) throws -> Int64) throws -> Int64 {
        try transaction(synced: synced, allocating: 1) { db, ids in try work(db, ids[0]) }
    }

    /// The connection's `PRAGMA synchronous` (2: FULL, what every commit but the unsynced ones uses).
    func synchronous() throws -> Int { try db.read { try Int.fetchOne($0, sql: "PRAGMA synchronous") ?? -1 } }

    /// Makes every commit so far durable, the unsynced ones too (`insertDeletion`, a requeue): an
    /// fsync of the write-ahead log, which holds them in order.
    public func makeDurable() throws {
        // Rows pending from the close log are durable there; in SQLite, synced, they are durable for good.
        // A transaction with nothing to write syncs nothing (the drain may have just taken them):
        // the WAL's fsync follows whatever it did.
        if pending.withLock({ !$0.rows.isEmpty }) { try transaction(synced: false) { _, _ in } }
        try Self.syncFiles([path + "-wal"])
    }

    /// fsyncs each file that exists. (No WAL: nothing was written since the last checkpoint, which
    /// synced the database.)
    private static func syncFiles(_ paths: [String]) throws {
        for p in paths {
            let fd = Glibc.open(p, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                if errno == ENOENT { continue }
                throw FSError.io("cannot open \(p): \(String(cString: strerror(errno)))")
            }
            defer { Glibc.close(fd) }
            guard Glibc.fsync(fd) == 0 else { throw FSError.io("cannot sync \(p): \(String(cString: strerror(errno)))") }
        }
    }

    // MARK: - Group commit

    private typealias Work = @Sendable (Database) throws -> Int64
    /// The synced commits shared by writes from several threads (`grouped`).
    private let group = CommitGroup<Work>()

    /// Runs `work` in a synced commit shared with the writes other threads ask for meanwhile:
    /// the first caller commits what is waiting in one transaction (one fsync of the WAL) while
    /// the others wait; those that arrived during that commit go together in the next. Each write
    /// runs in a savepoint of its own, so one that fails is undone alone and throws to its caller.
    /// Returns when the commit holding `work` is on disk — the promise of `db.write`, for the
    /// price of one fsync per group instead of one per write: closes on several FUSE threads at
    /// once (parallel writers) no longer queue behind each other's fsyncs.
    func grouped(_ work: @escaping @Sendable (Database) throws -> Int64) throws -> Int64 {
        try group.run(work) { batch in
            if batch.count == 1 {
                // Alone: its transaction is its savepoint (a savepoint would keep a first image
                // of every page it changes, for nothing).
                return [Result { try transaction(synced: true) { db, _ in try batch[0](db) } }]
            }
            do {
                return try transaction(synced: true) { db, _ in
                    batch.map { work in
                        Result {
                            var id: Int64 = 0
                            try db.inSavepoint {
                                id = try work(db)
                                return .commit
                            }
                            return id
                        }
                    }
                }
            } catch {
                // The commit itself failed: none of them is on disk.
                return batch.map { _ in .failure(error) }
            }
        }
    }

    /// How many commits so far carried the writes of more than one caller.
    public var sharedCommits: Int { group.shared + logGroup.shared }
    /// Transactions committed so far (tests: what one operation costs).
    public var commits: Int { committed.load(ordering: .relaxed) }
    private let committed = Atomic<Int>(0)

    // MARK: - Records made durable by the close log

    /// A new row waiting for the close log's next write (`logged`), with its id given already.
    private struct LoggedWrite {
        let id: Int64
        let row: LoggedRow
    }
    /// The close log's writes shared by closes on several threads.
    private let logGroup = CommitGroup<LoggedWrite>()

    /// Adds `row` and returns once it is durable — as a synced commit would, for one write of the
    /// close log and no wait for SQLite: the row gets its id and joins the pending rows at once,
    /// and goes into SQLite with the next transaction or the background drain. The rows that
    /// other threads add meanwhile share the log's next write.
    private func logged(_ row: LoggedRow, _ location: Location) throws -> Int64 {
        let (id, schedule, inline) = pending.withLock { p -> (Int64, Bool, Bool) in
            let id = p.nextID
            p.nextID += 1
            p.rows.append(PendingRow(id: id, row: row, location: location))
            let schedule = !p.drainScheduled
            if schedule { p.drainScheduled = true }
            return (id, schedule, p.rows.count >= Self.pendingLimit)
        }
        let result = Result {
            try logGroup.run(LoggedWrite(id: id, row: row)) { batch in
                let written = Result { try writeLog(batch) }
                return batch.map { w in written.map { w.id } }
            }
        }
        if case .failure = result {
            // The close fails (EIO), so its record must not reach SQLite later and upload what the
            // caller was told is not stored (its local copy is gone too). Still pending: skipped
            // and dropped by the next transaction. Put in already (a drain before the failure):
            // deleted by that transaction.
            pending.withLock { _ = $0.withdrawn.insert(id) }
            try? transaction(synced: false) { db, _ in try db.cachedStatement(sql: "DELETE FROM uploads WHERE id = ?").execute(arguments: [id]) }
        }
        if schedule { scheduleDrain() }
        // Far behind (SQLite slower than the closes): this thread catches up before it goes on.
        if inline { try? transaction(synced: false) { _, _ in } }
        return try result.get()
    }

    /// Makes the batch's rows durable: one write of the close log; when it is full or fails, a
    /// synced commit of every pending row instead (then the log starts its next generation).
    private func writeLog(_ batch: [LoggedWrite]) throws {
        guard let closeLog else { throw FSError.io("no close log") }
        if failWrites.load(ordering: .relaxed) { throw FSError.io("the close log and the WAL's fsync failed (a fault put in by a test)") }
        do {
            if try closeLog.append(batch.map { CloseLog.Entry(id: $0.id, payload: $0.row.encoded()) }) { return }
        } catch {
            // The log failed (and is not used again): the synced commit below stands in.
        }
        // Every pending row in, then the WAL synced: the drain may have put them in unsynced
        // already, and a transaction with nothing to write syncs nothing.
        try transaction(synced: false) { _, _ in }
        try Self.syncFiles([path + "-wal"])
        if !closeLog.isBroken { try? closeLog.reset(identity: identity) }
    }

    /// For tests: every write of the close log and every transaction fails (a failing disk).
    /// An atomic load on every transaction, not a lock.
    let failWrites = Atomic<Bool>(false)

    /// How many times the close log started a new generation (the one at open included); nil without one (for tests).
    var closeLogGenerations: Int? { closeLog?.generations }

    private static func replaces(of row: LoggedRow) -> Deletion? {
        row.replacesIno.map { Deletion(remoteIno: UInt64(bitPattern: $0), ifMatch: row.replacesIfMatch) }
    }

    /// Writes every record's kept content back to its local copy (after a crash, the copy may not
    /// hold it: it was never fsynced). Returns how many were written.
    @discardableResult
    public func restoreContents() throws -> Int {
        let rows = try transaction(synced: false) { db, _ in try Row.fetchAll(db, sql: "SELECT cache_file, content FROM uploads WHERE content IS NOT NULL") }
        var written = 0
        // A value of another type (a damaged row) is passed over: its copy stays as it is.
        for row in rows {
            guard let cacheFile: String = Self.value(row, "cache_file"), let content: Data = Self.value(row, "content") else { continue }
            try CacheFile(path: cacheFile, truncate: true).write(content, at: 0)
            written += 1
        }
        return written
    }

    /// A held record becomes a queued one with a new id (the end of the line), in one transaction:
    /// one commit where an insert, an update and a delete took three.
    ///
    /// `synced: false` commits without waiting for the disk (`synchronous = NORMAL` for this one
    /// commit): for when losing it to a crash is harmless. The WAL is written in order, so the next
    /// synced commit makes this one durable too.
    ///
    /// `carryContent`: the bytes are those the held record keeps (unchanged since): the new record keeps them too.
    public func requeue(
        _ heldID: Int64, location: Location, cacheFile: String, size: Int64, params: UploadParams, contentType: String?, tags: [String]?,
        patch: FilePatch?, synced: Bool = true, carryContent: Bool = false, contentAfter: Int64? = nil
    ) throws -> Int64 {
        guard let ns = location.namespace else { throw FSError.notPermitted }
        return try commit(synced: synced) { db, newID in
            let id = try Self.insertRow(db, Self.row(ns, location, cacheFile, size, params, contentType, tags, patch, .queued, replaces: nil), id: newID)
            // What the held record replaces, kept current by landings since it was written.
            try db.cachedStatement(
                sql: """
                    UPDATE uploads SET (replaces_ino, replaces_if_match) = (SELECT replaces_ino, replaces_if_match FROM uploads WHERE id = ?)
                    WHERE id = ?
                    """
            ).execute(arguments: [heldID, id])
            if carryContent {
                try db.cachedStatement(sql: "UPDATE uploads SET content = (SELECT content FROM uploads WHERE id = ?) WHERE id = ?").execute(arguments: [heldID, id])
            }
            if let contentAfter {
                try db.cachedStatement(sql: "UPDATE uploads SET content_after = ? WHERE id = ?").execute(arguments: [contentAfter, id])
            }
            try db.cachedStatement(sql: "DELETE FROM uploads WHERE id = ?").execute(arguments: [heldID])
            return id
        }
    }

    /// A new row's columns.
    private static func row(
        _ ns: Namespace, _ location: Location, _ cacheFile: String, _ size: Int64, _ params: UploadParams,
        _ contentType: String?, _ tags: [String]?, _ patch: FilePatch?, _ state: Record.State, content: Data? = nil, replaces: Deletion?
    ) -> LoggedRow {
        var row = LoggedRow(
            namespace: ns.name, path: location.path.string, cacheFile: cacheFile, size: size, params: json(params), contentType: contentType,
            tags: json(tags), patch: json(patch), state: state.rawValue, created: Int64(Date().timeIntervalSince1970 * 1000), content: content,
            replacesIno: nil, replacesIfMatch: nil)
        setReplaces(&row, replaces)
        return row
    }

    private static func setReplaces(_ row: inout LoggedRow, _ replaces: Deletion?) {
        row.replacesIno = replaces.map { Int64(bitPattern: $0.remoteIno) }
        row.replacesIfMatch = replaces?.ifMatch
    }

    /// Inserts `row` (with the id given, or the next one); returns its id.
    private static func insertRow(_ db: Database, _ row: LoggedRow, id: Int64) throws -> Int64 {
        try db.cachedStatement(
            sql: """
                INSERT INTO uploads(id, namespace, path, cache_file, size, params, content_type, tags, patch, state, created, content,
                    replaces_ino, replaces_if_match)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """).execute(
            arguments: [
                id, row.namespace, row.path, row.cacheFile, row.size, row.params, row.contentType, row.tags, row.patch, row.state, row.created,
                row.content, row.replacesIno, row.replacesIfMatch,
            ])
        return db.lastInsertedRowID
    }

    public func all() throws -> [Record] {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        return try transaction(synced: false) { db, _ in
            var records = try Row.fetchAll(db, sql: "SELECT * FROM uploads ORDER BY id").compactMap { Self.record($0, now: now) }
            // `content_after` names an id the journal had when it was written: a larger one is
            // damage, and would make its record beat every later one of its path.
            let largest = max(records.last?.id ?? 0, try DatabaseValue.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'uploads'").flatMap { Int64.fromDatabaseValue($0) } ?? 0)
            for i in records.indices where (records[i].contentAfter ?? 0) > largest { records[i].contentAfter = nil }
            return records
        }
    }

    /// A column's value, or nil when it is NULL or of another type: GRDB's `row[column]` traps on
    /// a value it cannot convert (text in a number's column, bytes that are not UTF-8 in a text's).
    static func value<T: DatabaseValueConvertible>(_ row: Row, _ column: String) -> T? {
        (try? row.decode(T?.self, forColumn: column)) ?? nil
    }

    /// A row read back as a record; nil for one no upload can be made of. The rows are this
    /// journal's own, but a damaged one (a torn page, disk corruption, a file written by another
    /// version) must not keep the mount from starting, and the queue computes with its numbers:
    /// a size outside what a file can have (`UInt64(size)` trapped at the file's lookup) is taken
    /// from the local copy, which holds the content; counts and instants are brought back into
    /// what this code writes (a count of attempts at Int.max trapped at the next failure, a
    /// creation time at Int64.max trapped in the scheduler, a next attempt in the far future held
    /// the upload until then); a row without a place or a copy is left out.
    private static func record(_ row: Row, now: Int64) -> Record? {
        guard let id: Int64 = value(row, "id"), let ns = (value(row, "namespace") as String?).flatMap({ try? Namespace($0) }),
            let path = (value(row, "path") as String?).flatMap({ try? StoragePath($0) }), let cacheFile: String = value(row, "cache_file")
        else { return nil }
        let deletion = (value(row, "delete_ino") as Int64?).map { Deletion(remoteIno: UInt64(bitPattern: $0), ifMatch: value(row, "delete_if_match")) }
        var size: Int64 = value(row, "size") ?? -1
        if deletion != nil {
            size = 0
        } else if !(0...StowFileSystem.maxFileSize).contains(size) {
            guard let copy = BlockCache.stat(cacheFile)?.size, (0...StowFileSystem.maxFileSize).contains(copy) else { return nil }
            size = copy
        }
        return Record(
            id: id, location: Location(namespace: ns, path: path), cacheFile: cacheFile, size: size,
            params: decode(value(row, "params"), UploadParams.self) ?? UploadParams(), contentType: value(row, "content_type"),
            tags: decode(value(row, "tags"), [String].self), patch: decode(value(row, "patch"), FilePatch.self),
            // A session's numbers are computed with (its size and part size): one outside what a
            // file can have is dropped, and the upload starts a session anew.
            session: decode(value(row, "session"), StartUploadResponse.self).flatMap { (0...StowFileSystem.maxFileSize).contains($0.size) ? $0 : nil }, state: (value(row, "state") as String?).flatMap { Record.State(rawValue: $0) } ?? .queued,
            // The queue's longest wait between attempts is 5 minutes (`UploadQueue.failed`).
            attempts: min(max(0, value(row, "attempts") ?? 0), Int(Int32.max)), lastError: value(row, "last_error"),
            nextAttempt: min(max(0, value(row, "next_attempt") ?? 0), now + 300_000), created: min(value(row, "created") ?? now, now),
            deletion: deletion,
            replaces: (value(row, "replaces_ino") as Int64?).map { Deletion(remoteIno: UInt64(bitPattern: $0), ifMatch: value(row, "replaces_if_match")) },
            contentAfter: value(row, "content_after"))
    }

    /// Points a record at another path (its file renamed), its session dropped; nothing else of it
    /// changes.
    public func retarget(_ id: Int64, to location: Location) throws {
        guard let ns = location.namespace else { return }
        try transaction(synced: true) { db, _ in
            try db.cachedStatement(sql: "UPDATE uploads SET namespace = ?, path = ?, session = NULL WHERE id = ?")
                .execute(arguments: [ns.name, location.path.string, id])
        }
    }

    /// `retarget` of many records in one commit (a folder's move carries all its queued records:
    /// a commit each was an fsync each, and a crash between two left the folder's records split
    /// between its old and new paths).
    /// `endingMove`: the move (`beginMove`) these records follow, forgotten in the same commit.
    public func retarget(_ moves: [(id: Int64, location: Location)], endingMove move: Int64? = nil) throws {
        guard !moves.isEmpty || move != nil else { return }
        try transaction(synced: true) { db, _ in
            if let move { try db.cachedStatement(sql: "DELETE FROM moves WHERE id = ?").execute(arguments: [move]) }
            let statement = try db.cachedStatement(sql: "UPDATE uploads SET namespace = ?, path = ?, session = NULL WHERE id = ?")
            for (id, location) in moves {
                guard let ns = location.namespace else { continue }
                try statement.execute(arguments: [ns.name, location.path.string, id])
            }
        }
    }

    /// Sets what an upload declares (its params, content type and tags) and what is changed after it.
    public func amend(_ id: Int64, params: UploadParams, contentType: String?, tags: [String]?, patch: FilePatch?) throws {
        try transaction(synced: true) { db, _ in
            try db.cachedStatement(sql: "UPDATE uploads SET params = ?, content_type = ?, tags = ?, patch = ? WHERE id = ?")
                .execute(arguments: [Self.json(params), contentType, Self.json(tags), Self.json(patch), id])
        }
    }

    /// Writes every mutable field of a record but `replaces` (which `finish` keeps current, and
    /// `setReplaces` sets).
    public func update(_ r: Record) throws {
        guard let ns = r.location.namespace else { return }
        try transaction(synced: true) { db, _ in
            try db.cachedStatement(
                sql: """
                    UPDATE uploads SET namespace = ?, path = ?, cache_file = ?, size = ?, params = ?, content_type = ?, tags = ?, patch = ?,
                        session = ?, state = ?, attempts = ?, last_error = ?, next_attempt = ? WHERE id = ?
                    """).execute(
                arguments: [
                    ns.name, r.location.path.string, r.cacheFile, r.size, Self.json(r.params), r.contentType, Self.json(r.tags), Self.json(r.patch),
                    Self.json(r.session), r.state.rawValue, r.attempts, r.lastError, r.nextAttempt, r.id,
                ])
        }
    }

    /// A held record's size, parameters and kept content (another flush of a file still open);
    /// nothing if it is not held.
    public func updateHeld(_ id: Int64, size: Int64, params: UploadParams, content: Data?) throws {
        _ = try grouped { db in
            try db.cachedStatement(
                sql: """
                    UPDATE uploads SET size = ?, params = ?, content = ?, session = NULL, content_after = (SELECT max(id) FROM uploads)
                    WHERE id = ? AND state = 'held'
                    """)
                .execute(arguments: [size, Self.json(params), content, id])
            return id
        }
    }

    /// A held record that a stream is about to complete: it now stands for that upload (its
    /// session, sized, with the final declaration), so that a crash before the record goes
    /// completes the same upload instead of sending an older content after it.
    public func attachSession(_ id: Int64, session: StartUploadResponse) throws {
        try transaction(synced: true) { db, _ in
            try db.execute(
                sql: """
                    UPDATE uploads SET size = ?, params = ?, session = ?, content = NULL, content_after = (SELECT max(id) FROM uploads)
                    WHERE id = ? AND state = 'held'
                    """,
                arguments: [session.size, Self.json(session.params ?? UploadParams()), Self.json(session), id])
        }
    }

    public func delete(_ id: Int64) throws { try delete([id]) }

    /// Removes records in one transaction (one commit).
    public func delete(_ ids: [Int64]) throws {
        try transaction(synced: true) { db, _ in
            for id in ids { try db.cachedStatement(sql: "DELETE FROM uploads WHERE id = ?").execute(arguments: [id]) }
        }
    }
}
