import Foundation
import Logging
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
            e.remote = RemoteInfo(ino: f.record.inode, etag: f.record.etag)
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
        // Otherwise it becomes the block cache's copy of the version just stored (a read after
        // the kernel dropped its pages, or an offline mount, finds it there): a small one is
        // copied into the cache's pack and reused, a larger one moved there.
        guard isKnownUniquelyReferenced(&file) else {
            Glibc.unlink(file.path)
            return
        }
        if (try? file.truncate(to: f.record.size)) != nil, blocks.adopt(etag: f.record.etag, file: file, size: f.record.size) == .moved { return }
        cacheFiles.give(file)
    }

    /// sync: sends what was written before now (open files included, as they are now) and returns
    /// once the server has all of it, or has refused some of it for good.
    /// `progress` gets the queue's totals about twice a second, with only the records that failed.
    /// - Returns: the uploads refused (kept in the queue, listed by `status`); empty when all is stored.
    @discardableResult
    public func sync(progress: (@Sendable (QueueStatus) -> Void)? = nil) async -> [UploadQueue.Failure] {
        func dirty(_ s: State) -> Set<InodeNumber> { Set(s.inodes.values.filter { $0.local?.dirty == true && !$0.unlinked }.map(\.ino)) }
        // A release under way has taken its file's content (clean now) and not yet turned the
        // close's held record into a queued one, which the wait below passes over: it waits for them.
        let (dirtyFirst, takes) = state.withLock { s in (dirty(s), Set(s.takes.keys)) }
        var unrecorded: [UploadQueue.Failure] = []
        func send(_ inodes: Set<InodeNumber>) async {
            for ino in inodes {
                do throws(FSError) {
                    try await submit(ino, onlyIfClosed: false)
                } catch {
                    let path = state.withLock { s in (try? self.location(s, ino).description) ?? "inode \(ino)" }
                    unrecorded.append(UploadQueue.Failure(id: 0, path: path, reason: error.description))
                }
            }
        }
        await send(dirtyFirst)
        await waitForTakes(takes)
        // A take given back (its copy could not be made durable, or the journal refused its
        // record) left its file dirty again, with a held record the wait passes over: sent now,
        // or said. (Files written since the sync began go too.)
        await send(state.withLock { dirty($0) }.subtracting(dirtyFirst))
        let upTo = await queue.lastID
        let failures: [UploadQueue.Failure]
        if let progress {
            let reporter = Task {
                while !Task.isCancelled {
                    progress(await queue.status(listed: .failing(20)))
                    try? await Task.sleep(for: .milliseconds(500))
                }
            }
            failures = await queue.waitUntilDone(upTo: upTo)
            reporter.cancel()
            progress(await queue.status(listed: .failing(20)))
        } else {
            failures = await queue.waitUntilDone(upTo: upTo)
        }
        return unrecorded + failures
    }

    /// Returns once none of these takes (`State.takes`) is still on its way to the journal (each
    /// is recorded or given back at once after an fsync of its copy at most).
    func waitForTakes(_ takes: Set<Int64>) async {
        var pause = Duration.milliseconds(1)
        while state.withLock({ s in takes.contains { s.takes[$0] != nil } }) {
            await Self.nap(pause)
            pause = min(pause * 2, .milliseconds(20))
        }
    }

    /// Sleeps even in a cancelled task (where `Task.sleep` returns at once): a wait that must go on
    /// (a sync asked for by a lock's release, a move's) would otherwise spin.
    static func nap(_ duration: Duration) async {
        await Task.detached { try? await Task.sleep(for: duration) }.value
    }

    /// `stowfs retry`: failed uploads at or under these paths of the mount (all, for none) go again now.
    /// - Returns: how many.
    public func retryFailed(paths: [String]) async throws(FSError) -> Int {
        let locations = try paths.map { p throws(FSError) in try location(ofMountPath: p) }
        return await queue.retryFailed(under: locations)
    }

    public func status() async -> MountStatus {
        let queue = await self.queue.status()
        let (inodes, open) = state.withLock { s in (s.inodes.count, s.handles.count) }
        let bandwidth = configuration.bandwidth.map { BandwidthStatus(up: $0.up.bytesPerSecond, down: $0.down.bytesPerSecond) }
        return MountStatus(
            queue: queue, cache: blocks.statistics, inodes: inodes, openFiles: open, feed: feedStatus, locks: lockStatus, bandwidth: bandwidth,
            localReads: LocalReadStatus(state: readsInPlace ? localBlobs.summary : "off", opened: localBlobs.opened, open: localBlobs.openCount))
    }

    /// `stowfs pause`: no upload starts and those in flight stop (resumable ones keep their offset);
    /// writes still land in the cache and the journal. Files streaming as they are written stop
    /// streaming and go the usual way after their close. `sync` and fsync wait until `resumeUploads`.
    public func pauseUploads() async {
        uploadsPaused.store(true, ordering: .relaxed)
        state.withLock { s in
            for (ino, e) in s.inodes where e.local?.stream != nil {
                var e = e
                stopStream(&e.local!, "uploads paused")
                s.inodes[ino] = e
            }
        }
        await queue.suspend()
        // A resume that overtook this pause on the queue: the flag follows the queue, which decides.
        uploadsPaused.store(await queue.isSuspended, ordering: .relaxed)
    }

    /// `stowfs resume`.
    public func resumeUploads() async {
        uploadsPaused.store(false, ordering: .relaxed)
        await queue.unsuspend()
        uploadsPaused.store(await queue.isSuspended, ordering: .relaxed)
    }

    /// Whether uploads are paused, as the queue has it (the flag streams read may lag a moment).
    public func uploadsArePaused() async -> Bool { await queue.isSuspended }

    /// `stowfs set --bwlimit`: false when the mount was made without limiters to change.
    public func setBandwidth(up: Int64, down: Int64) -> Bool {
        guard let b = configuration.bandwidth else { return false }
        b.set(up: up, down: down)
        logger.info("bandwidth: \(b.description)")
        return true
    }

    /// Stops the background uploads (after `sync`, for a clean unmount).
    public func stop() async {
        settlingMoves.withLock { $0?.cancel() }
        cacheFiles.stop()
        await queue.stop()
    }

    /// After a clean unmount (the queue stopped): what this mount knew is kept for the next one —
    /// the block cache's index (`BlockCache.persist`) and the tree (`writeSnapshot`), so that a
    /// mount made while the server is away can serve them.
    public func keepForNextMount() {
        do {
            try blocks.persist()
        } catch {
            logger.warning("the block cache is not kept for the next mount: \(error)")
        }
        do {
            try writeSnapshot()
        } catch {
            logger.warning("the listings are not kept for the next mount: \(error)")
        }
        do {
            try localBlobs.keep(cacheDirectory: configuration.cacheDirectory)
        } catch {
            logger.warning("the server's blob files read in place are not kept for the next mount: \(error)")
        }
    }

    public func statfs() -> FileSystemStatistics { FileSystemStatistics() }

    /// fsync(2) of a folder: what the journal holds is on disk when this returns — the unlinks,
    /// whose records are not synced one by one (S13a). Everything else a folder's fsync could
    /// promise is made durable when it happens (a create's file at its close, S1; `mkdir`, `rename`,
    /// links on the server).
    public func fsyncdir() throws(FSError) {
        do {
            try queue.makeDurable()
        } catch {
            throw FSError.from(error)
        }
    }
}

/// What `stowfs status` shows.
public struct MountStatus: Codable, Sendable, Equatable {
    public var queue: QueueStatus
    public var cache: BlockCache.Statistics
    public var inodes: Int
    public var openFiles: Int
    /// The change feed (absent from a mount that does not follow one).
    public var feed: FeedStatus?
    /// Locks shared with other mounts (absent in answers of an older stowfs).
    public var locks: LockStatus?
    /// `--bwlimit` in bytes per second, 0 for none (absent in answers of an older stowfs).
    public var bandwidth: BandwidthStatus?
    /// Reads in place from a local stowd's blob files (absent in answers of an older stowfs).
    public var localReads: LocalReadStatus?
}

/// Reads in place (`LocalBlobs`): whether they happen, and how many files were read so.
public struct LocalReadStatus: Codable, Sendable, Equatable {
    /// `on` (asked for, and the server has offered or may), `off` (`--no-local-reads`, or a limit
    /// on the bandwidth down), `not offered` (the server answers with bytes), `paused` (errors).
    public var state: String
    /// Server files opened for reading in place since the mount, and open now.
    public var opened: Int
    public var open: Int
}

public struct BandwidthStatus: Codable, Sendable, Equatable {
    public var up: Int64
    public var down: Int64
}

/// `stowfs discard`: what the server refused is dropped on request, never on its own.
extension StowFileSystem {
    /// Drops the local changes of the files at or under these paths whose upload the server
    /// refused for good: their owed uploads and local copies go, and the mount shows what the
    /// server has (the previous content, or no file if it never had one). A file still open for
    /// writing is left alone (EBUSY).
    /// - Returns: the locations dropped.
    public func discard(paths: [String]) async throws(FSError) -> [String] {
        var dropped: [String] = []
        for p in paths {
            let location = try location(ofMountPath: p)
            for r in await queue.failures(under: [location]) {
                if r.isDeletion {
                    // A delete refused: dropped, the file shows again as the server has it.
                    _ = await queue.cancel(r.id)
                    await deleteDropped(id: r.id, location: r.location)
                } else if let ino = state.withLock({ $0.uploadOwner[r.id] }) {
                    try await lockedInode(ino) { () async throws(FSError) in try await self.discardLocked(ino) }
                } else {
                    // Recovered from the journal and not claimed by an inode yet.
                    _ = await queue.cancel(r.id)
                    state.withLock { s in if s.recovered[r.location]?.id == r.id { s.recovered[r.location] = nil } }
                    Glibc.unlink(r.cacheFile)
                }
                logger.notice("discarded the refused upload of \(r.location) (\(r.lastError ?? "refused"))")
                dropped.append(r.location.description)
            }
        }
        return dropped
    }

    private func discardLocked(_ ino: InodeNumber) async throws(FSError) {
        let owed = try state.withLock { (s: inout State) throws(FSError) -> [Int64] in
            guard let e = s.inodes[ino] else { return [] }
            if let local = e.local, local.writers > 0 { throw FSError.busy }
            return e.owedUploads + (e.local?.heldUpload.map { [$0] } ?? [])
        }
        let place = state.withLock { s in s.inodes[ino].map { ($0.parent, $0.name) } }
        var stored = false
        for id in owed where await cancelUpload(id, ino: ino) != nil { stored = true }
        state.withLock { s in
            for id in owed { s.uploadOwner[id] = nil }
            guard var e = s.inodes[ino] else { return }
            let copy = e.local?.file.path
            e.upload = nil
            e.olderUploads = []
            e.local = nil
            e.pageCacheETag = nil
            e.validUntil = Self.forcedStale
            s.inodes[ino] = e
            if let copy { Glibc.unlink(copy) }
            // Never on the server: the file is gone with its changes.
            if e.remote == nil && !stored { removeName(&s, parent: e.parent, name: e.name, ino: ino) }
        }
        // Not a change the kernel made: it forgets the name, the inode's pages, and the folder's
        // entries it may keep (FOPEN_CACHE_DIR).
        if let (parent, name) = place {
            notifyKernel([.entry(parent: parent, name: FileName(name)), .inode(parent), .inode(ino)])
            await kernelBarrier()
        }
    }
}
