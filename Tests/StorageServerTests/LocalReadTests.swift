import Foundation
import NIOCore
@testable import StorageClient
import StorageProtocol
@testable import StorageServer
import Testing

/// Reads beside the server: a stowd that keeps blobs in a local folder and listens on loopback
/// answers a client that asks (`Stow-Local-Read: 1`) with the path of the version's blob file, which
/// the client reads itself. Never to a client that does not ask, with `--proxy-downloads`, on a
/// server other machines reach, or for a file kept in the database.
@Suite("local reads: the blob file's path for a client on this machine", .enabled(if: !TestBackend.isS3, "blobs in S3 are not local files"))
struct LocalReadTests {
    static let ask = ("Stow-Local-Read", "1")

    /// `bytes` stored at `name` (three steps: a blob file), and a signed URL of it.
    static func stored(_ bytes: [UInt8], _ name: String, on s: TestServer) async throws -> (FileRecord, String) {
        let record = try await s.admin.put(bytes, name)
        return (record, try await s.admin.signedURLs(testNamespace, [path(name)], expiry: 60)[0].signedUrl)
    }

    @Test("a GET with Stow-Local-Read is a 307 to file:// of the blob, with the file's ETag; the file holds the version's bytes; a stale If-Match is 412")
    func pathOfTheBlob() async throws {
        try await withServer { s in
            let bytes = randomBytes(3 << 20, seed: 91)
            let (record, url) = try await Self.stored(bytes, "big/l.bin", on: s)
            let answer = try await s.raw.send("GET", url, token: nil, headers: [Self.ask, ("If-Match", "\"\(record.etag)\"")], follow: false)
            #expect(answer.status == 307)
            #expect(answer.header("ETag") == "\"\(record.etag)\"")
            #expect(answer.body.isEmpty)
            let location = try #require(answer.header("Location"))
            #expect(location.hasPrefix("file:///"))
            let file = String(location.dropFirst("file://".count))
            #expect(file.hasPrefix(s.dataDirectory.hasPrefix("/") ? s.dataDirectory : "/"), "\(file) is in the data folder")
            #expect(Array(try Data(contentsOf: URL(fileURLWithPath: file))) == bytes)
            // Without the header, or with a stale If-Match: as always.
            let plain = try await s.raw.send("GET", url, token: nil, follow: false)
            #expect(plain.status == 200)
            #expect(Array(plain.body) == bytes)
            #expect(try await s.raw.send("GET", url, token: nil, headers: [Self.ask, ("If-Match", "\"other\"")], follow: false).status == 412)
            // Without a grant: refused as before; a public file read without one: its bytes, no path.
            #expect(try await s.raw.send("GET", "/cdn/test/big/l.bin", token: nil, headers: [Self.ask], follow: false).status == 403)
            var patch = FilePatch()
            patch.isPublic = true
            _ = try await s.admin.update(testNamespace, path("big/l.bin"), patch, ifMatch: nil)
            let anonymous = try await s.raw.send("GET", "/cdn/test/big/l.bin", token: nil, headers: [Self.ask], follow: false)
            #expect(anonymous.status == 200)
            #expect(anonymous.header("Location") == nil)
        }
    }

    @Test("a file kept in the database, --proxy-downloads, and a server listening beyond loopback: the bytes, not a path")
    func bytesWhereNoPath() async throws {
        try await withServer { s in
            let small = randomBytes(100, seed: 92)
            // One request: kept inside the database (`inlineLimit`).
            _ = try await s.admin.uploadDirect(testNamespace, StartUploadRequest(fileName: "s.bin", size: Int64(small.count)), from: .bytes(ByteBuffer(bytes: small)))
            let url = try await s.admin.signedURLs(testNamespace, [path("s.bin")], expiry: 60)[0].signedUrl
            let answer = try await s.raw.send("GET", url, token: nil, headers: [Self.ask], follow: false)
            #expect(answer.status == 200)
            #expect(Array(answer.body) == small)
        }
        for configure: (inout ServerConfiguration) -> Void in [{ $0.proxyDownloads = true }, { $0.host = "0.0.0.0" }] {
            try await withServer(configure: configure) { s in
                let bytes = randomBytes(2 << 20, seed: 93)
                let (_, url) = try await Self.stored(bytes, "b.bin", on: s)
                let answer = try await s.raw.send("GET", url, token: nil, headers: [Self.ask], follow: false)
                #expect(answer.status == 200)
                #expect(Array(answer.body) == bytes)
            }
        }
    }

    @Test("the client: localBlobPath gives the path for the version asked, nil for a version that is not the file's, and a server that gives none costs nothing after")
    func client() async throws {
        try await withServer { s in
            let bytes = randomBytes(2 << 20, seed: 94)
            let (record, url) = try await Self.stored(bytes, "c.bin", on: s)
            let found = try await s.admin.localBlobPath(url: url, etag: record.etag)
            let file = try #require(found)
            #expect(Array(try Data(contentsOf: URL(fileURLWithPath: file))) == bytes)
            await #expect(throws: StorageError.self) { _ = try await s.admin.localBlobPath(url: url, etag: "other") }
        }
        try await withServer(configure: { $0.proxyDownloads = true }) { s in
            let bytes = randomBytes(2 << 20, seed: 95)
            let (record, url) = try await Self.stored(bytes, "c.bin", on: s)
            #expect(try await s.admin.localBlobPath(url: url, etag: record.etag) == nil)
        }
    }

    @Test("the client takes a path only from a server on loopback, and only a blob file's path: never /etc/shadow, a relative path, .. or a name not of its shard")
    func onlyBlobFilePaths() {
        let id = "ab0123456789abcdef0123456789abcd"
        #expect(HTTPObjectStore.isBlobFilePath("/var/lib/stowd/blobs/ab/\(id)"))
        for bad in [
            "/etc/shadow", "/var/lib/stowd/blobs/cd/\(id)", "var/lib/blobs/ab/\(id)", "/var/blobs/ab/../ab/\(id)", "/var/blobs/ab/./\(id)",
            "/var//blobs/ab/\(id)", "/var/lib/stowd/files/ab/\(id)", "/var/blobs/ab/ab01", "/var/blobs/AB/AB0123456789ABCDEF", "/var/blobs/ab/\(id)\u{0}x",
            "/blobs/ab/\(id)/", "",
        ] {
            #expect(!HTTPObjectStore.isBlobFilePath(bad), "\(bad)")
        }
        for (endpoint, local) in [
            ("http://127.0.0.1:8420", true), ("http://localhost:1", true), ("http://[::1]:80", true), ("https://127.1.2.3", true),
            ("http://10.0.0.1:8420", false), ("http://127.example.com", false), ("http://stow.example.com", false), ("not a url", false),
        ] {
            #expect(HTTPObjectStore.isLoopback(endpoint: endpoint) == local, "\(endpoint)")
        }
    }
}
