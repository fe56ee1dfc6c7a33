import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Synchronization
import Testing
@testable import StowFS

/// A flag set once, waited for with a deadline.
private final class Flag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
    /// Waits until set, or fails the test after 20 s.
    func wait(_ what: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while !isSet {
            guard ContinuousClock.now < deadline else {
                Issue.record("\(what) did not happen within 20 s", sourceLocation: sourceLocation)
                throw CancellationError()
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}

/// Never returns: where a crash stopped the mount, for the task that reaches it.
private func hangForever() async {
    await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
}

private func notOnServer(_ store: any ObjectStore, _ path: String) async -> Bool {
    do {
        _ = try await store.record(ns, try StoragePath(path))
        return false
    } catch {
        return (error as? StorageError)?.kind == .notFound
    }
}

/// Waits, up to `within`, until the moves the last mount left are settled in `h` (`each` runs
/// at each look meanwhile); fails the test if they are not.
private func waitForMovesSettled(_ h: Harness, within: Duration, each: () async -> Void = {}) async throws {
    let deadline = ContinuousClock.now + within
    while h.fs.movesLeft.withLock({ !$0.isEmpty }), ContinuousClock.now < deadline {
        await each()
        try await Task.sleep(for: .milliseconds(50))
    }
    try #require(h.fs.movesLeft.withLock { $0.isEmpty }, "the moves left are still asked about")
}

/// After `A` → `B` and `A/x` → `A/y` at once (A/x stored as "old"): `B/y` holds it, and nothing
/// is left at the old names.
private func expectRenamedInMoved(_ h: Harness, _ store: any ObjectStore) async throws {
    _ = try await h.resolve("B/y")
    await h.fs.sync()
    #expect(try await h.stored("B/y") == "old")
    #expect(await notOnServer(store, "B/x"))
    #expect(await notOnServer(store, "A"))
    await h.close()
}

/// Waits until `condition` holds; fails the test after 10 s.
private func waitUntil(_ what: String, sourceLocation: SourceLocation = #_sourceLocation, _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("\(what) did not happen within 10 s", sourceLocation: sourceLocation)
            throw CancellationError()
        }
        try await Task.sleep(for: .milliseconds(2))
    }
}

private func cacheFolder() -> String {
    FileManager.default.temporaryDirectory.path + "/stowfs-move-crash-\(UUID().uuidString.prefix(8))"
}

/// A mount over `store` with `A/x` stored as "old".
private func mountWithStoredA(_ store: any ObjectStore, _ dir: String) async throws -> Harness {
    let first = try await Harness.make(store: store, cacheDirectory: dir)
    try await first.mkdir("A")
    try await first.write("A/x", "old")
    await first.fs.sync()
    return first
}

/// A mount over `store` with `A/x` stored as "a" and `B/x` as "b".
private func mountWithTwoFolders(_ store: any ObjectStore, _ dir: String) async throws -> Harness {
    let first = try await Harness.make(store: store, cacheDirectory: dir)
    try await first.mkdir("A")
    try await first.mkdir("B")
    try await first.write("A/x", "a")
    try await first.write("B/x", "b")
    await first.fs.sync()
    return first
}

/// `A` and `B` exchanged; in the moment after the server's swap, `A/x` closed as "a2" (owed at
/// the old path, now the other side's), and the mount crashed there.
private func crashAfterServerSwap(_ store: any ObjectStore, _ dir: String) async throws {
    let crashed = Flag()
    let first = try await mountWithTwoFolders(store, dir)
    first.fs.afterServerMove.withLock {
        $0 = { @Sendable in
            try? await first.write("A/x", "a2")
            crashed.set()
            await hangForever()
        }
    }
    Task { try? await first.rename("A", "B", exchange: true) }
    try await crashed.wait("the server's swap")
    await first.close(keepCache: true)
}

/// `A` renamed to `B`; in the moment after the server's rename, `A/x` closed as "new" (owed at
/// the old path), and the mount crashed there.
private func crashAfterServerRename(_ store: any ObjectStore, _ dir: String) async throws {
    let crashed = Flag()
    let first = try await mountWithStoredA(store, dir)
    first.fs.afterServerMove.withLock {
        $0 = { @Sendable in
            try? await first.write("A/x", "new")
            crashed.set()
            await hangForever()
        }
    }
    Task { try? await first.rename("A", "B") }
    try await crashed.wait("the server's rename")
    await first.close(keepCache: true)
}

/// A crash in the middle of a folder's move or an exchange: after the server did it, before the
/// records it carries followed here. The mount that comes next asks the server where the moved
/// inode is (`StowFileSystem.settleMoves`). Each crash is a task that never goes on from a test
/// hook; the next mount opens the same cache folder, as `DurabilityTests` do.
@Suite("engine: a crash in the middle of a folder's move or an exchange")
struct MoveCrashTests {
    @Test("a folder renamed, a crash after the server's rename: what was owed under it lands under the new name, and the old folder does not come back")
    func renameThenCrash() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try await crashAfterServerRename(store, dir)
        let second = try await Harness.make(store: store, cacheDirectory: dir)
        await second.fs.sync()
        #expect(try await second.stored("B/x") == "new")
        #expect(await notOnServer(store, "A"))
        #expect(try await second.names("") == ["B"])
        #expect(await second.fs.status().queue.files == 0)
        #expect(try second.fs.queue.journal.moves().isEmpty)
        await second.close()
    }

    /// The crash after the names changed here, with a folder made since at the old name and a
    /// file written in it: that file stays where it was written; what the move carries goes.
    /// `name`: the file written in the folder made again; "x" is the name the move carries too
    /// (two records of one path at the next start, one for each folder).
    @Test("a folder renamed, the old name made again and written in, then a crash: each file lands in its own folder", arguments: ["y", "x"])
    func renameMarkedThenCrash(name: String) async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let crashed = Flag()
        do {
            let first = try await mountWithStoredA(store, dir)
            first.fs.afterServerMove.withLock { $0 = { @Sendable in try? await first.write("A/x", "new") } }
            first.fs.afterMovedHere.withLock {
                $0 = { @Sendable in
                    do {
                        try await first.mkdir("A")
                        try await first.write("A/\(name)", "fresh")
                    } catch {
                        Issue.record("A made again: \(error)")
                    }
                    crashed.set()
                    await hangForever()
                }
            }
            Task { try? await first.rename("A", "B") }
            try await crashed.wait("the names changed here")
            await first.close(keepCache: true)
        }
        let second = try await Harness.make(store: store, cacheDirectory: dir)
        await second.fs.sync()
        #expect(try await second.stored("B/x") == "new")
        #expect(try await second.stored("A/\(name)") == "fresh")
        if name != "x" {
            #expect(await notOnServer(store, "B/\(name)"))
            #expect(await notOnServer(store, "A/x"))
        }
        #expect(try await second.names("A") == [name])
        #expect(try await second.names("B") == ["x"])
        await second.close()
    }

    /// Moves one mount journaled and the server did, one after the other, each left unfinished
    /// (a mount does its folder moves one at a time, so this needs a crash of a mount older than
    /// that, or rows put there by hand, as here): `moves` as (from, to), done on the server in
    /// that order; then `A/sub/x` owed, as the first move left it. `expect`: where it lands.
    @Test(
        "folder moves left unfinished one inside another, done by the server in turn: what was owed follows them all, in their order",
        arguments: [
            ([("A/sub", "A/D"), ("A", "E")], "E/D/x"),  // nested: the inner one first
            ([("A", "B"), ("B/sub", "C"), ("B", "D")], "C/x"),  // chained: moved on, and out, later
            ([("A", "B"), ("B", "C")], "C/sub/x"),
        ])
    func movesLeftInTurn(moves: [(String, String)], expect: String) async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let first = try await Harness.make(store: store, cacheDirectory: dir)
            try await first.mkdir("A")
            try await first.mkdir("A/sub")
            try await first.write("A/sub/x", "old")
            await first.fs.sync()
            await first.fs.pauseUploads()
            try await first.write("A/sub/x", "new")
            for (from, to) in moves {
                let inode = try await store.record(ns, try StoragePath(from)).inode
                _ = try first.fs.queue.journal.beginMove(
                    from: Location(namespace: ns, path: try StoragePath(from)), to: Location(namespace: ns, path: try StoragePath(to)),
                    exchange: false, inode: inode)
                _ = try await store.rename(ns, from: try StoragePath(from), to: try StoragePath(to), replace: false, exchange: false)
            }
            await first.close(keepCache: true)
        }
        let second = try await Harness.make(store: store, cacheDirectory: dir)
        await second.fs.sync()
        #expect(try await second.stored(expect) == "new")
        #expect(await notOnServer(store, "A"))
        #expect(try second.fs.queue.journal.moves().isEmpty)
        #expect(await second.fs.status().queue.files == 0)
        await second.close()
    }

    /// A release under way when the names changed: it took the content (and read the old path)
    /// before, and writes its record after, with a larger id than the move's mark. The move carries
    /// it (`UploadJournal.Move.carries`, by the last id given when the content was taken).
    @Test("a folder renamed while a file's release was under way, then a crash: the release's record follows the move")
    func renameOverReleaseThenCrash() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let crashed = Flag(), taken = Flag(), go = Flag(), written = Flag()
        do {
            let first = try await mountWithStoredA(store, dir)
            let fs = first.fs
            // Nothing is sent from here on, so that a record after x's keeps x's from staying in place at release.
            await fs.pauseUploads()
            let x = try await first.resolve("A/x")
            let h = try await fs.open(x, write: true, truncate: true).handle
            _ = try fs.write(x, handle: h, offset: 0, bytes: Array("new".utf8))
            try await fs.flush(x, handle: h)
            try await first.write("z", "after x")
            let once = Mutex(false)
            fs.afterTake.withLock {
                $0 = { @Sendable in
                    guard once.withLock({ r in defer { r = true }; return !r }) else { return }
                    taken.set()
                    try? await go.wait("the move's mark")
                }
            }
            fs.afterMovedHere.withLock {
                $0 = { @Sendable in
                    crashed.set()
                    await hangForever()
                }
            }
            Task {
                await fs.release(x, handle: h)
                written.set()
            }
            try await taken.wait("the release's take")
            Task { try? await first.rename("A", "B") }
            // The names changed here, with the release's take watched by the move.
            let deadline = ContinuousClock.now + .seconds(20)
            while fs.state.withLock({ $0.watchedTakes.isEmpty }), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
            #expect(!fs.state.withLock { $0.watchedTakes.isEmpty })
            go.set()
            try await written.wait("the release's record")
            try await crashed.wait("the move's records looked for")
            let marked = try fs.queue.journal.moves()
            #expect(marked.count == 1 && marked.first?.mark != nil)
            // The record the release wrote came after the mark: only its content's age says it goes.
            let after = try fs.queue.journal.all().filter { $0.location.path.string == "A/x" }
            #expect(after.count == 1 && after.allSatisfy { $0.id > marked.first?.mark ?? .max })
            await first.close(keepCache: true)
        }
        let second = try await Harness.make(store: store, cacheDirectory: dir)
        await second.fs.sync()
        #expect(try await second.stored("B/x") == "new")
        #expect(try await second.stored("z") == "after x")
        #expect(await notOnServer(store, "A"))
        await second.close()
    }

    @Test("two folders exchanged, a crash after the server's swap: what was owed on one side lands on that side, not over the other's file")
    func exchangeThenCrash() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try await crashAfterServerSwap(store, dir)
        let second = try await Harness.make(store: store, cacheDirectory: dir)
        await second.fs.sync()
        #expect(try await second.stored("B/x") == "a2")
        #expect(try await second.stored("A/x") == "b")
        #expect(try await second.text("A/x") == "b")
        await second.close()
    }

    /// The crash came after the move was journaled and before the server did it (or the server
    /// refused it): the records stay at the paths they name, and the move is forgotten.
    @Test("a crash after a folder's move was journaled and before the server did it: what was owed lands at the old name")
    func journaledNotDoneThenCrash() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let first = try await mountWithStoredA(store, dir)
            await first.fs.pauseUploads()
            try await first.write("A/x", "new")
            let inode = try await first.storedRecord("A").inode
            _ = try first.fs.queue.journal.beginMove(
                from: Location(namespace: ns, path: try StoragePath("A")), to: Location(namespace: ns, path: try StoragePath("B")),
                exchange: false, inode: inode)
            await first.close(keepCache: true)
        }
        let second = try await Harness.make(store: store, cacheDirectory: dir)
        #expect(try second.fs.queue.journal.moves().isEmpty)
        await second.fs.sync()
        #expect(try await second.stored("A/x") == "new")
        #expect(await notOnServer(store, "B"))
        await second.close()
    }

    /// After the mark, a file closed on the other side, at the name it has now: it stays there.
    @Test("two folders exchanged, a file closed on each side, one before the names changed here and one after, then a crash: each lands on its own side")
    func exchangeMarkedThenCrash() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let crashed = Flag()
        do {
            let first = try await mountWithTwoFolders(store, dir)
            first.fs.afterServerMove.withLock { $0 = { @Sendable in try? await first.write("A/x", "a2") } }
            first.fs.afterMovedHere.withLock {
                $0 = { @Sendable in
                    // The folder named A now is B's: its x is "b" until this.
                    try? await first.write("A/x", "b2")
                    crashed.set()
                    await hangForever()
                }
            }
            Task { try? await first.rename("A", "B", exchange: true) }
            try await crashed.wait("the names changed here")
            await first.close(keepCache: true)
        }
        let second = try await Harness.make(store: store, cacheDirectory: dir)
        await second.fs.sync()
        #expect(try await second.stored("B/x") == "a2")
        #expect(try await second.stored("A/x") == "b2")
        await second.close()
    }

    /// A move that went its whole way, or that the server refused, leaves nothing in the journal
    /// (left there, a later mount would ask about it again).
    @Test("folder renames and exchanges, done and refused, leave no move in the journal")
    func movesLeaveTheJournal() async throws {
        let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        let h = try await Harness.make(store: faulty)
        try await h.mkdir("A")
        try await h.mkdir("B")
        try await h.write("A/x", "a")
        try await h.write("B/x", "b")
        try await h.rename("A", "C")
        try await h.rename("C", "B", exchange: true)
        try await h.write("f", "1")
        try await h.write("g", "2")
        try await h.rename("f", "g", exchange: true)
        #expect(try h.fs.queue.journal.moves().isEmpty)
        faulty.failNext(1, of: .rename, with: StorageError(.conflict, "refused by a test", status: 409))
        await #expect(throws: (any Error).self) { try await h.rename("B", "D") }
        #expect(try h.fs.queue.journal.moves().isEmpty)
        await h.fs.sync()
        #expect(try await h.stored("C/x") == "b")
        #expect(try await h.stored("B/x") == "a")
        #expect(try await h.stored("f") == "2")
        await h.close()
    }

    /// The server renamed a folder and its answer was lost after the client's last retry. Taken
    /// as a failure, the names here stayed, the journaled move was forgotten, and a file written
    /// in the folder went to its old path: the folder came back on the server beside the moved
    /// one. Asked, the server says it renamed: the rename stands.
    @Test("a folder's rename the server made whose answer was lost: asked, the rename stands, and a later write lands in the moved folder")
    func renameAnswerLost() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: store)
        let h = try await Harness.make(store: faulty) { $0.renameOutcomeWait = .seconds(3) }
        try await h.mkdir("A")
        try await h.write("A/x", "old")
        await h.fs.sync()
        faulty.loseAnswers(1, of: .rename)
        try await h.rename("A", "B")
        #expect(try h.fs.queue.journal.moves().isEmpty)
        try await h.write("B/x", "new")
        try await h.write("f", "1")
        await h.fs.sync()
        #expect(try await h.stored("B/x") == "new")
        #expect(await notOnServer(store, "A"))
        // A file's rename too: its owed content follows it.
        try await h.write("f", "2")
        faulty.loseAnswers(1, of: .rename)
        try await h.rename("f", "g")
        await h.fs.sync()
        #expect(try await h.stored("g") == "2")
        #expect(await notOnServer(store, "f"))
        // No answer, and the server's rename still under way when first asked (a balancer gave up
        // on it): not done yet is not an answer.
        faulty.failNext(1, of: .rename, with: StorageError(.unavailable, "away", status: 503))
        let late = Task {
            try await Task.sleep(for: .milliseconds(500))
            _ = try await store.rename(ns, from: try StoragePath("B"), to: try StoragePath("D"), replace: false, exchange: false)
        }
        try await h.rename("B", "D")
        try await late.value
        try await h.write("D/x", "later")
        await h.fs.sync()
        #expect(try await h.stored("D/x") == "later")
        #expect(await notOnServer(store, "B"))
        // A rename the server did not make, with no answer either, still fails, once asked for
        // `renameOutcomeWait`.
        faulty.failNext(1, of: .rename, with: StorageError(.unavailable, "away", status: 503))
        let started = ContinuousClock.now
        await #expect(throws: (any Error).self) { try await h.rename("D", "C") }
        #expect(ContinuousClock.now - started >= .seconds(3), "it did not wait for the server to say")
        #expect(try await h.stored("D/x") == "later")
        // A server that cannot be reached at all is not asked on for those 3 s (a review: an
        // offline `mv` waited 30 s).
        faulty.isOffline = true
        let offline = ContinuousClock.now
        await #expect(throws: (any Error).self) { try await h.rename("D", "E") }
        #expect(ContinuousClock.now - offline < .seconds(3), "it asked an unreachable server on")
        faulty.isOffline = false
        #expect(try await h.stored("D/x") == "later")
        await h.close()
    }

    /// A file renamed inside a folder whose own rename the server has just done: sent outside
    /// the move's turn with its old paths, the file's rename found nothing there on the server
    /// (404) and failed. It now waits for the folder's move and renames at the new paths.
    @Test("a file renamed inside a folder while the folder's rename is under way: it waits for that rename and lands in the moved folder")
    func fileRenameDuringFolderMove() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: store)
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let h = try await mountWithStoredA(faulty, dir)
        // The server renames the folder; its answer waits.
        faulty.holdNextAnswer(of: .rename)
        let folder = Task { try await h.rename("A", "B") }
        let deadline = ContinuousClock.now + .seconds(10)
        while faulty.heldAnswers == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        try #require(faulty.heldAnswers == 1, "the folder's rename never reached the server")
        let fileDone = Flag()
        let file = Task {
            defer { fileDone.set() }
            try await h.rename("A/x", "A/y")
        }
        try await Task.sleep(for: .milliseconds(200))
        // Waiting for the folder's move (without the fix it failed at once, 404).
        #expect(!fileDone.isSet, "the file's rename did not wait for the folder's")
        faulty.releaseHeldAnswers()
        try await folder.value
        try await file.value
        try await expectRenamedInMoved(h, store)
    }

    /// The other order: a file's rename under way (held here before it reaches the server), then
    /// the folder's rename. The folder's move waits for it; gone ahead, its server rename came
    /// first and the file's found nothing at its old path.
    @Test("a folder renamed while a file's rename inside it is under way: the folder's waits, and both land")
    func folderMoveWaitsForFileRename() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let h = try await mountWithStoredA(store, dir)
        let x = try await h.resolve("A/x")
        // The file's own lock, held: its rename waits there, after it is taken as under way.
        let held = Flag(), open = Flag()
        let holder = Task {
            try? await h.fs.inodeLocks.withLock(x) {
                held.set()
                try? await open.wait("the test's go")
            }
        }
        try await held.wait("the lock taken")
        let file = Task { try await h.rename("A/x", "A/y") }
        // Taken as under way (then waiting for the lock held above).
        try await waitUntil("the file's rename under way") { h.fs.state.withLock { !$0.fileRenames.isEmpty } }
        let folderDone = Flag()
        let folder = Task {
            defer { folderDone.set() }
            try await h.rename("A", "B")
        }
        try await waitUntil("the folder's move begun") { h.fs.state.withLock { !$0.moving.isEmpty } }
        try await Task.sleep(for: .milliseconds(100))
        #expect(!folderDone.isSet, "the folder's move did not wait for the file's rename")
        open.set()
        await holder.value
        try await file.value
        try await folder.value
        try await expectRenamedInMoved(h, store)
    }

    /// The next mount cannot ask the server at first: what the move could carry waits, and goes
    /// once the server answers.
    @Test("a crash after a folder's rename, and a server that does not answer the next mount's question at first: the owed file waits, then lands under the new name")
    func renameThenCrashUnanswered() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try await crashAfterServerRename(store, dir)
        let faulty = FaultInjectingObjectStore(wrapping: store)
        // The start's question and the first one asked again fail.
        faulty.failNext(2, of: .record)
        let second = try await Harness.make(store: faulty, cacheDirectory: dir) { $0.movesLeftRetry = .milliseconds(300) }
        #expect(second.fs.movesLeft.withLock { $0.count } == 1)
        // Marked at the start with the last mount's last id: records made here are not the move's.
        #expect(try await second.fs.queue.journal.db.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM moves WHERE mark IS NOT NULL") } == 1)
        // Held meanwhile: nothing lands at the old path.
        try await waitForMovesSettled(second, within: .seconds(20)) { #expect(await notOnServer(store, "A")) }
        await second.fs.sync()
        #expect(try await second.stored("B/x") == "new")
        #expect(await notOnServer(store, "A"))
        await second.close()
    }

    /// An exchange left unmarked by a crash, a next mount the server does not answer at first,
    /// and a file written meanwhile on one side: it is this mount's, not the move's, and stays.
    @Test("two folders exchanged, a crash after the server's swap, the next mount's question unanswered at first and a file written meanwhile: each lands on its own side")
    func exchangeThenCrashUnanswered() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try await crashAfterServerSwap(store, dir)
        let faulty = FaultInjectingObjectStore(wrapping: store)
        // The start's question fails; the next is asked after the write below.
        faulty.failNext(1, of: .record)
        let second = try await Harness.make(store: faulty, cacheDirectory: dir) { $0.movesLeftRetry = .seconds(1) }
        #expect(second.fs.movesLeft.withLock { $0.count } == 1)
        // The server swapped: the folder named A holds what was B's.
        try await second.write("A/x", "b2")
        #expect(second.fs.movesLeft.withLock { $0.count } == 1)
        try await waitForMovesSettled(second, within: .seconds(20))
        await second.fs.sync()
        #expect(try await second.stored("B/x") == "a2")
        #expect(try await second.stored("A/x") == "b2")
        await second.close()
    }

    /// The server answers the question with a refusal that will not pass: the move's new path
    /// runs through a file now (another client removed the folder and put a file in its place),
    /// 409. Taken as no answer, the move was asked about forever, holding its records and every
    /// `sync` (a review).
    @Test("a crash after a folder's move whose new path runs through a file by the next start: the move is settled as not done, not asked about forever")
    func moveOntoWhatBecameAFile() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let dir = cacheFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let crashed = Flag()
        do {
            let first = try await Harness.make(store: store, cacheDirectory: dir)
            try await first.mkdir("A")
            try await first.mkdir("A/C")
            try await first.mkdir("B")
            try await first.write("A/C/x", "old")
            await first.fs.sync()
            first.fs.afterServerMove.withLock {
                $0 = { @Sendable in
                    try? await first.write("A/C/x", "new")
                    crashed.set()
                    await hangForever()
                }
            }
            Task { try? await first.rename("A/C", "B/C") }
            try await crashed.wait("the server's rename")
            await first.close(keepCache: true)
        }
        // Another client: B goes, and a file takes its name.
        try await store.delete(ns, try StoragePath("B/C/x"), ifMatch: nil)
        try await store.removeFolder(ns, try StoragePath("B/C"))
        try await store.removeFolder(ns, try StoragePath("B"))
        _ = try await store.upload(.bytes(ByteBuffer(string: "a file")), size: 6, to: ns, try StoragePath("B"))
        let second = try await Harness.make(store: store, cacheDirectory: dir) { $0.movesLeftRetry = .milliseconds(100) }
        // Else the sync below would wait for ever (what the move holds never goes).
        try await waitForMovesSettled(second, within: .seconds(5))
        #expect(try second.fs.queue.journal.moves().isEmpty)
        await second.fs.sync()
        // Not moved (the folder is at neither path): it goes where its record names it.
        #expect(try await second.stored("A/C/x") == "new")
        #expect(try await second.stored("B") == "a file")
        await second.close()
    }
}
