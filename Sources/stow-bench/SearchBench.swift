import ArgumentParser
import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Synchronization

/// `stow-bench search`: a namespace of many files in many folders (tags, content types, metadata,
/// visibility), then search requests of each kind, timed one at a time: p50 and p99 against the
/// same number of one-folder listings (`browse`, 100 names) in the same run.
struct SearchBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "search",
        abstract: "Search latency (p50, p99) on a namespace of many files, against one-folder listings in the same run.",
        discussion: """
            The files are made with batch uploads (empty files, so the metadata store is what is \
            measured). Tag `t<i mod files/100>` gives 100 files per tag; `common` one file in 10; \
            metadata `owner=u<i mod 1000>`; one file in 7 public. With --dir, a namespace made \
            before is used again (its folder holds `search-bench.json`).
            """)

    @Option(help: "Files in the namespace.")
    var files: Int = 1_000_000

    @Option(help: "Folders they are spread over.")
    var folders: Int = 1000

    @Option(help: "Requests of each kind.")
    var queries: Int = 200

    @Option(help: "Scratch folder for stowd's data; kept when given (and used again when it holds this namespace).")
    var dir: String?

    @Option(help: "The stowd binary; default: beside this one.")
    var stowd: String?

    @Option(help: "Metadata in this PostgreSQL (passed to stowd as --database) instead of SQLite.")
    var database: String?

    @Option(help: "Also write the results as JSON to this file.")
    var json: String?

    func validate() throws {
        guard files >= 1000, files <= 50_000_000 else { throw ValidationError("--files: 1000 to 50,000,000") }
        guard folders >= 1, folders <= files / 10 else { throw ValidationError("--folders: 1 to files/10") }
        guard queries >= 10 else { throw ValidationError("--queries: at least 10") }
    }

    struct Marker: Codable, Equatable {
        var files: Int
        var folders: Int
        var database: String?
    }

    struct Row: Codable {
        var name: String
        var results: Double
        var p50: Double
        var p99: Double
    }

    func run() async throws {
        let scratch = dir ?? "/var/tmp/stow-bench-search-\(getpid())"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { if dir == nil { try? FileManager.default.removeItem(atPath: scratch) } }
        let binary = stowd ?? StowdChild.siblingBinary()
        guard FileManager.default.isExecutableFile(atPath: binary) else { throw ValidationError("no stowd at \(binary); build it or pass --stowd") }
        let token = "bench-token-\(UUID().uuidString)"
        var env = ProcessInfo.processInfo.environment
        env["STOWD_TOKEN"] = token
        var arguments = ["--data-dir", scratch + "/data", "--port", "0", "--log-level", "warning"]
        if let database { arguments += ["--database", database] }
        let server = try StowdChild(binary: binary, arguments: arguments, environment: env)
        defer { server.stop() }
        var config = HTTPObjectStore.Configuration(endpoint: server.url, token: token)
        config.maxConnectionsPerHost = 8
        let client = HTTPObjectStore(configuration: config)
        defer { Task { try? await client.shutdown() } }
        let ns = try Namespace("bench-search")
        let marker = Marker(files: files, folders: folders, database: database)
        let markerPath = scratch + "/search-bench.json"
        if let data = FileManager.default.contents(atPath: markerPath), (try? JSONDecoder().decode(Marker.self, from: data)) == marker {
            benchNote("using the namespace made before in \(scratch)")
        } else {
            try await populate(client, ns)
            try JSONEncoder().encode(marker).write(to: URL(fileURLWithPath: markerPath))
        }

        var rng = SystemRandomNumberGenerator()
        let tagCount = max(1, files / 100)
        func rand(_ n: Int) -> Int { Int.random(in: 0..<n, using: &rng) }
        typealias Query = (name: String, make: () -> SearchFilter)
        let kinds: [Query] = [
            ("tag (100 files)", { SearchFilter(tags: ["t\(rand(tagCount))"]) }),
            ("two tags, any of (200 files)", { SearchFilter(anyTags: ["t\(rand(tagCount))", "t\(rand(tagCount))"]) }),
            ("tag in 1 file of 10, first page", { SearchFilter(tags: ["common"]) }),
            ("tag + type image/* + public", { SearchFilter(tags: ["t\(rand(tagCount))"], contentType: "image/*", isPublic: true) }),
            ("metadata owner=… (1 file in 1000), first page", { SearchFilter(metadata: ["owner": "u\(rand(1000))"]) }),
            ("type image/jpeg, first page", { SearchFilter(contentType: "image/jpeg") }),
            ("one folder (path), first page", { SearchFilter(path: try! StoragePath("d\(rand(folders))")) }),
            ("one folder + name glob *7.png", { SearchFilter(path: try! StoragePath("d\(rand(folders))"), name: try! NameGlob("*7.png")) }),
            ("name glob f<n>.* in the whole namespace (a scan)", { SearchFilter(name: try! NameGlob("f\(rand(files)).*")) }),
        ]
        var rows: [Row] = []
        benchNote("baseline: \(queries) listings of 100 names of one folder …")
        var base: [Double] = []
        for _ in 0..<queries {
            let folder = try StoragePath("d\(rand(folders))")
            base.append(try await Bench.timeAsync { _ = try await client.list(ns, folder: folder, after: nil, limit: 100) })
        }
        rows.append(Row(name: "baseline: list one folder, 100 names", results: 100, p50: Self.percentile(base, 0.5), p99: Self.percentile(base, 0.99)))
        for kind in kinds {
            // The scan is slow by nature: fewer of them.
            let n = kind.name.contains("scan") ? max(10, queries / 20) : queries
            benchNote("\(n) searches: \(kind.name) …")
            var times: [Double] = []
            var found = 0
            for _ in 0..<n {
                let filter = kind.make()
                var count = 0
                times.append(try await Bench.timeAsync { count = try await client.search(ns, filter, cursor: nil, limit: 100).items.count })
                found += count
            }
            rows.append(Row(name: kind.name, results: Double(found) / Double(n), p50: Self.percentile(times, 0.5), p99: Self.percentile(times, 0.99)))
        }
        let rss = server.peakRSS()
        let dbBytes = database == nil ? Self.folderSize(scratch + "/data", matching: "stowd.sqlite") : nil
        print("search benchmark — \(Bench.machine())")
        print("\(files) files in \(folders) folders, \(database == nil ? "SQLite" : "PostgreSQL"); one request at a time, limit 100\n")
        print("| request | results | p50 | p99 | p50 vs listing |")
        print("|---|---|---|---|---|")
        for r in rows {
            print(String(format: "| %@ | %.0f | %.1f ms | %.1f ms | %.2f× |", r.name, r.results, r.p50 * 1000, r.p99 * 1000, r.p50 / rows[0].p50))
        }
        print("\nstowd peak RSS: \(rss.map { ByteSize.format($0) } ?? "?")" + (dbBytes.map { "; metadata database: \(ByteSize.format($0))" } ?? ""))
        if let json {
            let object: [String: Any] = [
                "files": files, "folders": folders, "backend": database == nil ? "sqlite" : "postgres", "machine": Bench.machine(),
                "rows": rows.map { ["name": $0.name, "results": $0.results, "p50": $0.p50, "p99": $0.p99] }, "stowd_peak_rss": rss ?? -1,
            ]
            try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys]).write(to: URL(fileURLWithPath: json))
        }
    }

    /// The files, in batches of 256, 4 batches in flight.
    func populate(_ client: HTTPObjectStore, _ ns: Namespace) async throws {
        if try await client.namespaces().contains(where: { $0.name == ns.name }) { try await client.deleteNamespace(ns, recursive: true) }
        _ = try await client.createNamespace(ns)
        let tagCount = max(1, files / 100)
        let types = [("jpg", "image/jpeg"), ("png", "image/png"), ("txt", "text/plain"), ("pdf", "application/pdf")]
        let batch = BatchUpload.maxFiles
        let start = ContinuousClock.now
        let next = Counter()
        let total = files
        benchNote("making \(files) files in \(folders) folders …")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    while true {
                        let first = next.take(batch)
                        guard first < total else { return }
                        var items: [(StartUploadRequest, UploadSource)] = []
                        for i in first..<min(first + batch, total) {
                            let (ext, type) = types[i % types.count]
                            var params = UploadParams()
                            params.metadata = ["owner": "u\(i % 1000)"]
                            if i % 7 == 0 { params.isPublic = true }
                            let tags = ["t\(i % tagCount)"] + (i % 10 == 0 ? ["common"] : [])
                            items.append((
                                StartUploadRequest(fileName: "d\(i % folders)/f\(i).\(ext)", contentType: type, size: 0, tags: tags, params: params),
                                .bytes(ByteBuffer())
                            ))
                        }
                        for result in try await client.uploadBatch(ns, items) { _ = try result.get() }
                        let done = min(first + batch, total)
                        if done % 50_000 < batch {
                            let s = (ContinuousClock.now - start).seconds
                            benchNote(String(format: "  %d files, %.0f s, %.0f files/s", done, s, Double(done) / s))
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    static func percentile(_ xs: [Double], _ p: Double) -> Double {
        let s = xs.sorted()
        return s[min(s.count - 1, Int((Double(s.count) * p).rounded(.down)))]
    }

    static func folderSize(_ path: String, matching: String) -> Int64 {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        return names.filter { $0.contains(matching) }.reduce(0) { sum, name in
            sum + ((try? FileManager.default.attributesOfItem(atPath: path + "/" + name)[.size] as? NSNumber)?.int64Value ?? 0)
        }
    }
}

/// A shared counter for the writers.
final class Counter: Sendable {
    private let value = Mutex(0)
    func take(_ n: Int) -> Int {
        value.withLock { v in
            defer { v += n }
            return v
        }
    }
}
