import Foundation
import Testing

/// Locks across two mounts of one namespace: `flock`, POSIX record locks and OFD locks are held
/// on the server, so they exclude across machines; a lock is also a data barrier.
@Suite("several mounts: locks")
struct LockMountTests {
    /// A lock helper run as its own process (one per mount, as two machines would run it).
    /// Kinds: flock, posix (fcntl F_SETLK/F_SETLKW), ofd (F_OFD_SETLK/F_OFD_SETLKW).
    static let helper = #"""
        import fcntl, os, struct, sys, time
        F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 36, 37, 38
        def ofd(fd, typ, block):
            fcntl.fcntl(fd, F_OFD_SETLKW if block else F_OFD_SETLK, struct.pack("hhxxxxqqixxxx", typ, 0, 0, 0, 0))
        def lock(fd, kind, block=True, shared=False):
            if kind == "flock":
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if block else fcntl.LOCK_NB))
            elif kind == "posix":
                fcntl.lockf(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if block else fcntl.LOCK_NB))
            else:
                ofd(fd, fcntl.F_RDLCK if shared else fcntl.F_WRLCK, block)
        def unlock(fd, kind):
            if kind == "flock": fcntl.flock(fd, fcntl.LOCK_UN)
            elif kind == "posix": fcntl.lockf(fd, fcntl.LOCK_UN)
            else: ofd(fd, fcntl.F_UNLCK, False)
        cmd, path, kind = sys.argv[1], sys.argv[2], sys.argv[3]
        if cmd == "hold":  # hold PATH KIND READY SECONDS: prints when it let go
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            lock(fd, kind)
            open(sys.argv[4], "w").close()
            time.sleep(float(sys.argv[5]))
            # The time as the unlock starts: read after it returns, a holder descheduled between
            # the two (a busy machine) printed a time after the waiter had the lock.
            began = time.time()
            unlock(fd, kind)
            print("released %.6f" % began, flush=True)
        elif cmd == "try":  # prints locked or busy
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                lock(fd, kind, block=False)
                print("locked")
                unlock(fd, kind)
            except (BlockingIOError, PermissionError):
                print("busy")
        elif cmd == "wait":  # prints when it got the lock
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            lock(fd, kind)
            print("acquired %.6f" % time.time(), flush=True)
            unlock(fd, kind)
        elif cmd == "getlk":  # prints the type of the lock in the way (F_GETLK)
            fd = os.open(path, os.O_RDWR)
            answer = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, 0, 0, 0, 0))
            typ = struct.unpack("hhxxxxqqixxxx", answer)[0]
            print({fcntl.F_UNLCK: "unlocked", fcntl.F_RDLCK: "read", fcntl.F_WRLCK: "write"}[typ])
        elif cmd == "counter":  # counter PATH KIND N: adds 1, N times, under the lock
            for _ in range(int(sys.argv[4])):
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                lock(fd, kind)
                n = int(os.pread(fd, 64, 0) or b"0")
                os.ftruncate(fd, 0)
                os.pwrite(fd, b"%d\n" % (n + 1), 0)
                unlock(fd, kind)
                os.close(fd)
        """#

    static func install(_ m: MountedFS) throws -> String {
        let path = m.root + "/locks.py"
        try helper.write(toFile: path, atomically: true, encoding: .utf8)
        return "python3 " + path
    }

    static func seconds(after word: String, in text: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(word + " ") }.flatMap { Double($0.split(separator: " ")[1]) }
    }

    @Test("flock, fcntl and OFD locks exclude across mounts; a waiter on the other mount gets the lock when the holder lets go; F_GETLK sees the other mount's lock", arguments: ["flock", "posix", "ofd"])
    func exclude(kind: String) async throws {
        try await withTwoMounts { a, b in
            let py = try Self.install(a)
            try a.sh("echo x > \(a.mountpoint)/f")
            _ = try a.stowfs(["sync", a.mountpoint])
            let ready = a.root + "/ready-\(kind)"
            let out = try a.sh(
                """
                \(py) hold \(a.mountpoint)/f \(kind) \(ready) 2 &
                for i in $(seq 200); do [ -e \(ready) ] && break; sleep 0.05; done
                \(py) try \(b.mountpoint)/f \(kind)
                \(kind == "posix" ? "\(py) getlk \(b.mountpoint)/f posix" : "echo no-getlk")
                \(py) wait \(b.mountpoint)/f \(kind)
                wait
                """)
            #expect(out.contains("busy"), "B took a lock A holds: \(out)")
            if kind == "posix" { #expect(out.contains("write"), "F_GETLK in B did not see A's lock: \(out)") }
            let released = try #require(Self.seconds(after: "released", in: out), "\(out)")
            let acquired = try #require(Self.seconds(after: "acquired", in: out), "\(out)")
            #expect(acquired >= released - 0.001, "B got the lock before A let go: \(out)")
            #expect(acquired - released < 5, "B waited \(acquired - released) s after A let go")
            print("\(kind): B got the lock \(Int((acquired - released) * 1000)) ms after A let go")
            // Free again on both sides.
            #expect(try a.sh("\(py) try \(a.mountpoint)/f \(kind)") == "locked")
        }
    }

    @Test("two processes, one per mount, each add 1 to a counter file 50 times under a lock: it ends at 100 (flock, then fcntl)", arguments: ["flock", "posix"])
    func counter(kind: String) async throws {
        try await withTwoMounts { a, b in
            let py = try Self.install(a)
            try a.sh("echo 0 > \(a.mountpoint)/counter")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { (try? String(contentsOfFile: b.mountpoint + "/counter", encoding: .utf8)) == "0\n" })
            let t0 = ContinuousClock.now
            try a.sh(
                """
                \(py) counter \(a.mountpoint)/counter \(kind) 50 & pa=$!
                \(py) counter \(b.mountpoint)/counter \(kind) 50 & pb=$!
                wait $pa && wait $pb
                """)
            let took = ContinuousClock.now - t0
            _ = try a.stowfs(["sync", a.mountpoint])
            _ = try b.stowfs(["sync", b.mountpoint])
            let stored = String(decoding: try await a.storedBytes("counter"), as: UTF8.self)
            #expect(stored == "100\n", "lost updates: the counter ended at \(stored)")
            print("\(kind) counter: 100 locked increments across two mounts in \(took)")
        }
    }

    @Test("a mount killed while it holds a lock loses it when its lease ends; a waiter blocked on it can be interrupted")
    func holderKilled() async throws {
        try await withTwoMounts(serverArguments: ["--lock-lease", "4"]) { a, b in
            let py = try Self.install(a)
            try a.sh("echo x > \(a.mountpoint)/f")
            _ = try a.stowfs(["sync", a.mountpoint])
            let ready = a.root + "/ready"
            // The holder, in the background for 120 s, its pid kept.
            try a.sh("(\(py) hold \(a.mountpoint)/f flock \(ready) 120 > /dev/null 2>&1 & echo $! > \(a.root)/holder.pid); for i in $(seq 200); do [ -e \(ready) ] && break; sleep 0.05; done")
            defer { _ = try? a.sh("kill $(cat \(a.root)/holder.pid) 2>/dev/null; true") }
            #expect(try b.sh("\(py) try \(b.mountpoint)/f flock") == "busy")
            // A waiter interrupted by a signal returns (EINTR), rather than waiting on.
            let t0 = ContinuousClock.now
            let status = try b.run("/usr/bin/timeout", ["-s", "INT", "1", "flock", b.mountpoint + "/f", "true"]).status
            #expect(status == 124, "flock was not interrupted (status \(status))")
            #expect(ContinuousClock.now - t0 < .seconds(10))
            #expect(try b.sh("\(py) try \(b.mountpoint)/f flock") == "busy", "the interrupted wait left B holding the lock or A without it")

            // kill -9 of A's stowfs: its session is not renewed, and after the 4 s lease B gets the lock.
            let killedAt = ContinuousClock.now
            a.killMount()
            let out = try b.sh("timeout 30 \(py) wait \(b.mountpoint)/f flock")
            let waited = ContinuousClock.now - killedAt
            #expect(out.hasPrefix("acquired"), "\(out)")
            #expect(waited < .seconds(25), "B waited \(waited)")
            print("lock of a killed mount freed after \(waited)")
        }
    }

    static func eventually(_ check: () throws -> Bool) async throws -> Bool {
        for _ in 0..<600 {
            if try check() { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return try check()
    }

    @Test("git in one mount while another reads the repository: both stay consistent (git fsck), and each sees the other's commits")
    func git() async throws {
        try await withTwoMounts { a, b in
            let git = "GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.com git"
            let commits = { (m: MountedFS, from: Int, to: Int) in
                "cd \(m.mountpoint)/repo && for i in $(seq \(from) \(to)); do echo $i > f$i; \(git) add f$i && \(git) commit -qm c$i || exit 1; done"
            }
            try a.sh("cd \(a.mountpoint) && git init -q -b main repo && " + commits(a, 1, 3))
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try b.sh("cd \(b.mountpoint)/repo && git log --oneline | wc -l") == "3")
            try b.sh("cd \(b.mountpoint)/repo && git fsck --strict --no-progress")

            // A commits while B reads the history over and over: every log B gets is whole.
            let out = try a.sh(
                """
                ( \(commits(a, 4, 12)) ) > \(a.root)/commits.log 2>&1 & pa=$!
                bad=0
                while kill -0 $pa 2>/dev/null; do
                    (cd \(b.mountpoint)/repo && git log --oneline > /dev/null 2>&1) || bad=$((bad + 1))
                done
                wait $pa; echo "commits: $?"; echo "failed logs in B: $bad"
                """)
            #expect(out.contains("commits: 0"), "\(out) \((try? String(contentsOfFile: a.root + "/commits.log", encoding: .utf8)) ?? "")")
            _ = try a.stowfs(["sync", a.mountpoint])
            let seen = try await Self.eventually { (try? b.sh("cd \(b.mountpoint)/repo && git log --oneline | wc -l")) == "12" }
            let log = (try? b.sh("cd \(b.mountpoint)/repo && git log --oneline")) ?? ""
            #expect(seen, "B never saw A's twelve commits: \(log)")
            try b.sh("cd \(b.mountpoint)/repo && git fsck --strict --no-progress")

            // And back: B commits (its index.lock recalls A's lease on .git), A sees it.
            try b.sh(commits(b, 13, 14))
            _ = try b.stowfs(["sync", b.mountpoint])
            let back = try await Self.eventually { (try? a.sh("cd \(a.mountpoint)/repo && git log --oneline | wc -l")) == "14" }
            #expect(back, "A never saw B's commits")
            try a.sh("cd \(a.mountpoint)/repo && git fsck --strict --no-progress && git status --porcelain | wc -l")
            print("git across mounts: \(out.split(separator: "\n").last ?? "")")
        }
    }
}
