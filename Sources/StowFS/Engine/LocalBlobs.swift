import CStowSystem
import Foundation
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
/// By ETag (a blob file is one version, written once and never changed), at most `openLimit`
/// open, the least recently used closed first; a reply in flight keeps its file open (ARC).
final class LocalBlobs: Sendable {
    struct State {
        var open: [String: (file: CacheFile, use: UInt64)] = [:]
        var tick: UInt64 = 0
        /// False once the server answered a file above `StowFileSystem.localReadMinimum` with its
        /// bytes: it offers no paths (another machine's, one with `--proxy-downloads`, blobs in S3).
        var offered = true
        /// Versions whose path could not be used (not readable here, another size): asked no more.
        var refused: Set<String> = []
        /// Paths given that could not be used, since the last one that could: after a few, this
        /// mount cannot read the server's files (another user's folder) and stops asking.
        var failedInARow = 0
        var opened = 0
        /// The paths of versions read in place, the newest last (at most `keptLimit`): written by a
        /// clean unmount for the next mount, which opens them without asking — also while the
        /// server is away, as the block cache serves what it holds.
        var paths: [String: String] = [:]
        var order: [String] = []
    }

    static let keptLimit = 16_384

    static let openLimit = 64
    private let state = Mutex(State())

    /// The open file of version `etag`, if it is read in place.
    func file(etag: String) -> CacheFile? {
        state.withLock { s in
            guard let i = s.open.index(forKey: etag) else { return nil }
            s.tick += 1
            s.open.values[i].use = s.tick
            return s.open.values[i].file
        }
    }

    /// Whether asking the server for `etag`'s path may pay.
    func mayAsk(etag: String) -> Bool {
        state.withLock { $0.offered && !$0.refused.contains(etag) }
    }

    func notOffered() { state.withLock { $0.offered = false } }

    /// Opens `path` for reading as version `etag` of `size` bytes: a regular file of exactly that
    /// size, or nil (and the version is not asked for again).
    func open(etag: String, path: String, size: Int64) -> CacheFile? {
        guard let file = Self.openFile(path, size: size) else {
            state.withLock { s in
                if s.refused.count >= 4096 { s.refused = [] }
                s.refused.insert(etag)
                s.failedInARow += 1
                if s.failedInARow >= 3 { s.offered = false }
            }
            return nil
        }
        state.withLock { $0.failedInARow = 0 }
        return adopt(etag: etag, path: path, file: file)
    }

    /// Version `etag` opened from the path a mount before this one read it at, if it is still
    /// there as it was (a blob file is never changed; one collected is gone). No server is asked.
    func openKept(etag: String, size: Int64) -> CacheFile? {
        guard let path = state.withLock({ $0.paths[etag] }) else { return nil }
        guard let file = Self.openFile(path, size: size) else {
            state.withLock { _ = $0.paths.removeValue(forKey: etag) }
            return nil
        }
        return adopt(etag: etag, path: path, file: file)
    }

    private static func openFile(_ path: String, size: Int64) -> CacheFile? {
        guard let file = try? CacheFile(readingOnly: path), file.isRegularFile(size: size) else { return nil }
        return file
    }

    private func adopt(etag: String, path: String, file: CacheFile) -> CacheFile {
        state.withLock { s in
            if let known = s.open[etag]?.file { return known }
            s.tick += 1
            s.open[etag] = (file, s.tick)
            s.opened += 1
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

    static func keptPath(_ cacheDirectory: String) -> String { cacheDirectory + "/local-blobs.json" }

    /// What the last clean unmount kept becomes this mount's (and its file goes, as the tree's does).
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

    /// Blob files opened so far (for tests and status).
    var opened: Int { state.withLock { $0.opened } }
}
