import Foundation
import StorageClient
import StorageProtocol
import StowFS
import Testing

/// `O_CREAT|O_EXCL` takes the name on the server when it is called (`createExclusive`).
@Suite("exclusive create")
struct ExclusiveCreateTests {
    @Test("of two mounts creating one name with O_EXCL, one succeeds and the other gets EEXIST; the winner's bytes arrive")
    func oneWinner() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let a = try await Harness.make(store: store)
        let b = try await Harness.make(store: store)
        defer {
            Task {
                await a.close()
                await b.close()
            }
        }
        // B has looked the name up before: its negative entry must not hide A's file.
        await #expect(throws: FSError.notFound) { _ = try await b.fs.lookup(parent: .root, name: "lock") }

        let (entry, opened) = try await a.fs.createExclusive(parent: .root, name: "lock", mode: 0o600, caller: .root)
        // On the server at once, empty, before any write or close.
        let made = try await store.record(ns, try StoragePath("lock"))
        #expect(made.size == 0)
        #expect(made.mode == 0o600)

        await #expect(throws: FSError.exists) { _ = try await b.fs.createExclusive(parent: .root, name: "lock", mode: 0o600, caller: .root) }
        // And B now finds it.
        #expect(try await b.fs.lookup(parent: .root, name: "lock").attributes.size == 0)

        _ = try a.fs.write(entry.ino, handle: opened.handle, offset: 0, bytes: Array("pid 42\n".utf8))
        try await a.fs.flush(entry.ino, handle: opened.handle)
        await a.fs.release(entry.ino, handle: opened.handle)
        #expect(await a.fs.sync().isEmpty)
        #expect(try await store.record(ns, try StoragePath("lock")).size == 7)

        // A second exclusive create through A itself fails too (the kernel asks only when it
        // has no entry; the engine checks the server).
        await #expect(throws: FSError.exists) { _ = try await a.fs.createExclusive(parent: .root, name: "lock", mode: 0o600, caller: .root) }
    }

    @Test("an exclusive create over a name this mount holds unsent, or over a folder, is EEXIST")
    func localAndFolder() async throws {
        let h = try await Harness.make()
        defer { Task { await h.close() } }
        let ino = try h.fs.create(parent: .root, name: "draft", mode: 0o644, caller: .root)
        await h.fs.release(ino.0.ino, handle: ino.1.handle)
        await #expect(throws: FSError.exists) { _ = try await h.fs.createExclusive(parent: .root, name: "draft", mode: 0o644, caller: .root) }
        _ = try await h.fs.mkdir(parent: .root, name: "dir", mode: 0o755, caller: .root)
        await #expect(throws: FSError.exists) { _ = try await h.fs.createExclusive(parent: .root, name: "dir", mode: 0o644, caller: .root) }
    }

    @Test("an exclusive create whose answer was lost finds the file it made and succeeds; one that finds another's file is EEXIST")
    func answerLost() async throws {
        let memory = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: memory)
        let h = try await Harness.make(store: faulty)
        defer { Task { await h.close() } }
        // Every answer of complete lost (its retries too): the create looks for what it made.
        faulty.loseAnswers(10, of: .completeUpload)
        let (entry, opened) = try await h.fs.createExclusive(parent: .root, name: "mine", mode: 0o644, caller: .root)
        #expect(faulty.calls(of: .record) >= 1)
        await h.fs.release(entry.ino, handle: opened.handle)
        #expect(try await memory.record(ns, try StoragePath("mine")).size == 0)

        // Another client made `theirs`; this create's answer is lost before it got there: the
        // record it finds is not its own.
        _ = try await memory.uploadDirect(ns, StartUploadRequest(fileName: "theirs", size: 0), from: .bytes(.init()))
        faulty.failNext(1, of: .startUpload)
        await #expect(throws: FSError.exists) { _ = try await h.fs.createExclusive(parent: .root, name: "theirs", mode: 0o644, caller: .root) }
    }

    @Test("with the server away, an exclusive create is made here (as any create), and goes to the server when it is back")
    func serverAway() async throws {
        let memory = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: memory)
        let h = try await Harness.make(store: faulty)
        defer { Task { await h.close() } }
        faulty.isOffline = true
        let before = FaultInjectingObjectStore.Operation.allCases.reduce(0) { $0 + faulty.calls(of: $1) }
        let (entry, opened) = try await h.fs.createExclusive(parent: .root, name: "offline", mode: 0o644, caller: .root)
        _ = try h.fs.write(entry.ino, handle: opened.handle, offset: 0, bytes: Array("queued".utf8))
        try await h.fs.flush(entry.ino, handle: opened.handle)
        await h.fs.release(entry.ino, handle: opened.handle)
        // The next ones do not wait for the server again: they do not ask it (a bound on the time
        // taken, as before, could fail on a loaded machine and tell nothing on a quiet one).
        let asked = FaultInjectingObjectStore.Operation.allCases.reduce(0) { $0 + faulty.calls(of: $1) }
        #expect(asked > before, "the first create asked the server (and so the count below would see a second one ask)")
        let second = try await h.fs.createExclusive(parent: .root, name: "offline2", mode: 0o644, caller: .root)
        #expect(FaultInjectingObjectStore.Operation.allCases.reduce(0) { $0 + faulty.calls(of: $1) } == asked)
        await h.fs.release(second.0.ino, handle: second.1.handle)
        faulty.isOffline = false
        #expect(await h.fs.sync().isEmpty)
        #expect(try await memory.record(ns, try StoragePath("offline")).size == 6)
    }
}

/// A rename of a stored file whose new content is still owed: the upload must not land at the new
/// name before the server has renamed, or the rename replaces the new content with the old.
@Suite("rename with an upload owed")
struct RenameOwedTests {
    @Test("the new content of a stored file, renamed while its upload is queued, is what the server has under the new name (a slow rename)")
    func slowServerRename() async throws {
        let memory = InMemoryObjectStore(namespaces: [ns])
        let faulty = FaultInjectingObjectStore(wrapping: memory)
        let h = try await Harness.make(store: faulty)
        defer { Task { await h.close() } }
        try await h.write("f", "old\n")
        #expect(await h.fs.sync().isEmpty)
        // The rename's request takes a while: the queue has all the time to send the upload.
        faulty.setLatency(.milliseconds(400), for: .rename)
        try await h.write("f", "new content\n")
        try await h.fs.rename(parent: .root, name: "f", newParent: .root, newName: "g")
        #expect(await h.fs.sync().isEmpty)
        let url = try await memory.signedURLs(ns, [try StoragePath("g")], expiry: 60)[0].signedUrl
        let stored = try await memory.read(url: url, range: nil, ifMatch: nil)
        #expect(String(buffer: stored.bytes) == "new content\n")
        await #expect(throws: StorageError.self) { _ = try await memory.record(ns, try StoragePath("f")) }
    }
}
