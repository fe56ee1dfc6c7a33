import Crypto
import Foundation
import StorageClient
import StorageProtocol
import Testing

@Suite("tus 1.0 on the storage link and at /tus/files")
struct TusTests {
    static func b64(_ s: String) -> String { Data(s.utf8).base64EncodedString() }
    static let tusHeaders = [("Tus-Resumable", "1.0.0"), ("Content-Type", "application/offset+octet-stream")]

    @Test("OPTIONS announces the version, extensions and checksum algorithms")
    func options() async throws {
        try await withServer { s in
            let r = try await s.raw.send("OPTIONS", "/tus/files", token: nil)
            #expect(r.status == 204)
            #expect(r.header("Tus-Version") == "1.0.0")
            #expect(r.header("Tus-Extension")?.contains("creation") == true)
            #expect(r.header("Tus-Extension")?.contains("termination") == true)
            #expect(r.header("Tus-Extension")?.contains("expiration") == true)
            #expect(r.header("Tus-Extension")?.contains("checksum") == true)
            #expect(r.header("Tus-Checksum-Algorithm") == "sha1,sha256")
        }
    }

    @Test("creation, chunks with sha256 and sha1 checksums, HEAD offsets, and the file appears on the last byte")
    func createAndUpload() async throws {
        try await withServer { s in
            let meta = "namespace \(Self.b64("test")),path \(Self.b64("tus/movie.mp4")),tags \(Self.b64("x,y"))"
            let created = try await s.raw.send("POST", "/tus/files", headers: [("Tus-Resumable", "1.0.0"), ("Upload-Length", "10"), ("Upload-Metadata", meta)])
            #expect(created.status == 201)
            let location = try #require(created.header("Location"))
            #expect(created.header("Upload-Expires") != nil)
            let part1 = Data("01234".utf8), part2 = Data("56789".utf8)
            let sha256 = Data(SHA256.hash(data: part1)).base64EncodedString()
            let p1 = try await s.raw.send("PATCH", location, headers: Self.tusHeaders + [("Upload-Offset", "0"), ("Upload-Checksum", "sha256 \(sha256)")], body: part1)
            #expect(p1.status == 204)
            #expect(p1.header("Upload-Offset") == "5")
            let head = try await s.raw.send("HEAD", location, headers: [("Tus-Resumable", "1.0.0")])
            #expect(head.header("Upload-Offset") == "5")
            #expect(head.header("Upload-Length") == "10")
            #expect(head.header("Cache-Control") == "no-store")
            await #expect(throws: StorageError.self) { try await s.admin.record(testNamespace, path("tus/movie.mp4")) }
            let sha1 = Data(Insecure.SHA1.hash(data: part2)).base64EncodedString()
            let p2 = try await s.raw.send("PATCH", location, headers: Self.tusHeaders + [("Upload-Offset", "5"), ("Upload-Checksum", "sha1 \(sha1)")], body: part2)
            #expect(p2.status == 204)
            let record = try await s.admin.record(testNamespace, path("tus/movie.mp4"))
            #expect(record.size == 10)
            #expect(record.tags == ["x", "y"])
            #expect(record.contentType == "video/mp4")
            #expect(try await s.admin.get("tus/movie.mp4") == Array("0123456789".utf8))
        }
    }

    @Test("a chunk whose checksum does not match answers 460 and is discarded")
    func checksumMismatch() async throws {
        try await withServer { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "c", size: 4))
            let wrong = Data(SHA256.hash(data: Data("nope".utf8))).base64EncodedString()
            let r = try await s.raw.send("PATCH", session.upload.url, token: nil, headers: Self.tusHeaders + [("Upload-Offset", "0"), ("Upload-Checksum", "sha256 \(wrong)")], body: Data("data".utf8))
            #expect(r.status == 460)
            #expect(r.error?.code == .checksumMismatch)
            #expect(try await s.admin.uploadedBytes(session) == 0)
            let bad = try await s.raw.send("PATCH", session.upload.url, token: nil, headers: Self.tusHeaders + [("Upload-Offset", "0"), ("Upload-Checksum", "md5 xyz")], body: Data("data".utf8))
            #expect(bad.status == 400)
        }
    }

    @Test("a PATCH at the wrong offset answers 409 and changes nothing")
    func wrongOffset() async throws {
        try await withServer { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "o", size: 6))
            _ = try await s.admin.send(session, from: .bytes(.init(string: "abcdef")), offset: 0, end: 3, progress: nil)
            let r = try await s.raw.send("PATCH", session.upload.url, token: nil, headers: Self.tusHeaders + [("Upload-Offset", "1")], body: Data("xyz".utf8))
            #expect(r.status == 409)
            #expect(r.error?.code == .offsetMismatch)
            #expect(try await s.admin.uploadedBytes(session) == 3)
            _ = try await s.admin.send(session, from: .bytes(.init(string: "abcdef")), offset: 3, end: 6, progress: nil)
            _ = try await s.admin.completeUpload(session)
            #expect(try await s.admin.get("o") == Array("abcdef".utf8))
        }
    }

    @Test("PATCH without the tus version or the offset content type is refused")
    func protocolChecks() async throws {
        try await withServer { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "p", size: 1))
            let noVersion = try await s.raw.send("PATCH", session.upload.url, token: nil, headers: [("Content-Type", Tus.offsetContentType), ("Upload-Offset", "0")], body: Data([1]))
            #expect(noVersion.status == 412)
            #expect(noVersion.header("Tus-Version") == "1.0.0")
            let wrongType = try await s.raw.send("PATCH", session.upload.url, token: nil, headers: [("Tus-Resumable", "1.0.0"), ("Content-Type", "text/plain"), ("Upload-Offset", "0")], body: Data([1]))
            #expect(wrongType.status == 415)
            let noOffset = try await s.raw.send("PATCH", session.upload.url, token: nil, headers: Self.tusHeaders, body: Data([1]))
            #expect(noOffset.status == 400)
        }
    }

    @Test("termination: DELETE abandons an upload and its bytes")
    func termination() async throws {
        try await withServer { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "t", size: 4))
            _ = try await s.admin.send(session, from: .bytes(.init(string: "abcd")), offset: 0, end: 2, progress: nil)
            #expect(try await s.stagedCount() == 1)
            try await s.admin.abandonUpload(session)
            #expect(try await s.stagedCount() == 0)
            let head = try await s.raw.send("HEAD", session.upload.url, token: nil)
            #expect(head.status == 404)
            let e = await #expect(throws: StorageError.self) { try await s.admin.completeUpload(session) }
            #expect(e?.kind == .notFound)
        }
    }

    @Test("an interrupted PUT keeps what arrived; the upload resumes from HEAD's offset")
    func resumeAfterShortPut() async throws {
        try await withServer { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "r", size: 10))
            // A PUT that ends after 4 of 10 bytes (chunked, so the server cannot know in advance).
            let short = try await s.raw.send("PUT", session.upload.url, token: nil, body: Data("0123".utf8), chunked: true)
            #expect(short.status == 400)
            #expect(short.error?.code == .sizeMismatch)
            let offset = try await s.admin.uploadedBytes(session)
            #expect(offset == 4)
            let record = try await s.admin.resumeUpload(session, from: .bytes(.init(string: "0123456789")))
            #expect(record.size == 10)
            #expect(try await s.admin.get("r") == Array("0123456789".utf8))
        }
    }

    @Test("tus creation needs a token with write on the namespace")
    func tusAuth() async throws {
        try await withServer { s in
            let meta = "namespace \(Self.b64("test")),path \(Self.b64("a"))"
            let noToken = try await s.raw.send("POST", "/tus/files", token: nil, headers: [("Tus-Resumable", "1.0.0"), ("Upload-Length", "1"), ("Upload-Metadata", meta)])
            #expect(noToken.status == 401)
            let otherNs = "namespace \(Self.b64("elsewhere")),path \(Self.b64("a"))"
            let wrongNs = try await s.raw.send("POST", "/tus/files", token: TestServer.writerToken, headers: [("Tus-Resumable", "1.0.0"), ("Upload-Length", "1"), ("Upload-Metadata", otherNs)])
            #expect(wrongNs.status == 403)
        }
    }
}
