public import Foundation
import Logging
import StorageClient
import StorageProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The tree a mount knew, kept at a clean unmount (`writeSnapshot`) for a mount made while the
/// server is away (`MountConfiguration.startOffline`): its folders answer from the listings kept
/// and its files from the block cache kept (`BlockCache.persist`), until the server is back.
///
/// Only what the server has is kept (files still owed come back from the upload journal, as at
/// every mount). A folder is kept as complete only when every name of its listing is kept too.
extension StowFileSystem {
    struct TreeSnapshot: Codable, Equatable {
        struct Item: Codable, Equatable {
            var ino: UInt64
            var parent: UInt64
            var name: String
            var kind: NodeKind
            var mode: UInt32
            var uid: UInt32
            var gid: UInt32
            var size: UInt64
            var nlink: UInt32
            var atimeNs: Int64
            var mtimeNs: Int64
            var ctimeNs: Int64
            var rdev: UInt64
            var remoteIno: UInt64
            var etag: String
            var id: String
            var tags: [String]
            var metadata: [String: String]
            var contentType: String?
            var isPublic: Bool
            var target: String?
            /// A folder whose every name is kept.
            var complete: Bool?
            /// A folder whose listing the change feed held current up to `feedCursor` (listed while
            /// the feed was followed, not named by it since), with every name kept.
            var held: Bool? = nil
            /// Attributes the change feed said had changed since they were read (not read again).
            var stale: Bool? = nil

            /// The item as JSONDecoder reads it back (the synthesized keys).
            func writeJSON(to out: inout [UInt8]) {
                out.append(UInt8(ascii: "{"))
                JSONOut.key("ino", &out, first: true); JSONOut.number(ino, &out)
                JSONOut.key("parent", &out); JSONOut.number(parent, &out)
                JSONOut.key("name", &out); JSONOut.string(name, &out)
                JSONOut.key("kind", &out); JSONOut.string(kind.rawValue, &out)
                JSONOut.key("mode", &out); JSONOut.number(mode, &out)
                JSONOut.key("uid", &out); JSONOut.number(uid, &out)
                JSONOut.key("gid", &out); JSONOut.number(gid, &out)
                JSONOut.key("size", &out); JSONOut.number(size, &out)
                JSONOut.key("nlink", &out); JSONOut.number(nlink, &out)
                JSONOut.key("atimeNs", &out); JSONOut.number(atimeNs, &out)
                JSONOut.key("mtimeNs", &out); JSONOut.number(mtimeNs, &out)
                JSONOut.key("ctimeNs", &out); JSONOut.number(ctimeNs, &out)
                JSONOut.key("rdev", &out); JSONOut.number(rdev, &out)
                JSONOut.key("remoteIno", &out); JSONOut.number(remoteIno, &out)
                JSONOut.key("etag", &out); JSONOut.string(etag, &out)
                JSONOut.key("id", &out); JSONOut.string(id, &out)
                JSONOut.key("tags", &out); JSONOut.strings(tags, &out)
                JSONOut.key("metadata", &out); JSONOut.map(metadata, &out)
                if let contentType { JSONOut.key("contentType", &out); JSONOut.string(contentType, &out) }
                JSONOut.key("isPublic", &out); JSONOut.bool(isPublic, &out)
                if let target { JSONOut.key("target", &out); JSONOut.string(target, &out) }
                if let complete { JSONOut.key("complete", &out); JSONOut.bool(complete, &out) }
                if let held { JSONOut.key("held", &out); JSONOut.bool(held, &out) }
                if let stale { JSONOut.key("stale", &out); JSONOut.bool(stale, &out) }
                out.append(UInt8(ascii: "}"))
            }
        }

        static let currentVersion = 1
        var version = currentVersion
        /// The namespace mounted (nil: all of them).
        var namespace: String?
        var rootRemote: UInt64?
        var rootComplete: Bool
        var savedNs: Int64
        /// Parents before children.
        var items: [Item]
        /// Where the mount had read the namespace's change feed to: every change before it is in
        /// the tree (or made the item `stale`, the folder not `held`). Nil: the feed was not followed.
        var feedCursor: String? = nil
        /// The namespace's `created_on`: with `rootRemote`, which namespace the cursor is of (one
        /// deleted and made again, or another server's, has another).
        var namespaceCreatedOn: String? = nil
        /// The root's listing was held by the feed (as `Item.held`).
        var rootHeld: Bool? = nil

        /// Everything of a tree but its items.
        struct Header: Equatable {
            var version: Int
            var namespace: String?
            var rootRemote: UInt64?
            var rootComplete: Bool
            var savedNs: Int64
            var feedCursor: String?
            var namespaceCreatedOn: String?
            var rootHeld: Bool?
        }

        var header: Header {
            Header(
                version: version, namespace: namespace, rootRemote: rootRemote, rootComplete: rootComplete, savedNs: savedNs, feedCursor: feedCursor,
                namespaceCreatedOn: namespaceCreatedOn, rootHeld: rootHeld)
        }

        /// What `snapshotJSON` writes, read by hand; nil for anything JSONDecoder might read
        /// otherwise (a key twice, a number out of its type's range, a value of another type).
        static func read(_ bytes: UnsafeRawBufferPointer) -> TreeSnapshot? {
            var items: [Item] = []
            guard let h = read(bytes, items: true, { items.append($0) }) else { return nil }
            var snapshot = TreeSnapshot(
                namespace: h.namespace, rootRemote: h.rootRemote, rootComplete: h.rootComplete, savedNs: h.savedNs, items: items,
                feedCursor: h.feedCursor, namespaceCreatedOn: h.namespaceCreatedOn, rootHeld: h.rootHeld)
            snapshot.version = h.version
            return snapshot
        }

        /// The same, streamed: the header's keys (before `items`, as `snapshotJSON` writes them),
        /// then each item handed to `item` as it is read, none of them kept — or, without
        /// `items`, the header alone, read up to `items`. nil for anything else; `item` may have
        /// been called by then.
        static func read(_ bytes: UnsafeRawBufferPointer, items readItems: Bool, _ item: (Item) -> Void) -> Header? {
            var itemsAt = 0
            return read(bytes, items: readItems, itemsAt: &itemsAt, item)
        }

        /// The same; `itemsAt`: where the value of `items` begins (read without the items).
        static func read(_ bytes: UnsafeRawBufferPointer, items readItems: Bool, itemsAt: inout Int, _ item: (Item) -> Void) -> Header? {
            typealias Failure = JSONReader.Failure
            var r = JSONReader(bytes)
            var version: Int64?, namespace: String?, rootRemote: UInt64?, rootComplete: Bool?, savedNs: Int64?
            var feedCursor: String?, createdOn: String?, rootHeld: Bool?
            var itemsRead = false
            func header() -> Header? {
                guard let version, let v = Int(exactly: version), let rootComplete, let savedNs else { return nil }
                return Header(
                    version: v, namespace: namespace, rootRemote: rootRemote, rootComplete: rootComplete, savedNs: savedNs, feedCursor: feedCursor,
                    namespaceCreatedOn: createdOn, rootHeld: rootHeld)
            }
            var seen = SeenKeys()
            var stopped = false
            do throws(Failure) {
                try r.object { r, key throws(Failure) in
                    // The header comes first: a key of it after the items is refused (JSONDecoder decides).
                    func headerKey(_ index: Int) throws(Failure) {
                        guard !itemsRead else { throw Failure() }
                        try seen.first(index)
                    }
                    switch key {
                    case "version": try headerKey(0); version = try r.int64()
                    case "namespace": try headerKey(1); namespace = try Self.optionalString(&r)
                    case "rootRemote":
                        try headerKey(2)
                        if try r.peek() == UInt8(ascii: "n") { try r.literal("null") } else { rootRemote = try r.uint64() }
                    case "rootComplete": try headerKey(3); rootComplete = try r.bool()
                    case "savedNs": try headerKey(4); savedNs = try r.int64()
                    case "feedCursor": try headerKey(6); feedCursor = try Self.optionalString(&r)
                    case "namespaceCreatedOn": try headerKey(7); createdOn = try Self.optionalString(&r)
                    case "rootHeld": try headerKey(8); rootHeld = try Self.optionalBool(&r)
                    case "items":
                        try seen.first(5)
                        guard readItems else {
                            stopped = true
                            itemsAt = r.at
                            throw Failure()
                        }
                        try r.array { r throws(Failure) in item(try Self.item(&r)) }
                        itemsRead = true
                    default: try r.skipValue()
                    }
                }
                r.skipSpace()
                guard r.at == r.bytes.count, itemsRead else { return nil }
                return header()
            } catch {
                return stopped ? header() : nil
            }
        }

        static func u32(_ r: inout JSONReader) throws(JSONReader.Failure) -> UInt32 {
            let v = try r.uint64()
            guard v <= UInt64(UInt32.max) else { throw JSONReader.Failure() }
            return UInt32(v)
        }

        static func optionalString(_ r: inout JSONReader) throws(JSONReader.Failure) -> String? {
            if try r.peek() == UInt8(ascii: "n") {
                try r.literal("null")
                return nil
            }
            return try r.string()
        }

        static func optionalBool(_ r: inout JSONReader) throws(JSONReader.Failure) -> Bool? {
            if try r.peek() == UInt8(ascii: "n") {
                try r.literal("null")
                return nil
            }
            return try r.bool()
        }

        /// One item of `items`.
        static func item(_ r: inout JSONReader) throws(JSONReader.Failure) -> Item {
            var ino: UInt64?, parent: UInt64?, name: String?, kind: NodeKind?, mode: UInt32?, uid: UInt32?, gid: UInt32?
            var size: UInt64?, nlink: UInt32?, atimeNs: Int64?, mtimeNs: Int64?, ctimeNs: Int64?, rdev: UInt64?, remoteIno: UInt64?
            var etag: String?, id: String?, tags: [String]?, metadata: [String: String]?, contentType: String?, isPublic: Bool?
            var target: String?, complete: Bool?, held: Bool?, stale: Bool?
            var seen = SeenKeys()
            try r.object { r, key throws(JSONReader.Failure) in
                switch key {
                case "ino": try seen.first(0); ino = try r.uint64()
                case "parent": try seen.first(1); parent = try r.uint64()
                case "name": try seen.first(2); name = try r.string()
                case "kind":
                    try seen.first(3)
                    guard let k = NodeKind(rawValue: try r.string()) else { throw JSONReader.Failure() }
                    kind = k
                case "mode": try seen.first(4); mode = try u32(&r)
                case "uid": try seen.first(5); uid = try u32(&r)
                case "gid": try seen.first(6); gid = try u32(&r)
                case "size": try seen.first(7); size = try r.uint64()
                case "nlink": try seen.first(8); nlink = try u32(&r)
                case "atimeNs": try seen.first(9); atimeNs = try r.int64()
                case "mtimeNs": try seen.first(10); mtimeNs = try r.int64()
                case "ctimeNs": try seen.first(11); ctimeNs = try r.int64()
                case "rdev": try seen.first(12); rdev = try r.uint64()
                case "remoteIno": try seen.first(13); remoteIno = try r.uint64()
                case "etag": try seen.first(14); etag = try r.string()
                case "id": try seen.first(15); id = try r.string()
                case "tags": try seen.first(16); tags = try r.strings()
                case "metadata": try seen.first(17); metadata = try r.stringMap()
                case "contentType": try seen.first(18); contentType = try optionalString(&r)
                case "isPublic": try seen.first(19); isPublic = try r.bool()
                case "target": try seen.first(20); target = try optionalString(&r)
                case "complete": try seen.first(21); complete = try optionalBool(&r)
                case "held": try seen.first(22); held = try optionalBool(&r)
                case "stale": try seen.first(23); stale = try optionalBool(&r)
                default: try r.skipValue()
                }
            }
            guard let ino, let parent, let name, let kind, let mode, let uid, let gid, let size, let nlink, let atimeNs, let mtimeNs,
                let ctimeNs, let rdev, let remoteIno, let etag, let id, let tags, let metadata, let isPublic
            else { throw JSONReader.Failure() }
            return Item(
                ino: ino, parent: parent, name: name, kind: kind, mode: mode, uid: uid, gid: gid, size: size, nlink: nlink, atimeNs: atimeNs,
                mtimeNs: mtimeNs, ctimeNs: ctimeNs, rdev: rdev, remoteIno: remoteIno, etag: etag, id: id, tags: tags, metadata: metadata,
                contentType: contentType, isPublic: isPublic, target: target, complete: complete, held: held, stale: stale)
        }
    }

    /// The mount is up: what the last clean unmount kept (the tree and the block cache's index)
    /// is this mount's now, and goes — online or not, what this mount changes would make it wrong,
    /// and only its clean end writes them again (a crash leaves none). A start that fails before
    /// this keeps them for the next.
    public func claimKept() {
        Glibc.unlink(Self.snapshotPath(configuration.cacheDirectory))
        blocks.claimIndex()
        localBlobs.claimKept(cacheDirectory: configuration.cacheDirectory)
    }

    public static func snapshotPath(_ cacheDirectory: String) -> String { cacheDirectory + "/tree.json" }

    /// The namespace a snapshot is of (nil: a mount of all of them).
    static func scopeName(_ configuration: MountConfiguration) -> String? {
        switch configuration.scope {
        case .namespace(let ns): ns.name
        case .all: nil
        }
    }

    /// Writes the tree as the mount knows it now (synced, then renamed into place).
    ///
    /// Written by hand, a megabyte at a time, straight from the inode table (`walkKept`, twice: the
    /// first walk finds which folders are complete, since a folder's item comes before its names).
    /// JSONEncoder built the whole tree as objects first, and at unmount that doubled the mount's
    /// memory (heaptrack, 30,000 files: 78 MB of the 151 MB peak, where the inode table took 34
    /// MB); a list of the items first still took 39 MB at 100,000 files.
    func writeSnapshot() throws(FSError) {
        var kept = 0
        let namespace = Self.scopeName(configuration)
        // Read before the tree: every change before it is in the tree read after.
        let cursor = feed.value.withLock { $0.status.cursor }
        try CacheFile.replace(Self.snapshotPath(configuration.cacheDirectory)) { emit in
            state.withLock { s in
                let complete = Self.walkKept(s, complete: [:]) { _ in }
                let rootComplete = complete[.root] ?? false
                let header = TreeSnapshot.Header(
                    version: TreeSnapshot.currentVersion, namespace: namespace, rootRemote: s.inodes[.root]?.remote?.ino,
                    rootComplete: rootComplete, savedNs: Timestamp.nowNanoseconds(), feedCursor: cursor, namespaceCreatedOn: namespaceCreatedOn,
                    rootHeld: cursor == nil ? nil : rootComplete && s.inodes[.root]?.directory?.heldByFeed == true)
                Self.snapshotJSON(
                    header, chunk: 1 << 20,
                    items: { write in
                        _ = Self.walkKept(s, complete: complete) { item in
                            kept += 1
                            write(item)
                        }
                    }, emit)
            }
        }
        logger.info("kept \(kept) name(s) for the next mount (\(cursor == nil ? "for one made while the server is away" : "current as of the change feed's \(cursor!)"))")
    }

    /// Walks the tree breadth first from the root (a parent before its children), calling `body`
    /// with each name kept: one the server has, known under this parent by this name, with nothing
    /// of it still owed (a folder always). A folder's item says `complete` as `complete` has it,
    /// and `held` when also held by the change feed; an item whose attributes the feed named since
    /// they were read says `stale`.
    /// Returns, for every folder walked, whether its listing is complete and every name of it kept.
    static func walkKept(_ s: State, complete: [InodeNumber: Bool], _ body: (TreeSnapshot.Item) -> Void) -> [InodeNumber: Bool] {
        var found: [InodeNumber: Bool] = [:]
        var queue: [InodeNumber] = [.root]
        var head = 0
        while head < queue.count {
            let folder = queue[head]
            head += 1
            guard let dir = s.inodes[folder]?.directory else { continue }
            var everyNameKept = true
            for (name, ino) in dir.children.sorted(by: { $0.key < $1.key }) {
                guard let e = s.inodes[ino], !e.unlinked, e.parent == folder, e.name.isSameName(name.string), let r = e.remote,
                    !e.hasLocalState || e.kind == .directory
                else {
                    everyNameKept = false
                    continue
                }
                let a = e.attributes
                body(
                    TreeSnapshot.Item(
                        ino: ino, parent: folder, name: name.string, kind: e.kind, mode: a.mode, uid: a.uid, gid: a.gid, size: a.size, nlink: a.nlink,
                        atimeNs: a.atime.nanoseconds, mtimeNs: a.mtime.nanoseconds, ctimeNs: a.ctime.nanoseconds, rdev: a.rdev, remoteIno: r.ino,
                        etag: r.etag, id: FileRecord.id(inode: r.ino), tags: e.meta.tags, metadata: e.meta.metadata, contentType: e.meta.contentType, isPublic: e.meta.isPublic,
                        target: e.meta.target, complete: e.kind == .directory ? complete[ino] ?? false : nil,
                        held: e.kind == .directory && complete[ino] == true && e.directory?.heldByFeed == true ? true : nil,
                        stale: e.validUntil == forcedStale ? true : nil))
                if e.kind == .directory { queue.append(ino) }
            }
            found[folder] = dir.complete && everyNameKept
        }
        return found
    }

    /// A snapshot as JSON that `TreeSnapshot.read` (and JSONDecoder) reads, handed to `emit` in
    /// pieces of about `chunk` bytes.
    static func snapshotJSON(_ snapshot: TreeSnapshot, chunk: Int, _ emit: ([UInt8]) -> Void) {
        snapshotJSON(snapshot.header, chunk: chunk, items: { write in snapshot.items.forEach(write) }, emit)
    }

    /// The same, with `header` (its version aside: this code's is written) and the items from
    /// `items` (which calls its argument with each, in order).
    static func snapshotJSON(
        _ header: TreeSnapshot.Header, chunk: Int, items: ((TreeSnapshot.Item) -> Void) -> Void, _ emit: ([UInt8]) -> Void
    ) {
        var out: [UInt8] = []
        out.reserveCapacity(chunk + 4096)
        out.append(UInt8(ascii: "{"))
        JSONOut.key("version", &out, first: true)
        JSONOut.number(TreeSnapshot.currentVersion, &out)
        if let namespace = header.namespace {
            JSONOut.key("namespace", &out)
            JSONOut.string(namespace, &out)
        }
        if let rootRemote = header.rootRemote {
            JSONOut.key("rootRemote", &out)
            JSONOut.number(rootRemote, &out)
        }
        JSONOut.key("rootComplete", &out)
        JSONOut.bool(header.rootComplete, &out)
        JSONOut.key("savedNs", &out)
        JSONOut.number(header.savedNs, &out)
        if let feedCursor = header.feedCursor {
            JSONOut.key("feedCursor", &out)
            JSONOut.string(feedCursor, &out)
        }
        if let namespaceCreatedOn = header.namespaceCreatedOn {
            JSONOut.key("namespaceCreatedOn", &out)
            JSONOut.string(namespaceCreatedOn, &out)
        }
        if let rootHeld = header.rootHeld {
            JSONOut.key("rootHeld", &out)
            JSONOut.bool(rootHeld, &out)
        }
        JSONOut.key("items", &out)
        out.append(UInt8(ascii: "["))
        var first = true
        withoutActuallyEscaping(emit) { emit in
            items { item in
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                item.writeJSON(to: &out)
                if out.count >= chunk {
                    emit(out)
                    out.removeAll(keepingCapacity: true)
                }
            }
        }
        out.append(contentsOf: Array("]}".utf8))
        emit(out)
    }

    /// The change feed read from a kept tree's cursor to its head, for a mount that trusts the tree
    /// online: the changes since and the cursor after them; nil when the tree cannot be trusted —
    /// the feed answers `reset` (the cursor is older than the oldest change kept, or not this
    /// server's), names the namespace itself (deleted, made again), does not answer, or has more
    /// than `keptChangesLimit` changes or takes longer than `keptCatchUpWithin` (listing again is
    /// then the cheaper way).
    static func catchUpKept(_ store: any ObjectStore, _ ns: Namespace, since: String, logger: Logger) async -> ([ChangeRecord], String)? {
        let deadline = ContinuousClock.now + keptCatchUpWithin
        var cursor = since
        var changes: [ChangeRecord] = []
        do {
            while true {
                guard ContinuousClock.now < deadline else {
                    logger.info("the listings kept at the last unmount are not used: the change feed took too long to read")
                    return nil
                }
                // Each read within what is left of the limit (a server that does not answer would
                // hold the mount's start for its retries).
                let since = cursor
                let answer = try await within(deadline - ContinuousClock.now) { try await store.changes(ns, since: since, wait: .zero) }
                if answer.reset || answer.changes.contains(where: { $0.kind == .namespace }) {
                    logger.info("the listings kept at the last unmount are not used: the change feed no longer has what changed since")
                    return nil
                }
                changes += answer.changes
                guard changes.count <= keptChangesLimit else {
                    logger.info("the listings kept at the last unmount are not used: over \(keptChangesLimit) changes since")
                    return nil
                }
                if answer.changes.isEmpty || answer.cursor == cursor { return (changes, answer.cursor) }
                cursor = answer.cursor
            }
        } catch {
            logger.info("the listings kept at the last unmount are not used: the change feed did not answer (\(error))")
            return nil
        }
    }

    /// The folder of `path`, restored from a kept tree, and the name in it no longer stand.
    static func untrustKept(_ s: inout State, _ path: StoragePath) {
        guard !path.isRoot else { return }
        var folder = InodeNumber.root
        for segment in path.parent.segments {
            guard let next = s.inodes[folder]?.directory?.children[FileName(segment)] else { return }
            folder = next
        }
        guard s.inodes[folder]?.directory != nil else { return }
        s.inodes[folder]?.directory?.expire()
        s.inodes[folder]?.directory?.complete = false
        if let child = s.inodes[folder]?.directory?.children[FileName(path.name)] { s.inodes[child]?.validUntil = forcedStale }
    }

    static let keptChangesLimit = 20_000
    /// More than an item of a kept tree takes but for metadata at the server's bounds (256 values
    /// of 64 KiB, escaped): such a tree is read whole by JSONDecoder instead.
    static let maxKeptItemBytes = 16 << 20
    static let keptCatchUpWithin: Duration = .seconds(3)

    /// The tree kept by the last clean unmount of this cache folder, if it is this mount's (the
    /// same namespace): its header, and where its items begin in the file (nil: the hand reader
    /// did not take the header, and JSONDecoder did).
    struct KeptTree {
        var path: String
        var header: TreeSnapshot.Header
        var itemsAt: Int?
    }

    static func readKept(_ configuration: MountConfiguration) -> KeptTree? {
        let path = snapshotPath(configuration.cacheDirectory)
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        // The header comes first, and is small.
        let head = (try? handle.read(upToCount: 1 << 20)) ?? Data()
        try? handle.close()
        var itemsAt = 0
        let tree: KeptTree
        if let header = head.withUnsafeBytes({ TreeSnapshot.read($0, items: false, itemsAt: &itemsAt) { _ in } }) {
            tree = KeptTree(path: path, header: header, itemsAt: itemsAt)
        } else if let data = FileManager.default.contents(atPath: path), let header = try? JSONDecoder().decode(TreeSnapshot.self, from: data).header {
            tree = KeptTree(path: path, header: header, itemsAt: nil)
        } else {
            return nil
        }
        guard tree.header.version == TreeSnapshot.currentVersion, tree.header.namespace == scopeName(configuration) else { return nil }
        return tree
    }

    /// Puts the kept tree (`readKept`) into `s`, whole or not at all; false when it cannot be read.
    /// Read from the file a few megabytes at a time, item by item, none of them kept (a tree of
    /// 100,000 names read whole and decoded first took 40 MB more at the mount's start, and
    /// JSONDecoder 250 ms for 20,000); what the hand reader refuses goes to JSONDecoder.
    /// `trustedFor`: as `Restorer`.
    static func restoreKept(_ tree: KeptTree, into s: inout State, trustedFor ttl: Duration? = nil) -> Bool {
        if let itemsAt = tree.itemsAt {
            var trial = s
            var restorer = Restorer(tree.header, into: &trial, trustedFor: ttl)
            if streamItems(atPath: tree.path, from: itemsAt, { restorer.add($0, into: &trial) }) {
                guard !(restorer.damaged && ttl != nil) else { return false }
                s = trial
                return true
            }
        }
        guard let data = FileManager.default.contents(atPath: tree.path), let snapshot = try? JSONDecoder().decode(TreeSnapshot.self, from: data),
            snapshot.header == tree.header
        else { return false }
        var trial = s
        guard restore(snapshot, into: &trial, trustedFor: ttl) || ttl == nil else { return false }
        s = trial
        return true
    }

    /// Reads the value of `items` (a JSON array of items) starting at `offset` of the file at
    /// `path`, and then the end of the tree's object (`}`, nothing after it but white space),
    /// `chunk` bytes at a time, handing each item to `body` as it is read. False when anything
    /// is not as `snapshotJSON` writes it (`body` may have been called by then).
    static func streamItems(atPath path: String, from offset: Int, chunk: Int = 4 << 20, _ body: (TreeSnapshot.Item) -> Void) -> Bool {
        precondition(chunk > 0)
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        guard offset >= 0, lseek(fd, off_t(offset), SEEK_SET) == off_t(offset) else { return false }
        var buffer: [UInt8] = []
        var head = 0
        var atEnd = false
        /// Moves what is left to the front and reads more (at least `chunk`, or as much again as
        /// is held: an item larger than a chunk still fits). False on a read error.
        func refill() -> Bool {
            buffer.removeFirst(head)
            head = 0
            let want = max(chunk, buffer.count)
            let held = buffer.count
            buffer.append(contentsOf: repeatElement(0, count: want))
            var got = 0
            while got < want {
                let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + held + got, want - got) }
                if n < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                if n == 0 {
                    atEnd = true
                    break
                }
                got += n
            }
            buffer.removeLast(want - got)
            return true
        }
        enum Expect { case open, firstOrEnd, item, separatorOrEnd, close }
        var expect = Expect.open
        while true {
            // One step over what is held; a step that runs out of bytes is tried again with more.
            var item: TreeSnapshot.Item?
            let step: Int? = buffer.withUnsafeBytes { raw -> Int? in
                var r = JSONReader(UnsafeRawBufferPointer(rebasing: raw[head...]))
                do throws(JSONReader.Failure) {
                    switch expect {
                    case .open:
                        try r.take(UInt8(ascii: "["))
                        expect = .firstOrEnd
                    case .firstOrEnd:
                        if try r.peek() == UInt8(ascii: "]") {
                            r.at += 1
                            expect = .close
                        } else {
                            expect = .item
                        }
                    case .item:
                        item = try TreeSnapshot.item(&r)
                        expect = .separatorOrEnd
                    case .separatorOrEnd:
                        let c = try r.peek()
                        r.at += 1
                        guard c == UInt8(ascii: ",") || c == UInt8(ascii: "]") else { return -1 }
                        expect = c == UInt8(ascii: ",") ? .item : .close
                    case .close:
                        guard atEnd else { return nil }
                        try r.take(UInt8(ascii: "}"))
                        r.skipSpace()
                        return r.at == r.bytes.count ? -2 : -1
                    }
                    return r.at
                } catch {
                    return nil
                }
            }
            switch step {
            case .some(-2): return true
            case .some(-1): return false
            case .some(let n):
                head += n
                if let item { body(item) }
            case .none:
                // Out of bytes, or a fault: a fault once the whole file is read, or when more is
                // held than any item takes (no tree is read whole to find a damaged item).
                if atEnd || buffer.count - head >= maxKeptItemBytes { return false }
                guard refill() else { return false }
            }
        }
    }

    /// Puts a kept tree into the state of a mount starting offline. Everything is stale (the server
    /// is asked first whenever it can be), and answers from here only while it cannot.
    ///
    /// `trustedFor` (a mount online, once the change feed from the tree's cursor has been read:
    /// `catchUpKept`): the listings the feed held stand as a listing just taken does — complete,
    /// held by the feed, their names' attributes trusted for that long — unless `stale`. Every other
    /// folder and name is stale, as offline. The changes read since are applied after this.
    /// Returns false when the tree was damaged (`Restorer.damaged`).
    @discardableResult
    static func restore(_ snapshot: TreeSnapshot, into s: inout State, trustedFor ttl: Duration? = nil) -> Bool {
        var restorer = Restorer(snapshot.header, into: &s, trustedFor: ttl)
        for item in snapshot.items { restorer.add(item, into: &s) }
        return !restorer.damaged
    }

    /// A kept tree put into a state item by item (parents before children), as `restore` says.
    struct Restorer {
        var mapped: [UInt64: InodeNumber] = [InodeNumber.root: .root]
        var held: Set<InodeNumber> = []
        let now = ContinuousClock.now
        let ttl: Duration?
        /// An item named a parent not restored before it, or an item number twice: the writer never
        /// does (parents first, each once), so the tree is damaged, and a folder it held may lack
        /// a name. Offline the rest is still used (stale anyway); online none of it is trusted.
        var damaged = false

        init(_ header: TreeSnapshot.Header, into s: inout State, trustedFor ttl: Duration?) {
            self.ttl = ttl
            s.inodes[.root]?.directory?.complete = ttl == nil ? header.rootComplete : header.rootComplete && header.rootHeld == true
            if header.rootComplete && header.rootHeld == true { hold(.root, &s) }
        }

        mutating func hold(_ ino: InodeNumber, _ s: inout State) {
            guard let ttl else { return }
            held.insert(ino)
            s.inodes[ino]?.directory?.heldByFeed = true
            s.inodes[ino]?.directory?.everListed = true
            s.inodes[ino]?.directory?.validUntil = now + ttl
        }

        /// A name of `parent` left out: the folder is no longer whole, nor held.
        mutating func leftOut(from parent: InodeNumber, _ s: inout State) {
            s.inodes[parent]?.directory?.complete = false
            if held.remove(parent) != nil { s.inodes[parent]?.directory?.expire() }
        }

        mutating func add(_ item: TreeSnapshot.Item, into s: inout State) {
            guard let parent = mapped[item.parent], s.inodes[parent]?.directory != nil, mapped[item.ino] == nil else {
                damaged = true
                return
            }
            // The tree is this mount's own file, but a damaged one must not stop the mount: a size
            // past Int64 (no server's file has one) trapped every read and `stat` of the file,
            // which take it as a signed offset. Such an item is left out, and its folder is then
            // no longer complete (a name is missing from it).
            guard item.size <= UInt64(Int64.max) else { return leftOut(from: parent, &s) }
            // A server inode restored already (the root, or an item named twice in a damaged tree)
            // is left out: the feed's changes of it must reach the one inode that has it.
            guard s.byRemote[item.remoteIno] == nil else { return leftOut(from: parent, &s) }
            let ino = inodeNumber(forRemote: item.remoteIno, &s)
            mapped[item.ino] = ino
            let validUntil: ContinuousClock.Instant =
                if ttl == nil { now } else if item.stale == true { forcedStale } else if let ttl, held.contains(parent) { now + ttl } else { now }
            var e = InodeEntry(
                ino: ino, parent: parent, name: item.name,
                attributes: FileAttributes(
                    ino: ino, kind: item.kind, mode: item.mode, uid: item.uid, gid: item.gid, size: item.size, nlink: item.nlink,
                    atime: TimeSpec(nanoseconds: item.atimeNs), mtime: TimeSpec(nanoseconds: item.mtimeNs), ctime: TimeSpec(nanoseconds: item.ctimeNs),
                    rdev: item.rdev),
                validUntil: validUntil, remote: RemoteInfo(ino: item.remoteIno, etag: item.etag))
            e.meta = FileMeta(tags: item.tags, metadata: item.metadata, contentType: item.contentType, isPublic: item.isPublic, target: item.target)
            if item.kind == .directory {
                var d = DirectoryState()
                d.complete = ttl == nil ? item.complete ?? false : item.complete == true && item.held == true
                e.directory = d
            }
            s.inodes[ino] = e
            s.byRemote[item.remoteIno] = ino
            s.inodes[parent]?.directory?.children[item.name] = ino
            if item.kind == .directory, item.complete == true, item.held == true { hold(ino, &s) }
        }
    }
}
