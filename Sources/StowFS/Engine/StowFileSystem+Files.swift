import NIOCore
import Foundation
import Logging
import Synchronization
import StorageClient
import StorageProtocol
#if canImport(Glibc)
import Glibc
#endif

/// create, open, read, write, flush, release, fsync.
extension StowFileSystem {
    /// Creates a regular file (local until its upload) and opens it for writing.
    /// Synchronous (no server, no queue): FuseKit answers it on the FUSE thread.
    public func create(parent: InodeNumber, name: String, mode: UInt32, caller: Caller) throws(FSError) -> (Entry, OpenedFile) {
        guard let made = try create(parent: parent, name: name, mode: mode, caller: caller, exclusive: false) else { throw FSError.io("unreachable") }
        return made
    }

    /// Whether a create must wait for uploads first (`waitForDescriptors`): cheap, asked by
    /// FuseKit before it answers a create on its own thread.
    public var mustWaitForDescriptors: Bool { heldDescriptors >= cacheFileLimit }

    /// Cache files open, but for the pool's spare ones (a create takes one of those, and opens none).
    var heldDescriptors: Int { CacheFile.openCount.load(ordering: .relaxed) - cacheFiles.count }

    /// Waits until fewer than `cacheFileLimit` cache files are open: uploads that land close
    /// theirs. Fails with EIO, and a reason in the log, if none closes for two minutes (the server
    /// away, or uploads paused, while files keep coming).
    public func waitForDescriptors() async throws(FSError) {
        var lowest = heldDescriptors
        guard lowest >= cacheFileLimit else { return }
        let warn = descriptorWarning.withLock { last in
            defer { if last.map({ .now - $0 > .seconds(10) }) ?? true { last = .now } }
            return last.map { .now - $0 > .seconds(10) } ?? true
        }
        if warn {
            logger.warning("\(lowest) files written here wait for their upload, each holding a descriptor (at most \(cacheFileLimit)): new files wait until some are stored")
        }
        var progressed = ContinuousClock.now
        while true {
            let open = heldDescriptors
            if open < cacheFileLimit { return }
            if open < lowest {
                lowest = open
                progressed = .now
            }
            if ContinuousClock.now - progressed > Self.descriptorWaitLimit {
                throw FSError.io("\(open) files written here wait for their upload, each holding a descriptor (at most \(cacheFileLimit)), and none was stored for \(Self.descriptorWaitLimit)")
            }
            do {
                try await Task.sleep(for: .milliseconds(10))
            } catch {
                throw FSError.interrupted
            }
        }
    }

    static let descriptorWaitLimit: Duration = .seconds(120)

    /// `O_CREAT|O_EXCL` decided here, without a round trip, in a folder whose exclusive creates
    /// this mount holds: one it made, whose `names` lease it took (`takeNamesLease`), while the
    /// change feed (which brings a recall) is connected. That is what `cp -r`, `tar x` and `rsync`
    /// create into, and each uses O_EXCL for every file it makes. nil elsewhere, or once a recall
    /// came: the server decides then (`createExclusive`). Checked under the state lock, with the
    /// file made in the same step, so that a recall's `sync` sees every file made here.
    public func createExclusiveHere(parent: InodeNumber, name: String, mode: UInt32, caller: Caller) throws(FSError) -> (Entry, OpenedFile)? {
        guard feed.value.withLock({ $0.status.connected }) else { return nil }
        return try create(parent: parent, name: name, mode: mode, caller: caller, exclusive: true)
    }

    private func create(parent: InodeNumber, name: String, mode: UInt32, caller: Caller, exclusive: Bool) throws(FSError) -> (Entry, OpenedFile)? {
        try Self.validate(name: name)
        guard !configuration.readOnly else { throw FSError.readOnly }
        let file = try cacheFiles.take()
        // Every throw below comes before the copy is stored: it goes back to the pool.
        do throws(FSError) {
            return try state.withLock { (s: inout State) throws(FSError) -> (Entry, OpenedFile)? in
                // A copy of the folder's entry must not live past here: it shares the folder's
                // `children`, and adding the new name below would then copy all of them (a create in a
                // folder of 100,000 files copied 100,000 names).
                do {
                    let p = try inode(s, parent)
                    guard p.kind == .directory else { throw FSError.notADirectory }
                    if exclusive {
                        guard let dir = p.directory, dir.madeHere, dir.complete else {
                            cacheFiles.give(file)
                            return nil
                        }
                        if let known = dir.children[FileName(name)], let k = s.inodes[known], !k.unlinked { throw FSError.exists }
                    }
                }
                let location = try child(try self.location(s, parent), name)
                guard location.namespace != nil, !location.path.isRoot else { throw FSError.notPermitted }
                let ino = newLocalInode(&s)
                let now = TimeSpec.now
                var e = InodeEntry(
                    ino: ino, parent: parent, name: name,
                    attributes: FileAttributes(
                        ino: ino, kind: .file, mode: mode & 0o7777, uid: caller.uid, gid: caller.gid, size: 0, nlink: 1, atime: now, mtime: now,
                        ctime: now),
                    validUntil: .now)
                e.meta.contentType = ContentTypes.infer(fileName: name) == ContentTypes.fallback ? nil : ContentTypes.infer(fileName: name)
                e.local = LocalContent(file: file, size: 0, dirty: true, writers: 1, frozen: false, heldUpload: nil)
                e.local?.appendOnly = true
                e.lookups = 1
                e.openHandles = 1
                e.changedAt = .now
                if let old = s.inodes[parent]?.directory?.children[name], var o = s.inodes[old] {
                    // Created over a name we knew (the kernel thought it free): that file is replaced.
                    o.unlinked = true
                    s.inodes[old] = o
                }
                s.inodes[ino] = e
                s.inodes[parent]?.directory?.children[name] = ino
                s.inodes[parent]?.directory?.negative[name] = nil
                touchDirectory(&s, parent)
                let h = addHandle(&s, ino, writable: true, etag: nil)
                return (entry(e), OpenedFile(handle: h, keepCache: true))
            }
        } catch {
            cacheFiles.give(file)
            throw error
        }
    }

    /// `O_CREAT|O_EXCL`: the name is made on the server when it is called — an empty file,
    /// refused there if the name exists — so that of several mounts creating one name exactly one
    /// succeeds, and lock files (`git`'s `index.lock`, `lockfile`, `set -C`) work across mounts.
    /// The file is then a stored file open for writing; what is written goes the usual way.
    ///
    /// A create whose answer was lost (a replica that died answering) is looked for: a file of
    /// that name with this create's exact mtime (nanoseconds, set by this call), size 0 and owner
    /// is taken as this create's own.
    public func createExclusive(parent: InodeNumber, name: String, mode: UInt32, caller: Caller) async throws(FSError) -> (Entry, OpenedFile) {
        try Self.validate(name: name)
        guard !configuration.readOnly else { throw FSError.readOnly }
        let location = try state.withLock { (s: inout State) throws(FSError) -> Location in
            let p = try inode(s, parent)
            guard p.kind == .directory else { throw FSError.notADirectory }
            // A file of this mount not stored yet: the server cannot know it.
            if let known = p.directory?.children[FileName(name)], let k = s.inodes[known], !k.unlinked, k.hasLocalState { throw FSError.exists }
            return try child(try self.location(s, parent), name)
        }
        guard let ns = location.namespace, !location.path.isRoot else { throw FSError.notPermitted }
        let now = TimeSpec.now
        let inferred = ContentTypes.infer(fileName: name)
        let request = StartUploadRequest(
            fileName: location.path.string, contentType: inferred == ContentTypes.fallback ? nil : inferred, size: 0,
            params: UploadParams(
                ifNoneMatch: "*", mode: mode & 0o7777, uid: caller.uid, gid: caller.gid, mtimeNs: now.nanoseconds, atimeNs: now.nanoseconds,
                ctimeNs: now.nanoseconds))
        if exclusiveOffline.withLock({ $0.map { $0 > .now } ?? false }) {
            // The server did not answer the last one: decided here, as S12 allows any create.
            return try create(parent: parent, name: name, mode: mode, caller: caller)
        }
        // A file deleted here under this name may still be on the server: the server decides after that delete.
        try await settleDeletes(at: location)
        let record: FileRecord
        do {
            record = try await Self.within(Self.exclusiveCreateWait) { [store] in try await store.uploadDirect(ns, request, from: .bytes(ByteBuffer())) }
        } catch let e as StorageError where e.kind == .preconditionFailed || e.kind == .exists || e.kind == .isADirectory {
            forgetName(parent: parent, name: name)
            throw FSError.exists
        } catch {
            // The answer may have been lost after the server made the file: is it this create's?
            let found: Result<FileRecord, any Error>
            do {
                found = .success(try await Self.within(.seconds(2)) { [store] in try await store.record(ns, location.path) })
            } catch {
                found = .failure(error)
            }
            switch found {
            case .success(let made) where made.kind == .file && made.size == 0 && made.mtimeNs == now.nanoseconds && made.uid == caller.uid:
                record = made
            case .success:
                // Another client's.
                forgetName(parent: parent, name: name)
                throw FSError.exists
            case .failure(let e as StorageError) where e.kind == .unavailable || e.kind == .cancelled:
                guard let first = error as? StorageError, first.kind == .unavailable || first.kind == .cancelled else { throw FSError.from(error) }
                // No answer in time (the server is away, or frozen): the file is made here, as
                // any create is while the server is away (S12) — exclusive on this machine only.
                logger.warning("exclusive create of \(location) decided here only: the server did not answer (\(first))")
                exclusiveOffline.withLock { $0 = .now + .seconds(30) }
                return try create(parent: parent, name: name, mode: mode, caller: caller)
            case .failure:
                throw FSError.from(error)
            }
        }
        exclusiveOffline.withLock { $0 = nil }
        let file = try cacheFiles.take()
        // The folder gone meanwhile: the copy goes back to the pool.
        do throws(FSError) {
            return try state.withLock { (s: inout State) throws(FSError) -> (Entry, OpenedFile) in
                guard s.inodes.contains(parent) else { throw FSError.notFound }
                if let old = s.inodes[parent]?.directory?.children[FileName(name)], var o = s.inodes[old], o.remote?.ino != record.inode {
                    // A file we knew under this name is gone from the server (this create succeeded).
                    o.unlinked = true
                    s.inodes[old] = o
                }
                let ino = upsert(&s, record, parent: parent, name: name)
                var e = s.inodes[ino]!
                // The server has it as it is (empty): nothing to send unless it is written.
                e.local = LocalContent(file: file, size: 0, dirty: false, writers: 1, frozen: false, heldUpload: nil)
                e.local?.appendOnly = true
                e.lookups += 1
                e.openHandles += 1
                e.changedAt = .now
                s.inodes[ino] = e
                touchDirectory(&s, parent)
                let h = addHandle(&s, ino, writable: true, etag: nil)
                return (entry(e), OpenedFile(handle: h, keepCache: true))
            }
        } catch {
            cacheFiles.give(file)
            throw error
        }
    }

    /// How long an exclusive create waits for the server before it decides here.
    static let exclusiveCreateWait: Duration = .seconds(10)

    /// `body`, or `StorageError.unavailable` when it takes longer than `limit` (it is cancelled).
    static func within<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else {
                throw StorageError(.unavailable, "no answer within \(limit)")
            }
            return value
        }
    }

    /// After a create found the name taken on the server: this mount's negative entry for it (and
    /// the kernel's) is wrong; the next lookup asks.
    func forgetName(parent: InodeNumber, name: String) {
        state.withLock { s in
            s.inodes[parent]?.directory?.negative[FileName(name)] = nil
            s.inodes[parent]?.directory?.expire()
            s.inodes[parent]?.directory?.complete = false
        }
        notifyKernel([.entry(parent: parent, name: FileName(name))])
    }

    func touchDirectory(_ s: inout State, _ ino: InodeNumber) {
        let now = TimeSpec.now
        s.inodes[ino]?.attributes.mtime = now
        s.inodes[ino]?.attributes.ctime = now
    }

    /// Opens a file. Writing to a stored file without `truncate` first brings its content here.
    public func open(_ ino: InodeNumber, write: Bool, truncate: Bool) async throws(FSError) -> OpenedFile {
        if let opened = try openHere(ino, write: write, truncate: truncate) { return opened }
        // Close-to-open: attributes that expired (the TTL ran out, another client's change came
        // through the feed, a lock was taken) are asked again, so the file is read in the version
        // the server has now, not the one cached.
        if state.withLock({ s in s.inodes[ino].map { Self.expired($0) } ?? false }) { _ = try await getattr(ino) }
        if let opened = try openHere(ino, write: write, truncate: truncate, revalidate: false) { return opened }
        // The copy brought here can go again before the open holds it (a copy the server has
        // exactly is dropped when an upload of it lands, or the feed names it): brought again.
        for _ in 0..<3 {
            try await materialize(ino)
            if let opened = try openLocked(ino, write: write, truncate: truncate) { return opened }
        }
        throw FSError.io("the content of this file could not be brought here")
    }

    /// A stored file with nothing local whose attributes (and so its ETag) may be out of date.
    static func expired(_ e: InodeEntry) -> Bool {
        e.kind == .file && !e.hasLocalState && !e.unlinked && e.remote != nil && e.validUntil <= .now
    }

    /// Opens without waiting for anything, or answers nil when the file's content must come from
    /// the server first (writing to a stored file without truncating it). FuseKit calls it on the
    /// FUSE thread.
    /// `revalidate`: nil also when the attributes expired (the server is asked first).
    public func openHere(_ ino: InodeNumber, write: Bool, truncate: Bool, revalidate: Bool = true) throws(FSError) -> OpenedFile? {
        if write && configuration.readOnly { throw FSError.readOnly }
        let needsContent = try state.withLock { (s: inout State) throws(FSError) -> Bool in
            let e = try inode(s, ino)
            guard e.kind != .directory else { throw FSError.isADirectory }
            return write && e.local == nil && !truncate && e.kind == .file || revalidate && Self.expired(e)
        }
        if needsContent { return nil }
        return try openLocked(ino, write: write, truncate: truncate)
    }

    /// Opens, or answers nil when writing needs the file's content and there is no local copy: the
    /// check and the taking of the copy are one step (checked apart, the copy could go between the
    /// two when the file's upload landed: `open` answered EIO, found by `ModelTests` in racy mode).
    private func openLocked(_ ino: InodeNumber, write: Bool, truncate: Bool) throws(FSError) -> OpenedFile? {
        let newFile: CacheFile? = write && truncate ? try cacheFiles.take() : nil
        // Every throw below comes before the new copy is stored: it goes back to the pool.
        do throws(FSError) {
            return try state.withLock { (s: inout State) throws(FSError) -> OpenedFile? in
                var e = try inode(s, ino)
                if write {
                    // A second writer may write anywhere: no stream.
                    if e.local != nil { stopStream(&e.local!, "a second writer") }
                    if let newFile {
                        let writers = e.local?.writers ?? 0
                        let replaced = e.local?.replaced
                        e.local = LocalContent(file: newFile, size: 0, dirty: true, writers: writers, frozen: false, heldUpload: e.local?.heldUpload)
                        // New content, the same path: its upload still replaces what the server keeps there.
                        e.local?.replaced = replaced
                        e.local?.appendOnly = writers == 0
                        e.attributes.size = 0
                        e.attributes.mtime = .now
                        e.attributes.ctime = .now
                    } else if e.local == nil {
                        return nil
                    }
                    try ensureWritable(&e)
                    e.local!.writers += 1
                }
                e.openHandles += 1
                let keep = e.local != nil || (e.remote != nil && e.pageCacheETag == e.remote?.etag)
                if e.local == nil { e.pageCacheETag = e.remote?.etag }
                s.inodes[ino] = e
                let h = addHandle(&s, ino, writable: write, etag: e.local == nil ? e.remote?.etag : nil)
                return OpenedFile(handle: h, keepCache: keep)
            }
        } catch {
            if let newFile { cacheFiles.give(newFile) }
            throw error
        }
    }

    /// A new handle of an open file, with the sequential reader's read-ahead.
    func addHandle(_ s: inout State, _ ino: InodeNumber, writable: Bool, etag: String?) -> UInt64 {
        let h = s.nextHandle
        s.nextHandle += 1
        s.handles[h] = Handle(ino: ino, writable: writable, etag: etag, readAhead: ReadAhead(maxWindow: configuration.maxReadAheadBlocks), listing: nil)
        return h
    }

    /// Makes the local copy writable: a copy of a snapshot that went to the upload queue.
    func ensureWritable(_ e: inout InodeEntry) throws(FSError) {
        guard var local = e.local, local.frozen else { return }
        local.file = try local.file.copy(to: newCacheFilePath(), length: local.size)
        local.frozen = false
        e.local = local
    }

    /// Downloads a stored file's whole content into a local copy. A file that got a new version
    /// meanwhile (another client wrote it) is asked about again and the new version downloaded.
    func materialize(_ ino: InodeNumber) async throws(FSError) {
        for attempt in 0..<3 {
            do throws(FSError) {
                let (file, size) = try await download(ino)
                state.withLock { s in
                    guard var e = s.inodes[ino], e.local == nil else { return }
                    e.local = LocalContent(file: file, size: size, dirty: false, writers: 0, frozen: false, heldUpload: nil)
                    s.inodes[ino] = e
                }
                return
            } catch {
                guard case .io(let why) = error, why.hasPrefix(Self.newVersion), attempt < 2 else { throw error }
                expire(ino)
                _ = try await getattr(ino)
            }
        }
    }

    static let newVersion = "changed: "

    /// Marks an inode's attributes as expired, so that the next use asks the server.
    func expire(_ ino: InodeNumber) {
        state.withLock { s in s.inodes[ino]?.validUntil = Self.forcedStale }
    }

    /// The content of the version the inode names now, in a new cache file, and its size.
    private func download(_ ino: InodeNumber) async throws(FSError) -> (CacheFile, Int64) {
        let (location, etag, size) = try state.withLock { (s: inout State) throws(FSError) -> (Location, String?, Int64) in
            let e = try inode(s, ino)
            return (try self.location(s, ino), e.remote?.etag, Int64(e.attributes.size))
        }
        return (try await download(location, etag: etag, size: size), size)
    }

    private func download(_ location: Location, etag: String?, size: Int64) async throws(FSError) -> CacheFile {
        let file = try CacheFile(path: newCacheFilePath(), truncate: true)
        // From the local stowd's own blob file, by the kernel, when it offers it (a copy through
        // HTTP otherwise, or if the two are not on one filesystem).
        if size > 0, let etag, let blob = try await localBlob(location, etag: etag, fileSize: size) {
            if file.copyData(from: blob, size: size) {
                try file.truncate(to: size)
                return file
            }
            try file.truncate(to: 0)
        }
        if size > 0, let etag {
            try await fetchStream(location, etag: etag, range: 0..<size) { $0 } write: { chunk, offset throws(FSError) in
                // Zeros are left as a hole (the file is cut to its size below): a file extended by
                // truncate takes no disk here either.
                if chunk.readableBytesView.allSatisfy({ $0 == 0 }) { return }
                try file.write(chunk.readableBytesView, at: offset)
            }
        }
        try file.truncate(to: size)
        return file
    }

    /// After a lock was taken: a local copy of the locked file that holds nothing of its own (made
    /// by an open for writing before the lock, nothing written yet) may be older than the server's
    /// file — the previous holder's last write. It is brought up to date, so the holder reads and
    /// changes the version the lock protects. `current`: the file's etag as the grant found it
    /// (`LockResponse.etag`); a copy of that version needs no question to the server.
    func refreshCleanCopy(_ ino: InodeNumber, current: String? = nil) async throws(FSError) {
        try await lockedInode(ino) { () async throws(FSError) in
            for attempt in 0..<3 {
                let target = try state.withLock { (s: inout State) throws(FSError) -> (Location, RemoteInfo)? in
                    guard let e = s.inodes[ino], let local = e.local, e.kind == .file, let remote = e.remote, !e.unlinked,
                        !local.dirty, local.stream == nil, local.heldUpload == nil, !local.frozen, e.upload == nil, e.olderUploads.isEmpty,
                        e.submitting == 0
                    else { return nil }
                    return (try self.location(s, ino), remote)
                }
                guard let (location, remote) = target, let ns = location.namespace else { return }
                if attempt == 0, let current, current == remote.etag { return }
                let record = try await self.remote { try await store.record(ns, location.path) }
                // The same file, in the version this copy is of: nothing to do. Another file under
                // the name (replaced by a rename): the descriptor keeps the file it opened.
                guard record.inode == remote.ino, record.etag != remote.etag, record.kind == .file else { return }
                do throws(FSError) {
                    let file = try await download(location, etag: record.etag, size: record.size)
                    let old = state.withLock { s -> CacheFile? in
                        guard var e = s.inodes[ino], var local = e.local, !local.dirty, e.remote == remote else { return nil }
                        let old = local.file
                        local.file = file
                        local.size = record.size
                        local.changes &+= 1
                        e.local = local
                        e.attributes = attributes(record, ino: ino)
                        e.remote = RemoteInfo(ino: record.inode, etag: record.etag)
                        e.meta = FileMeta(tags: record.tags, metadata: record.metadata, contentType: record.contentType, isPublic: record.isPublic, target: record.target)
                        e.validUntil = .now + configuration.attributeTTL
                        s.inodes[ino] = e
                        return old
                    }
                    guard let old else {
                        giveBack(file)
                        return
                    }
                    giveBack(old)
                    notifyKernel([.inode(ino)])
                    await kernelBarrier()
                    return
                } catch {
                    guard case .io(let why) = error, why.hasPrefix(Self.newVersion), attempt < 2 else { throw error }
                }
            }
        }
    }

    // MARK: - Reads

    /// Where the bytes of a read are, if they are here already (a local copy, or cached blocks).
    /// Synchronous, for FuseKit to answer without leaving the FUSE thread.
    public func readCached(_ ino: InodeNumber, handle: UInt64, offset: Int64, size: Int) -> [FileSegment]? {
        let plan = state.withLock { s -> (local: FileSegment?, etag: String?, fileSize: Int64, prefetch: Int)? in
            guard let e = s.inodes[ino], var h = s.handles[handle] else { return nil }
            let fileSize = Int64(e.attributes.size)
            let prefetch = h.readAhead.read(offset: offset, length: size)
            s.handles[handle] = h
            if let local = e.local {
                let length = max(0, min(Int64(size), local.size - offset))
                return (FileSegment(file: local.file, offset: offset, length: Int(length)), nil, fileSize, 0)
            }
            return (nil, h.etag ?? e.remote?.etag, fileSize, prefetch)
        }
        guard let plan else { return nil }
        if let local = plan.local { return local.length > 0 ? [local] : [] }
        guard let etag = plan.etag else { return nil }
        let end = min(plan.fileSize, offset + Int64(size))
        if end <= offset { return [] }
        if plan.fileSize > Self.localReadMinimum, let blob = localBlobs.file(etag: etag, size: plan.fileSize), readsInPlace {
            return [FileSegment(file: blob, offset: offset, length: Int(end - offset))]
        }
        guard let segment = blocks.segment(etag: etag, range: offset..<end) else { return nil }
        if plan.prefetch > 0 { prefetch(ino, etag: etag, after: end, fileSize: plan.fileSize, blocks: plan.prefetch) }
        return [segment]
    }

    /// Where the bytes of a read are, fetching missing blocks first.
    public func read(_ ino: InodeNumber, handle: UInt64, offset: Int64, size: Int) async throws(FSError) -> [FileSegment] {
        if let ready = readCached(ino, handle: handle, offset: offset, size: size) { return ready }
        var attempt = 0
        while true {
            let (location, etag, fileSize, window) = try state.withLock { (s: inout State) throws(FSError) -> (Location, String, Int64, Int) in
                let e = try inode(s, ino)
                guard let h = s.handles[handle] else { throw FSError.badHandle }
                guard let etag = h.etag ?? e.remote?.etag else { throw FSError.io("no content for this file") }
                return (try self.location(s, ino), etag, Int64(e.attributes.size), h.readAhead.window)
            }
            let end = min(fileSize, offset + Int64(size))
            if end <= offset { return [] }
            do throws(FSError) {
                if let blob = try await localBlob(location, etag: etag, fileSize: fileSize) {
                    return [FileSegment(file: blob, offset: offset, length: Int(end - offset))]
                }
                try await ensureBlocks(location, etag: etag, range: offset..<end, fileSize: fileSize)
                if window > 0 { prefetch(ino, etag: etag, after: end, fileSize: fileSize, blocks: window) }
                if let segment = blocks.segment(etag: etag, range: offset..<end) { return [segment] }
                throw FSError.io("blocks were evicted while being read; the cache is too small for this read")
            } catch {
                guard case .io(let why) = error, why.hasPrefix("changed:"), attempt == 0 else { throw error }
                // The file changed on the server: read the new version, from scratch, never a mix.
                attempt += 1
                try await refreshAfterChange(ino)
                state.withLock { s in s.handles[handle]?.etag = s.inodes[ino]?.remote?.etag }
            }
        }
    }

    /// Files read from the server's blob file when it offers one: above the largest a server keeps
    /// inside its database (`inlineCeiling`), which has no file. Smaller ones come through the
    /// block cache, where a file written here already is.
    static let localReadMinimum: Int64 = 1 << 20

    /// Version `etag`'s blob file, read in place (`LocalBlobs`), when the server is on this machine
    /// and gives its path; nil otherwise (the bytes then come through HTTP, as always). A version
    /// that is no longer the file's is a `changed:` error, as for a fetch.
    func localBlob(_ location: Location, etag: String, fileSize: Int64) async throws(FSError) -> CacheFile? {
        guard readsInPlace, fileSize > Self.localReadMinimum else { return nil }
        if let open = localBlobs.file(etag: etag, size: fileSize) { return open }
        if let kept = localBlobs.openKept(etag: etag, size: fileSize) { return kept }
        guard localBlobs.mayAsk(etag: etag) else { return nil }
        let url = try await signedURL(location)
        let path: String?
        do {
            path = try await store.localBlobPath(url: url, etag: etag)
        } catch let e as StorageError where e.kind == .preconditionFailed {
            throw FSError.io(Self.newVersion + "\(location) has a new version")
        } catch let e as StorageError where e.kind == .protocolViolation {
            // A path that is not one of its blob files: this server's paths are not used again.
            logger.warning("reads in place turned off: \(e)")
            localBlobs.notOffered()
            return nil
        } catch {
            // Anything else (an expired link, a server away): the usual way, which says why; a few
            // in a row and the mount stops asking.
            localBlobs.failed()
            return nil
        }
        guard let path else {
            localBlobs.notOffered()
            return nil
        }
        return localBlobs.open(etag: etag, path: path, size: fileSize)
    }

    /// Whether reads may come from the server's blob files now: asked for, and no limit on the
    /// bandwidth down (`--bwlimit`, also when set while mounted), which bytes read in place
    /// would not be held to.
    var readsInPlace: Bool {
        configuration.localReads && (configuration.bandwidth?.down.bytesPerSecond ?? 0) <= 0
    }

    func refreshAfterChange(_ ino: InodeNumber) async throws(FSError) {
        state.withLock { $0.inodes[ino]?.validUntil = Self.forcedStale }
        _ = try await getattr(ino)
    }

    /// Fetches the blocks `range` needs that are not cached, in as few ranged GETs as possible;
    /// waits for those another read or read-ahead is fetching already (never fetching twice).
    func ensureBlocks(_ location: Location, etag: String, range: Range<Int64>, fileSize: Int64) async throws(FSError) {
        let needed = blocks.blocks(covering: range)
        for _ in 0..<4 {
            let missing = blocks.missing(etag: etag, blocks: needed)
            guard !missing.isEmpty else { return }
            let mine = claimMissing(etag: etag, blocks: missing)
            let claimed = Set(mine)
            let theirs = missing.filter { !claimed.contains($0) }
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for run in runs(of: mine) {
                        group.addTask { try await self.fetchBlocks(location, etag: etag, blocks: run, fileSize: fileSize) }
                    }
                    for block in theirs {
                        group.addTask { await self.fetching.wait(etag: etag, block: block) }
                    }
                    try await group.waitForAll()
                }
            } catch {
                throw FSError.from(error)
            }
        }
        if !blocks.missing(etag: etag, blocks: needed).isEmpty {
            throw FSError.io("blocks were evicted while being read; the cache is too small for this read")
        }
    }

    /// Claims those of `candidates` nobody fetches and that are still missing once claimed (a
    /// fetch may have stored one between the look and the claim).
    func claimMissing(etag: String, blocks candidates: [Int64]) -> [Int64] {
        let mine = fetching.claim(etag: etag, blocks: candidates)
        guard let lo = mine.first, let hi = mine.last else { return [] }
        let missing = Set(blocks.missing(etag: etag, blocks: lo..<(hi + 1)))
        for b in mine where !missing.contains(b) { fetching.end(etag: etag, block: b) }
        return mine.filter { missing.contains($0) }
    }

    /// Consecutive block numbers as runs of at most `maxBlocksPerRequest` (one GET each), none
    /// across a multiple of `maxBlocksPerRequest` blocks: a ranged GET aligned with the parts an
    /// object store keeps (S3 multipart parts are a power of two MiB) costs the store less than
    /// one that cuts three of them (SeaweedFS: 20% more CPU for 16 MiB ranges 3 MiB off).
    func runs(of sorted: [Int64]) -> [Range<Int64>] {
        let most = Int64(max(1, configuration.maxBlocksPerRequest))
        var runs: [Range<Int64>] = []
        for i in sorted {
            if let last = runs.last, last.upperBound == i, i % most != 0 {
                runs[runs.count - 1] = last.lowerBound..<(i + 1)
            } else {
                runs.append(i..<(i + 1))
            }
        }
        return runs
    }

    /// Fetches claimed blocks in one streamed GET: each block is in the cache (and its waiters
    /// woken) as soon as its last byte arrived, not when the whole run has. Ends every claim.
    func fetchBlocks(_ location: Location, etag: String, blocks run: Range<Int64>, fileSize: Int64) async throws(FSError) {
        var next = run.lowerBound
        let bs = Int64(configuration.blockSize)
        let end = min(fileSize, run.upperBound * bs)
        var into: CacheFile?
        defer {
            // Blocks given to the run and never stored (the fetch failed) go back to the disk — also
            // when the preallocation failed partway (on a full disk ext4 keeps what it gave).
            if let into, next * bs < end { into.punchHole(offset: next * bs, length: end - next * bs) }
            for b in next..<run.upperBound { fetching.end(etag: etag, block: b) }
        }
        guard run.lowerBound * bs < end else { return }
        let file = try blocks.file(etag: etag)
        into = file
        file.preallocate(offset: run.lowerBound * bs, length: end - run.lowerBound * bs)
        try await fetchStream(location, etag: etag, range: (run.lowerBound * bs)..<end) { (reached: Int64) in
            // Bytes up to `reached` are written: every block that ends there is whole.
            while next < run.upperBound {
                let blockEnd = min(end, (next + 1) * bs)
                guard reached >= blockEnd else { break }
                blocks.didStore(etag: etag, file: file, block: next, length: Int(blockEnd - next * bs))
                fetching.end(etag: etag, block: next)
                next += 1
            }
            return next * bs
        } write: { chunk, offset throws(FSError) in
            try file.write(chunk.readableBytesView, at: offset)
        }
    }

    /// Streams `range` of a stored file, pinned to its ETag, into `write(chunk, offset)`. After
    /// each chunk `written(upTo)` says how far the bytes reach and returns from where a retry
    /// would have to start. A connection lost midway is asked again from there, as long as each
    /// try makes progress.
    func fetchStream(
        _ location: Location, etag: String, range: Range<Int64>, written: (Int64) -> Int64,
        write: (ByteBuffer, Int64) throws(FSError) -> Void
    ) async throws(FSError) {
        var resume = range.lowerBound
        var fruitless = 0
        while resume < range.upperBound {
            let start = resume
            var offset = start
            do throws(FSError) {
                let got = try await fetchRange(location, etag: etag, range: start..<range.upperBound) { chunk in
                    try write(chunk, offset)
                    offset += Int64(chunk.readableBytes)
                    resume = written(offset)
                }
                guard got == range.upperBound - start else {
                    throw FSError.io("changed: the server sent \(got) of \(range.upperBound - start) bytes")
                }
                resume = written(range.upperBound)
                return
            } catch {
                // A connection lost midway: ask again from the first missing block, as long as
                // tries make progress (three in a row without a new block end it).
                fruitless = resume > start ? 0 : fruitless + 1
                guard case .io(let why) = error, !why.hasPrefix("changed:"), !why.contains("deleted on the server"), fruitless < 3 else { throw error }
                if fruitless > 0 { try? await Task.sleep(for: .milliseconds(100 * fruitless)) }
            }
        }
    }

    /// Bytes of a stored file, pinned to its ETag, handed to `consume` as they arrive. Returns
    /// how many came.
    func fetchRange(_ location: Location, etag: String, range: Range<Int64>, consume: (ByteBuffer) throws -> Void) async throws(FSError) -> Int64 {
        var lastError: FSError = .io("no URL")
        for attempt in 0..<2 {
            let url = try await signedURL(location, renew: attempt > 0)
            do {
                return try await store.read(url: url, range: range, ifMatch: etag, consume: consume)
            } catch let e as StorageError where e.kind == .preconditionFailed {
                throw FSError.io(Self.newVersion + "\(location) has a new version")
            } catch let e as StorageError where e.kind == .forbidden {
                lastError = FSError(e)
                urls.forget(location)
            } catch let e as StorageError where e.kind == .notFound || e.kind == .gone {
                // Deleted on the server while open here: what is not cached is gone (EIO, not ENOENT, for a read).
                throw FSError.io("\(location) was deleted on the server")
            } catch {
                throw FSError.from(error)
            }
        }
        throw lastError
    }

    /// A signed URL for reading `location`; signs the file's neighbours in the same request.
    func signedURL(_ location: Location, renew: Bool = false) async throws(FSError) -> String {
        if !renew, let url = urls.url(for: location) { return url }
        guard let ns = location.namespace else { throw FSError.isADirectory }
        // Batch: sign other files of the same folder that have no URL yet.
        let siblings: [StoragePath] = state.withLock { s in
            guard let parentIno = findInode(s, location.path.parent, ns),
                let children = s.inodes[parentIno]?.directory?.children
            else { return [] }
            return children.compactMap { name, ino -> StoragePath? in
                guard !name.string.isSameName(location.path.name), let e = s.inodes[ino], e.kind == .file, e.remote != nil else { return nil }
                let l = try? location.path.parent.appending(name.string)
                return l.flatMap { urls.url(for: Location(namespace: ns, path: $0)) == nil ? $0 : nil }
            }.prefix(63).map { $0 }
        }
        let paths = [location.path] + siblings
        let lifetime = configuration.signedURLLifetime
        let signed = try await remote { try await store.signedURLs(ns, paths, expiry: lifetime) }
        for (p, s) in zip(paths, signed) { urls.insert(Location(namespace: ns, path: p), url: s.signedUrl, lifetime: .seconds(lifetime)) }
        guard let first = signed.first else { throw FSError.io("the server signed no URL") }
        return first.signedUrl
    }

    /// The inode of a folder path, if known.
    func findInode(_ s: State, _ path: StoragePath, _ ns: Namespace) -> InodeNumber? {
        var ino: InodeNumber = .root
        if case .all = configuration.scope {
            guard let n = s.inodes[.root]?.directory?.children[ns.name] else { return nil }
            ino = n
        }
        for name in path.segments {
            guard let next = s.inodes[ino]?.directory?.children[name] else { return nil }
            ino = next
        }
        return ino
    }

    /// Starts fetching the missing blocks of the `count` after `end` in the background (those
    /// nobody fetches yet).
    func prefetch(_ ino: InodeNumber, etag: String, after end: Int64, fileSize: Int64, blocks count: Int) {
        guard end < fileSize else { return }
        let bs = Int64(configuration.blockSize)
        let first = end / bs
        var last = min((fileSize - 1) / bs, first + Int64(count) - 1)
        // Up to the window's last boundary of a full GET (see `runs(of:)`), where it has one: the
        // next prefetch then starts on that boundary, and every GET after the first is aligned.
        let most = Int64(max(1, configuration.maxBlocksPerRequest))
        let aligned = (last + 1) / most * most
        if aligned > first, last < (fileSize - 1) / bs { last = aligned - 1 }
        guard first <= last else { return }
        let missing = blocks.missing(etag: etag, blocks: first..<(last + 1))
        guard !missing.isEmpty else { return }
        let location = try? state.withLock { (s: inout State) throws(FSError) in try self.location(s, ino) }
        guard let location else { return }
        let mine = claimMissing(etag: etag, blocks: missing)
        // Few new blocks far ahead: wait until there are enough for one larger GET.
        let batch = min(count / 2, configuration.maxBlocksPerRequest)
        if mine.count < batch, let nearest = mine.first, nearest > first + 1 {
            for b in mine { fetching.end(etag: etag, block: b) }
            return
        }
        for run in runs(of: mine) {
            Task { try? await self.fetchBlocks(location, etag: etag, blocks: run, fileSize: fileSize) }
        }
    }

    // MARK: - Writes

    /// Where a write goes: the local copy's file (FuseKit writes the bytes at `offset`, then calls `didWrite`).
    public func prepareWrite(_ ino: InodeNumber, handle: UInt64) throws(FSError) -> CacheFile {
        try state.withLock { (s: inout State) throws(FSError) -> CacheFile in
            guard let h = s.handles[handle], h.ino == ino else { throw FSError.badHandle }
            guard h.writable else { throw FSError.badHandle }
            var e = try inode(s, ino)
            guard e.local != nil else { throw FSError.io("no local copy to write to") }
            try ensureWritable(&e)
            // Changed from now on, before the bytes land: nothing that swaps or drops a clean copy
            // (`refreshCleanCopy`, `dropCleanCopy`) may take the file this write goes into.
            e.local!.changed()
            s.inodes[ino] = e
            return e.local!.file
        }
    }

    /// `count` bytes were written at `offset`.
    public func didWrite(_ ino: InodeNumber, handle: UInt64, offset: Int64, count: Int) {
        state.withLock { s in
            guard var e = s.inodes[ino], var local = e.local else { return }
            let append = offset == local.size
            local.size = max(local.size, offset + Int64(count))
            local.changed()
            if !append {
                stopStream(&local, "a write at \(offset), not at the end")
            } else if let stream = local.stream {
                stream.grew(to: local.size)
            } else if local.appendOnly, configuration.streamThreshold > 0, local.size >= configuration.streamThreshold, local.writers == 1,
                e.upload == nil, e.olderUploads.isEmpty, e.submitting == 0, !e.unlinked, streamSupport.works, !uploadsPaused.load(ordering: .relaxed),
                let location = try? self.location(s, ino), location.namespace != nil, !s.moving.contains(where: { location.isWithin($0) })
            {
                // Large, and written from empty by appends: it goes to the server as it grows.
                logger.debug("streaming \(location) from \(local.size) bytes")
                let (params, ct, tags) = uploadParams(e)
                local.stream = ContentStream(
                    location: location, cacheFile: local.file.path,
                    request: StartUploadRequest(fileName: location.path.string, contentType: ct, size: 0, tags: tags, params: params, deferLength: true),
                    written: local.size, store: store, chunk: configuration.streamChunkSize, logger: logger, support: streamSupport)
            }
            e.local = local
            e.attributes.size = UInt64(local.size)
            let now = TimeSpec.now
            e.attributes.mtime = now
            e.attributes.ctime = now
            s.inodes[ino] = e
        }
    }

    /// Writes bytes through the engine (tests and tools; FuseKit writes the file directly).
    public func write(_ ino: InodeNumber, handle: UInt64, offset: Int64, bytes: [UInt8]) throws(FSError) -> Int {
        guard offset + Int64(bytes.count) <= Self.maxFileSize else { throw FSError.fileTooLarge }
        let file = try prepareWrite(ino, handle: handle)
        try file.write(bytes, at: offset)
        didWrite(ino, handle: handle, offset: offset, count: bytes.count)
        return bytes.count
    }

    /// close(2) of one descriptor: what was written is made durable here (local file fsynced, journal
    /// record written) before this returns. The upload itself waits for the last close.
    public func flush(_ ino: InodeNumber, handle: UInt64) async throws(FSError) {
        if await finishStream(ino, handle: handle) { return }
        try flushHere(ino, handle: handle)
    }

    /// Whether a flush of this file waits for the server (a stream to finish): FuseKit then runs
    /// `flush` as a task instead of `flushHere` on the FUSE thread.
    public func flushWaitsForServer(_ ino: InodeNumber) -> Bool {
        state.withLock { $0.inodes[ino]?.local?.stream != nil }
    }

    /// Stops the file's stream for good (it goes the usual way).
    func stopStream(_ local: inout LocalContent, _ why: @autoclosure () -> String = "") {
        if let stream = local.stream { logger.debug("stream of \(stream.location) stopped: \(why())") }
        local.stream?.abandon()
        local.stream = nil
        local.appendOnly = false
    }

    /// The last close of a streamed file: the rest goes and the upload completes, with the file's
    /// size and attributes as they are now. True when the server has it all (no fsync, no journal
    /// record needed); false when the file must go the usual way (the stream is gone then).
    func finishStream(_ ino: InodeNumber, handle: UInt64) async -> Bool {
        let timeout = configuration.streamFinishTimeout
        let plan = state.withLock { s -> (ContentStream, Int64, UInt64, StartUploadRequest, Int64?)? in
            guard let h = s.handles[handle], h.writable, var e = s.inodes[ino], var local = e.local, let stream = local.stream else { return nil }
            // Only the file exactly as it is closed, with nothing else owed for it, and only if the
            // rest reaches the server soon.
            guard local.dirty, local.writers == 1, !e.unlinked, e.upload == nil, e.olderUploads.isEmpty, e.submitting == 0,
                let location = try? self.location(s, ino), location == stream.location,
                !s.moving.contains(where: { location.isWithin($0) }),
                stream.catchesUp(tail: local.size - stream.sent, within: timeout / 2)
            else {
                stopStream(&local, "not the file as closed, or its rest would take too long")
                e.local = local
                s.inodes[ino] = e
                return nil
            }
            let (params, ct, tags) = uploadParams(e)
            let request = StartUploadRequest(fileName: location.path.string, contentType: ct, size: local.size, tags: tags, params: params, deferLength: true)
            // A folder's rename or a file's exchange waits for it (`beginMove`) until it is done here.
            s.finishing[ino] = location
            return (stream, local.size, local.changes, request, local.heldUpload)
        }
        guard let (stream, size, changes, request, held) = plan else { return false }
        defer { state.withLock { _ = $0.finishing.removeValue(forKey: ino) } }
        // Uploads of this path still queued (another file's, renamed here or replaced) land first:
        // a stream bypasses the queue's order, so then it is abandoned and the file queues behind them.
        if await !queue.records(under: stream.location).filter({ $0.location == stream.location && $0.id != held }).isEmpty {
            state.withLock { s in
                if s.inodes[ino]?.local?.stream === stream { stopStream(&s.inodes[ino]!.local!, "uploads of its path are queued") }
            }
            return false
        }
        // A held record of this open file (an earlier close of another descriptor: `dd` closes one
        // after dup2) stands for the stream's upload from just before its complete until it goes.
        let queue = self.queue
        let record = await stream.finish(size: size, request: request, timeout: timeout) { session in
            if let held { try await queue.attachStream(held, session: session) }
        }
        let done = state.withLock { s -> Bool in
            guard var e = s.inodes[ino], var local = e.local, local.stream === stream else { return false }
            local.stream = nil
            local.appendOnly = false
            defer {
                e.local = local
                s.inodes[ino] = e
            }
            guard let record else { return false }
            if let old = s.byRemote[record.inode], old != ino, s.inodes[old]?.hasLocalState == false { s.inodes[old] = nil }
            e.remote = RemoteInfo(ino: record.inode, etag: record.etag)
            s.byRemote[record.inode] = ino
            e.changedAt = .now
            // Written to meanwhile: the server has an older content; the usual flush follows.
            guard local.changes == changes else { return false }
            local.dirty = false
            local.streamed = true
            if let held, local.heldUpload == held {
                local.heldUpload = nil
                s.uploadOwner[held] = nil
            }
            e.pageCacheETag = record.etag
            return true
        }
        // The server has it: the held record is not needed any more.
        if done, let held { _ = await queue.cancel(held) }
        return done
    }

    /// flush without a task, on the caller's thread (FuseKit calls it on the FUSE thread, so that
    /// close(2) waits for the disk and nothing else): one journal commit, and an fsync of the copy
    /// when it is too large to go into the record.
    public func flushHere(_ ino: InodeNumber, handle: UInt64) throws(FSError) {
        // One at a time per file: two at once would both find no held record and make two.
        try flushLocks.withLock(ino) { () throws(FSError) in try flushLocked(ino, handle: handle) }
    }

    private func flushLocked(_ ino: InodeNumber, handle: UInt64) throws(FSError) {
        let plan = try state.withLock {
            (s: inout State) throws(FSError) -> (CacheFile, Int64, UInt64, Int64?, Location, UploadParams, String?, [String]?, UploadJournal.Deletion?)? in
            guard let h = s.handles[handle], h.writable, let e = s.inodes[ino], let local = e.local, local.dirty, !e.unlinked else { return nil }
            let (params, ct, tags) = uploadParams(e)
            return (local.file, local.size, local.changes, local.heldUpload, try self.location(s, ino), params, ct, tags, Self.replaces(e))
        }
        guard let (file, size, changes, held, location, params, contentType, tags, replaces) = plan else { return }
        // A small file's bytes go into its journal record — one commit makes both durable; a
        // larger copy is fsynced. `changes` was read before either: a write racing with it counts
        // as a later change.
        var content: Data?
        if size <= UploadJournal.contentLimit {
            content = try file.readAll(size: size)
        } else {
            try file.sync()
        }
        do {
            let id: Int64
            if let held {
                try queue.updateHeldNow(held, size: size, params: params, content: content)
                id = held
            } else {
                id = try queue.enqueueHeld(
                    location: location, cacheFile: file.path, size: size, params: params, contentType: contentType, tags: tags, content: content,
                    replaces: replaces)
                state.withLock { s in
                    s.inodes[ino]?.local?.heldUpload = id
                    s.uploadOwner[id] = ino
                }
            }
            state.withLock { s in
                if let local = s.inodes[ino]?.local, local.file === file, local.heldUpload == id { s.inodes[ino]?.local?.durableAt = changes }
            }
        } catch {
            throw FSError.from(error)
        }
    }

    /// The last reference to an open file went: its new content joins the upload queue.
    public func release(_ ino: InodeNumber, handle: UInt64) async {
        let writable = state.withLock { s -> Bool in
            guard let h = s.handles.removeValue(forKey: handle) else { return false }
            s.inodes[ino]?.openHandles -= 1
            if h.writable { s.inodes[ino]?.local?.writers -= 1 }
            return h.writable
        }
        // A failure is logged and leaves the content dirty with its held record: the next sync,
        // fsync or mount sends it (close already made it durable).
        if writable { _ = try? await submit(ino, onlyIfClosed: true) }
        dropStreamedCopy(ino)
        state.withLock { s in
            // An unlinked file that nobody holds any more is gone, and its cached content with it.
            guard let e = s.inodes[ino], e.unlinked, e.openHandles == 0 else { return }
            if let r = e.remote { dropCachedSoon(r.etag) }
            if e.lookups == 0, !e.hasLocalState { s.inodes[ino] = nil }
        }
    }

    /// A closed file whose content the server got by a stream: its local copy goes (emptied for reuse).
    func dropStreamedCopy(_ ino: InodeNumber) {
        let dropped = state.withLock { s -> CacheFile? in
            guard var e = s.inodes[ino], let local = e.local, local.streamed, !local.dirty, local.writers == 0, local.stream == nil, e.upload == nil,
                e.olderUploads.isEmpty, local.heldUpload == nil, e.submitting == 0
            else { return nil }
            e.local = nil
            e.attributes.size = UInt64(local.size)
            e.validUntil = .now + configuration.attributeTTL
            s.inodes[ino] = e
            return local.file
        }
        guard var file = consume dropped else { return }
        // A read still splicing from it holds another reference: then it is deleted instead.
        if isKnownUniquelyReferenced(&file) { cacheFiles.give(file) } else { Glibc.unlink(file.path) }
    }

    /// Hands the inode's changed content to the upload queue as an immutable snapshot.
    /// - Parameter onlyIfClosed: only when no writer holds it open (release); else a copy is made (fsync, sync).
    /// - Returns: the queued upload, if there was anything to send.
    /// - Throws: `FSError.io` when the snapshot could not be made durable or recorded: the content
    ///   stays as it was (dirty, its held record kept), for the next try.
    @discardableResult
    func submit(_ ino: InodeNumber, onlyIfClosed: Bool) async throws(FSError) -> Int64? {
        let result: Result<Int64?, FSError> = await inodeLocks.withLock(ino) {
            do throws(FSError) { return .success(try await submitLocked(ino, onlyIfClosed: onlyIfClosed)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    private func submitLocked(_ ino: InodeNumber, onlyIfClosed: Bool) async throws(FSError) -> Int64? {
        // A held record (made by close's flush) whose content was sent already (the file is clean)
        // is not needed any more. A sync no longer leaves one (`sendNow` takes its place); kept as
        // a guard.
        let redundant: Int64? = state.withLock { s in
            guard onlyIfClosed, var e = s.inodes[ino], var local = e.local, let held = local.heldUpload, !local.dirty, local.writers == 0 else {
                return nil
            }
            local.heldUpload = nil
            e.local = local
            s.inodes[ino] = e
            return held
        }
        if let redundant { _ = await cancelUpload(redundant, ino: ino) }
        // Sent now whether or not it is still open (`stowfs sync`, `fsync`): made and recorded
        // under the file's flush lock, with no close in between (`sendNow`). What follows is
        // release's way, for a file no writer holds.
        if !onlyIfClosed {
            var outcome: (Int64, superseded: [Int64])?
            try flushLocks.withLock(ino) { () throws(FSError) in outcome = try sendNow(ino) }
            guard let (id, superseded) = outcome else { return nil }
            for old in superseded where old != id {
                if await !queue.isRunning(old) { _ = await cancelUpload(old, ino: ino, supersededBy: id) }
            }
            return id
        }
        var takenAfter: Int64 = 0
        let plan = try? state.withLock { (s: inout State) throws(FSError) -> Taken? in
            guard let e = s.inodes[ino], var local = e.local, local.dirty, !e.unlinked else { return nil }
            // Opened for writing again: its next release sends it.
            if local.writers > 0 { return nil }
            // Taken (frozen) now: a close that follows (the file opened again, written, closed
            // before the requeue below is written) has newer content, whatever its id.
            takenAfter = queue.lastGivenID
            // Sent the usual way now: a stream must not complete after it.
            stopStream(&local, "sent the usual way")
            let location = try self.location(s, ino)
            local.frozen = true
            let held = local.heldUpload
            // Unchanged since close's flush made it durable and wrote its held record: nothing to do again.
            let durable = held != nil && local.durableAt == local.changes
            local.heldUpload = nil
            return take(&s, ino, e, local, snapshot: local.file, held: held, durable: durable, location: location)
        }
        guard let t = plan ?? nil else { return nil }
        if let hook = afterTake.withLock({ $0 }) { await hook() }
        if !t.durable {
            do {
                try t.snapshot.sync()
            } catch {
                throw untake(ino, t, "the local copy could not be made durable (fsync: \(error))")
            }
        }
        let id: Int64
        do {
            if let held = t.held {
                id = try await queue.release(
                    held, location: t.location, cacheFile: t.snapshot.path, size: t.size, params: t.params, contentDurable: t.durable,
                    takenAfter: takenAfter)
                // Kept in place, the record is still this inode's under the same id.
                if id != held { state.withLock { $0.uploadOwner[held] = nil } }
            } else {
                id = try await queue.enqueue(
                    location: t.location, cacheFile: t.snapshot.path, size: t.size, params: t.params, contentType: t.contentType, tags: t.tags,
                    replaces: t.replaces, takenAfter: takenAfter)
            }
        } catch {
            throw untake(ino, t, "the journal could not record it (\(error))")
        }
        recorded(ino, id, token: t.token)
        for old in t.superseded where old != id {
            if await !queue.isRunning(old) { _ = await cancelUpload(old, ino: ino, supersededBy: id) }
        }
        return id
    }

    /// A file's content taken for an upload (`take`): what goes, and the uploads it supersedes.
    struct Taken {
        let snapshot: CacheFile, size: Int64, held: Int64?, durable: Bool, location: Location
        let params: UploadParams, contentType: String?, tags: [String]?, superseded: [Int64], replaces: UploadJournal.Deletion?
        /// Its number in `State.takes`.
        let token: Int64
    }

    /// Takes the content of `e` (its local copy now `local`; `snapshot` the file that goes) for an
    /// upload: clean from now on, its owed upload superseded (older uploads of the inode not yet
    /// running are), counted as being submitted — an older upload landing must not take the local
    /// copy away — until `recorded` or `untake`.
    private func take(
        _ s: inout State, _ ino: InodeNumber, _ e: InodeEntry, _ local: LocalContent, snapshot: CacheFile, held: Int64?, durable: Bool, location: Location
    ) -> Taken {
        var e = e, local = local
        let (params, contentType, tags) = uploadParams(e)
        local.dirty = false
        e.local = local
        let superseded = e.upload.map { [$0] } ?? []
        if let u = e.upload { e.olderUploads.insert(u) }
        e.upload = nil
        e.submitting += 1
        let token = s.nextTake
        s.nextTake += 1
        s.takes[token] = location
        e.changedAt = .now
        s.inodes[ino] = e
        return Taken(
            snapshot: snapshot, size: local.size, held: held, durable: durable, location: location, params: params, contentType: contentType,
            tags: tags, superseded: superseded, replaces: Self.replaces(e), token: token)
    }

    /// The content taken is not in the queue: it is dirty again, with its held record and its owed
    /// upload; a copy made for it goes.
    private func untake(_ ino: InodeNumber, _ t: Taken, _ why: String) -> FSError {
        logger.error("cannot hand \(t.location) to the upload queue: \(why)")
        state.withLock { s in
            s.takes[t.token] = nil
            s.watchedTakes[t.token] = nil
            guard var e = s.inodes[ino] else { return }
            e.submitting -= 1
            if var local = e.local {
                local.dirty = true
                if local.heldUpload == nil, let held = t.held { local.heldUpload = held }
                e.local = local
            }
            if e.upload == nil, let last = t.superseded.last {
                e.olderUploads.remove(last)
                e.upload = last
            }
            s.inodes[ino] = e
        }
        if t.snapshot.path != state.withLock({ $0.inodes[ino]?.local?.file.path }) { Glibc.unlink(t.snapshot.path) }
        return FSError.io(why)
    }

    /// The content taken is upload `id` now.
    private func recorded(_ ino: InodeNumber, _ id: Int64, token: Int64) {
        state.withLock { s in
            s.takes[token] = nil
            if s.watchedTakes[token] != nil { s.takeRecords[token] = id }
            s.inodes[ino]?.submitting -= 1
            s.inodes[ino]?.upload = id
            s.inodes[ino]?.olderUploads.remove(id)
            s.uploadOwner[id] = ino
        }
    }

    /// The file's changed content joins the upload queue now (`stowfs sync`, `fsync`), made durable
    /// and recorded under the file's flush lock (the caller holds it), so that no close falls
    /// between the content taken and its record: a close's held record made between them would
    /// get the smaller id though its content is newer, and the next mount after a crash keeps a
    /// path's newest record only. A file still open for writing goes as a copy (later writes go
    /// on into the original); one no writer holds goes as it is, frozen, as at release. What is
    /// sent holds all the file's held record held (a close's content, if any), so it takes that
    /// record's place in the same commit, and the next close makes a new one, after it. Kept, the
    /// held record would be sent alone after a crash once the copy had landed, taking the server's
    /// file back to older content than the sync promised.
    /// - Returns: the upload, and the older uploads of the file it supersedes; nil when nothing changed.
    private func sendNow(_ ino: InodeNumber) throws(FSError) -> (Int64, superseded: [Int64])? {
        let plan = try state.withLock { (s: inout State) throws(FSError) -> Taken? in
            guard let e = s.inodes[ino], var local = e.local, local.dirty, !e.unlinked else { return nil }
            let location = try self.location(s, ino)
            var snapshot = local.file
            if local.writers > 0 {
                snapshot = try local.file.copy(to: newCacheFilePath(), length: local.size)
            } else {
                local.frozen = true
            }
            // Sent the usual way now: a stream must not complete after it.
            stopStream(&local, "sent the usual way")
            let held = local.heldUpload
            // A closed file unchanged since close's flush made it durable and wrote its held record:
            // durable already (fsynced, or its bytes in that record, which go along).
            let durable = local.writers == 0 && held != nil && local.durableAt == local.changes
            return take(&s, ino, e, local, snapshot: snapshot, held: held, durable: durable, location: location)
        }
        guard let t = plan else { return nil }
        let id: Int64
        do {
            if !t.durable { try t.snapshot.sync() }
            if let held = t.held {
                id = try queue.replaceHeldNow(
                    held, location: t.location, cacheFile: t.snapshot.path, size: t.size, params: t.params, contentType: t.contentType, tags: t.tags,
                    replaces: t.replaces, carryContent: t.durable)
            } else {
                id = try queue.enqueueNow(
                    location: t.location, cacheFile: t.snapshot.path, size: t.size, params: t.params, contentType: t.contentType, tags: t.tags,
                    replaces: t.replaces)
            }
        } catch {
            throw untake(ino, t, "\(t.location) could not be made durable or recorded for its upload (\(error))")
        }
        recorded(ino, id, token: t.token)
        if let held = t.held {
            state.withLock { s in
                if s.inodes[ino]?.local?.heldUpload == held { s.inodes[ino]?.local?.heldUpload = nil }
                s.uploadOwner[held] = nil
            }
        }
        return (id, superseded: t.superseded)
    }

    /// Stops an owed upload for good; forgets it and its snapshot (unless the file still uses it).
    /// - Returns: the stored record if it had completed before it could be stopped.
    func cancelUpload(_ id: Int64, ino: InodeNumber, supersededBy successor: Int64? = nil) async -> UploadQueue.Landed? {
        let record = await queue.record(id)
        let outcome = await queue.cancel(id, supersededBy: successor)
        if case .alreadyStored(let stored) = outcome { return stored }
        state.withLock { s in
            s.uploadOwner[id] = nil
            s.inodes[ino]?.olderUploads.remove(id)
            if s.inodes[ino]?.upload == id { s.inodes[ino]?.upload = nil }
            if s.inodes[ino]?.local?.heldUpload == id { s.inodes[ino]?.local?.heldUpload = nil }
            if let path = record?.cacheFile, s.inodes[ino]?.local?.file.path != path { Glibc.unlink(path) }
        }
        return nil
    }

    /// fsync(2): returns once the server holds this file's content as of now.
    /// An upload the server refused for good fails it with EIO (the content stays queued, as
    /// `stowfs status` shows).
    public func fsync(_ ino: InodeNumber, handle: UInt64) async throws(FSError) {
        try await flush(ino, handle: handle)
        try await submit(ino, onlyIfClosed: false)
        let owed = state.withLock { s in s.inodes[ino]?.owedUploads ?? [] }
        try Self.check(await queue.waitUntilDone(Set(owed)))
    }

    /// EIO naming the first refusal, if any upload was refused.
    static func check(_ failures: [UploadQueue.Failure]) throws(FSError) {
        guard let first = failures.first else { return }
        throw FSError.io("the server refused the upload of \(first.path): \(first.reason)")
    }

    /// Waits (bounded) until these uploads are stored: EIO for a refusal, or when the server did not take them in time.
    func waitForUploads(_ ids: Set<Int64>) async throws(FSError) {
        // Bounded (`uploadWaitLimit`): fsync and sync are not, on purpose — they are the durability
        // barrier, and `unmount --no-wait` is the way out of waiting for a server that is away.
        let outcome = await queue.waitUntilDone(ids, timeout: configuration.uploadWaitLimit)
        try Self.check(outcome.failures)
        if let first = outcome.pending.first {
            throw FSError.io("\(first.path) is not on the server yet (\(first.reason == "refused" ? "still uploading" : first.reason)); it stays queued")
        }
    }
}

