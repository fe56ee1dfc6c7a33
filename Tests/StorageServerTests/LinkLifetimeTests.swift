import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Testing

/// An upload that takes longer than its storage link's lifetime. Before, the link's signature
/// expired under it: the next chunk was refused (403), the client started again from scratch, and
/// a large upload on a slow link never finished.
@Suite("a slow upload outlives its storage link")
struct LinkLifetimeTests {
    @Test("--upload-link-lifetime 5 and an upload that needs 20 s: every chunk is taken, the file is complete")
    func slowUpload() async throws {
        let dir = makeTempDirectory("lifetime")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let stowd = try StowdProcess(dataDirectory: dir, extraArguments: ["--upload-link-lifetime", "5", "--gc-interval", "1"])
        defer { _ = stowd.stop() }
        try await stowd.withClient { c in
            _ = try await c.createNamespace(testNamespace)
            let chunk = 64 << 10, chunks = 20
            let bytes = randomBytes(chunk * chunks, seed: 7)
            let session = try await c.startUpload(testNamespace, StartUploadRequest(fileName: "slow.bin", size: Int64(bytes.count)))
            let started = ContinuousClock.now
            for i in 0..<chunks {
                let offset = Int64(i * chunk)
                let end = try await c.send(session, from: .bytes(ByteBuffer(bytes: bytes)), offset: offset, end: offset + Int64(chunk), progress: nil)
                #expect(end == offset + Int64(chunk))
                if i < chunks - 1 { try await Task.sleep(for: .seconds(1)) }
            }
            #expect(ContinuousClock.now - started > .seconds(15))
            let record = try await c.completeUpload(session)
            #expect(record.size == Int64(bytes.count))
            let url = try await c.signedURLs(testNamespace, [try StoragePath("slow.bin")], expiry: 60)[0].signedUrl
            #expect(Array(try await c.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView) == bytes)
        }
    }

    @Test("a link whose session made no progress for its lifetime stays expired")
    func idleLinkExpires() async throws {
        try await withServer(configure: { $0.uploadLinkLifetime = 1 }) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "idle", size: 2))
            // Idle for more than two lifetimes (a lifetime after its expiry): over.
            try await Task.sleep(for: .milliseconds(3200))
            let answer = try await s.raw.send("PUT", session.upload.url, token: nil, body: Data("ab".utf8))
            #expect(answer.status == 403, "\(answer.status) \(answer.text)")
        }
    }
}
