import Foundation
import StorageClient
import StorageProtocol
import Testing

/// Uploads the server refuses for good (here: a token that may read but not write). Before, such a
/// refusal left `stowfs sync`, fsync, `ln`, `user.stow.url` and unmount waiting forever.
@Suite("mount: uploads the server refuses", .serialized)
struct FailureMountTests {
    static let readerToken = "mount-test-reader-0001"

    /// A server with an admin and a read-only token, the namespace made, and the mount using the read-only one.
    func withReadOnlyMount(_ body: (MountedFS) async throws -> Void) async throws {
        let m = MountedFS()
        do {
            let tokens = m.root + "/tokens"
            try "\(MountedFS.token) * admin\n\(Self.readerToken) test read\n".write(toFile: tokens, atomically: true, encoding: .utf8)
            m.serverArguments = ["--token-file", tokens]
            try m.startServer()
            _ = try await m.withClient { c in try await c.createNamespace(m.namespace) }
            _ = try await m.withClient { c in
                try await c.upload(.bytes(.init(string: "old\n")), size: 4, to: m.namespace, try StoragePath("old.txt"))
            }
            m.mountToken = Self.readerToken
            try m.mountFS()
            try await body(m)
        } catch {
            let log = m.logText
            m.cleanup()
            if !log.isEmpty { Issue.record("stowfs log:\n\(log)") }
            throw error
        }
        m.cleanup()
    }

    @Test("sync, fsync, ln and user.stow.url fail with the reason instead of hanging; unmount keeps the file; a remount with write access stores it")
    func refusedForGood() async throws {
        try await withReadOnlyMount { m in
            let f = m.mountpoint + "/refused.txt"
            try m.sh("echo hello > \(f)")
            // Every wait below is bounded by `timeout`: a hang fails the test instead of stopping it.
            let sync = try m.run("/usr/bin/timeout", ["60", MountedFS.binDirectory + "/stowfs", "sync", m.mountpoint])
            #expect(sync.status == 1, "stowfs sync: \(sync.status) \(sync.out)")
            #expect(sync.out.contains("test/refused.txt") && sync.out.contains("does not grant write"), "\(sync.out)")
            let fsync = try m.run("/usr/bin/timeout", [
                "60", "python3", "-c", "import os; fd = os.open('\(f)', os.O_WRONLY | os.O_APPEND); os.write(fd, b'x'); os.fsync(fd)",
            ])
            #expect(fsync.status == 1 && fsync.out.contains("Input/output error"), "fsync: \(fsync.status) \(fsync.out)")
            let url = try m.run("/usr/bin/timeout", ["60", "getfattr", "-n", "user.stow.url", f])
            #expect(url.status == 1 && url.out.contains("Input/output error"), "getfattr: \(url.status) \(url.out)")
            let link = try m.run("/usr/bin/timeout", ["60", "ln", f, m.mountpoint + "/hard.txt"])
            #expect(link.status == 1 && link.out.contains("Input/output error"), "ln: \(link.status) \(link.out)")
            // Nothing dropped: the file reads back, and status lists it as failed with why.
            #expect(try m.sh("cat \(f)") == "hello\nx")
            let status = try m.stowfs(["status", m.mountpoint])
            #expect(status.contains("failed") && status.contains("refused.txt") && status.contains("stowfs retry"), "\(status)")
            #expect(try m.stowfs(["retry", f]).contains("1 failed upload(s) sent again"))
            let unmount = try m.run("/usr/bin/timeout", ["60", MountedFS.binDirectory + "/stowfs", "unmount", m.mountpoint])
            #expect(unmount.status == 1 && unmount.out.contains("test/refused.txt") && unmount.out.contains("for the next mount"), "\(unmount.out)")
            #expect(!MountedFS.isMounted(m.mountpoint))
            m.mount?.waitUntilExit()
            // With a token that may write, the next mount of the same cache sends it.
            m.mountToken = MountedFS.token
            try m.mountFS()
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedBytes("refused.txt") == Array("hello\nx".utf8))
        }
    }

    @Test("stowfs discard drops a refused change: a new file goes, a changed file shows the server's content again")
    func discard() async throws {
        try await withReadOnlyMount { m in
            try m.sh("echo new > \(m.mountpoint)/new.txt && echo changed > \(m.mountpoint)/old.txt")
            let sync = try m.run("/usr/bin/timeout", ["60", MountedFS.binDirectory + "/stowfs", "sync", m.mountpoint])
            #expect(sync.status == 1 && sync.out.contains("new.txt") && sync.out.contains("old.txt"), "\(sync.out)")
            let out = try m.stowfs(["discard", m.mountpoint + "/new.txt", m.mountpoint + "/old.txt"])
            #expect(out.contains("dropped the refused change of test/new.txt") && out.contains("test/old.txt"), "\(out)")
            #expect(try m.sh("ls \(m.mountpoint)") == "old.txt")
            #expect(try m.sh("cat \(m.mountpoint)/old.txt") == "old")
            let again = try m.run("/usr/bin/timeout", ["60", MountedFS.binDirectory + "/stowfs", "sync", m.mountpoint])
            #expect(again.status == 0, "\(again.out)")
            #expect(try m.stowfs(["discard", m.mountpoint + "/old.txt"]).contains("nothing dropped"))
        }
    }

    @Test("a second mount of a cache folder in use is refused with the reason, mounts nothing, and the first mount goes on whole")
    func cacheFolderInUse() async throws {
        try await withMount { m in
            try m.sh("printf 'kept' > '\(m.mountpoint)/before'")
            let other = m.root + "/mnt2"
            try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
            let (status, out) = try m.run(
                MountedFS.binDirectory + "/stowfs",
                ["mount", "test", other, "--endpoint", m.endpoint, "--cache-dir", m.cacheDirectory, "--log-level", "warning"])
            // (Without --foreground: were it to mount, it would return, and be unmounted here.)
            if MountedFS.isMounted(other) { _ = try? m.run(MountedFS.binDirectory + "/stowfs", ["unmount", other]) }
            #expect(status != 0)
            #expect(out.contains("another stowfs is using the cache folder \(m.cacheDirectory)"), "\(out)")
            #expect(!MountedFS.isMounted(other))
            // The first mount's journal and cache were not touched: it goes on writing and storing.
            try m.sh("printf 'after' > '\(m.mountpoint)/after'")
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedBytes("before") == Array("kept".utf8))
            #expect(try await m.storedBytes("after") == Array("after".utf8))
            try m.unmountFS()
        }
    }
}
