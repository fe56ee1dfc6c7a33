import Foundation
import Logging
import NIOCore
import StorageClient
import StorageProtocol
import StowFS
import Testing

let ns = try! Namespace("test")

/// An engine over a store (in memory by default) with its own cache folder.
struct Harness: Sendable {
    let fs: StowFileSystem
    let store: any ObjectStore
    let cacheDirectory: String

    static func make(
        store: (any ObjectStore)? = nil, cacheDirectory: String? = nil, configure: (inout MountConfiguration) -> Void = { _ in }
    ) async throws -> Harness {
        let dir = cacheDirectory ?? (FileManager.default.temporaryDirectory.path + "/stowfs-engine-\(UUID().uuidString.prefix(8))")
        let store = store ?? InMemoryObjectStore(namespaces: [ns])
        var config = MountConfiguration(scope: .namespace(ns), cacheDirectory: dir)
        config.blockSize = 4096
        config.cacheSize = 1 << 20
        config.uploadParallelism = 4
        configure(&config)
        var logger = Logger(label: "engine-test")
        logger.logLevel = .critical
        let fs = try await StowFileSystem(configuration: config, store: store, logger: logger)
        await fs.start()
        return Harness(fs: fs, store: store, cacheDirectory: dir)
    }

    /// Stops uploads and removes the cache folder.
    func close(keepCache: Bool = false) async {
        await fs.stop()
        if !keepCache { try? FileManager.default.removeItem(atPath: cacheDirectory) }
    }

    /// The inode of a path, following lookups from the root.
    func resolve(_ path: String) async throws -> InodeNumber {
        var ino = InodeNumber.root
        for name in path.split(separator: "/") { ino = try await fs.lookup(parent: ino, name: String(name)).ino }
        return ino
    }

    func parentAndName(_ path: String) async throws -> (InodeNumber, String) {
        let parts = path.split(separator: "/").map(String.init)
        let parent = try await resolve(parts.dropLast().joined(separator: "/"))
        return (parent, parts.last!)
    }

    /// Creates (or truncates) a file and writes `bytes`, like `cat > path`.
    @discardableResult
    func write(_ path: String, _ bytes: [UInt8], mode: UInt32 = 0o644) async throws -> InodeNumber {
        let (parent, name) = try await parentAndName(path)
        let ino: InodeNumber
        let handle: UInt64
        if let existing = try? await fs.lookup(parent: parent, name: name) {
            ino = existing.ino
            handle = try await fs.open(ino, write: true, truncate: true).handle
        } else {
            let (entry, opened) = try fs.create(parent: parent, name: name, mode: mode, caller: .root)
            ino = entry.ino
            handle = opened.handle
        }
        _ = try fs.write(ino, handle: handle, offset: 0, bytes: bytes)
        try await fs.flush(ino, handle: handle)
        await fs.release(ino, handle: handle)
        return ino
    }

    func write(_ path: String, _ text: String) async throws { try await write(path, Array(text.utf8)) }

    /// Appends, like `>>`.
    func append(_ path: String, _ text: String) async throws {
        let ino = try await resolve(path)
        let h = try await fs.open(ino, write: true, truncate: false).handle
        let size = try await fs.getattr(ino).size
        _ = try fs.write(ino, handle: h, offset: Int64(size), bytes: Array(text.utf8))
        try await fs.flush(ino, handle: h)
        await fs.release(ino, handle: h)
    }

    /// The whole content as the filesystem reads it.
    func read(_ path: String) async throws -> [UInt8] {
        let ino = try await resolve(path)
        let size = Int(try await fs.getattr(ino).size)
        let h = try await fs.open(ino, write: false, truncate: false).handle
        defer { Task { await fs.release(ino, handle: h) } }
        var out: [UInt8] = []
        var offset = 0
        while offset < size {
            let n = min(size - offset, 10_000)
            for seg in try await fs.read(ino, handle: h, offset: Int64(offset), size: n) {
                out += seg.file.read(at: seg.offset, length: seg.length)
            }
            offset += n
        }
        return out
    }

    func text(_ path: String) async throws -> String { String(decoding: try await read(path), as: UTF8.self) }

    /// The content the server holds.
    func storedBytes(_ path: String) async throws -> [UInt8] {
        let url = try await store.signedURLs(ns, [try StoragePath(path)], expiry: 60)[0].signedUrl
        return Array(try await store.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView)
    }

    func stored(_ path: String) async throws -> String {
        let url = try await store.signedURLs(ns, [try StoragePath(path)], expiry: 60)[0].signedUrl
        return String(buffer: try await store.read(url: url, range: nil, ifMatch: nil).bytes)
    }

    func storedRecord(_ path: String) async throws -> FileRecord { try await store.record(ns, try StoragePath(path)) }

    func names(_ path: String) async throws -> [String] {
        let ino = try await resolve(path)
        let h = try fs.opendir(ino)
        defer { fs.releasedir(ino, handle: h) }
        return try await fs.readdir(ino, handle: h, offset: 0, plus: false).map(\.name).filter { $0 != "." && $0 != ".." }
    }

    func mkdir(_ path: String) async throws {
        let (parent, name) = try await parentAndName(path)
        _ = try await fs.mkdir(parent: parent, name: name, mode: 0o755, caller: .root)
    }

    func rename(_ from: String, _ to: String, noReplace: Bool = false, exchange: Bool = false) async throws {
        let (p1, n1) = try await parentAndName(from)
        let (p2, n2) = try await parentAndName(to)
        try await fs.rename(parent: p1, name: n1, newParent: p2, newName: n2, noReplace: noReplace, exchange: exchange)
    }

    func unlink(_ path: String) async throws {
        let (parent, name) = try await parentAndName(path)
        try await fs.unlink(parent: parent, name: name)
    }

    func xattr(_ path: String, _ name: String) async throws -> String {
        String(decoding: try await fs.getxattr(try await resolve(path), name: name), as: UTF8.self)
    }

    func setXattr(_ path: String, _ name: String, _ value: String) async throws {
        try await fs.setxattr(try await resolve(path), name: name, value: Array(value.utf8), flag: .any)
    }
}

/// Runs `body` with a fresh harness that is always closed.
func withEngine(
    store: (any ObjectStore)? = nil, configure: (inout MountConfiguration) -> Void = { _ in }, _ body: (Harness) async throws -> Void
) async throws {
    let h = try await Harness.make(store: store, configure: configure)
    do {
        try await body(h)
    } catch {
        await h.close()
        throw error
    }
    await h.close()
}

func expectFS(_ expected: FSError, _ body: () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) async {
    do {
        try await body()
        Issue.record("expected \(expected), but it succeeded", sourceLocation: sourceLocation)
    } catch let e as FSError {
        #expect(e == expected, sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(expected), got \(error)", sourceLocation: sourceLocation)
    }
}
