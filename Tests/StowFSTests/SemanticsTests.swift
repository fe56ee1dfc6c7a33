import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import StowFS
import Testing

/// Claims of docs/SEMANTICS.md about where StowFS differs from a local disk.
@Suite("engine: documented differences from a local disk")
struct SemanticsTests {
    @Test("S18: two mounts writing one file — the upload that completes last wins")
    func lastWriterWins() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        let a = try await Harness.make(store: store)
        let b = try await Harness.make(store: store)
        defer { Task { await a.close(); await b.close() } }
        try await a.write("shared.txt", "from a")
        await a.fs.sync()
        try await b.write("shared.txt", "from b")
        await b.fs.sync()
        #expect(try await a.stored("shared.txt") == "from b")
    }

    @Test("S19: reading does not move atime")
    func noAtime() async throws {
        try await withEngine { h in
            try await h.write("r.txt", "read me")
            await h.fs.sync()
            let ino = try await h.resolve("r.txt")
            let before = try await h.fs.getattr(ino).atime
            _ = try await h.read("r.txt")
            #expect(try await h.fs.getattr(ino).atime == before)
        }
    }

    @Test("S20: a file deleted on the server while open reads what is cached, then fails with EIO")
    func deletedWhileOpen() async throws {
        let base = InMemoryObjectStore(namespaces: [ns])
        let content = [UInt8](repeating: 7, count: 40_000)
        _ = try await base.upload(.bytes(ByteBuffer(bytes: content)), size: 40_000, to: ns, try StoragePath("doomed.bin"))
        try await withEngine(store: base, configure: { $0.maxReadAheadBlocks = 1 }) { h in
            let ino = try await h.resolve("doomed.bin")
            let handle = try await h.fs.open(ino, write: false, truncate: false).handle
            let first = try await h.fs.read(ino, handle: handle, offset: 0, size: 4096)
            #expect(first.flatMap { $0.file.read(at: $0.offset, length: $0.length) } == Array(content[0..<4096]))
            try await base.delete(ns, try StoragePath("doomed.bin"), ifMatch: nil)
            // Cached: still there.
            let again = try await h.fs.read(ino, handle: handle, offset: 0, size: 4096)
            #expect(again.flatMap { $0.file.read(at: $0.offset, length: $0.length) } == Array(content[0..<4096]))
            // Not cached: gone.
            do {
                _ = try await h.fs.read(ino, handle: handle, offset: 36_000, size: 4000)
                Issue.record("an uncached range of a deleted file was read")
            } catch let e as FSError {
                guard case .io = e else { Issue.record("expected EIO, got \(e)"); return }
            }
            await h.fs.release(ino, handle: handle)
        }
    }

    @Test("S21: in a --all mount, a rename from one namespace to another is EXDEV")
    func crossNamespace() async throws {
        let other = try Namespace("other")
        let store = InMemoryObjectStore(namespaces: [ns, other])
        let h = try await Harness.make(store: store) { $0.scope = .all }
        defer { Task { await h.close() } }
        #expect(Set(try await h.names("")) == ["test", "other"])
        try await h.write("test/a.txt", "a")
        await expectFS(.crossDevice) { try await h.rename("test/a.txt", "other/a.txt") }
        try await h.mkdir("newns")
        #expect(try await store.namespaces().map(\.name).contains("newns"))
        await expectFS(.notPermitted) { try await h.write("loose.txt", "no namespace") }
    }
}
