import CStowSystem
import Foundation
import StorageClient
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The server's blob files this mount reads in place (`MountConfiguration.localReads`): a stowd
/// on this machine that keeps blobs in a local folder gives a version's file path
/// (`ObjectStore.localBlobPath`), and reads of that version come from the file itself — the
/// kernel's `pread` of the server's file, as a passthrough filesystem reads its backing file —
/// instead of through HTTP into the block cache.
///
/// By ETag (a blob file is one version, written once and never changed), with the version's
/// size: a read uses the file only while the file's size is that one (a handle whose version the
/// server replaced reads through HTTP, which says so with a 412). At most `openLimit` open, the
/// least recently used closed first, and one the server removed (collected, `blobGrace` after its
/// version was replaced) closed when next looked at, so that the mount does not keep its disk
/// space; a reply in flight keeps its file open (ARC).
final class LocalBlobs: Sendable {
    struct Open {
        var file: CacheFile
        var size: Int64
        var use: UInt64
    }

    struct State {
        var open: [String: Open] = [:]
        var tick: UInt64 = 0
        /// False once the server answered a file above `StowFileSystem.localReadMinimum` with its
        /// bytes (another machine's, one with `--proxy-downloads` or `--no-local-reads`, blobs in
        /// S3), or gave a path that is not one of its blob files.
        var offered = true
        /// Versions whose path could not be used (not readable here, another size): asked no more.
        var refused: Set<String> = []
        /// Asks or paths that failed since the last that worked: after a few (another user's
        /// folder, a server away or that errs) the mount stops asking for `pause`.
        var failedInARow = 0
        var pausedUntil: ContinuousClock.Instant?
        var opened = 0
        /// The paths of versions read in place, the newest last (at most `keptLimit`): written by a
        /// clean unmount for the next mount, which opens them without asking — also while the
        /// server is away, as the block cache serves what it holds.
        var paths: [String: String] = [:]
        var order: [String] = []
    }

    static let openLimit = 64
    static let keptLimit = 16_384
    static let failuresBeforeGivingUp = 3
    static let pause: Duration = .seconds(60)
    private let state = Mutex(State())
    /// Whether any file is open: read on every FUSE read of a large file, so that a mount whose
    /// server offers no paths pays one atomic load, not the lock and a hash of the ETag.
    private let anyOpen = Atomic<Bool>(false)

    /// The open file of version `etag`, if it is read in place and is `size` bytes.
    func file(etag: String, size: Int64) -> CacheFile? {
        guard anyOpen.load(ordering: .relaxed) else { return nil }
        return state.withLock { s in
            guard let i = s.open.index(forKey: etag), s.open.values[i].size == size else { return nil }
            s.tick += 1
            s.open.values[i].use = s.tick
            let file = s.open.values[i].file
            // Now and then: files the server removed are let go of.
            if s.tick % 4096 == 0 { closeRemoved(&s) }
            return file
        }
    }

    /// Whether asking the server for `etag`'s path may pay.
    func mayAsk(etag: String) -> Bool {
        state.withLock { s in
            if let until = s.pausedUntil {
                guard ContinuousClock.now >= until else { return false }
                s.pausedUntil = nil
            }
            return s.offered && !s.refused.contains(etag)
        }
    }

    /// The server offers no paths (or none this mount can use): asked no more.
    func notOffered() { state.withLock { $0.offered = false } }

    /// An ask that failed (an error, a path that could not be used).
    func failed() {
        state.withLock { s in
            s.failedInARow += 1
            if s.failedInARow >= Self.failuresBeforeGivingUp {
                s.failedInARow = 0
                s.pausedUntil = .now + Self.pause
            }
        }
    }

    /// Opens `path` for reading as version `etag` of `size` bytes: a regular file of exactly that
    /// size, this user's, on a local filesystem — or nil (and the version is not asked for again).
    func open(etag: String, path: String, size: Int64) -> CacheFile? {
        guard let file = Self.openFile(path, size: size) else {
            state.withLock { s in
                if s.refused.count >= 4096 { s.refused = [] }
                s.refused.insert(etag)
            }
            failed()
            return nil
        }
        state.withLock { $0.failedInARow = 0 }
        return adopt(etag: etag, path: path, file: file, size: size)
    }

    /// Version `etag` opened from the path a mount before this one read it at, if it is still
    /// there as it was (a blob file is never changed; one collected is gone). No server is asked.
    func openKept(etag: String, size: Int64) -> CacheFile? {
        guard let path = state.withLock({ $0.paths[etag] }) else { return nil }
        guard let file = Self.openFile(path, size: size) else {
            state.withLock { s in
                s.paths[etag] = nil
                s.order.removeAll { $0 == etag }
            }
            return nil
        }
        return adopt(etag: etag, path: path, file: file, size: size)
    }

    private static func openFile(_ path: String, size: Int64) -> CacheFile? {
        guard HTTPObjectStore.isBlobFilePath(path), let file = try? CacheFile(blob: path), file.isOwnLocalFile(size: size) else { return nil }
        return file
    }

    private func adopt(etag: String, path: String, file: CacheFile, size: Int64) -> CacheFile {
        state.withLock { s in
            if let known = s.open[etag], known.size == size { return known.file }
            s.tick += 1
            s.open[etag] = Open(file: file, size: size, use: s.tick)
            s.opened += 1
            anyOpen.store(true, ordering: .relaxed)
            closeRemoved(&s)
            if s.open.count > Self.openLimit, let oldest = s.open.min(by: { $0.value.use < $1.value.use })?.key {
                s.open[oldest] = nil
            }
            if s.paths.updateValue(path, forKey: etag) == nil {
                s.order.append(etag)
                if s.order.count > Self.keptLimit {
                    let gone = s.order.prefix(s.order.count - Self.keptLimit / 2)
                    for e in gone { s.paths[e] = nil }
                    s.order.removeFirst(gone.count)
                }
            }
            return file
        }
    }

    /// Closes the files the server removed (their versions replaced and collected).
    private func closeRemoved(_ s: inout State) {
        for (etag, o) in s.open where o.file.isRemoved {
            s.open[etag] = nil
            s.paths[etag] = nil
        }
        if s.open.isEmpty { anyOpen.store(false, ordering: .relaxed) }
    }

    static func keptPath(_ cacheDirectory: String) -> String { cacheDirectory + "/local-blobs.json" }

    /// What the last clean unmount kept becomes this mount's (and its file goes, as the tree's does).
    /// Each path is checked as a server's answer is when it is opened (`openFile`).
    func claimKept(cacheDirectory: String) {
        let path = Self.keptPath(cacheDirectory)
        defer { unlink(path) }
        guard let data = FileManager.default.contents(atPath: path),
            let kept = try? JSONDecoder().decode([String: String].self, from: data)
        else { return }
        state.withLock { s in
            for (etag, p) in kept.prefix(Self.keptLimit) where s.paths[etag] == nil {
                s.paths[etag] = p
                s.order.append(etag)
            }
        }
    }

    /// Kept for the next mount (a clean unmount).
    func keep(cacheDirectory: String) throws(FSError) {
        let paths = state.withLock { $0.paths }
        guard !paths.isEmpty else { return }
        let data: Data
        do {
            data = try JSONEncoder().encode(paths)
        } catch {
            throw FSError.io("cannot encode the local blob paths: \(error)")
        }
        try CacheFile.replace(Self.keptPath(cacheDirectory), with: data)
    }

    /// `on`, `not offered` or `paused` (for status).
    var summary: String {
        state.withLock { s in
            if !s.offered { return "not offered" }
            if let until = s.pausedUntil, ContinuousClock.now < until { return "paused" }
            return "on"
        }
    }

    /// Blob files opened so far (for tests and status).
    var opened: Int { state.withLock { $0.opened } }
    /// Blob files open now (for tests).
    var openCount: Int { state.withLock { $0.open.count } }
}
