import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import StorageServer
import Testing

/// stowd's staging files: written around the page cache where the filesystem allows it
/// (whole 4 KiB blocks from aligned buffers, the last partial block the usual way), the usual
/// way at an offset that is not a block boundary.
@Suite("staging files", .serialized)  // boundedBuffers takes every O_DIRECT buffer for a moment: aroundThePageCache must not run meanwhile
struct StagingTests {
    static func withStore(_ body: (LocalBlobStore, String) async throws -> Void) async throws {
        let root = FileManager.default.temporaryDirectory.path + "/stowd-staging-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: root) }
        try await body(try LocalBlobStore(root: root), root)
    }

    static func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
        // Eight bytes a step: a debug build spends seconds on one closure call per byte.
        var out: [UInt8] = []
        out.reserveCapacity(count + 8)
        var state = seed
        while out.count < count {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            withUnsafeBytes(of: state ^ (state >> 29)) { out.append(contentsOf: $0) }
        }
        out.removeLast(out.count - count)
        return out
    }

    /// Writes `bytes` in pieces of the given sizes (cycled) through a staged writer opened at `offset`.
    static func write(
        _ store: LocalBlobStore, _ id: String, _ bytes: ArraySlice<UInt8>, at offset: Int64, pieces: [Int], expecting: Int64? = nil
    ) async throws -> Int64 {
        var writer = try await store.openStaged(id, at: offset, expecting: expecting)
        var i = bytes.startIndex
        var k = 0
        while i < bytes.endIndex {
            let n = min(pieces[k % pieces.count], bytes.endIndex - i)
            try await writer.write(ByteBuffer(bytes: bytes[i..<(i + n)]))
            #expect(writer.offset == offset + Int64(i + n - bytes.startIndex))
            i += n
            k += 1
        }
        return try await writer.finish()
    }

    @Test("pieces of any size, across the 8 MiB buffers, arrive whole and in order; the last partial block too")
    func pieces() async throws {
        try await Self.withStore { store, root in
            let bytes = Self.randomBytes((17 << 20) + 12_345, seed: 1)
            let end = try await Self.write(store, "a", bytes[...], at: 0, pieces: [1, 65_536, 3 << 20, 4095, 7, 1 << 20])
            #expect(end == Int64(bytes.count))
            #expect(try await store.stagedSize("a") == Int64(bytes.count))
            #expect(FileManager.default.contents(atPath: root + "/uploads/a") == Data(bytes))
        }
    }

    @Test("a write resumed at a block boundary, and at an offset that is not one, continues the file")
    func resumed() async throws {
        try await Self.withStore { store, root in
            let bytes = Self.randomBytes((9 << 20) + 777, seed: 2)
            // 5,000 is no block boundary (the usual way), 3 × 4096 + 1 MiB is (around the cache).
            let cuts = [0, 5000, (1 << 20) + 3 * 4096, bytes.count]
            for (a, b) in zip(cuts, cuts.dropFirst()) {
                let end = try await Self.write(store, "b", bytes[a..<b], at: Int64(a), pieces: [100_000, 1 << 20])
                #expect(end == Int64(b))
            }
            #expect(FileManager.default.contents(atPath: root + "/uploads/b") == Data(bytes))
            // Opening at an offset cuts off what was past it.
            let again = try await Self.write(store, "b", Self.randomBytes(10, seed: 3)[...], at: 4096, pieces: [10])
            #expect(again == 4096 + 10)
            #expect(FileManager.default.contents(atPath: root + "/uploads/b") == Data(bytes[0..<4096] + Self.randomBytes(10, seed: 3)))
        }
    }

    @Test("at most 8 writers hold O_DIRECT buffers at once (128 MiB); the next ones go the usual way")
    func boundedBuffers() async throws {
        try await Self.withStore { store, _ in
            var writers: [any StagedWriter] = []
            for i in 0..<10 { writers.append(try await store.openStaged("w\(i)", at: 0, expecting: nil)) }
            let direct = writers.filter { String(describing: type(of: $0)) == "DirectStagedWriter" }.count
            #expect(direct <= 8 && direct < writers.count, "\(direct) of \(writers.count) writers hold buffers")
            for i in writers.indices { _ = try await writers[i].finish() }
            // Given back: a new writer gets buffers again (unless other tests hold them all right now).
            var again = try await store.openStaged("w-again", at: 0, expecting: nil)
            _ = try await again.finish()
        }
    }

    @Test("an empty upload leaves an empty staging file")
    func empty() async throws {
        try await Self.withStore { store, _ in
            let end = try await Self.write(store, "c", [][...], at: 0, pieces: [1])
            let size = try await store.stagedSize("c")
            #expect(end == 0)
            #expect(size == 0)
        }
    }

    @Test("a large staged write leaves the page cache alone (where the filesystem allows O_DIRECT); a small one goes the usual way")
    func aroundThePageCache() async throws {
        try await Self.withStore { store, root in
            let bytes = Self.randomBytes(32 << 20, seed: 4)
            _ = try await Self.write(store, "d", bytes[...], at: 0, pieces: [1 << 20])
            let path = root + "/uploads/d"
            let resident = try Self.residentBytes(path)
            #expect(resident < 1 << 20, "\(resident) bytes of the 32 MiB staging file are in the page cache")
            #expect(FileManager.default.contents(atPath: path) == Data(bytes))
            // A small write, announced as such, goes the usual way; a large or unknown one around the cache.
            for (expecting, writer) in [(Int64(1 << 20), "LocalStagedWriter"), (Int64(8 << 20), "DirectStagedWriter"), (nil, "DirectStagedWriter")] {
                var w = try await store.openStaged("e", at: 0, expecting: expecting)
                #expect(String(describing: type(of: w)) == writer, "expecting \(String(describing: expecting))")
                _ = try await w.finish()
            }
        }
    }

    @Test(
        "a full disk: the upload is refused with 507, what was written whole is kept for a resume, and the server goes on",
        .enabled(if: !TestBackend.isS3, "with S3, uploads in progress are staged in the bucket, not on this disk"))
    func fullDisk() async throws {
        // A 32 MiB ext4 of its own (a loop device: root, as CI and the mount tests are).
        let root = FileManager.default.temporaryDirectory.path + "/stowd-full-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root + "/fs", withIntermediateDirectories: true)
        defer {
            _ = try? Self.run("/usr/bin/umount", [root + "/fs"])
            try? FileManager.default.removeItem(atPath: root)
        }
        try Self.run("/usr/bin/truncate", ["-s", "32M", root + "/image"])
        try Self.run("/usr/sbin/mkfs.ext4", ["-q", root + "/image"])
        try Self.run("/usr/bin/mount", ["-o", "loop", root + "/image", root + "/fs"])
        try await withServer(dataDirectory: root + "/fs/data") { s in
            let bytes = Self.randomBytes(64 << 20, seed: 5)
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "big", size: Int64(bytes.count)))
            await #expect {
                _ = try await s.admin.send(session, from: .bytes(ByteBuffer(bytes: bytes)), offset: 0, end: Int64(bytes.count), progress: nil)
            } throws: { ($0 as? StorageError)?.kind == .noSpace }
            // What the server says it has is what it has: the source's first bytes, no hole.
            let offset = try await s.admin.uploadedBytes(session)
            #expect(offset < Int64(bytes.count))
            let staged = FileManager.default.contents(atPath: s.dataDirectory + "/uploads/" + (session.upload.url.split(separator: "?")[0].split(separator: "/").last.map(String.init) ?? ""))
            #expect(staged == Data(bytes[0..<Int(offset)]))
            // Nothing published; once the session is given up, a small file fits again.
            await #expect(throws: StorageError.self) { try await s.admin.record(testNamespace, path("big")) }
            let gone = try await s.raw.send("DELETE", session.upload.url, token: nil)
            #expect(gone.status == 204)
            _ = try await s.admin.put(Array("still here".utf8), "small")
            #expect(try await s.admin.get("small") == Array("still here".utf8))
        }
    }

    @discardableResult
    static func run(_ tool: String, _ arguments: [String]) throws -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = arguments
        try p.run()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw CocoaError(.executableLoad, userInfo: [NSLocalizedDescriptionKey: "\(tool) \(arguments) failed"]) }
        return p.terminationStatus
    }

    /// Bytes of a file in the page cache (`fincore`, util-linux).
    static func residentBytes(_ path: String) throws -> Int {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/fincore")
        p.arguments = ["--bytes", "--noheadings", "--output", "RES", path]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        p.waitUntilExit()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard p.terminationStatus == 0, let n = Int(text) else { throw CocoaError(.fileReadUnknown) }
        return n
    }
}
