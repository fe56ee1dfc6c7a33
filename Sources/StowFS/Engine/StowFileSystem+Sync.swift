import Foundation
import Synchronization
import StorageClient
import StorageProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Uploads landing, sync, drain, status.
extension StowFileSystem {
    /// The queue stored an upload: the inode becomes remote with the new content (unless it changed again).
    func uploadFinished(_ f: UploadQueue.Finished) {
        // The local copy the server now has, if nothing else uses it: emptied for reuse, after the lock.
        let uploaded: CacheFile? = state.withLock { s -> CacheFile? in
            let owner = s.uploadOwner.removeValue(forKey: f.id)
            s.recovered[f.location] = s.recovered[f.location]?.id == f.id ? nil : s.recovered[f.location]
            guard let ino = owner, var e = s.inodes[ino] else {
                Glibc.unlink(f.cacheFile)
                return nil
            }
            var dropped: CacheFile?
            e.olderUploads.remove(f.id)
            if e.upload == f.id { e.upload = nil }
            if let old = s.byRemote[f.record.inode], old != ino, s.inodes[old]?.hasLocalState == false { s.inodes[old] = nil }
            e.remote = RemoteInfo(ino: f.record.inode, etag: f.record.etag, id: f.record.id)
            e.changedAt = .now
            s.byRemote[f.record.inode] = ino
            if let local = e.local, !local.dirty, local.writers == 0, e.upload == nil, e.olderUploads.isEmpty, local.heldUpload == nil, e.submitting == 0 {
                // The server has exactly what we have: the page cache (and the block cache) take it from here.
                if local.file.path == f.cacheFile { dropped = local.file }
                e.local = nil
                e.pageCacheETag = f.record.etag
                e.attributes.size = UInt64(f.record.size)
                e.validUntil = .now + configuration.attributeTTL
            }
            if e.local?.file.path != f.cacheFile && dropped == nil { Glibc.unlink(f.cacheFile) }
            s.inodes[ino] = e
            return dropped
        }
        guard var file = consume uploaded else { return }
        // A read still splicing from it holds another reference: then it is deleted, as before.
        if isKnownUniquelyReferenced(&file) { cacheFiles.give(file) } else { Glibc.unlink(file.path) }
    }

    /// sync: sends what was written before now (open files included, as they are now) and returns
    /// once the server has all of it.
    public func sync(progress: (@Sendable (QueueStatus) -> Void)? = nil) async {
        let dirty: [InodeNumber] = state.withLock { s in s.inodes.values.filter { $0.local?.dirty == true && !$0.unlinked }.map(\.ino) }
        for ino in dirty { await submit(ino, onlyIfClosed: false) }
        let upTo = await queue.lastID
        if let progress {
            let reporter = Task {
                while !Task.isCancelled {
                    progress(await queue.status())
                    try? await Task.sleep(for: .milliseconds(500))
                }
            }
            await queue.waitUntilDone(upTo: upTo)
            reporter.cancel()
            progress(await queue.status())
        } else {
            await queue.waitUntilDone(upTo: upTo)
        }
    }

    public func status() async -> MountStatus {
        let queue = await self.queue.status()
        let (inodes, open) = state.withLock { s in (s.inodes.count, s.handles.count) }
        return MountStatus(queue: queue, cache: blocks.statistics, inodes: inodes, openFiles: open)
    }

    /// Stops the background uploads (after `sync`, for a clean unmount).
    public func stop() async { await queue.stop() }

    public func statfs() -> FileSystemStatistics { FileSystemStatistics() }
}

/// What `stowfs status` shows.
public struct MountStatus: Codable, Sendable, Equatable {
    public var queue: QueueStatus
    public var cache: BlockCache.Statistics
    public var inodes: Int
    public var openFiles: Int
}
