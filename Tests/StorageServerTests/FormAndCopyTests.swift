import Foundation
import StorageClient
import StorageProtocol
import Synchronization
import Testing

@Suite("multipart/form-data uploads and uploads/copy")
struct FormAndCopyTests {
    static func form(boundary: String, fields: [(String, String)], files: [(field: String, name: String, type: String, data: Data)]) -> Data {
        var body = Data()
        for (k, v) in fields {
            body += Data("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(k)\"\r\n\r\n\(v)\r\n".utf8)
        }
        for f in files {
            body += Data("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(f.field)\"; filename=\"\(f.name)\"\r\nContent-Type: \(f.type)\r\n\r\n".utf8)
            body += f.data + Data("\r\n".utf8)
        }
        body += Data("--\(boundary)--\r\n".utf8)
        return body
    }

    @Test("a form with two files, a folder path and tags stores both files")
    func formUpload() async throws {
        try await withServer { s in
            let boundary = "----stowtest\(UUID().uuidString.prefix(6))"
            let binary = Data(randomBytes(200_000))
            // File content that contains something boundary-like, to check the parser.
            let tricky = Data("line\r\n--\(boundary.dropLast())x\r\n--not the boundary".utf8)
            let body = Self.form(
                boundary: boundary, fields: [("path", "inbox/"), ("tags", "mail, urgent")],
                files: [("file", "photo.jpg", "image/jpeg", binary), ("file", "notes.txt", "text/plain", tricky)])
            let r = try await s.raw.send("POST", Routes.formUpload(testNamespace), headers: [("Content-Type", "multipart/form-data; boundary=\(boundary)")], body: body)
            #expect(r.status == 201)
            let files = try r.json(FormUploadResponse.self).files
            #expect(files.map(\.filePath) == ["inbox/photo.jpg", "inbox/notes.txt"])
            #expect(files[0].tags == ["mail", "urgent"])
            #expect(files[0].contentType == "image/jpeg")
            #expect(try await s.admin.get("inbox/photo.jpg") == Array(binary))
            #expect(try await s.admin.get("inbox/notes.txt") == Array(tricky))
        }
    }

    @Test("a form whose body is cut off stores nothing and leaves no staging file")
    func truncatedForm() async throws {
        try await withServer { s in
            let boundary = "XyZ"
            let full = Self.form(boundary: boundary, fields: [], files: [("file", "a.bin", "application/octet-stream", Data(randomBytes(10_000)))])
            let cut = full.prefix(full.count - 20)
            let r = try await s.raw.send("POST", Routes.formUpload(testNamespace), headers: [("Content-Type", "multipart/form-data; boundary=\(boundary)")], body: Data(cut))
            #expect(r.status == 400)
            #expect(try await s.stagedCount() == 0)
            await #expect(throws: StorageError.self) { try await s.admin.record(testNamespace, path("a.bin")) }
            let notMultipart = try await s.raw.send("POST", Routes.formUpload(testNamespace), headers: [("Content-Type", "application/json")], body: Data("{}".utf8))
            #expect(notMultipart.status == 415)
        }
    }

    @Test("a file name in a form cannot climb out with `..`")
    func formNames() async throws {
        try await withServer { s in
            let body = Self.form(boundary: "b", fields: [], files: [("file", "../../etc/passwd", "text/plain", Data("x".utf8))])
            let r = try await s.raw.send("POST", Routes.formUpload(testNamespace), headers: [("Content-Type", "multipart/form-data; boundary=b")], body: body)
            // Only the last component counts: the file lands at the namespace root as `passwd`.
            #expect(r.status == 201)
            #expect(try r.json(FormUploadResponse.self).files.map(\.filePath) == ["passwd"])
            let dots = Self.form(boundary: "b", fields: [], files: [("file", "..", "text/plain", Data("x".utf8))])
            #expect(try await s.raw.send("POST", Routes.formUpload(testNamespace), headers: [("Content-Type", "multipart/form-data; boundary=b")], body: dots).status == 400)
        }
    }

    @Test("copy is refused for every host by default, before anything is fetched")
    func copyRefused() async throws {
        try await withServer { s in
            for url in ["http://127.0.0.1:1/x", "http://169.254.169.254/latest/meta-data", "http://localhost/x", "file:///etc/passwd"] {
                let r = try await s.raw.json("POST", Routes.copy + "?sync=true", CopyRequest(urls: [url], destination: .init(namespace: "test")))
                #expect(r.status == 403 || r.status == 400, "\(url)")
            }
            #expect(try await s.admin.listAll(testNamespace, folder: .root).isEmpty)
        }
    }

    @Test("copy fetches from an allowed host into the namespace and reports the task")
    func copyAllowed() async throws {
        // The allowed host is the test server itself, serving a public file.
        try await withServer(configure: { $0.copyAllowedHosts = ["127.0.0.1"] }) { s in
            _ = try await s.admin.put(Array("remote bytes".utf8), "src/page.html", options: UploadOptions(params: UploadParams(isPublic: true)))
            let request = CopyRequest(urls: [s.url + "/cdn/test/src/page.html"], destination: .init(namespace: "test", basepath: "copied"))
            let r = try await s.raw.json("POST", Routes.copy + "?sync=true", request)
            #expect(r.status == 200)
            let answer = try r.json(CopyResponse.self)
            #expect(answer.task.state == "completed")
            #expect(answer.task.progress == 100)
            #expect(answer.task.files.map(\.filePath) == ["copied/page.html"])
            #expect(try await s.admin.get("copied/page.html") == Array("remote bytes".utf8))
            let tracked = try await s.raw.send("GET", answer.trackingUrl)
            #expect(try tracked.json(CopyTask.self).state == "completed")
            // A private file answers 403, and the task says so.
            _ = try await s.admin.put([1], "src/private")
            let failing = try await s.raw.json("POST", Routes.copy + "?sync=true", CopyRequest(urls: [s.url + "/cdn/test/src/private"], destination: .init(namespace: "test")))
            let failed = try failing.json(CopyResponse.self).task
            #expect(failed.state == "failed")
            #expect(failed.failures.count == 1)
        }
    }
}
