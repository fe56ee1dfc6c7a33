import Foundation
import StorageClient
import StorageProtocol
import Testing

/// Every refusal answers a clear error with a stable code, and changes nothing on the server.
@Suite("bad input gets a clear error and changes nothing")
struct BadInputTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var status: Int
        var code: ErrorCode?
        var send: @Sendable (TestServer) async throws -> RawHTTP.Answer
        var testDescription: String { name }
    }

    static let start = Routes.startUpload(testNamespace)
    /// A multipart form of `fields` text fields of `bytes` bytes each (boundary `XyZ`), then one small file.
    static func form(fields: Int, bytes: Int) -> Data {
        var body = ""
        for i in 0..<fields { body += "--XyZ\r\nContent-Disposition: form-data; name=\"f\(i)\"\r\n\r\n\(String(repeating: "v", count: bytes))\r\n" }
        body += "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhello\r\n--XyZ--\r\n"
        return Data(body.utf8)
    }
    static func json(_ s: String) -> Data { Data(s.utf8) }
    static let jsonHeaders = [("Content-Type", "application/json")]

    static let cases: [Case] = [
        Case(name: "malformed JSON", status: 400, code: .badRequest) { s in
            try await s.raw.send("POST", start, headers: jsonHeaders, body: json("{\"file_name\": \"a\", size: }"))
        },
        Case(name: "a field of the wrong type", status: 400, code: .badRequest) { s in
            try await s.raw.send("POST", start, headers: jsonHeaders, body: json("{\"file_name\": \"a\", \"size\": \"five\"}"))
        },
        Case(name: "a missing field", status: 400, code: .badRequest) { s in
            try await s.raw.send("POST", start, headers: jsonHeaders, body: json("{\"size\": 5}"))
        },
        Case(name: "an empty body", status: 400, code: .badRequest) { s in
            try await s.raw.send("POST", start, headers: jsonHeaders)
        },
        Case(name: "an unknown namespace", status: 404, code: .notFound) { s in
            try await s.raw.json("POST", Routes.startUpload(try Namespace("nowhere")), StartUploadRequest(fileName: "a", size: 1))
        },
        Case(name: "an invalid namespace name", status: 400, code: .invalidPath) { s in
            try await s.raw.json("POST", "\(Routes.prefix)/v2.0/namespaces/Bad_NS!/upload/start", StartUploadRequest(fileName: "a", size: 1))
        },
        Case(name: "a path with `..` in a body", status: 400, code: .invalidPath) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: "a/../../etc/passwd", size: 1))
        },
        Case(name: "a path with `..` in a URL", status: 400, code: .invalidPath) { s in
            try await s.raw.send("GET", "\(Routes.prefix)/v1.0/namespaces/test/files/a/../keep.txt")
        },
        Case(name: "a percent-encoded `..` in a URL", status: 400, code: .invalidPath) { s in
            try await s.raw.send("DELETE", "\(Routes.prefix)/v1.0/namespaces/test/files/%2E%2E/keep.txt")
        },
        Case(name: "an empty segment", status: 400, code: .invalidPath) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: "a//b", size: 1))
        },
        Case(name: "a 256-byte segment", status: 400, code: .nameTooLong) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: String(repeating: "n", count: 256), size: 1))
        },
        Case(name: "a NUL byte in a body", status: 400, code: .invalidPath) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: "a\u{0}b", size: 1))
        },
        Case(name: "a NUL byte in a URL", status: 400, code: .invalidPath) { s in
            try await s.raw.send("PUT", "\(Routes.prefix)/v1.0/namespaces/test/folders/a%00b")
        },
        Case(name: "a negative size", status: 400, code: .badRequest) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: "neg", size: -1))
        },
        Case(name: "a size over the configured maximum", status: 413, code: .payloadTooLarge) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: "huge", size: 1 << 50))
        },
        Case(name: "a JSON body over the maximum", status: 413, code: .payloadTooLarge) { s in
            try await s.raw.send("POST", start, headers: jsonHeaders, body: Data(repeating: 0x20, count: 2 << 20))
        },
        Case(name: "a PUT whose length differs from the declared size", status: 400, code: .sizeMismatch) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "len", size: 10))
            return try await s.raw.send("PUT", session.upload.url, token: nil, body: Data("short".utf8))
        },
        Case(name: "a PUT longer than the declared size", status: 413, code: .payloadTooLarge) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "len2", size: 3))
            return try await s.raw.send("PUT", session.upload.url, token: nil, body: Data("too long".utf8), chunked: true)
        },
        Case(name: "a PATCH past the declared size", status: 413, code: .payloadTooLarge) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "len3", size: 3))
            return try await s.raw.send("PATCH", session.upload.url, token: nil, headers: [("Tus-Resumable", "1.0.0"), ("Content-Type", Tus.offsetContentType), ("Upload-Offset", "0")], body: Data("toolong".utf8))
        },
        Case(name: "a PATCH at the wrong offset", status: 409, code: .offsetMismatch) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "off", size: 3))
            return try await s.raw.send("PATCH", session.upload.url, token: nil, headers: [("Tus-Resumable", "1.0.0"), ("Content-Type", Tus.offsetContentType), ("Upload-Offset", "2")], body: Data("x".utf8))
        },
        Case(name: "a chunk with a wrong checksum", status: 460, code: .checksumMismatch) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "sum", size: 1))
            return try await s.raw.send("PATCH", session.upload.url, token: nil, headers: [("Tus-Resumable", "1.0.0"), ("Content-Type", Tus.offsetContentType), ("Upload-Offset", "0"), ("Upload-Checksum", "sha256 \(Data(repeating: 1, count: 32).base64EncodedString())")], body: Data("x".utf8))
        },
        Case(name: "a complete before all bytes arrived", status: 409, code: .incomplete) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "early", size: 4))
            _ = try await s.admin.send(session, from: .bytes(.init(string: "ab")), offset: 0, end: 2, progress: nil)
            return try await s.raw.json("POST", Routes.completeUpload(testNamespace), session)
        },
        Case(name: "a complete in another namespace", status: 404, code: .notFound) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "elsewhere", size: 0))
            _ = try await s.admin.createNamespace(try Namespace("test2"))
            defer { Task { try? await s.admin.deleteNamespace(try Namespace("test2"), recursive: true) } }
            return try await s.raw.json("POST", Routes.completeUpload(try Namespace("test2")), session)
        },
        Case(name: "a complete with a foreign storage link", status: 400, code: .badRequest) { s in
            var session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "foreign", size: 0))
            session.upload.url = "http://example.com/somewhere"
            return try await s.raw.json("POST", Routes.completeUpload(testNamespace), session)
        },
        Case(name: "an expired storage link", status: 403, code: .forbidden) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "exp", size: 1))
            let expired = session.upload.url.replacingOccurrences(of: "expires=", with: "expires=1")
            return try await s.raw.send("PUT", expired, token: nil, body: Data("x".utf8))
        },
        Case(name: "a forged storage link", status: 403, code: .forbidden) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "forged", size: 1))
            let forged = session.upload.url.replacingOccurrences(of: "signature=", with: "signature=x")
            return try await s.raw.send("PUT", forged, token: nil, body: Data("x".utf8))
        },
        Case(name: "a storage link without a signature", status: 403, code: .forbidden) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "unsigned", size: 1))
            let bare = String(session.upload.url.split(separator: "?")[0])
            return try await s.raw.send("PUT", bare, token: nil, body: Data("x".utf8))
        },
        Case(name: "a missing token", status: 401, code: .unauthorized) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: "a", size: 1), token: nil)
        },
        Case(name: "a wrong token", status: 401, code: .unauthorized) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: "a", size: 1), token: "not-a-real-token")
        },
        Case(name: "a read-only token uploading", status: 403, code: .forbidden) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: "a", size: 1), token: TestServer.readerToken)
        },
        Case(name: "a writer creating a namespace", status: 403, code: .forbidden) { s in
            try await s.raw.send("PUT", Routes.namespace(try Namespace("test-new")), token: TestServer.writerToken)
        },
        Case(name: "a rename onto an existing file without replace", status: 409, code: .exists) { s in
            try await s.raw.json("POST", Routes.rename(testNamespace), RenameRequest(from: "keep.txt", to: "dir/inner.txt"))
        },
        Case(name: "removing a non-empty folder", status: 409, code: .notEmpty) { s in
            try await s.raw.send("DELETE", Routes.folder(testNamespace, path("dir")))
        },
        Case(name: "deleting a folder as a file", status: 409, code: .isADirectory) { s in
            try await s.raw.send("DELETE", Routes.file(testNamespace, path("dir")))
        },
        Case(name: "uploading over a folder", status: 409, code: .isADirectory) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: "dir", size: 1))
        },
        Case(name: "a file used as a folder", status: 409, code: .notADirectory) { s in
            try await s.raw.json("POST", start, StartUploadRequest(fileName: "keep.txt/x", size: 1))
        },
        Case(name: "a tag with a comma", status: 400, code: .badRequest) { s in
            try await s.raw.json("PATCH", Routes.file(testNamespace, path("keep.txt")), FilePatch(tags: ["a,b"]))
        },
        Case(name: "an invalid content type", status: 400, code: .badRequest) { s in
            try await s.raw.json("PATCH", Routes.file(testNamespace, path("keep.txt")), FilePatch(contentType: "nonsense"))
        },
        Case(name: "a mode with file-type bits", status: 400, code: .badRequest) { s in
            try await s.raw.json("PATCH", Routes.file(testNamespace, path("keep.txt")), FilePatch(mode: 0o100644))
        },
        Case(name: "a form of 300 parts", status: 413, code: .payloadTooLarge) { s in
            try await s.raw.send("POST", Routes.formUpload(testNamespace), headers: [("Content-Type", "multipart/form-data; boundary=XyZ")], body: form(fields: 300, bytes: 1))
        },
        Case(name: "a form whose fields hold more than 1 MiB", status: 413, code: .payloadTooLarge) { s in
            try await s.raw.send("POST", Routes.formUpload(testNamespace), headers: [("Content-Type", "multipart/form-data; boundary=XyZ")], body: form(fields: 20, bytes: 60_000))
        },
        Case(name: "an unknown route", status: 404, code: .notFound) { s in
            try await s.raw.send("GET", "/no/such/route")
        },
    ]

    /// What a refusal must not change: every path with its ETag, and the files in the data directory.
    struct Snapshot: Equatable {
        var entries: [String: String]
        var blobs: Int
    }

    static func snapshot(_ s: TestServer) async throws -> Snapshot {
        let listing = try await s.raw.send("GET", Routes.browse(testNamespace) + "?limit=5000").json(BrowseResponse.self)
        return Snapshot(entries: Dictionary(uniqueKeysWithValues: listing.items.map { ($0.filePath, $0.etag) }), blobs: try await s.blobCount())
    }

    @Test(arguments: cases)
    func refused(_ c: Case) async throws {
        try await withServer(configure: { $0.maxUploadSize = 1 << 30 }) { s in
            _ = try await s.admin.put(Array("keep".utf8), "keep.txt")
            _ = try await s.admin.put(Array("inner".utf8), "dir/inner.txt")
            let before = try await Self.snapshot(s)
            let answer = try await c.send(s)
            #expect(answer.status == c.status, "\(answer.status) \(answer.text)")
            let error = try #require(answer.error, "the answer has no {message, code} body: \(answer.text)")
            if let code = c.code { #expect(error.code == code, "\(error.message)") }
            #expect(!error.message.isEmpty)
            #expect(try await Self.snapshot(s) == before)
            #expect(try await s.admin.get("keep.txt") == Array("keep".utf8))
        }
    }
}
