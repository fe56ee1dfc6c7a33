import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The few POSIX calls the blob store needs that NIOFileSystem does not offer (fsync of a folder,
/// a plain rename). Blocking: call them on a thread pool.
enum Posix {
    struct Failure: Error, CustomStringConvertible {
        let call: String
        let path: String
        let errno: Int32
        var description: String { "\(call)(\(path)): \(String(cString: strerror(errno)))" }
    }

    static func check(_ rc: Int32, _ call: String, _ path: String) throws {
        if rc != 0 { throw Failure(call: call, path: path, errno: errno) }
    }

    static func rename(_ from: String, _ to: String) throws {
        try check(Glibc.rename(from, to), "rename", from)
    }

    static func fsync(path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(call: "open", path: path, errno: errno) }
        defer { close(fd) }
        try check(Glibc.fsync(fd), "fsync", path)
    }

    static func fsyncDirectory(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(call: "open", path: path, errno: errno) }
        defer { close(fd) }
        try check(Glibc.fsync(fd), "fsync", path)
    }

    /// Takes an exclusive lock on `path` (created if needed) for as long as the returned descriptor stays open.
    /// - Returns: the descriptor, or nil when another process holds the lock.
    static func lockExclusively(_ path: String) throws -> Int32? {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure(call: "open", path: path, errno: errno) }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            close(fd)
            return nil
        }
        return fd
    }

    /// Writes a small file atomically (temp file, fsync, rename).
    static func writeAtomically(_ path: String, _ contents: String, mode: Int = 0o644) throws {
        let tmp = path + ".tmp"
        guard FileManager.default.createFile(atPath: tmp, contents: Data(contents.utf8), attributes: [.posixPermissions: mode]) else {
            throw Failure(call: "create", path: tmp, errno: errno)
        }
        try fsync(path: tmp)
        try rename(tmp, path)
    }

    /// Creates a folder if missing, and makes its creation durable (fsync of the parent).
    static func makeDirectoryDurably(_ path: String) throws {
        if mkdir(path, 0o755) == 0 {
            try fsyncDirectory((path as NSString).deletingLastPathComponent)
        } else if errno != EEXIST {
            throw Failure(call: "mkdir", path: path, errno: errno)
        }
    }
}
