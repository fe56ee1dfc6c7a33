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
    /// Each chunk's body moves the session's expiry on, so a link whose signature expired still
    /// takes the next chunk. The server may refuse the link only after more than two lifetimes
    /// (less a second of rounding) without a request: on a machine so loaded that the test itself
    /// stalls that long, the refusal is checked to be that one, and the link is renewed.
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
            // The moment of the last request whose body could have moved the expiry on (or the start).
            var lastAlive = ContinuousClock.now
            var session = try await c.startUpload(testNamespace, StartUploadRequest(fileName: "slow.bin", size: Int64(bytes.count)))
            let firstLink = session.upload.url
            let started = ContinuousClock.now
            for i in 0..<chunks {
                let offset = Int64(i * chunk)
                let sentAt = ContinuousClock.now
                let end: Int64
                do {
                    end = try await c.send(session, from: .bytes(ByteBuffer(bytes: bytes)), offset: offset, end: offset + Int64(chunk), progress: nil)
                } catch let error as StorageError where error.kind == .forbidden {
                    let idle = ContinuousClock.now - lastAlive
                    #expect(idle > .seconds(9), "chunk \(i) was refused after \(idle) without a request; the session should have been alive")
                    session = try await c.renewUpload(session)
                    end = try await c.send(session, from: .bytes(ByteBuffer(bytes: bytes)), offset: offset, end: offset + Int64(chunk), progress: nil)
                }
                lastAlive = sentAt
                #expect(end == offset + Int64(chunk))
                if i < chunks - 1 { try await Task.sleep(for: .seconds(1)) }
            }
            #expect(ContinuousClock.now - started > .seconds(15))
            // One session throughout: nothing was started again.
            #expect(Self.uploadID(session.upload.url) == Self.uploadID(firstLink))
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

    /// A laptop asleep over an upload, a server away for longer than the link's lifetime: the
    /// client renews the link with its token and goes on from where the server is.
    @Test("an expired link is renewed with the token: the bytes sent before stay, the upload goes on and completes")
    func renewExpiredLink() async throws {
        try await withServer(configure: { $0.uploadLinkLifetime = 1 }) { s in
            let bytes = randomBytes(4096, seed: 3)
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "asleep.bin", size: 4096))
            // A 1-second link can lapse between two steps of a loaded machine: each step that uses
            // one may renew it a few times (stowfs's links live 30 minutes and renew once).
            var current = session
            #expect(try await Self.retryingLapses { try await s.admin.renewing(&current) { try await s.admin.send($0, from: .bytes(ByteBuffer(bytes: bytes)), offset: 0, end: 1000, progress: nil) } } == 1000)
            try await Task.sleep(for: .milliseconds(3200))
            let refused = try await s.raw.send("HEAD", session.upload.url, token: nil)
            #expect(refused.status == 403)

            // Only a token that may write the namespace renews; another namespace's path does not find it.
            let reader = s.client(token: TestServer.readerToken)
            let denied = await #expect(throws: StorageError.self) { _ = try await reader.renewUpload(session) }
            #expect(denied?.kind == .forbidden)
            try? await reader.shutdown()
            var elsewhere = session
            elsewhere.namespace = "test2"
            _ = try await s.admin.createNamespace(try Namespace("test2"))
            do {
                _ = try await s.admin.renewUpload(elsewhere)
                Issue.record("renewed an upload through another namespace")
            } catch let e as StorageError {
                #expect(e.kind == .notFound, "\(e)")
            }

            let renewed = try await s.admin.renewUpload(session)
            #expect(renewed.upload.url != session.upload.url)
            #expect((renewed.upload.expiresAt ?? 0) > (session.upload.expiresAt ?? 0))
            #expect(Self.uploadID(renewed.upload.url) == Self.uploadID(session.upload.url))
            #expect(renewed.fileName == session.fileName && renewed.size == session.size)
            // resumeUpload asks the server where it is, renewing on its own: the old session works.
            let record = try await Self.retryingLapses { try await s.admin.resumeUpload(session, from: .bytes(ByteBuffer(bytes: bytes)), knownOffset: nil) }
            #expect(record.size == 4096)
            let url = try await s.admin.signedURLs(testNamespace, [try StoragePath("asleep.bin")], expiry: 60)[0].signedUrl
            #expect(Array(try await s.admin.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView) == bytes)

            // A completed upload has nothing to renew.
            do {
                _ = try await s.admin.renewUpload(session)
                Issue.record("renewed a completed upload")
            } catch let e as StorageError {
                #expect(e.kind == .conflict, "\(e)")
            }
        }
    }

    @Test("a session the collector removed is not renewed: 404, and the client starts again")
    func collectedIsNotRenewed() async throws {
        try await withServer(configure: { $0.uploadLinkLifetime = 1; $0.abandonedUploadGrace = 0 }) { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "gone.bin", size: 10))
            try await Task.sleep(for: .milliseconds(2200))
            _ = try await s.server.collectGarbage()
            do {
                _ = try await s.admin.renewUpload(session)
                Issue.record("renewed a collected upload")
            } catch let e as StorageError {
                #expect(e.kind == .notFound, "\(e)")
            }
        }
    }

    /// `body` again while it fails because a link lapsed (at most 5 tries).
    static func retryingLapses<T>(_ body: () async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await body()
            } catch let error as StorageError where error.kind == .forbidden && attempt < 20 {
                continue
            }
        }
    }

    static func uploadID(_ link: String) -> Substring {
        link.split(separator: "?")[0].split(separator: "/").last ?? ""
    }
}
