import Foundation
import Logging
import Synchronization
import StorageClient
import StorageProtocol
#if canImport(Glibc)
import Glibc
#endif

/// mkdir, rmdir, unlink, rename, link, symlink, readlink, mknod, setattr.
extension StowFileSystem {
    public func mkdir(parent: InodeNumber, name: String, mode: UInt32, caller: Caller) async throws(FSError) -> Entry {
        try Self.validate(name: name)
        guard !configuration.readOnly else { throw FSError.readOnly }
        let location = try state.withLock { (s: inout State) throws(FSError) -> Location in try child(try self.location(s, parent), name) }
        guard let ns = location.namespace else { throw FSError.notPermitted }
        if location.path.isRoot {
            // mkdir at the root of a `--all` mount makes a namespace.
            let info = try await remote { try await store.createNamespace(ns) }
            return state.withLock { s in
                let ino = namespaceInode(&s, info)
                s.inodes[ino]?.lookups += 1
                touchDirectory(&s, .root)
                return entry(s.inodes[ino]!)
            }
        }
        // A file deleted here under this name may still be on the server.
        try await settleDeletes(at: location)
        // The feed followed from before the folder exists: it will name any change made in it.
        let held = feedHolds()
        let request = FolderRequest(mode: mode & 0o7777, uid: caller.uid, gid: caller.gid, parents: false, existOk: false)
        // Its exclusive creates are this mount's to decide while no other client asks for one
        // (`cp -r` and `tar x` create every file with O_EXCL): the lease is asked for with the
        // folder where the server can, and else on its own.
        let session = await namesLeaseSession(ns)
        let (record, leasedWithFolder) = try await remote {
            if let session { return try await store.makeFolder(ns, location.path, request, namesLeaseFor: session) }
            return (try await store.makeFolder(ns, location.path, request), false)
        }
        if leasedWithFolder { locks.value.withLock { _ = $0.namesLeases.insert(record.inode) } }
        let leased = leasedWithFolder ? true : await takeNamesLease(ns, folder: record.inode)
        return state.withLock { s in
            let ino = upsert(&s, record, parent: parent, name: name)
            s.inodes[ino]?.lookups += 1
            s.inodes[ino]?.changedAt = .now
            // Just made: it is known to be empty, so lookups in it need not ask the server —
            // unless the feed named it before this mount knew it (another client wrote into it
            // already, or asked for its names): then it is listed like any other folder.
            if s.namedBeforeKnown.removeValue(forKey: record.inode) != nil {
                s.inodes[ino]?.directory = DirectoryState()
                if leased { Task { await self.relinquishNamesLease(ns, folder: record.inode) } }
            } else {
                s.inodes[ino]?.directory = DirectoryState(
                    children: [:], complete: true, validUntil: .now + configuration.attributeTTL, heldByFeed: held, madeHere: leased)
            }
            s.inodes[parent]?.attributes.addSubfolder()
            touchDirectory(&s, parent)
            return entry(s.inodes[ino]!)
        }
    }

    public func rmdir(parent: InodeNumber, name: String) async throws(FSError) {
        guard !configuration.readOnly else { throw FSError.readOnly }
        let ino = try await findChild(parent, name)
        let location = try state.withLock { (s: inout State) throws(FSError) -> Location in
            let e = try inode(s, ino)
            guard e.kind == .directory else { throw FSError.notADirectory }
            let location = try self.location(s, ino)
            // Files owed to the server make it not empty, though the server does not know them yet.
            for c in e.directory?.children.values ?? [:].values {
                if let ce = s.inodes[c], !ce.unlinked, ce.hasLocalState { throw FSError.notEmpty }
            }
            if s.recovered.keys.contains(where: { $0.isWithin(location) && $0 != location }) { throw FSError.notEmpty }
            return location
        }
        guard let ns = location.namespace else { throw FSError.notPermitted }
        // Files deleted in it here (`rm -rf`): the server must have done those first.
        try await settleDeletes(at: location, under: true)
        if location.path.isRoot {
            try await remote { try await store.deleteNamespace(ns, recursive: false) }
        } else {
            try await remote { try await store.removeFolder(ns, location.path) }
        }
        state.withLock { s in
            removeName(&s, parent: parent, name: name, ino: ino)
            if s.inodes[parent]?.attributes.nlink ?? 0 > 2 { s.inodes[parent]?.attributes.nlink -= 1 }
            s.namespaces = nil
        }
        urls.forget(under: location)
    }

    /// How many negative entries a folder gathers before the expired ones are dropped.
    static let negativesPrunedEvery = 4096

    /// A name of `ino` other than `name` in `parent`, in a folder listed here (the first found).
    func otherName(_ s: State, of ino: InodeNumber, besides parent: InodeNumber, _ name: String) -> (parent: InodeNumber, name: String)? {
        for (dir, d) in s.inodes {
            guard let children = d.directory?.children else { continue }
            for (n, c) in children where c == ino && !(dir == parent && n.string.isSameName(name)) { return (dir, n.string) }
        }
        return nil
    }

    /// Drops a removed file's cached content from the block cache, soon and on another thread
    /// (callers hold the state lock). Only the cache: a drop that comes late, after the same
    /// version was read into the cache again (a delete refused, the file back), costs a fetch.
    func dropCachedSoon(_ etag: String) {
        let schedule = cacheDrops.withLock { d -> Bool in
            d.etags.append(etag)
            defer { d.scheduled = true }
            return !d.scheduled
        }
        guard schedule else { return }
        DispatchQueue.global(qos: .utility).async { [weak self] in
            guard let self else { return }
            let etags = self.cacheDrops.withLock { d -> [String] in
                d.scheduled = false
                defer { d.etags = [] }
                return d.etags
            }
            for etag in etags { self.blocks.drop(etag: etag) }
        }
    }

    /// Cached contents dropped by now (for tests).
    func cacheDropsSettled() -> Bool { cacheDrops.withLock { $0.etags.isEmpty && !$0.scheduled } }

    /// Takes a name out of a folder; the inode goes once nothing holds it.
    func removeName(_ s: inout State, parent: InodeNumber, name: String, ino: InodeNumber) {
        // In place: a copy of the folder's state would copy its names (the dictionary is shared).
        if s.inodes[parent]?.directory?.children[name] == ino { s.inodes[parent]?.directory?.children[name] = nil }
        let now = ContinuousClock.now
        s.inodes[parent]?.directory?.negative[name] = now + configuration.negativeTTL
        // Expired ones go now and then, not only when the folder is listed again: `rm -rf` of a
        // folder of 100,000 files kept one for each name it removed (about 6 MB).
        if let negative = s.inodes[parent]?.directory?.negative, negative.count % Self.negativesPrunedEvery == 0 {
            s.inodes[parent]?.directory?.negative = negative.filter { $0.value > now }
        }
        touchDirectory(&s, parent)
        guard var e = s.inodes[ino] else { return }
        if e.kind != .directory && e.attributes.nlink > 1 {
            e.attributes.nlink -= 1
            e.attributes.ctime = .now
            e.validUntil = Self.forcedStale
            if e.parent == parent && e.name.isSameName(name), let other = otherName(s, of: ino, besides: parent, name) {
                // Its own name went: another name it has (known in a listed folder) becomes its path.
                e.parent = other.parent
                e.name = other.name
            }
            s.inodes[ino] = e
            return
        }
        e.unlinked = true
        e.attributes.nlink = 0
        e.attributes.ctime = .now
        if let r = e.remote, s.byRemote[r.ino] == ino { s.byRemote[r.ino] = nil }
        if e.openHandles == 0 {
            e.local = nil
            // Its cached content goes with its last name (a file still open keeps it for its reads:
            // `release` drops it then). `rm -rf` of 100,000 stored files kept the block cache's
            // books of each (~250 bytes) and the pack's bytes until eviction.
            if let r = e.remote { dropCachedSoon(r.etag) }
            if e.lookups == 0 {
                s.inodes[ino] = nil
                return
            }
        }
        s.inodes[ino] = e
    }

    public func unlink(parent: InodeNumber, name: String) async throws(FSError) {
        guard !configuration.readOnly else { throw FSError.readOnly }
        let ino = try await findChild(parent, name)
        try await lockedInode(ino) { () async throws(FSError) in try await self.unlinkLocked(parent: parent, name: name, ino: ino) }
    }

    /// unlink(2) on the caller's thread (FuseKit's FUSE thread, so that `rm -rf` does not pay a hop
    /// onto a task and back for each file), when it needs nothing but the journal: the name known
    /// here as a lookup would answer it without the server, the file's last name, stored, with no
    /// upload owed and no stream, and its lock free. False when it needs more: `unlink` does it then.
    public func unlinkHere(parent: InodeNumber, name: String) throws(FSError) -> Bool {
        guard !configuration.readOnly else { throw FSError.readOnly }
        let holds = feedHolds()
        let found = try state.withLock { (s: inout State) throws(FSError) -> InodeNumber? in
            guard case .found(let e) = try cachedLookup(&s, parent: parent, name: name, retain: false, feedHolds: holds) else { return nil }
            return e.ino
        }
        guard let ino = found else { return false }
        return try inodeLocks.ifFree(ino) { () throws(FSError) -> Bool in
            // Under the file's flush lock: a close of it (another descriptor) either recorded its
            // content before, and the file is not for here, or finds it unlinked after.
            var done = false
            try flushLocks.withLock(ino) { () throws(FSError) in done = try unlinkHereLocked(parent: parent, name: name, ino: ino) }
            return done
        } ?? false
    }

    private func unlinkHereLocked(parent: InodeNumber, name: String, ino: InodeNumber) throws(FSError) -> Bool {
        let plan = try state.withLock { (s: inout State) throws(FSError) -> (Location, RemoteInfo)? in
            let e = try inode(s, ino)
            guard e.kind != .directory, !e.unlinked, e.attributes.nlink <= 1, let remote = e.remote, e.owedUploads.isEmpty,
                e.local?.stream == nil, e.local?.heldUpload == nil, s.inodes[parent]?.directory?.children[name] == ino
            else { return nil }
            return (try child(try self.location(s, parent), name), remote)
        }
        guard let (location, remote) = plan else { return false }
        // As `unlinkLocked` does for a last name with nothing owed: the delete queued, the name gone.
        try queueDelete(location, remoteIno: remote.ino, etag: remote.etag)
        state.withLock { s in removeName(&s, parent: parent, name: name, ino: ino) }
        urls.forget(location)
        return true
    }

    private func unlinkLocked(parent: InodeNumber, name: String, ino: InodeNumber) async throws(FSError) {
        let (location, owed, remote, lastName, remaining, replaced) = try state.withLock {
            (s: inout State) throws(FSError) -> (Location, [Int64], RemoteInfo?, Bool, Location?, RemoteInfo?) in
            var e = try inode(s, ino)
            guard e.kind != .directory else { throw FSError.isADirectory }
            if e.local?.stream != nil {
                stopStream(&e.local!, "unlinked")
                s.inodes[ino] = e
            }
            // The name being removed (a hard-linked inode has others; its own path is only one of them),
            // and another name it keeps, if one is known here.
            // The same one `removeName` makes its path. Only a file with other links has one: the
            // search walks every listed folder (done for every unlink, it made `rm -rf` of a folder
            // of 100,000 files quadratic).
            let other = e.attributes.nlink <= 1 ? nil : otherName(s, of: ino, besides: parent, name).flatMap { o in try? child(try self.location(s, o.parent), o.name) }
            return (
                try child(try self.location(s, parent), name), e.owedUploads + (e.local?.heldUpload.map { [$0] } ?? []), e.remote, e.attributes.nlink <= 1,
                other, e.local?.replaced)
        }
        // The server's file, as this mount last knew it (its inode, and its ETag).
        var stored = remote.map { (ino: $0.ino, etag: $0.etag) }
        if lastName {
            // Its content will never be needed on the server: stop what is owed.
            // (The newest that landed had the path last.)
            var newest: Int64 = 0
            for id in owed {
                if let landed = await cancelUpload(id, ino: ino), id > newest {
                    newest = id
                    stored = (landed.inode, landed.etag)
                }
            }
            // None landed, and it was to replace a stored file at this path: that file goes instead.
            if stored == nil, let replaced { stored = (replaced.ino, replaced.etag) }
        } else if let remaining {
            // Uploads owed under the name that goes land under one that stays (else they would bring it back).
            for id in owed where await queue.record(id)?.location == location { _ = await queue.retarget(id, to: remaining) }
        }
        // A last name: the file goes for good, its delete queued (journaled) below, under the flush
        // lock, at the path the name has then (its folder may have been renamed during the waits
        // above: `rename` moves what is queued under it). One name of several: the server's link
        // count must be right now (the others stay).
        if !lastName, stored != nil, let ns = location.namespace {
            do {
                try await store.delete(ns, location.path, ifMatch: nil)
            } catch let e as StorageError where e.kind == .notFound {
            } catch {
                throw FSError.from(error)
            }
        }
        // Under the file's flush lock: a close of it (another descriptor still open) during the
        // waits above made a held record at this path, which nothing else would stop — the next
        // mount would send it over whatever is here then. From here on a close finds it unlinked.
        var late: Int64?
        var deleteFailed: FSError?
        flushLocks.withLocks([ino]) {
            if lastName, let stored, location.namespace != nil {
                do throws(FSError) {
                    let now = try state.withLock { (s: inout State) throws(FSError) -> Location in try child(try self.location(s, parent), name) }
                    try queueDelete(now, remoteIno: stored.ino, etag: stored.etag)
                } catch {
                    deleteFailed = error
                    return
                }
            }
            state.withLock { s in
                for id in owed where lastName {
                    s.uploadOwner[id] = nil
                }
                if lastName {
                    if let held = s.inodes[ino]?.local?.heldUpload, !owed.contains(held) { late = held }
                    s.inodes[ino]?.upload = nil
                    s.inodes[ino]?.olderUploads = []
                    s.inodes[ino]?.local?.heldUpload = nil
                }
                removeName(&s, parent: parent, name: name, ino: ino)
            }
        }
        if let deleteFailed { throw deleteFailed }
        if let late {
            _ = await cancelUpload(late, ino: ino)
            state.withLock { $0.uploadOwner[late] = nil }
        }
        urls.forget(location)
    }

    /// rename(2), with `RENAME_NOREPLACE` and `RENAME_EXCHANGE`. A folder's move and an exchange
    /// take turns (`moveTurn`), after the moves a crash left unfinished (`settleMovesLeft`): each
    /// carries its records from the paths it read when it began, and a move of a path another
    /// move's records still name (a folder moved again while the first move waits for a release)
    /// would leave them there — and a crash in between would leave two journaled moves whose
    /// order the server alone knows.
    public func rename(parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, noReplace: Bool = false, exchange: Bool = false) async throws(FSError) {
        try Self.validate(name: newName)
        guard !configuration.readOnly else { throw FSError.readOnly }
        // A file's rename goes without the turn, unless the name is a folder's by the time it is
        // read there (a rename or a new folder meanwhile), or a folder over its paths is moving:
        // then it waits for the turn.
        if !exchange, try await renameNow(parent: parent, name: name, newParent: newParent, newName: newName, noReplace: noReplace, exchange: false, inTurn: false) {
            return
        }
        // A name that is not there fails now, not after the moves left. Those are waited for by
        // folder moves and exchanges, not by a file's rename sent to the turn by a move under way.
        let source = try await findChild(parent, name)
        if exchange || state.withLock({ $0.inodes[source]?.kind == .directory }) {
            // Outside the turn: one deadline for all the moves waiting, not one after another.
            try await waitForMovesLeft()
        }
        do {
            try await moveTurn.withLock(0) {
                // Again if the name went to another inode while the target was looked up.
                for _ in 0..<3 {
                    if try await self.renameNow(
                        parent: parent, name: name, newParent: newParent, newName: newName, noReplace: noReplace, exchange: exchange, inTurn: true)
                    {
                        return
                    }
                }
                throw FSError.io("\(name): its name kept changing while it was renamed")
            }
        } catch {
            throw FSError.from(error)
        }
    }

    /// Waits (up to 30 s) until the moves the last mount left are settled: what they carry must
    /// reach its paths before a move here moves those paths again.
    private func waitForMovesLeft() async throws(FSError) {
        let deadline = ContinuousClock.now + .seconds(30)
        while !movesLeft.withLock({ $0.isEmpty }) {
            guard ContinuousClock.now < deadline else {
                throw FSError.io("a folder's move left unfinished by the last mount waits for the server's answer; no folder moves until then")
            }
            await Self.nap(.milliseconds(50))
        }
    }

    /// The rename, once its turn is taken if it needs one: returns false, having done nothing but
    /// deletes owed at its paths, when `inTurn` is false and the source is a folder — or a folder
    /// over either path is being moved (the server's rename of the old path would find nothing
    /// there: 404): then it waits for the turn, and finds its paths again after that move. Also
    /// false (to be called again) when the name went to another inode while the target was
    /// looked up.
    private func renameNow(parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, noReplace: Bool, exchange: Bool,
        inTurn: Bool) async throws(FSError) -> Bool
    {
        let src = try await findChild(parent, name)
        if !inTurn && state.withLock({ $0.inodes[src]?.kind == .directory }) { return false }
        let dst: InodeNumber?
        do {
            dst = try await findChild(newParent, newName)
        } catch .notFound {
            dst = nil
        }
        if noReplace && dst != nil { throw FSError.exists }
        if exchange && dst == nil { throw FSError.notFound }
        if src == dst { return true }
        let found = try state.withLock { (s: inout State) throws(FSError) -> (Location, Location, InodeEntry, InodeEntry?)? in
            // The name still the source's: it may have gone to another inode while the target
            // was looked up (`rm f; mkdir f` with `f` open), and the paths are read from the names.
            guard s.inodes[parent]?.directory?.children[name] == src else { return nil }
            let se = try inode(s, src)
            let de = dst.flatMap { s.inodes[$0] }
            let from = try child(try self.location(s, parent), name)
            let to = try child(try self.location(s, newParent), newName)
            guard from.namespace != nil, to.namespace != nil, !from.path.isRoot, !to.path.isRoot else { throw FSError.notPermitted }
            guard from.namespace == to.namespace else { throw FSError.crossDevice }
            if se.kind == .directory && to.isWithin(from) { throw FSError.invalidArgument }
            if let de, !exchange {
                if se.kind == .directory && de.kind != .directory { throw FSError.notADirectory }
                if se.kind != .directory && de.kind == .directory { throw FSError.isADirectory }
                if de.kind == .directory {
                    for c in de.directory?.children.values ?? [:].values where s.inodes[c].map({ !$0.unlinked && $0.hasLocalState }) == true {
                        throw FSError.notEmpty
                    }
                }
            }
            return (from, to, se, de)
        }
        // Looked up again (in the turn, for a folder).
        guard let (srcLoc, dstLoc, srcEntry, _) = found else { return false }
        let ns = srcLoc.namespace!
        // Deletes on their way at either side (a file deleted under the new name, files deleted in
        // a folder that moves): done first, or they would land on what the rename puts there.
        try await settleDeletes(at: srcLoc, under: true)
        try await settleDeletes(at: dstLoc, under: true)
        // Outside the turn, a file's rename is seen by the folder moves that begin meanwhile, which
        // wait for it: its paths are read again (a folder over them may have moved since), and
        // taken as under way, in the lock where a move's own paths are written.
        var underWay = false
        if !inTurn {
            underWay = state.withLock { s in
                guard s.inodes[parent]?.directory?.children[name] == src,
                    let from = try? child(try self.location(s, parent), name), let to = try? child(try self.location(s, newParent), newName),
                    from == srcLoc, to == dstLoc, !s.moving.contains(where: { from.isWithin($0) || to.isWithin($0) })
                else { return false }
                s.fileRenames += [from, to]
                return true
            }
            if !underWay { return false }
        }
        defer {
            if underWay {
                state.withLock { s in
                    for loc in [srcLoc, dstLoc] { if let i = s.fileRenames.firstIndex(of: loc) { s.fileRenames.remove(at: i) } }
                }
            }
        }
        if exchange, let dst {
            // Rare: let what is owed on both sides land first, then swap on the server. Nothing of
            // either side is sent meanwhile: bound to its old path, it would land under the other's
            // name (a file's content over the other file).
            try await settle(srcLoc)
            try await settle(dstLoc)
            await beginMove(srcLoc)
            await beginMove(dstLoc)
            do throws(FSError) {
                try await lockedInode([src, dst]) { () async throws(FSError) in
                    try await self.exchangeLocked(parent: parent, name: name, newParent: newParent, newName: newName, src: src, dst: dst,
                        srcLoc: srcLoc, dstLoc: dstLoc)
                }
            } catch {
                await endMove(srcLoc)
                await endMove(dstLoc)
                throw error
            }
            await endMove(srcLoc)
            await endMove(dstLoc)
            urls.forget(under: srcLoc)
            urls.forget(under: dstLoc)
            return true
        }
        let folder = srcEntry.kind == .directory
        // A folder's files are not locked by the rename: what is queued under it from now on
        // (a close, a new file, an unlink there) waits, and is moved below.
        if folder { await beginMove(srcLoc) }
        let mark: MoveMark?
        do throws(FSError) {
            mark = try await lockedInode([src] + (dst.map { [$0] } ?? [])) { () async throws(FSError) in
                try await self.renameLocked(
                    parent: parent, name: name, newParent: newParent, newName: newName, src: src, dst: dst, srcLoc: srcLoc, dstLoc: dstLoc)
            }
        } catch {
            if folder { await endMove(srcLoc) }
            throw error
        }
        if folder, let mark {
            // Files closed under the folder while it moved queued their old paths: move those too
            // (not those made under a new folder of the old name since).
            let moving = await carried(mark, from: srcLoc)
            unmarkMove(mark)
            await queue.relocate(moving.map { ($0.id, $0.location.rebased(from: srcLoc, to: dstLoc)) }, endingMove: mark.move)
        }
        if folder { await endMove(srcLoc) }
        urls.forget(under: srcLoc)
        urls.forget(under: dstLoc)
        return true
    }

    /// - Returns: for a folder, what its local rename left to move (`markMove`).
    private func renameLocked(
        parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, src: InodeNumber, dst: InodeNumber?, srcLoc: Location,
        dstLoc: Location
    ) async throws(FSError) -> MoveMark? {
        let ns = srcLoc.namespace!
        // A stream is bound to its path: the renamed file (or the one replaced) goes the usual way.
        state.withLock { s in
            for ino in [src] + (dst.map { [$0] } ?? []) where s.inodes[ino]?.local?.stream != nil { stopStream(&s.inodes[ino]!.local!, "renamed") }
        }
        guard let srcEntry = state.withLock({ $0.inodes[src] }) else { throw FSError.notFound }
        let dstEntry = dst.flatMap { d in state.withLock { $0.inodes[d] } }
        // A file's uploads owed under the old name follow it now (interrupted and restarted if
        // running). A folder's wait where they are (`beginMove`) and follow it once its names
        // changed here (`carried`): moved before the server's rename, a release under way would
        // queue the old path after them (and a crash before the rename would make the new folder
        // on the server with only those in it). One running is stopped where it is: it must not
        // land at the old path after the server's rename.
        let moving: [(id: Int64, from: Location)]
        if srcEntry.kind == .directory {
            moving = []
            await queue.stopRunning(under: [srcLoc])
        } else {
            moving = (srcEntry.owedUploads + (srcEntry.local?.heldUpload.map { [$0] } ?? [])).map { ($0, srcLoc) }
        }
        var needsServerRename = srcEntry.kind == .directory || srcEntry.remote != nil
        // Until the server has renamed, the uploads that now name the new path must not start: one
        // that landed first would make a file there that the rename then replaces with the old
        // content (found with rsync into folders made elsewhere: its temp files, made on the
        // server by O_EXCL, were renamed over their own new content, which was lost).
        let ids = moving.map(\.id)
        await queue.pause(ids)
        var retargeted: [(Int64, Location)] = []
        // The newest of them that landed meanwhile: the server's rename moves it to the target,
        // and the others land over it there.
        var landedMoving: (id: Int64, record: UploadQueue.Landed)?
        for m in moving {
            let outcome = await queue.retarget(m.id, to: m.from.rebased(from: srcLoc, to: dstLoc))
            if case .alreadyStored(let stored) = outcome {
                needsServerRename = true
                if m.id > landedMoving?.id ?? 0 { landedMoving = (m.id, stored) }
            } else {
                retargeted.append((m.id, m.from))
            }
        }
        // What the target held is replaced: its owed uploads will not happen. (The newest that
        // landed meanwhile is what the server has at the target now.)
        var targetLanded: RemoteInfo?
        if let d = dstEntry, d.kind != .directory, d.attributes.nlink <= 1 {
            var newest: Int64 = 0
            for id in d.owedUploads + (d.local?.heldUpload.map { [$0] } ?? []) {
                if let landed = await cancelUpload(id, ino: d.ino), id > newest {
                    newest = id
                    targetLanded = RemoteInfo(ino: landed.inode, etag: landed.etag)
                }
            }
        }
        // Without a rename on the server, the stored file at the target stays there until the
        // moved upload lands over it (`LocalContent.replaced`); one this file was to replace at its
        // old name is deleted, since the upload now lands elsewhere. Read as they are now, after
        // the waits above.
        let replacedHere = needsServerRename ? nil : state.withLock { $0.inodes[src]?.local?.replaced }
        var replacesThere: RemoteInfo?
        if !needsServerRename, srcEntry.kind != .directory, let d = dstEntry, d.kind != .directory, d.attributes.nlink <= 1 {
            let now = state.withLock { s in s.inodes[d.ino].map { ($0.remote, $0.local?.replaced) } }
            replacesThere = targetLanded ?? now?.0 ?? d.remote ?? now?.1 ?? d.local?.replaced
        }
        // Journaled with the moved uploads, for a mount started after a crash (put back if the rename fails).
        var replacedBefore: [(Int64, UploadJournal.Deletion?)] = []
        if !needsServerRename {
            replacedBefore = await queue.setReplaces(retargeted.map(\.0), replacesThere?.deletion)
        } else if let (landedID, landed) = landedMoving, srcEntry.kind != .directory {
            let newer = retargeted.map(\.0).filter { $0 > landedID }
            replacedBefore = await queue.setReplaces(newer, RemoteInfo(ino: landed.inode, etag: landed.etag).deletion)
        }
        // Onto one name of a hard-linked file, with no rename on the server: the moved upload would
        // write over the linked file, and its other names would show the new content (and lose
        // their tags). That name goes on the server now, as an unlink of one name of several does,
        // and the upload makes a new file there. The target's own uploads owed under that name
        // move to a name it keeps (else they would land over the new file).
        var movedAway: [(Int64, Location)] = []
        let ontoLinked = !needsServerRename && srcEntry.kind != .directory && dstEntry.map { $0.kind != .directory && $0.attributes.nlink > 1 } == true
        if ontoLinked, let d = dstEntry {
            let remaining = state.withLock { s in
                otherName(s, of: d.ino, besides: newParent, newName).flatMap { o in try? child(try self.location(s, o.parent), o.name) }
            }
            if let remaining {
                for id in d.owedUploads + (d.local?.heldUpload.map { [$0] } ?? []) where await queue.record(id)?.location == dstLoc {
                    _ = await queue.retarget(id, to: remaining)
                    movedAway.append((id, dstLoc))
                }
            }
        }
        // A folder's move is journaled first: a crash after the server's rename and before its
        // records follow (`carried`) would send them to the old paths (`settleMoves`).
        var moveID: Int64?
        do throws(FSError) {
            if needsServerRename {
                if srcEntry.kind == .directory, let inode = srcEntry.remote?.ino {
                    do {
                        moveID = try queue.journal.beginMove(from: srcLoc, to: dstLoc, exchange: false, inode: inode)
                    } catch {
                        throw FSError.io("the move could not be journaled: \(error)")
                    }
                }
                do {
                    _ = try await store.rename(ns, from: srcLoc.path, to: dstLoc.path, replace: true, exchange: false)
                } catch {
                    // No answer after every retry: the server may have renamed, or may still be
                    // renaming. Asked (`serverMoved`), a rename it did is this one's success, not
                    // a failure whose records then go to the old path (bringing back a folder the
                    // server moved).
                    guard (error as? StorageError)?.isTransient == true, let inode = landedMoving?.record.inode ?? srcEntry.remote?.ino,
                        await serverMoved(ns, srcLoc, dstLoc, moving: inode, exchange: false)
                    else { throw FSError.from(error) }
                    logger.notice("\(srcLoc) → \(dstLoc): the server's answer was lost; asked again, it has renamed")
                }
            } else if ontoLinked {
                do {
                    try await store.delete(ns, dstLoc.path, ifMatch: nil)
                } catch let e as StorageError where e.kind == .notFound {
                } catch {
                    throw FSError.from(error)
                }
            }
        } catch {
            if let moveID { endMove(moveID) }
            for (id, from) in retargeted + movedAway { _ = await queue.retarget(id, to: from) }
            await queue.restoreReplaces(replacedBefore)
            await queue.resume(ids)
            throw error
        }
        await queue.resume(ids)
        if moveID != nil, let hook = afterServerMove.withLock({ $0 }) { await hook() }
        if let r = replacedHere {
            // The rename is done from here on: a delete the journal could not take is logged, not
            // thrown (the old file then stays on the server, as it would have before).
            do throws(FSError) {
                try queueDelete(srcLoc, remoteIno: r.ino, etag: r.etag)
            } catch {
                logger.error("\(srcLoc): the file this one replaced stays on the server: its delete could not be queued: \(error)")
            }
        }
        // Under the flush locks of both files: a close of either (another descriptor) during the
        // waits above made a held record at its old path, which the moves and cancels above did
        // not see. The moved file's goes to the new path, the replaced file's is stopped; from
        // here on a close finds the new name (or the target unlinked).
        var lateMoved: Int64?, lateReplaced: Int64?
        let movedIDs = Set(moving.map(\.id))
        let replacedIDs = Set(dstEntry.map { $0.owedUploads + ($0.local?.heldUpload.map { [$0] } ?? []) } ?? [])
        // A folder: every file's, since a close of any file under it reads the path it records.
        let lockAll = srcEntry.kind == .directory
        var mark: MoveMark?
        func moveHere() {
            state.withLock { s in
                if lockAll { mark = markMove(&s, under: [srcLoc]) }
                if srcEntry.kind != .directory, let held = s.inodes[src]?.local?.heldUpload, !movedIDs.contains(held) { lateMoved = held }
                if let dst, let d = dstEntry, d.kind != .directory, d.attributes.nlink <= 1, let held = s.inodes[dst]?.local?.heldUpload,
                    !replacedIDs.contains(held)
                {
                    lateReplaced = held
                    s.inodes[dst]?.local?.heldUpload = nil
                }
                renamedHere(&s, parent: parent, name: name, newParent: newParent, newName: newName, src: src, dst: dst, srcEntry: srcEntry,
                    replacesThere: replacesThere, srcLoc: srcLoc, dstLoc: dstLoc)
            }
        }
        func moveAndMark() {
            moveHere()
            if let moveID, mark != nil { mark!.move = journalMark(moveID, mark!) }
        }
        if lockAll { flushLocks.withAllLocks(moveAndMark) } else { flushLocks.withLocks([src] + (dst.map { [$0] } ?? []), moveHere) }
        if let lateMoved {
            _ = await queue.retarget(lateMoved, to: dstLoc)
            // What it replaces there, as for the records moved before (for a mount after a crash).
            if !needsServerRename {
                await queue.setReplaces([lateMoved], replacesThere?.deletion)
            } else if let (_, landed) = landedMoving, srcEntry.kind != .directory {
                await queue.setReplaces([lateMoved], RemoteInfo(ino: landed.inode, etag: landed.etag).deletion)
            }
        }
        if let lateReplaced, let dst {
            _ = await cancelUpload(lateReplaced, ino: dst)
            state.withLock { $0.uploadOwner[lateReplaced] = nil }
        }
        return mark
    }

    /// The swap of two files or folders (`RENAME_EXCHANGE`), under both inode locks (no release
    /// of either file meanwhile) and `beginMove` of both paths. What either side owes was settled
    /// just before; what it queued since, and a close during the server's swap (a held record at
    /// its old path), would land under the other's name and write over what is there. Those wait
    /// for the swap (a running one interrupted), and then follow their file. (Moved after the
    /// server's swap, not before: a crash between the two would then send one side's content over
    /// the other's.)
    private func exchangeLocked(
        parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, src: InodeNumber, dst: InodeNumber, srcLoc: Location,
        dstLoc: Location
    ) async throws(FSError) {
        let ns = srcLoc.namespace!
        let folders = state.withLock { s in
            // A file's stream is bound to its path: the file goes the usual way. (Under a folder, a
            // stream neither starts nor completes while it moves, and its path no longer matches after.)
            for ino in [src, dst] where s.inodes[ino]?.local?.stream != nil { stopStream(&s.inodes[ino]!.local!, "exchanged") }
            return [src, dst].contains { s.inodes[$0]?.kind == .directory }
        }
        // One running is stopped where it is (to its own path): it must not land after the swap.
        await queue.stopRunning(under: [srcLoc, dstLoc])
        // Where `from`'s server inode is says whether an exchange whose answer did not come swapped
        // (not known, nothing is sent).
        let moving = try await remote { try await store.record(ns, srcLoc.path).inode }
        // Journaled first: a crash after the server's swap and before the records follow would
        // send each side's to the other's name (`settleMoves`).
        let moveID: Int64
        do {
            moveID = try queue.journal.beginMove(from: srcLoc, to: dstLoc, exchange: true, inode: moving)
        } catch {
            throw FSError.io("the exchange could not be journaled: \(error)")
        }
        do {
            _ = try await store.rename(ns, from: srcLoc.path, to: dstLoc.path, replace: false, exchange: true)
        } catch let error as StorageError where error.isTransient {
            guard await serverMoved(ns, srcLoc, dstLoc, moving: moving, exchange: true) else {
                endMove(moveID)
                throw FSError.from(error)
            }
            logger.warning("\(srcLoc) ⇄ \(dstLoc): the server swapped them, though its answer did not come")
        } catch {
            endMove(moveID)
            throw FSError.from(error)
        }
        if let hook = afterServerMove.withLock({ $0 }) { await hook() }
        var mark: MoveMark?
        // A folder's: every file's flush lock, since a close of any file under it reads the path it records.
        let swapHere = {
            self.state.withLock { s in
                mark = self.markMove(&s, under: [srcLoc, dstLoc])
                self.exchangedHere(&s, parent: parent, name: name, newParent: newParent, newName: newName, src: src, dst: dst,
                    srcLoc: srcLoc, dstLoc: dstLoc)
            }
            mark!.move = self.journalMark(moveID, mark!)
        }
        if folders { flushLocks.withAllLocks(swapHere) } else { flushLocks.withLocks([src, dst], swapHere) }
        // Both lists taken before either moves: moved first, one side's would be taken for the other's.
        let fromSrc = await carried(mark!, from: srcLoc), fromDst = await carried(mark!, from: dstLoc)
        unmarkMove(mark!)
        await queue.relocate(
            fromSrc.map { ($0.id, $0.location.rebased(from: srcLoc, to: dstLoc)) } + fromDst.map { ($0.id, $0.location.rebased(from: dstLoc, to: srcLoc)) },
            endingMove: mark!.move)
    }

    /// A rename's or an exchange's outcome when its answer did not come (the store's own tries
    /// spent): whether the server moved the inode `moving` to `dstLoc`, asked of it for
    /// `renameOutcomeWait` (30 s; the records at both paths wait meanwhile). Not moved yet is not
    /// an answer: the request may still be under way on the server (a balancer gave up on it), so
    /// only a move seen ends the wait early — or, for a rename, a question the server does not
    /// answer. Given up for lost, a move that happened would send
    /// the records to the old paths: a folder made again beside the moved one, or each side of
    /// an exchange over the other. (Each question has the store's own retries and timeout:
    /// against a server that does not answer at all, it takes longer.)
    private func serverMoved(_ ns: Namespace, _ srcLoc: Location, _ dstLoc: Location, moving: UInt64, exchange: Bool) async -> Bool {
        let wait = configuration.renameOutcomeWait
        let deadline = ContinuousClock.now + wait
        while true {
            do {
                if try await store.record(ns, dstLoc.path).inode == moving { return true }
            } catch let error as StorageError where error.saysNothingThere {
                // Answered: nothing moved there yet.
            } catch {
                // Not answered: a rename asks no more (its records go back to the old paths, as
                // they did before this look was asked — a mount whose server is away waits for the
                // store's tries once, not 30 s); an exchange asks on, since given up for lost, a
                // swap that happened would send each side's records over the other's.
                if !exchange {
                    logger.error("\(srcLoc) → \(dstLoc): the server cannot be asked whether it renamed (\(error)); taken as not done")
                    return false
                }
            }
            guard ContinuousClock.now < deadline else {
                logger.error("\(srcLoc) \(exchange ? "⇄" : "→") \(dstLoc): the server did not show it done within \(wait); taken as not done")
                return false
            }
            try? await Task.sleep(for: min(.seconds(1), wait / 4))
        }
    }

    /// An exchange, as this mount's tree shows it (the caller holds the state lock).
    private func exchangedHere(
        _ s: inout State, parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, src: InodeNumber, dst: InodeNumber,
        srcLoc: Location, dstLoc: Location
    ) {
        s.inodes[parent]?.directory?.children[name] = dst
        s.inodes[newParent]?.directory?.children[newName] = src
        s.inodes[src]?.parent = newParent
        s.inodes[src]?.name = newName
        s.inodes[dst]?.parent = parent
        s.inodes[dst]?.name = name
        s.inodes[src]?.attributes.ctime = .now
        s.inodes[dst]?.attributes.ctime = .now
        touchDirectory(&s, parent)
        touchDirectory(&s, newParent)
        if s.inodes[src]?.kind == .directory && s.inodes[dst]?.kind != .directory && parent != newParent {
            s.inodes[parent]?.attributes.removeSubfolder()
            s.inodes[newParent]?.attributes.addSubfolder()
        } else if s.inodes[dst]?.kind == .directory && s.inodes[src]?.kind != .directory && parent != newParent {
            s.inodes[newParent]?.attributes.removeSubfolder()
            s.inodes[parent]?.attributes.addSubfolder()
        }
        // Recovered uploads swap too (both sides taken before either is put back).
        let recovered = s.recovered.filter { $0.key.isWithin(srcLoc) || $0.key.isWithin(dstLoc) }
        for loc in recovered.keys { s.recovered[loc] = nil }
        for (loc, r) in recovered {
            var moved = r
            moved.location = loc.isWithin(srcLoc) ? loc.rebased(from: srcLoc, to: dstLoc) : loc.rebased(from: dstLoc, to: srcLoc)
            s.recovered[moved.location] = moved
        }
    }

    /// What a move carries from its old paths: the records made before its names changed here
    /// (ids up to `lastGiven`), and those of the releases that had read an old path then (`takes`,
    /// recorded later). A record made after, under a folder of the old name made since (or the
    /// other side of an exchange, at that name now), stays where it is: told apart by path, it
    /// looked the same.
    struct MoveMark {
        let lastGiven: Int64
        let takes: Set<Int64>
        /// The journaled move (`UploadJournal.Move`) this marks, once its mark is written there.
        var move: Int64?
    }

    /// Marks a move at the moment its names change here: the caller holds the state lock and the
    /// flush locks of every file at or under `locations` (a record written under a flush lock has
    /// its path and its id from one moment).
    func markMove(_ s: inout State, under locations: [Location]) -> MoveMark {
        let takes = Set(s.takes.filter { t in locations.contains { t.value.isWithin($0) } }.keys)
        for t in takes { s.watchedTakes[t, default: 0] += 1 }
        // One id skipped: content taken from now on reads a larger last id than the mark, so a
        // mount after a crash tells it from content taken before (`UploadJournal.Move.carries`).
        return MoveMark(lastGiven: queue.journal.lastGivenSkippingOne(), takes: takes)
    }

    /// A journaled move the server did not make, forgotten (one left behind is asked about at the
    /// next start).
    func endMove(_ move: Int64) {
        do {
            try queue.journal.endMove(move)
        } catch {
            logger.error("a move the server did not make stays in the journal: \(error)")
        }
    }

    /// Writes a move's mark to the journal (synced), under the flush locks of everything it moves:
    /// no close records a file under a folder made since at the old name before the mark is on
    /// disk. Returns the move, for the commit that ends it; a mark not written is logged (a mount
    /// after a crash then moves every record at the old paths).
    func journalMark(_ move: Int64, _ mark: MoveMark) -> Int64 {
        do {
            try queue.journal.markMove(move, mark: mark.lastGiven)
        } catch {
            logger.error("a move's mark could not be journaled: \(error)")
        }
        return move
    }

    /// The records at or under `location` a move marked by `mark` carries, once the releases under
    /// way then have written theirs (each read its file's path when it took the content, and writes
    /// it to the journal after an fsync; at most a minute: a disk that slow has bigger troubles,
    /// and the move must not hang on it).
    func carried(_ mark: MoveMark, from location: Location) async -> [UploadJournal.Record] {
        let deadline = ContinuousClock.now + .seconds(60)
        while state.withLock({ s in mark.takes.contains { s.takes[$0] != nil } }) {
            guard ContinuousClock.now < deadline else {
                logger.error("\(location): a file's content taken for upload before the move was not recorded within a minute; it may go to its old path")
                break
            }
            await Self.nap(.milliseconds(1))
        }
        if let hook = afterMovedHere.withLock({ $0 }) { await hook() }
        let late = state.withLock { s in Set(mark.takes.compactMap { s.takeRecords[$0] }) }
        return await queue.records(under: location).filter { $0.id <= mark.lastGiven || late.contains($0.id) }
    }

    /// A move is over: what it watched is forgotten.
    func unmarkMove(_ mark: MoveMark) {
        state.withLock { s in
            // Counted: two moves at once (a folder and its parent) may watch one take.
            for t in mark.takes {
                let left = (s.watchedTakes[t] ?? 1) - 1
                s.watchedTakes[t] = left > 0 ? left : nil
                if left <= 0 { s.takeRecords[t] = nil }
            }
        }
    }

    /// A folder's rename or an exchange begins at `location`: nothing queued at or under it
    /// is sent (`UploadQueue.pause(under:)`), and no stream there starts or completes
    /// (`State.moving`) — each is bound to the old path, and sent meanwhile would land there (a
    /// folder made again, or the other file of an exchange written over). Waits for a stream
    /// completing now, and for the file renames under way there. `endMove` undoes it, once what
    /// was queued there is moved.
    private func beginMove(_ location: Location) async {
        await queue.pause(under: location)
        state.withLock { $0.moving.append(location) }
        let deadline = ContinuousClock.now + configuration.streamFinishTimeout + .seconds(5)
        // And for the file renames under way there (`renameNow`): the server's rename of a path
        // this move takes away would fail.
        while state.withLock({ s in s.finishing.values.contains { $0.isWithin(location) } || s.fileRenames.contains { $0.isWithin(location) } }),
            ContinuousClock.now < deadline
        {
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    private func endMove(_ location: Location) async {
        state.withLock { s in
            if let i = s.moving.firstIndex(of: location) { s.moving.remove(at: i) }
        }
        await queue.resume(under: location)
    }

    /// The rename, as this mount's tree shows it (the caller holds the state lock).
    private func renamedHere(
        _ s: inout State, parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, src: InodeNumber, dst: InodeNumber?,
        srcEntry: InodeEntry, replacesThere: RemoteInfo?, srcLoc: Location, dstLoc: Location
    ) {
        if s.inodes[src]?.local != nil { s.inodes[src]?.local?.replaced = replacesThere }
        if let dst {
            removeName(&s, parent: newParent, name: newName, ino: dst)
            if srcEntry.kind == .directory && s.inodes[newParent]?.attributes.nlink ?? 0 > 2 { s.inodes[newParent]?.attributes.nlink -= 1 }
        }
        if s.inodes[parent]?.directory?.children[name] == src { s.inodes[parent]?.directory?.children[name] = nil }
        s.inodes[parent]?.directory?.negative[name] = .now + configuration.negativeTTL
        s.inodes[newParent]?.directory?.children[newName] = src
        s.inodes[newParent]?.directory?.negative[newName] = nil
        s.inodes[src]?.parent = newParent
        s.inodes[src]?.name = newName
        s.inodes[src]?.attributes.ctime = .now
        s.inodes[src]?.changedAt = .now
        if srcEntry.kind == .directory && parent != newParent {
            s.inodes[parent]?.attributes.removeSubfolder()
            s.inodes[newParent]?.attributes.addSubfolder()
        }
        touchDirectory(&s, parent)
        touchDirectory(&s, newParent)
        // Recovered uploads move too.
        for (loc, r) in s.recovered where loc.isWithin(srcLoc) {
            s.recovered[loc] = nil
            var moved = r
            moved.location = loc.rebased(from: srcLoc, to: dstLoc)
            s.recovered[moved.location] = moved
        }
    }

    /// Waits until nothing is owed to the server at or under `location`; EIO if the server refused any of it.
    func settle(_ location: Location) async throws(FSError) {
        let inodes: [InodeNumber] = state.withLock { s in
            s.inodes.values.filter { $0.local?.dirty == true && ((try? self.location(s, $0.ino).isWithin(location)) ?? false) }.map(\.ino)
        }
        for ino in inodes { try await submit(ino, onlyIfClosed: false) }
        let ids = await queue.records(under: location).map(\.id)
        try await waitForUploads(Set(ids))
    }

    /// A hard link `newName` in `newParent` to `ino`.
    public func link(_ ino: InodeNumber, newParent: InodeNumber, newName: String) async throws(FSError) -> Entry {
        try Self.validate(name: newName)
        guard !configuration.readOnly else { throw FSError.readOnly }
        let (from, to) = try state.withLock { (s: inout State) throws(FSError) -> (Location, Location) in
            let e = try inode(s, ino)
            guard e.kind != .directory else { throw FSError.notPermitted }
            let from = try self.location(s, ino)
            let to = try child(try self.location(s, newParent), newName)
            guard from.namespace == to.namespace else { throw FSError.crossDevice }
            return (from, to)
        }
        // The server links stored inodes: what is owed lands first.
        try await settle(from)
        try await settleDeletes(at: to)
        let record = try await remote { try await store.link(from.namespace!, from: from.path, to: to.path) }
        return state.withLock { s in
            s.inodes[newParent]?.directory?.children[newName] = ino
            s.inodes[newParent]?.directory?.negative[newName] = nil
            // At least 1, as `attributes(_:ino:)` shows a record's count: the file has this name.
            s.inodes[ino]?.attributes.nlink = max(1, record.nlink)
            s.inodes[ino]?.attributes.ctime = TimeSpec(nanoseconds: record.ctimeNs)
            s.inodes[ino]?.lookups += 1
            if s.inodes[ino]?.remote == nil { s.inodes[ino]?.remote = RemoteInfo(ino: record.inode, etag: record.etag) }
            s.byRemote[record.inode] = ino
            touchDirectory(&s, newParent)
            return entry(s.inodes[ino]!)
        }
    }

    public func symlink(target: String, parent: InodeNumber, name: String, caller: Caller) async throws(FSError) -> Entry {
        try await makeNode(parent: parent, name: name, NodeRequest(kind: .symlink, mode: 0o777, uid: caller.uid, gid: caller.gid, target: target))
    }

    public func readlink(_ ino: InodeNumber) async throws(FSError) -> String {
        if let t = state.withLock({ $0.inodes[ino]?.meta.target }) { return t }
        _ = try await getattr(ino)
        guard let t = state.withLock({ $0.inodes[ino]?.meta.target }) else { throw FSError.invalidArgument }
        return t
    }

    /// mknod(2): fifos, sockets and device nodes; a regular file is an empty file.
    public func mknod(parent: InodeNumber, name: String, mode: UInt32, rdev: UInt64, caller: Caller) async throws(FSError) -> Entry {
        let type = mode & 0o170000
        let kind: NodeKind
        switch type {
        case 0o010000: kind = .fifo
        case 0o140000: kind = .socket
        case 0o020000: kind = .characterDevice
        case 0o060000: kind = .blockDevice
        case 0o100000, 0:
            let (entry, opened) = try create(parent: parent, name: name, mode: mode & 0o7777, caller: caller)
            await release(entry.ino, handle: opened.handle)
            return entry
        default: throw FSError.invalidArgument
        }
        return try await makeNode(
            parent: parent, name: name,
            NodeRequest(kind: kind, mode: mode & 0o7777, uid: caller.uid, gid: caller.gid, rdev: kind == .characterDevice || kind == .blockDevice ? rdev : nil))
    }

    func makeNode(parent: InodeNumber, name: String, _ request: NodeRequest) async throws(FSError) -> Entry {
        try Self.validate(name: name)
        guard !configuration.readOnly else { throw FSError.readOnly }
        let location = try state.withLock { (s: inout State) throws(FSError) -> Location in try child(try self.location(s, parent), name) }
        guard let ns = location.namespace, !location.path.isRoot else { throw FSError.notPermitted }
        try await settleDeletes(at: location)
        let record = try await remote { try await store.makeNode(ns, location.path, request) }
        return state.withLock { s in
            let ino = upsert(&s, record, parent: parent, name: name)
            s.inodes[ino]?.lookups += 1
            touchDirectory(&s, parent)
            return entry(s.inodes[ino]!)
        }
    }

    // MARK: - setattr

    public func setattr(_ ino: InodeNumber, _ changes: AttributeChanges, handle: UInt64?) async throws(FSError) -> FileAttributes {
        guard !configuration.readOnly else { throw FSError.readOnly }
        if let size = changes.size { try await truncate(ino, to: Int64(size)) }
        guard changes.mode != nil || changes.uid != nil || changes.gid != nil || changes.atime != nil || changes.mtime != nil else {
            return try state.withLock { (s: inout State) throws(FSError) in try inode(s, ino).attributes }
        }
        let now = TimeSpec.now
        let patch = Self.patch(changes, now: now)
        try await lockedInode(ino) { () async throws(FSError) in try await self.applyAttributes(ino, patch, now: now) }
        return try state.withLock { (s: inout State) throws(FSError) in try inode(s, ino).attributes }
    }

    /// chmod, chown and utimens of a file being written here (its changed content not handed to
    /// the queue yet), answered at once: the upload to come takes the attributes as they are, as
    /// `setattr` would decide after its waits. nil when the case needs `setattr` (a size, a stored
    /// or queued file, the inode's lock held).
    public func setattrHere(_ ino: InodeNumber, _ changes: AttributeChanges) throws(FSError) -> FileAttributes? {
        guard !configuration.readOnly else { throw FSError.readOnly }
        guard changes.size == nil, changes.mode != nil || changes.uid != nil || changes.gid != nil || changes.atime != nil || changes.mtime != nil else {
            return nil
        }
        let now = TimeSpec.now
        let patch = Self.patch(changes, now: now)
        return try inodeLocks.ifFree(ino) { () throws(FSError) -> FileAttributes? in
            try state.withLock { (s: inout State) throws(FSError) -> FileAttributes? in
                var e = try inode(s, ino)
                guard e.hasLocalState, e.local?.dirty == true else { return nil }
                apply(patch, to: &e, now: now)
                s.inodes[ino] = e
                return e.attributes
            }
        } ?? nil
    }

    static func patch(_ changes: AttributeChanges, now: TimeSpec) -> FilePatch {
        func resolve(_ c: AttributeChanges.TimeChange?) -> TimeSpec? {
            switch c {
            case .none: nil
            case .now: now
            case .set(let t): t
            }
        }
        return FilePatch(
            mode: changes.mode.map { $0 & 0o7777 }, uid: changes.uid, gid: changes.gid, atimeNs: resolve(changes.atime)?.nanoseconds,
            mtimeNs: resolve(changes.mtime)?.nanoseconds, ctimeNs: now.nanoseconds)
    }

    func apply(_ patch: FilePatch, to e: inout InodeEntry, now: TimeSpec) {
        if let m = patch.mode { e.attributes.mode = m }
        if let u = patch.uid { e.attributes.uid = u }
        if let g = patch.gid { e.attributes.gid = g }
        if let a = patch.atimeNs { e.attributes.atime = TimeSpec(nanoseconds: a) }
        if let m = patch.mtimeNs { e.attributes.mtime = TimeSpec(nanoseconds: m) }
        e.attributes.ctime = now
        e.changedAt = .now
    }

    /// Runs `body` holding the inode's lock, with typed errors.
    func lockedInode<T>(_ inodes: [InodeNumber], _ body: () async throws(FSError) -> T) async throws(FSError) -> T {
        do {
            return try await inodeLocks.withLocks(inodes) { try await body() }
        } catch {
            throw FSError.from(error)
        }
    }

    func lockedInode<T>(_ ino: InodeNumber, _ body: () async throws(FSError) -> T) async throws(FSError) -> T {
        try await lockedInode([ino], body)
    }

    private func applyAttributes(_ ino: InodeNumber, _ patch: FilePatch, now: TimeSpec) async throws(FSError) {
        let (owed, location, local, unlinked) = try state.withLock { (s: inout State) throws(FSError) -> ([Int64], Location, Bool, Bool) in
            var e = try inode(s, ino)
            apply(patch, to: &e, now: now)
            s.inodes[ino] = e
            return (e.owedUploads + (e.local?.heldUpload.map { [$0] } ?? []), try self.location(s, ino), e.hasLocalState, e.unlinked)
        }
        if local, try await amendOwed(ino, owed, patch: patch) {
            // Travels with the upload (or right after it, if it started).
        } else if unlinked {
            // Unlinked here (still open): its server file is deleted or about to be (and a change
            // there would make its queued delete, conditional on the ETag, refuse). Kept here.
        } else if let ns = location.namespace, !location.path.isRoot {
            let record = try await remote { try await store.update(ns, location.path, patch, ifMatch: nil) }
            state.withLock { s in applyUpdated(&s, ino, record) }
        }
    }

    /// Updates the uploads owed for an inode with its current attributes and metadata.
    /// - Returns: false when nothing is owed any more (the caller then changes the server itself).
    func amendOwed(_ ino: InodeNumber, _ owed: [Int64], patch: FilePatch) async throws(FSError) -> Bool {
        guard let e = state.withLock({ $0.inodes[ino] }) else { return false }
        if e.local?.dirty == true { return true }  // the next upload takes the attributes as they are
        let (params, ct, tags) = uploadParams(e)
        var amended = false
        for id in owed {
            do {
                if try await queue.amend(id, params: params, contentType: ct, tags: tags, patch: patch) { amended = true }
            } catch {
                throw FSError.from(error)
            }
        }
        return amended
    }

    /// The largest file kept (16 TiB, ext4's limit): a larger size or write is EFBIG.
    public static let maxFileSize: Int64 = 1 << 44

    func truncate(_ ino: InodeNumber, to size: Int64) async throws(FSError) {
        guard size >= 0 else { throw FSError.invalidArgument }
        guard size <= Self.maxFileSize else { throw FSError.fileTooLarge }
        let remoteOnly = try state.withLock { (s: inout State) throws(FSError) -> Bool in
            var e = try inode(s, ino)
            guard e.kind == .file else { throw e.kind == .directory ? FSError.isADirectory : FSError.invalidArgument }
            guard e.local != nil else { return true }
            if size != e.local!.size { stopStream(&e.local!, "truncated") }
            // Emptied (as `dd` does with ftruncate instead of O_TRUNC): written from empty again.
            if size == 0 { e.local!.appendOnly = e.local!.writers <= 1 }
            try ensureWritable(&e)
            try e.local!.file.truncate(to: size)
            e.local!.size = size
            e.local!.changed()
            e.attributes.size = UInt64(size)
            e.attributes.mtime = .now
            e.attributes.ctime = .now
            s.inodes[ino] = e
            return false
        }
        if !remoteOnly {
            try await submit(ino, onlyIfClosed: true)
            return
        }
        let (location, current, unlinked) = try state.withLock { (s: inout State) throws(FSError) -> (Location, UInt64, Bool) in
            let e = try inode(s, ino)
            return (try self.location(s, ino), e.attributes.size, e.unlinked)
        }
        guard UInt64(size) != current, let ns = location.namespace else { return }
        if unlinked {
            // As for its attributes (`applyAttributes`): kept here.
            state.withLock { s in
                s.inodes[ino]?.attributes.size = UInt64(size)
                s.inodes[ino]?.attributes.mtime = .now
                s.inodes[ino]?.attributes.ctime = .now
            }
            return
        }
        let record = try await remote { try await store.update(ns, location.path, FilePatch(size: size), ifMatch: nil) }
        state.withLock { s in applyUpdated(&s, ino, record) }
    }
}
