import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Synchronization
import Testing

/// stowd as a real process: kill -9 in the middle of uploads, restart, check what survived.
@Suite("crash safety and streaming, with stowd as a child process", .serialized)
struct CrashTests {
    static func digest(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }

    /// A body that sends `total` bytes in 64 KiB chunks, pausing so that it is still going when the server dies.
    struct SlowBody: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let total: Int
        struct AsyncIterator: AsyncIteratorProtocol {
            var sent = 0
            let total: Int
            mutating func next() async throws -> ByteBuffer? {
                guard sent < total else { return nil }
                try await Task.sleep(for: .milliseconds(5))
                let n = Swift.min(65536, total - sent)
                sent += n
                return ByteBuffer(repeating: 0x5a, count: n)
            }
        }
        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(total: total) }
    }

    @Test("kill -9 during uploads: completed files survive intact, nothing partial is visible, sessions resume")
    func killNine() async throws {
        let dir = makeTempDirectory("crash")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let ns = try Namespace("crash")
        var expected: [String: String] = [:]  // path → sha256 of files whose complete answered
        let finished = Locked<[String: String]>([:])
        var pending: [(StartUploadResponse, [UInt8])] = []

        let first = try StowdProcess(dataDirectory: dir)
        try await first.withClient { client in
            let stowd = first
            _ = try await client.createNamespace(ns)
            for i in 0..<20 {
                let bytes = randomBytes(1000 + i * 3000, seed: UInt64(i))
                _ = try await client.upload(.bytes(ByteBuffer(bytes: bytes)), size: Int64(bytes.count), to: ns, path("done/\(i)"))
                expected["done/\(i)"] = Self.digest(bytes)
            }
            // Sessions whose bytes all arrived but which were not completed yet.
            for i in 0..<3 {
                let bytes = randomBytes(50_000, seed: UInt64(100 + i))
                let session = try await client.startUpload(ns, StartUploadRequest(fileName: "sent/\(i)", size: Int64(bytes.count)))
                _ = try await client.send(session, from: .bytes(ByteBuffer(bytes: bytes)), offset: 0, end: Int64(bytes.count), progress: nil)
                pending.append((session, bytes))
            }
            // In flight when the server dies: slow PUTs, and a stream of small uploads completing.
            let slow = try await (0..<4).asyncMap { i in
                try await client.startUpload(ns, StartUploadRequest(fileName: "slow/\(i)", size: 8 << 20))
            }
            let raw = RawHTTP(base: stowd.url)
            let inFlight = Task { [slow, raw, client, finished, ns] in
                await withTaskGroup(of: Void.self) { group in
                    for session in slow {
                        group.addTask {
                            let r = HTTPClientRequestFactory.put(session.upload.url, body: SlowBody(total: 8 << 20), length: 8 << 20)
                            _ = try? await raw.client.execute(r, timeout: .seconds(30))
                        }
                    }
                    group.addTask {
                        for i in 0..<10_000 {
                            let bytes = randomBytes(4096, seed: UInt64(1000 + i))
                            do {
                                _ = try await client.upload(.bytes(ByteBuffer(bytes: bytes)), size: 4096, to: ns, path("stream/\(i)"), options: UploadOptions(retry: .none))
                                finished.mutate { $0["stream/\(i)"] = Self.digest(bytes) }
                            } catch { return }
                        }
                    }
                }
            }
            // Kill once a few of the stream's files completed (the slow PUTs are still going then).
            let deadline = ContinuousClock.now + .seconds(30)
            while finished.value.count < 8 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            stowd.kill9()
            await inFlight.value
            try? await raw.shutdown()
        }

        let streamed = finished.value
        #expect(streamed.count > 5, "the stream of uploads should have completed some files before the kill")
        expected.merge(streamed) { a, _ in a }

        // Same port: the storage links handed out before the crash name it.
        let stowd = try StowdProcess(dataDirectory: dir, port: first.port)
        defer { _ = stowd.stop() }
        try await stowd.withClient { client in
        // Every file whose complete answered is there, whole.
        for (p, sha) in expected {
            let record = try await client.record(ns, path(p))
            // Sent straight to the store (S3), a file's record has no SHA-256 unless one was declared; its bytes are checked below.
            #expect(record.sha256 == sha || (TestBackend.isS3 && record.sha256 == nil), "\(p)")
            let url = try await client.signedURLs(ns, [path(p)], expiry: 60)[0].signedUrl
            #expect(Self.digest(Array(try await client.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView)) == sha, "\(p)")
        }
        // Nothing partial is visible: the slow uploads never completed.
        for i in 0..<4 {
            let e = await #expect(throws: StorageError.self) { try await client.record(ns, path("slow/\(i)")) }
            #expect(e?.kind == .notFound)
        }
        // Every visible stream file is whole (some may have committed while their answer was lost).
        let streamFiles = try await client.listAll(ns, folder: path("stream"))
        for f in streamFiles {
            let i = UInt64(f.fileName)!
            #expect(f.sha256 == Self.digest(randomBytes(4096, seed: 1000 + i)) || (TestBackend.isS3 && f.sha256 == nil), "stream/\(i)")
            let url = try await client.signedURLs(ns, [path("stream/\(f.fileName)")], expiry: 60)[0].signedUrl
            #expect(Array(try await client.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView) == randomBytes(4096, seed: 1000 + i))
        }
        #expect(streamFiles.count >= streamed.count)
        // Upload sessions survived: those whose bytes had arrived complete now.
        for (session, bytes) in pending {
            #expect(try await client.uploadedBytes(session) == Int64(bytes.count))
            let record = try await client.completeUpload(session)
            // A restarted server has no running digest: it reads a staging file back to hash it;
            // parts of an S3 multipart upload cannot be read, so there the record has none (no
            // SHA-256 was declared to check).
            #expect(record.sha256 == Self.digest(bytes) || (TestBackend.isS3 && record.sha256 == nil))
        }
        // An interrupted upload resumes from the offset the server kept.
        let partial = try await client.startUpload(ns, StartUploadRequest(fileName: "resumed", size: 8))
        _ = try await client.send(partial, from: .bytes(.init(string: "abcdefgh")), offset: 0, end: 3, progress: nil)
        let resumed = try await client.resumeUpload(partial, from: .bytes(.init(string: "abcdefgh")))
        #expect(resumed.size == 8)
        }
        #expect(stowd.stop() == 0, "SIGTERM stops stowd cleanly")
    }

    @Test("a 512 MiB upload and download pass through stowd without growing its memory by more than a few MiB")
    func streamingMemory() async throws {
        let dir = makeTempDirectory("stream")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let stowd = try StowdProcess(dataDirectory: dir)
        defer { _ = stowd.stop() }
        try await stowd.withClient { client in
        let raw = RawHTTP(base: stowd.url)
        defer { Task { try? await raw.shutdown() } }
        let ns = try Namespace("big")
        _ = try await client.createNamespace(ns)
        // Warm up (first requests allocate pools), then take the baseline.
        _ = try await client.upload(.bytes(ByteBuffer(repeating: 1, count: 4 << 20)), size: 4 << 20, to: ns, path("warm"))
        let baseline = try #require(stowd.peakRSS())
        let size = 512 << 20
        let session = try await client.startUpload(ns, StartUploadRequest(fileName: "big.bin", size: Int64(size)))
        let put = try await raw.client.execute(HTTPClientRequestFactory.put(session.upload.url, body: SlowBody.fast(total: size), length: size), timeout: .seconds(300))
        #expect(put.status.code == 200)
        _ = try await client.completeUpload(session)
        let afterUpload = stowd.peakRSS() ?? 0
        print("stowd RSS: baseline \(baseline >> 20) MiB, after upload \(afterUpload >> 20) MiB")
        let url = try await client.signedURLs(ns, [path("big.bin")], expiry: 60)[0].signedUrl
        let target = dir + "/downloaded"
        let got = try await client.download(url: url, to: target)
        #expect(got == Int64(size))
        let peak = try #require(stowd.peakRSS())
        let growth = peak - baseline
        #expect(growth < 48 << 20, "peak RSS grew by \(growth >> 20) MiB over a baseline of \(baseline >> 20) MiB")
        }
    }
}

extension CrashTests.SlowBody {
    /// The same bytes, without pauses.
    static func fast(total: Int) -> FastBody { FastBody(total: total) }
}

struct FastBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let total: Int
    struct AsyncIterator: AsyncIteratorProtocol {
        var sent = 0
        let total: Int
        let chunk = ByteBuffer(repeating: 0x33, count: 1 << 20)
        mutating func next() async throws -> ByteBuffer? {
            guard sent < total else { return nil }
            let n = Swift.min(chunk.readableBytes, total - sent)
            sent += n
            return chunk.getSlice(at: 0, length: n)
        }
    }
    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(total: total) }
}

enum HTTPClientRequestFactory {
    static func put<Body: AsyncSequence & Sendable>(_ url: String, body: Body, length: Int) -> HTTPClientRequest where Body.Element == ByteBuffer {
        var r = HTTPClientRequest(url: url)
        r.method = .PUT
        r.body = .stream(body, length: .known(Int64(length)))
        return r
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var out: [T] = []
        for e in self { out.append(try await transform(e)) }
        return out
    }
}

/// A value behind a lock, shareable between tasks.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    var value: Value { mutex.withLock { $0 } }
    func mutate(_ change: (inout Value) -> Void) { mutex.withLock { change(&$0) } }
}
