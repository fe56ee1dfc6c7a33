import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Synchronization
import Testing
@testable import StowFS

/// Starts `rename` with the server's answer held (the server has renamed; the engine waits for
/// the answer) and returns once the request has reached the server, or fails the test: without
/// it, a test of what happens meanwhile would test nothing.
private func renameHeld(
    _ store: FaultInjectingObjectStore, _ rename: @escaping @Sendable () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation
) async throws -> Task<Void, any Error> {
    store.holdNextAnswer(of: .rename)
    let task = Task { try await rename() }
    var waited = 0
    while store.heldAnswers == 0, waited < 5_000 {
        try await Task.sleep(for: .milliseconds(1))
        waited += 1
    }
    try #require(store.heldAnswers == 1, "the rename never reached the server", sourceLocation: sourceLocation)
    return task
}

/// Large files stream from 64 KiB on, in chunks of 16 KiB; listings trusted for two minutes (a
/// loaded machine must not let them expire while an answer is held).
private func streamingAt64KiB(_ c: inout MountConfiguration) {
    c.attributeTTL = .seconds(120)
    c.streamThreshold = 64 << 10
    c.streamChunkSize = 16 << 10
}

/// A store holding two folders, `d1/f` ("one") and `d2/f` ("two").
private func twoFolders() async throws -> InMemoryObjectStore {
    let base = InMemoryObjectStore(namespaces: [ns])
    _ = try await base.upload(.bytes(ByteBuffer(string: "one")), size: 3, to: ns, try StoragePath("d1/f"))
    _ = try await base.upload(.bytes(ByteBuffer(string: "two")), size: 3, to: ns, try StoragePath("d2/f"))
    return base
}

/// A store holding two files, `a` ("A0") and `b` ("B0").
private func twoFiles() async throws -> InMemoryObjectStore {
    let base = InMemoryObjectStore(namespaces: [ns])
    _ = try await base.upload(.bytes(ByteBuffer(string: "A0")), size: 2, to: ns, try StoragePath("a"))
    _ = try await base.upload(.bytes(ByteBuffer(string: "B0")), size: 2, to: ns, try StoragePath("b"))
    return base
}

/// `echo -n text > file`: opened with O_TRUNC, written, closed.
private func writeAndClose(_ fs: StowFileSystem, _ ino: InodeNumber, _ text: String) async throws {
    let handle = try await fs.open(ino, write: true, truncate: true).handle
    _ = try fs.write(ino, handle: handle, offset: 0, bytes: Array(text.utf8))
    try fs.flushHere(ino, handle: handle)
    await fs.release(ino, handle: handle)
}

/// Runs `body` once, in the moment after the next move changed the names here (before it looks
/// for the records it carries); the answer says whether it ran.
private final class OnceAfterMove: Sendable {
    private let ran = Mutex(false)
    init(_ fs: StowFileSystem, _ body: @escaping @Sendable () async -> Void) {
        fs.afterMovedHere.withLock {
            $0 = { @Sendable [self] in
                guard self.claim() else { return }
                await body()
            }
        }
    }
    private func claim() -> Bool { ran.withLock { r in defer { r = true }; return !r } }
    var didRun: Bool { ran.withLock { $0 } }
}

/// `bytes` written from the start by appends of 10 KiB, as `cp` writes.
private func appendInPieces(_ fs: StowFileSystem, _ ino: InodeNumber, _ handle: UInt64, _ bytes: [UInt8]) throws {
    for start in stride(from: 0, to: bytes.count, by: 10 << 10) {
        _ = try fs.write(ino, handle: handle, offset: Int64(start), bytes: Array(bytes[start..<min(bytes.count, start + (10 << 10))]))
    }
}

/// A copy of a file still open for writing (`stowfs sync`), a close beside it, then a crash.
@Suite("engine: copies of a file still open, and the closes around them")
struct OpenSnapshotTests {
    /// Written "v0" and flushed (a close of one of two descriptors: a held record), then "v1", then
    /// copied as `stowfs sync` does. `race`: "v2" written and flushed between the copy and its record
    /// (nothing lands, the server away); else the sync ends with "v1" stored. Then the mount stops
    /// without its last close (a crash), and the next one sends what the journal holds.
    @Test("after a crash, the next mount sends the last close's content, never older than what sync stored", arguments: [false, true])
    func closeAroundSnapshot(race: Bool) async throws {
        let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-open-snapshot-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let first = try await Harness.make(store: faulty, cacheDirectory: dir)
            let fs = first.fs
            faulty.isOffline = race
            let (entry, opened) = try fs.create(parent: .root, name: "f", mode: 0o644, caller: .root)
            let (ino, h) = (entry.ino, opened.handle)
            _ = try fs.write(ino, handle: h, offset: 0, bytes: Array("v0".utf8))
            try fs.flushHere(ino, handle: h)
            _ = try fs.write(ino, handle: h, offset: 0, bytes: Array("v1".utf8))
            if race {
                let snap = Task { try await fs.submit(ino, onlyIfClosed: false) }
                while fs.state.withLock({ $0.inodes[ino]?.local?.dirty }) != false {}  // the copy is taken (a spin: a yield lets the record be written first)
                _ = try fs.write(ino, handle: h, offset: 0, bytes: Array("v2".utf8))
                try fs.flushHere(ino, handle: h)  // close(2) returned for "v2"
                _ = try await snap.value
            } else {
                await fs.sync()
                #expect(try await first.stored("f") == "v1")  // what sync promised
            }
            await first.close(keepCache: true)  // a crash before the last close
        }
        faulty.isOffline = false
        let second = try await Harness.make(store: faulty, cacheDirectory: dir)
        let local = try await second.text("f")
        await second.fs.sync()
        let stored = try await second.stored("f")
        await second.close()
        let want = race ? "v2" : "v1"
        #expect([local, stored] == [want, want])
    }

    /// `stowfs sync` (and an unmount, which syncs) while a release is under way: the release has
    /// taken the file's content (clean from then on) and not yet turned the close's held record
    /// into a queued one, and the wait passes held records over. Sync returned at once with the
    /// file not stored: `systemctl stop` of a mount's unit just after a file was written there
    /// unmounted with it still queued (CI's package test, once).
    @Test("a sync during a release waits for the file released")
    func syncDuringRelease() async throws {
        try await withEngine { h in
            let (_, stored) = try await syncDuringTake(h) { _ in }
            #expect(stored == "closed", "sync returned before the file released was stored")
        }
    }

    /// A release under way whose record cannot be written (here: its held record cancelled meanwhile,
    /// as a disk error would fail it) gives the content back: the file is dirty again, with a held
    /// record, which sync's wait passes over. The sync that waited for the release returned with
    /// nothing said and nothing sent (a review found it).
    @Test("a release given back during a sync: the sync sends the file, or says it could not")
    func syncDuringFailedRelease() async throws {
        try await withEngine { h in
            let (failures, stored) = try await syncDuringTake(h) { held in _ = await h.fs.queue.cancel(held) }
            #expect(stored == "closed" || !failures.isEmpty, "sync said all was stored, and the server has nothing")
        }
    }

    /// `f` written ("closed") and closed; in the moment its release has taken the content, before
    /// its record is written, `during` runs (given the close's held record) and a sync starts.
    /// Returns what the sync returned, and what the server had the moment it did.
    private func syncDuringTake(
        _ h: Harness, during: @escaping @Sendable (Int64) async -> Void
    ) async throws -> ([UploadQueue.Failure], String?) {
        let fs = h.fs
        let (entry, opened) = try fs.create(parent: .root, name: "f", mode: 0o644, caller: .root)
        _ = try fs.write(entry.ino, handle: opened.handle, offset: 0, bytes: Array("closed".utf8))
        try fs.flushHere(entry.ino, handle: opened.handle)
        let held = try #require(fs.state.withLock { $0.inodes[entry.ino]?.local?.heldUpload })
        let syncing = Mutex<Task<([UploadQueue.Failure], String?), Never>?>(nil)
        fs.afterTake.withLock {
            $0 = { @Sendable in
                guard syncing.withLock({ $0 == nil }) else { return }
                await during(held)
                let task = Task { () -> ([UploadQueue.Failure], String?) in
                    let failures = await fs.sync()
                    return (failures, try? await h.stored("f"))
                }
                syncing.withLock { $0 = task }
                // Long enough for a sync that waits for nothing to return.
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
        await fs.release(entry.ino, handle: opened.handle)
        let task = try #require(syncing.withLock { $0 }, "the release never took the content")
        return await task.value
    }

    /// A sync waits for a file's queued upload; the file is written and closed again before that
    /// upload starts (the queue busy: here paused), and the newer upload cancels the older. The
    /// sync's wait then held no record still owed and returned, the server holding neither
    /// content (a review found it). It waits for the newer one now.
    @Test("a sync waiting for an upload superseded by a newer close waits for the newer one")
    func syncAcrossSupersededUpload() async throws {
        try await withEngine { h in
            let fs = h.fs
            await fs.pauseUploads()
            try await h.write("f", "a")
            let returned = Mutex<String??>(nil)
            let syncing = Task {
                _ = await fs.sync()
                let stored = try? await h.stored("f")
                returned.withLock { $0 = .some(stored) }
            }
            // The sync is waiting for the upload of "a" (the queue paused: nothing goes).
            try await Task.sleep(for: .milliseconds(100))
            try await h.write("f", "b")
            try await Task.sleep(for: .milliseconds(100))
            #expect(returned.withLock { $0 } == nil, "the sync returned before anything was sent")
            await fs.resumeUploads()
            await syncing.value
            #expect(returned.withLock { $0 } == .some("b"))
        }
    }

    /// `stowfs unmount --no-wait` while a `stowfs sync` waits for a server that is away: the queue
    /// stops, and the sync must return (saying what is left), else the mount's process never ends.
    @Test("a sync waiting when the uploads stop returns, listing what is left", .timeLimit(.minutes(1)))
    func syncReturnsWhenQueueStops() async throws {
        let store = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
        try await withEngine(store: store) { h in
            store.isOffline = true
            try await h.write("f", "away")
            let returned = Mutex<[UploadQueue.Failure]?>(nil)
            let syncing = Task { returned.withLock { $0 = [] }; let f = await h.fs.sync(); returned.withLock { $0 = f } }
            try await Task.sleep(for: .milliseconds(200))
            await h.fs.stop()
            let deadline = ContinuousClock.now + .seconds(5)
            while returned.withLock({ $0?.isEmpty ?? true }), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            let failures = try #require(returned.withLock { $0 }, "the sync never began")
            #expect(failures.map(\.path).contains { $0.hasSuffix("/f") || $0 == "f" }, "the sync did not return, or did not list f: \(failures)")
            if failures.isEmpty { syncing.cancel() }
        }
    }

    /// A stored file open for writing is renamed; another descriptor's close comes while the server
    /// renames (its answer held). The close's content belongs to the new name.
    @Test("a close during the rename of its file: the content lands under the new name, the old one does not come back")
    func closeDuringRename() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        _ = try await base.upload(.bytes(ByteBuffer(string: "old")), size: 3, to: ns, try StoragePath("a"))
        let store = FaultInjectingObjectStore(wrapping: base)
        try await withEngine(store: store) { h in
            defer { store.releaseHeldAnswers() }
            let fs = h.fs
            let ino = try await h.resolve("a")
            let handle = try await fs.open(ino, write: true, truncate: true).handle
            _ = try fs.write(ino, handle: handle, offset: 0, bytes: Array("new".utf8))
            let mv = try await renameHeld(store) { try await fs.rename(parent: .root, name: "a", newParent: .root, newName: "b") }
            try fs.flushHere(ino, handle: handle)  // close(2) of another descriptor, while the server renames
            store.releaseHeldAnswers()
            try await mv.value
            await fs.release(ino, handle: handle)
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.stored("b") == "new")
            await #expect(throws: (any Error).self, "the old name came back") { _ = try await h.storedRecord("a") }
        }
    }

    /// A folder with a stored file open for writing is renamed; the file's last close comes while
    /// the server renames (its answer held), and its upload is queued under the old folder. It must
    /// wait for the rename and land under the new folder: sent at once, it made the old folder
    /// again on the server (folders are made on the way), with the new content, and left the
    /// moved file with the old.
    @Test("a last close under a folder being renamed: the upload lands under the new folder, the old folder does not come back")
    func closeDuringFolderRename() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        _ = try await base.upload(.bytes(ByteBuffer(string: "old")), size: 3, to: ns, try StoragePath("d/f"))
        let store = FaultInjectingObjectStore(wrapping: base)
        // The listing trusted throughout (a loaded machine must not let it expire while the rename is
        // held: the server no longer has the old folder); the rename's answer let go on any way out.
        try await withEngine(store: store, configure: { $0.attributeTTL = .seconds(120) }) { h in
            defer { store.releaseHeldAnswers() }
            let fs = h.fs
            let ino = try await h.resolve("d/f")
            let handle = try await fs.open(ino, write: true, truncate: true).handle
            _ = try fs.write(ino, handle: handle, offset: 0, bytes: Array("new".utf8))
            let mv = try await renameHeld(store) { try await fs.rename(parent: .root, name: "d", newParent: .root, newName: "e") }
            try fs.flushHere(ino, handle: handle)  // the last close(2), while the server renames
            await fs.release(ino, handle: handle)
            // Time for an upload that does not wait to land (it did, within milliseconds).
            try await Task.sleep(for: .milliseconds(300))
            store.releaseHeldAnswers()
            try await mv.value
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.stored("e/f") == "new")
            await #expect(throws: (any Error).self, "the old folder came back") { _ = try await h.storedRecord("d") }
        }
    }

    /// The same with a large file streamed to the server as it is written (S1): its last close
    /// while the server renames its folder must not complete the stream, which is bound to the
    /// old path (it made the old folder again there, and the moved folder kept no such file).
    @Test("a streamed file's last close under a folder being renamed: it lands under the new folder", .timeLimit(.minutes(1)))
    func streamDuringFolderRename() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        _ = try await base.upload(.bytes(ByteBuffer(string: "x")), size: 1, to: ns, try StoragePath("d/x"))
        let store = FaultInjectingObjectStore(wrapping: base)
        let bytes = (0..<(200 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        try await withEngine(store: store, configure: streamingAt64KiB) { h in
            defer { store.releaseHeldAnswers() }
            let fs = h.fs
            let dir = try await h.resolve("d")
            let (entry, opened) = try fs.create(parent: dir, name: "big.bin", mode: 0o644, caller: .root)
            try appendInPieces(fs, entry.ino, opened.handle, bytes)
            for _ in 0..<2000 where store.calls(of: .send) == 0 { try await Task.sleep(for: .milliseconds(10)) }
            try #require(store.calls(of: .send) > 0, "the file did not start streaming within 20 s")
            let mv = try await renameHeld(store) { try await fs.rename(parent: .root, name: "d", newParent: .root, newName: "e") }
            try await fs.flush(entry.ino, handle: opened.handle)  // the last close(2), while the server renames
            await fs.release(entry.ino, handle: opened.handle)
            try await Task.sleep(for: .milliseconds(300))
            store.releaseHeldAnswers()
            try await mv.value
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.storedBytes("e/big.bin") == bytes)
            await #expect(throws: (any Error).self, "the old folder came back") { _ = try await h.storedRecord("d") }
        }
    }

    /// Two stored files are exchanged (`renameat2(RENAME_EXCHANGE)`); one of them, open for
    /// writing, is closed while the server swaps them. Its content belongs to its new name: sent
    /// to the old one, it wrote over the other file there (whose content was then lost).
    @Test("a close during an exchange of two files: the content lands under the file's new name, the other file is kept")
    func closeDuringExchange() async throws {
        let base = try await twoFiles()
        let store = FaultInjectingObjectStore(wrapping: base)
        try await withEngine(store: store, configure: { $0.attributeTTL = .seconds(120) }) { h in
            defer { store.releaseHeldAnswers() }
            let fs = h.fs
            let ino = try await h.resolve("a")
            _ = try await h.resolve("b")
            let handle = try await fs.open(ino, write: true, truncate: true).handle
            _ = try fs.write(ino, handle: handle, offset: 0, bytes: Array("A1".utf8))
            let swap = try await renameHeld(store) { try await fs.rename(parent: .root, name: "a", newParent: .root, newName: "b", exchange: true) }
            // (The exchange sent "A1" before it asked the server.) Written and closed while the server swaps:
            _ = try fs.write(ino, handle: handle, offset: 0, bytes: Array("A2".utf8))
            try fs.flushHere(ino, handle: handle)
            let closing = Task { await fs.release(ino, handle: handle) }
            try await Task.sleep(for: .milliseconds(300))
            store.releaseHeldAnswers()
            try await swap.value
            await closing.value
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.stored("b") == "A2")
            #expect(try await h.stored("a") == "B0", "the other file was written over")
        }
    }

    /// The same with a file opened with O_TRUNC and written by appends past the stream threshold
    /// during the swap: its stream, bound to the old name, completed there on close, over the
    /// other file.
    @Test("a file streamed during an exchange: it lands under its new name, the other file is kept", .timeLimit(.minutes(1)))
    func streamDuringExchange() async throws {
        let base = try await twoFiles()
        let store = FaultInjectingObjectStore(wrapping: base)
        let bytes = (0..<(200 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) }
        try await withEngine(store: store, configure: streamingAt64KiB) { h in
            defer { store.releaseHeldAnswers() }
            let fs = h.fs
            let ino = try await h.resolve("a")
            _ = try await h.resolve("b")
            let swap = try await renameHeld(store) { try await fs.rename(parent: .root, name: "a", newParent: .root, newName: "b", exchange: true) }
            let handle = try await fs.open(ino, write: true, truncate: true).handle
            try appendInPieces(fs, ino, handle, bytes)
            try await Task.sleep(for: .milliseconds(300))  // time for a stream to start and send
            let closing = Task {
                try await fs.flush(ino, handle: handle)
                await fs.release(ino, handle: handle)
            }
            try await Task.sleep(for: .milliseconds(300))
            store.releaseHeldAnswers()
            try await swap.value
            try await closing.value
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.storedBytes("b") == bytes)
            #expect(try await h.stored("a") == "B0", "the other file was written over")
        }
    }

    /// Two folders are exchanged (`mv --exchange d1 d2`, an atomic swap of a deployment); a file
    /// in one of them, open for writing, is closed while the server swaps them. Its content
    /// belongs to the folder it moved with: sent to its old path, it wrote over the file of the
    /// same name in the other folder (whose content was then lost).
    @Test("a close during an exchange of two folders: the content lands in the moved folder, the other folder's file is kept")
    func closeDuringFolderExchange() async throws {
        let base = try await twoFolders()
        let store = FaultInjectingObjectStore(wrapping: base)
        try await withEngine(store: store, configure: { $0.attributeTTL = .seconds(120) }) { h in
            defer { store.releaseHeldAnswers() }
            let fs = h.fs
            let ino = try await h.resolve("d1/f")
            _ = try await h.resolve("d2/f")
            let handle = try await fs.open(ino, write: true, truncate: true).handle
            _ = try fs.write(ino, handle: handle, offset: 0, bytes: Array("new".utf8))
            let swap = try await renameHeld(store) { try await fs.rename(parent: .root, name: "d1", newParent: .root, newName: "d2", exchange: true) }
            // (The exchange sent "new" before it asked the server.) Written and closed while the server swaps:
            _ = try fs.write(ino, handle: handle, offset: 0, bytes: Array("newer".utf8))
            try fs.flushHere(ino, handle: handle)
            await fs.release(ino, handle: handle)
            try await Task.sleep(for: .milliseconds(300))
            store.releaseHeldAnswers()
            try await swap.value
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.stored("d2/f") == "newer")
            #expect(try await h.stored("d1/f") == "two", "the other folder's file was written over")
        }
    }

    /// A file closed in the moment after two folders were swapped here (before the swap's records
    /// moved): its record names its folder's new name, `d1/`, the name the other folder's records
    /// had before. Moved by its path with them, it went to `d2/f`, over the file that belongs there.
    @Test("a close just after a folder exchange changed the names here: it lands where its folder is now")
    func closeJustAfterFolderExchange() async throws {
        let base = try await twoFolders()
        try await withEngine(store: base, configure: { $0.attributeTTL = .seconds(120) }) { h in
            let fs = h.fs
            _ = try await h.resolve("d1/f")
            let second = try await h.resolve("d2/f")
            let handle = try await fs.open(second, write: true, truncate: true).handle
            let hook = OnceAfterMove(fs) {
                _ = try? fs.write(second, handle: handle, offset: 0, bytes: Array("late two".utf8))
                try? fs.flushHere(second, handle: handle)
                await fs.release(second, handle: handle)
            }
            try await fs.rename(parent: .root, name: "d1", newParent: .root, newName: "d2", exchange: true)
            #expect(hook.didRun, "the exchange never ran the hook")
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.stored("d1/f") == "late two")
            #expect(try await h.stored("d2/f") == "one", "the other folder's file was written over")
        }
    }

    /// A file closed while the server swapped its folder with another (its record names the old
    /// path), and released in the moment after the names changed here: the release reads the new
    /// path, and its upload goes there. Queued at the held record's old path, it came after the
    /// move's mark and was not moved: it wrote over the other folder's file.
    @Test("a release just after a folder exchange of a file closed during it: it lands in the moved folder")
    func releaseJustAfterFolderExchange() async throws {
        let base = try await twoFolders()
        _ = try await base.makeFolder(ns, try StoragePath("d3"), FolderRequest())
        let store = FaultInjectingObjectStore(wrapping: base)
        try await withEngine(store: store, configure: { $0.attributeTTL = .seconds(120) }) { h in
            defer { store.releaseHeldAnswers() }
            let fs = h.fs
            let ino = try await h.resolve("d1/f")
            _ = try await h.resolve("d2/f")
            let elsewhere = try await h.resolve("d3")
            let handle = try await fs.open(ino, write: true, truncate: true).handle
            _ = try fs.write(ino, handle: handle, offset: 0, bytes: Array("new".utf8))
            let hook = OnceAfterMove(fs) {
                // Another file queued after its held record first: the release then queues anew
                // (a new id, after the mark), not in the held record's place. (In another folder:
                // through the kernel, the exchange holds the lock of the folder it renames in.)
                if let (entry, opened) = try? fs.create(parent: elsewhere, name: "other", mode: 0o644, caller: .root) {
                    _ = try? fs.write(entry.ino, handle: opened.handle, offset: 0, bytes: Array("other".utf8))
                    try? fs.flushHere(entry.ino, handle: opened.handle)
                    await fs.release(entry.ino, handle: opened.handle)
                }
                await fs.release(ino, handle: handle)
            }
            let swap = try await renameHeld(store) { try await fs.rename(parent: .root, name: "d1", newParent: .root, newName: "d2", exchange: true) }
            // (The exchange sent "new" before it asked the server.) Closed while the server swaps:
            _ = try fs.write(ino, handle: handle, offset: 0, bytes: Array("newer".utf8))
            try fs.flushHere(ino, handle: handle)
            store.releaseHeldAnswers()
            try await swap.value
            #expect(hook.didRun, "the exchange never ran the hook")
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.stored("d2/f") == "newer")
            #expect(try await h.stored("d1/f") == "two", "the other folder's file was written over")
            #expect(try await h.stored("d3/other") == "other")
        }
    }

    /// The server swapped two files but its answer was lost (a replica killed after its commit):
    /// taken as a failure, the names here stayed unswapped, and each file's next upload went to
    /// the other's name on the server — over the other file.
    @Test("an exchange the server made whose answer was lost: the swap is found and stands, and later writes land where they belong")
    func exchangeAnswerLostInEngine() async throws {
        let base = try await twoFiles()
        let store = FaultInjectingObjectStore(wrapping: base)
        try await withEngine(store: store, configure: { $0.attributeTTL = .seconds(120) }) { h in
            let fs = h.fs
            let ino = try await h.resolve("a")
            _ = try await h.resolve("b")
            store.loseAnswers(1, of: .rename)
            try await fs.rename(parent: .root, name: "a", newParent: .root, newName: "b", exchange: true)
            #expect(try await h.resolve("b") == ino, "the names here were not swapped")
            // The file now named b, written and closed.
            try await writeAndClose(fs, ino, "A1")
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.stored("b") == "A1")
            #expect(try await h.stored("a") == "B0", "the other file was written over")
        }
    }

    /// An exchange that never reached the server, with no answer either (a store that is away):
    /// the mount asks whether it swapped for the time it allows, sees no swap, and takes it as not
    /// made — the names here unswapped, each file's later upload at its own name.
    @Test("an exchange with no answer that the server did not make: after the wait, an error, and nothing crosses over")
    func exchangeNotMadeInEngine() async throws {
        let base = try await twoFiles()
        let store = FaultInjectingObjectStore(wrapping: base)
        try await withEngine(store: store, configure: { $0.attributeTTL = .seconds(120); $0.renameOutcomeWait = .milliseconds(400) }) { h in
            let fs = h.fs
            let ino = try await h.resolve("a")
            _ = try await h.resolve("b")
            store.failNext(1, of: .rename)
            let started = ContinuousClock.now
            await #expect(throws: FSError.self) { try await fs.rename(parent: .root, name: "a", newParent: .root, newName: "b", exchange: true) }
            #expect(ContinuousClock.now - started >= .milliseconds(400), "it did not wait for the server to say")
            #expect(try await h.resolve("a") == ino, "the names here were swapped")
            try await writeAndClose(fs, ino, "A1")
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.stored("a") == "A1")
            #expect(try await h.stored("b") == "B0", "the other file was written over")
        }
    }

    /// A folder `d` made again, and a file written in it, in the moment after `mv d e` changed
    /// the names here: the new file's record names `d/` as those made before the rename did.
    /// Moved by its path with them, it landed in `e/`, and `d/` lost it. (Through the kernel, the
    /// parent's lock keeps the `mkdir` waiting until the rename returns; an exchange has no such
    /// shelter — after the swap, the old name is the other folder's at once — and the engine does
    /// not lean on it.)
    @Test("a file written in a new folder of a renamed folder's old name: it stays there")
    func newFolderAtRenamedName() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        _ = try await base.upload(.bytes(ByteBuffer(string: "old")), size: 3, to: ns, try StoragePath("d/f"))
        try await withEngine(store: base, configure: { $0.attributeTTL = .seconds(120) }) { h in
            let fs = h.fs
            _ = try await h.resolve("d/f")
            let hook = OnceAfterMove(fs) {
                guard let dir = try? await fs.mkdir(parent: .root, name: "d", mode: 0o755, caller: .root),
                    let (entry, opened) = try? fs.create(parent: dir.ino, name: "g", mode: 0o644, caller: .root)
                else { return }
                _ = try? fs.write(entry.ino, handle: opened.handle, offset: 0, bytes: Array("fresh".utf8))
                try? fs.flushHere(entry.ino, handle: opened.handle)
                await fs.release(entry.ino, handle: opened.handle)
            }
            try await fs.rename(parent: .root, name: "d", newParent: .root, newName: "e")
            #expect(hook.didRun, "the move never ran the hook")
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            #expect(try await h.stored("d/g") == "fresh")
            #expect(try await h.stored("e/f") == "old")
            await #expect(throws: (any Error).self, "the new folder's file landed in the moved one") { _ = try await h.storedRecord("e/g") }
        }
    }

    /// The same with an unlink of a file in the folder (`rm d/g`) while the server renames: the
    /// delete, queued under the old path, went to a name the server no longer had, and the file
    /// stayed in the moved folder.
    @Test("an unlink under a folder being renamed: the file is deleted from the moved folder")
    func unlinkDuringFolderRename() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        _ = try await base.upload(.bytes(ByteBuffer(string: "g")), size: 1, to: ns, try StoragePath("d/g"))
        let store = FaultInjectingObjectStore(wrapping: base)
        // The listing trusted throughout (a loaded machine must not let it expire while the rename is
        // held: the server no longer has the old folder); the rename's answer let go on any way out.
        try await withEngine(store: store, configure: { $0.attributeTTL = .seconds(120) }) { h in
            defer { store.releaseHeldAnswers() }
            let fs = h.fs
            let dir = try await h.resolve("d")
            _ = try await h.resolve("d/g")
            let mv = try await renameHeld(store) { try await fs.rename(parent: .root, name: "d", newParent: .root, newName: "e") }
            try await fs.unlink(parent: dir, name: "g")
            try await Task.sleep(for: .milliseconds(300))
            store.releaseHeldAnswers()
            try await mv.value
            let failures = await fs.sync()
            #expect(failures.isEmpty)
            await #expect(throws: (any Error).self, "the unlinked file is still in the moved folder") { _ = try await h.storedRecord("e/g") }
            await #expect(throws: (any Error).self, "the old folder came back") { _ = try await h.storedRecord("d") }
        }
    }
}
