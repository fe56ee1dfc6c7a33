import Crypto
import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import StorageServer
import Testing

@Suite("small files kept inside the database")
struct InlineBlobTests {
    static let hour: Int64 = 3600 * 1_000_000_000

    func blobID(_ s: TestServer, _ p: String) async throws -> String {
        try #require(try await s.server.store.node(testNamespace, path(p)).inode.blob)
    }

    @Test("a small direct upload leaves no file in the data folder and reads back whole and in ranges; a larger one is a file")
    func stored() async throws {
        try await withServer { s in
            let bytes = randomBytes(5000)
            let record = try await s.admin.uploadDirect(testNamespace, StartUploadRequest(fileName: "in/small", size: 5000), from: .bytes(ByteBuffer(bytes: bytes)))
            #expect(record.sha256 == SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined())
            #expect(try await s.blobCount() == 0)
            #expect(try await s.stagedCount() == 0)
            #expect(try await s.server.store.inlineBlob(try await blobID(s, "in/small")) == Data(bytes))
            #expect(try await s.admin.get("in/small") == bytes)
            let url = try await s.admin.signedURLs(testNamespace, [path("in/small")], expiry: 60)[0].signedUrl
            let part = try await s.raw.send("GET", url, token: nil, headers: [("Range", "bytes=100-199")])
            #expect(part.status == 206 && part.header("Content-Range") == "bytes 100-199/5000")
            #expect(Array(part.body) == Array(bytes[100..<200]))
            let tail = try await s.raw.send("GET", url, token: nil, headers: [("Range", "bytes=-10")])
            #expect(Array(tail.body) == Array(bytes[4990...]))

            // One byte over the limit: a blob file, as before.
            let limit = Int(ServerConfiguration(dataDirectory: "", tokens: TokenStore()).inlineLimit)
            let over = randomBytes(limit + 1)
            _ = try await s.admin.uploadDirect(testNamespace, StartUploadRequest(fileName: "in/over", size: Int64(over.count)), from: .bytes(ByteBuffer(bytes: over)))
            #expect(try await s.blobCount() == 1)
            #expect(try await s.server.store.inlineBlob(try await blobID(s, "in/over")) == nil)
            #expect(try await s.admin.get("in/over") == over)
        }
    }

    @Test("an overwritten or deleted small file's bytes are removed after the grace period; live ones never")
    func collected() async throws {
        try await withServer { s in
            _ = try await s.admin.uploadDirect(testNamespace, StartUploadRequest(fileName: "f", size: 2), from: .bytes(ByteBuffer(string: "v1")))
            let first = try await blobID(s, "f")
            _ = try await s.admin.uploadDirect(testNamespace, StartUploadRequest(fileName: "f", size: 2), from: .bytes(ByteBuffer(string: "v2")))
            _ = try await s.admin.uploadDirect(testNamespace, StartUploadRequest(fileName: "gone", size: 1), from: .bytes(ByteBuffer(string: "x")))
            let gone = try await blobID(s, "gone")
            try await s.admin.delete(testNamespace, path("gone"), ifMatch: nil)
            let live = try await blobID(s, "f")
            // Within the grace period a read that already started may still need them.
            try await s.server.collectGarbage()
            #expect(try await s.server.store.inlineBlob(first) == Data("v1".utf8))
            try await s.server.collectGarbage(now: Timestamp.nowNanoseconds() + 2 * Self.hour)
            #expect(try await s.server.store.inlineBlob(first) == nil)
            #expect(try await s.server.store.inlineBlob(gone) == nil)
            #expect(try await s.server.store.inlineBlob(live) == Data("v2".utf8))
            #expect(try await s.admin.get("f") == Array("v2".utf8))
        }
    }

    @Test("truncate moves a file between the database and the blob folder, keeping its bytes")
    func truncate() async throws {
        try await withServer { s in
            let limit = Int(ServerConfiguration(dataDirectory: "", tokens: TokenStore()).inlineLimit)
            let bytes = randomBytes(3000)
            _ = try await s.admin.uploadDirect(testNamespace, StartUploadRequest(fileName: "t", size: 3000), from: .bytes(ByteBuffer(bytes: bytes)))
            // Grown past the limit: a blob file, zeros after the old end.
            let grown = try await s.admin.update(testNamespace, path("t"), FilePatch(size: Int64(limit + 10)), ifMatch: nil)
            #expect(grown.size == Int64(limit + 10))
            #expect(try await s.blobCount() == 1)
            let big = try await s.admin.get("t")
            #expect(Array(big[..<3000]) == bytes && big[3000...].allSatisfy { $0 == 0 } && big.count == limit + 10)
            // Cut back under it: inline again, with the right SHA-256.
            let cut = try await s.admin.update(testNamespace, path("t"), FilePatch(size: 1000), ifMatch: nil)
            #expect(cut.sha256 == SHA256.hash(data: bytes[..<1000]).map { String(format: "%02x", $0) }.joined())
            #expect(try await s.server.store.inlineBlob(try await blobID(s, "t")) == Data(bytes[..<1000]))
            #expect(try await s.admin.get("t") == Array(bytes[..<1000]))
            // A stored (file) blob cut under the limit goes inline too.
            let large = randomBytes(limit * 2)
            _ = try await s.admin.put(large, "l")
            _ = try await s.admin.update(testNamespace, path("l"), FilePatch(size: 10), ifMatch: nil)
            #expect(try await s.server.store.inlineBlob(try await blobID(s, "l")) == Data(large[..<10]))
        }
    }

    @Test("a small direct upload whose SHA-256 does not match, or into a namespace that does not exist, stores nothing")
    func refused() async throws {
        try await withServer { s in
            var params = UploadParams()
            params.sha256 = String(repeating: "0", count: 64)
            await #expect(throws: StorageError.self) {
                try await s.admin.uploadDirect(testNamespace, StartUploadRequest(fileName: "bad", size: 3, params: params), from: .bytes(ByteBuffer(string: "abc")))
            }
            await #expect(throws: StorageError.self) {
                try await s.admin.uploadDirect(try Namespace("nowhere"), StartUploadRequest(fileName: "x", size: 3), from: .bytes(ByteBuffer(string: "abc")))
            }
            let listing = try await s.admin.list(testNamespace, folder: .root, after: nil, limit: 100)
            #expect(listing.entries.isEmpty)
            #expect(try await s.server.store.statistics().files == 0)
            #expect(try await s.blobCount() == 0)
            #expect(try await s.stagedCount() == 0)
        }
    }
}
