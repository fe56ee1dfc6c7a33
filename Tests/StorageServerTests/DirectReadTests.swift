import Foundation
import NIOCore
@testable import StorageClient
import StorageProtocol
@testable import StorageServer
import Testing

/// Downloads straight from the object store: a server whose files are in S3 answers a GET of a
/// signed URL with a redirect to a presigned GET of the version's blob, and the client reads the
/// bytes there. Only on the S3 backend.
@Suite("direct reads: bytes straight from the object store", .enabled(if: TestBackend.isS3, "needs STOW_TEST_S3_ENDPOINT (scripts/s3-test.sh)"))
struct DirectReadTests {
    /// stowd's count of downloads it redirected.
    static func redirects(_ s: TestServer) async throws -> Int {
        let text = try await s.raw.send("GET", "/metrics").text
        let line = text.split(separator: "\n").first { $0.hasPrefix("stowd_direct_reads_total") }
        return line.flatMap { Int(Double($0.split(separator: " ").last ?? "") ?? -1) } ?? 0
    }

    @Test("a GET is a 307 to a presigned GET of the store carrying the file's ETag; Range works there; a tampered URL is refused by the store")
    func redirect() async throws {
        try await withServer { s in
            let bytes = randomBytes(200 << 10, seed: 71)
            let record = try await s.admin.put(bytes, "big/r.bin")
            let url = try await s.admin.signedURLs(testNamespace, [path("big/r.bin")], expiry: 60)[0].signedUrl
            let answer = try await s.raw.send("GET", url, token: nil, follow: false)
            #expect(answer.status == 307)
            #expect(answer.header("ETag") == "\"\(record.etag)\"")
            let location = try #require(answer.header("Location"))
            let store = try #require(ProcessInfo.processInfo.environment["STOW_TEST_S3_ENDPOINT"])
            #expect(location.hasPrefix(store + "/"), "the bytes come from the store, not from stowd")
            #expect(location.contains("X-Amz-Signature="))
            #expect(answer.body.isEmpty)
            // The store honours the range, and answers with the file's content type.
            let ranged = try await s.raw.send("GET", location, token: nil, headers: [("Range", "bytes=1000-1999")])
            #expect(ranged.status == 206)
            #expect(Array(ranged.body) == Array(bytes[1000..<2000]))
            #expect(ranged.header("Content-Type") == record.contentType)
            // Followed as a browser does: the whole file.
            let whole = try await s.raw.send("GET", url, token: nil)
            #expect(whole.status == 200)
            #expect(Array(whole.body) == bytes)
            #expect(whole.fileETag == "\"\(record.etag)\"")
            // The store checks the signature: one character changed, and it refuses.
            var tampered = location
            let i = tampered.index(tampered.endIndex, offsetBy: -1)
            tampered.replaceSubrange(i...i, with: tampered[i] == "0" ? "1" : "0")
            #expect(try await s.raw.send("GET", tampered, token: nil).status == 403)
            // HEAD, 304 and a stale If-Match are answered by stowd itself.
            #expect(try await s.raw.send("HEAD", url, token: nil).status == 200)
            #expect(try await s.raw.send("GET", url, token: nil, headers: [("If-None-Match", "\"\(record.etag)\"")], follow: false).status == 304)
            #expect(try await s.raw.send("GET", url, token: nil, headers: [("If-Match", "\"other\"")], follow: false).status == 412)
        }
    }

    @Test("with a condition (which a client would send on to the store, whose ETags and dates differ) stowd sends the bytes itself, unless the client says Stow-Direct-Read")
    func conditionalStaysWithStowd() async throws {
        try await withServer { s in
            let bytes = randomBytes(100 << 10, seed: 72)
            let record = try await s.admin.put(bytes, "c.bin")
            let url = try await s.admin.signedURLs(testNamespace, [path("c.bin")], expiry: 60)[0].signedUrl
            let ifMatch = ("If-Match", "\"\(record.etag)\"")
            let served = try await s.raw.send("GET", url, token: nil, headers: [ifMatch, ("Range", "bytes=0-9")], follow: false)
            #expect(served.status == 206)
            #expect(Array(served.body) == Array(bytes[0..<10]))
            #expect(try await s.raw.send("GET", url, token: nil, headers: [("If-Range", "\"\(record.etag)\"")], follow: false).status == 200)
            // A condition the store would judge by its own dates (or refuse, as garbage) stays with stowd.
            for condition in [("If-Modified-Since", "garbage"), ("If-Unmodified-Since", "Mon, 01 Jan 2001 00:00:00 GMT"), ("If-None-Match", "\"other\"")] {
                let answer = try await s.raw.send("GET", url, token: nil, headers: [condition], follow: false)
                #expect(answer.status == 200, "\(condition.0)")
                #expect(Array(answer.body) == bytes, "\(condition.0)")
            }
            let direct = try await s.raw.send("GET", url, token: nil, headers: [ifMatch, ("Stow-Direct-Read", "1")], follow: false)
            #expect(direct.status == 307)
        }
    }

    @Test("small files kept in the database and --proxy-downloads are served by stowd")
    func servedByStowd() async throws {
        try await withServer { s in
            // Through the small-file route: kept inline, no object to redirect to.
            let small = try await s.admin.uploadDirect(
                testNamespace, StartUploadRequest(fileName: "tiny", size: 4), from: .bytes(ByteBuffer(bytes: Array("tiny".utf8))))
            #expect(small.size == 4)
            let url = try await s.admin.signedURLs(testNamespace, [path("tiny")], expiry: 60)[0].signedUrl
            let answer = try await s.raw.send("GET", url, token: nil, follow: false)
            #expect(answer.status == 200)
            #expect(answer.text == "tiny")
        }
        try await withServer(configure: { $0.proxyDownloads = true }) { s in
            let bytes = randomBytes(100 << 10, seed: 73)
            _ = try await s.admin.put(bytes, "p.bin")
            let url = try await s.admin.signedURLs(testNamespace, [path("p.bin")], expiry: 60)[0].signedUrl
            let answer = try await s.raw.send("GET", url, token: nil, follow: false)
            #expect(answer.status == 200)
            #expect(Array(answer.body) == bytes)
            #expect(try await Self.redirects(s) == 0)
        }
    }

    @Test("the client reads pinned ranges from the store, asking stowd once per version; a target the store refuses sends it back to stowd")
    func clientFollows() async throws {
        try await withServer { s in
            let bytes = randomBytes(1 << 20, seed: 74)
            let record = try await s.admin.put(bytes, "f.bin")
            let url = try await s.admin.signedURLs(testNamespace, [path("f.bin")], expiry: 600)[0].signedUrl
            for i in 0..<8 {
                let range = Int64(i * 100_000)..<Int64(i * 100_000 + 50_000)
                var got: [UInt8] = []
                let n = try await s.admin.read(url: url, range: range, ifMatch: record.etag) { got += Array($0.readableBytesView) }
                #expect(n == 50_000)
                #expect(got == Array(bytes[Int(range.lowerBound)..<Int(range.upperBound)]))
            }
            #expect(try await Self.redirects(s) == 1, "one redirect, then straight to the store")
            // A target the store refuses (here: a spoiled signature) is dropped, and stowd asked again.
            s.admin.directTargets.withLock { targets in
                for (key, var t) in targets.byURL {
                    t.url = t.url.replacingOccurrences(of: "X-Amz-Signature=", with: "X-Amz-Signature=00")
                    targets.byURL[key] = t
                }
            }
            let collected = try await s.admin.read(url: url, range: 10..<20, ifMatch: record.etag)
            #expect(Array(collected.bytes.readableBytesView) == Array(bytes[10..<20]))
            #expect(collected.etag == record.etag)
            #expect(try await Self.redirects(s) == 2)
            // A new version: a read pinned to the old one is refused by stowd, not served old bytes.
            let newer = try await s.admin.put(randomBytes(1 << 20, seed: 75), "f.bin")
            s.admin.directTargets.withLock { $0.byURL.removeAll() }
            let refused = await #expect(throws: StorageError.self) { _ = try await s.admin.read(url: url, range: 0..<10, ifMatch: record.etag) }
            #expect(refused?.kind == .preconditionFailed)
            #expect(try await s.admin.read(url: url, range: 0..<10, ifMatch: newer.etag).bytes.readableBytes == 10)
            // A whole download follows too.
            let target = s.dataDirectory + "/download.bin"
            #expect(try await s.admin.download(url: url, to: target) == 1 << 20)
        }
    }
}
