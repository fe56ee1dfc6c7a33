import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Testing

/// `GET …/search` on every backend: its answers are compared with `SearchFilter.matches` run on
/// the tree as listed, after tags, metadata, names and folders changed (the SQLite store keeps
/// tags and metadata in tables its triggers fill; a stale row would show here).
@Suite("search by tags, name, path, type, visibility, size, time and metadata")
struct SearchTests {
    static let tags = ["red", "green", "blue", "raw", "2026"]
    /// `Image/PNG`: types compare by bytes on both stores (PostgreSQL's collation would put it among `image/…`).
    static let types = ["image/png", "image/jpeg", "text/plain", "application/pdf", "Image/PNG"]
    static let names = ["a.png", "b.jpg", "IMG_001.JPG", "notes.txt", "a*b", "[x].png", "q?.txt", "ÿü.png", "-dash", "^caret", "report.pdf", "x]y", "_under", "Bee", "b2"]

    /// A deterministic stream of choices.
    struct Dice {
        var state: UInt64
        mutating func next(_ n: Int) -> Int {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Int((state >> 33) % UInt64(n))
        }
        mutating func pick<T>(_ a: [T]) -> T { a[next(a.count)] }
        mutating func some<T>(_ a: [T]) -> [T] { a.filter { _ in next(3) == 0 } }
    }

    /// Every entry below the root, with its record.
    static func everything(_ store: HTTPObjectStore, _ folder: StoragePath = .root) async throws -> [(StoragePath, FileRecord)] {
        var out: [(StoragePath, FileRecord)] = []
        for r in try await store.listAll(testNamespace, folder: folder) {
            let p = try folder.appending(r.fileName)
            out.append((p, r))
            if r.kind == .directory { out += try await everything(store, p) }
        }
        return out
    }

    /// Every page of a search, as paths.
    static func found(_ store: HTTPObjectStore, _ filter: SearchFilter, limit: Int) async throws -> [String] {
        var out: [String] = []
        var cursor: String?
        var pages = 0
        repeat {
            let page = try await store.search(testNamespace, filter, cursor: cursor, limit: limit)
            #expect(page.items.count <= limit)
            out += page.items.map(\.filePath)
            cursor = page.nextCursor
            pages += 1
        } while cursor != nil && pages < 1000
        return out
    }

    @Test("random trees and random filters: the store finds exactly what the filter's own test finds")
    func againstTheModel() async throws {
        try await withServer { s in
            var dice = Dice(state: 7)
            let folders = ["", "photos", "photos/2026", "photos/2026/may", "docs", "docs/old", "x y"]
            var made: [String] = []
            for i in 0..<90 {
                let folder = dice.pick(folders)
                let name = i < Self.names.count ? Self.names[i] : "f\(i)" + dice.pick([".png", ".txt", ".JPG", ""])
                let p = folder.isEmpty ? name : folder + "/" + name
                guard !made.contains(p) else { continue }
                var params = UploadParams()
                let meta = dice.some(["owner": dice.pick(["alice", "bob"]), "camera": dice.pick(["x100", "gr3"])].map { $0 })
                params.metadata = meta.isEmpty ? nil : Dictionary(uniqueKeysWithValues: meta)
                params.isPublic = dice.next(4) == 0 ? true : nil
                params.mtimeNs = Int64(1_700_000_000 + dice.next(1000)) * 1_000_000_000
                let options = UploadOptions(contentType: dice.pick(Self.types), tags: dice.some(Self.tags), params: params)
                _ = try await s.admin.put(randomBytes(dice.next(64), seed: UInt64(i)), p, options: options)
                made.append(p)
            }
            // Changes after the files were made: tags and metadata replaced or dropped, files
            // deleted, a folder moved (every path below it changes), a second name for a file.
            for p in made.prefix(30) {
                switch dice.next(4) {
                case 0: _ = try await s.admin.update(testNamespace, path(p), FilePatch(tags: dice.some(Self.tags)), ifMatch: nil)
                case 1: _ = try await s.admin.update(testNamespace, path(p), FilePatch(metadataSet: ["owner": "carol"]), ifMatch: nil)
                case 2: _ = try await s.admin.update(testNamespace, path(p), FilePatch(tags: [], metadata: [:], isPublic: true), ifMatch: nil)
                default: try await s.admin.delete(testNamespace, path(p), ifMatch: nil)
                }
            }
            _ = try await s.admin.rename(testNamespace, from: path("photos/2026"), to: path("docs/2026"), replace: false, exchange: false)
            if let file = try await Self.everything(s.admin).first(where: { $0.1.kind == .file }) {
                _ = try await s.admin.link(testNamespace, from: file.0, to: path("docs/linked"))
            }

            let tree = try await Self.everything(s.admin)
            #expect(tree.count > 60)
            var filters: [SearchFilter] = [
                SearchFilter(), SearchFilter(kind: .folders), SearchFilter(kind: .all),
                SearchFilter(tags: ["red"]), SearchFilter(tags: ["red", "blue"]), SearchFilter(anyTags: ["raw", "2026"]),
                SearchFilter(name: try NameGlob("*.png")), SearchFilter(name: try NameGlob("[!a-f]*")), SearchFilter(name: try NameGlob("?.*")),
                SearchFilter(name: try NameGlob("*\\**")), SearchFilter(name: try NameGlob("[[]*")), SearchFilter(name: try NameGlob("*[]]*")),
                SearchFilter(name: try NameGlob("[-^]*")), SearchFilter(name: try NameGlob("[^-]*")), SearchFilter(name: try NameGlob("ÿ?.png")),
                // Sets SQLite's GLOB reads its own way (a `]`, `^` or `-` as a member or a range's end).
                SearchFilter(name: try NameGlob("[\\]-a]*")), SearchFilter(name: try NameGlob("[A-\\]]*")), SearchFilter(name: try NameGlob("[\\^-a]*")),
                SearchFilter(name: try NameGlob("[!\\]-a]*")),
                SearchFilter(nameContains: "img"), SearchFilter(nameContains: "PNG"), SearchFilter(contentType: "image/*"),
                SearchFilter(contentType: "text/plain"), SearchFilter(isPublic: true), SearchFilter(isPublic: false),
                SearchFilter(minSize: 10, maxSize: 30), SearchFilter(modifiedAfterNs: 1_700_000_500_000_000_000),
                SearchFilter(modifiedBeforeNs: 1_700_000_200_000_000_000), SearchFilter(metadata: ["owner": "carol"]),
                SearchFilter(metadata: ["owner": "alice", "camera": "gr3"]), SearchFilter(path: path("docs")),
                SearchFilter(path: path("docs/2026")), SearchFilter(path: path("docs"), kind: .folders), SearchFilter(path: path("x y"), tags: ["green"]),
            ]
            for _ in 0..<40 {
                var f = SearchFilter()
                if dice.next(3) == 0 { f.path = path(dice.pick(["photos", "docs", "docs/2026", "docs/old"])) }
                f.tags = dice.next(2) == 0 ? [dice.pick(Self.tags)] : []
                if dice.next(3) == 0 { f.anyTags = dice.some(Self.tags) }
                if dice.next(3) == 0 { f.contentType = dice.pick(Self.types + ["image/*", "text/*"]) }
                if dice.next(4) == 0 { f.isPublic = dice.next(2) == 0 }
                if dice.next(4) == 0 { f.minSize = Int64(dice.next(40)) }
                if dice.next(3) == 0 { f.metadata = ["owner": dice.pick(["alice", "bob", "carol"])] }
                if dice.next(4) == 0 { f.name = try NameGlob(dice.pick(["*.png", "*.txt", "f1*", "*[0-4]*", "[a-c]*"])) }
                filters.append(f)
            }
            for (n, filter) in filters.enumerated() {
                let expected = tree.filter { p, r in
                    filter.matches(
                        path: p, kind: r.kind, size: r.size, mtimeNs: r.mtimeNs, contentType: r.contentType, tags: r.tags, metadata: r.metadata,
                        isPublic: r.isPublic)
                }.map { $0.0.string }
                let got = try await Self.found(s.admin, filter, limit: n % 2 == 0 ? 7 : 1000)
                #expect(got.count == Set(got).count, "filter \(n) gave a path twice: \(filter.queryItems)")
                #expect(Set(got) == Set(expected), "filter \(n) \(filter.queryItems): missing \(Set(expected).subtracting(got)), extra \(Set(got).subtracting(expected))")
            }
        }
    }

    @Test("bad filters are refused with 400 and say why; a missing namespace or folder is 404")
    func badInput() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("x".utf8), "f.txt")
            let base = Routes.search(testNamespace)
            for query in [
                "type=image", "type=*/png", "type=image/png*", "public=yes", "min_size=-1", "max_size=99999999999999999999",
                "modified_after=yesterday", "modified_before=99999999999999999", "limit=0", "limit=1001", "cursor=garbage",
                "name=%5Babc", "name=a%5C", "meta=novalue", "kind=sockets", "tag=", "name=a&name=b", "path=..",
                "tag=a%00b", "name=x%00yz", "meta=k=v%00", "name_contains=%00",
            ] {
                let answer = try await s.raw.send("GET", base + "?" + query)
                #expect(answer.status == 400, "\(query) → \(answer.status)")
                #expect(answer.error != nil, "\(query): \(answer.text)")
            }
            #expect(try await s.raw.send("GET", base + "?path=nowhere").status == 404)
            #expect(try await s.raw.send("GET", base + "?path=f.txt").status == 409)
            #expect(try await s.raw.send("GET", Routes.search(try Namespace("nope"))).status == 404)
            #expect(try await s.raw.send("GET", base, token: nil).status == 401)
            #expect(try await s.raw.send("GET", base + "?tag=x").status == 200)
        }
    }

    @Test("a page ends where the next begins, even when files are added and removed between pages")
    func stablePages() async throws {
        try await withServer { s in
            for i in 0..<25 { _ = try await s.admin.put(Array("x".utf8), "p/\(i).txt", options: UploadOptions(tags: ["t"])) }
            let first = try await s.admin.search(testNamespace, SearchFilter(tags: ["t"]), cursor: nil, limit: 10)
            #expect(first.items.count == 10)
            let cursor = try #require(first.nextCursor)
            // One file of the first page goes, one new one comes (a higher inode: it comes last).
            try await s.admin.delete(testNamespace, path(first.items[0].filePath), ifMatch: nil)
            _ = try await s.admin.put(Array("x".utf8), "p/new.txt", options: UploadOptions(tags: ["t"]))
            var rest: [String] = []
            var c: String? = cursor
            while let next = c {
                let page = try await s.admin.search(testNamespace, SearchFilter(tags: ["t"]), cursor: next, limit: 10)
                rest += page.items.map(\.filePath)
                c = page.nextCursor
            }
            #expect(rest.count == 16)
            #expect(rest.last == "p/new.txt")
            #expect(Set(rest).isDisjoint(with: first.items.map(\.filePath)))
        }
    }
}
