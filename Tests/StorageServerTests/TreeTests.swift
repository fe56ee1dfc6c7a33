import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Testing

@Suite("folders, rename, delete, metadata, browse")
struct TreeTests {
    @Test("folders exist empty, list with their parents, and go only when empty")
    func folders() async throws {
        try await withServer { s in
            let made = try await s.admin.makeFolder(testNamespace, path("a/b/c"), FolderRequest())
            #expect(made.kind == .directory)
            #expect(try await s.admin.record(testNamespace, path("a/b")).kind == .directory)
            let listing = try await s.admin.listAll(testNamespace, folder: path("a/b"))
            #expect(listing.map(\.fileName) == ["c"])
            _ = try await s.admin.put(Array("x".utf8), "a/b/c/f")
            let e = await #expect(throws: StorageError.self) { try await s.admin.removeFolder(testNamespace, path("a/b/c")) }
            #expect(e?.kind == .notEmpty)
            #expect(e?.status == 409)
            try await s.admin.delete(testNamespace, path("a/b/c/f"), ifMatch: nil)
            try await s.admin.removeFolder(testNamespace, path("a/b/c"))
            let gone = await #expect(throws: StorageError.self) { try await s.admin.record(testNamespace, path("a/b/c")) }
            #expect(gone?.kind == .notFound)
        }
    }

    @Test("mkdir without exist_ok on an existing folder is refused")
    func mkdirExists() async throws {
        try await withServer { s in
            _ = try await s.admin.makeFolder(testNamespace, path("d"), FolderRequest())
            let e = await #expect(throws: StorageError.self) {
                try await s.admin.makeFolder(testNamespace, path("d"), FolderRequest(parents: false, existOk: false))
            }
            #expect(e?.kind == .exists)
            let noParent = await #expect(throws: StorageError.self) {
                try await s.admin.makeFolder(testNamespace, path("x/y"), FolderRequest(parents: false))
            }
            #expect(noParent?.kind == .notFound)
        }
    }

    @Test("rename into a folder that does not exist is refused and changes nothing")
    func renameMissingParent() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("content".utf8), "old.txt")
            let e = await #expect(throws: StorageError.self) {
                try await s.admin.rename(testNamespace, from: path("old.txt"), to: path("sub/new.txt"), replace: false, exchange: false)
            }
            #expect(e?.kind == .notFound)
            #expect(try await s.admin.get("old.txt") == Array("content".utf8))
        }
    }

    @Test("rename moves files and whole folders in one step")
    func renameTree() async throws {
        try await withServer { s in
            let before = try await s.admin.put(Array("content".utf8), "src/deep/f.txt")
            _ = try await s.admin.makeFolder(testNamespace, path("dst"), FolderRequest())
            let moved = try await s.admin.rename(testNamespace, from: path("src"), to: path("dst/moved"), replace: false, exchange: false)
            #expect(moved.kind == .directory)
            let f = try await s.admin.record(testNamespace, path("dst/moved/deep/f.txt"))
            #expect(f.inode == before.inode)
            #expect(try await s.admin.get("dst/moved/deep/f.txt") == Array("content".utf8))
            await #expect(throws: StorageError.self) { try await s.admin.record(testNamespace, path("src")) }
            let file = try await s.admin.rename(testNamespace, from: path("dst/moved/deep/f.txt"), to: path("g.txt"), replace: false, exchange: false)
            #expect(file.inode == before.inode)
            #expect(file.filePath == "g.txt")
        }
    }

    @Test("rename onto an existing file needs replace; with it, the target is replaced")
    func renameReplace() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("a".utf8), "a")
            _ = try await s.admin.put(Array("b".utf8), "b")
            let e = await #expect(throws: StorageError.self) {
                try await s.admin.rename(testNamespace, from: path("a"), to: path("b"), replace: false, exchange: false)
            }
            #expect(e?.kind == .exists)
            #expect(e?.status == 409)
            #expect(try await s.admin.get("b") == Array("b".utf8))
            _ = try await s.admin.rename(testNamespace, from: path("a"), to: path("b"), replace: true, exchange: false)
            #expect(try await s.admin.get("b") == Array("a".utf8))
            await #expect(throws: StorageError.self) { try await s.admin.record(testNamespace, path("a")) }
        }
    }

    @Test("exchange swaps two names")
    func exchange() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("1".utf8), "x")
            _ = try await s.admin.makeFolder(testNamespace, path("y"), FolderRequest())
            _ = try await s.admin.rename(testNamespace, from: path("x"), to: path("y"), replace: false, exchange: true)
            #expect(try await s.admin.record(testNamespace, path("x")).kind == .directory)
            #expect(try await s.admin.get("y") == Array("1".utf8))
        }
    }

    @Test("a folder cannot move into itself; a folder cannot replace a file or a non-empty folder")
    func renameRefusals() async throws {
        try await withServer { s in
            _ = try await s.admin.makeFolder(testNamespace, path("p/q"), FolderRequest())
            _ = try await s.admin.put(Array("f".utf8), "file")
            _ = try await s.admin.put(Array("f".utf8), "full/x")
            let into = await #expect(throws: StorageError.self) {
                try await s.admin.rename(testNamespace, from: path("p"), to: path("p/q/p2"), replace: false, exchange: false)
            }
            #expect(into?.kind == .invalidRename)
            #expect(into?.status == 400)
            let ontoFile = await #expect(throws: StorageError.self) {
                try await s.admin.rename(testNamespace, from: path("p"), to: path("file"), replace: true, exchange: false)
            }
            #expect(ontoFile?.kind == .notADirectory)
            let ontoFull = await #expect(throws: StorageError.self) {
                try await s.admin.rename(testNamespace, from: path("p"), to: path("full"), replace: true, exchange: false)
            }
            #expect(ontoFull?.kind == .notEmpty)
            #expect(try await s.admin.record(testNamespace, path("p/q")).kind == .directory)
        }
    }

    @Test("PATCH changes tags, metadata keys, content type, public, mode and times")
    func patch() async throws {
        try await withServer { s in
            let r = try await s.admin.put(Array("x".utf8), "m.bin")
            var changed = try await s.admin.update(
                testNamespace, path("m.bin"),
                FilePatch(tags: ["t1", "t2"], metadataSet: ["a": "1", "b": "2"], contentType: "image/png", isPublic: true, mode: 0o600, mtimeNs: 1_000_000_000_123),
                ifMatch: nil)
            #expect(changed.tags == ["t1", "t2"])
            #expect(changed.metadata == ["a": "1", "b": "2"])
            #expect(changed.contentType == "image/png")
            #expect(changed.isPublic)
            #expect(changed.mode == 0o600)
            #expect(changed.mtimeNs == 1_000_000_000_123)
            #expect(changed.etag == r.etag)
            changed = try await s.admin.update(testNamespace, path("m.bin"), FilePatch(metadataRemove: ["a"]), ifMatch: r.etag)
            #expect(changed.metadata == ["b": "2"])
            let stale = await #expect(throws: StorageError.self) {
                try await s.admin.update(testNamespace, path("m.bin"), FilePatch(tags: []), ifMatch: "stale")
            }
            #expect(stale?.kind == .preconditionFailed)
            #expect(try await s.admin.record(testNamespace, path("m.bin")).tags == ["t1", "t2"])
        }
    }

    @Test("PATCH size truncates and extends with zeros, as a new blob")
    func truncate() async throws {
        try await withServer { s in
            let r = try await s.admin.put(Array("hello world".utf8), "t")
            let cut = try await s.admin.update(testNamespace, path("t"), FilePatch(size: 5), ifMatch: nil)
            #expect(cut.size == 5)
            #expect(cut.etag != r.etag)
            #expect(try await s.admin.get("t") == Array("hello".utf8))
            _ = try await s.admin.update(testNamespace, path("t"), FilePatch(size: 8), ifMatch: nil)
            #expect(try await s.admin.get("t") == Array("hello".utf8) + [0, 0, 0])
            _ = try await s.admin.update(testNamespace, path("t"), FilePatch(size: 0), ifMatch: nil)
            #expect(try await s.admin.get("t") == [])
        }
    }

    @Test("deleting a file removes it; delete with a stale If-Match changes nothing")
    func delete() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("x".utf8), "gone")
            let e = await #expect(throws: StorageError.self) { try await s.admin.delete(testNamespace, path("gone"), ifMatch: "nope") }
            #expect(e?.kind == .preconditionFailed)
            try await s.admin.delete(testNamespace, path("gone"), ifMatch: nil)
            let missing = await #expect(throws: StorageError.self) { try await s.admin.delete(testNamespace, path("gone"), ifMatch: nil) }
            #expect(missing?.kind == .notFound)
        }
    }

    @Test("a folder of 2,500 files lists in a few round trips, in name order, nothing twice")
    func pagination() async throws {
        try await withServer { s in
            // Fill through many concurrent small uploads.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for batch in 0..<10 {
                    group.addTask {
                        for i in stride(from: batch, to: 2500, by: 10) {
                            _ = try await s.admin.put([UInt8(i & 0xff)], String(format: "big/f%05d", i))
                        }
                    }
                }
                try await group.waitForAll()
            }
            _ = try await s.admin.makeFolder(testNamespace, path("big/sub"), FolderRequest())
            var pages = 0
            var names: [String] = []
            var after: String?
            repeat {
                let page = try await s.admin.list(testNamespace, folder: path("big"), after: after, limit: 1000)
                names += page.entries.map(\.fileName)
                after = page.next
                pages += 1
            } while after != nil
            #expect(pages == 3)
            #expect(names.count == 2501)
            #expect(Set(names).count == 2501)
            #expect(names == names.sorted())
            #expect(names.contains("sub"))
        }
    }

    @Test("browse: page numbers, search, prefix and recursive listing")
    func browse() async throws {
        try await withServer { s in
            for name in ["a/one.txt", "a/two.txt", "a/b/three.txt", "c/four.jpg", "five.txt"] { _ = try await s.admin.put([1], name) }
            let all = try await s.raw.send("GET", Routes.browse(testNamespace) + "?limit=2&page=2").json(BrowseResponse.self)
            #expect(all.page.itemTotal == 5)
            #expect(all.items.count == 2)
            #expect(all.page.current == 2)
            #expect(all.page.hasNext)
            let search = try await s.raw.send("GET", Routes.browse(testNamespace) + "?search=T").json(BrowseResponse.self)
            #expect(Set(search.items.map(\.filePath)) == ["a/one.txt", "a/two.txt", "a/b/three.txt", "five.txt"])
            let level = try await s.raw.send("GET", Routes.browse(testNamespace) + "?prefix=a/&delimiter=/").json(BrowseResponse.self)
            #expect(level.items.map(\.filePath) == ["a/one.txt", "a/two.txt"])
            #expect(level.folders.map(\.filePath) == ["a/b"])
            let partial = try await s.raw.send("GET", Routes.browse(testNamespace) + "?prefix=a/t&delimiter=/").json(BrowseResponse.self)
            #expect(partial.items.map(\.filePath) == ["a/two.txt"])
            let sub = try await s.raw.send("GET", Routes.browse(testNamespace) + "?prefix=a/").json(BrowseResponse.self)
            #expect(sub.items.map(\.filePath) == ["a/b/three.txt", "a/one.txt", "a/two.txt"])
            let bad = try await s.raw.send("GET", Routes.browse(testNamespace) + "?delimiter=x")
            #expect(bad.status == 400)
        }
    }

    @Test("an empty page still counts the folder's names: an empty folder, a cursor past the end, a prefix or search that matches nothing; a missing folder is 404, a file 409")
    func emptyPages() async throws {
        try await withServer { s in
            for name in ["e/one.txt", "e/two.txt", "e/three.txt"] { _ = try await s.admin.put([1], name) }
            _ = try await s.admin.makeFolder(testNamespace, path("empty"), FolderRequest())
            func listing(_ query: String) async throws -> PosixBrowseResponse {
                let answer = try await s.raw.send("GET", Routes.browse(testNamespace) + "?delimiter=/&fields=posix&" + query)
                #expect(answer.status == 200, "\(query): \(String(decoding: answer.body, as: UTF8.self))")
                return try answer.json(PosixBrowseResponse.self)
            }
            func page(_ query: String) async throws -> (total: Int, names: [String]) {
                let l = try await listing(query)
                return (l.page.itemTotal, (l.folders + l.items).map(\.fileName))
            }
            #expect(try await page("prefix=empty/") == (0, []))
            // A cursor past the last name: the page after two names, once the third is gone.
            let first = try await listing("prefix=e/&limit=2")
            #expect((first.folders + first.items).map(\.fileName) == ["one.txt", "three.txt"])
            let next = try #require(first.page.nextId)
            try await s.admin.delete(testNamespace, path("e/two.txt"), ifMatch: nil)
            #expect(try await page("prefix=e/&limit=2&next_id=\(next)") == (2, []))
            _ = try await s.admin.put([1], "e/two.txt")
            #expect(try await page("prefix=e/&page=5&limit=2") == (3, []))
            #expect(try await page("prefix=e/t&limit=1") == (2, ["three.txt"]))
            #expect(try await page("prefix=e/x") == (0, []))
            #expect(try await page("prefix=e/&search=zzz") == (0, []))
            #expect(try await page("prefix=e/&search=O") == (2, ["one.txt", "two.txt"]))
            for (folder, status) in [("nowhere/", 404), ("e/nowhere/", 404), ("nowhere/x", 404), ("e/nowhere/o", 404), ("e/one.txt/", 409), ("e/one.txt/x", 409)] {
                let answer = try await s.raw.send("GET", Routes.browse(testNamespace) + "?delimiter=/&fields=posix&prefix=" + folder)
                #expect(answer.status == status, "\(folder): \(answer.status)")
            }
        }
    }

    /// A client of `s` that reads folders `atOnce` pages of `pageSize` at a time; shut down after.
    static func withLister(_ s: TestServer, pageSize: Int, atOnce: Int, _ body: (HTTPObjectStore) async throws -> Void) async throws {
        var c = s.admin.configuration
        c.listPageSize = pageSize
        c.listPagesAtOnce = atOnce
        try await withHTTPClient(c, body)
    }

    /// Small files, in one request.
    static func fill(_ s: TestServer, _ folder: String, _ names: [String]) async throws {
        let files = names.map { (StartUploadRequest(fileName: "\(folder)/\($0)", size: 1), UploadSource.bytes(ByteBuffer(string: "x"))) }
        for result in try await s.admin.uploadBatch(testNamespace, files) { _ = try result.get() }
    }

    @Test("browse with splits=K names where up to K more pages begin, over the same names a page lists (prefix, search, a cursor, page numbers)")
    func splits() async throws {
        try await withServer { s in
            let names = (0..<24).map { String(format: "n%02d", $0) }
            try await Self.fill(s, "s", names.filter { $0 != "n07" })
            _ = try await s.admin.makeFolder(testNamespace, path("s/n07"), FolderRequest())
            func splits(_ query: String) async throws -> [PageSplit]? {
                let answer = try await s.raw.send("GET", Routes.browse(testNamespace) + "?delimiter=/&fields=posix&" + query)
                #expect(answer.status == 200, "\(query): \(String(decoding: answer.body, as: UTF8.self))")
                let page = try answer.json(PosixBrowseResponse.self).page
                if let first = page.splits?.first { #expect(first.nextId == page.nextId, "the first split is the page's own end") }
                return page.splits
            }
            let five = try #require(try await splits("prefix=s/&limit=5&splits=10"))
            #expect(five.map(\.name) == ["n04", "n09", "n14", "n19"])
            // Each split's next_id starts the page after its name; the folder n07 counts as an entry.
            for split in five {
                let page = try await s.raw.send("GET", Routes.browse(testNamespace) + "?delimiter=/&prefix=s/&limit=5&next_id=\(split.nextId)")
                    .json(BrowseResponse.self)
                let listed = (page.folders + page.items).map(\.fileName).sorted()
                #expect(listed.first.flatMap { names.firstIndex(of: $0) } == names.firstIndex(of: split.name)! + 1)
                #expect(listed.count == min(5, names.count - 1 - names.firstIndex(of: split.name)!))
                #expect(listed.contains("n07") == (split.name == "n04"))
            }
            #expect(try await splits("prefix=s/&limit=5&splits=2")?.map(\.name) == ["n04", "n09"])
            // A page that ends with the last name has no split there.
            #expect(try await splits("prefix=s/&limit=12&splits=5")?.map(\.name) == ["n11"])
            #expect(try await splits("prefix=s/&limit=24&splits=5")?.map(\.name) == [])
            #expect(try await splits("prefix=s/&limit=5")?.map(\.name) == nil)
            // After a cursor, and by page number: counted from the page's start.
            #expect(try await splits("prefix=s/&limit=5&splits=10&next_id=\(five[1].nextId)")?.map(\.name) == ["n14", "n19"])
            #expect(try await splits("prefix=s/&limit=5&splits=10&page=2")?.map(\.name) == ["n09", "n14", "n19"])
            // Over the names a prefix or a search lets through.
            #expect(try await splits("prefix=s/n1&limit=3&splits=10")?.map(\.name) == ["n12", "n15", "n18"])
            #expect(try await splits("prefix=s/&search=1&limit=4&splits=10")?.map(\.name) == ["n12", "n16"])
            for bad in ["prefix=s/&limit=5&splits=101", "prefix=s/&limit=5&splits=-1", "prefix=s/&limit=5&splits=x"] {
                #expect(try await s.raw.send("GET", Routes.browse(testNamespace) + "?delimiter=/&" + bad).status == 400, "\(bad)")
            }
            #expect(try await s.raw.send("GET", Routes.browse(testNamespace) + "?prefix=s/&limit=5&splits=3").status == 400, "recursive")
            // The client reads a folder several pages at once: the same entries as one page after another.
            let all = try await s.admin.listAll(testNamespace, folder: path("s"), pageSize: 1000)
            #expect(all.count == 24)
            try await Self.withLister(s, pageSize: 2, atOnce: 3) { client in
                let whole = try await client.listFolder(testNamespace, folder: path("s"), cap: nil)
                #expect(whole == FolderListing(entries: all, complete: true))
                let capped = try await client.listFolder(testNamespace, folder: path("s"), cap: 5)
                #expect(!capped.complete && capped.entries.count >= 5 && capped.entries == Array(all.prefix(capped.entries.count)))
                #expect(try await client.listFolder(testNamespace, folder: path("s/n07"), cap: nil) == FolderListing(entries: [], complete: true))
            }
            // With the defaults (pages of 1,000, 8 at once): one page here.
            #expect(try await s.admin.listFolder(testNamespace, folder: path("s"), cap: nil).entries.count == 24)
        }
    }

    @Test("a folder read several pages at once while names come and go: every name that stays is listed once, nothing twice")
    func splitsUnderChurn() async throws {
        try await withServer { s in
            let stable = (0..<60).map { String(format: "k%03d", $0 * 10) }
            try await Self.fill(s, "c", stable)
            // Names between the stable ones, made and removed while the folder is read: ranges grow
            // past their page, and shrink.
            let churn = Task {
                var round = 0
                while !Task.isCancelled {
                    let names = (0..<8).map { String(format: "k%03d", (($0 * 7 + round) % 59) * 10 + 5) }
                    try await Self.fill(s, "c", names)
                    for name in names { try await s.admin.delete(testNamespace, path("c/\(name)"), ifMatch: nil) }
                    round += 1
                }
            }
            defer { churn.cancel() }
            try await Self.withLister(s, pageSize: 4, atOnce: 4) { client in
                for _ in 0..<15 {
                    let listing = try await client.listFolder(testNamespace, folder: path("c"), cap: nil)
                    #expect(listing.complete)
                    let listed = listing.entries.map(\.fileName)
                    #expect(Set(listed).count == listed.count, "a name listed twice: \(listed)")
                    #expect(Set(stable).isSubset(of: Set(listed)), "missing: \(Set(stable).subtracting(listed).sorted())")
                }
            }
            churn.cancel()
            _ = await churn.result
        }
    }

    @Test("browse with fields=posix: smaller records that make the seed's records again, equal to the plain listing's")
    func posixListing() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("hello".utf8), "d/plain.txt")
            var patch = FilePatch()
            patch.tags = ["red", "日本"]
            patch.metadata = ["k": "v \"q\" \\ /", "é": ""]
            patch.isPublic = true
            patch.mode = 0o640
            patch.uid = 7
            patch.gid = 8
            patch.contentType = "text/x-odd"
            _ = try await s.admin.put(Array(repeating: 7, count: 3000), "d/caf\u{e9} 😀 %2F & spaced")
            _ = try await s.admin.update(testNamespace, path("d/caf\u{e9} 😀 %2F & spaced"), patch, ifMatch: nil)
            _ = try await s.admin.makeNode(testNamespace, path("d/link"), NodeRequest(kind: .symlink, target: "../plain.txt"))
            _ = try await s.admin.makeNode(testNamespace, path("d/dev"), NodeRequest(kind: .characterDevice, mode: 0o600, rdev: 0x0103))
            _ = try await s.admin.makeFolder(testNamespace, path("d/sub"), FolderRequest())
            _ = try await s.admin.link(testNamespace, from: path("d/plain.txt"), to: path("d/hard"))
            let level = Routes.browse(testNamespace) + "?prefix=d/&delimiter=/&limit=3"
            let plain = try await s.raw.send("GET", level).json(BrowseResponse.self)
            let answer = try await s.raw.send("GET", level + "&fields=posix")
            #expect(answer.status == 200)
            let posix = try answer.json(PosixBrowseResponse.self)
            #expect(posix.page == plain.page)
            #expect(plain.page.hasNext)
            #expect(answer.body.count * 5 < WireJSON.encode(plain).count * 3, "posix: \(answer.body.count) bytes, plain: \(WireJSON.encode(plain).count)")
            // The hand-written reader reads what JSONDecoder reads.
            #expect(answer.body.withUnsafeBytes { WireJSONReading.posixBrowse($0) } == posix)
            let origin = try #require(plain.items.first.map { String($0.cdn.url.dropLast($0.cdn.relativeUrl.count)) })
            let made = { (p: PosixRecord) in FileRecord(p, namespace: testNamespace, path: try! path("d").appending(p.fileName), origin: origin) }
            #expect(posix.items.map(made) == plain.items)
            #expect(posix.folders.map(made) == plain.folders)
            // The client asks for posix records and gives the seed's, whole folder, every page.
            let all = try await s.raw.send("GET", Routes.browse(testNamespace) + "?prefix=d/&delimiter=/&limit=100").json(BrowseResponse.self)
            #expect(all.items.count + all.folders.count == 6)
            let listed = try await s.admin.listAll(testNamespace, folder: path("d"), pageSize: 2)
            #expect(listed == (all.folders + all.items).sorted { $0.fileName < $1.fileName })
            #expect(listed.first { $0.fileName.hasPrefix("caf") }?.metadata == patch.metadata)
            #expect(listed.first { $0.fileName == "link" }?.target == "../plain.txt")
            #expect(listed.first { $0.fileName == "dev" }?.rdev == 0x0103)
            #expect(listed.first { $0.fileName == "hard" }?.nlink == 2)
            #expect(try await s.raw.send("GET", level + "&fields=all").status == 400)
        }
    }

    @Test("namespaces: create, list by permission, delete only when empty unless recursive")
    func namespaces() async throws {
        try await withServer { s in
            let other = try Namespace("other")
            let created = try await s.raw.send("PUT", Routes.namespace(other))
            #expect(created.status == 201)
            #expect(try await s.raw.send("PUT", Routes.namespace(other)).status == 200)
            let names = try await s.admin.namespaces().map(\.name)
            #expect(names == ["other", "test"])
            let reader = s.client(token: TestServer.readerToken)
            #expect(try await reader.namespaces().map(\.name) == ["test"])
            try? await reader.shutdown()
            _ = try await s.admin.upload(.bytes(ByteBuffer(bytes: [1])), size: 1, to: other, path("f"))
            let e = await #expect(throws: StorageError.self) { try await s.admin.deleteNamespace(other, recursive: false) }
            #expect(e?.kind == .notEmpty)
            try await s.admin.deleteNamespace(other, recursive: true)
            #expect(try await s.admin.namespaces().map(\.name) == ["test"])
        }
    }

    @Test("symlinks, special files and hard links are nodes with their kind")
    func nodes() async throws {
        try await withServer { s in
            let link = try await s.admin.makeNode(testNamespace, path("l"), NodeRequest(kind: .symlink, target: "../x"))
            #expect(link.kind == .symlink)
            #expect(link.target == "../x")
            #expect(link.size == 4)
            let fifo = try await s.admin.makeNode(testNamespace, path("p"), NodeRequest(kind: .fifo, mode: 0o600))
            #expect(fifo.kind == .fifo)
            #expect(fifo.mode == 0o600)
            let f = try await s.admin.put(Array("data".utf8), "f")
            let hard = try await s.admin.link(testNamespace, from: path("f"), to: path("g"))
            #expect(hard.inode == f.inode)
            #expect(hard.nlink == 2)
            try await s.admin.delete(testNamespace, path("f"), ifMatch: nil)
            #expect(try await s.admin.get("g") == Array("data".utf8))
            #expect(try await s.admin.record(testNamespace, path("g")).nlink == 1)
            let dup = await #expect(throws: StorageError.self) { try await s.admin.makeNode(testNamespace, path("l"), NodeRequest(kind: .socket)) }
            #expect(dup?.kind == .exists)
        }
    }

    @Test("a mkdir carried out whose answer was lost is tried again, and the folder it made is the answer (not EEXIST)")
    func mkdirAnswerLost() async throws {
        try await withServer { s in
            let proxy = try AnswerLosingProxy(target: s.url)
            defer { proxy.stop() }
            let client = proxyClient(proxy)
            proxy.loseAnswers(1, of: "PUT /service/application/assets/v1.0/namespaces/test/folders/lost")
            let made = await Result { try await client.makeFolder(testNamespace, path("lost"), FolderRequest(existOk: false)) }
            try? await client.shutdown()
            #expect(proxy.lost.load(ordering: .relaxed) == 1)
            #expect(try made.get().kind == .directory)
            // A folder that was there before is still EEXIST.
            let again = await #expect(throws: StorageError.self) { _ = try await s.admin.makeFolder(testNamespace, path("lost"), FolderRequest(existOk: false)) }
            #expect(again?.kind == .exists)
        }
    }

    /// An exchange is its own undoing: sent again after the server swapped and its answer was
    /// lost (a replica killed after its commit, a proxy's timeout), it swapped back, and the
    /// client, told it succeeded, sent each file's later content to the other's name.
    @Test("an exchange carried out whose answer was lost is not sent again: the swap stands, and is the answer")
    func exchangeAnswerLost() async throws {
        try await withServer { s in
            let a = try await s.admin.put(Array("A".utf8), "x/a")
            let b = try await s.admin.put(Array("B".utf8), "y/b")
            let proxy = try AnswerLosingProxy(target: s.url)
            defer { proxy.stop() }
            let client = proxyClient(proxy)
            proxy.loseAnswers(1, of: "POST /service/application/assets/v1.0/namespaces/test/rename")
            let swapped = await Result { try await client.rename(testNamespace, from: path("x"), to: path("y"), replace: false, exchange: true) }
            try? await client.shutdown()
            #expect(proxy.lost.load(ordering: .relaxed) == 1)
            #expect(try swapped.get().inode != 0)
            #expect(try await s.admin.get("y/a") == Array("A".utf8), "the swap was undone")
            #expect(try await s.admin.get("x/b") == Array("B".utf8))
            #expect(try await s.admin.record(testNamespace, path("y/a")).inode == a.inode)
            #expect(try await s.admin.record(testNamespace, path("x/b")).inode == b.inode)
        }
    }

    /// The condition an exchange can carry (`if_from_inode`, `if_to_inode`): the server swaps only
    /// if both names still hold those inodes, decided in the swap's own transaction.
    @Test("an exchange that names the inodes it expects: refused (412, nothing changed) when either is another; swapped when both are")
    func exchangeOnCondition() async throws {
        try await withServer { s in
            let a = try await s.admin.put(Array("A".utf8), "a")
            let b = try await s.admin.put(Array("B".utf8), "b")
            let route = Routes.rename(testNamespace)
            let wrong = try await s.raw.json("POST", route, RenameRequest(from: "a", to: "b", exchange: true, ifFromInode: a.inode, ifToInode: a.inode))
            #expect(wrong.status == 412)
            #expect(try await s.admin.get("a") == Array("A".utf8))
            #expect(try await s.admin.get("b") == Array("B".utf8))
            let half = try await s.raw.json("POST", route, RenameRequest(from: "a", to: "b", exchange: true, ifFromInode: a.inode))
            #expect(half.status == 400)
            let right = try await s.raw.json("POST", route, RenameRequest(from: "a", to: "b", exchange: true, ifFromInode: a.inode, ifToInode: b.inode))
            #expect(right.status == 200)
            #expect(try await s.admin.get("a") == Array("B".utf8))
            #expect(try await s.admin.get("b") == Array("A".utf8))
            // The same request again (its answer lost): refused, the swap stands.
            let again = try await s.raw.json("POST", route, RenameRequest(from: "a", to: "b", exchange: true, ifFromInode: a.inode, ifToInode: b.inode))
            #expect(again.status == 412)
            #expect(try await s.admin.get("a") == Array("B".utf8))
            // A name gone is a 404 on both backends, as without the condition.
            let gone = try await s.raw.json("POST", route, RenameRequest(from: "a", to: "nothing", exchange: true, ifFromInode: b.inode, ifToInode: a.inode))
            #expect(gone.status == 404)
            let goneFrom = try await s.raw.json("POST", route, RenameRequest(from: "nothing", to: "a", exchange: true, ifFromInode: a.inode, ifToInode: b.inode))
            #expect(goneFrom.status == 404)
        }
    }

    /// An admin client through `proxy`, trying each call 3 times, 20 ms apart.
    private func proxyClient(_ proxy: AnswerLosingProxy) -> HTTPObjectStore {
        var c = HTTPObjectStore.Configuration(endpoint: proxy.url, token: TestServer.adminToken)
        c.retry = RetryPolicy(attempts: 3, baseDelay: .milliseconds(20))
        return HTTPObjectStore(configuration: c)
    }
}
