import Foundation
import StorageClient
import StorageProtocol
import Testing
@testable import StowFS

@Suite("engine: the tree and the block index kept at unmount, written by hand")
struct SnapshotJSONTests {
    typealias Item = StowFileSystem.TreeSnapshot.Item

    static func awkward(_ i: Int) -> Item {
        let names = ["plain.txt", "quote\"back\\slash", "tab\tnew\nline\u{1}", "ünïcödé ✓", "e\u{301}", "\u{2028}sep", "/slash", "", "emoji 👩‍👩‍👧"]
        let kinds = NodeKind.allCases
        return Item(
            ino: UInt64(i) &* 0x9E37_79B9_7F4A_7C15, parent: UInt64(i / 3), name: names[i % names.count] + "\(i)", kind: kinds[i % kinds.count],
            mode: UInt32(i % 0o7777), uid: UInt32.max - UInt32(i), gid: UInt32(i), size: UInt64.max - UInt64(i), nlink: UInt32(i % 5),
            atimeNs: Int64.min + Int64(i), mtimeNs: Int64.max - Int64(i), ctimeNs: -Int64(i), rdev: UInt64(i) << 40,
            remoteIno: UInt64(i), etag: "\"etag-\(i)\"", id: "id\u{0}\(i)", tags: i % 4 == 0 ? [] : ["a", "b\"\(i)", names[(i + 1) % names.count]],
            metadata: i % 3 == 0 ? [:] : ["k": "v", "ß": "\u{7f}", "Z\(i)": names[(i + 2) % names.count], "a": ""],
            contentType: i % 2 == 0 ? nil : "text/plain; charset=\"utf-8\"", isPublic: i % 5 == 0, target: i % 7 == 0 ? "../t\u{8}\(i)" : nil,
            complete: i % 3 == 0 ? nil : i % 3 == 1, held: i % 4 == 0 ? nil : i % 4 == 1, stale: i % 6 == 0 ? true : nil)
    }

    @Test("JSONDecoder reads back exactly the tree written, whatever the names, tags, metadata and numbers")
    func roundTrip() throws {
        for namespace in [nil, "photos"] as [String?] {
            for rootRemote in [nil, UInt64.max] as [UInt64?] {
                let snapshot = StowFileSystem.TreeSnapshot(
                    namespace: namespace, rootRemote: rootRemote, rootComplete: rootRemote == nil, savedNs: 1_764_000_000_123_456_789,
                    items: (0..<500).map(Self.awkward), feedCursor: namespace.map { "c\($0.count).0\"\\" }, namespaceCreatedOn: namespace.map { "2026-11-29T08:00:00.123Z \($0)" },
                    rootHeld: rootRemote.map { _ in true })
                var whole: [UInt8] = []
                StowFileSystem.snapshotJSON(snapshot, chunk: 1 << 20) { whole += $0 }
                let read = try JSONDecoder().decode(StowFileSystem.TreeSnapshot.self, from: Data(whole))
                #expect(read == snapshot)
                // The hand reader a mount uses reads the same.
                #expect(whole.withUnsafeBytes { StowFileSystem.TreeSnapshot.read($0) } == snapshot)
                // In small pieces: the same bytes.
                var pieces: [[UInt8]] = []
                StowFileSystem.snapshotJSON(snapshot, chunk: 700) { pieces.append($0) }
                #expect(pieces.count > 10)
                #expect(Array(pieces.joined()) == whole)
            }
        }
        let empty = StowFileSystem.TreeSnapshot(namespace: nil, rootRemote: nil, rootComplete: false, savedNs: 0, items: [])
        var bytes: [UInt8] = []
        StowFileSystem.snapshotJSON(empty, chunk: 16) { bytes += $0 }
        #expect(try JSONDecoder().decode(StowFileSystem.TreeSnapshot.self, from: Data(bytes)) == empty)
    }

    @Test("the hand reader of the kept tree takes only what JSONDecoder reads the same way, and refuses the rest to it")
    func handReaderAgrees() throws {
        func both(_ text: String) -> (hand: StowFileSystem.TreeSnapshot?, decoder: StowFileSystem.TreeSnapshot?) {
            let bytes = Array(text.utf8)
            return (bytes.withUnsafeBytes { StowFileSystem.TreeSnapshot.read($0) }, try? JSONDecoder().decode(StowFileSystem.TreeSnapshot.self, from: Data(bytes)))
        }
        let item = #"{"ino":2,"parent":1,"name":"a","kind":"file","mode":420,"uid":0,"gid":0,"size":5,"nlink":1,"atimeNs":-1,"mtimeNs":0,"ctimeNs":0,"rdev":0,"remoteIno":7,"etag":"e","id":"i","tags":[],"metadata":{},"isPublic":false}"#
        let head = #"{"version":1,"namespace":"n","rootRemote":1,"rootComplete":true,"savedNs":0,"feedCursor":"c5.0","items":["#
        // Read alike by both.
        for text in [head + item + "]}", head + "]}", #"{"version":1,"rootRemote":null,"rootComplete":false,"savedNs":0,"items":[],"unknown":[1,{"x":null}]}"#] {
            let (hand, decoder) = both(text)
            #expect(hand != nil && hand == decoder, "\(text)")
        }
        // Refused by the hand reader (JSONDecoder decides): a key twice, a number past its type, a
        // value of another type, a missing key, an unknown kind, text after the end.
        for text in [
            head + item.replacingOccurrences(of: #""uid":0"#, with: #""uid":0,"uid":1"#) + "]}",
            head + item.replacingOccurrences(of: #""mode":420"#, with: #""mode":4294967296"#) + "]}",
            head + item.replacingOccurrences(of: #""size":5"#, with: #""size":"5""#) + "]}",
            head + item.replacingOccurrences(of: #","etag":"e""#, with: "") + "]}",
            head + item.replacingOccurrences(of: #""kind":"file""#, with: #""kind":"socketish""#) + "]}",
            head + item + "]} x",
        ] {
            #expect(both(text).hand == nil, "\(text)")
        }
    }

    @Test("the block cache's index, written by hand in pieces, reads back as written")
    func blockIndex() throws {
        let names = ["\"W/\\\"abc\"", "plain", "ünï\u{1}", ""]
        let index = BlockCache.Index(
            blockSize: 1 << 20,
            files: (0..<300).map { i in
                BlockCache.Index.Entry(etag: names[i % names.count] + "\(i)", blocks: (0..<(i % 7)).map { Int64($0 * i) }, bytes: Int64.max - Int64(i))
            })
        var whole: [UInt8] = []
        index.writeJSON(chunk: 1 << 20) { whole += $0 }
        #expect(try JSONDecoder().decode(BlockCache.Index.self, from: Data(whole)) == index)
        // The hand reader a mount uses reads the same; what it refuses, JSONDecoder decides.
        #expect(whole.withUnsafeBytes { BlockCache.Index.read($0) } == index)
        let text = String(decoding: whole, as: UTF8.self)
        for bad in [
            text.replacingOccurrences(of: "\"bytes\":", with: "\"bytes\":1,\"bytes\":"), text.replacingOccurrences(of: "\"blockSize\":1048576", with: "\"blockSize\":\"1048576\""),
            text + " x", text.replacingOccurrences(of: "\"blocks\":[]", with: "\"blocks\":[1.5]"),
        ] where bad != text {
            #expect(Array(bad.utf8).withUnsafeBytes { BlockCache.Index.read($0) } == nil, "\(bad.prefix(200))")
        }
        let odd = #"{"files":[{"bytes":3,"etag":"e","blocks":[0],"pack":null,"later":{"x":[1,2]}}],"blockSize":4096}"#
        #expect(Array(odd.utf8).withUnsafeBytes { BlockCache.Index.read($0) } == (try JSONDecoder().decode(BlockCache.Index.self, from: Data(odd.utf8))))
        var pieces: [[UInt8]] = []
        index.writeJSON(chunk: 500) { pieces.append($0) }
        #expect(pieces.count > 10)
        #expect(Array(pieces.joined()) == whole)
        var empty: [UInt8] = []
        BlockCache.Index(blockSize: 4096, files: []).writeJSON(chunk: 1) { empty += $0 }
        #expect(try JSONDecoder().decode(BlockCache.Index.self, from: Data(empty)) == BlockCache.Index(blockSize: 4096, files: []))
    }

    @Test("a kept tree with a size past Int64 mounts offline without that file: no trap, the sound names kept, its folder no longer complete")
    func damagedTree() async throws {
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-tree-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        func item(_ ino: UInt64, parent: UInt64, _ name: String, _ kind: NodeKind, size: UInt64) -> Item {
            Item(
                ino: ino, parent: parent, name: name, kind: kind, mode: 0o644, uid: 0, gid: 0, size: size, nlink: 1, atimeNs: 0, mtimeNs: 0, ctimeNs: 0,
                rdev: 0, remoteIno: ino, etag: "e\(ino)", id: "\(ino)", tags: [], metadata: [:], contentType: nil, isPublic: false, target: nil,
                complete: kind == .directory ? true : nil)
        }
        let snapshot = StowFileSystem.TreeSnapshot(
            namespace: ns.name, rootRemote: 10, rootComplete: true, savedNs: 0,
            items: [
                item(11, parent: 1, "ok", .file, size: 5), item(12, parent: 1, "huge", .file, size: UInt64.max),
                item(13, parent: 1, "docs", .directory, size: 0), item(14, parent: 13, "inner.txt", .file, size: 3),
                // A server inode named twice (here the root's): the second is left out.
                item(15, parent: 1, "dup", .directory, size: 0),
                { var i = item(16, parent: 15, "again", .file, size: 1); i.remoteIno = 10; return i }(),
            ])
        var bytes: [UInt8] = []
        StowFileSystem.snapshotJSON(snapshot, chunk: 1 << 20) { bytes += $0 }
        _ = FileManager.default.createFile(atPath: StowFileSystem.snapshotPath(dir), contents: Data(bytes))
        let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        faulty.isOffline = true
        let h = try await Harness.make(store: faulty, cacheDirectory: dir) { $0.startOffline = true }
        defer { Task { await h.close() } }
        #expect(try await h.fs.lookup(parent: .root, name: "ok").attributes.size == 5)
        #expect(try await h.names("docs") == ["inner.txt"])
        // Restored, it showed 16 EiB, and a read of it trapped (its size taken as an Int64).
        let huge = try? await h.fs.lookup(parent: .root, name: "huge")
        #expect(huge == nil)
        if let huge {
            let handle = try await h.fs.open(huge.ino, write: false, truncate: false).handle
            _ = try? await h.fs.read(huge.ino, handle: handle, offset: 0, size: 10)
        }
        // A name of the root is missing: while the server is away, the root is not listed as if whole.
        await #expect(throws: FSError.self) { _ = try await h.names("") }
        // The root's server inode still maps to the root (the feed's changes of it reach it), and
        // the folder that named it again is not whole.
        #expect(h.fs.state.withLock { $0.byRemote[10] } == .root)
        await #expect(throws: FSError.self) { _ = try await h.names("dup") }
    }

    @Test("a kept tree cut short within its items (its header still whole) restores nothing: an offline mount is refused, not half a tree")
    func cutShort() async throws {
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-tree-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let snapshot = StowFileSystem.TreeSnapshot(
            namespace: ns.name, rootRemote: 10, rootComplete: true, savedNs: 0, items: (0..<50).map { i in
                var item = Self.awkward(i)
                item.parent = 1
                item.size = 1
                return item
            })
        var bytes: [UInt8] = []
        StowFileSystem.snapshotJSON(snapshot, chunk: 1 << 20) { bytes += $0 }
        let cut = Array(bytes.prefix(bytes.count * 2 / 3))
        // The header reads (up to the items); the whole does not, by hand or by JSONDecoder.
        #expect(cut.withUnsafeBytes { StowFileSystem.TreeSnapshot.read($0, items: false) { _ in } } == snapshot.header)
        var seen = 0
        #expect(cut.withUnsafeBytes { StowFileSystem.TreeSnapshot.read($0, items: true) { _ in seen += 1 } } == nil)
        #expect(seen > 10, "items before the cut were read one by one")
        _ = FileManager.default.createFile(atPath: StowFileSystem.snapshotPath(dir), contents: Data(cut))
        let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        faulty.isOffline = true
        await #expect(throws: (any Error).self) {
            let h = try await Harness.make(store: faulty, cacheDirectory: dir) { $0.startOffline = true }
            await h.close(keepCache: true)
        }
    }

    @Test("the kept tree read from its file a few bytes at a time gives the items read whole; a damaged item or end fails the read")
    func streamedFromTheFile() throws {
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-tree-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/tree.json"
        for count in [0, 1, 300] {
            let snapshot = StowFileSystem.TreeSnapshot(
                namespace: "n", rootRemote: 3, rootComplete: true, savedNs: 7, items: (0..<count).map(Self.awkward), feedCursor: "c9.0")
            var bytes: [UInt8] = []
            StowFileSystem.snapshotJSON(snapshot, chunk: 1 << 20) { bytes += $0 }
            var itemsAt = 0
            #expect(bytes.withUnsafeBytes { StowFileSystem.TreeSnapshot.read($0, items: false, itemsAt: &itemsAt) { _ in } } == snapshot.header)
            for (label, text) in [("as written", bytes), ("with white space", Array(String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: "},{", with: "} ,\n\t{").utf8) + Array("  \n".utf8))] {
                _ = FileManager.default.createFile(atPath: path, contents: Data(text))
                for chunk in [1, 7, 100, 1 << 20] {
                    var read: [StowFileSystem.TreeSnapshot.Item] = []
                    #expect(StowFileSystem.streamItems(atPath: path, from: itemsAt, chunk: chunk) { read.append($0) }, "\(label), \(count) items, chunk \(chunk)")
                    #expect(read == snapshot.items, "\(label), \(count) items, chunk \(chunk)")
                }
            }
            // Cut short, text after the end, an item of another shape: the read fails.
            for bad in [Array(bytes.dropLast(2)), bytes + Array("x".utf8), Array(String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: "\"nlink\":", with: "\"nlink\":-").utf8)]
            where bad != bytes {
                _ = FileManager.default.createFile(atPath: path, contents: Data(bad))
                for chunk in [3, 1 << 20] {
                    #expect(!StowFileSystem.streamItems(atPath: path, from: itemsAt, chunk: chunk) { _ in }, "\(count) items, chunk \(chunk)")
                }
            }
        }
    }

    @Test("a kept tree trusted online: its held folders stand, its stale items do not; a tree naming a parent it has not restored, or an item twice, is not trusted at all")
    func trustedRestore() throws {
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-tree-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func item(_ ino: UInt64, parent: UInt64, _ name: String, _ kind: NodeKind, held: Bool? = nil, stale: Bool? = nil) -> Item {
            Item(
                ino: ino, parent: parent, name: name, kind: kind, mode: 0o644, uid: 0, gid: 0, size: 1, nlink: 1, atimeNs: 0, mtimeNs: 0, ctimeNs: 0,
                rdev: 0, remoteIno: ino + 100, etag: "e\(ino)", id: "\(ino)", tags: [], metadata: [:], contentType: nil, isPublic: false, target: nil,
                complete: kind == .directory ? true : nil, held: held, stale: stale)
        }
        func restored(_ items: [Item]) throws -> StowFileSystem.State? {
            let snapshot = StowFileSystem.TreeSnapshot(
                namespace: "n", rootRemote: 10, rootComplete: true, savedNs: 0, items: items, feedCursor: "c1.0", namespaceCreatedOn: "t", rootHeld: true)
            var bytes: [UInt8] = []
            StowFileSystem.snapshotJSON(snapshot, chunk: 1 << 20) { bytes += $0 }
            let path = dir + "/tree.json"
            _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
            var itemsAt = 0
            let header = try #require(bytes.withUnsafeBytes { StowFileSystem.TreeSnapshot.read($0, items: false, itemsAt: &itemsAt) { _ in } })
            var s = StowFileSystem.State()
            let now = TimeSpec.now
            s.inodes[.root] = StowFileSystem.InodeEntry(
                ino: .root, parent: 0, name: "",
                attributes: FileAttributes(ino: .root, kind: .directory, mode: 0o755, uid: 0, gid: 0, size: 0, nlink: 2, atime: now, mtime: now, ctime: now),
                validUntil: .now, remote: StowFileSystem.RemoteInfo(ino: 10, etag: ""), directory: StowFileSystem.DirectoryState())
            s.byRemote[10] = .root
            let tree = StowFileSystem.KeptTree(path: path, header: header, itemsAt: itemsAt)
            return StowFileSystem.restoreKept(tree, into: &s, trustedFor: .seconds(60)) ? s : nil
        }
        let sound = [
            item(2, parent: 1, "held", .directory, held: true), item(3, parent: 1, "other", .directory),
            item(4, parent: 2, "fresh", .file), item(5, parent: 2, "stale", .file, stale: true), item(6, parent: 3, "x", .file),
        ]
        let s = try #require(try restored(sound))
        let held = try #require(s.byRemote[102]), other = try #require(s.byRemote[103])
        #expect(s.inodes[held]?.directory?.heldByFeed == true && s.inodes[held]?.directory?.complete == true)
        #expect(s.inodes[other]?.directory?.heldByFeed == false && s.inodes[other]?.directory?.complete == false)
        #expect(s.inodes[.root]?.directory?.heldByFeed == true)
        let fresh = try #require(s.byRemote[104]), stale = try #require(s.byRemote[105]), x = try #require(s.byRemote[106])
        #expect(s.inodes[fresh]!.validUntil > .now, "a name of a held folder is trusted as listed")
        #expect(s.inodes[stale]!.validUntil == StowFileSystem.forcedStale, "a name the feed named is not")
        #expect(s.inodes[x]!.validUntil <= .now, "a name of a folder not held is not")
        // Damaged: an item whose parent comes after it (or never), an item number twice.
        #expect(try restored([item(4, parent: 2, "orphan", .file), item(2, parent: 1, "held", .directory, held: true)]) == nil)
        #expect(try restored(sound + [item(4, parent: 3, "again", .file)]) == nil)
    }
}
