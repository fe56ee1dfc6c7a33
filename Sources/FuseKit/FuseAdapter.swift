import CFuse
import Foundation
import Logging
import StorageProtocol
import StowFS
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The bridge between libfuse's callbacks and the engine: one adapter method per operation.
///
/// Each method copies what it needs out of the C arguments, then either answers at once (cache
/// hits, writes to the local copy, reads of cached blocks) or starts a `Task` that awaits the
/// engine and sends the single reply. Errors become errno here (`FSError.errno`) and nowhere else.
final class FuseAdapter: Sendable {
    let engine: StowFileSystem
    let logger: Logger
    let observer: (any FuseObserver)?
    private let inflight = Mutex<Int>(0)
    /// When an I/O error was last logged, and how many were not since.
    private let ioWarnings = Mutex<(last: ContinuousClock.Instant?, unlogged: Int)>((nil, 0))

    /// An EIO returned to an application leaves a warning in the log — what failed and why — at
    /// most one a second (a mount offline reading files it does not have would fill the log), with
    /// the count of those not logged.
    func warnIO(_ operation: FuseOperation, _ why: String) {
        let unlogged = ioWarnings.withLock { w -> Int? in
            let now = ContinuousClock.now
            if let last = w.last, now - last < .seconds(1) {
                w.unlogged += 1
                return nil
            }
            defer { w = (now, 0) }
            return w.unlogged
        }
        guard let unlogged else { return }
        logger.warning("\(operation.rawValue) answered EIO: \(why)\(unlogged > 0 ? " (and \(unlogged) more EIO not logged)" : "")")
    }

    init(engine: StowFileSystem, logger: Logger, observer: (any FuseObserver)?) {
        self.engine = engine
        self.logger = logger
        self.observer = observer
    }

    var requestsInFlight: Int { inflight.withLock { $0 } }

    /// Runs `work` in a task and replies with `reply`, or with the error.
    func respond<T: Sendable>(
        _ req: FuseRequest, _ work: @escaping @Sendable () async throws(FSError) -> T, op: String = #function,
        reply: @escaping @Sendable (FuseRequest, T) -> Void
    ) {
        inflight.withLock { $0 += 1 }
        Task {
            defer { self.inflight.withLock { $0 -= 1 } }
            do throws(FSError) {
                reply(req, try await work())
            } catch {
                if self.logger.logLevel <= .debug { self.logger.debug("\(op): \(error)") }
                req.reply(error: error)
            }
        }
    }

    var attributeTTL: Duration { engine.configuration.attributeTTL }

    // MARK: - Names

    func lookup(_ req: FuseRequest, parent: InodeNumber, name: String) {
        if let cached = engine.lookupCached(parent: parent, name: name) {
            switch cached {
            case .success(let e): req.reply(entry: e)
            case .failure(let err): req.reply(error: err)
            }
            return
        }
        respond(req, { () async throws(FSError) -> Entry in try await self.engine.lookup(parent: parent, name: name) }) { $0.reply(entry: $1) }
    }

    func forget(_ ino: InodeNumber, count: UInt64) { engine.forget(ino, count: count) }

    func getattr(_ req: FuseRequest, ino: InodeNumber) {
        if let a = engine.attributesCached(ino) {
            req.reply(attributes: a, ttl: attributeTTL)
            return
        }
        respond(req, { () async throws(FSError) -> FileAttributes in try await self.engine.getattr(ino) }) { $0.reply(attributes: $1, ttl: self.attributeTTL) }
    }

    func setattr(_ req: FuseRequest, ino: InodeNumber, attr: Glibc.stat, toSet: Int32, handle: UInt64?) {
        var c = AttributeChanges()
        if toSet & FUSE_SET_ATTR_MODE != 0 { c.mode = attr.st_mode & 0o7777 }
        if toSet & FUSE_SET_ATTR_UID != 0 { c.uid = attr.st_uid }
        if toSet & FUSE_SET_ATTR_GID != 0 { c.gid = attr.st_gid }
        if toSet & FUSE_SET_ATTR_SIZE != 0 { c.size = UInt64(max(0, attr.st_size)) }
        if toSet & FUSE_SET_ATTR_ATIME_NOW != 0 {
            c.atime = .now
        } else if toSet & FUSE_SET_ATTR_ATIME != 0 {
            c.atime = .set(FuseConversions.time(attr.st_atim))
        }
        if toSet & FUSE_SET_ATTR_MTIME_NOW != 0 {
            c.mtime = .now
        } else if toSet & FUSE_SET_ATTR_MTIME != 0 {
            c.mtime = .set(FuseConversions.time(attr.st_mtim))
        }
        let changes = c
        // A file being written here (tar's fchown, fchmod, futimens before close): answered at once.
        do throws(FSError) {
            if let attributes = try engine.setattrHere(ino, changes) {
                req.reply(attributes: attributes, ttl: attributeTTL)
                return
            }
        } catch {
            req.reply(error: error)
            return
        }
        respond(req, { () async throws(FSError) -> FileAttributes in try await self.engine.setattr(ino, changes, handle: handle) }) {
            $0.reply(attributes: $1, ttl: self.attributeTTL)
        }
    }

    func mkdir(_ req: FuseRequest, parent: InodeNumber, name: String, mode: UInt32) {
        let caller = req.caller
        respond(req, { () async throws(FSError) -> Entry in try await self.engine.mkdir(parent: parent, name: name, mode: mode, caller: caller) }) {
            $0.reply(entry: $1)
        }
    }

    func mknod(_ req: FuseRequest, parent: InodeNumber, name: String, mode: UInt32, rdev: UInt64) {
        let caller = req.caller
        respond(req, { () async throws(FSError) -> Entry in
            try await self.engine.mknod(parent: parent, name: name, mode: mode, rdev: rdev, caller: caller)
        }) { $0.reply(entry: $1) }
    }

    func symlink(_ req: FuseRequest, target: String, parent: InodeNumber, name: String) {
        let caller = req.caller
        respond(req, { () async throws(FSError) -> Entry in try await self.engine.symlink(target: target, parent: parent, name: name, caller: caller) }) {
            $0.reply(entry: $1)
        }
    }

    func readlink(_ req: FuseRequest, ino: InodeNumber) {
        respond(req, { () async throws(FSError) -> String in try await self.engine.readlink(ino) }) { $0.reply(readlink: $1) }
    }

    func link(_ req: FuseRequest, ino: InodeNumber, newParent: InodeNumber, newName: String) {
        respond(req, { () async throws(FSError) -> Entry in try await self.engine.link(ino, newParent: newParent, newName: newName) }) { $0.reply(entry: $1) }
    }

    func unlink(_ req: FuseRequest, parent: InodeNumber, name: String) {
        // Most unlinks need only the journal: answered here, without a task.
        do throws(FSError) {
            if try engine.unlinkHere(parent: parent, name: name) { return req.replyOK() }
        } catch {
            return req.reply(error: error)
        }
        respond(req, { () async throws(FSError) in try await self.engine.unlink(parent: parent, name: name) }) { r, _ in r.replyOK() }
    }

    func rmdir(_ req: FuseRequest, parent: InodeNumber, name: String) {
        respond(req, { () async throws(FSError) in try await self.engine.rmdir(parent: parent, name: name) }) { r, _ in r.replyOK() }
    }

    func rename(_ req: FuseRequest, parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, flags: UInt32) {
        if flags & ~UInt32(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0 {
            req.reply(errno: EINVAL)
            return
        }
        respond(req, { () async throws(FSError) in
            try await self.engine.rename(
                parent: parent, name: name, newParent: newParent, newName: newName, noReplace: flags & UInt32(RENAME_NOREPLACE) != 0,
                exchange: flags & UInt32(RENAME_EXCHANGE) != 0)
        }) { r, _ in r.replyOK() }
    }

    // MARK: - Files

    func create(_ req: FuseRequest, parent: InodeNumber, name: String, mode: UInt32, fileInfo: FileInfoBox) {
        if engine.mustWaitForDescriptors {
            // Too many files wait for their upload, each holding a descriptor: this create waits
            // for some to be stored, in a task (the FUSE thread goes on serving).
            let exclusive = fileInfo.pointer.pointee.flags & O_EXCL != 0
            let caller = req.caller
            respond(req, { () async throws(FSError) -> (Entry, OpenedFile) in
                try await self.engine.waitForDescriptors()
                if exclusive {
                    if let made = try self.engine.createExclusiveHere(parent: parent, name: name, mode: mode, caller: caller) { return made }
                    return try await self.engine.createExclusive(parent: parent, name: name, mode: mode, caller: caller)
                }
                return try self.engine.create(parent: parent, name: name, mode: mode, caller: caller)
            }) { r, v in r.reply(create: v.0, file: v.1, fileInfo: fileInfo.pointer) }
            return
        }
        if fileInfo.pointer.pointee.flags & O_EXCL != 0 {
            let caller = req.caller
            // O_EXCL in a folder whose exclusive creates this mount holds: decided here.
            do throws(FSError) {
                if let (entry, file) = try engine.createExclusiveHere(parent: parent, name: name, mode: mode, caller: caller) {
                    req.reply(create: entry, file: file, fileInfo: fileInfo.pointer)
                    return
                }
            } catch {
                req.reply(error: error)
                return
            }
            // Elsewhere the name is taken on the server now, so that another mount's create fails.
            respond(req, { () async throws(FSError) -> (Entry, OpenedFile) in
                try await self.engine.createExclusive(parent: parent, name: name, mode: mode, caller: caller)
            }) { r, v in r.reply(create: v.0, file: v.1, fileInfo: fileInfo.pointer) }
            return
        }
        // No server and no queue: answered here, without a task.
        do throws(FSError) {
            let (entry, file) = try engine.create(parent: parent, name: name, mode: mode, caller: req.caller)
            req.reply(create: entry, file: file, fileInfo: fileInfo.pointer)
        } catch {
            req.reply(error: error)
        }
    }

    func open(_ req: FuseRequest, ino: InodeNumber, flags: Int32, fileInfo: FileInfoBox) {
        let write = flags & O_ACCMODE != O_RDONLY
        let truncate = flags & O_TRUNC != 0
        // Answered here unless the content must come from the server first.
        do throws(FSError) {
            if let opened = try engine.openHere(ino, write: write, truncate: truncate) {
                req.reply(open: opened, fileInfo: fileInfo.pointer)
                return
            }
        } catch {
            req.reply(error: error)
            return
        }
        respond(req, { () async throws(FSError) -> OpenedFile in try await self.engine.open(ino, write: write, truncate: truncate) }) { r, v in
            r.reply(open: v, fileInfo: fileInfo.pointer)
        }
    }

    func read(_ req: FuseRequest, ino: InodeNumber, size: Int, offset: Int64, handle: UInt64) {
        if let ready = engine.readCached(ino, handle: handle, offset: offset, size: size) {
            req.reply(segments: ready)
            return
        }
        respond(req, { () async throws(FSError) -> [FileSegment] in try await self.engine.read(ino, handle: handle, offset: offset, size: size) }) {
            $0.reply(segments: $1)
        }
    }

    /// Writes go straight into the local copy, on the FUSE thread: no copy, no task.
    func write(_ req: FuseRequest, ino: InodeNumber, buffer: UnsafePointer<CChar>?, size: Int, offset: Int64, handle: UInt64) {
        do {
            let file = try engine.prepareWrite(ino, handle: handle)
            var written = 0
            while written < size {
                let n = pwrite(file.descriptor, buffer?.advanced(by: written), size - written, off_t(offset) + off_t(written))
                if n < 0 {
                    if errno == EINTR { continue }
                    req.reply(errno: errno == ENOSPC || errno == EDQUOT ? errno : EIO)
                    return
                }
                written += n
            }
            engine.didWrite(ino, handle: handle, offset: offset, count: written)
            req.reply(written: written)
        } catch {
            req.reply(error: error)
        }
    }

    func flush(_ req: FuseRequest, ino: InodeNumber, handle: UInt64, lockOwner: UInt64) {
        // A close releases the POSIX locks of its owner (the process): after the flush, before
        // the answer, so that the same owner's next lock is not undone by this unlock.
        let unlocks = engine.mayHoldLocks(ino, owner: lockOwner, kind: .posix)
        // A file streamed to the server: its last close waits for the server, as a task.
        if unlocks || engine.flushWaitsForServer(ino) {
            respond(req, { () async throws(FSError) in
                try await self.engine.flush(ino, handle: handle)
                if unlocks { await self.engine.releaseLocks(ino, owner: lockOwner, kind: .posix) }
            }) { r, _ in r.replyOK() }
            return
        }
        do {
            try engine.flushHere(ino, handle: handle)
            req.replyOK()
        } catch {
            req.reply(error: error)
        }
    }

    /// The last close of an open file; `flockOwner`: the kernel says it held a `flock` lock.
    func release(_ req: FuseRequest, ino: InodeNumber, handle: UInt64, flockOwner: UInt64?) {
        respond(req, { () async throws(FSError) in
            await self.engine.release(ino, handle: handle)
            if let flockOwner { await self.engine.releaseLocks(ino, owner: flockOwner, kind: .flock) }
        }) { r, _ in r.replyOK() }
    }

    // MARK: - Locks

    /// F_SETLK / F_SETLKW (and OFD locks, which the kernel sends with the open file as owner).
    func setlk(_ req: FuseRequest, ino: InodeNumber, owner: UInt64, lock: Glibc.flock, sleep: Bool) {
        guard let fileLock = FuseConversions.fileLock(lock) else {
            req.reply(errno: EINVAL)
            return
        }
        interruptible(req) { () async throws(FSError) in try await self.engine.setLock(ino, owner: owner, kind: .posix, fileLock, wait: sleep) }
    }

    /// flock(2): LOCK_SH, LOCK_EX or LOCK_UN, with LOCK_NB not to wait.
    func flock(_ req: FuseRequest, ino: InodeNumber, owner: UInt64, op: Int32) {
        let type: LockType = op & LOCK_UN != 0 ? .unlock : op & LOCK_EX != 0 ? .write : .read
        let lock = FileLock(type: type, start: 0, end: .max, pid: Int32(truncatingIfNeeded: req.caller.pid))
        let wait = op & LOCK_NB == 0
        interruptible(req) { () async throws(FSError) in try await self.engine.setLock(ino, owner: owner, kind: .flock, lock, wait: wait) }
    }

    /// F_GETLK: the lock in the way, or the asked lock with `F_UNLCK`.
    func getlk(_ req: FuseRequest, ino: InodeNumber, owner: UInt64, lock: Glibc.flock) {
        guard let fileLock = FuseConversions.fileLock(lock), fileLock.type != .unlock else {
            req.reply(errno: EINVAL)
            return
        }
        respond(req, { () async throws(FSError) -> FileLock? in try await self.engine.testLock(ino, owner: owner, kind: .posix, fileLock) }) { r, conflict in
            var answer = FuseConversions.flock(answering: lock, with: conflict)
            fuse_reply_lock(r.raw, &answer)
            r.finished()
        }
    }

    /// Runs `work` in a task the kernel can interrupt: a signal to the process waiting for the
    /// answer (a `flock` or F_SETLKW that waits) cancels the task, and the answer is EINTR.
    func interruptible(_ req: FuseRequest, op: String = #function, _ work: @escaping @Sendable () async throws(FSError) -> Void) {
        inflight.withLock { $0 += 1 }
        let canceller = Canceller()
        // Registered before the task exists: the request lives until its answer, which the task
        // sends; libfuse does not call this after the answer (nor during it).
        fuse_req_interrupt_func(req.raw, { _, data in
            guard let data else { return }
            Unmanaged<Canceller>.fromOpaque(data).takeUnretainedValue().cancel()
        }, Unmanaged.passUnretained(canceller).toOpaque())
        let task = Task {
            defer { self.inflight.withLock { $0 -= 1 } }
            do throws(FSError) {
                try await work()
                req.replyOK()
            } catch {
                if self.logger.logLevel <= .debug { self.logger.debug("\(op): \(error)") }
                req.reply(error: error)
            }
            withExtendedLifetime(canceller) {}
        }
        canceller.set(task)
    }

    func fsync(_ req: FuseRequest, ino: InodeNumber, handle: UInt64) {
        respond(req, { () async throws(FSError) in try await self.engine.fsync(ino, handle: handle) }) { r, _ in r.replyOK() }
    }

    /// fsync(2) of a folder: the unlinks made in the mount so far are durable when it returns.
    func fsyncdir(_ req: FuseRequest) {
        do throws(FSError) {
            try engine.fsyncdir()
            req.replyOK()
        } catch {
            req.reply(error: error)
        }
    }

    // MARK: - Directories

    func opendir(_ req: FuseRequest, ino: InodeNumber, fileInfo: UnsafeMutablePointer<fuse_file_info>?) {
        do {
            let h = try engine.opendir(ino)
            var fi = fileInfo?.pointee ?? fuse_file_info()
            fi.fh = h
            // The kernel keeps the entries it read (FOPEN_CACHE_DIR), and may answer this opendir's
            // readdir from them when the engine's own listing stands without the server (the feed
            // followed: another client's change drops the kernel's copy with the inode's pages;
            // this mount's own changes reset it in the kernel). Otherwise it forgets them first.
            fi.cache_readdir = 1
            fi.keep_cache = engine.listingPushed(ino) ? 1 : 0
            fuse_reply_open(req.raw, &fi)
            req.finished()
        } catch {
            req.reply(error: error)
        }
    }

    func releasedir(_ req: FuseRequest, ino: InodeNumber, handle: UInt64) {
        engine.releasedir(ino, handle: handle)
        req.replyOK()
    }

    func readdir(_ req: FuseRequest, ino: InodeNumber, size: Int, offset: Int64, handle: UInt64, plus: Bool) {
        respond(req, { () async throws(FSError) -> [DirectoryEntry] in
            // No entry takes less than its header of the kernel's buffer: 24 bytes, 152 with
            // readdirplus's attributes. (With 24 for both, a readdirplus page of a big folder read
            // the attributes of 6 names for each one that fit.)
            try await self.engine.readdir(ino, handle: handle, offset: offset, plus: plus, limit: size / (plus ? 152 : 24) + 1)
        }) { r, entries in
            self.replyDirectory(r, entries, size: size, plus: plus)
        }
    }

    /// Packs entries into the kernel's buffer until it is full; takes a lookup reference for each
    /// readdirplus entry that went in (not for `.` and `..`).
    func replyDirectory(_ req: FuseRequest, _ entries: [DirectoryEntry], size: Int, plus: Bool) {
        // The kernel offers up to 1 MiB; a buffer of that size, zeroed, cost a fifth of the mount's
        // CPU answering a cold listing of 1,000 names (the memset and a page fault per page). So the
        // buffer is what these entries take at most, left unzeroed: an entry is a header of 24 bytes
        // (152 with readdirplus's attributes) and its name, padded to 8. Should the bound ever fall
        // short, fewer entries go in and the kernel asks for the rest.
        var bound = 0
        for d in entries where bound < size { bound += ((plus ? 152 : 24) + d.name.utf8.count + 7) & ~7 }
        let capacity = max(1, min(size, bound))
        let buf = UnsafeMutableBufferPointer<CChar>.allocate(capacity: capacity)
        defer { buf.deallocate() }
        var used = 0
        var retained: [InodeNumber] = []
        if plus { retained.reserveCapacity(entries.count) }
        for d in entries {
            let remaining = capacity - used
            let needed: Int
            if plus {
                var e = d.entry.map(FuseConversions.entryParam) ?? fuse_entry_param()
                if d.entry == nil { e.attr.st_ino = UInt(d.ino); e.attr.st_mode = FuseConversions.typeBits(d.kind) }
                needed = fuse_add_direntry_plus(req.raw, buf.baseAddress! + used, remaining, d.name, &e, off_t(d.offset))
            } else {
                var st = Glibc.stat()
                st.st_ino = UInt(d.ino)
                st.st_mode = FuseConversions.typeBits(d.kind)
                needed = fuse_add_direntry(req.raw, buf.baseAddress! + used, remaining, d.name, &st, off_t(d.offset))
            }
            if needed > remaining { break }
            used += needed
            if plus && d.entry != nil && d.name != "." && d.name != ".." { retained.append(d.ino) }
        }
        if !retained.isEmpty { engine.retain(retained) }
        fuse_reply_buf(req.raw, buf.baseAddress, used)
        req.finished()
    }

    // MARK: - Extended attributes

    func setxattr(_ req: FuseRequest, ino: InodeNumber, name: String, value: [UInt8], flags: Int32) {
        let flag: StowFileSystem.XattrFlag = flags & 1 != 0 ? .create : (flags & 2 != 0 ? .replace : .any)
        respond(req, { () async throws(FSError) in try await self.engine.setxattr(ino, name: name, value: value, flag: flag) }) { r, _ in r.replyOK() }
    }

    func getxattr(_ req: FuseRequest, ino: InodeNumber, name: String, size: Int) {
        // Only user.* names exist here (see the engine's getxattr): others are answered at once,
        // without a task.
        guard name.hasPrefix("user.") else { return req.reply(error: .notSupported) }
        respond(req, { () async throws(FSError) -> [UInt8] in try await self.engine.getxattr(ino, name: name) }) { $0.reply(xattr: $1, size: size) }
    }

    func listxattr(_ req: FuseRequest, ino: InodeNumber, size: Int) {
        respond(req, { () async throws(FSError) -> [UInt8] in
            try await self.engine.listxattr(ino).flatMap { Array($0.utf8) + [0] }
        }) { $0.reply(xattr: $1, size: size) }
    }

    func removexattr(_ req: FuseRequest, ino: InodeNumber, name: String) {
        respond(req, { () async throws(FSError) in try await self.engine.removexattr(ino, name: name) }) { r, _ in r.replyOK() }
    }

    func statfs(_ req: FuseRequest) { req.reply(statfs: engine.statfs()) }
}

/// A `fuse_file_info` copied out of a callback, to answer open/create from a task.
///
/// `@unchecked Sendable`: the box owns its copy; nothing else points at it.
/// Cancels a request's task when the kernel interrupts the request (which may come first).
final class Canceller: Sendable {
    private let state = Mutex<(task: Task<Void, Never>?, cancelled: Bool)>((nil, false))

    func set(_ task: Task<Void, Never>) {
        let cancelled = state.withLock { s -> Bool in
            s.task = task
            return s.cancelled
        }
        if cancelled { task.cancel() }
    }

    func cancel() {
        let task = state.withLock { s -> Task<Void, Never>? in
            s.cancelled = true
            return s.task
        }
        task?.cancel()
    }
}

final class FileInfoBox: @unchecked Sendable {
    private let storage: UnsafeMutablePointer<fuse_file_info>

    init(_ fi: UnsafeMutablePointer<fuse_file_info>?) {
        storage = .allocate(capacity: 1)
        storage.initialize(to: fi?.pointee ?? fuse_file_info())
    }

    var pointer: UnsafeMutablePointer<fuse_file_info> { storage }

    deinit {
        storage.deinitialize(count: 1)
        storage.deallocate()
    }
}
