import Crypto
import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Testing

/// Two stowd processes on one PostgreSQL and one bucket: kill -9 of one while uploads run through
/// it, and everything goes on through the other (as clients do through a load balancer).
@Suite(
    "a replica killed mid-workload", .serialized,
    .enabled(if: TestBackend.isPostgres && TestBackend.isS3, "needs STOW_TEST_DATABASE_URL and STOW_TEST_S3_ENDPOINT (scripts/test-scaleout.sh)"))
struct ReplicaKillTests {
    static func digest(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }

    @Test("kill -9 of a replica while uploads run through it: every file whose complete answered is whole, and its uploads in progress go on through the other")
    func killOne() async throws {
        let dirA = makeTempDirectory("replica-a"), dirB = makeTempDirectory("replica-b")
        defer { for d in [dirA, dirB] { try? FileManager.default.removeItem(atPath: d) } }
        TestBackend.share(dirA, with: dirB)
        let a = try StowdProcess(dataDirectory: dirA)
        let b = try StowdProcess(dataDirectory: dirB)
        defer {
            _ = a.stop()
            _ = b.stop()
        }
        let ns = try Namespace("replicas")
        let finished = Locked<[String: String]>([:])
        let big = randomBytes((20 << 20) + 17, seed: 77)
        var linkSession: StartUploadResponse?
        var directSession: StartUploadResponse?
        try await a.withClient { client in
            _ = try await client.createNamespace(ns)
            // Done through A: small (inline), medium (one part), large (parts).
            for (i, size) in [1000, 300_000, 3 << 20, (9 << 20) + 5].enumerated() {
                let bytes = randomBytes(size, seed: UInt64(i))
                _ = try await client.upload(.bytes(ByteBuffer(bytes: bytes)), size: Int64(size), to: ns, path("done/\(i)"))
                finished.mutate { $0["done/\(i)"] = Self.digest(bytes) }
            }
            // In progress through A: 11 MiB through its storage link (a part and a tail), and one
            // part sent straight to the store.
            let link = try await client.startUpload(ns, StartUploadRequest(fileName: "link.bin", size: Int64(big.count)))
            #expect(try await client.send(link, from: .bytes(ByteBuffer(bytes: big)), offset: 0, end: 11 << 20, progress: nil) == 11 << 20)
            linkSession = link
            let direct = try await client.startUpload(ns, StartUploadRequest(fileName: "direct.bin", size: Int64(big.count)))
            let part = try #require(try await client.uploadParts(direct, numbers: [1]).parts.first)
            try await client.putDirect(url: try #require(part.url), headers: [:], from: .bytes(ByteBuffer(bytes: big)), offset: 0, end: part.size, progress: nil)
            directSession = direct
            // Uploads completing one after another when A dies.
            let running = Task {
                for i in 0..<10_000 {
                    let bytes = randomBytes(20_000 + i * 7, seed: UInt64(1000 + i))
                    do {
                        _ = try await client.upload(.bytes(ByteBuffer(bytes: bytes)), size: Int64(bytes.count), to: ns, path("stream/\(i)"))
                    } catch {
                        return
                    }
                    finished.mutate { $0["stream/\(i)"] = Self.digest(bytes) }
                }
            }
            // Kill A once some uploads have completed through it (however loaded the machine is).
            let waitStart = ContinuousClock.now
            while finished.value.count < 8, ContinuousClock.now - waitStart < .seconds(120) { try await Task.sleep(for: .milliseconds(20)) }
            a.kill9()
            await running.value
        }
        #expect(finished.value.count > 6, "some uploads should have completed through A before it died")
        try await b.withClient { client in
            // Everything A said it stored is whole, read through B.
            for (p, sha) in finished.value {
                let url = try await client.signedURLs(ns, [path(p)], expiry: 60)[0].signedUrl
                #expect(Self.digest(Array(try await client.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView)) == sha, "\(p)")
            }
            // A's uploads in progress go on through B from where they stood (B's origin, A's link).
            let link = try #require(linkSession)
            #expect(try await client.uploadedBytes(link) == 11 << 20)
            let viaLink = try await client.resumeUpload(link, from: .bytes(ByteBuffer(bytes: big)))
            #expect(viaLink.size == Int64(big.count))
            let direct = try #require(directSession)
            #expect(try await client.uploadParts(direct, numbers: []).stored.map(\.number) == [1])
            let viaStore = try await client.resumeUpload(direct, from: .bytes(ByteBuffer(bytes: big)))
            #expect(viaStore.size == Int64(big.count))
            for name in ["link.bin", "direct.bin"] {
                let url = try await client.signedURLs(ns, [path(name)], expiry: 60)[0].signedUrl
                #expect(Self.digest(Array(try await client.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView)) == Self.digest(big), "\(name)")
            }
        }
    }
}
