import Crypto
import Foundation
import NIOCore
import StorageClient
@testable import StorageServer
import Testing

/// What only the S3 backend has: multipart publishing, the store's signature checks, a store that
/// is away. They need the S3 server of `scripts/s3-test.sh` (the S3 run of `make test`); on the
/// embedded run they are reported as skipped, not passed. The rest of the server suite runs on
/// both backends.
@Suite("S3 blobs: multipart, signatures, a store that is away", .enabled(if: TestBackend.isS3, "needs STOW_TEST_S3_ENDPOINT (scripts/s3-test.sh)"))
struct S3BlobStoreTests {
    static func staged(_ store: S3BlobStore, _ id: String, _ bytes: [UInt8]) async throws {
        var w = try await store.openStaged(id, at: 0, expecting: Int64(bytes.count))
        var offset = 0
        while offset < bytes.count {
            let n = min(1 << 20, bytes.count - offset)
            try await w.write(ByteBuffer(bytes: bytes[offset..<(offset + n)]))
            offset += n
        }
        #expect(try await w.finish() == Int64(bytes.count))
    }

    static func read(_ store: S3BlobStore, _ id: String, _ range: Range<Int64>) async throws -> [UInt8] {
        var out: [UInt8] = []
        try await store.read(id, range: range) { out += $0.readableBytesView }
        return out
    }

    @Test("a blob larger than a part goes up in parts; ranges across part boundaries read back; delete removes it")
    func multipart() async throws {
        let dir = makeTempDirectory("s3parts")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try S3BlobStore(try #require(TestBackend.s3Location()), stagingRoot: dir, partSize: 5 << 20)
        let bytes = randomBytes((12 << 20) + 123, seed: 11)
        let id = String(repeating: "ab", count: 16)
        try await Self.staged(store, id, bytes)
        let digest = try await store.sha256(ofStaged: id)
        try await store.publish(id)
        #expect(try await store.stagedSize(id) == nil, "the staging file goes once the object is stored")
        #expect(try await store.blobSize(id) == Int64(bytes.count))
        #expect(try await store.sha256(ofStaged: id) == digest)
        let boundary = Int64(5 << 20)
        #expect(try await Self.read(store, id, (boundary - 10)..<(boundary + 10)) == Array(bytes[Int(boundary - 10)..<Int(boundary + 10)]))
        #expect(try await Self.read(store, id, 0..<Int64(bytes.count)) == bytes)
        #expect(try await store.allBlobIDs() == [id])
        // Nothing is left of the multipart upload.
        let uploads = try await store.client.call("GET", key: nil, query: [("prefix", store.blobKey(id)), ("uploads", "")], expect: [200])
        #expect(!String(buffer: uploads.body).contains("<UploadId>"))
        try await store.deleteBlob(id)
        #expect(try await store.blobSize(id) == nil)
        await #expect(throws: BlobStoreError.notFound(store.blobKey(id))) { _ = try await Self.read(store, id, 0..<1) }
    }

    @Test("a wrong secret or access key is refused by the store: stowd says so at start and does not serve")
    func wrongCredentials() async throws {
        var location = try #require(TestBackend.s3Location())
        location.secretKey = String(location.secretKey.reversed())
        let store = try S3BlobStore(location, stagingRoot: makeTempDirectory("s3bad"), partSize: 5 << 20)
        do {
            try await store.prepare()
            Issue.record("a wrong secret was accepted")
        } catch BlobStoreError.unavailable(let why) {
            #expect(why.contains("403"), "\(why)")
        }
        location.accessKey = "nobody-knows-me"
        let dir = makeTempDirectory("s3badserver")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        await #expect(throws: (any Error).self) {
            try await withServer(dataDirectory: dir, configure: { $0.objectStore = location }) { _ in
                Issue.record("the server served with credentials the store refuses")
            }
        }
    }

    @Test("the store away: publishing fails with 'unavailable', the staged bytes stay, and they go up once it is back")
    func storeAway() async throws {
        let dir = makeTempDirectory("s3away")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let live = try #require(TestBackend.s3Location())
        var dead = live
        // A port nothing listens on: bound, then closed.
        dead.endpoint = "http://127.0.0.1:\(try freePort())"
        let away = try S3BlobStore(dead, stagingRoot: dir, partSize: 5 << 20)
        let bytes = randomBytes(3 << 20, seed: 5)
        let id = String(repeating: "cd", count: 16)
        try await Self.staged(away, id, bytes)
        do {
            try await away.publish(id)
            Issue.record("published to a store that is away")
        } catch BlobStoreError.unavailable(let why) {
            #expect(why.contains("cannot be reached"), "\(why)")
        }
        #expect(try await away.stagedSize(id) == Int64(bytes.count), "the bytes stay staged")
        #expect(APIError.from(BlobStoreError.unavailable("x")).status.code == 503)
        let back = try S3BlobStore(live, stagingRoot: dir, partSize: 5 << 20)
        try await back.publish(id)
        #expect(try await Self.read(back, id, 0..<Int64(bytes.count)) == bytes)
    }

    @Test("only objects older than the sweep's age are offered to the orphan sweep (another replica may be mid-publish)")
    func sweepAge() async throws {
        let dir = makeTempDirectory("s3sweep")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try S3BlobStore(try #require(TestBackend.s3Location()), stagingRoot: dir, sweepAge: 3600)
        let id = String(repeating: "ef", count: 16)
        try await Self.staged(store, id, [1, 2, 3])
        try await store.publish(id)
        #expect(try await store.allBlobIDs() == [id])
        #expect(try await store.blobIDs().isEmpty)
    }

    func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return Int(UInt16(bigEndian: addr.sin_port))
    }
}
