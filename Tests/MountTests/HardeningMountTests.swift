import Foundation
import StorageClient
import StorageProtocol
import Testing

/// Large extending truncates. The server's data and the mount's cache sit on small filesystems of
/// their own (1 GiB loop devices), so a regression that writes the zeros out fails on a full disk
/// instead of filling the machine's.
@Suite("mount: truncate to a terabyte", .serialized)
struct HardeningMountTests {
    static func run(_ tool: String, _ arguments: [String]) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = arguments
        try p.run()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw MountedFS.Failure("\(tool) \(arguments.joined(separator: " ")) failed") }
    }

    /// A mount whose server data and cache folders are 1 GiB filesystems of their own.
    func withSmallDisks(_ body: (MountedFS) async throws -> Void) async throws {
        let m = MountedFS()
        var mounted: [String] = []
        defer {
            m.cleanup()
            for dir in mounted { _ = try? Self.run("/usr/bin/umount", ["-l", dir]) }
            try? FileManager.default.removeItem(atPath: m.root)
        }
        for dir in [m.dataDirectory, m.cacheDirectory] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try Self.run("/usr/bin/truncate", ["-s", "1G", dir + ".img"])
            try Self.run("/usr/sbin/mkfs.ext4", ["-q", dir + ".img"])
            try Self.run("/usr/bin/mount", ["-o", "loop", dir + ".img", dir])
            mounted.append(dir)
        }
        do {
            try m.startServer()
            try m.mountFS()
            try await body(m)
        } catch {
            let log = m.logText
            if !log.isEmpty { Issue.record("stowfs log:\n\(log)") }
            throw error
        }
    }

    /// Bytes a folder's files really take (their blocks), by `du`.
    static func used(_ m: MountedFS, _ path: String) throws -> Int64 {
        Int64(try m.sh("du -sB1 '\(path)' | cut -f1")) ?? -1
    }

    @Test("truncate -s 1T of a stored file: a sparse local copy, only its data sent, a hole on the server; size and bytes read back right")
    func terabyteTruncate() async throws {
        try await withSmallDisks { m in
            let f = m.mountpoint + "/big"
            try m.sh("printf 'head' > \(f)")
            try m.stowfs(["sync", m.mountpoint])
            try m.sh("timeout 60 truncate -s 1T \(f)")
            #expect(try m.sh("stat -c %s \(f)") == "1099511627776")
            let sync = try m.run("/usr/bin/timeout", ["120", MountedFS.binDirectory + "/stowfs", "sync", m.mountpoint])
            #expect(sync.status == 0, "\(sync.out)")
            let record = try await m.withClient { c in try await c.record(m.namespace, try StoragePath("big")) }
            #expect(record.size == 1 << 40)
            #expect(try Self.used(m, m.dataDirectory) < 64 << 20, "the server wrote the zeros")
            #expect(try Self.used(m, m.cacheDirectory) < 64 << 20, "the cache wrote the zeros")
            #expect(try m.sh("head -c 4 \(f)") == "head")
            #expect(try m.sh("tail -c 8192 \(f) | od -v -An -tx1 | tr -d ' \\n' | tr -d 0 | wc -c") == "0")
            // Through the server too, after a remount with an empty cache.
            try m.unmountFS()
            try m.sh("rm -rf \(m.cacheDirectory)/*")
            try m.mountFS()
            #expect(try m.sh("stat -c %s \(f)") == "1099511627776")
            #expect(try m.sh("head -c 4 \(f) && tail -c 4 \(f) | od -An -tx1 | tr -d ' \\n'") == "head00000000")
            try m.sh("rm \(f)")
        }
    }

    @Test("truncate -s 1G of a new file: sent as 4 KiB and a declared tail of zeros")
    func sparseNewFile() async throws {
        try await withSmallDisks { m in
            let f = m.mountpoint + "/sparse"
            try m.sh("printf 'x' > \(f) && truncate -s 1G \(f)")
            try m.stowfs(["sync", m.mountpoint])
            let record = try await m.withClient { c in try await c.record(m.namespace, try StoragePath("sparse")) }
            #expect(record.size == 1 << 30)
            #expect(record.sha256 == nil)  // a tail of zeros past 64 MiB is not hashed
            #expect(try Self.used(m, m.dataDirectory) < 64 << 20)
            #expect(try m.sh("head -c 1 \(f)") == "x")
        }
    }
}
