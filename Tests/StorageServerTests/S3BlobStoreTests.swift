import Crypto
import Foundation
import NIOCore
import StorageClient
@testable import StorageServer
import Testing

/// What only the S3 backend has: uploads staged in multipart uploads and continued by another
/// replica, the store's signature checks, a store that is away, abandoned uploads aborted. They need the S3 server of `scripts/s3-test.sh` (the S3 run of `make test`); on the
/// embedded run they are reported as skipped, not passed. The rest of the server suite runs on
/// both backends.
@Suite("S3 blobs: multipart, signatures, a store that is away", .enabled(if: TestBackend.isS3, "needs STOW_TEST_S3_ENDPOINT (scripts/s3-test.sh)"))
struct S3BlobStoreTests {
    /// A ledger of its own (SQLite in `dir`), as a replica's metadata store would be.
    static func ledger(_ dir: String) throws -> SQLiteMetadataStore {
        try SQLiteMetadataStore(path: dir + "/ledger.sqlite", blobGraceSeconds: 600)
    }

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

    @Test("an upload larger than a part is staged in parts and a tail; ranges across part boundaries read back; nothing staged is left")
    func multipart() async throws {
        let dir = makeTempDirectory("s3parts")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = try Self.ledger(dir)
        let store = try S3BlobStore(try #require(TestBackend.s3Location()), ledger: ledger, stagingRoot: dir, partSize: 5 << 20)
        let bytes = randomBytes((12 << 20) + 123, seed: 11)
        let id = String(repeating: "ab", count: 16)
        try await Self.staged(store, id, bytes)
        let state = try #require(try await ledger.stagingState(id))
        #expect(state.parts.map(\.number) == [1, 2])
        #expect(state.tailSize == Int64((2 << 20) + 123))
        #expect(try await store.stagedSize(id) == Int64(bytes.count))
        try await store.publish(id)
        #expect(try await store.stagedSize(id) == nil, "the staging goes once the object is stored")
        #expect(try await store.blobSize(id) == Int64(bytes.count))
        #expect(try await store.sha256(ofStaged: id) == SHA256.hash(data: bytes).hexString)
        let boundary = Int64(5 << 20)
        #expect(try await Self.read(store, id, (boundary - 10)..<(boundary + 10)) == Array(bytes[Int(boundary - 10)..<Int(boundary + 10)]))
        #expect(try await Self.read(store, id, 0..<Int64(bytes.count)) == bytes)
        #expect(try await store.allBlobIDs() == [id])
        // Nothing is left of the multipart upload, nor of the tail.
        #expect(try await store.client.listMultipartUploads(prefix: store.blobKey(id)).isEmpty)
        #expect(try await store.client.listKeys(prefix: store.stagingPrefix(id)).isEmpty)
        try await store.deleteBlob(id)
        #expect(try await store.blobSize(id) == nil)
        await #expect(throws: BlobStoreError.notFound(store.blobKey(id))) { _ = try await Self.read(store, id, 0..<1) }
    }

    @Test("an upload begun through one replica goes on through another, from the offset the first recorded")
    func continuedElsewhere() async throws {
        let dir = makeTempDirectory("s3two")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = try Self.ledger(dir)
        let location = try #require(TestBackend.s3Location())
        let one = try S3BlobStore(location, ledger: ledger, stagingRoot: dir + "/one", partSize: 5 << 20)
        let two = try S3BlobStore(location, ledger: ledger, stagingRoot: dir + "/two", partSize: 5 << 20)
        let bytes = randomBytes((11 << 20) + 7, seed: 3)
        let id = String(repeating: "a1", count: 16)
        let cut = (7 << 20) + 3
        var w = try await one.openStaged(id, at: 0, expecting: nil)
        try await w.write(ByteBuffer(bytes: bytes[0..<cut]))
        #expect(try await w.finish() == Int64(cut))
        // The other replica knows where it stands, and takes the tail from the bucket.
        #expect(try await two.stagedSize(id) == Int64(cut))
        await #expect(throws: BlobStoreError.offsetNotHeld(offset: 5, held: Int64(cut))) { _ = try await two.openStaged(id, at: 5, expecting: nil) }
        var v = try await two.openStaged(id, at: Int64(cut), expecting: nil)
        try await v.write(ByteBuffer(bytes: bytes[cut...]))
        #expect(try await v.finish() == Int64(bytes.count))
        try await one.publish(id)
        #expect(try await Self.read(two, id, 0..<Int64(bytes.count)) == bytes)
        try await one.deleteBlob(id)
    }

    @Test("two requests writing one upload at once: the first to end is kept, the other is refused and changes nothing")
    func concurrentWriters() async throws {
        let dir = makeTempDirectory("s3race")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = try Self.ledger(dir)
        let store = try S3BlobStore(try #require(TestBackend.s3Location()), ledger: ledger, stagingRoot: dir, partSize: 5 << 20)
        let id = String(repeating: "b2", count: 16)
        var first = try await store.openStaged(id, at: 0, expecting: nil)
        var second = try await store.openStaged(id, at: 0, expecting: nil)
        try await first.write(ByteBuffer(bytes: randomBytes(6 << 20, seed: 1)))
        try await second.write(ByteBuffer(bytes: randomBytes(3 << 20, seed: 2)))
        #expect(try await first.finish() == 6 << 20)
        await #expect(throws: BlobStoreError.self) { _ = try await second.finish() }
        #expect(try await store.stagedSize(id) == 6 << 20)
        try await store.deleteStaged(id)
        #expect(try await ledger.stagingState(id) == nil)
        #expect(try await store.client.listMultipartUploads(prefix: store.blobKey(id)).isEmpty)
    }

    @Test("a multipart upload no staging records (a replica stopped before recording it) is aborted by the sweep once old enough")
    func abandonedUploads() async throws {
        let dir = makeTempDirectory("s3abandoned")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ledger = try Self.ledger(dir)
        let location = try #require(TestBackend.s3Location())
        let young = try S3BlobStore(location, ledger: ledger, stagingRoot: dir, partSize: 5 << 20, sweepAge: 3600)
        let id = String(repeating: "c3", count: 16)
        let orphan = try await young.client.createMultipartUpload(young.blobKey(id))
        // A live staging is never touched.
        let live = String(repeating: "d4", count: 16)
        try await Self.staged(young, live, [1, 2, 3])
        #expect(try await young.abortAbandonedUploads() == 0, "too young")
        let old = try S3BlobStore(location, ledger: ledger, stagingRoot: dir, partSize: 5 << 20, sweepAge: 0)
        try await Task.sleep(for: .seconds(1))
        #expect(try await old.abortAbandonedUploads() >= 1)
        let left = try await old.client.listMultipartUploads(prefix: old.client.key("blobs/")).map(\.uploadID)
        #expect(!left.contains(orphan))
        #expect(try await old.stagedSize(live) == 3)
        try await old.deleteStaged(live)
    }

    @Test("a wrong secret or access key is refused by the store: stowd says so at start and does not serve")
    func wrongCredentials() async throws {
        var location = try #require(TestBackend.s3Location())
        location.secretKey = String(location.secretKey.reversed())
        let badDir = makeTempDirectory("s3bad")
        defer { try? FileManager.default.removeItem(atPath: badDir) }
        let store = try S3BlobStore(location, ledger: try Self.ledger(badDir), stagingRoot: badDir, partSize: 5 << 20)
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
        let ledger = try Self.ledger(dir)
        let live = try #require(TestBackend.s3Location())
        var dead = live
        // A port nothing listens on: bound, then closed.
        dead.endpoint = "http://127.0.0.1:\(try freePort())"
        let here = try S3BlobStore(live, ledger: ledger, stagingRoot: dir, partSize: 5 << 20)
        let away = try S3BlobStore(dead, ledger: ledger, stagingRoot: dir, partSize: 5 << 20)
        let bytes = randomBytes(7 << 20, seed: 5)
        let id = String(repeating: "cd", count: 16)
        try await Self.staged(here, id, bytes)
        do {
            try await away.publish(id)
            Issue.record("published to a store that is away")
        } catch BlobStoreError.unavailable(let why) {
            #expect(why.contains("cannot be reached"), "\(why)")
        }
        await #expect(throws: BlobStoreError.self) { _ = try await away.openStaged(String(repeating: "ce", count: 16), at: 0, expecting: nil) }
        #expect(try await away.stagedSize(id) == Int64(bytes.count), "the bytes stay staged")
        #expect(APIError.from(BlobStoreError.unavailable("x")).status.code == 503)
        try await here.publish(id)
        #expect(try await Self.read(here, id, 0..<Int64(bytes.count)) == bytes)
    }

    @Test("only objects older than the sweep's age are offered to the orphan sweep (another replica may be mid-publish)")
    func sweepAge() async throws {
        let dir = makeTempDirectory("s3sweep")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let store = try S3BlobStore(try #require(TestBackend.s3Location()), ledger: try Self.ledger(dir), stagingRoot: dir, sweepAge: 3600)
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
