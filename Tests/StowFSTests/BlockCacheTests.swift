import Foundation
@testable import StowFS
import Testing

/// Eviction and the segments handed to FuseKit: a reply splices bytes from the cache file after
/// the engine found them cached, so eviction must not punch them out in between.
@Suite("block cache: pinned segments")
struct BlockCacheTests {
    static let blockSize = 4096

    static func temporaryFolder() -> String { FileManager.default.temporaryDirectory.path + "/stow-blocks-\(UUID().uuidString.prefix(8))" }

    /// The smallest cache there is by default: 16 blocks.
    func withCache(capacity: Int64 = 0, _ body: (BlockCache) throws -> Void) throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try body(try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: capacity))
    }

    /// This process's descriptors open on files under `directory` (other tests run beside).
    static func descriptors(under directory: String) -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter { ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) ?? "").hasPrefix(directory + "/") }.count
    }

    static func store(_ cache: BlockCache, etag: String, block: Int64) throws {
        let file = try cache.file(etag: etag)
        try file.write([UInt8](repeating: UInt8(truncatingIfNeeded: block &+ 1), count: blockSize), at: block * Int64(blockSize))
        cache.didStore(etag: etag, file: file, block: block, length: blockSize)
    }

    @Test("a segment's blocks survive eviction while the segment lives, and are evicted after")
    func pinnedSurvivesEviction() throws {
        try withCache { cache in
            try Self.store(cache, etag: "a", block: 0)
            var segment: FileSegment? = try #require(cache.segment(etag: "a", range: 0..<Int64(Self.blockSize)))
            #expect(cache.pinnedBlocks == 1)
            // 40 more blocks through a 16-block cache: block 0 is the least recently used.
            for b in 1...40 { try Self.store(cache, etag: "b", block: Int64(b)) }
            let bytes = segment!.file.read(at: segment!.offset, length: segment!.length)
            #expect(bytes.count == Self.blockSize && bytes.allSatisfy { $0 == 1 }, "the pinned block was punched out (\(bytes.filter { $0 != 1 }.count) bytes wrong)")
            #expect(cache.missing(etag: "a", blocks: 0..<1).isEmpty)
            segment = nil
            #expect(cache.pinnedBlocks == 0)
            for b in 41...60 { try Self.store(cache, etag: "b", block: Int64(b)) }
            #expect(cache.missing(etag: "a", blocks: 0..<1) == [0])
        }
    }

    @Test("many readers and writers at once: every byte read from a segment is the block's")
    func stress() async throws {
        let dir = FileManager.default.temporaryDirectory.path + "/stow-blocks-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let cache = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 0)
        let wrong = try await withThrowingTaskGroup(of: Int.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    var rng = SystemRandomNumberGenerator()
                    var bad = 0
                    for _ in 0..<2000 {
                        let block = Int64.random(in: 0..<64, using: &rng)
                        // Each block has one fetcher (the engine's InflightBlocks): worker w fetches blocks ≡ w mod 4.
                        let mine = Int64(worker) + 4 * Int64.random(in: 0..<16, using: &rng)
                        if !cache.missing(etag: "f", blocks: mine..<(mine + 1)).isEmpty { try Self.store(cache, etag: "f", block: mine) }
                        guard let s = cache.segment(etag: "f", range: (block * Int64(Self.blockSize))..<((block + 1) * Int64(Self.blockSize))) else { continue }
                        if worker % 2 == 0 { await Task.yield() }
                        if s.file.read(at: s.offset, length: s.length) != [UInt8](repeating: UInt8(truncatingIfNeeded: block &+ 1), count: Self.blockSize) { bad += 1 }
                    }
                    return bad
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(wrong == 0)
        #expect(cache.pinnedBlocks == 0)
    }

    @Test("kept by persist and taken by the next start; a late fetch or eviction after persist changes nothing; a file gone or cut short is not trusted")
    func keptAcrossStarts() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let cache = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 0)
            for b in 0..<4 { try Self.store(cache, etag: "kept", block: Int64(b)) }
            try Self.store(cache, etag: "cut", block: 3)
            try Self.store(cache, etag: "gone", block: 0)
            try cache.persist()
            // After persist: nothing the index describes may change (it would serve holes as data).
            for b in 0..<40 { try Self.store(cache, etag: "late", block: Int64(b)) }
            #expect(cache.segment(etag: "kept", range: 0..<Int64(4 * Self.blockSize)) != nil)
        }
        truncate(dir + "/cut", off_t(Self.blockSize))
        unlink(dir + "/gone")
        let again = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 0)
        #expect(FileManager.default.fileExists(atPath: dir + "/.index.json"), "kept until the mount is up")
        again.claimIndex()
        #expect(!FileManager.default.fileExists(atPath: dir + "/.index.json"), "the index is for one start")
        let segment = try #require(again.segment(etag: "kept", range: 0..<Int64(4 * Self.blockSize)))
        #expect(segment.length == 4 * Self.blockSize)
        #expect(again.segment(etag: "cut", range: Int64(3 * Self.blockSize)..<Int64(4 * Self.blockSize)) == nil)
        #expect(again.segment(etag: "gone", range: 0..<1) == nil)
        #expect(!FileManager.default.fileExists(atPath: dir + "/gone"), "a file gone is not made again")
        #expect(again.segment(etag: "late", range: 0..<1) == nil)
        #expect(again.statistics.bytes == Int64(4 * Self.blockSize))
        // Without an index (a crash after this start), the next start keeps nothing.
        let third = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 0)
        #expect(third.segment(etag: "kept", range: 0..<1) == nil)
    }

    @Test("thousands of cached files keep at most openLimit descriptors open, and every block stays readable (one per file once ran a mount out of descriptors: it hung at 20,000 files written)")
    func boundedDescriptors() throws {
        try withCache(capacity: 1 << 30) { cache in
            let dir = cache.directory
            let count = 1500
            for i in 0..<count {
                // Half adopted (a file just uploaded), half fetched.
                if i % 2 == 0 {
                    let f = try CacheFile(path: dir + "/../adopt-\(UUID().uuidString.prefix(6))", truncate: true)
                    try f.write([UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 100), at: 0)
                    #expect(cache.adopt(etag: "f\(i)", file: f, size: 100) == .packed)
                } else {
                    let file = try cache.file(etag: "f\(i)")
                    try file.write([UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 100), at: 0)
                    cache.didStore(etag: "f\(i)", file: file, block: 0, length: 100)
                }
            }
            let open = Self.descriptors(under: dir)
            // The open block files, and the pack the adopted ones share.
            #expect(cache.openFiles <= BlockCache.openLimit && open <= BlockCache.openLimit + 1 && open < count / 10, "\(open) descriptors open in the cache")
            for i in stride(from: 0, to: count, by: 7) {
                let segment = try #require(cache.segment(etag: "f\(i)", range: 0..<100), "file \(i)")
                #expect(segment.file.read(at: segment.offset, length: 100) == [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 100), "file \(i)")
            }
            #expect(cache.statistics.bytes == Int64(count * 100))
            // A fetch into a version dropped meanwhile (and made again) does not count for the new file.
            let old = try cache.file(etag: "f1")
            cache.drop(etag: "f1")
            _ = try cache.file(etag: "f1")
            cache.didStore(etag: "f1", file: old, block: 0, length: 100)
            #expect(cache.missing(etag: "f1", blocks: 0..<1) == [0])
        }
    }

    /// A copy of `count` bytes of `byte`, as the engine hands one over after its upload.
    /// `count` small files of 4,000 bytes adopted (packed) as `prefix`0, `prefix`1, …, the i-th
    /// holding bytes of value i + 1.
    static func adoptPacked(_ cache: BlockCache, _ prefix: String, count: Int) throws {
        for i in 0..<count {
            #expect(cache.adopt(etag: "\(prefix)\(i)", file: try copy(cache.directory, UInt8(i + 1), 4000), size: 4000) == .packed)
        }
    }

    static func copy(_ dir: String, _ byte: UInt8, _ count: Int) throws -> CacheFile {
        let f = try CacheFile(path: dir + "/../copy-\(UUID().uuidString.prefix(8))", truncate: true)
        try f.write([UInt8](repeating: byte, count: count), at: 0)
        return f
    }

    @Test("small copies are packed into one file, each read back at its own slot; the copy stays the caller's; freed slots are used again by files of their size; an empty pack is cut to nothing")
    func packed() throws {
        try withCache(capacity: 1 << 30) { cache in
            let dir = cache.directory
            var copies: [CacheFile] = []
            for (i, size) in [1, 100, 4096, 4097 - 1, 3000].enumerated() {
                let f = try Self.copy(dir, UInt8(i + 1), size)
                #expect(cache.adopt(etag: "p\(i)", file: f, size: Int64(size)) == .packed)
                #expect(FileManager.default.fileExists(atPath: f.path), "the copy is still the caller's")
                copies.append(f)
            }
            for (i, size) in [1, 100, 4096, 4096, 3000].enumerated() {
                let s = try #require(cache.segment(etag: "p\(i)", range: 0..<Int64(size)))
                #expect(s.offset % 4096 == 0 && s.length == size)
                #expect(s.file.read(at: s.offset, length: size) == [UInt8](repeating: UInt8(i + 1), count: size), "p\(i)")
                // Never past the file's own bytes into the rest of its slot.
                #expect(cache.segment(etag: "p\(i)", range: 10..<4096)?.length == max(0, size - 10))
            }
            #expect(cache.statistics.bytes == 1 + 100 + 4096 + 4096 + 3000)
            let pack = dir + "/.pack"
            let slotOfP1 = try #require(cache.segment(etag: "p1", range: 0..<1)).offset
            cache.drop(etag: "p1")
            #expect(cache.segment(etag: "p1", range: 0..<1) == nil)
            #expect(cache.statistics.bytes == 1 + 4096 + 4096 + 3000)
            // The next file of one page takes p1's slot; the others still read their own bytes.
            #expect(cache.adopt(etag: "q", file: try Self.copy(dir, 9, 50), size: 50) == .packed)
            do {
                let q = try #require(cache.segment(etag: "q", range: 0..<50))
                #expect(q.offset == slotOfP1 && q.file.read(at: q.offset, length: 50) == [UInt8](repeating: 9, count: 50))
                let p0 = try #require(cache.segment(etag: "p0", range: 0..<1))
                #expect(p0.file.read(at: p0.offset, length: 1) == [1])
            }
            // A version already held is not packed twice.
            #expect(cache.adopt(etag: "q", file: try Self.copy(dir, 8, 50), size: 50) == .refused)
            for etag in ["p0", "p2", "p3", "p4", "q"] { cache.drop(etag: etag) }
            #expect(cache.statistics.bytes == 0)
            #expect(BlockCache.stat(pack)?.size == 0, "an empty pack is cut to nothing")
        }
    }

    @Test("packed files are evicted like blocks: the cache stays within its capacity, their slots are used again, and the files left read back their own bytes")
    func packedEvicted() throws {
        try withCache { cache in
            let dir = cache.directory
            try Self.adoptPacked(cache, "e", count: 40)
            let bytes = cache.statistics.bytes
            #expect(bytes > 0 && bytes <= Int64(16 * Self.blockSize), "\(bytes)")
            let left = (0..<40).filter { cache.segment(etag: "e\($0)", range: 0..<1) != nil }
            #expect(left.count == Int(bytes / 4000) && left.contains(39))
            for i in left {
                let s = try #require(cache.segment(etag: "e\(i)", range: 0..<4000))
                #expect(s.file.read(at: s.offset, length: 4000) == [UInt8](repeating: UInt8(i + 1), count: 4000), "e\(i)")
            }
            // Slots were used again: the pack is no longer than the files it held at most at once.
            let packSize = try #require(BlockCache.stat(dir + "/.pack")?.size)
            #expect(packSize <= Int64(17 * 4096), "\(packSize)")
        }
    }

    @Test("packed files and the blocks of files of their own are evicted together, least recently used first: a packed file read since stays, those not read go before older blocks")
    func packedAndBlocksByLastUse() throws {
        try withCache { cache in
            try Self.adoptPacked(cache, "p", count: 4)
            for b in 0..<4 { try Self.store(cache, etag: "big", block: Int64(b)) }
            #expect(cache.segment(etag: "p0", range: 0..<4000) != nil)
            // 16,000 + 16,384 bytes, then 10 blocks more: the ninth passes the 65,536 of the
            // cache, which drops the oldest until it holds 90% — p1, p2 and p3, in that order.
            for b in 0..<10 { try Self.store(cache, etag: "more", block: Int64(b)) }
            #expect(cache.missing(etag: "p1", blocks: 0..<1) == [0])
            #expect(cache.missing(etag: "p2", blocks: 0..<1) == [0])
            #expect(cache.missing(etag: "p3", blocks: 0..<1) == [0])
            #expect(cache.missing(etag: "big", blocks: 0..<4).isEmpty)
            #expect(cache.missing(etag: "more", blocks: 0..<10).isEmpty)
            let p0 = try #require(cache.segment(etag: "p0", range: 0..<4000))
            #expect(p0.file.read(at: p0.offset, length: 4000) == [UInt8](repeating: 1, count: 4000))
        }
    }

    @Test("a packed version forgotten while a read still splices from it keeps its slot until the read is done: a new file does not take it meanwhile")
    func packedSlotWaitsForItsReader() throws {
        try withCache(capacity: 1 << 30) { cache in
            let dir = cache.directory
            #expect(cache.adopt(etag: "a", file: try Self.copy(dir, 1, 100), size: 100) == .packed)
            #expect(cache.adopt(etag: "b", file: try Self.copy(dir, 2, 100), size: 100) == .packed)
            var reading: FileSegment? = try #require(cache.segment(etag: "a", range: 0..<100))
            cache.drop(etag: "a")
            #expect(cache.adopt(etag: "c", file: try Self.copy(dir, 3, 100), size: 100) == .packed)
            let c = try #require(cache.segment(etag: "c", range: 0..<100))
            #expect(c.offset != reading!.offset)
            #expect(reading!.file.read(at: reading!.offset, length: 100) == [UInt8](repeating: 1, count: 100), "the reader still reads a's bytes")
            let slotOfA = reading!.offset
            reading = nil
            // Now its slot is free again.
            #expect(cache.adopt(etag: "d", file: try Self.copy(dir, 4, 100), size: 100) == .packed)
            #expect(try #require(cache.segment(etag: "d", range: 0..<100)).offset == slotOfA)
            #expect(cache.pinnedBlocks == 1, "only c's reader holds a pin; d's segment went")
            _ = c
        }
    }

    @Test("a damaged index (offsets, block numbers and sizes at the ends of Int64, negative, or past their file) starts a cache without them: no trap, the sound entries kept")
    func damagedIndex() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: dir + "/.pack", contents: Data(repeating: 5, count: 4096))
        for name in ["ok", "far", "huge", "negative", "twice"] {
            FileManager.default.createFile(atPath: dir + "/" + name, contents: Data(repeating: 6, count: 10))
        }
        let json = """
            {"blockSize":\(Self.blockSize),"files":[
            {"etag":"slot","blocks":[0],"bytes":100,"pack":[0,1]},
            {"etag":"slot","blocks":[0],"bytes":200,"pack":[0,1]},
            {"etag":"slotFar","blocks":[0],"bytes":4096,"pack":[9223372036854771712,1]},
            {"etag":"slotBig","blocks":[0],"bytes":9223372036854775807,"pack":[0,1]},
            {"etag":"ok","blocks":[0],"bytes":10},
            {"etag":"far","blocks":[4611686018427387904],"bytes":10},
            {"etag":"huge","blocks":[0],"bytes":9223372036854775807},
            {"etag":"negative","blocks":[-5],"bytes":10},
            {"etag":"twice","blocks":[0],"bytes":10},
            {"etag":"twice","blocks":[0],"bytes":9223372036854775807}
            ]}
            """
        FileManager.default.createFile(atPath: dir + "/.index.json", contents: Data(json.utf8))
        let cache = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 1 << 20)
        #expect(cache.statistics.bytes == 100 + 10 + 10)
        let slot = try #require(cache.segment(etag: "slot", range: 0..<100))
        #expect(slot.file.read(at: slot.offset, length: 100) == [UInt8](repeating: 5, count: 100))
        #expect(cache.segment(etag: "ok", range: 0..<10) != nil)
        #expect(cache.segment(etag: "twice", range: 0..<10) != nil)
        for etag in ["slotFar", "slotBig", "far", "huge", "negative"] { #expect(cache.segment(etag: etag, range: 0..<1) == nil, "\(etag)") }
    }

    @Test("packed files are kept by persist and read back by the next start; dropped ones are not; a pack cut short is not trusted")
    func packedAcrossStarts() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let cache = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 0)
            for i in 0..<3 { #expect(cache.adopt(etag: "k\(i)", file: try Self.copy(dir, UInt8(10 + i), 1000 + i), size: Int64(1000 + i)) == .packed) }
            try Self.store(cache, etag: "blocks", block: 0)
            try cache.persist()
        }
        do {
            let again = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 0)
            again.claimIndex()
            for i in 0..<3 {
                let s = try #require(again.segment(etag: "k\(i)", range: 0..<Int64(1000 + i)), "k\(i)")
                #expect(s.file.read(at: s.offset, length: 1000 + i) == [UInt8](repeating: UInt8(10 + i), count: 1000 + i))
            }
            #expect(again.segment(etag: "blocks", range: 0..<1) != nil)
            #expect(again.statistics.bytes == 1000 + 1001 + 1002 + Int64(Self.blockSize))
            // A new file goes after the kept ones, not over them.
            #expect(again.adopt(etag: "n", file: try Self.copy(dir, 99, 10), size: 10) == .packed)
            let k2 = try #require(again.segment(etag: "k2", range: 0..<1002))
            #expect(k2.file.read(at: k2.offset, length: 1002) == [UInt8](repeating: 12, count: 1002))
            again.drop(etag: "n")
            try again.persist()
        }
        // The pack cut short: the slots past its end are not trusted, the others are.
        truncate(dir + "/.pack", 4096 + 10)
        let third = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 0)
        let kept = (0..<3).filter { third.segment(etag: "k\($0)", range: 0..<1) != nil }
        #expect(kept.count == 1, "\(kept)")
        #expect(third.segment(etag: "n", range: 0..<1) == nil, "a version dropped before the unmount is not kept")
    }

    @Test("an adopted copy counts its own bytes: dropping it, or evicting its last short block, gives back exactly those")
    func adoptedBytes() throws {
        try withCache { cache in
            let dir = cache.directory
            let file = try CacheFile(path: dir + "/../adopt-\(UUID().uuidString.prefix(6))", truncate: true)
            try file.write([UInt8](repeating: 7, count: Self.blockSize + 10), at: 0)
            #expect(cache.adopt(etag: "a", file: file, size: Int64(Self.blockSize + 10)) == .moved)
            #expect(cache.statistics.bytes == Int64(Self.blockSize + 10))
            #expect(cache.segment(etag: "a", range: 0..<Int64(Self.blockSize + 10))?.length == Self.blockSize + 10)
            cache.drop(etag: "a")
            #expect(cache.statistics.bytes == 0)
            // Eviction of short last blocks: 40 files of 1 block + 10 bytes in a 16-block cache.
            for i in 0..<40 {
                let f = try CacheFile(path: dir + "/../adopt-\(UUID().uuidString.prefix(6))", truncate: true)
                try f.write([UInt8](repeating: 1, count: Self.blockSize + 10), at: 0)
                _ = cache.adopt(etag: "e\(i)", file: f, size: Int64(Self.blockSize + 10))
            }
            let bytes = cache.statistics.bytes
            #expect(bytes > 0 && bytes <= Int64(16 * Self.blockSize), "\(bytes)")
        }
    }

    @Test("BlockSet holds what a Set of the same inserts and removes holds, in any order (the run from block 0 split and joined again)")
    func blockSetAgainstSet() {
        var rng = SystemRandomNumberGenerator()
        for round in 0..<200 {
            var model = Set<Int64>()
            var set = BlockSet()
            let span = Int64(1 + round % 40)
            for _ in 0..<300 {
                let i = Int64.random(in: -1...span, using: &rng)
                if Bool.random(using: &rng) {
                    #expect(set.insert(i).inserted == (i >= 0 && model.insert(i).inserted))
                } else {
                    #expect(set.remove(i) == model.remove(i))
                }
                #expect(set.count == model.count)
                #expect(set.isEmpty == model.isEmpty)
            }
            #expect(Set(set) == model)
            #expect(Array(set).count == model.count)
            for i in -1...span { #expect(set.contains(i) == model.contains(i)) }
        }
        // A whole copy adopted in order is one run and nothing else.
        let whole = BlockSet(0..<1000)
        #expect(whole.prefix == 1000)
        #expect(whole.count == 1000)
    }

    @Test("a start that evicts (a smaller cache) and then fails leaves no index naming the punched slots")
    func evictionAtStartThenFailedStart() throws {
        let dir = Self.temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let cache = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 1 << 20)
            try Self.adoptPacked(cache, "k", count: 20)
            try cache.persist()
        }
        // Evicts at start to fit; the mount fails before `claimIndex`.
        _ = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 0)
        let again = try BlockCache(directory: dir, blockSize: Self.blockSize, capacity: 1 << 20)
        let wrong = (0..<20).filter { i in
            guard let s = again.segment(etag: "k\(i)", range: 0..<4000) else { return false }
            return s.file.read(at: s.offset, length: 4000) != [UInt8](repeating: UInt8(i + 1), count: 4000)
        }
        #expect(wrong.isEmpty, "served from the cache though punched out (zeros): \(wrong)")
    }
}
