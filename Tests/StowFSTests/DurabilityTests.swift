import Foundation
import GRDB
import NIOCore
import StorageClient
import StorageProtocol
import StowFS
import Synchronization
import Testing

@Suite("engine: durability — an unreachable server, a crash, a restart")
struct DurabilityTests {
    @Test("while the server is unreachable, uploads stay queued with the reason; they drain when it is back")
    func offline() async throws {
        let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        try await withEngine(store: faulty) { h in
            faulty.isOffline = true
            for i in 0..<5 { try await h.write("f\(i)", "content \(i)") }
            var status = await h.fs.status().queue
            for _ in 0..<100 where !status.items.contains(where: { $0.lastError != nil }) {
                try await Task.sleep(for: .milliseconds(50))
                status = await h.fs.status().queue
            }
            #expect(status.files == 5)
            #expect(status.items.contains { $0.lastError?.contains("unreachable") == true })
            #expect(try await h.text("f3") == "content 3")
            // A waiting sync's progress: the totals, and only the records that failed (at most 20).
            for i in 5..<30 { try await h.write("f\(i)", "content \(i)") }
            let seen = Mutex<[QueueStatus]>([])
            let syncing = Task { await h.fs.sync { p in seen.withLock { $0.append(p) } } }
            for _ in 0..<200 where !seen.withLock({ $0.contains { $0.items.count == 20 } }) { try await Task.sleep(for: .milliseconds(50)) }
            let progress = seen.withLock { $0.last { $0.items.count == 20 } }
            #expect(progress?.files == 30, "\(String(describing: progress))")
            #expect(progress?.items.allSatisfy { $0.lastError != nil } == true)
            #expect(progress.map { $0.items.map(\.id) == $0.items.map(\.id).sorted() } == true, "in the order queued")
            #expect(await h.fs.status().queue.items.count == 30, "status lists every record")
            faulty.isOffline = false
            _ = await syncing.value
            await h.fs.sync()
            for i in 0..<30 { #expect(try await h.stored("f\(i)") == "content \(i)") }
            #expect(await h.fs.status().queue.files == 0)
        }
    }

    @Test("with the server away, ln and user.stow.url of a file still owed fail with EIO after the wait limit; the file stays queued")
    func boundedWaits() async throws {
        let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        try await withEngine(store: faulty, configure: { $0.uploadWaitLimit = .milliseconds(500) }) { h in
            faulty.isOffline = true
            try await h.write("owed.txt", "not yet")
            let ino = try await h.resolve("owed.txt")
            let started = ContinuousClock.now
            // An unbounded wait would never return while the server is away: the watchdog brings
            // it back after 120 s, so that a regression fails (no EIO, too slow) instead of hanging.
            // The bound is that generous because a full parallel run can starve this test's
            // 500 ms timer of the two cooperative threads for tens of seconds (seen: 49 s).
            let watchdog = Task {
                try await Task.sleep(for: .seconds(120))
                faulty.isOffline = false
            }
            await #expect(throws: FSError.self) { _ = try await h.fs.getxattr(ino, name: "user.stow.url") }
            watchdog.cancel()
            #expect(ContinuousClock.now - started < .seconds(120))
            #expect(await h.fs.status().queue.files == 1)
            faulty.isOffline = false
            await h.fs.sync()
            #expect(try await h.stored("owed.txt") == "not yet")
        }
    }

    @Test("connections that drop halfway and 500s at complete do not lose or mangle a file")
    func flaky() async throws {
        let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        try await withEngine(store: faulty) { h in
            faulty.dropHalfway(3)
            faulty.failNext(2, of: .completeUpload)
            faulty.failNext(1, of: .startUpload)
            let content = (0..<50_000).map { UInt8(truncatingIfNeeded: $0) }
            try await h.write("flaky.bin", content)
            await h.fs.sync()
            let url = try await h.store.signedURLs(ns, [try StoragePath("flaky.bin")], expiry: 60)[0].signedUrl
            #expect(Array(try await h.store.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView) == content)
        }
    }

    @Test("after a crash, a new engine on the same cache shows the owed files and sends them")
    func crashRecovery() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: base)
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-crash-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            // The first "mount" cannot reach the server, then dies with its queue full.
            let first = try await Harness.make(store: faulty, cacheDirectory: dir)
            try await first.mkdir("docs")
            faulty.isOffline = true
            try await first.write("docs/a.txt", "alpha")
            try await first.write("b.txt", "beta")
            // A file open and flushed, never closed: close(2) returned for what was flushed.
            let (entry, opened) = try first.fs.create(parent: .root, name: "open.txt", mode: 0o644, caller: .root)
            _ = try first.fs.write(entry.ino, handle: opened.handle, offset: 0, bytes: Array("flushed".utf8))
            try await first.fs.flush(entry.ino, handle: opened.handle)
            await first.close(keepCache: true)
        } catch {
            Issue.record("\(error)")
        }
        faulty.isOffline = false
        let second = try await Harness.make(store: base, cacheDirectory: dir)
        defer { Task { await second.close() } }
        #expect(try await second.text("b.txt") == "beta")
        #expect(try await second.text("docs/a.txt") == "alpha")
        #expect(try await second.names("docs") == ["a.txt"])
        await second.fs.sync()
        #expect(try await second.stored("docs/a.txt") == "alpha")
        #expect(try await second.stored("b.txt") == "beta")
        #expect(try await second.stored("open.txt") == "flushed")
        #expect(await second.fs.status().queue.files == 0)
    }

    @Test(
        "a stored file replaced (a temp file renamed over it, or written over), then a crash: listed after the restart it shows the new content; removed, the stored file goes too; kept, the new content lands",
        arguments: [(true, true), (true, false), (false, true)])
    func crashAfterReplacing(renamed: Bool, removeAfter: Bool) async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: base)
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-crash-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let first = try await Harness.make(store: faulty, cacheDirectory: dir)
            try await first.write("P", "old")
            await first.fs.sync()
            faulty.isOffline = true
            if renamed {
                // Owed, then moved over P with no rename on the server: the upload now names P.
                try await first.write("tmp", "x")
                try await first.rename("tmp", "P")
            } else {
                try await first.write("P", "x")
            }
            await first.close(keepCache: true)
        } catch {
            Issue.record("\(error)")
        }
        // The next mount starts with uploads refused, so that the recovered one cannot land first.
        faulty.isOffline = false
        faulty.failAfter(0, of: .startUpload)
        let second = try await Harness.make(store: faulty, cacheDirectory: dir)
        defer { Task { await second.close() } }
        // Listed first (the server still has the old P): the name shows what close returned for.
        #expect(try await second.names("") == ["P"])
        #expect(try await second.text("P") == "x")
        if removeAfter {
            try await second.unlink("P")
            #expect(try await second.names("") == [])
            faulty.stopFailing(.startUpload)
            await second.fs.sync()
            await #expect(throws: StorageError.self) { try await second.storedRecord("P") }
            #expect(try await second.names("") == [])
        } else {
            faulty.stopFailing(.startUpload)
            await second.fs.sync()
            #expect(try await second.stored("P") == "x")
            #expect(try await second.names("") == ["P"])
        }
        await #expect(throws: StorageError.self) { try await second.storedRecord("tmp") }
    }

    @Test(
        "a file written again while its upload ran, then a crash: after the restart it shows the newer content, and removed, nothing of it stays or lands — whether the first upload had landed (the journal's second upload knew what it stored) or not (the next mount drops it)",
        .timeLimit(.minutes(1)), arguments: [true, false])
    func crashWithTwoUploadsOfOneFile(firstLanded: Bool) async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: base)
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-crash-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let first = try await Harness.make(store: faulty, cacheDirectory: dir)
            try await first.write("P", "old")
            await first.fs.sync()
            if firstLanded {
                // The next upload starts and takes its time; every later one is refused.
                faulty.setLatency(.milliseconds(500), for: .startUpload)
                faulty.failAfter(1, of: .startUpload)
            } else {
                // The first upload starts and does not finish before the crash.
                faulty.setLatency(.seconds(30), for: .startUpload)
            }
            let calls = faulty.calls(of: .startUpload)
            try await first.write("P", "v1")
            while faulty.calls(of: .startUpload) == calls { try await Task.sleep(for: .milliseconds(5)) }
            // Written again while the first upload runs: a second upload of P, owed after it.
            try await first.write("P", "v2")
            if firstLanded {
                while (try? await first.stored("P")) != "v1" { try await Task.sleep(for: .milliseconds(5)) }
            }
            await first.close(keepCache: true)
        } catch {
            Issue.record("\(error)")
        }
        faulty.setLatency(.zero, for: .startUpload)
        faulty.failAfter(0, of: .startUpload)
        let second = try await Harness.make(store: faulty, cacheDirectory: dir)
        defer { Task { await second.close() } }
        #expect(try await second.text("P") == "v2")
        try await second.unlink("P")
        faulty.stopFailing(.startUpload)
        await second.fs.sync()
        await #expect(throws: StorageError.self) { try await second.storedRecord("P") }
        #expect(try await second.names("") == [])
        #expect(await second.fs.status().queue.files == 0)
    }

    @Test("a cache folder spelled another way at the next mount (a trailing slash): the owed copies are still the uploads' own, not spares", .timeLimit(.minutes(1)))
    func cacheFolderSpelledAnotherWay() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: base)
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-spelled-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let large = String(repeating: "large file line\n", count: 10_000)
        do {
            let first = try await Harness.make(store: faulty, cacheDirectory: dir)
            faulty.isOffline = true
            try await first.write("small.txt", "owed bytes")
            try await first.write("large.txt", large)
            await first.close(keepCache: true)
        } catch {
            Issue.record("\(error)")
        }
        faulty.isOffline = false
        // The same folder, another spelling: the journal names the copies as `dir/files/…`.
        let second = try await Harness.make(store: base, cacheDirectory: dir + "/")
        defer { Task { await second.close() } }
        await second.fs.sync()
        #expect(try await second.stored("small.txt") == "owed bytes")
        #expect(try await second.stored("large.txt") == large)
    }

    @Test("a small file's bytes kept in its journal record survive a crash that took its never-fsynced local copy", .timeLimit(.minutes(1)))
    func contentFromJournal() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: base)
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-crash-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let small = (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let large = (0..<(Int(UploadJournal.contentLimit) + 10)).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        do {
            let first = try await Harness.make(store: faulty, cacheDirectory: dir)
            faulty.isOffline = true
            try await first.write("small.bin", small)
            try await first.write("large.bin", large)
            // A file flushed twice while open: the second flush's bytes are what is owed.
            let (entry, opened) = try first.fs.create(parent: .root, name: "open.bin", mode: 0o644, caller: .root)
            _ = try first.fs.write(entry.ino, handle: opened.handle, offset: 0, bytes: Array("first".utf8))
            try await first.fs.flush(entry.ino, handle: opened.handle)
            _ = try first.fs.write(entry.ino, handle: opened.handle, offset: 5, bytes: Array(" and second".utf8))
            try await first.fs.flush(entry.ino, handle: opened.handle)
            await first.close(keepCache: true)
        } catch {
            Issue.record("\(error)")
        }
        // The power cut: local copies never fsynced come back empty (the large one was fsynced).
        let files = dir + "/files"
        var emptied = 0
        for name in try FileManager.default.contentsOfDirectory(atPath: files) {
            let path = files + "/" + name
            // (Empty files there are the pool's spares.)
            let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? 0
            if size > 0 && size <= Int(UploadJournal.contentLimit) {
                #expect(truncate(path, 0) == 0)
                emptied += 1
            }
        }
        #expect(emptied == 2)
        faulty.isOffline = false
        let second = try await Harness.make(store: base, cacheDirectory: dir)
        defer { Task { await second.close() } }
        #expect(try await second.read("small.bin") == small)
        await second.fs.sync()
        #expect(try await second.storedBytes("small.bin") == small)
        #expect(try await second.storedBytes("large.bin") == large)
        #expect(try await second.stored("open.bin") == "first and second")
    }

    @Test("a crash while a streamed file's complete is on its way: the next mount completes that upload, never the file's older held content", .timeLimit(.minutes(1)))
    func crashDuringStreamComplete() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: base)
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-crash-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let bytes = (0..<(200 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 29 &+ 1) }
        let first = try await Harness.make(store: faulty, cacheDirectory: dir) { c in
            c.streamThreshold = 64 << 10
            c.streamChunkSize = 16 << 10
        }
        let (entry, opened) = try first.fs.create(parent: .root, name: "big.bin", mode: 0o644, caller: .root)
        // An early close of another descriptor (as `dd` does): a held record with the first 10 KiB.
        _ = try first.fs.write(entry.ino, handle: opened.handle, offset: 0, bytes: Array(bytes[..<(10 << 10)]))
        try await first.fs.flush(entry.ino, handle: opened.handle)
        for start in stride(from: 10 << 10, to: bytes.count, by: 10 << 10) {
            _ = try first.fs.write(entry.ino, handle: opened.handle, offset: Int64(start), bytes: Array(bytes[start..<min(bytes.count, start + (10 << 10))]))
        }
        // The stream is under way (under load its start can come after the writes; a close before
        // it started sends the file the usual way, and there is no stream to test).
        for _ in 0..<2000 where faulty.calls(of: .send) == 0 { try await Task.sleep(for: .milliseconds(10)) }
        try #require(faulty.calls(of: .send) > 0, "the file did not start streaming within 20 s")
        // The last close: the stream's complete hangs on its way, and the machine stops meanwhile.
        faulty.setLatency(.seconds(3600), for: .completeUpload)
        let closing = Task { try? await first.fs.flush(entry.ino, handle: opened.handle) }
        var attached = false
        for _ in 0..<500 where !attached {
            attached = await first.fs.status().queue.items.contains { $0.size == Int64(bytes.count) }
            if !attached { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(attached, "the held record was rewritten to stand for the stream's upload")
        await first.close(keepCache: true)
        closing.cancel()
        // The next mount: the record completes the streamed upload (its bytes are all on the server).
        let second = try await Harness.make(store: base, cacheDirectory: dir)
        defer { Task { await second.close() } }
        await second.fs.sync()
        #expect(try await second.storedBytes("big.bin") == bytes)
        #expect(await second.fs.status().queue.files == 0)
        #expect(faulty.calls(of: .send) > 0, "the file streamed")
    }

    @Test("a large upload interrupted by a crash resumes from the server's offset, not from zero")
    func resumeFromOffset() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: base)
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-resume-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let content = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 * 7) }
        do {
            let first = try await Harness.make(store: faulty, cacheDirectory: dir) { $0.uploadChunkSize = 50_000 }
            // Two chunks of four arrive; then the connection is gone, and the mount dies.
            faulty.failAfter(2, of: .send)
            try await first.write("big.bin", content)
            while faulty.calls(of: .send) < 3 { try await Task.sleep(for: .milliseconds(10)) }
            await first.close(keepCache: true)
        }
        faulty.stopFailing(.send)
        let sentBefore = faulty.calls(of: .send)
        let second = try await Harness.make(store: faulty, cacheDirectory: dir) { $0.uploadChunkSize = 50_000 }
        defer { Task { await second.close() } }
        await second.fs.sync()
        let url = try await base.signedURLs(ns, [try StoragePath("big.bin")], expiry: 60)[0].signedUrl
        #expect(Array(try await base.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView) == content)
        let resends = faulty.calls(of: .send) - sentBefore
        #expect(resends == 2, "resumed with \(resends) chunk(s); the last 2 of 4 were missing")
        #expect(faulty.calls(of: .uploadedBytes) >= 1)
    }

    @Test(
        "a journal row damaged (a size no file has, a value of another type, counts and times at the end of Int64) mounts: no trap, the file shows its content and lands",
        .timeLimit(.minutes(1)),
        arguments: [
            "size = -1", "size = 'many'", "params = X'FF', content_type = X'FF'", "replaces_ino = 'x', replaces_if_match = X'FF'",
            "created = 9223372036854775807", "attempts = 9223372036854775807",
        ])
    func damagedJournalRow(_ damage: String) async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: base)
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-damaged-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let first = try await Harness.make(store: faulty, cacheDirectory: dir)
            faulty.isOffline = true
            try await first.write("a.txt", "alpha")
            await first.close(keepCache: true)
        }
        // The row is in the close log still: a journal opened once puts it into SQLite, where it is damaged.
        _ = try UploadJournal(path: dir + "/journal.sqlite")
        let changed = try await DatabaseQueue(path: dir + "/journal.sqlite").write { db in
            try db.execute(sql: "UPDATE uploads SET " + damage)
            return db.changesCount
        }
        try #require(changed == 1)
        faulty.isOffline = false
        // The first attempt is refused, so that the count of attempts goes on from the row's.
        faulty.failNext(1, of: .startUpload, with: StorageError(.conflict, "injected", status: 409))
        let second = try await Harness.make(store: faulty, cacheDirectory: dir)
        defer { Task { await second.close() } }
        #expect(try await second.text("a.txt") == "alpha")
        if await !second.fs.sync().isEmpty {
            _ = try await second.fs.retryFailed(paths: [])
            #expect(await second.fs.sync().isEmpty)
        }
        #expect(try await second.stored("a.txt") == "alpha")
    }
}
