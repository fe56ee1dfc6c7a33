import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Logging
import PostgresNIO
import StorageClient
import StorageProtocol
@testable import StorageServer
import Testing

@Suite("--database URLs: what is accepted, and what is refused with its reason")
struct DatabaseLocationTests {
    @Test("the parts of a URL, with defaults; the password never shows")
    func parts() throws {
        let l = try DatabaseLocation(parsing: "postgres://stow:p%40ss%2Fword@db.example:6543/meta?schema=team_a&pool=5&sslmode=require")
        #expect(l.user == "stow")
        #expect(l.password == "p@ss/word")
        #expect(l.host == "db.example")
        #expect(l.port == 6543)
        #expect(l.database == "meta")
        #expect(l.schema == "team_a")
        #expect(l.poolSize == 5)
        #expect(l.tls == .require)
        #expect(!l.description.contains("p@ss"))
        #expect(!l.description.contains("word"))
        let d = try DatabaseLocation(parsing: "postgresql://u@[::1]/db")
        #expect(d.host == "::1")
        #expect(d.port == 5432)
        #expect(d.password == nil)
        #expect(d.tls == .prefer)
        #expect(d.poolSize == 20)
        let socket = try DatabaseLocation(parsing: "postgres://u@localhost/db?host=/run/postgresql")
        #expect(socket.socketFolder == "/run/postgresql")
        #expect(socket.host == nil)
    }

    @Test("bad URLs are refused with what is wrong", arguments: [
        ("mysql://u@h/db", "scheme"),
        ("postgres://h/db", "no user"),
        ("postgres://u@h", "no database"),
        ("postgres://u@h/db/more", "no database"),
        ("postgres://u@h/db?sslmode=maybe", "sslmode"),
        ("postgres://u@h/db?schema=Bad-Name", "schema"),
        ("postgres://u@h/db?schema=x;drop", "schema"),
        ("postgres://u@h/db?pool=0", "pool"),
        ("postgres://u@h/db?colour=blue", "unknown parameter"),
        ("postgres://u@h/db?host=relative", "absolute"),
        ("postgres://u:secretpw@h:99999/db", "port"),
    ])
    func refused(_ url: String, _ reason: String) {
        do {
            _ = try DatabaseLocation(parsing: url)
            Issue.record("\(url) was accepted")
        } catch {
            #expect(error.description.contains(reason), "\(url): \(error.description)")
            #expect(!error.description.contains("secretpw"))
        }
    }
}

/// The PostgreSQL store's own behaviour: migrations, replicas sharing a database, a database that
/// goes away. The rest of the server suite runs on it too (with `STOW_TEST_DATABASE_URL`).
@Suite("PostgreSQL: migrations, replicas, a database that goes away", .enabled(if: TestBackend.isPostgres, "needs STOW_TEST_DATABASE_URL (scripts/pg-test.sh)"))
struct PostgresTests {
    /// Runs SQL on a location's schema with a client of the test's own.
    static func sql(_ location: DatabaseLocation, _ query: PostgresQuery) async throws -> [PostgresRandomAccessRow] {
        var config = PostgresClient.Configuration(
            host: location.host ?? "127.0.0.1", port: location.port, username: location.user, password: location.password, database: location.database,
            tls: .disable)
        if let schema = location.schema { config.options.additionalStartupParameters = [("search_path", schema)] }
        let client = PostgresClient(configuration: config)
        return try await withThrowingTaskGroup(of: [PostgresRandomAccessRow]?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            var rows: [PostgresRandomAccessRow] = []
            for try await row in try await client.query(query) { rows.append(row.makeRandomAccess()) }
            group.cancelAll()
            return rows
        }
    }

    /// Runs a script to its end, its output to `log`. Not Foundation's `Process`: that waits for
    /// every process holding the child's end of its status pipe, and PostgreSQL's server, started by
    /// the script, would hold it for as long as it runs.
    static func runScript(_ path: String, _ arguments: [String], log: String) throws -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, nil, argv, environ)
        guard rc == 0 else { throw StorageError(.localIO, "cannot run \(path): \(String(cString: strerror(rc)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    static func config(_ dir: String, _ location: DatabaseLocation) -> ServerConfiguration {
        var tokens = TokenStore()
        tokens.add(token: TestServer.adminToken, pattern: "*", permission: .admin)
        var config = ServerConfiguration(dataDirectory: dir, tokens: tokens)
        config.port = 0
        config.database = location
        config.objectStore = TestBackend.s3Location(for: dir)
        return config
    }

    @Test("three replicas started at the same moment on an empty database all come up, migrate it once, and accept each other's links")
    func replicasStartTogether() async throws {
        let location = try #require(TestBackend.database())
        let dirs = (0..<3).map { _ in makeTempDirectory("together") }
        defer { for d in dirs { try? FileManager.default.removeItem(atPath: d) } }
        for d in dirs.dropFirst() { TestBackend.share(dirs[0], with: d) }
        var logger = Logger(label: "stowd-test")
        logger.logLevel = .warning
        let servers = try dirs.map { try StowServer(configuration: Self.config($0, location), logger: logger) }
        let (urls, continuation) = AsyncStream.makeStream(of: String.self)
        let tasks = servers.map { server in Task { try await server.run(signals: []) { continuation.yield($0) } } }
        var listening: [String] = []
        var failure: (any Error)?
        do {
            for await url in urls {
                listening.append(url)
                if listening.count == servers.count { break }
            }
            #expect(listening.count == 3)
            let migrations = try await Self.sql(location, "SELECT version FROM stow_migrations ORDER BY version")
            #expect(try migrations.map { Int(try $0["version"].decode(Int32.self)) } == PostgresSchema.migrations.map(\.version))
            let secrets = try await Self.sql(location, "SELECT count(*) AS n FROM settings WHERE key = 'url-signing-secret'")
            #expect(try secrets.first?["n"].decode(Int64.self) == 1)
            // A file stored through one, a link signed by a second, read through the third.
            let clients = listening.map { url in
                var c = HTTPObjectStore.Configuration(endpoint: url, token: TestServer.adminToken)
                c.retry = RetryPolicy(attempts: 2, baseDelay: .milliseconds(20))
                return HTTPObjectStore(configuration: c)
            }
            do {
                _ = try await clients[0].createNamespace(testNamespace)
                // A small direct upload keeps its bytes in the database, so every replica has them
                // even when blobs are files of each replica's own data directory (no S3 in this run).
                _ = try await clients[0].uploadDirect(testNamespace, StartUploadRequest(fileName: "s.txt", size: 6), from: .bytes(.init(string: "shared")))
                let signed = try await clients[1].signedURLs(testNamespace, [path("s.txt")], expiry: 60)[0].signedUrl
                let query = try #require(signed.split(separator: "?").last)
                let raw = RawHTTP(base: listening[2])
                let answer: Result<RawHTTP.Answer, any Error>
                do { answer = .success(try await raw.send("GET", "/cdn/test/s.txt?\(query)", token: nil)) } catch { answer = .failure(error) }
                try? await raw.shutdown()
                #expect(try answer.get().status == 200)
                #expect(try answer.get().text == "shared")
            } catch {
                failure = error
            }
            for c in clients { try? await c.shutdown() }
        } catch {
            failure = error
        }
        for s in servers { await s.shutdown() }
        for t in tasks { _ = try? await t.value }
        if let failure { throw failure }
    }

    @Test("with no token configured, replicas share the first one's generated admin token (kept in the database)")
    func sharedAdminToken() async throws {
        let location = try #require(TestBackend.database())
        let dirs = (0..<2).map { _ in makeTempDirectory("token") }
        defer { for d in dirs { try? FileManager.default.removeItem(atPath: d) } }
        var logger = Logger(label: "stowd-test")
        logger.logLevel = .warning
        var generated: [String] = []
        var servers: [StowServer] = []
        for d in dirs {
            let (tokens, _) = try TokenStore.resolve(tokenFile: nil, environment: [:], dataDirectory: d)
            generated.append(try String(contentsOfFile: d + "/admin.token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines))
            var config = Self.config(d, location)
            config.tokens = tokens
            config.generatedAdminTokenFile = d + "/admin.token"
            servers.append(try StowServer(configuration: config, logger: logger))
        }
        #expect(generated[0] != generated[1])
        var urls: [String] = []
        var tasks: [Task<Void, any Error>] = []
        // One after the other: the first one's token is the one kept.
        for server in servers {
            let (stream, continuation) = AsyncStream.makeStream(of: String.self)
            tasks.append(Task { try await server.run(signals: []) { continuation.yield($0) } })
            for await url in stream {
                urls.append(url)
                break
            }
        }
        var failure: (any Error)?
        do {
            #expect(urls.count == 2)
            let kept = try String(contentsOfFile: dirs[1] + "/admin.token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(kept == generated[0])
            let raw = RawHTTP(base: urls[1])
            let first = try? await raw.send("GET", Routes.namespaces, token: generated[0])
            let second = try? await raw.send("GET", Routes.namespaces, token: generated[1])
            try? await raw.shutdown()
            #expect(first?.status == 200)
            #expect(second?.status == 401)
        } catch {
            failure = error
        }
        for s in servers { await s.shutdown() }
        for t in tasks { _ = try? await t.value }
        if let failure { throw failure }
    }

    @Test("a database migrated by a newer stowd is refused at start, with what to do")
    func newerSchema() async throws {
        let location = try #require(TestBackend.database())
        let dir = makeTempDirectory("newer")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // Migrated once by this stowd, then marked as migrated by a later one.
        try await withServer(dataDirectory: dir, configure: { $0.database = location }) { _ in }
        _ = try await Self.sql(location, "INSERT INTO stow_migrations(version, name) VALUES (999, 'from the future')")
        var logger = Logger(label: "stowd-test")
        logger.logLevel = .critical
        let server = try StowServer(configuration: Self.config(dir, location), logger: logger)
        do {
            try await server.run(signals: [])
            Issue.record("the server started")
        } catch {
            #expect("\(error)".contains("newer stowd"), "\(error)")
            #expect("\(error)".contains("999"))
        }
    }

    @Test("a database that refuses the password, or is not there, stops stowd at start with the reason")
    func refusedAtStart() async throws {
        var wrong = try #require(TestBackend.database())
        wrong.password = "not-the-password"
        var nobody = wrong
        nobody.port = 1
        for (location, reason) in [(wrong, "password authentication failed"), (nobody, "connect")] {
            let dir = makeTempDirectory("refused")
            defer { try? FileManager.default.removeItem(atPath: dir) }
            var logger = Logger(label: "stowd-test")
            logger.logLevel = .critical
            let server = try StowServer(configuration: Self.config(dir, location), logger: logger)
            let start = ContinuousClock.now
            do {
                try await server.run(signals: [])
                Issue.record("the server started")
            } catch {
                #expect("\(error)".lowercased().contains(reason), "\(error)")
                #expect(!"\(error)".contains("not-the-password"))
            }
            #expect(ContinuousClock.now - start < .seconds(20))
        }
    }

    @Test("PostgreSQL stopped mid-workload: requests fail with 503 within seconds while it is away, work again after, and nothing is half-written")
    func databaseAway() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let pgDir = makeTempDirectory("own-pg")
        try? FileManager.default.removeItem(atPath: pgDir)
        func pg(_ command: String) throws {
            let status = try Self.runScript(root + "/scripts/pg-test.sh", [command, pgDir], log: pgDir + ".log")
            guard status == 0 else { throw StorageError(.unavailable, "scripts/pg-test.sh \(command) failed (exit \(status)); see \(pgDir).log") }
        }
        defer { try? FileManager.default.removeItem(atPath: pgDir + ".log") }
        try pg("start")
        defer { try? pg("stop") }
        let env = try String(contentsOfFile: pgDir + "/env", encoding: .utf8)
        let url = try #require(env.split(separator: "=", maxSplits: 1).last).trimmingCharacters(in: .whitespacesAndNewlines)
        var location = try DatabaseLocation(parsing: url)
        location.tls = .disable
        try await withServer(configure: { $0.database = location }) { s in
            var stored: [String: [UInt8]] = [:]
            for i in 0..<20 {
                let bytes = Array("before \(i)".utf8)
                _ = try await s.admin.put(bytes, "w/before-\(i)")
                stored["w/before-\(i)"] = bytes
            }
            try pg("halt")
            let client = s.client(token: TestServer.adminToken)
            do {
            let start = ContinuousClock.now
            let refused = await #expect(throws: StorageError.self) { _ = try await client.put(Array("while away".utf8), "w/away") }
            #expect(refused?.kind == .unavailable, "\(String(describing: refused))")
            let listing = await #expect(throws: StorageError.self) { _ = try await client.list(testNamespace, folder: path("w"), after: nil, limit: 10) }
            #expect(listing?.status == 503)
            // Each refusal comes within the connection wait (5 s) and the client's retries, not a hang.
            #expect(ContinuousClock.now - start < .seconds(40))
            try pg("resume")
            // The pool reconnects: within a few seconds requests work again.
            var back = false
            for _ in 0..<40 where !back {
                do {
                    _ = try await client.put(Array("after".utf8), "w/after")
                    back = true
                } catch {
                    try await Task.sleep(for: .milliseconds(250))
                }
            }
            #expect(back)
            stored["w/after"] = Array("after".utf8)
            for (p, bytes) in stored { #expect(try await s.admin.get(p) == bytes, "\(p)") }
            // The write refused while the database was away left nothing, or all of it.
            if let away = try? await s.admin.get("w/away") { #expect(away == Array("while away".utf8)) }
            } catch {
                try? await client.shutdown()
                throw error
            }
            try? await client.shutdown()
        }
    }
}
