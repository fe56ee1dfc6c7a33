import Crypto
import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import StorageServer
import Testing

@Suite("batch upload: several small files in one request")
struct BatchTests {
    static func sha(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }

    @Test("every file of a batch is stored in order with its declaration; small ones in the database, larger ones as files")
    func stored() async throws {
        // A low inline limit, so that one file of the batch takes the staging-file way.
        try await withServer(configure: { $0.inlineLimit = 1000 }) { s in
            let contents: [[UInt8]] = [randomBytes(10, seed: 1), [], randomBytes(999, seed: 2), randomBytes(5000, seed: 3)]
            var files: [(StartUploadRequest, UploadSource)] = []
            for (i, c) in contents.enumerated() {
                files.append((StartUploadRequest(fileName: "b/f\(i)", size: Int64(c.count), tags: ["t\(i)"]), .bytes(ByteBuffer(bytes: c))))
            }
            let results = try await s.admin.uploadBatch(testNamespace, files)
            #expect(results.count == 4)
            for (i, c) in contents.enumerated() {
                let record = try results[i].get()
                #expect(record.filePath == "b/f\(i)" && record.size == Int64(c.count) && record.tags == ["t\(i)"])
                #expect(record.sha256 == Self.sha(c))
                #expect(try await s.admin.get("b/f\(i)") == c)
            }
            #expect(try await s.blobCount() == 1, "only the 5000-byte file is over the limit")
            #expect(try await s.stagedCount() == 0)
            // Every file stored: one pass, with no savepoint per file (see `writeEach`).
            if let sqlite = s.server.store as? SQLiteMetadataStore { #expect(sqlite.carefulBatches == 0) }
        }
    }

    @Test("a batch whose declarations are larger than the server takes in one request (long paths) is split by the client")
    func splitByClient() async throws {
        try await withServer { s in
            // 90 paths of ~12 KiB: ~1.1 MB of declarations, over the server's 1 MiB for JSON.
            let folder = Array(repeating: String(repeating: "d", count: 250), count: 48).joined(separator: "/")
            let files: [(StartUploadRequest, UploadSource)] = (0..<90).map { i in
                (StartUploadRequest(fileName: "\(folder)/f\(i)", size: 1), .bytes(ByteBuffer(string: "\(i % 10)")))
            }
            let results = try await s.admin.uploadBatch(testNamespace, files)
            #expect(results.count == 90)
            for (i, r) in results.enumerated() { #expect(try r.get().filePath == "\(folder)/f\(i)") }
            #expect(try await s.server.store.statistics().files == 90)
        }
    }

    /// stowd's count of answers with this status, over all routes.
    static func answered(_ s: TestServer, status: Int) async throws -> Int {
        let text = try await s.raw.send("GET", "/metrics").text
        return text.split(separator: "\n").filter { $0.hasPrefix("stowd_http_requests_total") && $0.contains("status=\"\(status)\"") }
            .reduce(0) { $0 + Int(Double($1.split(separator: " ").last ?? "") ?? 0) }
    }

    @Test("against a stowd without StowFS's own upload routes, direct and batch uploads go the standard way, and the client remembers")
    func olderServer() async throws {
        try await withServer(configure: { $0.uploadExtensions = false }) { s in
            let client = s.client(token: TestServer.adminToken)
            defer { Task { try? await client.shutdown() } }
            func batch(_ names: [String]) async throws -> [Result<FileRecord, StorageError>] {
                try await client.uploadBatch(testNamespace, names.map { (StartUploadRequest(fileName: $0, size: 1), .bytes(ByteBuffer(string: "x"))) })
            }
            #expect(try await client.uploadDirect(testNamespace, StartUploadRequest(fileName: "d1", size: 2), from: .bytes(ByteBuffer(string: "hi"))).size == 2)
            #expect(try await batch(["b1", "b2", "b3"]).allSatisfy { (try? $0.get()) != nil })
            let notFound = try await Self.answered(s, status: 404)
            #expect(notFound == 2, "one 404 for each route")
            // Remembered: no more 404s.
            #expect(try await client.uploadDirect(testNamespace, StartUploadRequest(fileName: "d2", size: 2), from: .bytes(ByteBuffer(string: "ho"))).size == 2)
            #expect(try await batch(["b4", "b5"]).allSatisfy { (try? $0.get()) != nil })
            #expect(try await Self.answered(s, status: 404) == notFound)
            #expect(try await s.admin.get("b5") == Array("x".utf8))
            #expect(try await s.server.store.statistics().files == 7)
        }
    }

    @Test("a batch into a namespace that does not exist fails each file with not found, and batches stay batches")
    func missingNamespace() async throws {
        try await withServer { s in
            let client = s.client(token: TestServer.adminToken)
            defer { Task { try? await client.shutdown() } }
            let lost = try await client.uploadBatch(try Namespace("nowhere"), [(StartUploadRequest(fileName: "a", size: 1), .bytes(ByteBuffer(string: "x")))])
            guard case .failure(let e) = lost[0] else { Issue.record("stored into a missing namespace"); return }
            #expect(e.kind == .notFound)
            let results = try await client.uploadBatch(testNamespace, [(StartUploadRequest(fileName: "a", size: 1), .bytes(ByteBuffer(string: "x")))])
            #expect((try? results[0].get()) != nil)
            // Both went as batches (the server answers a missing namespace per file), none one by one.
            let text = try await s.raw.send("GET", "/metrics").text
            #expect(text.contains("upload/batch\",status=\"200\"} 2"), "\(text)")
            #expect(!text.contains("upload/direct") && !text.contains("upload/start"), "\(text)")
        }
    }

    @Test("a file refused in a batch (exists, `..`, wrong SHA-256, a folder's name) changes nothing; the others are stored")
    func refusedAlone() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("old".utf8), "keep")
            _ = try await s.admin.put(Array("x".utf8), "dir/inside")
            var wrongSHA = UploadParams()
            wrongSHA.sha256 = String(repeating: "0", count: 64)
            let files: [(StartUploadRequest, UploadSource)] = [
                (StartUploadRequest(fileName: "ok1", size: 2), .bytes(ByteBuffer(string: "o1"))),
                (StartUploadRequest(fileName: "keep", size: 3, params: UploadParams(ifNoneMatch: "*")), .bytes(ByteBuffer(string: "new"))),
                (StartUploadRequest(fileName: "a/../b", size: 1), .bytes(ByteBuffer(string: "z"))),
                (StartUploadRequest(fileName: "sha", size: 1, params: wrongSHA), .bytes(ByteBuffer(string: "s"))),
                (StartUploadRequest(fileName: "dir", size: 1), .bytes(ByteBuffer(string: "d"))),
                (StartUploadRequest(fileName: "ok2", size: 2), .bytes(ByteBuffer(string: "o2"))),
            ]
            let results = try await s.admin.uploadBatch(testNamespace, files)
            #expect(try results[0].get().filePath == "ok1")
            #expect(try results[5].get().filePath == "ok2")
            for (i, kind) in [(1, StorageError.Kind.preconditionFailed), (2, .invalidPath), (3, .checksumMismatch), (4, .isADirectory)] {
                guard case .failure(let e) = results[i] else {
                    Issue.record("file \(i) was stored")
                    continue
                }
                #expect(e.kind == kind, "file \(i): \(e)")
            }
            #expect(try await s.admin.get("keep") == Array("old".utf8))
            let names = try await s.admin.list(testNamespace, folder: .root, after: nil, limit: 100).entries.map(\.filePath).sorted()
            #expect(names == ["dir", "keep", "ok1", "ok2"])
            // `keep` and `dir` are refused by the store itself: its first pass was rolled back
            // whole, and the second stored the rest, each file on its own.
            if let sqlite = s.server.store as? SQLiteMetadataStore { #expect(sqlite.carefulBatches == 1) }
        }
    }

    @Test("a batch whose body does not match its declaration, or that breaks a limit, is refused whole and stores nothing")
    func refusedWhole() async throws {
        try await withServer { s in
            let url = Routes.batchUpload(testNamespace)
            func body(_ files: [StartUploadRequest], _ content: String) -> Data {
                Data(BatchUpload.header(BatchUpload.Request(files: files))) + Data(content.utf8)
            }
            let cases: [(String, Data, Int, String)] = [
                ("too few bytes", body([StartUploadRequest(fileName: "a", size: 5)], "abc"), 400, "body has 3"),
                ("too many bytes", body([StartUploadRequest(fileName: "a", size: 1)], "abc"), 400, "body has 3"),
                ("no header", Data([0, 0]), 400, "declaration's length"),
                ("length past the end", Data([0, 0, 1, 0]) + Data("{}".utf8), 400, "declaration's length"),
                ("declaration too long", Data([0, 0x20, 0, 0]) + Data("{}".utf8), 413, "at most"),
                ("not JSON", Data([0, 0, 0, 4]) + Data("nope".utf8), 400, "malformed JSON"),
                ("no files", body([], ""), 400, "1 to \(BatchUpload.maxFiles)"),
                ("too many files", body(Array(repeating: StartUploadRequest(fileName: "a", size: 0), count: BatchUpload.maxFiles + 1), ""), 400, "1 to"),
                ("a file too big", body([StartUploadRequest(fileName: "a", size: ServerConfiguration.inlineCeiling + 1)], ""), 400, "bytes"),
            ]
            for (label, data, status, words) in cases {
                let answer = try await s.raw.send("POST", url, headers: [("Content-Type", "application/octet-stream")], body: data)
                #expect(answer.status == status, "\(label): \(answer.text)")
                #expect(answer.error?.message.contains(words) == true, "\(label): \(answer.text)")
            }
            let reader = try await s.raw.send(
                "POST", url, token: TestServer.readerToken, body: body([StartUploadRequest(fileName: "a", size: 1)], "x"))
            #expect(reader.status == 403)
            #expect(try await s.admin.list(testNamespace, folder: .root, after: nil, limit: 100).entries.isEmpty)
            #expect(try await s.server.store.statistics().files == 0)
            #expect(try await s.blobCount() == 0)
            #expect(try await s.stagedCount() == 0)
        }
    }
}
