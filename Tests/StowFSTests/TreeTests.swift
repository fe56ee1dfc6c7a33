import Foundation
import NIOCore
import StorageClient
import StorageProtocol
@testable import StowFS
import Testing

@Suite("engine: names — readdir, mkdir, rename, unlink")
struct EngineTreeTests {
    @Test("a listing shows stored files, folders, and files still owed to the server")
    func readdir() async throws {
        try await withEngine { h in
            _ = try await h.store.upload(.bytes(ByteBuffer(string: "s")), size: 1, to: ns, try StoragePath("d/stored"))
            try await h.write("d/local", "l")
            #expect(try await h.names("d").sorted() == ["local", "stored"])
            #expect(try await h.names("").sorted() == ["d"])
            await h.fs.sync()
            #expect(try await h.names("d").sorted() == ["local", "stored"])
        }
    }

    @Test("the root listed ahead (as a mount does before it appears) answers lookups of its names without a request; other names still ask")
    func rootListedAhead() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        _ = try await store.upload(.bytes(ByteBuffer(string: "a")), size: 1, to: ns, try StoragePath("a.txt"))
        _ = try await store.upload(.bytes(ByteBuffer(string: "b")), size: 1, to: ns, try StoragePath("small/b.txt"))
        // Without it, the first lookups ask for their name, and the fourth lists the root.
        let plain = FaultInjectingObjectStore(wrapping: store)
        try await withEngine(store: plain) { h in
            #expect(plain.calls(of: .list) == 0)
            _ = try await h.fs.lookup(parent: .root, name: "small")
            #expect(plain.calls(of: .list) == 0)
            #expect(plain.calls(of: .record) == 1)
            for name in ["a.txt", "x", "y"] { _ = try? await h.fs.lookup(parent: .root, name: name) }
            #expect(plain.calls(of: .list) == 1)
        }
        let counting = FaultInjectingObjectStore(wrapping: store)
        // A listing kept longer than the test can take: seen once, a machine that stalled past the
        // default 5 s made the root's listing expire, and the lookup listed it again.
        try await withEngine(store: counting, configure: { $0.attributeTTL = .seconds(120) }) { h in
            await h.fs.listRootAhead(within: .seconds(30))
            #expect(counting.calls(of: .list) == 1)
            let small = try await h.fs.lookup(parent: .root, name: "small")
            #expect(small.attributes.kind == .directory)
            #expect(try await h.fs.lookup(parent: .root, name: "a.txt").attributes.size == 1)
            #expect(counting.calls(of: .list) == 1)
            #expect(counting.calls(of: .record) == 0)
            // The folder below is listed when asked for, as before.
            #expect(try await h.names("small") == ["b.txt"])
            #expect(counting.calls(of: .list) == 2)
        }
        // A name the listing lacks still asks the server: one another client made just after the
        // mount started is there at once (taken as whole, the listing hid it for the TTL).
        let fresh = FaultInjectingObjectStore(wrapping: store)
        try await withEngine(store: fresh) { h in
            await h.fs.listRootAhead(within: .seconds(30))
            _ = try await store.upload(.bytes(ByteBuffer(string: "n")), size: 1, to: ns, try StoragePath("new.txt"))
            #expect(try await h.fs.lookup(parent: .root, name: "new.txt").attributes.size == 1)
            await expectFS(.notFound) { _ = try await h.fs.lookup(parent: .root, name: "missing") }
            #expect(try await h.names("").sorted() == ["a.txt", "new.txt", "small"])
        }
        // A server that does not answer in time does not hold the mount: the wait ends at its limit.
        let slow = FaultInjectingObjectStore(wrapping: store)
        try await withEngine(store: slow) { h in
            slow.setLatency(.seconds(3), for: .list)
            let started = ContinuousClock.now
            await h.fs.listRootAhead(within: .milliseconds(100))
            #expect(ContinuousClock.now - started < .seconds(2))
        }
    }

    @Test("a folder of 2,500 files lists through a few pages, each with its attributes")
    func bigListing() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        for i in 0..<2500 {
            _ = try await store.upload(.bytes(ByteBuffer(string: "\(i)")), size: Int64("\(i)".utf8.count), to: ns, try StoragePath(String(format: "big/%05d", i)))
        }
        let counting = FaultInjectingObjectStore(wrapping: store)
        try await withEngine(store: counting) { h in
            let ino = try await h.resolve("big")
            let listsBefore = counting.calls(of: .list)
            let handle = try h.fs.opendir(ino)
            let entries = try await h.fs.readdir(ino, handle: handle, offset: 0, plus: true)
            h.fs.releasedir(ino, handle: handle)
            #expect(entries.count == 2502)
            #expect(entries.dropFirst(2).allSatisfy { $0.entry != nil })
            #expect(counting.calls(of: .list) - listsBefore == 3)
            // Read as the kernel does, a bufferful at a time from the last offset: every name once,
            // in order, no page longer than asked, and the listing read once.
            let paged = try h.fs.opendir(ino)
            var names: [String] = []
            var offset: Int64 = 0
            while true {
                let page = try await h.fs.readdir(ino, handle: paged, offset: offset, plus: false, limit: 97)
                #expect(page.count <= 97)
                guard let last = page.last else { break }
                names += page.map(\.name)
                offset = last.offset
            }
            h.fs.releasedir(ino, handle: paged)
            #expect(names == entries.map(\.name))
            #expect(counting.calls(of: .list) - listsBefore <= 6)
            // The listing answers the lookups that follow (`ls -l`), with no more requests.
            let before = counting.calls(of: .record) + counting.calls(of: .list)
            for name in ["00000", "01234", "02499"] { _ = try await h.fs.lookup(parent: ino, name: name) }
            await #expect(throws: FSError.notFound) { try await h.fs.lookup(parent: ino, name: "nope") }
            #expect(counting.calls(of: .record) + counting.calls(of: .list) == before)
        }
    }

    @Test("lookups in a folder just made, or listed, need no request; a stale listing answers while the server is away")
    func lookupsFromListings() async throws {
        let counting = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        // Two seconds: the 40 calls below must fit in the listing's lifetime on a loaded machine (at
        // 300 ms, a CI machine busy building elsewhere let it expire, and one more listing was asked).
        try await withEngine(store: counting, configure: { $0.attributeTTL = .seconds(2) }) { h in
            try await h.mkdir("new")
            let before = counting.calls(of: .record) + counting.calls(of: .list)
            let dir = try await h.resolve("new")
            for i in 0..<20 { await expectFS(.notFound) { _ = try await h.fs.lookup(parent: dir, name: "f\(i)") } }
            for i in 0..<20 { try await h.write("new/f\(i)", "\(i)") }
            #expect(counting.calls(of: .record) + counting.calls(of: .list) - before <= 1)
            await h.fs.sync()
            // The listing is stale and the server unreachable: what we knew still answers.
            try await Task.sleep(for: .milliseconds(2200))
            counting.isOffline = true
            #expect(try await h.fs.lookup(parent: dir, name: "f3").attributes.size == 1)
            await expectFS(.notFound) { _ = try await h.fs.lookup(parent: dir, name: "other") }
            #expect(try await h.names("new").count == 20)
            try await h.write("new/offline.txt", "made while the server was away")
            counting.isOffline = false
            await h.fs.sync()
            #expect(try await h.stored("new/offline.txt") == "made while the server was away")
        }
    }

    @Test(
        "a lookup in a folder never listed asks for its one name; the fourth in a row lists the folder, and the lookups after it need no request")
    func loneLookupThenListing() async throws {
        let counting = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        try await withEngine(store: counting, configure: { $0.attributeTTL = .milliseconds(300) }) { h in
            try await h.mkdir("big")
            for i in 0..<50 { try await h.write("big/f\(i)", "\(i)") }
            await h.fs.sync()
            // Another mount of the same server: nothing listed yet.
            let other = try await Harness.make(store: counting)
            defer { Task { await other.close() } }
            let dir = try await other.resolve("big")
            let (records, lists) = (counting.calls(of: .record), counting.calls(of: .list))
            #expect(try await other.fs.lookup(parent: dir, name: "f7").attributes.size == 1)
            #expect(counting.calls(of: .record) == records + 1)
            #expect(counting.calls(of: .list) == lists)
            // The folder's other names are not made inodes by it.
            #expect(other.fs.state.withLock { $0.inodes[dir]?.directory?.children.count } == 1)
            // Two more ask alone; the fourth lists the folder; the rest come from the listing.
            _ = try await other.fs.lookup(parent: dir, name: "f8")
            await expectFS(.notFound) { _ = try await other.fs.lookup(parent: dir, name: "nothing") }
            #expect(counting.calls(of: .record) == records + 3)
            #expect(counting.calls(of: .list) == lists)
            #expect(try await other.fs.lookup(parent: dir, name: "f12").attributes.size == 2)
            #expect(counting.calls(of: .list) == lists + 1)
            for i in 20..<50 { _ = try await other.fs.lookup(parent: dir, name: "f\(i)") }
            await expectFS(.notFound) { _ = try await other.fs.lookup(parent: dir, name: "missing") }
            #expect(counting.calls(of: .record) == records + 3)
            #expect(counting.calls(of: .list) == lists + 1)
            // Offline, a name not looked up yet still answers from the listing, and one not in it is missing.
            counting.isOffline = true
            #expect(try await other.fs.lookup(parent: dir, name: "f3").attributes.size == 1)
            await expectFS(.notFound) { _ = try await other.fs.lookup(parent: dir, name: "other") }
            counting.isOffline = false
        }
    }

    @Test("a file renamed by another client shows under its new name once the listing is stale, and not under its old one")
    func renamedElsewhere() async throws {
        // Before the fix, the stale listing's refresh marked the inode unlinked because its old
        // name was gone, while the new name pointed at the same inode: the new name said ENOENT.
        try await withEngine(configure: { $0.attributeTTL = .milliseconds(200) }) { h in
            try await h.write("a.txt", "moved")
            await h.fs.sync()
            #expect(try await h.names("").contains("a.txt"))
            _ = try await h.fs.lookup(parent: .root, name: "a.txt")
            _ = try await h.store.rename(ns, from: try StoragePath("a.txt"), to: try StoragePath("b.txt"), replace: false, exchange: false)
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await h.names("") == ["b.txt"])
            await expectFS(.notFound) { _ = try await h.fs.lookup(parent: .root, name: "a.txt") }
            #expect(try await h.read("b.txt") == Array("moved".utf8))
        }
    }

    @Test("mkdir and rmdir go to the server; a folder holding a file still owed is not empty")
    func folders() async throws {
        try await withEngine { h in
            try await h.mkdir("f")
            #expect(try await h.storedRecord("f").kind == .directory)
            try await h.write("f/x", "x")
            await expectFS(.notEmpty) { try await h.fs.rmdir(parent: .root, name: "f") }
            try await h.unlink("f/x")
            try await h.fs.rmdir(parent: .root, name: "f")
            await #expect(throws: StorageError.self) { try await h.storedRecord("f") }
            try await h.mkdir("g")
            await expectFS(.exists) { try await h.mkdir("g") }
        }
    }

    @Test("the editor pattern: write a temp file, rename it over the original — the server ends with the new bytes only")
    func editorSave() async throws {
        try await withEngine { h in
            try await h.write("doc.txt", "old")
            await h.fs.sync()
            try await h.write(".doc.txt.swp", "new")
            try await h.rename(".doc.txt.swp", "doc.txt")
            #expect(try await h.text("doc.txt") == "new")
            #expect(try await h.names("") == ["doc.txt"])
            await h.fs.sync()
            #expect(try await h.stored("doc.txt") == "new")
            await #expect(throws: StorageError.self) { try await h.storedRecord(".doc.txt.swp") }
        }
    }

    @Test("a temp file renamed over a stored file, then removed before its upload: the stored file goes too")
    func replacedThenRemoved() async throws {
        try await withEngine { h in
            try await h.write("P", "old")
            await h.fs.sync()
            try await h.write("tmp", "x")
            try await h.rename("tmp", "P")
            try await h.unlink("P")
            #expect(try await h.names("") == [])
            await h.fs.sync()
            await #expect(throws: StorageError.self) { try await h.storedRecord("P") }
            await #expect(throws: StorageError.self) { try await h.storedRecord("tmp") }
        }
    }

    @Test("a temp file renamed over a stored file, then on to another name before its upload: the stored file goes")
    func replacedThenMoved() async throws {
        try await withEngine { h in
            try await h.write("P", "old")
            await h.fs.sync()
            try await h.write("tmp", "x")
            try await h.rename("tmp", "P")
            try await h.rename("P", "Q")
            #expect(try await h.names("") == ["Q"])
            await h.fs.sync()
            #expect(try await h.stored("Q") == "x")
            await #expect(throws: StorageError.self) { try await h.storedRecord("P") }
            #expect(try await h.names("") == ["Q"])
        }
    }

    @Test("a temp file renamed over a stored file, written again with O_TRUNC, then removed before its upload: the stored file goes")
    func replacedRewrittenThenRemoved() async throws {
        try await withEngine { h in
            try await h.write("P", "old")
            await h.fs.sync()
            try await h.write("tmp", "x")
            try await h.rename("tmp", "P")
            try await h.write("P", "y")
            try await h.unlink("P")
            await h.fs.sync()
            await #expect(throws: StorageError.self) { try await h.storedRecord("P") }
            #expect(try await h.names("") == [])
        }
    }

    @Test("a temp file renamed over a stored file that another client changed meanwhile, then removed: the other client's file stays")
    func replacedChangedElsewhereThenRemoved() async throws {
        try await withEngine { h in
            try await h.write("P", "old")
            await h.fs.sync()
            // Held back, so that this mount's upload cannot land before the other client's write
            // (then the rm would rightly remove the file it wrote over theirs: a CI run once did).
            await h.fs.pauseUploads()
            try await h.write("tmp", "x")
            try await h.rename("tmp", "P")
            // Another client writes P anew (new content: a new ETag) before this mount's rm.
            _ = try await h.store.upload(.bytes(ByteBuffer(string: "theirs")), size: 6, to: ns, try StoragePath("P"))
            try await h.unlink("P")
            await h.fs.resumeUploads()
            await h.fs.sync()
            #expect(try await h.stored("P") == "theirs")
        }
    }

    @Test("renaming a stored file renames it on the server, keeping its inode")
    func renameStored() async throws {
        try await withEngine { h in
            try await h.write("a", "A")
            await h.fs.sync()
            let before = try await h.storedRecord("a")
            try await h.mkdir("sub")
            try await h.rename("a", "sub/b")
            #expect(try await h.storedRecord("sub/b").inode == before.inode)
            await #expect(throws: StorageError.self) { try await h.storedRecord("a") }
            #expect(try await h.text("sub/b") == "A")
        }
    }

    @Test("renaming a folder moves the uploads owed under it")
    func renameFolderWithPending() async throws {
        try await withEngine { h in
            try await h.mkdir("src")
            try await h.write("src/one", "1")
            try await h.write("src/two", "2")
            try await h.rename("src", "dst")
            #expect(try await h.text("dst/one") == "1")
            await h.fs.sync()
            #expect(try await h.stored("dst/one") == "1")
            #expect(try await h.stored("dst/two") == "2")
            await #expect(throws: StorageError.self) { try await h.storedRecord("src") }
        }
    }

    @Test("rename refusals: noreplace, a folder into itself, a folder onto a file")
    func renameRules() async throws {
        try await withEngine { h in
            try await h.write("x", "x")
            try await h.write("y", "y")
            try await h.mkdir("d")
            try await h.mkdir("d/e")
            await expectFS(.exists) { try await h.rename("x", "y", noReplace: true) }
            await expectFS(.invalidArgument) { try await h.rename("d", "d/e/d2") }
            await expectFS(.notADirectory) { try await h.rename("d", "x") }
            await expectFS(.isADirectory) { try await h.rename("x", "d") }
            try await h.rename("x", "y", exchange: true)
            #expect(try await h.text("y") == "x")
            #expect(try await h.text("x") == "y")
        }
    }

    @Test("unlinking a file still owed cancels its upload; unlinking a stored one deletes it")
    func unlink() async throws {
        let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        try await withEngine(store: faulty) { h in
            faulty.setLatency(.milliseconds(200), for: .startUpload)
            try await h.write("gone", "bytes")
            try await h.unlink("gone")
            await h.fs.sync()
            await #expect(throws: StorageError.self) { try await h.storedRecord("gone") }
            faulty.setLatency(.zero, for: .startUpload)
            try await h.write("kept", "bytes")
            await h.fs.sync()
            try await h.unlink("kept")
            // The delete is queued (journaled) and sent in the background: stored by the next sync.
            await h.fs.sync()
            await #expect(throws: StorageError.self) { try await h.storedRecord("kept") }
            await expectFS(.notFound) { _ = try await h.resolve("kept") }
        }
    }

    @Test("hard links: unlink or rename of one name acts on that name, on the server too; the other name keeps the content")
    func hardLinks() async throws {
        try await withEngine { h in
            let root = try await h.resolve("")
            let a = try await h.write("a", Array("shared".utf8))
            await h.fs.sync()
            let linked = try await h.fs.link(a, newParent: root, newName: "b")
            #expect(linked.attributes.nlink == 2)
            // The inode's first name goes; the second keeps it.
            try await h.unlink("a")
            #expect(try await h.text("b") == "shared")
            await expectFS(.notFound) { _ = try await h.resolve("a") }
            await #expect(throws: StorageError.self) { try await h.storedRecord("a") }
            #expect(try await h.storedRecord("b").nlink == 1)

            // The second name goes; the first keeps it.
            let c = try await h.write("c", Array("two".utf8))
            await h.fs.sync()
            _ = try await h.fs.link(c, newParent: root, newName: "d")
            try await h.unlink("d")
            #expect(try await h.text("c") == "two")
            #expect(try await h.storedRecord("c").nlink == 1)
            await #expect(throws: StorageError.self) { try await h.storedRecord("d") }

            // A rename moves the name it is given.
            _ = try await h.fs.link(c, newParent: root, newName: "e")
            try await h.rename("e", "f")
            #expect(try await h.stored("c") == "two")
            #expect(try await h.stored("f") == "two")
            await #expect(throws: StorageError.self) { try await h.storedRecord("e") }
        }
    }

    @Test("a new file renamed onto one name of a hard-linked file before its upload: that name gets the new file, the other keeps the old content and tags (ModelTests seed 1014, racy)")
    func renameOntoHardLink() async throws {
        try await withEngine { h in
            let root = try await h.resolve("")
            let x = try await h.write("d0", Array("old content".utf8))
            try await h.setXattr("d0", "user.tags", "d")
            await h.fs.sync()
            _ = try await h.fs.link(x, newParent: root, newName: "d2")
            try await h.write("b2", "new")
            try await h.rename("b2", "d0")
            #expect(try await h.text("d0") == "new")
            #expect(try await h.text("d2") == "old content")
            #expect(try await h.fs.getattr(try await h.resolve("d2")).nlink == 1)
            await h.fs.sync()
            #expect(try await h.text("d2") == "old content")
            #expect(try await h.xattr("d2", "user.tags") == "d")
            #expect(try await h.names("") == ["d0", "d2"])
            let (d0, d2) = (try await h.storedRecord("d0"), try await h.storedRecord("d2"))
            #expect(try await h.stored("d0") == "new")
            #expect(try await h.stored("d2") == "old content")
            #expect(d2.tags == ["d"])
            #expect(d0.inode != d2.inode)
            #expect(d0.nlink == 1 && d2.nlink == 1)
            #expect(try await h.fs.getattr(try await h.resolve("d2")).nlink == 1)

            // The linked file written through the name that is replaced, its upload still owed: it
            // lands under the name it keeps, not over the new file.
            let y = try await h.write("e0", Array("first".utf8))
            await h.fs.sync()
            _ = try await h.fs.link(y, newParent: root, newName: "e2")
            try await h.write("e0", "second")
            try await h.write("c2", "other")
            try await h.rename("c2", "e0")
            await h.fs.sync()
            #expect(try await h.text("e0") == "other")
            #expect(try await h.text("e2") == "second")
            #expect(try await h.stored("e0") == "other")
            #expect(try await h.stored("e2") == "second")
        }
    }

    @Test("names: 256 bytes is too long; the root of a namespace mount takes no namespaces")
    func names() async throws {
        try await withEngine { h in
            await expectFS(.nameTooLong) { try await h.write(String(repeating: "n", count: 256), "x") }
            await expectFS(.nameTooLong) { _ = try await h.fs.lookup(parent: .root, name: String(repeating: "n", count: 256)) }
            try await h.write(String(repeating: "n", count: 255), "ok")
        }
    }

    @Test("symlinks and special files are stored as nodes")
    func nodes() async throws {
        try await withEngine { h in
            let link = try await h.fs.symlink(target: "somewhere/else", parent: .root, name: "l", caller: .root)
            #expect(link.attributes.kind == .symlink)
            #expect(try await h.fs.readlink(link.ino) == "somewhere/else")
            let fifo = try await h.fs.mknod(parent: .root, name: "p", mode: 0o010644, rdev: 0, caller: .root)
            #expect(fifo.attributes.kind == .fifo)
            #expect(try await h.storedRecord("p").kind == .fifo)
        }
    }
}

@Suite("engine: the kernel forgetting inodes")
struct ForgetTests {
    @Test("after the kernel forgets an inode (drop_caches), its name is still found — from the listing or the server")
    func forgetKeepsNames() async throws {
        try await withEngine(configure: { $0.attributeTTL = .seconds(60) }) { h in
            try await h.mkdir("d")
            try await h.write("d/f", "x")
            await h.fs.sync()
            let dir = try await h.resolve("d")
            let entry = try await h.fs.lookup(parent: dir, name: "f")
            // The kernel held two references (create and this lookup) and drops them all.
            h.fs.forget(entry.ino, count: 2)
            #expect(try await h.fs.lookup(parent: dir, name: "f").attributes.size == 1)
            #expect(try await h.names("d") == ["f"])
        }
    }

    @Test("a record read by a request sent before the change feed named its inode (a listing on its way while another client rewrote the file) is not trusted: the next stat asks the server")
    func recordOlderThanTheFeed() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        _ = try await store.upload(.bytes(ByteBuffer(string: "one")), size: 3, to: ns, try StoragePath("f"))
        try await withEngine(store: store) { h in
            #expect(try await h.names("") == ["f"])
            let ino = try await h.resolve("f")
            let old = try await store.record(ns, try StoragePath("f"))
            // The listing's request goes out; another client rewrites f; the feed says so; then the
            // listing's answer (the old record) arrives.
            let sent = ContinuousClock.now
            _ = try await store.upload(.bytes(ByteBuffer(string: "longer")), size: 6, to: ns, try StoragePath("f"))
            _ = h.fs.apply([ChangeRecord(cursor: "c1.0", kind: .inode, parent: nil, name: nil, ino: old.inode, removed: false, origin: "another")])
            h.fs.state.withLock { s in _ = h.fs.upsert(&s, old, parent: .root, name: "f", observedAt: sent) }
            #expect(h.fs.attributesCached(ino) == nil, "the old record's attributes were trusted")
            #expect(try await h.fs.getattr(ino).size == 6)
            // A record read after the change is trusted as usual.
            #expect(h.fs.attributesCached(ino)?.size == 6)
            // The answer to a change of this mount's (no known start) within a minute of the feed
            // naming the inode is not trusted either.
            _ = h.fs.apply([ChangeRecord(cursor: "c2.0", kind: .inode, parent: nil, name: nil, ino: old.inode, removed: false, origin: "another")])
            h.fs.state.withLock { s in _ = h.fs.upsert(&s, old, parent: .root, name: "f") }
            #expect(h.fs.attributesCached(ino) == nil, "an answer of unknown age was trusted after the feed named the inode")
        }
    }

    @Test("in a folder whose listing the feed holds, a file the feed named (rewritten elsewhere) is looked up by its one record, not by listing the folder again")
    func namedFileAskedAlone() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        for i in 0..<20 { _ = try await store.upload(.bytes(ByteBuffer(string: "\(i)")), size: Int64("\(i)".utf8.count), to: ns, try StoragePath("d/f\(i)")) }
        let counting = FaultInjectingObjectStore(wrapping: store)
        try await withEngine(store: counting) { h in
            // As if the feed were followed and answering (this store has none).
            h.fs.feed.value.withLock { v in
                v.status.connected = true
                v.lastAnswer = .now
            }
            #expect(try await h.names("d").count == 20)
            let folder = try await h.resolve("d")
            #expect(h.fs.state.withLock { $0.inodes[folder]?.directory?.heldByFeed } == true)
            let f3 = try await store.record(ns, try StoragePath("d/f3"))
            _ = try await store.upload(.bytes(ByteBuffer(string: "rewritten")), size: 9, to: ns, try StoragePath("d/f3"))
            _ = h.fs.apply([ChangeRecord(cursor: "c1.0", kind: .inode, parent: nil, name: nil, ino: f3.inode, removed: false, origin: "another")])
            let lists = counting.calls(of: .list), records = counting.calls(of: .record)
            #expect(try await h.fs.lookup(parent: folder, name: "f3").attributes.size == 9)
            #expect(counting.calls(of: .list) == lists, "the folder was listed again for one file the feed named")
            #expect(counting.calls(of: .record) == records + 1)
            // Its other names still answer from the listing.
            #expect(try await h.fs.lookup(parent: folder, name: "f4").attributes.size == 1)
            #expect(counting.calls(of: .list) == lists && counting.calls(of: .record) == records + 1)
        }
    }
}
