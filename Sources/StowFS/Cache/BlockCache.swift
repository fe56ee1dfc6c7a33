import Foundation
import CStowSystem
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Blocks of remote files on local disk, with a size bound and least-recently-used eviction.
///
/// One sparse file per content version (`blocks/<etag>`): block `i` sits at `i × blockSize`, so a
/// run of cached blocks is one contiguous range to read. Keying by ETag means a changed remote
/// file never mixes with the old one. Eviction punches holes; a file with no block left is removed.
///
/// A clean stop (`persist`) syncs every block file and then writes an index of the blocks each
/// holds; the next start reads that index and removes it, so the cache outlives a remount (and
/// serves an offline mount). Without an index — the first mount, or one after a crash, whose
/// blocks may not all have reached the disk — the cache starts empty.
public final class BlockCache: Sendable {
    struct Key: Hashable {
        var etag: String
        var index: Int64
    }

    struct FileState {
        var file: CacheFile
        var present: Set<Int64> = []
    }

    struct State {
        var files: [String: FileState] = [:]
        var lastUse: [Key: UInt64] = [:]
        /// Blocks a segment handed out still refers to, with how many: not evicted meanwhile.
        var pinned: [Key: Int] = [:]
        var tick: UInt64 = 0
        var bytes: Int64 = 0
        var hits: UInt64 = 0
        var misses: UInt64 = 0
        /// `persist` ran: the index is written, and nothing may change what it describes.
        var closed = false
    }

    public let directory: String
    public let blockSize: Int
    public let capacity: Int64
    private let state = Mutex(State())

    public init(directory: String, blockSize: Int, capacity: Int64) throws {
        self.directory = directory
        self.blockSize = blockSize
        self.capacity = max(capacity, Int64(blockSize) * 16)
        let kept = Self.readIndex(directory: directory, blockSize: blockSize)
        if kept == nil { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        guard let kept else { return }
        // The index is for this start only: `claimIndex` removes it once the mount is up (a start
        // that fails before keeps it for the next; a crash after leaves none).
        var s = State()
        for entry in kept.files where !entry.blocks.isEmpty {
            // The file must still be there (not made anew) and hold its last block's start.
            let path = filePath(entry.etag)
            guard access(path, F_OK) == 0, let file = try? CacheFile(path: path), let last = entry.blocks.max(),
                file.size > last * Int64(blockSize)
            else { continue }
            s.files[entry.etag] = FileState(file: file, present: Set(entry.blocks))
            s.bytes += entry.bytes
            for i in entry.blocks {
                s.tick += 1
                s.lastUse[Key(etag: entry.etag, index: i)] = s.tick
            }
        }
        // The index stays (until `claimIndex`); everything else the index does not name goes.
        let known = Set(s.files.values.map { ($0.file.path as NSString).lastPathComponent } + [(Self.indexPath(directory) as NSString).lastPathComponent])
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where !known.contains(name) {
            unlink(directory + "/" + name)
        }
        let restored = s
        state.withLock { $0 = restored }
        if restored.bytes > self.capacity { evictIfNeeded() }
    }

    /// The mount is up and will use (and change) the cache: the index read at start goes, so that
    /// a crash from now on leaves none.
    public func claimIndex() {
        unlink(Self.indexPath(directory))
    }

    struct Index: Codable {
        struct Entry: Codable {
            var etag: String
            var blocks: [Int64]
            var bytes: Int64
        }
        var blockSize: Int
        var files: [Entry]
    }

    static func indexPath(_ directory: String) -> String { directory + "/.index.json" }

    static func readIndex(directory: String, blockSize: Int) -> Index? {
        guard let data = FileManager.default.contents(atPath: indexPath(directory)),
            let index = try? JSONDecoder().decode(Index.self, from: data), index.blockSize == blockSize
        else { return nil }
        return index
    }

    /// For a clean stop: syncs every block file, then writes the index of what they hold (synced,
    /// then renamed into place), so that the next start keeps them. Nothing may use the cache after.
    public func persist() throws(FSError) {
        let (files, index) = state.withLock { s in
            // Late fetches (a read-ahead still running) and evictions change nothing from now on.
            s.closed = true
            let entries = s.files.map { etag, f in
                Index.Entry(
                    etag: etag, blocks: f.present.sorted(),
                    bytes: f.present.reduce(0) { sum, i in sum + blockLength(i, fileSize: f.file.size) })
            }
            return (s.files.values.map(\.file), Index(blockSize: blockSize, files: entries))
        }
        // One syncfs for the cache's filesystem rather than an fsync per file (a tar of 2,000
        // small files leaves 2,000 of them); each file's fsync where that fails.
        let dir = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let synced = dir >= 0 && CStowSystem_syncfs(dir) == 0
        if dir >= 0 { close(dir) }
        if !synced { for f in files { try f.sync() } }
        try CacheFile.replace(Self.indexPath(directory), with: (try? JSONEncoder().encode(index)) ?? Data())
    }

    /// Takes a whole local copy of `etag`'s content (a file just uploaded: the server has exactly
    /// these bytes) as its cached blocks: the file is moved into the cache, not copied. False when
    /// the cache already holds some of that version, or the copy is too large to be worth keeping.
    public func adopt(etag: String, file: CacheFile, size: Int64) -> Bool {
        guard size > 0, size <= capacity / 2 else { return false }
        let target = filePath(etag)
        let adopted = state.withLock { s -> Bool in
            guard !s.closed, s.files[etag] == nil, rename(file.path, target) == 0 else { return false }
            guard let moved = try? CacheFile(path: target) else {
                // Put back: the caller still owns the file at its old path.
                _ = rename(target, file.path)
                return false
            }
            let count = (size + Int64(blockSize) - 1) / Int64(blockSize)
            var f = FileState(file: moved)
            for i in 0..<count {
                f.present.insert(i)
                s.tick += 1
                s.lastUse[Key(etag: etag, index: i)] = s.tick
            }
            s.files[etag] = f
            s.bytes += size
            return true
        }
        guard adopted else { return false }
        if state.withLock({ $0.bytes > capacity }) { evictIfNeeded() }
        return true
    }

    private func filePath(_ etag: String) -> String {
        directory + "/" + String(etag.map { $0.isLetter || $0.isNumber || $0 == "-" ? $0 : "_" })
    }

    /// The blocks `range` covers.
    public func blocks(covering range: Range<Int64>) -> Range<Int64> {
        guard !range.isEmpty else { return 0..<0 }
        return (range.lowerBound / Int64(blockSize))..<((range.upperBound - 1) / Int64(blockSize) + 1)
    }

    /// The bytes of `range` if every block of it is cached (one segment: the blocks are contiguous).
    public func segment(etag: String, range: Range<Int64>) -> FileSegment? {
        state.withLock { s in
            guard !range.isEmpty else { return nil }
            guard let f = s.files[etag] else {
                s.misses += 1
                return nil
            }
            let needed = blocks(covering: range)
            for i in needed where !f.present.contains(i) {
                s.misses += 1
                return nil
            }
            s.tick += 1
            for i in needed {
                s.lastUse[Key(etag: etag, index: i)] = s.tick
                s.pinned[Key(etag: etag, index: i), default: 0] += 1
            }
            s.hits += 1
            return FileSegment(file: f.file, offset: range.lowerBound, length: Int(range.count), pin: BlockPin(cache: self, etag: etag, blocks: needed))
        }
    }

    /// The segment holding these blocks is gone: they may be evicted again.
    func unpin(etag: String, blocks: Range<Int64>) {
        let over = state.withLock { s -> Bool in
            for i in blocks {
                let key = Key(etag: etag, index: i)
                if let n = s.pinned[key], n > 1 { s.pinned[key] = n - 1 } else { s.pinned[key] = nil }
            }
            return s.bytes > capacity
        }
        if over { evictIfNeeded() }
    }

    /// Blocks pinned right now (for tests).
    public var pinnedBlocks: Int { state.withLock { $0.pinned.count } }

    /// The blocks of `blocks` that are not cached.
    public func missing(etag: String, blocks: Range<Int64>) -> [Int64] {
        state.withLock { s in
            guard let f = s.files[etag] else { return Array(blocks) }
            return blocks.filter { !f.present.contains($0) }
        }
    }

    /// The file that holds the blocks of `etag` (created on first use): a fetch writes into it at
    /// `block × blockSize`, then calls `didStore` for each whole block.
    public func file(etag: String) throws(FSError) -> CacheFile {
        try state.withLock { (s: inout State) throws(FSError) -> CacheFile in
            if let f = s.files[etag] { return f.file }
            let f = try CacheFile(path: filePath(etag))
            s.files[etag] = FileState(file: f)
            return f
        }
    }

    /// Block `block` of `etag` (`length` bytes, less than a block only at the end of the file) is
    /// written into `file`. Ignored when that version was dropped meanwhile.
    public func didStore(etag: String, file: CacheFile, block: Int64, length: Int) {
        let over = state.withLock { s -> Bool in
            guard !s.closed, s.files[etag]?.file === file else { return false }
            s.tick += 1
            if s.files[etag]!.present.insert(block).inserted { s.bytes += Int64(length) }
            s.lastUse[Key(etag: etag, index: block)] = s.tick
            return s.bytes > capacity
        }
        if over { evictIfNeeded() }
    }

    /// Drops the least recently used blocks until the cache is at 90% of its capacity.
    func evictIfNeeded() {
        state.withLock { s in
            guard !s.closed, s.bytes > capacity else { return }
            let target = capacity * 9 / 10
            for (key, _) in s.lastUse.sorted(by: { $0.value < $1.value }) {
                guard s.bytes > target else { break }
                // A reply still splices from it: evicted once that is sent (see `unpin`).
                if s.pinned[key] != nil { continue }
                guard var f = s.files[key.etag], f.present.remove(key.index) != nil else {
                    s.lastUse[key] = nil
                    continue
                }
                f.file.punchHole(offset: key.index * Int64(blockSize), length: Int64(blockSize))
                s.bytes -= blockLength(key.index, fileSize: f.file.size)
                s.lastUse[key] = nil
                if f.present.isEmpty {
                    unlink(f.file.path)
                    s.files[key.etag] = nil
                } else {
                    s.files[key.etag] = f
                }
            }
        }
    }

    /// The bytes block `index` holds: a whole block but the last one, which ends where the file does.
    func blockLength(_ index: Int64, fileSize: Int64) -> Int64 {
        min(Int64(blockSize), max(0, fileSize - index * Int64(blockSize)))
    }

    /// Forgets a content version (its file changed or was deleted).
    public func drop(etag: String) {
        state.withLock { s in
            guard !s.closed, let f = s.files.removeValue(forKey: etag) else { return }
            let size = f.file.size
            for i in f.present {
                s.lastUse[Key(etag: etag, index: i)] = nil
                s.bytes -= blockLength(i, fileSize: size)
            }
            unlink(f.file.path)
        }
    }

    public struct Statistics: Sendable, Codable, Equatable {
        public var bytes: Int64
        public var capacity: Int64
        public var hits: UInt64
        public var misses: UInt64
    }

    public var statistics: Statistics {
        state.withLock { Statistics(bytes: max(0, $0.bytes), capacity: capacity, hits: $0.hits, misses: $0.misses) }
    }
}

/// A hold on blocks of the cache, released when the last copy of it goes (ARC).
public final class BlockPin: Sendable {
    let cache: BlockCache
    let etag: String
    let blocks: Range<Int64>

    init(cache: BlockCache, etag: String, blocks: Range<Int64>) {
        self.cache = cache
        self.etag = etag
        self.blocks = blocks
    }

    deinit { cache.unpin(etag: etag, blocks: blocks) }
}
