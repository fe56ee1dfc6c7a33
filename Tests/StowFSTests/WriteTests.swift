import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import StowFS
import Testing

@Suite("engine: writes, uploads, sync")
struct WriteTests {
    @Test("a new file is local until its upload, readable at once, stored after sync")
    func createWriteSync() async throws {
        try await withEngine { h in
            try await h.write("a.txt", "hello")
            #expect(try await h.text("a.txt") == "hello")
            await h.fs.sync()
            #expect(try await h.stored("a.txt") == "hello")
            let r = try await h.storedRecord("a.txt")
            #expect(r.mode == 0o644)
            #expect(r.contentType == "text/plain")
            #expect(try await h.xattr("a.txt", "user.stow.status") == "stored")
        }
    }

    @Test("an uploaded local copy becomes the block cache's copy of the version stored (a small one copied into the pack, its copy used again; a large one moved), and each file keeps its own content")
    func copiesAdopted() async throws {
        try await withEngine { h in
            let files = h.cacheDirectory + "/files", blocks = h.cacheDirectory + "/blocks"
            var bytes = 0
            for i in 0..<20 {
                let text = String(repeating: "file \(i) ", count: 20 - i)
                try await h.write("f\(i)", text)
                bytes += text.utf8.count
                await h.fs.sync()
            }
            // What stays in `files` are empty spares for the next files (the pool makes them ahead).
            let left = try FileManager.default.contentsOfDirectory(atPath: files)
            #expect(try left.allSatisfy { try FileManager.default.attributesOfItem(atPath: files + "/" + $0)[.size] as? Int == 0 }, "no local copy is left once stored")
            // Adopted once the upload's answer is handled, which may come just after `sync` returns.
            let adopted = ContinuousClock.now + .seconds(10)
            while await h.fs.status().cache.bytes < Int64(bytes), ContinuousClock.now < adopted { try await Task.sleep(for: .milliseconds(10)) }
            #expect(try FileManager.default.contentsOfDirectory(atPath: blocks) == [".pack"], "small stored copies share the pack")
            #expect(await h.fs.status().cache.bytes == Int64(bytes), "each stored copy is a version in the block cache")
            let large = String(repeating: "x", count: Int(BlockCache.packedUpTo) + 1)
            try await h.write("large", large)
            await h.fs.sync()
            // Adopted once the upload's answer is handled, which may come just after `sync` returns.
            let deadline = ContinuousClock.now + .seconds(10)
            while try FileManager.default.contentsOfDirectory(atPath: blocks).count < 2, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: blocks).count == 2, "a larger copy is moved into a file of its own")
            #expect(try await h.text("large") == large)
            let misses = await h.fs.status().cache.misses
            for i in 0..<20 {
                let expected = String(repeating: "file \(i) ", count: 20 - i)
                #expect(try await h.stored("f\(i)") == expected)
                #expect(try await h.text("f\(i)") == expected)
            }
            #expect(await h.fs.status().cache.misses == misses, "read back from the adopted copies, not from the server")
        }
    }

    @Test("appending to a stored file brings its content here first")
    func append() async throws {
        try await withEngine { h in
            _ = try await h.store.upload(.bytes(ByteBuffer(string: "first\n")), size: 6, to: ns, try StoragePath("log.txt"))
            try await h.append("log.txt", "second\n")
            #expect(try await h.text("log.txt") == "first\nsecond\n")
            await h.fs.sync()
            #expect(try await h.stored("log.txt") == "first\nsecond\n")
        }
    }

    @Test("overwriting keeps one upload per close, the newest content wins")
    func overwrite() async throws {
        try await withEngine { h in
            for i in 0..<5 { try await h.write("v.txt", "version \(i)") }
            await h.fs.sync()
            #expect(try await h.stored("v.txt") == "version 4")
            #expect(try await h.text("v.txt") == "version 4")
        }
    }

    @Test("fsync returns once the server has the file, even while it stays open")
    func fsyncWhileOpen() async throws {
        try await withEngine { h in
            let (entry, opened) = try h.fs.create(parent: .root, name: "open.bin", mode: 0o600, caller: .root)
            _ = try h.fs.write(entry.ino, handle: opened.handle, offset: 0, bytes: Array("part one".utf8))
            try await h.fs.fsync(entry.ino, handle: opened.handle)
            #expect(try await h.stored("open.bin") == "part one")
            _ = try h.fs.write(entry.ino, handle: opened.handle, offset: 8, bytes: Array(", part two".utf8))
            try await h.fs.flush(entry.ino, handle: opened.handle)
            await h.fs.release(entry.ino, handle: opened.handle)
            await h.fs.sync()
            #expect(try await h.stored("open.bin") == "part one, part two")
        }
    }

    @Test("a sync between close's flush and its release leaves no record waiting for a release that came already")
    func syncBetweenFlushAndRelease() async throws {
        try await withEngine { h in
            let (entry, opened) = try h.fs.create(parent: .root, name: "f.bin", mode: 0o600, caller: .root)
            _ = try h.fs.write(entry.ino, handle: opened.handle, offset: 0, bytes: Array("closed".utf8))
            try await h.fs.flush(entry.ino, handle: opened.handle)  // close(2) returns here
            await h.fs.sync()  // `stowfs sync` before the kernel's release arrives
            await h.fs.release(entry.ino, handle: opened.handle)
            await h.fs.sync()
            #expect(try await h.stored("f.bin") == "closed")
            let queue = await h.fs.status().queue
            #expect(queue.files == 0, "left in the queue: \(queue.items.map { "\($0.path) \($0.state)" })")
        }
    }

    @Test("truncate: a stored file is cut on the server; a local one locally")
    func truncate() async throws {
        try await withEngine { h in
            try await h.write("t.txt", "0123456789")
            await h.fs.sync()
            let ino = try await h.resolve("t.txt")
            _ = try await h.fs.setattr(ino, AttributeChanges(size: 4), handle: nil)
            #expect(try await h.text("t.txt") == "0123")
            await h.fs.sync()
            #expect(try await h.stored("t.txt") == "0123")
            try await h.write("u.txt", "abcdef")
            let u = try await h.resolve("u.txt")
            _ = try await h.fs.setattr(u, AttributeChanges(size: 2), handle: nil)
            await h.fs.sync()
            #expect(try await h.stored("u.txt") == "ab")
            // Beyond the largest file: EFBIG, and nothing changes.
            await expectFS(.fileTooLarge) { _ = try await h.fs.setattr(u, AttributeChanges(size: 999_999_999_999_999_999), handle: nil) }
            #expect(try await h.text("u.txt") == "ab")
        }
    }

    @Test("chmod, chown and utimens of a file still owed travel with its upload")
    func attributesWithUpload() async throws {
        try await withEngine { h in
            try await h.write("m.txt", "x")
            let ino = try await h.resolve("m.txt")
            let when = TimeSpec(nanoseconds: 1_600_000_000_123_456_789)
            _ = try await h.fs.setattr(ino, AttributeChanges(mode: 0o600, uid: 1000, gid: 1000, mtime: .set(when)), handle: nil)
            await h.fs.sync()
            let r = try await h.storedRecord("m.txt")
            #expect(r.mode == 0o600)
            #expect(r.uid == 1000)
            #expect(r.mtimeNs == when.nanoseconds)
            // And on a stored file, straight to the server.
            _ = try await h.fs.setattr(ino, AttributeChanges(mode: 0o640), handle: nil)
            #expect(try await h.storedRecord("m.txt").mode == 0o640)
        }
    }

    @Test("an empty file made with touch is stored empty")
    func emptyFile() async throws {
        try await withEngine { h in
            let (entry, opened) = try h.fs.create(parent: .root, name: "empty", mode: 0o644, caller: .root)
            try await h.fs.flush(entry.ino, handle: opened.handle)
            await h.fs.release(entry.ino, handle: opened.handle)
            await h.fs.sync()
            #expect(try await h.storedRecord("empty").size == 0)
        }
    }
}

@Suite("engine: owners and modes of files that carry none")
struct DefaultsTests {
    @Test("a file stored without owner or mode shows --uid, --gid and the --umask'd default mode")
    func defaults() async throws {
        let store = InMemoryObjectStore(namespaces: [ns])
        _ = try await store.upload(.bytes(ByteBuffer(string: "x")), size: 1, to: ns, try StoragePath("plain/file"))
        try await withEngine(store: store, configure: {
            $0.defaultUID = 1234
            $0.defaultGID = 99
            $0.umask = 0o027
        }) { h in
            let file = try await h.fs.getattr(try await h.resolve("plain/file"))
            #expect(file.uid == 1234 && file.gid == 99)
            #expect(file.mode == 0o640)
            let dir = try await h.fs.getattr(try await h.resolve("plain"))
            #expect(dir.mode == 0o750)
            // A file made through the mount keeps what it was given.
            try await h.write("mine", [1], mode: 0o600)
            await h.fs.sync()
            #expect(try await h.storedRecord("mine").mode == 0o600)
        }
    }
}
