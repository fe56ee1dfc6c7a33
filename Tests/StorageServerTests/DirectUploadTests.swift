import Foundation
import NIOCore
import StorageClient
import StorageProtocol
@testable import StorageServer
import Testing

/// Bytes straight between the client and the object store: start offers presigned URLs, the
/// client sends the whole file or its parts to the store, complete checks and publishes. Only on
/// a server whose files are in S3 (elsewhere start offers none, which `noDirectWithoutS3` checks).
@Suite("direct uploads: bytes straight to the object store", .enabled(if: TestBackend.isS3, "needs STOW_TEST_S3_ENDPOINT (scripts/s3-test.sh)"))
struct DirectUploadTests {
    static func id(_ session: StartUploadResponse) -> String {
        String(session.upload.url.split(separator: "?")[0].split(separator: "/").last ?? "")
    }

    @Test("a file sent whole to the store's presigned URL, then completed: stored, and no byte passed through stowd")
    func whole() async throws {
        try await withServer { s in
            let bytes = randomBytes(3 << 20, seed: 31)
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "d/whole.bin", size: Int64(bytes.count)))
            let direct = try #require(session.upload.direct)
            #expect(direct.url != nil)
            #expect(direct.parts == 1)
            // The link of the seed API is still stowd's (a tus resource too).
            #expect(session.upload.url.hasPrefix(s.url))
            try await s.admin.putDirect(url: try #require(direct.url), headers: direct.headers ?? [:], from: .bytes(ByteBuffer(bytes: bytes)), offset: 0, end: Int64(bytes.count), progress: nil)
            // Nothing staged through stowd: the bytes are in the bucket under the blob's key.
            #expect(try await s.server.store.stagingState(Self.id(session)) == nil)
            let record = try await s.admin.completeUpload(session)
            #expect(record.size == Int64(bytes.count))
            #expect(record.sha256 == nil, "not declared, and stowd never saw the bytes")
            #expect(try await s.admin.get("d/whole.bin") == bytes)
        }
    }

    @Test("a declared SHA-256 is signed into the URL: the store refuses other bytes, takes the right ones, and the record has it")
    func declaredDigest() async throws {
        try await withServer { s in
            let bytes = randomBytes(1 << 20, seed: 32)
            let sha = sha256Hex(bytes)
            var params = UploadParams()
            params.sha256 = sha
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "d/checked.bin", size: Int64(bytes.count), params: params))
            let direct = try #require(session.upload.direct)
            #expect(direct.headers?["x-amz-checksum-sha256"] != nil)
            var wrong = bytes
            wrong[7] ^= 1
            let refused = await #expect(throws: StorageError.self) {
                try await s.admin.putDirect(url: try #require(direct.url), headers: direct.headers ?? [:], from: .bytes(ByteBuffer(bytes: wrong)), offset: 0, end: Int64(wrong.count), progress: nil)
            }
            #expect(refused?.kind == .checksumMismatch)
            await #expect(throws: StorageError.self) { _ = try await s.admin.completeUpload(session) }
            try await s.admin.putDirect(url: try #require(direct.url), headers: direct.headers ?? [:], from: .bytes(ByteBuffer(bytes: bytes)), offset: 0, end: Int64(bytes.count), progress: nil)
            #expect(try await s.admin.completeUpload(session).sha256 == sha)
        }
    }

    @Test("a file in parts straight to the store, out of order and one twice: complete waits for every part, then stores them in order")
    func parts() async throws {
        try await withServer { s in
            let bytes = randomBytes((19 << 20) + 3, seed: 33)
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "d/parts.bin", size: Int64(bytes.count)))
            let direct = try #require(session.upload.direct)
            #expect(direct.partSize == 8 << 20)
            #expect(direct.parts == 3)
            let answer = try await s.admin.uploadParts(session, numbers: [3, 1, 2])
            #expect(answer.stored.isEmpty)
            let urls = Dictionary(uniqueKeysWithValues: answer.parts.map { ($0.number, $0) })
            func send(_ n: Int) async throws {
                let part = try #require(urls[n])
                let start = Int64(n - 1) * direct.partSize
                try await s.admin.putDirect(url: try #require(part.url), headers: [:], from: .bytes(ByteBuffer(bytes: bytes)), offset: start, end: start + part.size, progress: nil)
            }
            try await send(3)
            try await send(1)
            try await send(1)
            // Part 2 is missing: the upload stands at part 1, and complete refuses.
            #expect(try await s.admin.uploadParts(session, numbers: []).stored.map(\.number) == [1, 3])
            #expect(try await s.admin.uploadedBytes(session) == direct.partSize)
            let early = await #expect(throws: StorageError.self) { _ = try await s.admin.completeUpload(session) }
            #expect(early?.kind == .incomplete)
            try await send(2)
            let record = try await s.admin.completeUpload(session)
            #expect(record.size == Int64(bytes.count))
            #expect(try await s.admin.get("d/parts.bin") == bytes)
            // A complete answered again (a lost answer) gives the same record.
            #expect(try await s.admin.completeUpload(session).id == record.id)
            #expect(try await s.stagedCount() == 0)
        }
    }

    @Test("the client library sends a large file in parallel parts, and resumes an interrupted one from the parts the store has")
    func clientResumes() async throws {
        try await withServer { s in
            let bytes = randomBytes((27 << 20) + 11, seed: 34)
            let record = try await s.admin.put(bytes, "d/client.bin")
            #expect(record.size == Int64(bytes.count))
            #expect(try await s.admin.get("d/client.bin") == bytes)
            // Interrupted: two parts sent, then the client went away; resumeUpload sends the others.
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "d/resumed.bin", size: Int64(bytes.count)))
            let direct = try #require(session.upload.direct)
            for part in try await s.admin.uploadParts(session, numbers: [1, 4]).parts {
                let start = Int64(part.number - 1) * direct.partSize
                try await s.admin.putDirect(url: try #require(part.url), headers: [:], from: .bytes(ByteBuffer(bytes: bytes)), offset: start, end: start + part.size, progress: nil)
            }
            #expect(try await s.admin.uploadParts(session, numbers: []).stored.map(\.number) == [1, 4])
            let resumed = try await s.admin.resumeUpload(session, from: .bytes(ByteBuffer(bytes: bytes)))
            #expect(resumed.size == Int64(bytes.count))
            #expect(try await s.admin.get("d/resumed.bin") == bytes)
        }
    }

    @Test("a deferred length is offered parts only: whole parts and a short last one go straight to the store, and complete names the size (another size is refused)")
    func deferredParts() async throws {
        try await withServer { s in
            let started = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "d/deferred.bin", size: 0, deferLength: true))
            let direct = try #require(started.upload.direct)
            #expect(direct.url == nil, "no whole-file PUT: the size is not known")
            #expect(direct.parts == 0)
            let partSize = Int(direct.partSize)
            let bytes = randomBytes(2 * partSize + 12_345, seed: 36)
            let answer = try await s.admin.uploadParts(started, numbers: [3, 1, 2, 10_001])
            #expect(answer.parts.map(\.number) == [3, 1, 2], "no part past S3's 10,000")
            for part in answer.parts {
                let start = (part.number - 1) * partSize
                let end = min(start + partSize, bytes.count)
                try await s.admin.putDirect(url: try #require(part.url), headers: [:], from: .bytes(ByteBuffer(bytes: bytes)), offset: Int64(start), end: Int64(end), progress: nil)
            }
            // No byte went through stowd: its record of the staging holds no part and no tail.
            let staging = try #require(try await s.server.store.stagingState(Self.id(started)))
            #expect(staging.parts.isEmpty && staging.tailSize == 0)
            #expect(try await s.admin.uploadedBytes(started) == Int64(bytes.count))
            for size in [bytes.count - 1, bytes.count + 1, 0] {
                var wrong = started
                wrong.size = Int64(size)
                let refused = await #expect(throws: StorageError.self) { _ = try await s.admin.completeUpload(wrong) }
                #expect(refused?.kind == .incomplete, "size \(size)")
            }
            var complete = started
            complete.size = Int64(bytes.count)
            let record = try await s.admin.completeUpload(complete)
            #expect(record.size == Int64(bytes.count))
            #expect(try await s.admin.get("d/deferred.bin") == bytes)
            #expect(try await s.stagedCount() == 0)
        }
    }

    @Test("GrowingDirectUpload: a file sent to the store while it is written, whole parts before its end is known, the last at finish; stop and a file that shrinks end it")
    func growing() async throws {
        try await withServer { s in
            let dir = makeTempDirectory("growing")
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let file = dir + "/f"
            #expect(FileManager.default.createFile(atPath: file, contents: nil))
            let writer = try #require(FileHandle(forWritingAtPath: file))
            defer { try? writer.close() }
            let started = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "d/growing.bin", size: 0, deferLength: true))
            let parts = try #require(GrowingDirectUpload(store: s.admin, session: started, path: file, parallel: 2))
            let partSize = Int(parts.partSize)
            let bytes = randomBytes(3 * partSize + 777, seed: 37)
            let running = Task { try await parts.run() }
            var written = 0
            func append(upTo end: Int) throws {
                while written < end {
                    let n = min(1 << 20, end - written)
                    try writer.write(contentsOf: bytes[written..<(written + n)])
                    written += n
                    parts.grew(to: Int64(written))
                }
            }
            // Two whole parts and a half: the two go before the file's end is known.
            try append(upTo: 2 * partSize + partSize / 2)
            var stored: Int64 = 0
            for _ in 0..<600 where stored < Int64(2 * partSize) {
                try await Task.sleep(for: .milliseconds(50))
                stored = parts.stored
            }
            #expect(stored == Int64(2 * partSize), "the whole parts went while the file was written")
            try append(upTo: bytes.count)
            parts.finish(size: Int64(bytes.count))
            try await running.value
            #expect(parts.stored == Int64(bytes.count))
            let staging = try #require(try await s.server.store.stagingState(Self.id(started)))
            #expect(staging.parts.isEmpty && staging.tailSize == 0, "nothing went through stowd")
            var complete = started
            complete.size = Int64(bytes.count)
            #expect(try await s.admin.completeUpload(complete).size == Int64(bytes.count))
            #expect(try await s.admin.get("d/growing.bin") == bytes)

            // Stopped: run ends with .cancelled, whatever it was waiting for.
            let other = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "d/stopped.bin", size: 0, deferLength: true))
            let stopped = try #require(GrowingDirectUpload(store: s.admin, session: other, path: file))
            let waiting = Task { try await stopped.run() }
            try await Task.sleep(for: .milliseconds(100))
            stopped.stop()
            let cancelled = await #expect(throws: StorageError.self) { try await waiting.value }
            #expect(cancelled?.kind == .cancelled)
            // A final size short of the parts already sent is an error, not a file cut short.
            let third = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "d/shrunk.bin", size: 0, deferLength: true))
            let shrunk = try #require(GrowingDirectUpload(store: s.admin, session: third, path: file))
            shrunk.grew(to: Int64(bytes.count))
            let sending = Task { try await shrunk.run() }
            for _ in 0..<600 where shrunk.stored < Int64(partSize) { try await Task.sleep(for: .milliseconds(50)) }
            shrunk.finish(size: Int64(partSize / 2))
            let short = await #expect(throws: StorageError.self) { try await sending.value }
            #expect(short?.kind == .localIO)
            try await s.admin.abandonUpload(third)
            try await s.admin.abandonUpload(other)
            // Not a deferred length with parts: nothing to do here.
            #expect(GrowingDirectUpload(store: s.admin, session: try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "d/sized.bin", size: 10)), path: file) == nil)
        }
    }

    @Test("parts asked for on one replica, sent to the store, completed through another")
    func acrossReplicas() async throws {
        try await withReplicas(2) { replicas in
            let bytes = randomBytes((9 << 20) + 1, seed: 35)
            let session = try await replicas[0].admin.startUpload(testNamespace, StartUploadRequest(fileName: "d/two.bin", size: Int64(bytes.count)))
            let resumed = try await replicas[1].admin.resumeUpload(session, from: .bytes(ByteBuffer(bytes: bytes)))
            #expect(resumed.size == Int64(bytes.count))
            #expect(try await replicas[0].admin.get("d/two.bin") == bytes)
        }
    }
}

@Suite("direct uploads are offered only where files are in an object store")
struct NoDirectUploadTests {
    @Test("without S3, start offers no direct way, and upload/parts answers 404")
    func noDirectWithoutS3() async throws {
        try await withServer { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "n.bin", size: 10))
            if TestBackend.isS3 {
                #expect(session.upload.direct != nil)
            } else {
                #expect(session.upload.direct == nil)
                let refused = await #expect(throws: StorageError.self) { _ = try await s.admin.uploadParts(session, numbers: [1]) }
                #expect(refused?.kind == .notFound)
            }
            // A deferred length is offered parts only, their number open; only with S3.
            let deferred = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "n2.bin", size: 0, deferLength: true))
            if TestBackend.isS3 {
                #expect(deferred.upload.direct?.url == nil && deferred.upload.direct?.parts == 0)
            } else {
                #expect(deferred.upload.direct == nil)
            }
            // A declared tail of zeros always goes through the storage link.
            let zeros = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "n3.bin", size: 10, params: UploadParams(zerosFrom: 4)))
            #expect(zeros.upload.direct == nil)
        }
    }
}

func sha256Hex(_ bytes: [UInt8]) -> String {
    SigV4.sha256Hex(bytes)
}
