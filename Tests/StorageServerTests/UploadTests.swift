import Crypto
import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Synchronization
import Testing

@Suite("uploads: start → PUT → complete")
struct UploadTests {
    @Test("a file uploaded through the client reads back byte for byte, with its SHA-256 and inferred type")
    func roundTrip() async throws {
        try await withServer { s in
            let bytes = randomBytes(300_000)
            let record = try await s.admin.put(bytes, "docs/report.pdf")
            #expect(record.size == 300_000)
            #expect(record.filePath == "docs/report.pdf")
            #expect(record.fileName == "report.pdf")
            #expect(record.contentType == "application/pdf")
            // With S3 the client sends the bytes straight to the store: no SHA-256 unless declared.
            #expect(record.sha256 == SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() || (TestBackend.isS3 && record.sha256 == nil))
            #expect(try await s.admin.get("docs/report.pdf") == bytes)
            let folder = try await s.admin.record(testNamespace, path("docs"))
            #expect(folder.kind == .directory)
        }
    }

    @Test("a path near the 16 KiB limit, with characters that need percent-encoding, uploads, lists and reads back")
    func longPath() async throws {
        try await withServer { s in
            let segment = String(repeating: "ü %", count: 50)  // 200 bytes, most of them encoded in URLs
            let long = Array(repeating: segment, count: 80).joined(separator: "/") + "/end.txt"
            #expect(long.utf8.count > 16_000 && long.utf8.count <= 16 * 1024)
            let record = try await s.admin.put(Array("deep".utf8), long)
            #expect(record.filePath == long)
            #expect(try await s.admin.get(long) == Array("deep".utf8))
        }
    }

    @Test("a direct upload (one request) stores the file with its declaration: tags, metadata, mode, times")
    func direct() async throws {
        try await withServer { s in
            let bytes = randomBytes(5000)
            var params = UploadParams(metadata: ["k": "v"])
            params.mode = 0o640
            params.mtimeNs = 1_700_000_000_123_000_000
            let request = StartUploadRequest(fileName: "d/small.txt", size: 5000, tags: ["a", "b"], params: params)
            let record = try await s.admin.uploadDirect(testNamespace, request, from: .bytes(ByteBuffer(bytes: bytes)))
            #expect(record.filePath == "d/small.txt" && record.size == 5000)
            #expect(record.tags == ["a", "b"] && record.metadata == ["k": "v"])
            #expect(record.mode == 0o640 && record.mtimeNs == 1_700_000_000_123_000_000)
            #expect(try await s.admin.get("d/small.txt") == bytes)
            // Again over it: the new content replaces the old.
            let again = try await s.admin.uploadDirect(testNamespace, StartUploadRequest(fileName: "d/small.txt", size: 3), from: .bytes(ByteBuffer(bytes: [1, 2, 3])))
            #expect(again.size == 3)
            #expect(try await s.admin.get("d/small.txt") == [1, 2, 3])
            #expect(try await s.stagedCount() == 0)
        }
    }

    @Test("a bad direct upload is refused with a clear error and leaves nothing: no header, not base64, wrong size, if_none_match")
    func directRefused() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("keep".utf8), "keep.txt")
            let url = Routes.directUpload(testNamespace)
            func declaration(_ r: StartUploadRequest) -> String { WireJSON.encode(r).base64EncodedString() }
            let cases: [(String, [(String, String)], Int, String)] = [
                ("no header", [], 400, "Stow-Upload"),
                ("not base64", [("Stow-Upload", "%%%")], 400, "base64"),
                ("not JSON", [("Stow-Upload", Data("nope".utf8).base64EncodedString())], 400, "malformed JSON"),
                ("size differs", [("Stow-Upload", declaration(StartUploadRequest(fileName: "new.txt", size: 9)))], 400, "Content-Length"),
                ("if_none_match", [("Stow-Upload", declaration(StartUploadRequest(fileName: "keep.txt", size: 5, params: UploadParams(ifNoneMatch: "*"))))], 412, "exists"),
                ("path with ..", [("Stow-Upload", declaration(StartUploadRequest(fileName: "a/../b", size: 5)))], 400, "`..`"),
            ]
            for (label, headers, status, words) in cases {
                let answer = try await s.raw.send("POST", url, headers: headers, body: Data("hello".utf8))
                #expect(answer.status == status, "\(label): \(answer.text)")
                #expect(answer.error?.message.contains(words) == true, "\(label): \(answer.text)")
            }
            // A body that breaks off: nothing published, nothing staged.
            let short = try await s.raw.send(
                "POST", url, headers: [("Stow-Upload", declaration(StartUploadRequest(fileName: "short.txt", size: 100)))], body: Data("hello".utf8),
                chunked: true)
            #expect(short.status == 400, "\(short.text)")
            let listing = try await s.admin.list(testNamespace, folder: .root, after: nil, limit: 100)
            #expect(listing.entries.map(\.filePath) == ["keep.txt"])
            #expect(try await s.admin.get("keep.txt") == Array("keep".utf8))
            #expect(try await s.stagedCount() == 0)
        }
    }

    @Test("a deferred-length upload takes PATCHes at increasing offsets and learns its size at complete; a wrong size changes nothing")
    func deferredLength() async throws {
        try await withServer { s in
            let bytes = randomBytes(5 << 20)
            var session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "growing.bin", size: 0, deferLength: true))
            #expect(session.deferLength == true)
            #expect(session.size == 0)
            let head = try await s.raw.send("HEAD", session.upload.url, token: nil)
            #expect(head.header("Upload-Defer-Length") == "1")
            #expect(head.header("Upload-Length") == nil)
            let source = UploadSource.bytes(ByteBuffer(bytes: bytes))
            // As a file still being written is sent: whatever is there, then the rest.
            var offset: Int64 = 0
            for end in [Int64(1 << 20), Int64(4 << 20) + 3, Int64(bytes.count)] {
                offset = try await s.admin.send(session, from: source, offset: offset, end: end, progress: nil)
                #expect(offset == end)
            }
            // A size other than what arrived is refused, and the upload can still complete.
            session.size = Int64(bytes.count) - 1
            await #expect { _ = try await s.admin.completeUpload(session) } throws: { ($0 as? StorageError)?.kind == .incomplete }
            await #expect(throws: StorageError.self) { try await s.admin.record(testNamespace, path("growing.bin")) }
            session.size = Int64(bytes.count)
            // Complete also brings the final declaration (the file changed while it was written).
            session.tags = ["late"]
            session.params = UploadParams(metadata: ["k": "v"], mode: 0o600)
            let record = try await s.admin.completeUpload(session)
            #expect(record.size == Int64(bytes.count))
            #expect(record.tags == ["late"])
            #expect(record.metadata == ["k": "v"])
            #expect(record.mode == 0o600)
            #expect(try await s.admin.get("growing.bin") == bytes)
            #expect(try await s.admin.uploadedBytes(session) == Int64(bytes.count))
            // Only the three-step upload defers its length, and only with size 0.
            let sized = try await s.raw.json("POST", "/service/application/assets/v2.0/namespaces/test/upload/start", StartUploadRequest(fileName: "x", size: 5, deferLength: true))
            #expect(sized.status == 400)
            let direct = try await s.raw.send(
                "POST", "/service/application/assets/v2.0/namespaces/test/upload/direct",
                headers: [("Stow-Upload", WireJSON.encode(StartUploadRequest(fileName: "y", size: 0, deferLength: true)).base64EncodedString())], body: Data())
            #expect(direct.status == 400)
            await #expect(throws: StorageError.self) { try await s.admin.record(testNamespace, path("y")) }
        }
    }

    @Test("an empty file can be uploaded without sending any bytes")
    func emptyFile() async throws {
        try await withServer { s in
            let record = try await s.admin.put([], "empty")
            #expect(record.size == 0)
            #expect(record.contentType == "application/octet-stream")
            #expect(try await s.admin.get("empty") == [])
        }
    }

    @Test("large files go in resumable chunks and arrive whole")
    func chunked() async throws {
        try await withServer { s in
            let bytes = randomBytes(1_000_000, seed: 7)
            let ticks = ProgressLog()
            let record = try await s.admin.upload(
                .bytes(ByteBuffer(bytes: bytes)), size: Int64(bytes.count), to: testNamespace, path("big.bin"),
                options: UploadOptions(chunkSize: 300_000), progress: { sent, total in ticks.add(sent, total) })
            #expect(record.size == 1_000_000)
            #expect(try await s.admin.get("big.bin") == bytes)
            #expect(ticks.last == 1_000_000)
            if TestBackend.isS3 {
                // Straight to the store, whole (a part is 8 MiB): DirectUploadTests covers parts.
                #expect(record.sha256 == nil)
            } else {
                #expect(ticks.count >= 4)
                // The SHA-256 carried from chunk to chunk is the file's.
                #expect(record.sha256 == SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined())
            }
        }
    }

    @Test("chunks of uneven sizes, one of them sent chunked without a length, resumed from HEAD's offset: the SHA-256 carried across is the file's")
    func chunkDigest() async throws {
        try await withServer { s in
            let bytes = randomBytes(3_000_000, seed: 9)
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "resumed.bin", size: 3_000_000))
            _ = try await s.admin.send(session, from: .bytes(ByteBuffer(bytes: bytes)), offset: 0, end: 1_000_000, progress: nil)
            // A PATCH without Content-Length (chunked transfer encoding), by hand.
            let link = session.upload.url
            let middle = try? await s.raw.send(
                "PATCH", link, token: nil,
                headers: [("Tus-Resumable", "1.0.0"), ("Upload-Offset", "1000000"), ("Content-Type", "application/offset+octet-stream")],
                body: Data(bytes[1_000_000..<1_500_000]), chunked: true)
            #expect(middle?.status == 204)
            var offset = try await s.admin.uploadedBytes(session)
            #expect(offset == 1_500_000)
            offset = try await s.admin.send(session, from: .bytes(ByteBuffer(bytes: bytes)), offset: offset, end: 3_000_000, progress: nil)
            let record = try await s.admin.completeUpload(session)
            #expect(record.sha256 == SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined())
            #expect(try await s.admin.get("resumed.bin") == bytes)
        }
    }

    @Test("an upload from a local file streams from disk")
    func fromFile() async throws {
        try await withServer { s in
            let dir = makeTempDirectory("src")
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let bytes = randomBytes(2_500_000, seed: 3)
            _ = FileManager.default.createFile(atPath: dir + "/f", contents: Data(bytes))
            let record = try await s.admin.upload(.file(path: dir + "/f"), size: Int64(bytes.count), to: testNamespace, path("f.bin"), options: UploadOptions(chunkSize: 1 << 20))
            #expect(record.size == Int64(bytes.count))
            #expect(try await s.admin.get("f.bin") == bytes)
        }
    }

    @Test("the v1.0 routes with a trailing slash work as the Fynd SDK calls them")
    func v1Aliases() async throws {
        try await withServer { s in
            let start = try await s.raw.json(
                "POST", Routes.startUploadV1(testNamespace), StartUploadRequest(fileName: "v1/hello.txt", size: 5, tags: ["x"]))
            #expect(start.status == 200)
            let session = try start.json(StartUploadResponse.self)
            #expect(session.method == "PUT")
            #expect(session.tags == ["x"])
            let put = try await s.raw.send("PUT", session.upload.url, token: nil, body: Data("hello".utf8))
            #expect(put.status == 200)
            let done = try await s.raw.json("POST", Routes.completeUploadV1(testNamespace), session)
            #expect(done.status == 200)
            let record = try done.json(FileRecord.self)
            #expect(record.success)
            #expect(record.tags == ["x"])
            #expect(try await s.admin.get("v1/hello.txt") == Array("hello".utf8))
        }
    }

    @Test("complete is idempotent: a retried complete answers the same record")
    func completeTwice() async throws {
        try await withServer { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "twice", size: 3))
            _ = try await s.admin.send(session, from: .bytes(ByteBuffer(bytes: [1, 2, 3])), offset: 0, end: 3, progress: nil)
            let first = try await s.admin.completeUpload(session)
            let second = try await s.admin.completeUpload(session)
            #expect(first.inode == second.inode)
            #expect(first.etag == second.etag)
        }
    }

    @Test("an overwrite swaps the content at complete: readers see the old file until then, the new one after")
    func overwrite() async throws {
        try await withServer { s in
            let old = try await s.admin.put(Array("old".utf8), "f.txt")
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "f.txt", size: 3))
            _ = try await s.admin.send(session, from: .bytes(ByteBuffer(string: "new")), offset: 0, end: 3, progress: nil)
            #expect(try await s.admin.get("f.txt") == Array("old".utf8))
            let new = try await s.admin.completeUpload(session)
            #expect(try await s.admin.get("f.txt") == Array("new".utf8))
            #expect(new.inode == old.inode)
            #expect(new.etag != old.etag)
            // A read pinned to the old ETag is refused rather than mixed.
            let url = try await s.admin.signedURLs(testNamespace, [path("f.txt")], expiry: 60)[0].signedUrl
            await #expect(throws: StorageError.self) { try await s.admin.read(url: url, range: 0..<1, ifMatch: old.etag) }
        }
    }

    @Test("if_none_match * creates only; if_match guards an overwrite")
    func conditionalUploads() async throws {
        try await withServer { s in
            let first = try await s.admin.put(Array("1".utf8), "c")
            let createOnly = UploadOptions(params: UploadParams(ifNoneMatch: "*"))
            let e1 = await #expect(throws: StorageError.self) { try await s.admin.put(Array("2".utf8), "c", options: createOnly) }
            #expect(e1?.kind == .preconditionFailed)
            let stale = UploadOptions(params: UploadParams(ifMatch: "not-the-etag"))
            let e2 = await #expect(throws: StorageError.self) { try await s.admin.put(Array("3".utf8), "c", options: stale) }
            #expect(e2?.kind == .preconditionFailed)
            _ = try await s.admin.put(Array("4".utf8), "c", options: UploadOptions(params: UploadParams(ifMatch: first.etag)))
            #expect(try await s.admin.get("c") == Array("4".utf8))
        }
    }

    @Test("tags, metadata, content type and public are kept from the upload")
    func attributes() async throws {
        try await withServer { s in
            let options = UploadOptions(contentType: "text/x-custom", tags: ["a", "b"], params: UploadParams(metadata: ["k": "v"], isPublic: true))
            let r = try await s.admin.put(Array("x".utf8), "attrs", options: options)
            #expect(r.tags == ["a", "b"])
            #expect(r.metadata == ["k": "v"])
            #expect(r.contentType == "text/x-custom")
            #expect(r.isPublic)
            let cdn = try await s.raw.send("GET", r.cdn.relativeUrl, token: nil)
            #expect(cdn.status == 200)
            #expect(cdn.text == "x")
        }
    }

    @Test("a sha256 given at start is checked at complete; a mismatch publishes nothing")
    func expectedDigest() async throws {
        try await withServer { s in
            let wrong = UploadOptions(params: UploadParams(sha256: String(repeating: "0", count: 64)), retry: .none)
            let e = await #expect(throws: StorageError.self) { try await s.admin.put(Array("data".utf8), "d", options: wrong) }
            #expect(e?.kind == .checksumMismatch)
            await #expect(throws: StorageError.self) { try await s.admin.record(testNamespace, path("d")) }
            let right = SHA256.hash(data: Array("data".utf8)).map { String(format: "%02x", $0) }.joined()
            _ = try await s.admin.put(Array("data".utf8), "d", options: UploadOptions(params: UploadParams(sha256: right)))
        }
    }
}

final class ProgressLog: Sendable {
    private let state = Mutex<[Int64]>([])
    func add(_ sent: Int64, _ total: Int64) { state.withLock { $0.append(sent) } }
    var last: Int64? { state.withLock { $0.last } }
    var count: Int { state.withLock { $0.count } }
}
