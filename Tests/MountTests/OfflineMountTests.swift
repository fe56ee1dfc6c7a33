import Foundation
import StorageProtocol
import Testing

/// Offline mounts (issue 18): with the server away, `stowfs mount` mounts from what the last clean
/// unmount kept — listings and file contents — queues writes, and answers EIO (at once) for
/// contents it does not have; when the server is back the queue drains. A real mount, a real
/// stowd stopped and started again on its port.
@Suite("offline mounts", .serialized)
struct OfflineMountTests {
    @Test("mount, write and read, unmount, stop stowd, mount again: cached files read back, listings answer, new writes queue, a file not cached is EIO at once; start stowd: everything arrives, nothing lost")
    func offlineAndBack() async throws {
        try await withMount { m in
            let mp = m.mountpoint
            try m.sh(
                """
                mkdir -p \(mp)/sub/deeper
                echo hello > \(mp)/a.txt
                head -c 3145728 /dev/urandom > \(mp)/sub/b.bin
                echo written-only > \(mp)/sub/deeper/c.txt
                setfattr -n user.tags -v kept \(mp)/a.txt
                cat \(mp)/a.txt > /dev/null
                """)
            let bSum = try m.sh("sha256sum \(mp)/sub/b.bin | cut -d' ' -f1")
            _ = try m.stowfs(["sync", mp])
            // A file the mount lists but never reads: its content is not cached.
            _ = try await m.withClient { c in
                try await c.upload(.bytes(.init(string: "remote only")), size: 11, to: m.namespace, try StoragePath("sub/remote.txt"))
            }
            #expect(try m.sh("ls \(mp)/sub") == "b.bin\ndeeper\nremote.txt")
            try m.unmountFS()
            #expect(FileManager.default.fileExists(atPath: m.cacheDirectory + "/tree.json"))
            #expect(FileManager.default.fileExists(atPath: m.cacheDirectory + "/blocks/.index.json"))

            let port = m.port
            m.stopServer()
            try m.mountFS()
            #expect(m.logText.contains("mounting from the cache"), "the mount says it is offline: \(m.logText.suffix(2000))")
            // The kernel forgets what it looked up (memory pressure): kept names still answer.
            try m.sh("ls -R \(mp) > /dev/null; sync; echo 2 > /proc/sys/vm/drop_caches")
            #expect(try m.sh("cat \(mp)/a.txt") == "hello")
            #expect(try m.sh("sha256sum \(mp)/sub/b.bin | cut -d' ' -f1") == bSum)
            #expect(try m.sh("cat \(mp)/sub/deeper/c.txt") == "written-only", "written, stored, never read: kept from the upload")
            #expect(try m.sh("ls \(mp)/sub") == "b.bin\ndeeper\nremote.txt")
            let tags = try m.sh("getfattr --absolute-names --only-values -n user.tags \(mp)/a.txt")
            #expect(tags == "kept", "\(tags)")
            #expect(try m.sh("stat -c %s \(mp)/sub/remote.txt") == "11")
            // Not cached: an error, at once (not a hang), and EIO.
            let start = ContinuousClock.now
            let failed = try m.sh("timeout 60 cat \(mp)/sub/remote.txt 2>&1; echo rc=$?", expectFailure: false)
            #expect(failed.contains("Input/output error") && failed.contains("rc=1"), "\(failed)")
            #expect(ContinuousClock.now - start < .seconds(30), "a file not cached must fail, not wait for the server")
            #expect(try m.sh("ls \(mp)/nothing-here 2>&1; echo rc=$?").contains("No such file or directory"), "the root was kept whole: ENOENT")

            // Writes queue.
            try m.sh("echo offline > \(mp)/new.txt && mkdir -p \(mp)/sub/deeper && echo more > \(mp)/sub/deeper/d.txt")
            #expect(try m.sh("cat \(mp)/new.txt") == "offline")
            let status = try m.stowfs(["status", mp])
            #expect(status.contains("new.txt") || status.contains("2 file"), "\(status)")

            // The server comes back on its port: the queue drains, and the listings refresh.
            m.port = port
            try m.startServer()
            _ = try m.stowfs(["sync", mp])
            #expect(try await m.storedBytes("new.txt") == Array("offline\n".utf8))
            #expect(try await m.storedBytes("sub/deeper/d.txt") == Array("more\n".utf8))
            #expect(try await m.storedSHA256("sub/b.bin") == bSum)
            #expect(try await m.storedBytes("a.txt") == Array("hello\n".utf8))
            #expect(try m.sh("cat \(mp)/sub/remote.txt") == "remote only")
            try m.unmountFS()
        }
    }

    @Test("with --require-server, or with nothing kept, a mount while the server is away is refused with the reason")
    func refused() async throws {
        try await withMount { m in
            try m.sh("echo x > \(m.mountpoint)/x.txt")
            try m.unmountFS()
            m.stopServer()
            var failure = ""
            do { try m.mountFS(extra: ["--require-server"]) } catch { failure = "\(error)" }
            #expect(failure.contains("cannot reach the server"), "\(failure)")
            // A start that fails after reading what was kept (here: FUSE refuses an option) keeps it for the next.
            failure = ""
            do { try m.mountFS(extra: ["-o", "no_such_fuse_option"]) } catch { failure = "\(error)" }
            #expect(!failure.isEmpty, "the bad option must fail the mount")
            try m.mountFS()
            #expect(try m.sh("cat \(m.mountpoint)/x.txt") == "x", "kept through the failed start: \(m.logText.suffix(1500))")
            try m.unmountFS()
            try? FileManager.default.removeItem(atPath: m.cacheDirectory)
            failure = ""
            do { try m.mountFS() } catch { failure = "\(error)" }
            #expect(failure.contains("keeps nothing to mount from"), "\(failure)")
        }
    }

    @Test("the block cache is kept by a clean unmount only: after kill -9, the next mount starts with none")
    func crashDropsTheCache() async throws {
        try await withMount { m in
            try m.sh("head -c 2097152 /dev/urandom > \(m.mountpoint)/f.bin")
            _ = try m.stowfs(["sync", m.mountpoint])
            try m.unmountFS()
            let kept = try m.sh("ls \(m.cacheDirectory)/blocks | wc -l")
            #expect(kept == "1", "the file just stored is kept as its cached blocks")
            try m.mountFS()
            // The mount shows in the mount table a moment before it claims what was kept; it answers
            // requests only after. A listing answered proves the claim is done (CI once looked between).
            _ = try m.sh("ls \(m.mountpoint)")
            #expect(!FileManager.default.fileExists(atPath: m.cacheDirectory + "/blocks/.index.json"), "the index is taken at start")
            m.killMount()
            #expect(!FileManager.default.fileExists(atPath: m.cacheDirectory + "/tree.json"), "the tree kept is taken at start; a crash writes none")
            try m.mountFS()
            #expect(try m.sh("ls -A \(m.cacheDirectory)/blocks | wc -l") == "0", "after a crash, nothing of the block cache is trusted")
            #expect(try m.sh("head -c 2097152 \(m.mountpoint)/f.bin | wc -c") == "2097152")
        }
    }

    @Test("online too, a clean unmount's listings serve the next mount once the change feed says what changed meanwhile: folders not changed ask nothing; another client's new file, rewrite and delete show; a namespace made again is listed afresh")
    func keptListingsOnline() async throws {
        try await withMount { m in
            let mp = m.mountpoint
            let browse = CoherenceMountTests.requestCount(m, routes: "/browse")
            let names = CoherenceMountTests.requestCount(m, routes: "/browse|/files/[*][*]")
            // Made and listed once the feed is followed (a listing taken before its first answer
            // is not held by it, and is not kept as current).
            try await Task.sleep(for: .seconds(1))
            try m.sh("mkdir \(mp)/still \(mp)/moved && for f in 1 2 3; do echo $f > \(mp)/still/s$f; echo $f > \(mp)/moved/m$f; done")
            _ = try m.stowfs(["sync", mp])
            _ = try m.sh("ls -l \(mp) \(mp)/still \(mp)/moved > /dev/null")
            try m.unmountFS()

            // While no mount is there, another client adds a file, rewrites one and deletes one.
            let fresh = "rewritten, and longer"
            try await m.withClient { c in
                _ = try await c.upload(.bytes(.init(string: "new")), size: 3, to: m.namespace, try StoragePath("moved/new.txt"))
                _ = try await c.upload(.bytes(.init(string: fresh)), size: Int64(fresh.utf8.count), to: m.namespace, try StoragePath("moved/m1"))
                try await c.delete(m.namespace, try StoragePath("moved/m2"), ifMatch: nil)
            }
            try m.mountFS()
            // The folder nothing changed in: listed, its names and their sizes, with no listing nor
            // record asked of the server.
            let counts = try m.sh("b=$(\(names)) && ls -l \(mp)/still > /dev/null && stat -c %s \(mp)/still/s1 \(mp)/still/s2 > /dev/null && ls \(mp) > /dev/null && echo $b $(\(names))")
            let pair = counts.split(separator: " ")
            #expect(pair.count == 2 && pair[0] == pair[1], "a kept listing the feed showed unchanged was asked for again (requests before and after: \(counts)); log: \(m.logText.suffix(1500))")
            #expect(try m.sh("ls \(mp)/still") == "s1\ns2\ns3")
            #expect(try m.sh("cat \(mp)/still/s2") == "2")
            // The folder another client changed: what it has now.
            let before = try m.sh(browse)
            #expect(try m.sh("ls \(mp)/moved") == "m1\nm3\nnew.txt")
            #expect(try m.sh(browse) != before, "the changed folder was listed again")
            #expect(try m.sh("stat -c %s \(mp)/moved/m1") == "\(fresh.utf8.count)")
            #expect(try m.sh("cat \(mp)/moved/m1") == fresh)
            #expect(try m.sh("cat \(mp)/moved/new.txt") == "new")
            #expect(try m.sh("ls \(mp)/moved/m2 2>&1; echo rc=$?").contains("No such file or directory"))
            // Written here and left queued (uploads paused, `unmount --leave-queued`): the next
            // mount shows what the journal owes the server, over the listing kept.
            _ = try m.stowfs(["pause", mp])
            try m.sh("echo owed > \(mp)/still/s3 && echo added > \(mp)/still/s4")
            try m.unmountFS(leaveQueued: true)
            try m.mountFS()
            #expect(try m.sh("ls \(mp)/still") == "s1\ns2\ns3\ns4")
            #expect(try m.sh("cat \(mp)/still/s3 \(mp)/still/s4") == "owed\nadded")
            _ = try m.stowfs(["sync", mp])
            #expect(try await m.storedBytes("still/s3") == Array("owed\n".utf8))
            try m.unmountFS()

            // The namespace deleted and made again (with a file where one was): nothing of the
            // old tree shows.
            try await m.withClient { c in
                try await c.deleteNamespace(m.namespace, recursive: true)
                _ = try await c.createNamespace(m.namespace)
                _ = try await c.upload(.bytes(.init(string: "other")), size: 5, to: m.namespace, try StoragePath("still/s1"))
            }
            try m.mountFS()
            #expect(try m.sh("ls \(mp)") == "still")
            #expect(try m.sh("ls \(mp)/still") == "s1")
            #expect(try m.sh("cat \(mp)/still/s1") == "other")
            try m.unmountFS()
        }
    }
}
