import Foundation
import Testing
import StorageProtocol

/// `stowfs pause` / `stowfs resume` (issue 18), against a real mount and a real stowd.
@Suite("pause and resume uploads", .serialized)
struct PauseTests {
    @Test("while paused: writes land in the cache and nothing reaches the server, status says paused, reads work, sync --no-wait exits 1, sync and fsync wait; resume sends it all; unmount while paused stores everything")
    func pauseAndResume() async throws {
        try await withMount { m in
            /// The server's SHA-256 of a file; nil when it has no such file (a 404).
            func stored(_ path: String) async throws -> String? {
                do { return try await m.storedSHA256(path) } catch let e where "\(e)".contains("HTTP 404") { return nil }
            }
            let said = try m.stowfs(["pause", m.mountpoint])
            #expect(said.contains("paused"), "\(said)")
            try m.sh("head -c 20971520 /dev/urandom > \(m.mountpoint)/big.bin && echo hello > \(m.mountpoint)/a.txt")
            let bigSum = try m.sh("sha256sum \(m.mountpoint)/big.bin | cut -d' ' -f1")
            usleep(1_500_000)
            #expect(try await stored("a.txt") == nil, "paused: the server must not have it yet")
            #expect(try await stored("big.bin") == nil, "paused: the server must not have it yet")
            #expect(try m.stowfs(["status", m.mountpoint]).contains("paused"))
            #expect(try m.sh("cat \(m.mountpoint)/a.txt") == "hello")

            // sync --no-wait: says so, exit 1, at once.
            let noWait = try m.run(MountedFS.binDirectory + "/stowfs", ["sync", m.mountpoint, "--no-wait"])
            #expect(noWait.status == 1 && noWait.out.contains("paused") && noWait.out.contains("stowfs resume"), "\(noWait)")

            // A sync and an fsync that wait for the resume.
            let waiters = try m.sh(
                """
                (\(MountedFS.binDirectory)/stowfs sync \(m.mountpoint) > \(m.root)/sync.out 2>&1; echo $? > \(m.root)/sync.rc) > /dev/null 2>&1 &
                (python3 -c 'import os; f = os.open("\(m.mountpoint)/f.txt", os.O_WRONLY | os.O_CREAT, 0o644); os.write(f, b"fsynced"); os.fsync(f); os.close(f)'; echo $? > \(m.root)/fsync.rc) > /dev/null 2>&1 &
                sleep 2; ls \(m.root)
                """)
            #expect(!waiters.contains("sync.rc") && !waiters.contains("fsync.rc"), "sync and fsync must wait while paused: \(waiters)")
            #expect(try await stored("f.txt") == nil)

            #expect(try m.stowfs(["resume", m.mountpoint]).contains("resumed"))
            _ = try m.sh("for i in $(seq 1 300); do [ -f \(m.root)/sync.rc ] && [ -f \(m.root)/fsync.rc ] && exit 0; sleep 0.1; done; exit 1")
            #expect(try m.sh("cat \(m.root)/sync.rc \(m.root)/fsync.rc") == "0\n0")
            #expect(try m.sh("cat \(m.root)/sync.out").contains("uploads are paused"))
            #expect(try await stored("big.bin") == bigSum)
            #expect(try await stored("a.txt") == sha256(Array("hello\n".utf8)))
            #expect(try await stored("f.txt") == sha256(Array("fsynced".utf8)))
            #expect(!(try m.stowfs(["status", m.mountpoint]).contains("paused")))

            // Paused again, a file written, then unmount: the unmount resumes and stores it.
            _ = try m.stowfs(["pause", m.mountpoint])
            try m.sh("echo last > \(m.mountpoint)/last.txt")
            try m.unmountFS()
            #expect(try await stored("last.txt") == sha256(Array("last\n".utf8)))
        }
    }

    @Test("a large file streaming to the server as it is written stops streaming at the pause; its close still returns, nothing reaches the server until resume, then all of it")
    func pauseStopsAStream() async throws {
        try await withMount { m in
            func stored(_ path: String) async throws -> String? {
                do { return try await m.storedSHA256(path) } catch let e where "\(e)".contains("HTTP 404") { return nil }
            }
            // 48 MiB in 1 MiB appends over about 2.5 s: past 16 MiB it streams.
            let writer = Process()
            writer.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            writer.arguments = ["-c", """
                import os, time
                f = open("\(m.mountpoint)/stream.bin", "wb")
                for i in range(48):
                    f.write(os.urandom(1 << 20)); f.flush(); time.sleep(0.05)
                f.close()
                """]
            try writer.run()
            usleep(1_500_000)
            _ = try m.stowfs(["pause", m.mountpoint])
            writer.waitUntilExit()
            #expect(writer.terminationStatus == 0)
            let sum = try m.sh("sha256sum \(m.mountpoint)/stream.bin | cut -d' ' -f1")
            usleep(1_000_000)
            #expect(try await stored("stream.bin") == nil, "paused: the stream must not have completed")
            _ = try m.stowfs(["resume", m.mountpoint])
            _ = try m.stowfs(["sync", m.mountpoint])
            #expect(try await stored("stream.bin") == sum)
        }
    }
}

/// `--bwlimit` and `stowfs set` (issue 18): rates measured over about 10 s each.
@Suite("bandwidth limits", .serialized)
struct BandwidthTests {
    @Test("--bwlimit 4M:16M holds an upload of 40 MiB to 4 MiB/s (within 15%); stowfs set --bwlimit 16M:2M then holds a read of 20 MiB to 2 MiB/s; status shows the limit")
    func limits() async throws {
        let m = MountedFS()
        defer { m.cleanup() }
        try m.startServer()
        // A file the mount has not seen: its read comes from the server.
        let remote = (0..<(20 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
        _ = try await m.withClient { c in
            _ = try await c.createNamespace(m.namespace)
            _ = try await c.upload(.bytes(.init(bytes: Array(remote[..<(2 << 20)]))), size: 2 << 20, to: m.namespace, try StoragePath("remote2.bin"))
            return try await c.upload(.bytes(.init(bytes: remote)), size: Int64(remote.count), to: m.namespace, try StoragePath("remote.bin"))
        }
        try m.mountFS(extra: ["--bwlimit", "4M:16M"])
        #expect(try m.stowfs(["status", m.mountpoint]).contains("4.0 MiB/s up, 16.0 MiB/s down"))

        // Up: 40 MiB written (into the cache, quickly), then sync waits for the upload.
        let start = ContinuousClock.now
        try m.sh("head -c 41943040 /dev/urandom > \(m.mountpoint)/up.bin")
        _ = try m.stowfs(["sync", m.mountpoint])
        let up = ContinuousClock.now - start
        let upRate = 40.0 / (Double(up.components.seconds) + Double(up.components.attoseconds) / 1e18)
        print("upload of 40 MiB at --bwlimit 4M: \(up), \(upRate) MiB/s")
        #expect(abs(upRate - 4) <= 4 * 0.15, "\(upRate) MiB/s over \(up)")

        // Down, after a live change.
        let said = try m.stowfs(["set", m.mountpoint, "--bwlimit", "16M:2M"])
        #expect(said.contains("16.0 MiB/s up, 2.0 MiB/s down"), "\(said)")
        let readStart = ContinuousClock.now
        let sum = try m.sh("sha256sum \(m.mountpoint)/remote.bin | cut -d' ' -f1")
        let down = ContinuousClock.now - readStart
        let downRate = 20.0 / (Double(down.components.seconds) + Double(down.components.attoseconds) / 1e18)
        print("read of 20 MiB at --bwlimit …:2M: \(down), \(downRate) MiB/s")
        #expect(sum == sha256(remote))
        #expect(abs(downRate - 2) <= 2 * 0.15, "\(downRate) MiB/s over \(down)")

        // A limit lifted while transfers wait on it reaches them at once: a read of 2 MiB begun at
        // 8 KiB/s (over 4 minutes) ends within 3 s of `set off` (it took 7 s more when waits were fixed up front).
        let slow = Process()
        slow.executableURL = URL(fileURLWithPath: "/bin/sh")
        slow.arguments = ["-c", "cat \(m.mountpoint)/remote2.bin > /dev/null"]
        _ = try m.stowfs(["set", m.mountpoint, "--bwlimit", "8K"])
        try slow.run()
        usleep(1_500_000)
        #expect(slow.isRunning, "at 8 KiB/s the read cannot be done yet")
        _ = try m.stowfs(["set", m.mountpoint, "--bwlimit", "off"])
        let lifted = ContinuousClock.now
        while slow.isRunning && ContinuousClock.now < lifted + .seconds(3) { usleep(50_000) }
        #expect(!slow.isRunning, "the read still waits 3 s after the limit was lifted")
        if slow.isRunning { slow.terminate() }
        slow.waitUntilExit()

        // Bad input is refused before it reaches the mount; off lifts the limit.
        #expect(throws: (any Error).self) { try m.stowfs(["set", m.mountpoint, "--bwlimit", "fast"]) }
        _ = try m.stowfs(["set", m.mountpoint, "--bwlimit", "off"])
        #expect(!(try m.stowfs(["status", m.mountpoint]).contains("limit:")))
        try m.unmountFS()
    }
}
