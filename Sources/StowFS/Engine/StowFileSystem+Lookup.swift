import Foundation
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

    func cachedLookup(_ s: inout State, parent: InodeNumber, name: String, retain: Bool = true) throws(FSError) -> CachedLookup {
        let p = try inode(s, parent)
        guard p.kind == .directory, let dir = p.directory else { throw FSError.notADirectory }
        let now = ContinuousClock.now
        if let ino = dir.children[name], var e = s.inodes[ino], !e.unlinked {
            if e.hasLocalState || e.validUntil > now {
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
        if dir.complete && dir.validUntil > now && dir.children[name] == nil { return .missing }
        return .unknown(location)
    }

    /// A fast, synchronous lookup for FuseKit: answers from the caches or returns nil.
    public func lookupCached(parent: InodeNumber, name: String) -> Result<Entry, FSError>? {
        do {
            return try state.withLock { (s: inout State) throws(FSError) -> Result<Entry, FSError>? in
                try Self.validate(name: name)
                switch try cachedLookup(&s, parent: parent, name: name) {
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
        let cached = try state.withLock { (s: inout State) throws(FSError) -> CachedLookup in
            try cachedLookup(&s, parent: parent, name: name, retain: retain)
        }
        let location: Location
        switch cached {
        case .found(let e): return e
        case .missing: throw FSError.notFound
        case .unknown(let l): location = l
        }
        if location.path.isRoot, let ns = location.namespace {
            // A namespace at the root of a `--all` mount.
            let records = try await remote { try await store.namespaces() }
            guard let info = records.first(where: { $0.name == ns.name }) else {
                state.withLock { $0.inodes[parent]?.directory?.negative[name] = .now + configuration.negativeTTL }
                throw FSError.notFound
            }
            return state.withLock { s in
                let ino = namespaceInode(&s, info)
                if retain { s.inodes[ino]?.lookups += 1 }
                return entry(s.inodes[ino]!)
            }
        }
        let record: FileRecord
        do {
            record = try await store.record(location.namespace!, location.path)
        } catch let e as StorageError where e.kind == .notFound {
            state.withLock { $0.inodes[parent]?.directory?.negative[name] = .now + configuration.negativeTTL }
            throw FSError.notFound
        } catch {
            throw FSError.from(error)
        }
        return state.withLock { s in
            let ino = upsert(&s, record, parent: parent, name: name)
            if retain { s.inodes[ino]?.lookups += 1 }
            return entry(s.inodes[ino]!)
        }
    }

    /// The inode of a namespace (a folder at the root of a `--all` mount).
    func namespaceInode(_ s: inout State, _ info: NamespaceRecord) -> InodeNumber {
        let now = TimeSpec.now
        if let ino = s.byRemote[info.rootInode], s.inodes[ino] != nil {
            s.inodes[ino]?.validUntil = .now + configuration.attributeTTL
            s.inodes[.root]?.directory?.children[info.name] = ino
            return ino
        }
        let ino = info.rootInode
        s.inodes[ino] = InodeEntry(
            ino: ino, parent: .root, name: info.name,
            attributes: FileAttributes(
                ino: ino, kind: .directory, mode: defaultMode(.directory), uid: configuration.defaultUID, gid: configuration.defaultGID, size: 0,
                nlink: 2, atime: now, mtime: now, ctime: now),
            validUntil: .now + configuration.attributeTTL, remote: RemoteInfo(ino: info.rootInode, etag: "", id: ""), directory: DirectoryState())
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
            if e.lookups == 0 && e.openHandles == 0 && !e.hasLocalState {
                s.inodes[ino] = nil
                if let r = e.remote, s.byRemote[r.ino] == ino { s.byRemote[r.ino] = nil }
                if s.inodes[e.parent]?.directory?.children[e.name] == ino { s.inodes[e.parent]?.directory?.children[e.name] = nil }
            } else {
                s.inodes[ino] = e
            }
        }
    }

    /// Takes one more lookup reference (readdirplus entries the kernel kept).
    public func retain(_ ino: InodeNumber) {
        state.withLock { $0.inodes[ino]?.lookups += 1 }
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
        let record = try await remote { try await store.record(ns, location.path) }
        return try state.withLock { (s: inout State) throws(FSError) -> FileAttributes in
            let e = try inode(s, ino)
            let updated = upsert(&s, record, parent: e.parent, name: e.name)
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

    /// Entries of an open folder from `offset` on. With `plus`, each entry carries its attributes
    /// (the caller then takes a lookup reference with `retain` for each entry it passes on).
    public func readdir(_ ino: InodeNumber, handle: UInt64, offset: Int64, plus: Bool) async throws(FSError) -> [DirectoryEntry] {
        let cached = try state.withLock { (s: inout State) throws(FSError) -> [DirectoryEntry]? in
            guard let h = s.handles[handle], h.ino == ino else { throw FSError.badHandle }
            return offset == 0 ? nil : h.listing
        }
        var listing: [DirectoryEntry]
        if let cached {
            listing = cached
        } else {
            listing = try await list(ino)
            state.withLock { $0.handles[handle]?.listing = listing }
        }
        listing = Array(listing.drop { $0.offset <= offset })
        if !plus { return listing.map { DirectoryEntry(name: $0.name, ino: $0.ino, kind: $0.kind, offset: $0.offset, entry: nil) } }
        return listing
    }

    /// The whole listing of a folder: the server's, merged with files owed to it.
    func list(_ ino: InodeNumber) async throws(FSError) -> [DirectoryEntry] {
        let location = try state.withLock { (s: inout State) throws(FSError) -> Location in try self.location(s, ino) }
        var names: [String: InodeNumber] = [:]
        if location.namespace == nil {
            let records = try await remote { try await store.namespaces() }
            state.withLock { s in
                for r in records { names[r.name] = namespaceInode(&s, r) }
            }
        } else {
            let records = try await remote { try await store.listAll(location.namespace!, folder: location.path) }
            state.withLock { s in
                for r in records { names[r.fileName] = upsert(&s, r, parent: ino, name: r.fileName) }
            }
        }
        return state.withLock { s in
            // Files owed to the server, created here or recovered from the journal.
            for (name, child) in s.inodes[ino]?.directory?.children ?? [:] where names[name] == nil {
                if let e = s.inodes[child], !e.unlinked, e.remote == nil || e.hasLocalState { names[name] = child }
            }
            for (loc, r) in s.recovered where loc.path.parent == location.path && loc.namespace == location.namespace && !loc.path.isRoot {
                if names[loc.path.name] == nil {
                    let e = claimRecovered(&s, r, parent: ino, name: loc.path.name)
                    s.inodes[e.ino]?.lookups -= 1
                    names[loc.path.name] = e.ino
                }
            }
            // Names gone from the server (and not owed to it) are gone here too.
            if var dir = s.inodes[ino]?.directory {
                for (name, child) in dir.children where names[name] == nil {
                    dir.children[name] = nil
                    if var c = s.inodes[child], !c.hasLocalState {
                        c.unlinked = true
                        s.inodes[child] = c
                    }
                }
                for (name, child) in names { dir.children[name] = child }
                dir.complete = true
                dir.validUntil = .now + configuration.attributeTTL
                dir.negative = [:]
                s.inodes[ino]?.directory = dir
            }
            let me = s.inodes[ino]!
            var out = [
                DirectoryEntry(name: ".", ino: ino, kind: .directory, offset: 1, entry: nil),
                DirectoryEntry(name: "..", ino: me.parent == 0 ? ino : me.parent, kind: .directory, offset: 2, entry: nil),
            ]
            for (i, name) in names.keys.sorted().enumerated() {
                guard let e = s.inodes[names[name]!] else { continue }
                out.append(DirectoryEntry(name: name, ino: e.ino, kind: e.kind, offset: Int64(i + 3), entry: entry(e)))
            }
            return out
        }
    }
}
