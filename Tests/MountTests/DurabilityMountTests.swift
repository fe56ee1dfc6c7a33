import Foundation
import Testing

@Suite("mount: durability — kill -9, a server that goes away", .serialized)
struct DurabilityMountTests {
    @Test("kill -9 of stowfs with every upload still owed: the next mount with the same cache sends them all, intact")
    func killNine() async throws {
        try await withMount { m in
            try m.sh("mkdir -p src && for i in $(seq 1 30); do head -c $((i * 5000)) /dev/urandom > src/f$i; done && head -c 3000000 /dev/urandom > src/big")
            try m.sh("mkdir \(m.mountpoint)/src")
            // The server freezes: every upload starts and hangs (the new folder's names are known locally).
            kill(m.server!.processIdentifier, SIGSTOP)
            try m.sh("cp src/* \(m.mountpoint)/src/")
            // close(2) returned for every file: now the daemon dies, mid-upload.
            m.killMount()
            kill(m.server!.processIdentifier, SIGCONT)
            #expect(!MountedFS.isMounted(m.mountpoint))
            let storedBefore = try await m.withClient { c in try await c.listAll(m.namespace, folder: try .init("src")).count }
            #expect(storedBefore < 31, "the kill came too late to test anything")
            try m.mountFS()
            try m.stowfs(["sync", m.mountpoint])
            try m.sh("diff -r src \(m.mountpoint)/src")
            for name in ["f1", "f17", "f30", "big"] {
                let local = try m.sh("sha256sum src/\(name) | cut -d' ' -f1")
                #expect(try await m.storedSHA256("src/\(name)") == local, "\(name)")
            }
        }
    }

    /// The process ends (a fault put in, `STOWFS_TEST_FAULT`) right after the server renamed a
    /// folder holding a file whose upload is owed, before the journal moved its record: the next
    /// mount asks the server where the folder is and sends the file there. Before moves were
    /// journaled it went to the old path, and the old folder came back on the server with it.
    @Test("the mount's process dies between the server's rename of a folder and the journal's move of what it holds: the next mount sends it under the new name")
    func diesAfterServerMove() async throws {
        try await withMount { m in
            try m.sh("mkdir \(m.mountpoint)/A && echo old > \(m.mountpoint)/A/x")
            try m.unmountFS()
            try m.mountFS(environment: ["STOWFS_TEST_FAULT": "exit-after-server-move"])
            try m.stowfs(["pause", m.mountpoint])
            try m.sh("echo new > \(m.mountpoint)/A/x")
            try m.sh("mv \(m.mountpoint)/A \(m.mountpoint)/B", expectFailure: true)
            m.killMount()
            #expect(m.logText.contains("the process ends now"), "\(m.logText.suffix(2000))")
            // The server renamed; the new content is still the journal's.
            #expect(try await m.storedBytes("B/x") == Array("old\n".utf8))
            try m.mountFS()
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedBytes("B/x") == Array("new\n".utf8))
            let root = try await m.withClient { c in try await c.listAll(m.namespace, folder: .root).map(\.fileName) }
            #expect(root == ["B"], "\(root)")
            #expect(try m.sh("cat \(m.mountpoint)/B/x") == "new")
        }
    }

    @Test("a server that stops: uploads stay queued, status says why, and they drain when it is back")
    func serverDown() async throws {
        try await withMount { m in
            try m.sh("echo before > \(m.mountpoint)/before.txt")
            try m.stowfs(["sync", m.mountpoint])
            m.stopServer()
            try m.sh("for i in $(seq 1 5); do echo file $i > \(m.mountpoint)/down$i.txt; done")
            #expect(try m.sh("cat \(m.mountpoint)/down3.txt") == "file 3")
            // The first attempts fail (after the client's connection timeout); status then says why they wait.
            var status = ""
            for _ in 0..<60 {
                status = try m.stowfs(["status", m.mountpoint])
                if status.contains("cannot reach") { break }
                try await Task.sleep(for: .seconds(1))
            }
            #expect(status.contains("5 file(s)"), "\(status)")
            #expect(status.contains("cannot reach"), "\(status)")
            try m.startServer()
            try m.stowfs(["sync", m.mountpoint])
            for i in 1...5 { #expect(try await m.storedBytes("down\(i).txt") == Array("file \(i)\n".utf8)) }
        }
    }

    /// The kernel's mount gone (`fusermount3 -u`) while the server is away: the mount's process
    /// waits to store what is queued, and `stowfs unmount --no-wait` is the way out. It set a
    /// flag nobody read any more: the process waited on, forever (a review).
    @Test("after fusermount3 -u with the server away, unmount --no-wait ends the mount's process; the next mount sends what was queued")
    func noWaitAfterKernelUnmount() async throws {
        try await withMount { m in
            try m.sh("ls \(m.mountpoint)")
            kill(m.server!.processIdentifier, SIGSTOP)
            defer { kill(m.server!.processIdentifier, SIGCONT) }
            try m.sh("head -c 100000 /dev/urandom > a.bin && cp a.bin \(m.mountpoint)/a.bin")
            try m.sh("fusermount3 -u \(m.mountpoint)")
            try await Task.sleep(for: .milliseconds(500))
            let process = try #require(m.mount)
            // The harness forgets this process once it mounts again: stopped here on every path.
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() } }
            #expect(process.isRunning, "the mount's process should be waiting to store a.bin")
            // Meanwhile another file system is mounted at the folder. The request to end came after
            // the FUSE session was gone, and used it: it also detached whatever was mounted at the
            // path, this one.
            try m.sh("mount -t tmpfs stowtest-other \(m.mountpoint)")
            defer { _ = try? m.sh("! grep -q ' \(m.mountpoint) tmpfs ' /proc/mounts || umount \(m.mountpoint)") }
            // (The command then waits for the folder to be unmounted, and says it is not: ignored.)
            _ = try m.run(MountedFS.binDirectory + "/stowfs", ["unmount", m.mountpoint, "--no-wait"])
            let deadline = ContinuousClock.now + .seconds(15)
            while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
            try #require(!process.isRunning, "unmount --no-wait did not end the mount's process")
            #expect(process.terminationReason == .exit && process.terminationStatus == 0, "status \(process.terminationStatus), \(process.terminationReason)")
            #expect(try m.sh("grep -c ' \(m.mountpoint) tmpfs ' /proc/mounts || true").trimmingCharacters(in: .whitespacesAndNewlines) == "1",
                "the ended mount detached another file system mounted at its folder")
            try m.sh("umount \(m.mountpoint)")
            kill(m.server!.processIdentifier, SIGCONT)
            try m.mountFS()
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedSHA256("a.bin") == (try m.sh("sha256sum a.bin | cut -d' ' -f1")))
        }
    }

    @Test("unmount waits for the queue; --leave-queued keeps it for the next mount")
    func unmountDrains() async throws {
        try await withMount { m in
            try m.sh("head -c 2000000 /dev/urandom > a.bin && cp a.bin \(m.mountpoint)/a.bin")
            try m.unmountFS()
            #expect(try await m.storedSHA256("a.bin") == (try m.sh("sha256sum a.bin | cut -d' ' -f1")))
            try m.mountFS()
            try m.sh("ls \(m.mountpoint)")
            kill(m.server!.processIdentifier, SIGSTOP)
            try m.sh("cp a.bin \(m.mountpoint)/b.bin")
            let out = try m.unmountFS(leaveQueued: true)
            kill(m.server!.processIdentifier, SIGCONT)
            // It says what it kept.
            #expect(out.contains("1 file(s)") && out.contains("kept test/b.bin"), "\(out)")
            #expect(!MountedFS.isMounted(m.mountpoint))
            try m.mountFS()
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedSHA256("b.bin") == (try m.sh("sha256sum a.bin | cut -d' ' -f1")))
        }
    }
}
