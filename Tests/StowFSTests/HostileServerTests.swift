import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import StowFS
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Every number from the network can overflow: a server (or anything between it and the mount)
/// that sends numbers no server means must cost an error answer, never the mount — a trap there
/// takes every file written and not yet stored with it.
@Suite("numbers from a hostile server")
struct HostileServerTests {
    // MARK: - The engine, over a store whose records say what a test makes them say

    @Test("times at the ends of an Int64 of nanoseconds: whole seconds rounded down and the rest, for every value")
    func timesAtTheirEdges() {
        let cases: [(Int64, Int64, Int64)] = [
            (.min, -9_223_372_037, 145_224_192), (.min + 1, -9_223_372_037, 145_224_193), (-1_000_000_001, -2, 999_999_999),
            (-1_000_000_000, -1, 0), (-1, -1, 999_999_999), (0, 0, 0), (1, 0, 1), (.max, 9_223_372_036, 854_775_807),
        ]
        for (ns, seconds, rest) in cases {
            let t = TimeSpec(nanoseconds: ns)
            #expect(t.seconds == seconds && t.subsecondNanoseconds == rest, "\(ns)")
        }
    }

    @Test("a time a program sets past 2262 or before 1677 (touch -d 2300-01-01): kept at the nearest one the engine holds")
    func timesSetByPrograms() {
        #expect(TimeSpec(seconds: 10_413_792_000, nanoseconds: 0).nanoseconds == .max)
        #expect(TimeSpec(seconds: -10_413_792_000, nanoseconds: 0).nanoseconds == .min)
        #expect(TimeSpec(seconds: 9_223_372_036, nanoseconds: 999_999_999).nanoseconds == .max)
        #expect(TimeSpec(seconds: -2, nanoseconds: 500_000_000).nanoseconds == -1_500_000_000)
    }

    @Test("a file whose times are those of 1677 and 2262: stat shows them")
    func extremeTimes() async throws {
        let store = RewritingStore()
        _ = try await store.base.upload(.bytes(ByteBuffer(string: "hi")), size: 2, to: ns, try StoragePath("t"))
        store.set("mtime_ns", to: "-9223372036854775808", inRecordsOf: "t")
        store.set("atime_ns", to: "9223372036854775807", inRecordsOf: "t")
        try await withEngine(store: store) { h in
            let a = try await h.fs.getattr(try await h.resolve("t"))
            #expect(a.mtime.seconds == -9_223_372_037 && a.mtime.subsecondNanoseconds == 145_224_192)
            #expect(a.atime.seconds == 9_223_372_036 && a.atime.subsecondNanoseconds == 854_775_807)
        }
    }

    @Test("a folder whose record says 4,294,967,295 links takes sub-folders, made or moved in")
    func folderFullOfLinks() async throws {
        let store = RewritingStore()
        for path in ["full", "other", "other/x"] { _ = try await store.base.makeFolder(ns, try StoragePath(path), FolderRequest()) }
        store.set("nlink", to: "4294967295", inRecordsOf: "full")
        try await withEngine(store: store) { h in
            try await h.mkdir("full/made")
            try await h.rename("other/x", "full/x")
            #expect(try await h.names("full").sorted() == ["made", "x"])
            #expect(try await h.fs.getattr(try await h.resolve("full")).nlink == .max)
        }
    }

    @Test("a folder whose record says 0 links (shown as 1) gives up the sub-folders it holds")
    func folderWithoutLinks() async throws {
        let store = RewritingStore()
        for path in ["few", "few/x", "few/y", "other"] { _ = try await store.base.makeFolder(ns, try StoragePath(path), FolderRequest()) }
        store.set("nlink", to: "0", inRecordsOf: "few")
        try await withEngine(store: store) { h in
            #expect(try await h.fs.getattr(try await h.resolve("few")).nlink == 1, "a count of 0 is shown as 1")
            try await h.rename("few/x", "other/x")
            try await h.rename("few/y", "other/y")
            #expect(try await h.names("few") == [])
            #expect(try await h.names("other").sorted() == ["x", "y"])
        }
    }

    @Test(
        "an upload whose completion answers an impossible size (negative, past 4 EiB) or another than the bytes sent (shorter, longer, empty): kept and tried again, its bytes readable, never taken as stored, never a trap",
        arguments: [("-1", "not a record of an entry"), ("9223372036854775807", "not a record of an entry"), ("3", "not the 4 sent"), ("5", "not the 4 sent"), ("0", "not the 4 sent")])
    func completionOfAnotherSize(size: String, says: String) async throws {
        let store = RewritingStore()
        store.set("size", to: size, inRecordsOf: "f")
        try await withEngine(store: store) { h in
            try await h.write("f", "kept")
            var status = await h.fs.status().queue
            for _ in 0..<200 where status.failedAttempts ?? 0 == 0 {
                try await Task.sleep(for: .milliseconds(50))
                status = await h.fs.status().queue
            }
            #expect(status.failedAttempts ?? 0 > 0)
            #expect(status.files == 1, "the upload stays owed")
            #expect(status.items.first?.lastError?.contains(says) == true, "\(status.items)")
            #expect(try await h.text("f") == "kept", "the local copy is what is read")
            // The server mends its ways: the next attempt stores the file.
            store.clear()
            #expect(await h.fs.sync().isEmpty)
            #expect(try await h.stored("f") == "kept")
            #expect(try await h.text("f") == "kept")
        }
    }

    @Test("stowfs find against a search whose pages do not move (the cursor asked for, empty pages): refused, not followed without end")
    func searchThatNeverEnds() async throws {
        let cases: [(String, @Sendable (String?, Int) -> SearchResponse)] = [
            ("the cursor asked for", { cursor, n in SearchResponse(items: [], nextCursor: n < 5000 ? (cursor ?? "c") : nil) }),
            ("empty pages", { _, n in SearchResponse(items: [], nextCursor: n < 5000 ? "c\(n)" : nil) }),
        ]
        for (what, answer) in cases {
            let store = RewritingStore()
            let pages = Counter()
            store.searchPages.withLock { $0 = { cursor in answer(cursor, pages.value.add(1, ordering: .relaxed).newValue) } }
            try await withEngine(store: store) { h in
                do {
                    try await h.fs.find(under: "", filter: SearchFilter(), statuses: [], emit: { _ in })
                    Issue.record("\(what): followed to the end")
                } catch let e as StorageError {
                    #expect(e.kind == .protocolViolation, "\(what): \(e)")
                }
                #expect(pages.value.load(ordering: .relaxed) < 100, "\(what): \(pages.value.load(ordering: .relaxed)) pages asked for")
            }
        }
    }

    @Test("a descriptor that reads a file in place, after the file grew on the server: the new version's bytes, never the old file's end")
    func inPlaceReadAfterGrowth() async throws {
        let store = RewritingStore()
        let folder = FileManager.default.temporaryDirectory.path + "/stowfs-blobs-\(UUID().uuidString.prefix(8))"
        store.blobFolder.withLock { $0 = folder }
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let first = [UInt8](repeating: UInt8(ascii: "a"), count: 1_500_000), second = [UInt8](repeating: UInt8(ascii: "b"), count: 2_500_000)
        _ = try await store.base.upload(.bytes(ByteBuffer(bytes: first)), size: Int64(first.count), to: ns, try StoragePath("f"))
        try await withEngine(store: store, configure: { $0.attributeTTL = .zero; $0.entryTTL = .zero }) { h in
            let ino = try await h.resolve("f")
            #expect(try await h.fs.getattr(ino).size == UInt64(first.count))
            let handle = try await h.fs.open(ino, write: false, truncate: false).handle
            func bytes(at offset: Int64, _ n: Int) async throws -> [UInt8] {
                var out: [UInt8] = []
                for seg in try await h.fs.read(ino, handle: handle, offset: offset, size: n) { out += seg.file.read(at: seg.offset, length: seg.length) }
                return out
            }
            #expect(try await bytes(at: 0, 16) == Array(first[0..<16]))
            #expect(store.localPathsGiven.value.load(ordering: .relaxed) == 1, "read in place")
            // The server's file grows; the engine learns its size (a getattr past the TTL), and the
            // descriptor still stands for the version it opened.
            _ = try await store.base.upload(.bytes(ByteBuffer(bytes: second)), size: Int64(second.count), to: ns, try StoragePath("f"))
            #expect(try await h.fs.getattr(ino).size == UInt64(second.count))
            #expect(try await bytes(at: 2_000_000, 16) == Array(second[2_000_000..<2_000_016]), "past the old end: the new version")
            #expect(try await bytes(at: 0, 16) == Array(second[0..<16]))
            await h.fs.release(ino, handle: handle)
        }
    }

    @Test("an --all mount: a namespace whose root inode is the mount's own root keeps the mount's root")
    func namespaceRootInodeCollision() async throws {
        let store = RewritingStore()
        _ = try await store.base.upload(.bytes(ByteBuffer(string: "x")), size: 1, to: ns, try StoragePath("inside"))
        store.set("root_inode", to: "1", inRecordsOf: ns.name)
        let h = try await Harness.make(store: store) { $0.scope = .all }
        do {
            #expect(try await h.names("") == [ns.name])
            #expect(try await h.names(ns.name) == ["inside"])
            #expect(try await h.names("") == [ns.name], "the root lists the namespaces still")
        } catch {
            await h.close()
            throw error
        }
        await h.close()
    }

    // MARK: - The HTTP client, against a server that answers what a test scripts

    static func record(size: String = "5", inode: String = "42", name: String = "a") -> String {
        #"{"_id":"1","file_name":"\#(name)","file_path":"\#(name)","content_type":"text/plain","namespace":"test","operation":"putObject","size":\#(size),"#
            + #""cdn":{"url":"u","absolute_url":"a","relative_url":"r"},"success":true,"tags":[],"created_on":"c","modified_on":"m","etag":"e","#
            + #""sha256":null,"metadata":{},"public":false,"kind":"file","inode":\#(inode),"mode":null,"uid":null,"gid":null,"nlink":1,"#
            + #""atime_ns":1,"mtime_ns":2,"ctime_ns":3}"#
    }

    static func posix(size: String = "5", inode: String = "42", name: String = "a") -> String {
        #"{"file_name":"\#(name)","content_type":"text/plain","size":\#(size),"tags":[],"etag":"e","sha256":null,"metadata":{},"public":false,"#
            + #""kind":"file","inode":\#(inode),"mode":null,"uid":null,"gid":null,"nlink":1,"atime_ns":1,"mtime_ns":2,"ctime_ns":3,"btime_ns":4}"#
    }

    static func expectViolation(_ what: String, _ body: () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) async {
        do {
            try await body()
            Issue.record("\(what): accepted", sourceLocation: sourceLocation)
        } catch let e as StorageError {
            #expect(e.kind == .protocolViolation, "\(what): \(e)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(what): \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test("a record, a listing page and a search page with a negative size or inode 0: a protocol violation")
    func refusedRecordsOverHTTP() async throws {
        for (size, inode) in [("-1", "42"), ("9223372036854775807", "42"), ("5", "0")] {
            let server = try ScriptedServer { r in
                if r.target.contains("/files/") { return .json(Self.record(size: size, inode: inode)) }
                if r.target.contains("/browse") {
                    return .json(#"{"items":[\#(Self.posix(size: size, inode: inode))],"folders":[],"page":{"type":"cursor","current":1,"size":1000,"item_total":1,"has_next":false,"next_id":null}}"#)
                }
                if r.target.contains("/search") { return .json(#"{"items":[\#(Self.record(size: size, inode: inode))],"next_cursor":null}"#) }
                return .notFound
            }
            defer { server.stop() }
            try await server.withStore { store in
                await Self.expectViolation("record, size \(size), inode \(inode)") { _ = try await store.record(ns, try StoragePath("a")) }
                await Self.expectViolation("listing, size \(size), inode \(inode)") { _ = try await store.listFolderPosix(ns, folder: .root, cap: nil) }
                await Self.expectViolation("search, size \(size), inode \(inode)") { _ = try await store.search(ns, SearchFilter(), cursor: nil, limit: 10) }
                do {
                    _ = try await store.listFolderPosix(ns, folder: .root, cap: nil)
                } catch {
                    #expect("\(error)".contains("not a record of an entry"), "said as it is: \(error)")
                }
            }
        }
    }

    /// A browse page of these entries that says `next` (or the end, when nil).
    static func page(_ names: [String], next: String?) -> ScriptedServer.Answer {
        let items = names.map { posix(name: $0) }.joined(separator: ",")
        let more = next.map { #""has_next":true,"next_id":"\#($0)""# } ?? #""has_next":false,"next_id":null"#
        return .json(#"{"items":[\#(items)],"folders":[],"page":{"type":"cursor","current":1,"size":1000,"item_total":1,\#(more)}}"#)
    }

    /// The `next_id` a browse request asks after (nil for the first page).
    static func cursor(of r: ScriptedServer.Request) -> String? {
        guard let range = r.target.range(of: "next_id=") else { return nil }
        return String(r.target[range.upperBound...].prefix { $0 != "&" })
    }

    @Test("a listing whose pages say 'more' without moving (the same cursor, empty pages, names that go back): refused, not followed without end")
    func listingThatNeverEnds() async throws {
        // Each server would end after 5,000 pages, so that a client following it comes back (and
        // the test fails) instead of hanging.
        let cases: [(String, @Sendable (String?, Int) -> ScriptedServer.Answer)] = [
            ("the cursor asked for, given back", { cursor, n in Self.page(["a"], next: n < 5000 ? (cursor ?? "c") : nil) }),
            ("empty pages", { _, n in Self.page([], next: n < 5000 ? "c\(n)" : nil) }),
            ("names that go back", { _, n in Self.page([n % 2 == 0 ? "b" : "a"], next: n < 5000 ? "c\(n)" : nil) }),
        ]
        for (what, answer) in cases {
            let pages = Counter()
            let server = try ScriptedServer { r in
                guard r.target.contains("/browse") else { return .notFound }
                let n = pages.value.add(1, ordering: .relaxed).newValue
                return answer(Self.cursor(of: r), n)
            }
            defer { server.stop() }
            try await server.withStore { store in
                await Self.expectViolation("\(what), pages at once") { _ = try await store.listFolderPosix(ns, folder: .root, cap: nil) }
                #expect(pages.value.load(ordering: .relaxed) < 100, "\(what): \(pages.value.load(ordering: .relaxed)) pages asked for")
                pages.value.store(0, ordering: .relaxed)
                await Self.expectViolation("\(what), page by page") { _ = try await store.listAll(ns, folder: .root) }
                #expect(pages.value.load(ordering: .relaxed) < 100, "\(what): \(pages.value.load(ordering: .relaxed)) pages asked for")
            }
        }
    }

    @Test("a listing of more entries than any folder holds: refused at the limit, each page's names in order")
    func listingWithoutEnd() throws {
        var progress = ListingProgress(folder: "f", mostEntries: 2500)
        try progress.take(names: (0..<1000).map { String(format: "n%07d", $0) }, cursor: nil, next: "1")
        try progress.take(names: (1000..<2000).map { String(format: "n%07d", $0) }, cursor: "1", next: "2")
        #expect(throws: StorageError.self) {
            try progress.take(names: (2000..<3000).map { String(format: "n%07d", $0) }, cursor: "2", next: "3")
        }
        // Names compared as bytes: "é" (0xC3 0xA9) comes after "z".
        var bytes = ListingProgress(folder: "f")
        try bytes.take(names: ["a", "z", "é"], cursor: nil, next: "x")
        #expect(throws: StorageError.self) { try bytes.take(names: ["f"], cursor: "x", next: nil) }
        // A folder and a file of one name (a seed listing) are not out of order; the last page may be empty.
        var same = ListingProgress(folder: "f")
        try same.take(names: ["a", "a"], cursor: nil, next: "x")
        try same.take(names: [], cursor: "x", next: nil)
    }

    @Test("a server that answers a local read with a path that is not one of its blob files (/etc/shadow, .., a symlink's target): refused")
    func localPathElsewhere() async throws {
        let location = Mutex("file:///etc/shadow")
        let server = try ScriptedServer { _ in
            ScriptedServer.Answer(status: 307, headers: [("Location", location.withLock { $0 }), ("ETag", "\"e\"")])
        }
        defer { server.stop() }
        try await server.withStore { store in
            for bad in ["file:///etc/shadow", "file:///srv/blobs/ab/../../../etc/shadow", "file:///srv/blobs/cd/ab0123456789abcdef"] {
                location.withLock { $0 = bad }
                await Self.expectViolation(bad) { _ = try await store.localBlobPath(url: server.url + "/cdn/test/f", etag: "e") }
            }
            location.withLock { $0 = "file:///srv/stowd/blobs/ab/ab0123456789abcdef" }
            let got = try await store.localBlobPath(url: server.url + "/cdn/test/f", etag: "e")
            #expect(got == "/srv/stowd/blobs/ab/ab0123456789abcdef")
        }
    }

    @Test("a lock answer whose conflict ends before it starts: a protocol violation, not F_GETLK's length of a negative range")
    func lockConflictBackwards() async throws {
        let server = try ScriptedServer { r in
            guard r.target.contains("/locks/test") else { return .notFound }
            return .json(#"{"granted":false,"conflict":{"session":"s","owner":1,"type":"write","start":10,"end":9,"pid":7}}"#)
        }
        defer { server.stop() }
        try await server.withStore { store in
            let request = LockRequest(session: "session-0123456789", ino: 42, owner: 1, kind: .posix, type: .write, start: 0, end: 10, pid: 1)
            await Self.expectViolation("test lock") { _ = try await store.testLock(ns, request) }
        }
    }

    /// A start answer for `size` bytes of `a` (`direct`: in parts of `partSize`, straight to the store).
    static func started(_ name: String = "a", size: Int64, partSize: Int64? = nil, deferred: Bool = false) -> String {
        let direct = partSize.map { #","direct":{"url":null,"part_size":\#($0),"parts":0,"expires_at":9999999999}"# } ?? ""
        return #"{"file_name":"\#(name)","file_path":"\#(name)","content_type":"application/octet-stream","namespace":"test","operation":"putObject","size":\#(size),"#
            + #""tags":[],"upload":{"url":"http://elsewhere/storage/uploads/u1","expiry":3600\#(direct)},"#
            + #""cdn":{"url":"u","absolute_url":"a","relative_url":"r"},"method":"PUT"\#(deferred ? #","defer_length":true"# : "")}"#
    }

    /// A server for the uploads of `uploadNumbers…`: its starts, parts and storage link answer
    /// with the numbers each test names; `puts` counts the parts sent to the store.
    static func uploadServer(puts: Counter) throws -> ScriptedServer {
        try ScriptedServer { r in
            let asked = String(decoding: r.body, as: UTF8.self)
            if r.target.hasSuffix("/upload/start") {
                // Declared 10 bytes; the server says 3 (the client would send 3, and complete).
                if asked.contains(#""file_name":"short""#) { return .json(Self.started("short", size: 3)) }
                if asked.contains(#""file_name":"zero""#) { return .json(Self.started("zero", size: 10, partSize: 4)) }
                return .json(Self.started(size: 10, partSize: 4))
            }
            if r.target.hasSuffix("/upload/parts") {
                if asked.contains(#""file_name":"zero""#) { return .json(#"{"part_size":0,"parts":[],"stored":[]}"#) }
                if asked.contains(#""numbers":[]"#) { return .json(#"{"part_size":4,"parts":[],"stored":[]}"#) }
                // Part 2 of a 10-byte file in parts of 4 holds 4 bytes, not 6.
                return .json(#"{"part_size":4,"parts":[{"number":1,"url":"\#(r.base)/put/1","size":4},{"number":2,"url":"\#(r.base)/put/2","size":6},{"number":3,"url":"\#(r.base)/put/3","size":2}],"stored":[]}"#)
            }
            if r.target.hasPrefix("/put/") {
                puts.value.add(1, ordering: .relaxed)
                return ScriptedServer.Answer(status: 200)
            }
            if r.target.hasPrefix("/storage/uploads/") {
                // Holds more than was ever sent.
                return ScriptedServer.Answer(status: r.method == "HEAD" ? 200 : 204, headers: [(Tus.uploadOffset, "20")])
            }
            return .notFound
        }
    }

    static let tenBytes = ByteBuffer(bytes: Array(0..<10))

    @Test("an upload started as another size than declared: a protocol violation (a file cut short otherwise)")
    func uploadNumbersStart() async throws {
        let server = try Self.uploadServer(puts: Counter())
        defer { server.stop() }
        try await server.withStore { store in
            await Self.expectViolation("a start of another size") { _ = try await store.startUpload(ns, StartUploadRequest(fileName: "short", size: 10)) }
        }
    }

    @Test("a direct upload in parts of 0 bytes: a protocol violation, not a division by zero")
    func uploadNumbersPartSize() async throws {
        let puts = Counter()
        let server = try Self.uploadServer(puts: puts)
        defer { server.stop() }
        try await server.withStore { store in
            await Self.expectViolation("parts of 0 bytes") {
                _ = try await store.upload(.bytes(Self.tenBytes), size: 10, to: ns, try StoragePath("zero"), options: UploadOptions(retry: .none))
            }
        }
        #expect(puts.value.load(ordering: .relaxed) == 0)
    }

    @Test("a direct upload whose part comes with a size the file does not divide into: a protocol violation before any part goes")
    func uploadNumbersParts() async throws {
        let puts = Counter()
        let server = try Self.uploadServer(puts: puts)
        defer { server.stop() }
        try await server.withStore { store in
            await Self.expectViolation("a part of the wrong size") {
                _ = try await store.upload(.bytes(Self.tenBytes), size: 10, to: ns, try StoragePath("a"), options: UploadOptions(retry: .none))
            }
        }
        #expect(puts.value.load(ordering: .relaxed) == 0, "no part went before the answer was found wrong")
    }

    @Test("a storage link that says it holds more than was sent, or than the upload's size: a protocol violation (bytes skipped otherwise)")
    func uploadNumbersOffsets() async throws {
        let server = try Self.uploadServer(puts: Counter())
        defer { server.stop() }
        try await server.withStore { store in
            let session = try JSONDecoder().decode(StartUploadResponse.self, from: Data(Self.started(size: 10).utf8))
            await Self.expectViolation("an offset past what was sent") {
                _ = try await store.send(session, from: .bytes(Self.tenBytes), offset: 0, end: 10, progress: nil)
            }
            await Self.expectViolation("an offset past the upload's size") { _ = try await store.uploadedBytes(session) }
        }
    }
}

final class Counter: Sendable {
    let value = Atomic<Int>(0)
}

/// The in-memory store, answering as a server whose records say what a test makes them say:
/// each record (and namespace) is written as JSON, changed, and read back as `HTTPObjectStore`
/// reads an answer — by JSONDecoder, and what it refuses is a protocol violation.
final class RewritingStore: ObjectStore {
    let base = InMemoryObjectStore(namespaces: [ns])
    private let rules = Mutex<[(name: String, key: String, value: String)]>([])

    /// In records of entries named `name` (or of the namespace `name`), the number of `key` is `value`.
    func set(_ key: String, to value: String, inRecordsOf name: String) {
        rules.withLock { $0.append((name, key, value)) }
    }

    /// Records are as the store has them again.
    func clear() { rules.withLock { $0 = [] } }

    /// With a folder: answers a local read as a stowd on this machine does, with the path of a
    /// file there holding the version's bytes (written when asked), in a `blobs/xy/<id>` folder.
    let blobFolder = Mutex<String?>(nil)
    let localPathsGiven = Counter()

    func localBlobPath(url: String, etag: String) async throws -> String? {
        guard let folder = blobFolder.withLock({ $0 }) else { return nil }
        let bytes = try await base.read(url: url, range: nil, ifMatch: etag).bytes
        let id = etag.utf8.map { String(format: "%02x", $0) }.joined()
        let dir = folder + "/blobs/" + id.prefix(2)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try Data(bytes.readableBytesView).write(to: URL(fileURLWithPath: dir + "/" + id))
        localPathsGiven.value.add(1, ordering: .relaxed)
        return dir + "/" + id
    }

    /// Search pages, as a test makes them (given the cursor asked for); the store cannot search without.
    let searchPages = Mutex<(@Sendable (String?) -> SearchResponse)?>(nil)

    func search(_ ns: Namespace, _ filter: SearchFilter, cursor: String?, limit: Int) async throws -> SearchResponse {
        guard let page = searchPages.withLock({ $0 }) else { throw StorageError(.notFound, "this store cannot search") }
        return page(cursor)
    }

    /// A record or namespace, through JSON and the rules.
    private func wire<T: Codable>(_ value: T) throws -> T {
        var text = String(decoding: WireJSON.encode(value), as: UTF8.self)
        for rule in rules.withLock({ $0 }) where text.contains(#""file_name":"\#(rule.name)""#) || text.contains(#""name":"\#(rule.name)""#) {
            text = text.replacing(try Regex(#""\#(rule.key)":-?[0-9]+"#), with: #""\#(rule.key)":\#(rule.value)"#)
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(text.utf8))
        } catch {
            throw StorageError(.protocolViolation, "cannot decode the server's answer as \(T.self): \(error)")
        }
    }

    func namespaces() async throws -> [NamespaceRecord] { try await base.namespaces().map(wire) }
    func createNamespace(_ ns: Namespace) async throws -> NamespaceRecord { try wire(try await base.createNamespace(ns)) }
    func deleteNamespace(_ ns: Namespace, recursive: Bool) async throws { try await base.deleteNamespace(ns, recursive: recursive) }
    func record(_ ns: Namespace, _ path: StoragePath) async throws -> FileRecord { try wire(try await base.record(ns, path)) }
    func list(_ ns: Namespace, folder: StoragePath, after: String?, limit: Int) async throws -> ListPage {
        let page = try await base.list(ns, folder: folder, after: after, limit: limit)
        return ListPage(entries: try page.entries.map(wire), next: page.next)
    }
    func update(_ ns: Namespace, _ path: StoragePath, _ patch: FilePatch, ifMatch: String?) async throws -> FileRecord {
        try wire(try await base.update(ns, path, patch, ifMatch: ifMatch))
    }
    func delete(_ ns: Namespace, _ path: StoragePath, ifMatch: String?) async throws { try await base.delete(ns, path, ifMatch: ifMatch) }
    func deleteFiles(_ ns: Namespace, _ files: [FileDeletion]) async -> [Result<Void, StorageError>] { await base.deleteFiles(ns, files) }
    func makeFolder(_ ns: Namespace, _ path: StoragePath, _ request: FolderRequest) async throws -> FileRecord {
        try wire(try await base.makeFolder(ns, path, request))
    }
    func removeFolder(_ ns: Namespace, _ path: StoragePath) async throws { try await base.removeFolder(ns, path) }
    func rename(_ ns: Namespace, from: StoragePath, to: StoragePath, replace: Bool, exchange: Bool) async throws -> FileRecord {
        try wire(try await base.rename(ns, from: from, to: to, replace: replace, exchange: exchange))
    }
    func makeNode(_ ns: Namespace, _ path: StoragePath, _ request: NodeRequest) async throws -> FileRecord { try wire(try await base.makeNode(ns, path, request)) }
    func link(_ ns: Namespace, from: StoragePath, to: StoragePath) async throws -> FileRecord { try wire(try await base.link(ns, from: from, to: to)) }
    func startUpload(_ ns: Namespace, _ request: StartUploadRequest) async throws -> StartUploadResponse { try await base.startUpload(ns, request) }
    func uploadedBytes(_ session: StartUploadResponse) async throws -> Int64 { try await base.uploadedBytes(session) }
    func send(_ session: StartUploadResponse, from source: UploadSource, offset: Int64, end: Int64, progress: ProgressHandler?) async throws -> Int64 {
        try await base.send(session, from: source, offset: offset, end: end, progress: progress)
    }
    func completeUpload(_ session: StartUploadResponse) async throws -> FileRecord { try wire(try await base.completeUpload(session)) }
    func renewUpload(_ session: StartUploadResponse) async throws -> StartUploadResponse { try await base.renewUpload(session) }
    func abandonUpload(_ session: StartUploadResponse) async throws { try await base.abandonUpload(session) }
    func signedURLs(_ ns: Namespace, _ paths: [StoragePath], expiry: Int) async throws -> [SignedURL] { try await base.signedURLs(ns, paths, expiry: expiry) }
    func read(url: String, range: Range<Int64>?, ifMatch: String?) async throws -> ReadResult { try await base.read(url: url, range: range, ifMatch: ifMatch) }
    func renewLockSession(_ ns: Namespace, id: String) async throws -> LockSessionResponse { try await base.renewLockSession(ns, id: id) }
    func endLockSession(_ ns: Namespace, id: String) async throws { try await base.endLockSession(ns, id: id) }
    func lock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse { try wire(try await base.lock(ns, request)) }
    func testLock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse { try wire(try await base.testLock(ns, request)) }
}

/// An HTTP server on loopback that answers each request as `answer` says (one request per
/// connection, closed after the answer). `stop()` closes it.
final class ScriptedServer: @unchecked Sendable {
    // @unchecked: the listening socket is set once in init; `answer` is Sendable.
    struct Request: Sendable {
        var method: String
        var target: String
        var body: [UInt8]
        /// `http://127.0.0.1:PORT`.
        var base: String
    }

    struct Answer: Sendable {
        var status: Int
        var headers: [(String, String)] = []
        var body: [UInt8] = []

        static func json(_ text: String, status: Int = 200) -> Answer {
            Answer(status: status, headers: [("Content-Type", "application/json")], body: Array(text.utf8))
        }
        static let notFound = json(#"{"message":"no such route","code":"not_found"}"#, status: 404)
    }

    let port: Int
    private let listener: Int32
    private let answer: @Sendable (Request) -> Answer

    var url: String { "http://127.0.0.1:\(port)" }

    init(_ answer: @escaping @Sendable (Request) -> Answer) throws {
        self.answer = answer
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        listener = fd
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        port = Int(UInt16(bigEndian: address.sin_port))
        guard bound == 0, listen(fd, 64) == 0 else { throw StorageError(.localIO, "cannot listen on loopback") }
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 { return }
                Thread.detachNewThread { self.serve(client) }
            }
        }
    }

    /// An HTTP client of this server (no retries), shut down after `body`.
    func withStore(_ body: (HTTPObjectStore) async throws -> Void) async throws {
        var c = HTTPObjectStore.Configuration(endpoint: url, token: "t")
        c.retry = .none
        let store = HTTPObjectStore(configuration: c)
        do {
            try await body(store)
        } catch {
            try? await store.shutdown()
            throw error
        }
        try await store.shutdown()
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve(_ client: Int32) {
        defer { close(client) }
        guard let (head, body) = Self.readRequest(client) else { return }
        let line = head.split(separator: "\r\n").first.map(String.init) ?? ""
        let words = line.split(separator: " ").map(String.init)
        guard words.count >= 2 else { return }
        let a = answer(Request(method: words[0], target: words[1], body: body, base: url))
        var out = "HTTP/1.1 \(a.status) Scripted\r\nConnection: close\r\nContent-Length: \(words[0] == "HEAD" ? 0 : a.body.count)\r\n"
        for (k, v) in a.headers { out += "\(k): \(v)\r\n" }
        var bytes = Array((out + "\r\n").utf8)
        if words[0] != "HEAD" { bytes += a.body }
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            sent += n
        }
    }

    /// A request's head and its body (of its Content-Length; none without one).
    static func readRequest(_ fd: Int32) -> (String, [UInt8])? {
        var data: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            if let end = find(data) {
                let head = String(decoding: data[0..<end], as: UTF8.self)
                let length = head.lowercased().split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                if data.count >= end + 4 + length { return (head, Array(data[(end + 4)..<(end + 4 + length)])) }
            }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return nil }
            data += chunk[0..<n]
        }
    }

    private static func find(_ data: [UInt8]) -> Int? {
        guard data.count >= 4 else { return nil }
        for i in 0...(data.count - 4) where data[i] == 13 && data[i + 1] == 10 && data[i + 2] == 13 && data[i + 3] == 10 { return i }
        return nil
    }
}
