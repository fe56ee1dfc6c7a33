import CStowSystem
public import Foundation
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// A local file the filesystem keeps open: a file's local copy, or one file of the block cache.
///
/// The descriptor stays open as long as the object lives (ARC): a `FileSegment` handed to FuseKit
/// keeps its file open even if the cache drops it meanwhile. Removing the path (`unlink`) does not
/// disturb readers that hold the object.
public final class CacheFile: Sendable {
    public let descriptor: Int32
    public let path: String

    /// CacheFile objects alive in this process, each holding a descriptor. A file written and not
    /// stored yet holds one until its upload: the engine makes creates wait when this nears the
    /// process's limit (`StowFileSystem.waitForDescriptors`).
    static let openCount = Atomic<Int>(0)

    /// Opens (creating if needed) `path` for reading and writing.
    public init(path: String, truncate: Bool = false) throws(FSError) {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0o600)
        guard fd >= 0 else { throw FSError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
        descriptor = fd
        self.path = path
        Self.openCount.add(1, ordering: .relaxed)
    }

    /// Opens `path` for reading and writing if it exists (not made anew).
    public init(existing path: String) throws(FSError) {
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw FSError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
        descriptor = fd
        self.path = path
        Self.openCount.add(1, ordering: .relaxed)
    }

    /// Opens a server's blob file for reading only (`LocalBlobs`): non-blocking, and through no
    /// symbolic link on the way (`CStowSystem_open_blob`).
    public init(blob path: String) throws(FSError) {
        let fd = CStowSystem_open_blob(path)
        guard fd >= 0 else { throw FSError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
        descriptor = fd
        self.path = path
        Self.openCount.add(1, ordering: .relaxed)
    }

    /// Whether the open file is a regular file of `size` bytes, this process's user's, on a local
    /// filesystem.
    public func isOwnLocalFile(size: Int64) -> Bool {
        CStowSystem_is_own_local_file(descriptor, CLongLong(size)) == 1
    }

    /// Copies the first `size` bytes of `source` into this file at the same offsets, in the kernel
    /// (`copy_file_range`), leaving holes as holes. False when it could not (another filesystem):
    /// then nothing may be assumed of this file's content.
    public func copyData(from source: CacheFile, size: Int64) -> Bool {
        CStowSystem_copy_data(source.descriptor, descriptor, CLongLong(size)) == 0
    }

    /// Whether the open file was removed (no name left).
    public var isRemoved: Bool { CStowSystem_link_count(descriptor) == 0 }

    deinit {
        close(descriptor)
        Self.openCount.subtract(1, ordering: .relaxed)
    }

    /// The inode number of the open file (it stays the file's while the descriptor is open, even
    /// if the path is removed).
    public var inodeNumber: UInt64 {
        var size: CLongLong = 0
        var inode: CUnsignedLongLong = 0
        return CStowSystem_file_identity(nil, descriptor, &size, &inode) == 0 ? UInt64(inode) : 0
    }

    /// Puts `data` at `path` whole or not at all: written to a temporary file, synced, renamed over
    /// `path`, and the folder synced (a power cut leaves the old file or the new one, never a part).
    public static func replace(_ path: String, with data: Data) throws(FSError) {
        try replace(path) { (out: CacheFile) throws(FSError) in try out.write(Array(data), at: 0) }
    }

    /// `replace`, with the content that `produce` hands to its `emit`, piece after piece (a large
    /// file written without holding all of it in memory).
    public static func replace(_ path: String, streaming produce: (_ emit: ([UInt8]) -> Void) -> Void) throws(FSError) {
        try replace(path) { (out: CacheFile) throws(FSError) in
            var offset: Int64 = 0
            var failed: FSError?
            produce { bytes in
                guard failed == nil else { return }
                do throws(FSError) {
                    try out.write(bytes, at: offset)
                    offset += Int64(bytes.count)
                } catch {
                    failed = error
                }
            }
            if let failed { throw failed }
        }
    }

    /// `replace`, with the content written by `write` (at offsets from 0, in as many pieces as it likes).
    public static func replace(_ path: String, writing write: (CacheFile) throws(FSError) -> Void) throws(FSError) {
        let temporary = path + ".tmp"
        let out = try CacheFile(path: temporary, truncate: true)
        try write(out)
        try out.sync()
        guard Glibc.rename(temporary, path) == 0 else { throw FSError.io("cannot write \(path): \(String(cString: strerror(errno)))") }
        let dir = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dir >= 0 {
            _ = fsync(dir)
            close(dir)
        }
    }

    var fd: FileDescriptor { FileDescriptor(rawValue: descriptor) }

    /// Writes all of `bytes` at `offset`.
    public func write(_ bytes: some Sequence<UInt8>, at offset: Int64) throws(FSError) {
        do {
            _ = try fd.writeAll(toAbsoluteOffset: offset, bytes)
        } catch let e as Errno {
            throw e == .noSpace ? FSError.noSpace : FSError.io("write to \(path): \(e)")
        } catch {
            throw FSError.io("write to \(path): \(error)")
        }
    }

    /// The first `size` bytes, read at once (a small file's whole content); fewer if the file is shorter.
    public func readAll(size: Int64) throws(FSError) -> Data {
        var data = Data(count: Int(size))
        var got = 0
        var failure: Int32 = 0
        data.withUnsafeMutableBytes { space in
            while got < Int(size) {
                let n = pread(descriptor, space.baseAddress! + got, Int(size) - got, off_t(got))
                if n < 0 {
                    if errno == EINTR { continue }
                    failure = errno
                    return
                }
                if n == 0 { return }
                got += n
            }
        }
        guard failure == 0 else { throw FSError.io("read \(path): \(String(cString: strerror(failure)))") }
        return data.prefix(got)
    }

    /// Where the last data of the file at `path` ends: its size, unless it ends in a hole (a file
    /// extended by truncate), which the filesystem reports through `SEEK_DATA`/`SEEK_HOLE`. nil
    /// when the file cannot be read.
    public static func dataEnd(path: String) -> Int64? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let end = CStowSystem_data_end(fd)
        return end >= 0 ? Int64(end) : nil
    }

    public func truncate(to size: Int64) throws(FSError) {
        guard ftruncate(descriptor, off_t(size)) == 0 else { throw FSError.io("truncate \(path): \(String(cString: strerror(errno)))") }
    }

    public func sync() throws(FSError) {
        guard fsync(descriptor) == 0 else { throw FSError.io("fsync \(path): \(String(cString: strerror(errno)))") }
    }

    public var size: Int64 {
        Int64(lseek(descriptor, 0, SEEK_END))
    }

    /// Frees the byte range (the file keeps its size): for evicting blocks from a sparse file.
    public func punchHole(offset: Int64, length: Int64) {
        _ = CStowSystem_punch_hole(descriptor, off_t(offset), off_t(length))
    }

    /// Gives `length` bytes from `offset` their disk blocks before they are written (the file
    /// grows to the range's end, as the writes would make it): writing into a hole of ext4 costs
    /// a block reservation and an extent update per page (a third of a cold read's CPU in the
    /// mount, when it wrote the cache), writing into blocks given beforehand does not. Best
    /// effort: false where the filesystem cannot (or the disk is full), and the writes then go
    /// as they would have. What is not written should be given back with `punchHole`.
    @discardableResult
    public func preallocate(offset: Int64, length: Int64) -> Bool {
        guard offset >= 0, length > 0 else { return false }
        return CStowSystem_preallocate(descriptor, off_t(offset), off_t(length)) == 0
    }

    /// Copies the first `length` bytes into a new file at `target` (copy_file_range; reflinks where the filesystem can).
    public func copy(to target: String, length: Int64) throws(FSError) -> CacheFile {
        let out = try CacheFile(path: target, truncate: true)
        do throws(FSError) {
            var copied: Int64 = 0
            while copied < length {
                let n = CStowSystem_copy_file_range(descriptor, off_t(copied), out.descriptor, off_t(copied), Int(min(length - copied, 1 << 30)))
                if n < 0 {
                    if errno == EINTR { continue }
                    throw FSError.io("copy \(path) → \(target): \(String(cString: strerror(errno)))")
                }
                if n == 0 { break }
                copied += Int64(n)
            }
            // A source shorter than `length` (holes at the end) copies short: ensure the size.
            if out.size < length { try out.truncate(to: length) }
        } catch {
            // A copy that failed (a full disk) is not left behind.
            Glibc.unlink(target)
            throw error
        }
        return out
    }

    /// Reads `length` bytes at `offset` (for tests and tools; the filesystem serves reads through FuseKit).
    public func read(at offset: Int64, length: Int) -> [UInt8] {
        guard let h = FileHandle(forReadingAtPath: path) else { return [] }
        defer { try? h.close() }
        try? h.seek(toOffset: UInt64(offset))
        return Array((try? h.read(upToCount: length)) ?? Data())
    }
}
