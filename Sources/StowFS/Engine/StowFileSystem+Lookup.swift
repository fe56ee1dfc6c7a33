import Foundation
import Logging
import Synchronization
import StorageClient
import StorageProtocol

/// lookup, getattr, forget, and directory listings.
extension StowFileSystem {
    /// What a cached lookup can answer without the server.
    enum CachedLookup {
        case found(Entry)
        case missing
        case unknown(Location)
    }

    /// `feedHolds`: `feedHolds()`, read before the state lock was taken.
    func cachedLookup(_ s: inout State, parent: InodeNumber, name: String, retain: Bool = true, feedHolds: Bool) throws(FSError) -> CachedLookup {
        let p = try inode(s, parent)
        guard p.kind == .directory, let dir = p.directory else { throw FSError.notADirectory }
        let now = ContinuousClock.now
        if let ino = dir.children[name], var e = s.inodes[ino], !e.unlinked {
            // Past its TTL, a name of a listing the change feed keeps current is current too —
            // unless something expired it on purpose (the feed named it, a change of this
            // mount's needs the server's answer). `rm -rf` of a folder of 10,000 files outlived
            // the kernel's entry TTL and asked the server for each name (3.6 ms each).
            if e.hasLocalState || e.validUntil > now || (e.validUntil != Self.forcedStale && dir.heldByFeed && dir.stands(now: now, feedHolds: feedHolds)) {
                if retain { e.lookups += 1 }
                s.inodes[ino] = e
                return .found(entry(e))
            }
        }
        let location = try child(try self.location(s, parent), name)
        if let r = s.recovered[location] {
            let e = claimRecovered(&s, r, parent: parent, name: name)
            if !retain { s.inodes[e.ino]?.lookups -= 1 }
            return .found(e)
        }
        if let until = dir.negative[name], until > now { return .missing }
        if dir.stands(now: now, feedHolds: feedHolds) && dir.children[name] == nil { return .missing }
        return .unknown(location)
    }

    /// A fast, synchronous lookup for FuseKit: answers from the caches or returns nil.
    public func lookupCached(parent: InodeNumber, name: String) -> Result<Entry, FSError>? {
        let holds = feedHolds()
        do {
            return try state.withLock { (s: inout State) throws(FSError) -> Result<Entry, FSError>? in
                try Self.validate(name: name)
                switch try cachedLookup(&s, parent: parent, name: name, feedHolds: holds) {
                case .found(let e): return .success(e)
                case .missing: return .failure(.notFound)
                case .unknown: return nil
                }
            }
        } catch {
            return .failure(error)
        }
    }

    /// Finds `name` in the folder `parent`; takes a lookup reference on the inode.
    public func lookup(parent: InodeNumber, name: String) async throws(FSError) -> Entry {
        try await lookup(parent: parent, name: name, retain: true)
    }

    /// The inode of `name` in `parent`, without taking a reference (for the engine's own use).
    func findChild(_ parent: InodeNumber, _ name: String) async throws(FSError) -> InodeNumber {
        try await lookup(parent: parent, name: name, retain: false).ino
    }

    func lookup(parent: InodeNumber, name: String, retain: Bool) async throws(FSError) -> Entry {
        try Self.validate(name: name)
        let holds = feedHolds()
        let cached = try state.withLock { (s: inout State) throws(FSError) -> CachedLookup in
            try cachedLookup(&s, parent: parent, name: name, retain: retain, feedHolds: holds)
        }
        let location: Location
        switch cached {
        case .found(let e): return e
        case .missing: throw FSError.notFound
        case .unknown(let l): location = l
        }
        // A folder never listed: the first names looked up in it are asked for alone — a `stat`
        // of one file among a million costs one small request, not a listing of up to 5,000 names
        // and an inode for each (that was 62 ms and 0.7 MB a stat in folders of 1,000). A few
        // lookups in a row, or one in a folder listed before whose listing went stale, list the
        // folder, up to a few thousand names, and the lookups that follow are answered from the
        // listing: `cp -r` into a folder then costs one listing, not a request per new name (and
        // a folder listed once answers from its listing while the server is away). A folder found
        // too large for that is not listed again on every lookup (that made each create in a
        // folder of 8,000 files list 5,000 names): for a while, its lookups ask for the one name.
        let (tooLarge, listNow) = state.withLock { s -> (Bool, Bool) in
            guard var dir = s.inodes[parent]?.directory else { return (false, true) }
            let now = ContinuousClock.now
            let tooLarge = dir.tooLargeToListUntil.map { $0 > now } ?? false
            // A name of a listing the feed still holds: the feed named the file, not the folder
            // (another client rewrote it), so only its record is asked for. (It listed the whole
            // folder: a `stat` of a file rewritten elsewhere cost a listing of up to 5,000 names.)
            if location.namespace != nil, dir.heldByFeed, dir.stands(now: now, feedHolds: holds), dir.children[name] != nil { return (tooLarge, false) }
            // The root of an all-namespaces mount lists its namespaces; there is no one name to ask for.
            guard location.namespace != nil, !dir.everListed, !dir.complete else { return (tooLarge, true) }
            let run = dir.loneLookupAt.map { now - $0 < Self.listAfterLoneLookupWithin } == true ? Int(dir.loneLookups) + 1 : 1
            let listNow = run > Self.loneLookupsBeforeListing
            dir.loneLookupAt = listNow ? nil : now
            dir.loneLookups = listNow ? 0 : UInt8(run)
            s.inodes[parent]?.directory = dir
            return (tooLarge, listNow)
        }
        do throws(FSError) {
            if !tooLarge && listNow {
                if try await refreshDirectory(parent, cap: Self.lookupListingCap) {
                    return try answerFromListing(parent: parent, name: name, retain: retain)
                }
                state.withLock { s in s.inodes[parent]?.directory?.tooLargeToListUntil = .now + Self.tooLargeToListFor }
            }
        } catch {
            // Offline: what we knew, however old, still answers — a name we had seen, or a whole listing.
            let known = state.withLock { s in
                s.inodes[parent]?.directory.map { $0.complete || $0.children[name].flatMap { s.inodes[$0] }.map { !$0.unlinked } == true } ?? false
            }
            guard case .io = error, known else { throw error }
            logger.debug("server unreachable; answering \(location) from the last listing")
            return try answerFromListing(parent: parent, name: name, retain: retain)
        }
        // A huge folder: ask for this one name.
        guard let ns = location.namespace, !location.path.isRoot else { throw FSError.notFound }
        let record: FileRecord
        let read = beginRead()
        defer { endRead(read.token) }
        let asked = read.at
        do {
            record = try await store.record(ns, location.path)
        } catch let e as StorageError where e.kind == .notFound {
            state.withLock { $0.inodes[parent]?.directory?.negative[name] = .now + configuration.negativeTTL }
            throw FSError.notFound
        } catch {
            // Offline: what we knew, however old, still answers, as above.
            let failure = FSError.from(error)
            let known = state.withLock { s in
                s.inodes[parent]?.directory.map { $0.complete || $0.children[name].flatMap { s.inodes[$0] }.map { !$0.unlinked } == true } ?? false
            }
            guard case .io = failure, known else { throw failure }
            return try answerFromListing(parent: parent, name: name, retain: retain)
        }
        return try state.withLock { (s: inout State) throws(FSError) -> Entry in
            if deletedHere(s, record, observedAt: asked) { throw FSError.notFound }
            let ino = upsert(&s, record, parent: parent, name: name, observedAt: asked)
            if retain { s.inodes[ino]?.lookups += 1 }
            return entry(s.inodes[ino]!)
        }
    }

    /// Folders up to this many names are listed whole on a lookup miss.
    static let lookupListingCap = 5000
    /// A folder never listed is listed at the lookup miss that follows this many that asked for
    /// their name alone, each within `listAfterLoneLookupWithin` of the one before. (With one,
    /// `stat`s of random files in 1,000 folders listed a folder for one in six: 173 MB for 2,000.)
    static let loneLookupsBeforeListing = 3
    static let listAfterLoneLookupWithin: Duration = .seconds(2)
    /// How long a folder found larger than that is not listed on a lookup miss.
    static let tooLargeToListFor: Duration = .seconds(60)

    /// Answers a lookup from the folder's listing, fresh or not.
    func answerFromListing(parent: InodeNumber, name: String, retain: Bool) throws(FSError) -> Entry {
        try state.withLock { (s: inout State) throws(FSError) -> Entry in
            guard let ino = s.inodes[parent]?.directory?.children[name] else {
                s.inodes[parent]?.directory?.negative[name] = .now + configuration.negativeTTL
                throw FSError.notFound
            }
            // A name whose inode the kernel dropped, while the server cannot be asked for it again.
            guard var e = s.inodes[ino] else { throw FSError.io("the server is unreachable and `\(name)` is not cached") }
            guard !e.unlinked else { throw FSError.notFound }
            if retain { e.lookups += 1 }
            s.inodes[ino] = e
            return entry(e)
        }
    }

    /// The inode of a namespace (a folder at the root of a `--all` mount).
    func namespaceInode(_ s: inout State, _ info: NamespaceRecord) -> InodeNumber {
        let now = TimeSpec.now
        if let ino = s.byRemote[info.rootInode], s.inodes.contains(ino) {
            s.inodes[ino]?.validUntil = .now + configuration.attributeTTL
            s.inodes[.root]?.directory?.children[info.name] = ino
            return ino
        }
        // The server's number, as `upsert` takes one (not one whose entry it would replace).
        let ino = Self.inodeNumber(forRemote: info.rootInode, &s)
        s.inodes[ino] = InodeEntry(
            ino: ino, parent: .root, name: info.name,
            attributes: FileAttributes(
                ino: ino, kind: .directory, mode: defaultMode(.directory), uid: configuration.defaultUID, gid: configuration.defaultGID, size: 0,
                nlink: 2, atime: now, mtime: now, ctime: now),
            validUntil: .now + configuration.attributeTTL, remote: RemoteInfo(ino: info.rootInode, etag: ""), directory: DirectoryState())
        s.byRemote[info.rootInode] = ino
        s.inodes[.root]?.directory?.children[info.name] = ino
        s.inodes[.root]?.directory?.negative[info.name] = nil
        return ino
    }

    /// Makes an inode for an upload recovered from the journal (its file shows its pending content).
    func claimRecovered(_ s: inout State, _ r: UploadJournal.Record, parent: InodeNumber, name: String) -> Entry {
        s.recovered[r.location] = nil
        let ino = newLocalInode(&s)
        let p = r.params
        let mtime = TimeSpec(nanoseconds: p.mtimeNs ?? Timestamp.nowNanoseconds())
        var e = InodeEntry(
            ino: ino, parent: parent, name: name,
            attributes: FileAttributes(
                ino: ino, kind: .file, mode: p.mode ?? defaultMode(.file), uid: p.uid ?? configuration.defaultUID,
                gid: p.gid ?? configuration.defaultGID, size: UInt64(r.size), nlink: 1, atime: mtime, mtime: mtime, ctime: mtime),
            validUntil: .now)
        e.meta = FileMeta(tags: r.tags ?? [], metadata: p.metadata ?? [:], contentType: r.contentType, isPublic: p.isPublic ?? false)
        if let file = try? CacheFile(path: r.cacheFile) {
            e.local = LocalContent(file: file, size: r.size, dirty: false, writers: 0, frozen: true, heldUpload: nil)
            // The stored file it lands over, should it be removed first.
            e.local?.replaced = r.replaces.map { RemoteInfo(ino: $0.remoteIno, etag: $0.ifMatch ?? "") }
        }
        e.upload = r.id
        e.lookups = 1
        s.inodes[ino] = e
        s.uploadOwner[r.id] = ino
        s.inodes[parent]?.directory?.children[name] = ino
        s.inodes[parent]?.directory?.negative[name] = nil
        return entry(e)
    }

    /// The kernel dropped `count` references to an inode.
    public func forget(_ ino: InodeNumber, count: UInt64) {
        guard ino != .root else { return }
        state.withLock { s in
            guard var e = s.inodes[ino] else { return }
            e.lookups = e.lookups > count ? e.lookups - count : 0
            // A name of a complete listing keeps its record: a listing answers only while each of
            // its names has one, so dropping it made the folder's next `ls`, and a lookup of the
            // name, ask the server. The kernel forgets an unused entry as soon as its TTL ran out,
            // and everything on `drop_caches`: a listing the feed held was lost within seconds
            // (and a folder's own record holds its listing). The listing names it, so this keeps no
            // more than the listing did before the kernel looked the name up. A mount started from
            // the kept tree (offline) keeps every name a folder has, whole or not: with no server
            // to make it again from, a kept name would answer EIO after the kernel forgot it.
            let kept = s.inodes[e.parent]?.directory.map { $0.children[e.name] == ino && ($0.complete || configuration.startOffline) } ?? false
            if e.lookups == 0 && e.openHandles == 0 && !e.hasLocalState && !kept {
                // A name only looked up (its folder not listed whole): the next lookup asks again.
                s.inodes[ino] = nil
                if let r = e.remote, s.byRemote[r.ino] == ino { s.byRemote[r.ino] = nil }
            } else {
                s.inodes[ino] = e
            }
        }
    }

    /// Takes one more lookup reference (readdirplus entries the kernel kept).
    public func retain(_ ino: InodeNumber) {
        state.withLock { $0.inodes[ino]?.lookups += 1 }
    }

    /// A lookup reference on each of `inos` (a readdirplus reply's entries), under one lock.
    public func retain(_ inos: [InodeNumber]) {
        state.withLock { s in
            for ino in inos { s.inodes[ino]?.lookups += 1 }
        }
    }

    /// Attributes, from the cache when fresh.
    public func attributesCached(_ ino: InodeNumber) -> FileAttributes? {
        state.withLock { s in
            guard let e = s.inodes[ino], e.hasLocalState || e.validUntil > .now || ino == .root || e.unlinked else { return nil }
            return e.attributes
        }
    }

    public func getattr(_ ino: InodeNumber) async throws(FSError) -> FileAttributes {
        if let a = attributesCached(ino) { return a }
        let location = try state.withLock { (s: inout State) throws(FSError) -> Location in try self.location(s, ino) }
        guard let ns = location.namespace else { return try state.withLock { (s: inout State) throws(FSError) in try inode(s, ino).attributes } }
        if location.path.isRoot {
            // A namespace root: no record of its own to refresh.
            return try state.withLock { (s: inout State) throws(FSError) -> FileAttributes in
                s.inodes[ino]?.validUntil = .now + configuration.attributeTTL
                return try inode(s, ino).attributes
            }
        }
        let record: FileRecord
        let read = beginRead()
        defer { endRead(read.token) }
        let asked = read.at
        do throws(FSError) {
            record = try await remote { try await store.record(ns, location.path) }
        } catch {
            // Offline: the attributes we had, however old, rather than an error.
            if case .io = error, let known = state.withLock({ $0.inodes[ino]?.attributes }) { return known }
            throw error
        }
        return try state.withLock { (s: inout State) throws(FSError) -> FileAttributes in
            let e = try inode(s, ino)
            // A file unlinked here (still open) whose delete is on its way: what it was.
            if deletedHere(s, record, observedAt: asked) { return e.attributes }
            let updated = upsert(&s, record, parent: e.parent, name: e.name, observedAt: asked)
            return try inode(s, updated).attributes
        }
    }

    // MARK: - Directories

    public func opendir(_ ino: InodeNumber) throws(FSError) -> UInt64 {
        try state.withLock { (s: inout State) throws(FSError) -> UInt64 in
            let e = try inode(s, ino)
            guard e.kind == .directory else { throw FSError.notADirectory }
            let h = s.nextHandle
            s.nextHandle += 1
            s.handles[h] = Handle(ino: ino, writable: false, etag: nil, readAhead: ReadAhead(maxWindow: 1), listing: nil)
            s.inodes[ino]?.openHandles += 1
            return h
        }
    }

    public func releasedir(_ ino: InodeNumber, handle: UInt64) {
        state.withLock { s in
            guard s.handles.removeValue(forKey: handle) != nil else { return }
            s.inodes[ino]?.openHandles -= 1
        }
    }

    /// Entries of an open folder from `offset` on, at most `limit` of them. With `plus`, each entry
    /// carries its attributes (the caller then takes a lookup reference with `retain` for each
    /// entry it passes on). The kernel reads a folder a buffer at a time: each call finds its
    /// place from the offset and copies only what fits, so a folder of 100,000 names is read
    /// in linear time.
    public func readdir(_ ino: InodeNumber, handle: UInt64, offset: Int64, plus: Bool, limit: Int = .max) async throws(FSError) -> [DirectoryEntry] {
        let cached = try state.withLock { (s: inout State) throws(FSError) -> [ListedName]? in
            guard let h = s.handles[handle], h.ino == ino else { throw FSError.badHandle }
            return offset == 0 ? nil : h.listing
        }
        var listing: [ListedName]
        if let cached {
            listing = cached
        } else {
            listing = try await list(ino)
            state.withLock { $0.handles[handle]?.listing = listing }
        }
        // An entry's offset is its place in the listing plus one: the first entry past `offset` is at `offset`.
        let low = Int(clamping: min(max(0, offset), Int64(listing.count)))
        let page = listing[low..<(low + min(max(0, limit), listing.count - low))]
        var out = page.enumerated().map { i, n in DirectoryEntry(name: n.name, ino: n.ino, kind: n.kind, offset: Int64(low + i + 1), entry: nil) }
        if !plus { return out }
        // Attributes read now, for this page only: the listing kept with the open folder has none
        // (with them, a folder of 100,000 held 17 MB for as long as it was open). A name whose
        // inode went meanwhile (unlinked, or let go of) goes without them: the kernel looks it up.
        // So does one whose attributes the change feed said changed since they were read: a
        // listing the feed holds still names it, but gave the kernel its old size for the whole
        // TTL (`ls -l` after another mount rewrote a file showed the old size).
        state.withLock { s in
            for i in out.indices where out[i].offset > 2 {
                out[i].entry = s.inodes.read(out[i].ino) { e in e.unlinked || (e.validUntil == Self.forcedStale && !e.hasLocalState) ? nil : entry(e) } ?? nil
            }
        }
        return out
    }

    /// The whole listing of a folder: the server's, merged with files owed to it.
    ///
    /// Each listing asks the server, unless the mount follows the change feed and listed the folder
    /// less than the TTL ago: then the feed says when another client changes it (`apply` expires
    /// the listing), and the mount's own changes are in it already.
    func list(_ ino: InodeNumber) async throws(FSError) -> [ListedName] {
        // A cached listing naming an inode the engine let go of (the kernel forgot it, an upload
        // replaced it) would leave that name out: the server is asked instead.
        if listingPushed(ino), let cached = listed(ino, whole: true) { return cached }
        do throws(FSError) {
            _ = try await refreshDirectory(ino, cap: nil)
        } catch {
            // Offline: list what we had.
            guard case .io = error, state.withLock({ $0.inodes[ino]?.directory?.complete == true }) else { throw error }
        }
        return listed(ino, whole: false) ?? []
    }

    /// The folder's entries as the engine knows them, `.` and `..` first, then by name. `whole`:
    /// nil if one of its names has no inode here (instead of passing over it).
    private func listed(_ ino: InodeNumber, whole: Bool) -> [ListedName]? {
        state.withLock { s in
            guard let me = s.inodes[ino] else { return [] }
            var out = [
                ListedName(name: ".", ino: ino, kind: .directory),
                ListedName(name: "..", ino: me.parent == 0 ? ino : me.parent, kind: .directory),
            ]
            guard let children = me.directory?.children else { return out }
            out.reserveCapacity(children.count + 2)
            for (name, child) in children.sorted(by: { $0.key < $1.key }) {
                // Each record read in place for the few fields a listing needs.
                let listed = s.inodes.read(child) { e in e.unlinked ? nil : ListedName(name: name.string, ino: e.ino, kind: e.kind) }
                guard let listed else {
                    if whole { return nil }
                    continue
                }
                guard let listed else { continue }
                out.append(listed)
            }
            return out
        }
    }

    /// Whether the cached listing of a folder stands without asking the server: complete, listed
    /// within the TTL, not expired by the feed since, and the feed followed (so that another
    /// client's change would have expired it). A folder of every namespace (the root of an
    /// all-namespaces mount) has no feed. Cheap (FuseKit's opendir asks it): names whose inode the
    /// engine let go of are `list`'s to find.
    public func listingPushed(_ ino: InodeNumber) -> Bool {
        guard feedHolds() else { return false }
        return state.withLock { s in
            guard let dir = s.inodes[ino]?.directory, let location = try? self.location(s, ino), location.namespace != nil else { return false }
            return dir.stands(now: .now, feedHolds: true)
        }
    }

    /// Lists the root as a lookup would, before the mount appears: the first `ls` or `stat` of a
    /// name in it is answered from that listing instead of waiting for a request of its own (7–13
    /// ms through the cluster, a tenth of a cold `ls -lR` of 1,000 files). Its names answer as any
    /// listed name does (trusted for the TTL); but the listing is not taken as whole: a name it
    /// lacks, and `readdir`, still ask the server, as on a mount without it. (Taken whole, a name
    /// another client made just after the mount started was missing here for the whole TTL: the
    /// feed is followed only once the mount is there, and does not bring what came before.) A
    /// listing that takes longer than `limit` is given up.
    public func listRootAhead(within limit: Duration) async {
        // The listing kept at the last unmount, brought up to date through the feed, stands already.
        if state.withLock({ s in s.inodes[.root]?.directory.map { $0.complete && $0.heldByFeed } ?? false }) { return }
        do {
            let complete = try await Self.within(limit) { () async throws -> Bool in try await self.refreshDirectory(.root, cap: Self.lookupListingCap) }
            state.withLock { s in
                s.inodes[.root]?.directory?.complete = false
                if !complete { s.inodes[.root]?.directory?.tooLargeToListUntil = .now + Self.tooLargeToListFor }
            }
        } catch {
            logger.debug("listing the root ahead: \(error)")
        }
    }

    /// Lists a folder from the server (up to `cap` names when given) and merges it with what this mount
    /// owes the server. Returns whether the listing is complete.
    @discardableResult
    func refreshDirectory(_ ino: InodeNumber, cap: Int?) async throws(FSError) -> Bool {
        let read = beginRead()
        defer { endRead(read.token) }
        let started = read.at
        // Held past the TTL only if the feed was followed before the listing began: a change made
        // before its first answer is never delivered (it starts from the head).
        let held = feedHolds()
        let location = try state.withLock { (s: inout State) throws(FSError) -> Location in try self.location(s, ino) }
        var names: [FileName: InodeNumber] = [:]
        var complete = true
        if location.namespace == nil {
            let records = try await remote { try await store.namespaces() }
            state.withLock { s in
                for r in records { names[r.name] = namespaceInode(&s, r) }
            }
        } else {
            let listing = try await remote { try await store.listFolderPosix(location.namespace!, folder: location.path, cap: cap) }
            let records = listing.entries
            complete = listing.complete
            names.reserveCapacity(records.count)
            state.withLock { s in
                if let known = s.inodes[ino]?.directory?.children.count {
                    s.inodes[ino]?.directory?.children.reserveCapacity(max(known, records.count))
                }
                for r in records where !deletedHere(s, r, observedAt: started) {
                    // A name whose upload was recovered from the journal shows that content (what
                    // close returned for), not the server's older file, which it will land over —
                    // unless the name holds something of this mount's already, or a folder.
                    if !s.recovered.isEmpty, r.kind == .file, let loc = try? child(location, r.fileName), let recovered = s.recovered[loc],
                        s.inodes[ino]?.directory?.children[FileName(r.fileName)].flatMap({ s.inodes[$0]?.hasLocalState }) != true
                    {
                        let e = claimRecovered(&s, recovered, parent: ino, name: r.fileName)
                        s.inodes[e.ino]?.lookups -= 1
                        names[r.fileName] = e.ino
                        continue
                    }
                    names[r.fileName] = upsert(&s, r, parent: ino, name: r.fileName, observedAt: started)
                }
            }
        }
        state.withLock { s in
            // Files owed to the server, created here or recovered from the journal.
            for (loc, r) in s.recovered where loc.path.parent == location.path && loc.namespace == location.namespace && !loc.path.isRoot {
                if names[loc.path.name] == nil && s.inodes[ino]?.directory?.children[loc.path.name] == nil {
                    let e = claimRecovered(&s, r, parent: ino, name: loc.path.name)
                    s.inodes[e.ino]?.lookups -= 1
                }
            }
            guard var dir = s.inodes[ino]?.directory else { return }
            // Names this mount removed (unlink, rename away) in the last moments: a listing on its
            // way meanwhile may still have them (an upload of the old name landing just before the
            // rename on the server), and must not bring them back.
            let now = ContinuousClock.now
            let recentlyRemoved = dir.negative.filter { $0.value > now }
            for name in recentlyRemoved.keys { names[name] = nil }
            if complete {
                // Names gone from the server are gone here too — unless owed to it, or changed by this
                // mount while the listing was on its way. An inode the listing still names under
                // another name was renamed (by another client): that name is its primary one now.
                var listedAs: [InodeNumber: FileName] = [:]
                for (name, child) in names where listedAs[child] == nil { listedAs[child] = name }
                for (name, child) in dir.children where names[name] == nil {
                    if let c = s.inodes[child], !c.unlinked, c.hasLocalState || c.changedAt.map({ $0 >= started }) == true { continue }
                    dir.children[name] = nil
                    if var c = s.inodes[child], !c.hasLocalState {
                        if let other = listedAs[child] {
                            if c.parent == ino && c.name.isSameName(name.string) { c.name = other.string }
                        } else {
                            c.unlinked = true
                        }
                        s.inodes[child] = c
                    }
                }
                dir.complete = true
                dir.everListed = true
                // Trusted for the TTL, unless the feed named the folder while the listing was on
                // its way (it may not show that change).
                let expiredMeanwhile = dir.expiredAt.map { $0 >= started } == true
                dir.validUntil = expiredMeanwhile ? .now : .now + configuration.attributeTTL
                dir.heldByFeed = held && !expiredMeanwhile
                dir.negative = recentlyRemoved
            }
            for (name, child) in names {
                // Most are there already (`upsert` put them); a name this mount changed meanwhile stays.
                guard let here = dir.children[name] else {
                    dir.children[name] = child
                    continue
                }
                if here != child && s.inodes[here]?.hasLocalState != true { dir.children[name] = child }
            }
            s.inodes[ino]?.directory = dir
        }
        return complete
    }
}
