import Foundation
import CStowSystem
import StorageProtocol
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
/// The cache may hold many thousands of files (every small file written is adopted), so it keeps
/// their paths, not their descriptors: at most `openLimit` are open, the least recently used
/// closed first. (It once kept every one open: a folder of 20,000 files written through a mount
/// used up the process's descriptors, and the mount hung.) A segment or a fetch holds its own
/// `CacheFile`, which stays open while it is used.
///
/// A small file adopted after its upload (`packedUpTo` bytes or less, and one block) is copied into one shared
/// file, `.pack`, at a slot of whole pages, and its copy goes back to the caller to be used again:
/// a file of its own per small file cost an inode each, and on ext4 without a journal finding a
/// free inode steps past every inode deleted in the last minutes (`recently_deleted`), a third of
/// the mount's CPU in a `tar x` of 2,000 files. Freed slots are punched out and used again by
/// slots of the same size.
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

    /// A version's file (at `filePath(etag)`, not kept here: 100,000 adopted copies kept
    /// 14 MB of paths) and the blocks it holds.
    struct FileState {
        /// The file's inode number: a fetch into a file since dropped (and perhaps made again under
        /// the same path) is told apart by it.
        var inode: UInt64
        var present = BlockSet()
        /// Where a packed file's bytes are in `.pack` (its one block); nil for a file of its own.
        var packed: Slot?
    }

    /// A slot of the pack: `pages` pages of 4 KiB from `offset`, holding `length` bytes, last
    /// used at `use` (a packed file's one block has no entry in `lastUse`: at 100,000 small files
    /// that table held 100,000 keys, 8 MB in its 262,144 slots).
    struct Slot: Equatable {
        var offset: Int64
        var use: UInt64
        private var _pages: UInt32
        private var _length: UInt32
        var pages: Int { Int(_pages) }
        var length: Int64 { Int64(_length) }

        /// A slot holds at most `packedUpTo` bytes, well within 32 bits.
        init(offset: Int64, pages: Int, length: Int64, use: UInt64) {
            precondition(pages >= 0 && pages <= Int(UInt32.max) && length >= 0 && length <= Int64(UInt32.max))
            self.offset = offset
            self.use = use
            _pages = UInt32(pages)
            _length = UInt32(length)
        }
    }

    /// The pack file and its free slots by size.
    struct Pack {
        var file: CacheFile?
        var end: Int64 = 0
        var free: [Int: [Int64]] = [:]
        /// Slots in use, those waiting in `draining` included.
        var live = 0
        /// Slots of versions forgotten while a reply still splices from them, by ETag: freed once
        /// the last pin on that version goes (a slot used again would give the reader another
        /// file's bytes).
        var draining: [String: [Slot]] = [:]
    }

    struct OpenFile {
        var file: CacheFile
        var use: UInt64
    }

    struct State {
        var files: [String: FileState] = [:]
        var lastUse: [Key: UInt64] = [:]
        /// Blocks a segment handed out still refers to, with how many: not evicted meanwhile.
        var pinned: [Key: Int] = [:]
        var tick: UInt64 = 0
        /// The open descriptors, by etag: at most `openLimit`.
        var open: [String: OpenFile] = [:]
        var bytes: Int64 = 0
        var hits: UInt64 = 0
        var misses: UInt64 = 0
        /// `persist` ran: the index is written, and nothing may change what it describes.
        var closed = false
        /// The index read at start is gone (`withoutIndex`): what it names may change.
        var indexGone = false
        var pack = Pack()
    }

    /// Adopted files up to this size are packed (the journal keeps their bytes in the record too).
    public static let packedUpTo: Int64 = 64 << 10
    static let page: Int64 = 4096

    public let directory: String
    public let blockSize: Int
    public let capacity: Int64
    /// The most block files open at once.
    public static let openLimit = 64
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
        let pack = kept.files.contains { $0.pack != nil } ? try? CacheFile(existing: Self.packPath(directory)) : nil
        let packSize = pack.map { Int64(lseek($0.descriptor, 0, SEEK_END)) } ?? 0
        // The index is this mount's own file, but a damaged one must not keep the mount from
        // starting: each number is checked before any arithmetic on it, and an entry that does
        // not hold up is left out.
        for entry in kept.files where !entry.blocks.isEmpty {
            if let slot = entry.pack {
                guard let pack, s.files[entry.etag] == nil, slot.count == 2, entry.blocks == [0], entry.bytes > 0, slot[0] >= 0, slot[0] % Self.page == 0, slot[1] > 0,
                    slot[1] <= Self.packedUpTo / Self.page, entry.bytes <= slot[1] * Self.page, entry.bytes <= Int64(blockSize),
                    slot[0] <= packSize - entry.bytes, case let (total, over) = s.bytes.addingReportingOverflow(entry.bytes), !over
                else { continue }
                s.tick += 1
                s.files[entry.etag] = FileState(
                    inode: pack.inodeNumber, present: BlockSet([0]), packed: Slot(offset: slot[0], pages: Int(slot[1]), length: entry.bytes, use: s.tick))
                s.pack.live += 1
                s.pack.end = max(s.pack.end, slot[0] + slot[1] * Self.page)
                s.bytes = total
                continue
            }
            // The file must still be there (not made anew) and hold its last block's start, and the
            // blocks' bytes must fit in it.
            let path = filePath(entry.etag)
            guard let first = entry.blocks.min(), first >= 0, let last = entry.blocks.max(), s.files[entry.etag] == nil,
                case let (lastStart, overflow) = last.multipliedReportingOverflow(by: Int64(blockSize)), !overflow,
                entry.bytes >= 0, let (size, inode) = Self.stat(path), size > lastStart, entry.bytes <= size,
                // Each is at most its file's size, but two versions' names can map to one file.
                case let (total, over) = s.bytes.addingReportingOverflow(entry.bytes), !over
            else { continue }
            s.files[entry.etag] = FileState(inode: inode, present: BlockSet(entry.blocks))
            s.bytes = total
            for i in entry.blocks {
                s.tick += 1
                s.lastUse[Key(etag: entry.etag, index: i)] = s.tick
            }
        }
        // The index stays (until `claimIndex`); everything else the index does not name goes.
        // Slots that overlap an earlier one (an index not written by this code) are not trusted.
        var reach: Int64 = 0
        for (etag, slot) in s.files.compactMap({ e, f in f.packed.map { (e, $0) } }).sorted(by: { $0.1.offset < $1.1.offset }) {
            if slot.offset < reach {
                s.files[etag] = nil
                s.bytes -= slot.length
                s.pack.live -= 1
            } else {
                reach = slot.offset + Int64(slot.pages) * Self.page
            }
        }
        s.pack.file = s.pack.live > 0 ? pack : nil
        let names = s.files.filter { $0.value.packed == nil }.keys.map { (filePath($0) as NSString).lastPathComponent }
        let known = Set(names + [(Self.indexPath(directory) as NSString).lastPathComponent] + (s.pack.live > 0 ? [".pack"] : []))
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
        state.withLock { withoutIndex(&$0) }
    }

    /// The index read at start names blocks and slots as they were: it goes, for good (the folder
    /// synced), before anything it names is punched, unlinked or used again — an eviction at
    /// start (a smaller `--cache-size`) included, or a read answered before `claimIndex`. Kept,
    /// a start that failed afterwards (or a crash) would read it again and serve punched blocks
    /// as cached zeros.
    private func withoutIndex(_ s: inout State) {
        guard !s.indexGone else { return }
        s.indexGone = true
        guard unlink(Self.indexPath(directory)) == 0 else { return }
        let dir = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dir >= 0 {
            _ = fsync(dir)
            close(dir)
        }
    }

    struct Index: Codable, Equatable {
        struct Entry: Codable, Equatable {
            var etag: String
            var blocks: [Int64]
            var bytes: Int64
            /// A packed file's slot in `.pack`: [offset, pages].
            var pack: [Int64]? = nil
        }
        var blockSize: Int
        var files: [Entry]

        /// The index as JSON that `readIndex`'s JSONDecoder reads, handed to `emit` in pieces of
        /// about `chunk` bytes: written by hand, since JSONEncoder built it all as objects first
        /// (heaptrack at an unmount after 30,000 files: 16 MB).
        func writeJSON(chunk: Int, _ emit: ([UInt8]) -> Void) {
            var out: [UInt8] = []
            out.reserveCapacity(chunk + 4096)
            out.append(UInt8(ascii: "{"))
            JSONOut.key("blockSize", &out, first: true)
            JSONOut.number(blockSize, &out)
            JSONOut.key("files", &out)
            out.append(UInt8(ascii: "["))
            for (i, f) in files.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                out.append(UInt8(ascii: "{"))
                JSONOut.key("etag", &out, first: true)
                JSONOut.string(f.etag, &out)
                JSONOut.key("blocks", &out)
                out.append(UInt8(ascii: "["))
                for (j, b) in f.blocks.enumerated() {
                    if j > 0 { out.append(UInt8(ascii: ",")) }
                    JSONOut.number(b, &out)
                }
                out.append(UInt8(ascii: "]"))
                JSONOut.key("bytes", &out)
                JSONOut.number(f.bytes, &out)
                if let pack = f.pack {
                    JSONOut.key("pack", &out)
                    out.append(UInt8(ascii: "["))
                    for (j, n) in pack.enumerated() {
                        if j > 0 { out.append(UInt8(ascii: ",")) }
                        JSONOut.number(n, &out)
                    }
                    out.append(UInt8(ascii: "]"))
                }
                out.append(UInt8(ascii: "}"))
                if out.count >= chunk {
                    emit(out)
                    out.removeAll(keepingCapacity: true)
                }
            }
            out.append(contentsOf: Array("]}".utf8))
            emit(out)
        }

        /// What `writeJSON` writes, read by hand; nil for anything JSONDecoder might read otherwise
        /// (a key twice, a number out of range, a value of another type), which it then reads.
        /// JSONDecoder's scan of the index of 50,000 small files took 47 MB at the mount's start
        /// (heaptrack), more than anything else the mount held then.
        static func read(_ bytes: UnsafeRawBufferPointer) -> Index? {
            typealias Failure = JSONReader.Failure
            func numbers(_ r: inout JSONReader) throws(Failure) -> [Int64] {
                var out: [Int64] = []
                try r.array { r throws(Failure) in out.append(try r.int64()) }
                return out
            }
            func entry(_ r: inout JSONReader) throws(Failure) -> Entry {
                var etag: String?, blocks: [Int64]?, size: Int64?, pack: [Int64]?
                var seen = SeenKeys()
                try r.object { r, key throws(Failure) in
                    switch key {
                    case "etag": try seen.first(0); etag = try r.string()
                    case "blocks": try seen.first(1); blocks = try numbers(&r)
                    case "bytes": try seen.first(2); size = try r.int64()
                    case "pack":
                        try seen.first(3)
                        if try r.peek() == UInt8(ascii: "n") { try r.literal("null") } else { pack = try numbers(&r) }
                    default: try r.skipValue()
                    }
                }
                guard let etag, let blocks, let size else { throw Failure() }
                return Entry(etag: etag, blocks: blocks, bytes: size, pack: pack)
            }
            var r = JSONReader(bytes)
            var blockSize: Int64?, files: [Entry]?
            var seen = SeenKeys()
            do throws(Failure) {
                try r.object { r, key throws(Failure) in
                    switch key {
                    case "blockSize": try seen.first(0); blockSize = try r.int64()
                    case "files":
                        try seen.first(1)
                        var list: [Entry] = []
                        try r.array { r throws(Failure) in list.append(try entry(&r)) }
                        files = list
                    default: try r.skipValue()
                    }
                }
                r.skipSpace()
                guard r.at == r.bytes.count, let blockSize, let size = Int(exactly: blockSize), let files else { return nil }
                return Index(blockSize: size, files: files)
            } catch {
                return nil
            }
        }
    }

    static func indexPath(_ directory: String) -> String { directory + "/.index.json" }
    static func packPath(_ directory: String) -> String { directory + "/.pack" }

    static func readIndex(directory: String, blockSize: Int) -> Index? {
        guard let data = FileManager.default.contents(atPath: indexPath(directory)),
            let index = data.withUnsafeBytes({ Index.read($0) }) ?? (try? JSONDecoder().decode(Index.self, from: data)), index.blockSize == blockSize
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
                if let slot = f.packed {
                    return Index.Entry(etag: etag, blocks: [0], bytes: slot.length, pack: [slot.offset, Int64(slot.pages)])
                }
                let size = Self.stat(filePath(etag))?.size ?? 0
                return Index.Entry(etag: etag, blocks: f.present.sorted(), bytes: f.present.reduce(0) { sum, i in sum + blockLength(i, fileSize: size) })
            }
            let paths = s.files.filter { $0.value.packed == nil }.keys.map { filePath($0) } + (s.pack.file.map { [$0.path] } ?? [])
            return (paths, Index(blockSize: blockSize, files: entries))
        }
        // One syncfs for the cache's filesystem rather than an fsync per file (a tar of 2,000
        // small files leaves 2,000 of them); each file's fsync where that fails.
        let dir = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let synced = dir >= 0 && CStowSystem_syncfs(dir) == 0
        if dir >= 0 { close(dir) }
        if !synced { for path in files { try CacheFile(existing: path).sync() } }
        try CacheFile.replace(Self.indexPath(directory)) { emit in index.writeJSON(chunk: 1 << 20, emit) }
    }

    /// What `adopt` did with a copy.
    public enum Adoption: Equatable, Sendable {
        /// The file is the cache's now (moved into it).
        case moved
        /// Its bytes were copied into the pack: the file is still the caller's.
        case packed
        /// Not taken: the file is still the caller's.
        case refused
    }

    /// Takes a whole local copy of `etag`'s content (a file just uploaded: the server has exactly
    /// these bytes) as its cached blocks: a small one is copied into the pack, a larger one moved
    /// into the cache. Refused when the cache already holds some of that version, or the copy is
    /// too large to be worth keeping.
    public func adopt(etag: String, file: CacheFile, size: Int64) -> Adoption {
        guard size > 0, size <= capacity / 2 else { return .refused }
        if size <= min(Self.packedUpTo, Int64(blockSize)) { return pack(etag: etag, file: file, size: size) ? .packed : .refused }
        return move(etag: etag, file: file, size: size) ? .moved : .refused
    }

    /// Copies `size` bytes of `file` into a slot of the pack, as `etag`'s one block.
    private func pack(etag: String, file: CacheFile, size: Int64) -> Bool {
        let pages = Int((size + Self.page - 1) / Self.page)
        // The slot is taken under the lock, filled outside it, and entered once filled.
        let taken = state.withLock { s -> (CacheFile, Slot)? in
            guard !s.closed, s.files[etag] == nil else { return nil }
            if s.pack.file == nil {
                guard let f = try? CacheFile(path: Self.packPath(directory), truncate: true) else { return nil }
                s.pack = Pack(file: f)
            }
            let offset: Int64
            if let reused = s.pack.free[pages]?.popLast() {
                offset = reused
            } else {
                offset = s.pack.end
                s.pack.end += Int64(pages) * Self.page
            }
            s.pack.live += 1
            return (s.pack.file!, Slot(offset: offset, pages: pages, length: size, use: 0))
        }
        guard let (pack, slot) = taken else { return false }
        var copied: Int64 = 0
        while copied < size {
            let n = CStowSystem_copy_file_range(file.descriptor, off_t(copied), pack.descriptor, off_t(slot.offset + copied), Int(size - copied))
            if n <= 0 { break }
            copied += Int64(n)
        }
        let entered = state.withLock { s -> Bool in
            guard copied == size, !s.closed, s.files[etag] == nil, s.pack.file === pack else {
                if s.pack.file === pack { freeSlot(&s, slot) }
                return false
            }
            s.tick += 1
            var used = slot
            used.use = s.tick
            s.files[etag] = FileState(inode: pack.inodeNumber, present: BlockSet([0]), packed: used)
            s.bytes += size
            return true
        }
        guard entered else { return false }
        if state.withLock({ $0.bytes > capacity }) { evictIfNeeded() }
        return true
    }

    /// A slot no longer used: its pages are freed and it is kept for the next file of its size;
    /// an empty pack is cut back to nothing.
    private func freeSlot(_ s: inout State, _ slot: Slot) {
        withoutIndex(&s)
        s.pack.live -= 1
        guard let pack = s.pack.file else { return }
        if s.pack.live <= 0 {
            _ = ftruncate(pack.descriptor, 0)
            s.pack.free = [:]
            s.pack.end = 0
            s.pack.live = 0
            return
        }
        pack.punchHole(offset: slot.offset, length: Int64(slot.pages) * Self.page)
        s.pack.free[slot.pages, default: []].append(slot.offset)
    }

    /// Moves a copy into the cache as `etag`'s file.
    private func move(etag: String, file: CacheFile, size: Int64) -> Bool {
        let target = filePath(etag)
        let adopted = state.withLock { s -> Bool in
            guard !s.closed, s.files[etag] == nil, rename(file.path, target) == 0 else { return false }
            guard let (_, inode) = Self.stat(target) else {
                // Put back: the caller still owns the file at its old path.
                _ = rename(target, file.path)
                return false
            }
            let count = (size + Int64(blockSize) - 1) / Int64(blockSize)
            var f = FileState(inode: inode)
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

    /// The size and inode number of the file at `path`, or nil if there is none.
    static func stat(_ path: String) -> (size: Int64, inode: UInt64)? {
        var size: CLongLong = 0
        var inode: CUnsignedLongLong = 0
        guard CStowSystem_file_identity(path, -1, &size, &inode) == 0 else { return nil }
        return (Int64(size), UInt64(inode))
    }

    /// An open descriptor of `etag`'s file (which must be known), from the open set or opened now,
    /// closing the least recently used one beyond `openLimit`. nil when it cannot be opened: the
    /// file is gone (removed behind the cache's back), and so are its blocks.
    private func handle(_ s: inout State, _ etag: String) -> CacheFile? {
        s.tick += 1
        if var o = s.open[etag] {
            o.use = s.tick
            s.open[etag] = o
            return o.file
        }
        guard let f = s.files[etag] else { return nil }
        if f.packed != nil { return s.pack.file }
        guard let file = try? CacheFile(existing: filePath(etag)), file.inodeNumber == f.inode else {
            forget(&s, etag)
            return nil
        }
        remember(&s, etag, file)
        return file
    }

    private func remember(_ s: inout State, _ etag: String, _ file: CacheFile) {
        s.open[etag] = OpenFile(file: file, use: s.tick)
        if s.open.count > Self.openLimit, let oldest = s.open.min(by: { $0.value.use < $1.value.use })?.key {
            s.open[oldest] = nil
        }
    }

    /// Drops `etag`'s blocks from the books (not from the disk).
    private func forget(_ s: inout State, _ etag: String) {
        guard let f = s.files.removeValue(forKey: etag) else { return }
        withoutIndex(&s)
        s.open[etag] = nil
        if let slot = f.packed {
            s.bytes -= slot.length
            if s.pinned[Key(etag: etag, index: 0)] != nil {
                s.pack.draining[etag, default: []].append(slot)
            } else {
                freeSlot(&s, slot)
            }
            return
        }
        let size = Self.stat(filePath(etag))?.size ?? 0
        for i in f.present {
            s.lastUse[Key(etag: etag, index: i)] = nil
            s.bytes -= blockLength(i, fileSize: size)
        }
    }

    /// Block files open now (for tests).
    public var openFiles: Int { state.withLock { $0.open.count } }

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
            guard let file = handle(&s, etag) else {
                s.misses += 1
                return nil
            }
            for i in needed {
                if f.packed != nil {
                    s.files[etag]?.packed?.use = s.tick
                } else {
                    s.lastUse[Key(etag: etag, index: i)] = s.tick
                }
                s.pinned[Key(etag: etag, index: i), default: 0] += 1
            }
            s.hits += 1
            if let slot = f.packed {
                // Never past the file's bytes into the rest of its slot (or the next one).
                let length = max(0, min(range.upperBound, slot.length) - range.lowerBound)
                return FileSegment(file: file, offset: slot.offset + min(range.lowerBound, slot.length), length: Int(length), pin: BlockPin(cache: self, etag: etag, blocks: needed))
            }
            return FileSegment(file: file, offset: range.lowerBound, length: Int(range.count), pin: BlockPin(cache: self, etag: etag, blocks: needed))
        }
    }

    /// The segment holding these blocks is gone: they may be evicted again.
    func unpin(etag: String, blocks: Range<Int64>) {
        let over = state.withLock { s -> Bool in
            for i in blocks {
                let key = Key(etag: etag, index: i)
                if let n = s.pinned[key], n > 1 {
                    s.pinned[key] = n - 1
                } else {
                    s.pinned[key] = nil
                    if i == 0, let slots = s.pack.draining.removeValue(forKey: etag) { for slot in slots { freeSlot(&s, slot) } }
                }
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
            // A packed version holds all of its bytes: nothing is fetched into it.
            if s.files[etag]?.packed != nil { forget(&s, etag) }
            if s.files[etag] != nil, let file = handle(&s, etag) { return file }
            let file = try CacheFile(path: filePath(etag))
            s.files[etag] = FileState(inode: file.inodeNumber)
            s.tick += 1
            remember(&s, etag, file)
            return file
        }
    }

    /// Block `block` of `etag` (`length` bytes, less than a block only at the end of the file) is
    /// written into `file`. Ignored when that version was dropped meanwhile.
    public func didStore(etag: String, file: CacheFile, block: Int64, length: Int) {
        let over = state.withLock { s -> Bool in
            guard !s.closed, let f = s.files[etag], f.inode == file.inodeNumber else { return false }
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
            withoutIndex(&s)
            let target = capacity * 9 / 10
            // Blocks by last use: those in `lastUse`, and packed files' one block each.
            var order = s.lastUse.map { ($0.value, $0.key) }
            for (etag, f) in s.files { if let slot = f.packed { order.append((slot.use, Key(etag: etag, index: 0))) } }
            order.sort { $0.0 < $1.0 }
            for (_, key) in order {
                guard s.bytes > target else { break }
                // A reply still splices from it: evicted once that is sent (see `unpin`).
                if s.pinned[key] != nil { continue }
                // In place: a copy of the record would copy its set of blocks for each one evicted.
                guard s.files[key.etag]?.present.remove(key.index) != nil else {
                    s.lastUse[key] = nil
                    continue
                }
                s.lastUse[key] = nil
                if let slot = s.files[key.etag]?.packed {
                    s.files[key.etag] = nil
                    s.bytes -= slot.length
                    freeSlot(&s, slot)
                    continue
                }
                let path = filePath(key.etag)
                let size = Self.stat(path)?.size ?? 0
                s.bytes -= blockLength(key.index, fileSize: size)
                if s.files[key.etag]?.present.isEmpty == true {
                    unlink(path)
                    s.files[key.etag] = nil
                    s.open[key.etag] = nil
                } else {
                    handle(&s, key.etag)?.punchHole(offset: key.index * Int64(blockSize), length: Int64(blockSize))
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
            guard !s.closed, let f = s.files[etag] else { return }
            forget(&s, etag)
            if f.packed == nil { unlink(filePath(etag)) }
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

/// The block numbers a cached version holds: the run from block 0 as one number (a copy adopted
/// whole after its upload, or a file read from its start: the common cases), the others in a set
/// made only when there are any. An adopted small file costs no allocation.
struct BlockSet: Sequence, Equatable {
    private(set) var prefix: Int64 = 0
    private var others: Set<Int64>?

    init() {}
    init(_ blocks: some Sequence<Int64>) { for i in blocks { insert(i) } }

    func contains(_ i: Int64) -> Bool { (i >= 0 && i < prefix) || others?.contains(i) == true }
    var isEmpty: Bool { prefix == 0 && others == nil }
    var count: Int { Int(prefix) + (others?.count ?? 0) }

    @discardableResult
    mutating func insert(_ i: Int64) -> (inserted: Bool, memberAfterInsert: Int64) {
        guard i >= 0, !contains(i) else { return (false, i) }
        if i == prefix {
            prefix += 1
            // The run takes in the blocks after it that were already here.
            while others?.remove(prefix) != nil { prefix += 1 }
            if others?.isEmpty == true { others = nil }
        } else {
            if others == nil { others = [] }
            others!.insert(i)
        }
        return (true, i)
    }

    @discardableResult
    mutating func remove(_ i: Int64) -> Int64? {
        if i >= 0 && i < prefix {
            // The run ends before it; the blocks after it go to the set.
            if i + 1 < prefix {
                if others == nil { others = [] }
                for j in (i + 1)..<prefix { others!.insert(j) }
            }
            prefix = i
            return i
        }
        guard others?.remove(i) != nil else { return nil }
        if others!.isEmpty { others = nil }
        return i
    }

    struct Iterator: IteratorProtocol {
        var at: Int64
        let end: Int64
        var rest: Set<Int64>.Iterator?

        mutating func next() -> Int64? {
            if at < end {
                defer { at += 1 }
                return at
            }
            return rest?.next()
        }
    }

    func makeIterator() -> Iterator { Iterator(at: 0, end: prefix, rest: others?.makeIterator()) }
}
