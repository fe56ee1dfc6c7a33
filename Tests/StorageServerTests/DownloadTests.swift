import Foundation
import StorageClient
import StorageProtocol
@testable import StorageServer
import Testing

@Suite("downloads: signed URLs, ranges, public files")
struct DownloadTests {
    @Test("ranges answer 206 with Content-Range; suffix and open ranges work; past the end is 416")
    func ranges() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("0123456789".utf8), "r.txt")
            let url = try await s.admin.signedURLs(testNamespace, [path("r.txt")], expiry: 60)[0].signedUrl
            let mid = try await s.raw.send("GET", url, token: nil, headers: [("Range", "bytes=2-4")])
            #expect(mid.status == 206)
            #expect(mid.text == "234")
            #expect(mid.header("Content-Range") == "bytes 2-4/10")
            #expect(try await s.raw.send("GET", url, token: nil, headers: [("Range", "bytes=7-")]).text == "789")
            #expect(try await s.raw.send("GET", url, token: nil, headers: [("Range", "bytes=-3")]).text == "789")
            #expect(try await s.raw.send("GET", url, token: nil, headers: [("Range", "bytes=8-100")]).text == "89")
            let past = try await s.raw.send("GET", url, token: nil, headers: [("Range", "bytes=10-")])
            #expect(past.status == 416)
            #expect(past.header("Content-Range") == "bytes */10")
            let whole = try await s.raw.send("GET", url, token: nil, headers: [("Range", "bytes=0-1,4-5")])
            #expect(whole.status == 200)
            #expect(whole.text == "0123456789")
            let head = try await s.raw.send("HEAD", url, token: nil)
            #expect(head.status == 200)
            #expect(head.header("Content-Length") == "10")
            #expect(head.header("Accept-Ranges") == "bytes")
        }
    }

    @Test("ETag conditions: If-None-Match gives 304, a stale If-Match gives 412")
    func conditions() async throws {
        try await withServer { s in
            let r = try await s.admin.put(Array("abc".utf8), "e")
            let url = try await s.admin.signedURLs(testNamespace, [path("e")], expiry: 60)[0].signedUrl
            let first = try await s.raw.send("GET", url, token: nil)
            #expect(first.fileETag == "\"\(r.etag)\"")
            #expect(try await s.raw.send("GET", url, token: nil, headers: [("If-None-Match", "\"\(r.etag)\"")]).status == 304)
            #expect(try await s.raw.send("GET", url, token: nil, headers: [("If-Match", "\"other\"")]).status == 412)
            #expect(try await s.raw.send("GET", url, token: nil, headers: [("If-Match", "\"\(r.etag)\"")]).status == 200)
        }
    }

    @Test("a private file needs a signature; a public one does not; a token with read works too")
    func access() async throws {
        try await withServer { s in
            let r = try await s.admin.put(Array("secret".utf8), "private.txt")
            let plain = try await s.raw.send("GET", r.cdn.relativeUrl, token: nil)
            #expect(plain.status == 403)
            let missing = try await s.raw.send("GET", "/cdn/test/no-such-file", token: nil)
            #expect(missing.status == 403)
            let withToken = try await s.raw.send("GET", r.cdn.relativeUrl, token: TestServer.readerToken)
            #expect(withToken.text == "secret")
            _ = try await s.admin.update(testNamespace, path("private.txt"), FilePatch(isPublic: true), ifMatch: nil)
            #expect(try await s.raw.send("GET", r.cdn.relativeUrl, token: nil).text == "secret")
        }
    }

    @Test("signed URLs are refused when expired, forged, for another path, or signed for uploads")
    func badSignatures() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("a".utf8), "a")
            _ = try await s.admin.put(Array("b".utf8), "b")
            let good = try await s.admin.signedURLs(testNamespace, [path("a")], expiry: 60)[0].signedUrl
            let query = try #require(good.split(separator: "?").last)
            // Another path with a's signature.
            #expect(try await s.raw.send("GET", "/cdn/test/b?\(query)", token: nil).status == 403)
            // A forged signature.
            let forged = good.replacingOccurrences(of: "signature=", with: "signature=A")
            #expect(try await s.raw.send("GET", forged, token: nil).status == 403)
            // A later expiry with the old signature.
            let expires = try #require(query.split(separator: "&").first { $0.hasPrefix("expires=") }?.dropFirst(8))
            let extended = good.replacingOccurrences(of: "expires=\(expires)", with: "expires=\(Int64(expires)! + 1000)")
            #expect(try await s.raw.send("GET", extended, token: nil).status == 403)
            // An expired one: a valid signature whose time has passed.
            // The server's own signer (its secret is in the data directory, or in the database when there is one).
            let signer = s.server.service.signer
            let past = Timestamp.nowSeconds() - 5
            let expired = try await s.raw.send("GET", "/cdn/test/a?" + signer.query(scope: .read, resource: "cdn/test/a", expires: past), token: nil)
            #expect(expired.status == 403)
            #expect(expired.error?.message.contains("expired") == true)
            // A signature made for uploading does not read.
            let uploadScoped = signer.query(scope: .upload, resource: "cdn/test/a", expires: past + 3600)
            #expect(try await s.raw.send("GET", "/cdn/test/a?" + uploadScoped, token: nil).status == 403)
            // And a read signature does not write to a storage link.
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "w", size: 1))
            let id = try #require(session.upload.url.split(separator: "/").last?.split(separator: "?").first)
            let readScoped = signer.query(scope: .read, resource: "upload/\(id)", expires: past + 3600)
            #expect(try await s.raw.send("PUT", "/storage/uploads/\(id)?" + readScoped, token: nil, body: Data([1])).status == 403)
            #expect(try await s.admin.get("a") == Array("a".utf8))
        }
    }

    @Test("sign-urls refuses paths the token cannot read and silly expiries")
    func signRules() async throws {
        try await withServer { s in
            let writer = try await s.raw.json("POST", Routes.signURLs, SignURLsRequest(expiry: 60, urls: ["/cdn/elsewhere/x"]), token: TestServer.writerToken)
            #expect(writer.status == 403)
            let zero = try await s.raw.json("POST", Routes.signURLs, SignURLsRequest(expiry: 0, urls: ["/cdn/test/x"]))
            #expect(zero.status == 400)
            let notCDN = try await s.raw.json("POST", Routes.signURLs, SignURLsRequest(expiry: 60, urls: ["/etc/passwd"]))
            #expect(notCDN.status == 400)
            let absolute = try await s.raw.json("POST", Routes.signURLs, SignURLsRequest(expiry: 60, urls: [s.url + "/cdn/test/x%20y"]))
            #expect(absolute.status == 200)
            #expect(try absolute.json(SignURLsResponse.self).urls[0].signedUrl.contains("/cdn/test/x%20y?"))
        }
    }
}
