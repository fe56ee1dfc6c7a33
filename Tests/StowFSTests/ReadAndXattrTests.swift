import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import StowFS
import Testing

@Suite("engine: reads through the block cache, xattrs")
struct ReadAndXattrTests {
    static func bytes(_ n: Int) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) } }

    /// A server holding `big.bin` (100 KB), and its content.
    static func storedBig() async throws -> ([UInt8], InMemoryObjectStore) {
        let content = bytes(100_000)
        let base = InMemoryObjectStore(namespaces: [ns])
        _ = try await base.upload(.bytes(ByteBuffer(bytes: content)), size: Int64(content.count), to: ns, try StoragePath("big.bin"))
        return (content, base)
    }

    @Test("a stored file reads back byte for byte, in any order, with few requests")
    func blockReads() async throws {
        let (content, base) = try await Self.storedBig()
        let store = FaultInjectingObjectStore(wrapping: base)
        try await withEngine(store: store) { h in
            #expect(try await h.read("big.bin") == content)
            let firstPass = store.calls(of: .read)
            #expect(firstPass <= 25 / 8 + 8, "100 KB in 4 KiB blocks, fetched 8 blocks a request with read-ahead: \(firstPass)")
            // Again: all from the block cache.
            #expect(try await h.read("big.bin") == content)
            #expect(store.calls(of: .read) == firstPass)
            // Random reads inside.
            let ino = try await h.resolve("big.bin")
            let handle = try await h.fs.open(ino, write: false, truncate: false).handle
            for offset in [99_000, 5, 50_123, 4095, 4096] {
                let segs = try await h.fs.read(ino, handle: handle, offset: Int64(offset), size: 1000)
                let got = segs.flatMap { $0.file.read(at: $0.offset, length: $0.length) }
                #expect(got == Array(content[offset..<min(content.count, offset + 1000)]))
            }
            await h.fs.release(ino, handle: handle)
            #expect(store.calls(of: .signedURLs) == 1)
        }
    }

    @Test("GETs of read-ahead stay within aligned groups of blocks, as an object store's parts are")
    func alignedGets() async throws {
        let content = Self.bytes(400_000)
        let base = InMemoryObjectStore(namespaces: [ns])
        _ = try await base.upload(.bytes(ByteBuffer(bytes: content)), size: Int64(content.count), to: ns, try StoragePath("big.bin"))
        let store = FaultInjectingObjectStore(wrapping: base)
        try await withEngine(store: store, configure: { $0.maxBlocksPerRequest = 8; $0.maxReadAheadBlocks = 32 }) { h in
            let got = try await h.read("big.bin")
            #expect(got == content)
            let group = Int64(8 * 4096)
            let ranges = store.readRanges
            #expect(ranges.count >= 400_000 / Int(group))
            // None cuts across a boundary of 8 blocks; after the read-ahead reached its window,
            // each starts on one.
            let across = ranges.filter { $0.lowerBound / group != ($0.upperBound - 1) / group }
            #expect(across.isEmpty, "GETs across a boundary of 8 blocks: \(across)")
            let offBoundary = ranges.filter { $0.lowerBound % group != 0 && $0.lowerBound > 2 * group }
            #expect(offBoundary.count <= 1, "GETs starting off a boundary past the first groups: \(offBoundary) of \(ranges)")
        }
    }

    @Test("a read whose connection drops midway goes on from the first missing block; two readers share each fetch")
    func droppedRead() async throws {
        let (content, base) = try await Self.storedBig()
        let store = FaultInjectingObjectStore(wrapping: base)
        try await withEngine(store: store) { h in
            store.dropHalfway(3, of: .read)
            let got = try await h.read("big.bin")
            #expect(got == content)
            // Each drop costs one more GET for what was missing, never a failed read.
            #expect(store.calls(of: .read) <= 25 / 8 + 8 + 3)
        }
        // Two readers at once, cold: every block comes once.
        let fresh = FaultInjectingObjectStore(wrapping: base)
        try await withEngine(store: fresh) { h in
            async let a = h.read("big.bin")
            async let b = h.read("big.bin")
            let (x, y) = try await (a, b)
            #expect(x == content && y == content)
            #expect(fresh.calls(of: .read) <= 25 / 8 + 8)
        }
    }

    @Test("a fetch that fails gives back the disk blocks given to its run beforehand; one that succeeds keeps them, holding the bytes")
    func failedFetchGivesBackItsBlocks() async throws {
        let (content, base) = try await Self.storedBig()
        let store = FaultInjectingObjectStore(wrapping: base)
        /// Bytes the block cache's files take on disk.
        func allocated(_ h: Harness) -> Int {
            let dir = h.cacheDirectory + "/blocks"
            return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).reduce(0) { sum, name in
                var st = stat()
                return sum + (stat(dir + "/" + name, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG ? Int(st.st_blocks) * 512 : 0)
            }
        }
        try await withEngine(store: store) { h in
            store.failNext(50, of: .read)
            await #expect(throws: (any Error).self) { try await h.read("big.bin") }
            // A read-ahead begun beside the read may still be failing its tries.
            for _ in 0..<300 where allocated(h) != 0 { try await Task.sleep(for: .milliseconds(50)) }
            #expect(allocated(h) == 0, "\(allocated(h)) bytes left allocated by fetches that stored nothing")
        }
        try await withEngine(store: FaultInjectingObjectStore(wrapping: base)) { h in
            let got = try await h.read("big.bin")
            #expect(got == content)
            #expect(allocated(h) >= 100_000)
        }
    }

    @Test("a file changed on the server is read as the new version, never mixed with the old")
    func changedRemotely() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        let old = [UInt8](repeating: 1, count: 20_000), new = [UInt8](repeating: 2, count: 20_000)
        _ = try await base.upload(.bytes(ByteBuffer(bytes: old)), size: 20_000, to: ns, try StoragePath("f"))
        try await withEngine(store: base) { h in
            let ino = try await h.resolve("f")
            let handle = try await h.fs.open(ino, write: false, truncate: false).handle
            let first = try await h.fs.read(ino, handle: handle, offset: 0, size: 4096)
            #expect(first.flatMap { $0.file.read(at: $0.offset, length: $0.length) } == Array(old[0..<4096]))
            _ = try await base.upload(.bytes(ByteBuffer(bytes: new)), size: 20_000, to: ns, try StoragePath("f"))
            let later = try await h.fs.read(ino, handle: handle, offset: 12_288, size: 8192)
            let got = later.flatMap { $0.file.read(at: $0.offset, length: $0.length) }
            #expect(Set(got).count == 1, "one version only")
            await h.fs.release(ino, handle: handle)
        }
    }

    @Test("tags and metadata as xattrs, on a stored file")
    func xattrStored() async throws {
        try await withEngine { h in
            try await h.write("x.jpg", "img")
            await h.fs.sync()
            try await h.setXattr("x.jpg", "user.tags", "summer, beach")
            try await h.setXattr("x.jpg", "user.camera", "fuji")
            try await h.setXattr("x.jpg", "user.stow.public", "true")
            #expect(try await h.xattr("x.jpg", "user.tags") == "summer,beach")
            #expect(try await h.xattr("x.jpg", "user.stow.content-type") == "image/jpeg")
            let r = try await h.storedRecord("x.jpg")
            #expect(r.tags == ["summer", "beach"])
            #expect(r.metadata == ["camera": "fuji"])
            #expect(r.isPublic)
            let names = try await h.fs.listxattr(try await h.resolve("x.jpg"))
            // Only what was set is listed (cp -a copies what is listed); the virtual names are read by name.
            #expect(names == ["user.tags", "user.camera"])
            #expect(try await h.xattr("x.jpg", "user.stow.id") == r.id)
            #expect(try await h.xattr("x.jpg", "user.stow.url").hasPrefix("memory://cdn/test/x.jpg"))
            try await h.fs.removexattr(try await h.resolve("x.jpg"), name: "user.camera")
            #expect(try await h.storedRecord("x.jpg").metadata == [:])
        }
    }

    @Test("xattrs set on a file still owed apply with its upload")
    func xattrPending() async throws {
        let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        try await withEngine(store: faulty) { h in
            faulty.isOffline = true
            try await h.write("p.txt", "text")
            try await h.setXattr("p.txt", "user.tags", "a,b")
            try await h.setXattr("p.txt", "user.owner", "me")
            #expect(try await h.xattr("p.txt", "user.tags") == "a,b")
            #expect(try await h.xattr("p.txt", "user.stow.status") == "pending")
            faulty.isOffline = false
            await h.fs.sync()
            let r = try await h.storedRecord("p.txt")
            #expect(r.tags == ["a", "b"])
            #expect(r.metadata == ["owner": "me"])
            #expect(try await h.xattr("p.txt", "user.stow.status") == "stored")
        }
    }

    @Test("xattrs set while the changes made during an upload are sent after it are kept too")
    func xattrWhilePatching() async throws {
        let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        try await withEngine(store: faulty) { h in
            // A slow upload: the first change arrives while it runs, and is kept for after it. A slow
            // update: the next changes arrive while that one is on its way. They used to be written
            // into the finished upload's declaration, and lost (seen in a mount test under load).
            faulty.setLatency(.milliseconds(300), for: .startUpload)
            faulty.setLatency(.milliseconds(400), for: .update)
            try await h.write("q.txt", "text")
            while faulty.calls(of: .startUpload) == 0 { try await Task.sleep(for: .milliseconds(2)) }
            try await h.setXattr("q.txt", "user.first", "1")
            while faulty.calls(of: .update) == 0 { try await Task.sleep(for: .milliseconds(2)) }
            try await h.setXattr("q.txt", "user.second", "2")
            try await h.setXattr("q.txt", "user.tags", "t")
            await h.fs.sync()
            let r = try await h.storedRecord("q.txt")
            #expect(r.metadata == ["first": "1", "second": "2"])
            #expect(r.tags == ["t"])
        }
    }

    @Test("xattr refusals: read-only names, other namespaces, create/replace flags")
    func xattrRules() async throws {
        try await withEngine { h in
            try await h.write("r", "r")
            let ino = try await h.resolve("r")
            await expectFS(.notPermitted) { try await h.setXattr("r", "user.stow.id", "x") }
            await expectFS(.notSupported) { try await h.fs.setxattr(ino, name: "trusted.x", value: [1], flag: .any) }
            await expectFS(.notSupported) { _ = try await h.fs.getxattr(ino, name: "security.selinux") }
            await expectFS(.noAttribute) { _ = try await h.fs.getxattr(ino, name: "user.none") }
            try await h.fs.setxattr(ino, name: "user.k", value: Array("1".utf8), flag: .create)
            await expectFS(.exists) { try await h.fs.setxattr(ino, name: "user.k", value: Array("2".utf8), flag: .create) }
            await expectFS(.noAttribute) { try await h.fs.setxattr(ino, name: "user.j", value: Array("2".utf8), flag: .replace) }
        }
    }

    @Test("read-ahead grows while reads stay sequential and stops on a jump")
    func readAheadWindow() {
        var ra = ReadAhead(maxWindow: 8)
        #expect(ra.read(offset: 0, length: 100) == 1)
        #expect(ra.read(offset: 100, length: 100) == 2)
        #expect(ra.read(offset: 200, length: 100) == 4)
        #expect(ra.read(offset: 300, length: 100) == 8)
        #expect(ra.read(offset: 400, length: 100) == 8)
        #expect(ra.read(offset: 10_000, length: 100) == 0)
        #expect(ra.read(offset: 10_100, length: 100) == 1)
    }
}
