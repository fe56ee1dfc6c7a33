public import Foundation
import Logging
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
        try CacheFile.replace(Self.snapshotPath(configuration.cacheDirectory)) { emit in
            state.withLock { s in
                let complete = Self.walkKept(s, complete: [:]) { _ in }
                Self.snapshotJSON(
                    namespace: namespace, rootRemote: s.inodes[.root]?.remote?.ino, rootComplete: complete[.root] ?? false,
                    savedNs: Timestamp.nowNanoseconds(), chunk: 1 << 20,
                    items: { write in
                        _ = Self.walkKept(s, complete: complete) { item in
                            kept += 1
                            write(item)
                        }
                    }, emit)
            }
        }
        logger.info("kept \(kept) name(s) for a mount made while the server is away")
    }

    /// Walks the tree breadth first from the root (a parent before its children), calling `body`
    /// with each name kept: one the server has, known under this parent by this name, with nothing
    /// of it still owed (a folder always). A folder's item says `complete` as `complete` has it.
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
                        target: e.meta.target, complete: e.kind == .directory ? complete[ino] ?? false : nil))
                if e.kind == .directory { queue.append(ino) }
            }
            found[folder] = dir.complete && everyNameKept
        }
        return found
    }

    /// A snapshot as JSON that `readSnapshot`'s JSONDecoder reads, handed to `emit` in pieces of
    /// about `chunk` bytes.
    static func snapshotJSON(_ snapshot: TreeSnapshot, chunk: Int, _ emit: ([UInt8]) -> Void) {
        snapshotJSON(
            namespace: snapshot.namespace, rootRemote: snapshot.rootRemote, rootComplete: snapshot.rootComplete, savedNs: snapshot.savedNs,
            chunk: chunk, items: { write in snapshot.items.forEach(write) }, emit)
    }

    /// The same, with the items from `items` (which calls its argument with each, in order).
    static func snapshotJSON(
        namespace: String?, rootRemote: UInt64?, rootComplete: Bool, savedNs: Int64, chunk: Int, items: ((TreeSnapshot.Item) -> Void) -> Void,
        _ emit: ([UInt8]) -> Void
    ) {
        var out: [UInt8] = []
        out.reserveCapacity(chunk + 4096)
        out.append(UInt8(ascii: "{"))
        JSONOut.key("version", &out, first: true)
        JSONOut.number(TreeSnapshot.currentVersion, &out)
        if let namespace {
            JSONOut.key("namespace", &out)
            JSONOut.string(namespace, &out)
        }
        if let rootRemote {
            JSONOut.key("rootRemote", &out)
            JSONOut.number(rootRemote, &out)
        }
        JSONOut.key("rootComplete", &out)
        JSONOut.bool(rootComplete, &out)
        JSONOut.key("savedNs", &out)
        JSONOut.number(savedNs, &out)
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

    /// The tree kept by the last clean unmount of this cache folder, if it is this mount's (the same namespace).
    static func readSnapshot(_ configuration: MountConfiguration) -> TreeSnapshot? {
        guard let data = FileManager.default.contents(atPath: snapshotPath(configuration.cacheDirectory)),
            let snapshot = try? JSONDecoder().decode(TreeSnapshot.self, from: data), snapshot.version == TreeSnapshot.currentVersion
        else { return nil }
        return snapshot.namespace == scopeName(configuration) ? snapshot : nil
    }

    /// Puts a kept tree into the state of a mount starting offline. Everything is stale (the server
    /// is asked first whenever it can be), and answers from here only while it cannot.
    static func restore(_ snapshot: TreeSnapshot, into s: inout State) {
        var mapped: [UInt64: InodeNumber] = [InodeNumber.root: .root]
        s.inodes[.root]?.directory?.complete = snapshot.rootComplete
        for item in snapshot.items {
            guard let parent = mapped[item.parent], s.inodes[parent]?.directory != nil else { continue }
            // The tree is this mount's own file, but a damaged one must not stop the mount: a size
            // past Int64 (no server's file has one) trapped every read and `stat` of the file,
            // which take it as a signed offset. Such an item is left out, and its folder is then
            // no longer complete (a name is missing from it).
            guard item.size <= UInt64(Int64.max) else {
                s.inodes[parent]?.directory?.complete = false
                continue
            }
            let ino = inodeNumber(forRemote: item.remoteIno, &s)
            mapped[item.ino] = ino
            var e = InodeEntry(
                ino: ino, parent: parent, name: item.name,
                attributes: FileAttributes(
                    ino: ino, kind: item.kind, mode: item.mode, uid: item.uid, gid: item.gid, size: item.size, nlink: item.nlink,
                    atime: TimeSpec(nanoseconds: item.atimeNs), mtime: TimeSpec(nanoseconds: item.mtimeNs), ctime: TimeSpec(nanoseconds: item.ctimeNs),
                    rdev: item.rdev),
                validUntil: .now, remote: RemoteInfo(ino: item.remoteIno, etag: item.etag))
            e.meta = FileMeta(tags: item.tags, metadata: item.metadata, contentType: item.contentType, isPublic: item.isPublic, target: item.target)
            if item.kind == .directory {
                var d = DirectoryState()
                d.complete = item.complete ?? false
                e.directory = d
            }
            s.inodes[ino] = e
            s.byRemote[item.remoteIno] = ino
            s.inodes[parent]?.directory?.children[item.name] = ino
        }
    }
}
