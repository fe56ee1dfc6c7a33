import Foundation
import StorageClient
import StorageProtocol
import NIOCore
@testable import StorageServer
import Testing

@Suite("garbage collection")
struct GarbageTests {
    static let hour: Int64 = 3600 * 1_000_000_000

    @Test("an upload started and never completed is deleted with its bytes once its link expired")
    func abandoned() async throws {
        try await withServer { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "never", size: 10))
            _ = try await s.admin.send(session, from: .bytes(.init(string: "01234")), offset: 0, end: 5, progress: nil)
            #expect(try await s.stagedCount() == 1)
            // Not yet: the link is still valid.
            #expect(try await s.server.collectGarbage().uploads == 0)
            #expect(try await s.stagedCount() == 1)
            let later = Timestamp.nowNanoseconds() + 2 * Self.hour
            #expect(try await s.server.collectGarbage(now: later).uploads == 1)
            #expect(try await s.stagedCount() == 0)
            let head = try await s.raw.send("HEAD", session.upload.url, token: nil)
            #expect(head.status == 404 || head.status == 403)
            await #expect(throws: StorageError.self) { try await s.admin.record(testNamespace, path("never")) }
        }
    }

    @Test("superseded and deleted blobs are removed after the grace period; live ones never")
    func superseded() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("v1".utf8), "f")
            _ = try await s.admin.put(Array("v2".utf8), "f")
            _ = try await s.admin.put(Array("x".utf8), "deleted")
            try await s.admin.delete(testNamespace, path("deleted"), ifMatch: nil)
            #expect(try await s.blobCount() == 3)
            // Within the grace period, a read that already started may still need them.
            #expect(try await s.server.collectGarbage().blobs == 0)
            #expect(try await s.blobCount() == 3)
            let later = Timestamp.nowNanoseconds() + 2 * Self.hour
            let result = try await s.server.collectGarbage(now: later)
            #expect(result.blobs == 2)
            #expect(try await s.blobCount() == 1)
            #expect(try await s.admin.get("f") == Array("v2".utf8))
            // The completed uploads' records go too, but never their files.
            #expect(result.uploads == 3)
            #expect(try await s.admin.get("f") == Array("v2".utf8))
        }
    }

    @Test("files a crash left in the data directory that no record names are swept at start")
    func orphans() async throws {
        let dir = makeTempDirectory("orphans")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try await withServer(dataDirectory: dir, configure: { _ in }) { s in
            _ = try await s.admin.put(Array("kept".utf8), "kept")
        }
        let orphanID = "eeee0000000000000000000000000000"
        let orphanBlob = dir + "/blobs/ee/" + orphanID
        if let bucket = TestBackend.s3Location(for: dir) {
            // A shared bucket: an object a crash left there, older than the sweep's age (0 here).
            let client = S3Client(bucket)
            try await client.putObject(client.key("blobs/" + orphanID), .bytes(ByteBuffer(string: "orphan")))
            try await Task.sleep(for: .milliseconds(1100))
        } else {
            try FileManager.default.createDirectory(atPath: dir + "/blobs/ee", withIntermediateDirectories: true)
            _ = FileManager.default.createFile(atPath: orphanBlob, contents: Data("orphan".utf8))
        }
        _ = FileManager.default.createFile(atPath: dir + "/uploads/ffff0000000000000000000000000000", contents: Data("partial".utf8))
        try await withServer(dataDirectory: dir, configure: { $0.orphanSweepAge = 0 }) { (s: TestServer) async throws in
            #expect(!FileManager.default.fileExists(atPath: orphanBlob))
            #expect(try await !s.server.storedBlobIDs().contains(orphanID))
            #expect(try await s.stagedCount() == 0)
            #expect(try await s.blobCount() == 1)
            #expect(try await s.admin.get("kept") == Array("kept".utf8))
        }
    }

    @Test("a second server on the same data directory is refused with a clear error; the first writes stowd.url")
    func exclusiveDataDirectory() async throws {
        let dir = makeTempDirectory("lock")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try await withServer(dataDirectory: dir, configure: { _ in }) { (s: TestServer) async throws in
            #expect(try String(contentsOfFile: dir + "/stowd.url", encoding: .utf8) == s.url + "\n")
            let second = #expect(throws: ServerError.self) {
                try StowServer(configuration: ServerConfiguration(dataDirectory: dir, tokens: TokenStore()))
            }
            #expect(second?.description.contains("another stowd") == true)
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/stowd.url"))
        // Once the first has stopped, the directory is free again.
        _ = try StowServer(configuration: ServerConfiguration(dataDirectory: dir, tokens: TokenStore()))
    }
}
