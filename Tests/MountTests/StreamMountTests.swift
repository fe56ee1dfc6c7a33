import CStowSystem
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Large files written from empty by appends go to the server while they are written; their last
/// close waits for the server instead of the disk (docs/SEMANTICS.md S1).
@Suite("mount: large files stream to the server while they are written", .serialized)
struct StreamMountTests {
    static let size = 48 << 20

    @Test("cp of a 48 MiB file: the server has it when close returns (no sync, nothing queued), byte for byte, and no local copy is left")
    func streamed() async throws {
        try await withMount { m in
            try m.sh("head -c \(Self.size) /dev/urandom > big.bin && chmod 640 big.bin")
            try m.sh("cp big.bin \(m.mountpoint)/big.bin && chmod 600 \(m.mountpoint)/big.bin")
            // No sync: close(2) returned once the server had every byte; the queue stored nothing.
            #expect(try await m.storedSHA256("big.bin") == (try m.sh("sha256sum big.bin | cut -d' ' -f1")))
            let status = try m.stowfs(["status", m.mountpoint])
            #expect(status.contains("queue:   empty"), "\(status)")
            #expect(status.contains("stored:  0 file(s)"), "the queue sent it, not a stream: \(status)")
            try m.stowfs(["sync", m.mountpoint])
            // The copy went once the file was closed: nothing of 48 MiB is left in the cache folder.
            let cached = try m.sh("du -sk \(m.cacheDirectory) | cut -f1")
            #expect((Int(cached) ?? .max) < 40 << 10, "\(cached) KiB in the cache folder")
            // Attributes changed after close travel as usual; a remount with an empty cache reads it all back.
            try m.unmountFS()
            try FileManager.default.removeItem(atPath: m.cacheDirectory)
            try m.mountFS()
            try m.sh("cmp big.bin \(m.mountpoint)/big.bin")
            #expect(try m.sh("stat -c %a \(m.mountpoint)/big.bin") == "600")
        }
    }

    @Test("a write that is not an append (here, at offset 0 before close) stops the stream: the file goes the usual way, intact")
    func notAnAppend() async throws {
        try await withMount { m in
            let path = m.mountpoint + "/patched.bin"
            var expected = [UInt8](repeating: 0, count: Self.size)
            for i in expected.indices { expected[i] = UInt8(truncatingIfNeeded: i &* 31 &+ i >> 13) }
            var fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0o644)
            #expect(fd >= 0)
            // Closed once: a second close(2) of the number would close whatever this process
            // opened under it since (a socket of NIO's, which then crashed the test process).
            defer { if fd >= 0 { close(fd) } }
            try Self.writeAll(fd, expected[...])
            // Past the stream's threshold: it streams. Now a write behind what was sent.
            let patch: [UInt8] = Array("patched".utf8)
            #expect(patch.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } == patch.count)
            expected.replaceSubrange(0..<patch.count, with: patch)
            #expect(close(fd) == 0)
            fd = -1
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedBytes("patched.bin") == expected)
            let status = try m.stowfs(["status", m.mountpoint])
            #expect(status.contains("stored:  1 file(s)"), "it went through the queue: \(status)")
        }
    }

    @Test("a server that stops while a file streams: close makes it durable here instead, and it arrives once the server is back")
    func serverStops() async throws {
        try await withMount { m in
            let path = m.mountpoint + "/outage.bin"
            let half = [UInt8]((0..<(Self.size / 2)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0o644)
            #expect(fd >= 0)
            try Self.writeAll(fd, half[...])
            m.stopServer()
            try Self.writeAll(fd, half[...])
            #expect(close(fd) == 0)
            // Readable here at once, whole.
            #expect(FileManager.default.contents(atPath: path) == Data(half + half))
            let status = try m.stowfs(["status", m.mountpoint])
            #expect(status.contains("queue:   1 file(s)"), "\(status)")
            try m.startServer()
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedBytes("outage.bin") == half + half)
        }
    }

    @Test("attributes changed while a file streams (chmod, an xattr) arrive with its complete; a rename before close sends it under the new name only")
    func attributesAndRename() async throws {
        try await withMount { m in
            let bytes = [UInt8]((0..<Self.size).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) })
            // The writer is `dd` (no child processes: a child's close of an inherited descriptor
            // would be a close of the file), fed through a pipe; the changes come from here meanwhile.
            let path = m.mountpoint + "/tagged.bin"
            try await Self.writeWithDD(path, bytes) {
                #expect(chmod(path, 0o600) == 0)
                #expect(Array("blue".utf8).withUnsafeBytes { CStowSystem.setxattr(path, "user.color", $0.baseAddress, $0.count, 0) } == 0)
            }
            // No sync: the complete carried them.
            try await m.withClient { c in
                let r = try await c.record(m.namespace, try .init("tagged.bin"))
                #expect(r.size == Int64(Self.size))
                #expect(r.mode.map { $0 & 0o7777 } == 0o600)
                #expect(r.metadata["color"] == "blue")
            }
            // Renamed while it is written: the stream stops, the file goes the usual way, under its new name.
            let first = m.mountpoint + "/first.bin"
            try await Self.writeWithDD(first, bytes) {
                #expect(rename(first, m.mountpoint + "/second.bin") == 0)
            }
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedBytes("second.bin") == bytes)
            await #expect(throws: (any Error).self) { _ = try await m.storedSHA256("first.bin") }
        }
    }

    @Test("a child process closing its inherited descriptor is a close: the server gets the file as it is then, and the rest goes the usual way")
    func inheritedDescriptor() async throws {
        try await withMount { m in
            try m.sh("head -c \(Self.size) /dev/urandom > log.src")
            // Two children write through the shell's descriptor; the first one's exit closes its copy.
            try m.sh("exec 3>\(m.mountpoint)/log.bin; dd if=log.src bs=1M count=24 >&3 2>/dev/null; dd if=log.src bs=1M skip=24 >&3 2>/dev/null; exec 3>&-")
            try m.stowfs(["sync", m.mountpoint])
            try m.sh("cmp log.src \(m.mountpoint)/log.bin")
            #expect(try await m.storedSHA256("log.bin") == (try m.sh("sha256sum log.src | cut -d' ' -f1")))
            // The stream completed at the first child's exit (24 MiB); the rest went through the queue.
            let status = try m.stowfs(["status", m.mountpoint])
            #expect(status.contains("stored:  1 file(s)"), "\(status)")
        }
    }

    /// `dd of=path`, fed `bytes` through a pipe: half, then (once the mount has it) `meanwhile`, then the rest.
    static func writeWithDD(_ path: String, _ bytes: [UInt8], meanwhile: () throws -> Void) async throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/dd")
        p.arguments = ["of=" + path, "bs=1M", "iflag=fullblock", "status=none"]
        let pipe = Pipe()
        p.standardInput = pipe
        try p.run()
        let half = bytes.count / 2
        pipe.fileHandleForWriting.write(Data(bytes[..<half]))
        var st = stat()
        for _ in 0..<500 where !(stat(path, &st) == 0 && st.st_size >= half) { try await Task.sleep(for: .milliseconds(10)) }
        try meanwhile()
        pipe.fileHandleForWriting.write(Data(bytes[half...]))
        try pipe.fileHandleForWriting.close()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
    }

    static func writeAll(_ fd: Int32, _ bytes: ArraySlice<UInt8>) throws {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, min(1 << 20, $0.count - done)) }
            guard n > 0 else { throw POSIXError(.EIO) }
            done += n
        }
    }
}
