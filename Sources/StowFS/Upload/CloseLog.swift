import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The journal's write-ahead log for `close(2)`: a preallocated file of `capacity` bytes, written
/// in place with `O_DSYNC`, each record one aligned write — the one device flush a close must
/// wait for (S1), where a synced SQLite commit appends several pages to the WAL, growing it, and
/// then flushes (measured here: 4 KiB written in place with `O_DSYNC` ~90 µs; the journal's synced
/// commit ~150 µs, plus its share of the checkpoints).
///
/// The journal writes a record's row into SQLite without waiting for the disk first, then the
/// same row here. After a power cut the SQLite file holds a prefix of its commits (its WAL is
/// written in order): a row whose insert did not survive has an id above the table's
/// AUTOINCREMENT sequence, and no later commit survived either. `UploadJournal` replays exactly
/// those rows from this log when it opens, makes SQLite durable, and starts a new generation.
///
/// Layout, little-endian, in blocks of 4 KiB:
/// - block 0: `magic` (8 bytes), the journal's identity, the generation, a checksum of the three.
/// - then entries, each starting on a block: `entryMagic` (4), payload length (4), generation (8),
///   row id (8), checksum of those 24 bytes and the payload (8), the payload; zeros to the block's end.
///
/// An entry counts only with the header's generation and a matching checksum: a torn write, an
/// older generation's leftovers, or another journal's log are skipped. A generation is random,
/// so bytes of a file's content, which an entry carries, cannot pass for an entry.
final class CloseLog: Sendable {
    static let blockSize = 4096
    static let magic: UInt64 = 0x474F_4C43_574F_5453  // "STOWCLOG"
    static let entryMagic: UInt32 = 0x314C_4353  // "SCL1"
    static let entryHeader = 32

    let path: String
    let capacity: Int
    private let fd: Int32
    private let state: Mutex<State>
    private struct State {
        var generation: UInt64 = 0
        /// Where the next entry goes.
        var cursor: Int = CloseLog.blockSize
        /// A write failed: the journal stops using the log (its WAL's fsync stands in).
        var broken = false
        var generations = 0
    }

    struct Entry: Equatable {
        var id: Int64
        var payload: [UInt8]
    }

    /// Opens the log at `path`, making it (`capacity` bytes of zeros, written and synced, so that
    /// writes in place need no change of the file's size or extents) if it is not there or not
    /// that size.
    init(path: String, capacity: Int = 8 << 20) throws {
        precondition(capacity % Self.blockSize == 0 && capacity >= 4 * Self.blockSize)
        self.path = path
        self.capacity = capacity
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? nil
        let fresh = size != capacity
        if fresh {
            let tmp = path + ".new"
            let w = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard w >= 0 else { throw Self.failure("cannot make", tmp) }
            defer { Glibc.close(w) }
            let zeros = [UInt8](repeating: 0, count: 1 << 20)
            var off = 0
            while off < capacity {
                let n = min(zeros.count, capacity - off)
                guard Self.writeAll(w, zeros, count: n, at: off) else { throw Self.failure("cannot write", tmp) }
                off += n
            }
            guard fsync(w) == 0 else { throw Self.failure("cannot sync", tmp) }
            guard rename(tmp, path) == 0 else { throw Self.failure("cannot rename", tmp) }
            let dir = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if dir >= 0 {
                _ = fsync(dir)
                Glibc.close(dir)
            }
        }
        fd = open(path, O_RDWR | O_DSYNC | O_CLOEXEC)
        guard fd >= 0 else { throw Self.failure("cannot open", path) }
        state = Mutex(State())
    }

    deinit { Glibc.close(fd) }

    private static func failure(_ what: String, _ path: String) -> NSError {
        NSError(domain: "CloseLog", code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "\(what) \(path): \(String(cString: strerror(errno)))"])
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8], count: Int, at offset: Int) -> Bool {
        bytes.withUnsafeBytes { raw in
            var done = 0
            while done < count {
                let n = pwrite(fd, raw.baseAddress! + done, count - done, off_t(offset + done))
                if n < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                done += n
            }
            return true
        }
    }

    var isBroken: Bool { state.withLock { $0.broken } }
    /// How many generations this log started (for tests).
    var generations: Int { state.withLock { $0.generations } }

    // MARK: - Reading (at open)

    /// The entries of the current generation written for `identity` in the log at `path` (of any
    /// size: one made with another capacity too), in file order; none when there is no log, or
    /// its header is not this journal's or is torn.
    static func entries(atPath path: String, identity: UInt64) -> [Entry] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        let bytes = [UInt8](data)
        guard let (id, generation) = header(bytes), id == identity else { return [] }
        var found: [Entry] = []
        var off = blockSize
        while off + entryHeader <= bytes.count {
            if let (entry, length) = Self.entry(bytes, at: off, generation: generation) {
                found.append(entry)
                off += blocks(for: length)
            } else {
                off += blockSize
            }
        }
        return found
    }

    static func header(_ b: [UInt8]) -> (identity: UInt64, generation: UInt64)? {
        guard b.count >= 32, load64(b, 0) == magic else { return nil }
        let identity = load64(b, 8), generation = load64(b, 16)
        guard load64(b, 24) == checksum(b[0..<24], []) else { return nil }
        return (identity, generation)
    }

    static func entry(_ b: [UInt8], at off: Int, generation: UInt64) -> (Entry, Int)? {
        guard load32(b, off) == entryMagic, load64(b, off + 8) == generation else { return nil }
        let length = Int(load32(b, off + 4))
        // The payload must lie inside the file (a length from disk is not trusted).
        guard length <= b.count - off - entryHeader else { return nil }
        let payload = b[(off + entryHeader)..<(off + entryHeader + length)]
        guard load64(b, off + 24) == checksum(b[off..<(off + 24)], payload) else { return nil }
        return (Entry(id: Int64(bitPattern: load64(b, off + 16)), payload: [UInt8](payload)), entryHeader + length)
    }

    /// Bytes an entry of `length` (header and payload) takes: whole blocks.
    static func blocks(for length: Int) -> Int { (length + blockSize - 1) / blockSize * blockSize }

    // MARK: - Writing

    /// Starts a new generation (a random one) at the log's start: every entry before it stops
    /// counting. Only once what they stand for is durable elsewhere (the caller syncs SQLite first).
    func reset(identity: UInt64) throws {
        try state.withLock { s in
            var g = UInt64.random(in: 1...UInt64.max)
            if g == s.generation { g &+= 1 }
            var block = [UInt8](repeating: 0, count: Self.blockSize)
            Self.store64(&block, 0, Self.magic)
            Self.store64(&block, 8, identity)
            Self.store64(&block, 16, g)
            Self.store64(&block, 24, Self.checksum(block[0..<24], []))
            guard Self.writeAll(fd, block, count: block.count, at: 0) else {
                s.broken = true
                throw Self.failure("cannot write", path)
            }
            s.generation = g
            s.cursor = Self.blockSize
            s.generations += 1
        }
    }

    /// Writes `entries` after the last ones, in one write that returns once they are on disk.
    /// False, with nothing written, when they do not fit: the caller makes them durable otherwise
    /// and resets the log.
    func append(_ entries: [Entry]) throws -> Bool {
        try state.withLock { s in
            guard !s.broken else { throw NSError(domain: "CloseLog", code: Int(EIO), userInfo: [NSLocalizedDescriptionKey: "the close log failed before"]) }
            let total = entries.reduce(0) { $0 + Self.blocks(for: Self.entryHeader + $1.payload.count) }
            guard s.cursor + total <= capacity else { return false }
            var buffer = [UInt8](repeating: 0, count: total)
            var off = 0
            for e in entries {
                Self.store32(&buffer, off, Self.entryMagic)
                Self.store32(&buffer, off + 4, UInt32(e.payload.count))
                Self.store64(&buffer, off + 8, s.generation)
                Self.store64(&buffer, off + 16, UInt64(bitPattern: e.id))
                buffer.replaceSubrange((off + Self.entryHeader)..<(off + Self.entryHeader + e.payload.count), with: e.payload)
                Self.store64(&buffer, off + 24, Self.checksum(buffer[off..<(off + 24)], e.payload[...]))
                off += Self.blocks(for: Self.entryHeader + e.payload.count)
            }
            guard Self.writeAll(fd, buffer, count: total, at: s.cursor) else {
                s.broken = true
                throw Self.failure("cannot write", path)
            }
            s.cursor += total
            return true
        }
    }

    // MARK: - Bytes

    static func load64(_ b: [UInt8], _ o: Int) -> UInt64 {
        var v: UInt64 = 0
        for i in 0..<8 { v |= UInt64(b[o + i]) << (8 * UInt64(i)) }
        return v
    }
    static func load32(_ b: [UInt8], _ o: Int) -> UInt32 {
        var v: UInt32 = 0
        for i in 0..<4 { v |= UInt32(b[o + i]) << (8 * UInt32(i)) }
        return v
    }
    static func store64(_ b: inout [UInt8], _ o: Int, _ v: UInt64) {
        for i in 0..<8 { b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt64(i))) }
    }
    static func store32(_ b: inout [UInt8], _ o: Int, _ v: UInt32) {
        for i in 0..<4 { b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt32(i))) }
    }

    /// A 64-bit checksum (multiply and fold, per byte): it tells a torn or stale write, not an
    /// attack (the random generation keeps forged entries out).
    static func checksum(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> UInt64 {
        var h: UInt64 = 0x9E37_79B9_7F4A_7C15
        for x in a { h = (h ^ UInt64(x)) &* 0x0000_0100_0000_01B3 }
        for x in b { h = (h ^ UInt64(x)) &* 0x0000_0100_0000_01B3 }
        return h ^ (h >> 31)
    }
}

/// A journal row as the close log carries it (every column an insert sets), in a plain binary
/// form: strings and blobs with a 32-bit length (all ones for none), integers in 8 bytes.
struct LoggedRow: Equatable {
    var namespace: String
    var path: String
    var cacheFile: String
    var size: Int64
    var params: String?
    var contentType: String?
    var tags: String?
    var patch: String?
    var state: String
    var created: Int64
    var content: Data?
    var replacesIno: Int64?
    var replacesIfMatch: String?

    func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128 + namespace.utf8.count + path.utf8.count + cacheFile.utf8.count + (content?.count ?? 0))
        func bytes<C: Collection>(_ c: C?) where C.Element == UInt8 {
            guard let c else {
                int32(UInt32.max)
                return
            }
            int32(UInt32(c.count))
            out.append(contentsOf: c)
        }
        func int32(_ v: UInt32) { for i in 0..<4 { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) } }
        func int64(_ v: Int64) { for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: UInt64(bitPattern: v) >> (8 * UInt64(i)))) } }
        func optional(_ v: Int64?) {
            out.append(v == nil ? 0 : 1)
            int64(v ?? 0)
        }
        bytes(namespace.utf8)
        bytes(path.utf8)
        bytes(cacheFile.utf8)
        int64(size)
        bytes(params?.utf8)
        bytes(contentType?.utf8)
        bytes(tags?.utf8)
        bytes(patch?.utf8)
        bytes(state.utf8)
        int64(created)
        bytes(content)
        optional(replacesIno)
        bytes(replacesIfMatch?.utf8)
        return out
    }

    /// Nil for bytes that are not such a row (each length checked against what is left).
    init?(decoding b: [UInt8]) {
        var at = 0
        func int32() -> UInt32? {
            guard b.count - at >= 4 else { return nil }
            defer { at += 4 }
            return CloseLog.load32(b, at)
        }
        func int64() -> Int64? {
            guard b.count - at >= 8 else { return nil }
            defer { at += 8 }
            return Int64(bitPattern: CloseLog.load64(b, at))
        }
        /// .some(nil) for none; nil for bytes that do not parse.
        func blob() -> [UInt8]?? {
            guard let n = int32() else { return nil }
            if n == UInt32.max { return .some(nil) }
            guard Int(n) <= b.count - at else { return nil }
            defer { at += Int(n) }
            return .some([UInt8](b[at..<(at + Int(n))]))
        }
        func string() -> String?? {
            guard let v = blob() else { return nil }
            guard let v else { return .some(nil) }
            guard let s = String(validating: v, as: UTF8.self) else { return nil }
            return .some(s)
        }
        guard let ns = string(), let ns, let path = string(), let path, let cacheFile = string(), let cacheFile, let size = int64(),
            let params = string(), let contentType = string(), let tags = string(), let patch = string(), let state = string(), let state,
            let created = int64(), let content = blob(), b.count - at >= 1
        else { return nil }
        let hasReplaces = b[at]
        at += 1
        guard hasReplaces <= 1, let ino = int64(), let ifMatch = string(), at == b.count else { return nil }
        self.init(
            namespace: ns, path: path, cacheFile: cacheFile, size: size, params: params, contentType: contentType, tags: tags, patch: patch,
            state: state, created: created, content: content.map { Data($0) }, replacesIno: hasReplaces == 1 ? ino : nil, replacesIfMatch: ifMatch)
    }

    init(
        namespace: String, path: String, cacheFile: String, size: Int64, params: String?, contentType: String?, tags: String?, patch: String?,
        state: String, created: Int64, content: Data?, replacesIno: Int64?, replacesIfMatch: String?
    ) {
        self.namespace = namespace
        self.path = path
        self.cacheFile = cacheFile
        self.size = size
        self.params = params
        self.contentType = contentType
        self.tags = tags
        self.patch = patch
        self.state = state
        self.created = created
        self.content = content
        self.replacesIno = replacesIno
        self.replacesIfMatch = replacesIfMatch
    }
}
