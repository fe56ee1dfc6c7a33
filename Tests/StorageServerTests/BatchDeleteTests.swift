import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import StorageServer
import Testing

@Suite("batch delete: several files deleted in one request")
struct BatchDeleteTests {
    static func gone(_ s: TestServer, _ p: String) async -> Bool {
        do {
            _ = try await s.admin.record(testNamespace, try StoragePath(p))
            return false
        } catch let e as StorageError where e.kind == .notFound {
            return true
        } catch {
            return false
        }
    }

    @Test("each file is deleted or refused on its own, as DELETE would answer it: 204, 404, 412 (an ETag, or another inode than named), 409 for a folder, 400 for a bad path")
    func eachOnItsOwn() async throws {
        try await withServer { s in
            let keep = try await s.admin.put(Array("kept by its ETag".utf8), "keep")
            _ = try await s.admin.put(Array("a".utf8), "a")
            _ = try await s.admin.put(Array("b".utf8), "b")
            _ = try await s.admin.put(Array("x".utf8), "dir/inside")
            _ = try await s.admin.put(Array("etag".utf8), "e")
            let c = try await s.admin.put(Array("c".utf8), "c")
            let files: [BatchDelete.Item] = [
                BatchDelete.Item(path: "a"),
                BatchDelete.Item(path: "missing"),
                BatchDelete.Item(path: "keep", ifMatch: "not-its-etag"),
                BatchDelete.Item(path: "dir"),
                BatchDelete.Item(path: "a/../b"),
                BatchDelete.Item(path: "e", ifMatch: try await s.admin.record(testNamespace, try StoragePath("e")).etag),
                BatchDelete.Item(path: "dir/inside"),
                BatchDelete.Item(path: "b", inode: c.inode),
                BatchDelete.Item(path: "c", inode: c.inode),
            ]
            let answer = try await s.raw.send(
                "POST", Routes.batchDelete(testNamespace), headers: [("Content-Type", "application/json")],
                body: WireJSON.encode(BatchDelete.Request(files: files)))
            #expect(answer.status == 200)
            let response = try JSONDecoder().decode(BatchDelete.Response.self, from: answer.body)
            #expect(response.results.map(\.status) == [204, 404, 412, 409, 400, 204, 204, 412, 204], "\(response)")
            #expect(await Self.gone(s, "c"))
            #expect(response.results[1].error?.code != nil)
            #expect(await Self.gone(s, "a"))
            #expect(await Self.gone(s, "e"))
            #expect(await Self.gone(s, "dir/inside"))
            #expect(try await s.admin.get("keep") == Array("kept by its ETag".utf8))
            #expect(try await s.admin.record(testNamespace, try StoragePath("keep")).etag == keep.etag)
            #expect(try await s.admin.get("b") == Array("b".utf8))
            #expect(try await s.admin.record(testNamespace, try StoragePath("dir")).kind == .directory)
        }
    }

    @Test("one batch over several folders, in no order: a file named twice is deleted once (204, then 404), an If-Match with a NUL matches nothing (412), a file under a file is 409, and every other file goes")
    func mixed() async throws {
        try await withServer { s in
            for p in ["z/1", "a/2", "m/n/3", "twice", "nul", "plain"] { _ = try await s.admin.put(Array(p.utf8), p) }
            let files: [BatchDelete.Item] = [
                BatchDelete.Item(path: "z/1"),
                BatchDelete.Item(path: "twice"),
                BatchDelete.Item(path: "m/n/3"),
                BatchDelete.Item(path: "twice"),
                BatchDelete.Item(path: "nul", ifMatch: "*\u{0}"),
                BatchDelete.Item(path: "plain/under"),
                BatchDelete.Item(path: "a/2", inode: UInt64.max),
                BatchDelete.Item(path: "a/2"),
            ]
            let answer = try await s.raw.send(
                "POST", Routes.batchDelete(testNamespace), headers: [("Content-Type", "application/json")],
                body: WireJSON.encode(BatchDelete.Request(files: files)))
            #expect(answer.status == 200)
            let response = try JSONDecoder().decode(BatchDelete.Response.self, from: answer.body)
            #expect(response.results.map(\.status) == [204, 204, 204, 404, 412, 409, 412, 204], "\(response)")
            for p in ["z/1", "m/n/3", "twice", "a/2"] { #expect(await Self.gone(s, p), "\(p)") }
            #expect(try await s.admin.get("nul") == Array("nul".utf8))
            #expect(try await s.admin.get("plain") == Array("plain".utf8))
        }
    }

    @Test("two batches deleting the same 200 files at once: each file deleted by exactly one of them, neither refused as a whole")
    func racing() async throws {
        try await withServer { s in
            let paths = (0..<200).map { "race/\($0 % 4)/f\($0)" }
            for chunk in stride(from: 0, to: paths.count, by: 100) {
                let files = paths[chunk..<chunk + 100].map { (StartUploadRequest(fileName: $0, size: 1), UploadSource.bytes(ByteBuffer(string: "x"))) }
                for r in try await s.admin.uploadBatch(testNamespace, Array(files)) { _ = try r.get() }
            }
            let forward = paths.map { BatchDelete.Item(path: $0) }
            async let one = s.raw.send(
                "POST", Routes.batchDelete(testNamespace), headers: [("Content-Type", "application/json")],
                body: WireJSON.encode(BatchDelete.Request(files: forward)))
            async let two = s.raw.send(
                "POST", Routes.batchDelete(testNamespace), headers: [("Content-Type", "application/json")],
                body: WireJSON.encode(BatchDelete.Request(files: forward.reversed())))
            let (a, b) = try await (one, two)
            #expect(a.status == 200 && b.status == 200, "\(a.status) \(b.status)")
            let ra = try JSONDecoder().decode(BatchDelete.Response.self, from: a.body).results.map(\.status)
            let rb = Array(try JSONDecoder().decode(BatchDelete.Response.self, from: b.body).results.map(\.status).reversed())
            for i in paths.indices {
                #expect([ra[i], rb[i]].sorted() == [204, 404], "\(paths[i]): \(ra[i]) and \(rb[i])")
            }
            #expect(try await s.server.store.statistics().files == 0)
        }
    }

    @Test("a batch sets the times of the folders it changes, once, at its end: after a batch of new files, and after a batch of deletes, the folder's mtime is past what it was")
    func folderTimes() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("x".utf8), "t/seed")
            let folder = try StoragePath("t")
            let before = try await s.admin.record(testNamespace, folder).mtimeNs
            try await Task.sleep(for: .milliseconds(5))
            let files = (0..<50).map { (StartUploadRequest(fileName: "t/f\($0)", size: 1), UploadSource.bytes(ByteBuffer(string: "x"))) }
            for r in try await s.admin.uploadBatch(testNamespace, files) { _ = try r.get() }
            let stored = try await s.admin.record(testNamespace, folder).mtimeNs
            #expect(stored > before)
            try await Task.sleep(for: .milliseconds(5))
            let deleted = await s.admin.deleteFiles(testNamespace, (0..<50).map { FileDeletion(path: try! StoragePath("t/f\($0)")) })
            #expect(deleted.allSatisfy { if case .success = $0 { return true }; return false })
            #expect(try await s.admin.record(testNamespace, folder).mtimeNs > stored)
        }
    }

    @Test("the request's bounds: no files, or more than 1,024, or malformed JSON, is 400 and deletes nothing; a reader's token is 403")
    func bounds() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("a".utf8), "a")
            let route = Routes.batchDelete(testNamespace)
            let json = [("Content-Type", "application/json")]
            #expect(try await s.raw.send("POST", route, headers: json, body: WireJSON.encode(BatchDelete.Request(files: []))).status == 400)
            let many = BatchDelete.Request(files: (0...BatchDelete.maxFiles).map { _ in BatchDelete.Item(path: "a") })
            #expect(try await s.raw.send("POST", route, headers: json, body: WireJSON.encode(many)).status == 400)
            #expect(try await s.raw.send("POST", route, headers: json, body: Data("{\"files\": [{\"path\": 7}]}".utf8)).status == 400)
            let one = WireJSON.encode(BatchDelete.Request(files: [BatchDelete.Item(path: "a")]))
            #expect(try await s.raw.send("POST", route, token: TestServer.readerToken, headers: json, body: one).status == 403)
            #expect(try await s.admin.get("a") == Array("a".utf8))
        }
    }

    @Test("the client sends many deletes as one request (a thousand, with long paths: split under the JSON limit), and against an older stowd one by one, remembered")
    func client() async throws {
        try await withServer { s in
            // 40 paths of ~12 KiB (~500 KB of JSON with the rest): the client splits the request.
            let folder = Array(repeating: String(repeating: "d", count: 250), count: 48).joined(separator: "/")
            var paths = (0..<1000).map { "many/f\($0)" }
            paths += (0..<45).map { "\(folder)/g\($0)" }
            for chunk in stride(from: 0, to: paths.count, by: 256) {
                let files = paths[chunk..<min(chunk + 256, paths.count)].map { (StartUploadRequest(fileName: $0, size: 1), UploadSource.bytes(ByteBuffer(string: "x"))) }
                for r in try await s.admin.uploadBatch(testNamespace, Array(files)) { _ = try r.get() }
            }
            let results = await s.admin.deleteFiles(testNamespace, paths.map { FileDeletion(path: try! StoragePath($0)) } + [FileDeletion(path: try StoragePath("nope"))])
            #expect(results.count == paths.count + 1)
            #expect(results.dropLast().allSatisfy { if case .success = $0 { return true }; return false })
            if case .failure(let e) = results.last! { #expect(e.kind == .notFound) } else { Issue.record("deleted a file that is not there") }
            #expect(try await s.server.store.statistics().files == 0)
            let text = try await s.raw.send("GET", "/metrics").text
            #expect(text.contains("delete/batch"), "\(text)")
            #expect(!text.contains("stowd_http_requests_total{method=\"DELETE\""), "no single DELETE: \(text)")
        }
        try await withServer(configure: { $0.uploadExtensions = false }) { s in
            for p in ["o1", "o2", "o3"] { _ = try await s.admin.put(Array(p.utf8), p) }
            let client = s.client(token: TestServer.adminToken)
            defer { Task { try? await client.shutdown() } }
            let first = await client.deleteFiles(testNamespace, [FileDeletion(path: try StoragePath("o1")), FileDeletion(path: try StoragePath("o2"))])
            #expect(first.allSatisfy { if case .success = $0 { return true }; return false })
            let notFound = try await BatchTests.answered(s, status: 404)
            #expect(notFound == 1, "the batch route, once")
            #expect(await client.deleteFiles(testNamespace, [FileDeletion(path: try StoragePath("o3"))]).count == 1)
            #expect(try await BatchTests.answered(s, status: 404) == notFound, "remembered")
            #expect(try await s.server.store.statistics().files == 0)
        }
    }
}
