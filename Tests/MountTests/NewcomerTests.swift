import Foundation
import StorageClient
import StorageProtocol
import StowFS
import Testing

/// What a new user meets first: mount(8) and /etc/fstab through the mount helper, `make install`,
/// and the errors of a first mount, each naming the problem and its fix.
@Suite("newcomer: mount helpers, install, first errors", .serialized)
struct NewcomerTests {
    static var repoRoot: String { SemanticsDocTests.root }

    /// Runs a bash script in a private mount namespace, so that the helpers can stand in /sbin
    /// (where mount(8) looks) without touching the machine's own /sbin.
    static func inMountNamespace(_ m: MountedFS, _ script: String) throws -> (status: Int32, out: String) {
        let path = m.root + "/script.sh"
        try script.write(toFile: path, atomically: false, encoding: .utf8)
        return try m.run("/usr/bin/unshare", ["--mount", "--propagation", "private", "/bin/bash", path])
    }

    /// Kills whatever stowfs still serves this test's cache folder (only after a failure).
    static func killLeftovers(_ m: MountedFS) {
        _ = try? m.run("/usr/bin/pkill", ["-KILL", "-f", "--", "--cache-dir \(m.cacheDirectory)"])
    }

    @Test("mount -t fuse.stowfs and an /etc/fstab line mount through the helper; umount unmounts and nothing is lost")
    func mountHelperAndFstab() async throws {
        let m = MountedFS()
        defer {
            Self.killLeftovers(m)
            m.cleanup()
        }
        try m.startServer()
        let sbin = m.root + "/sbin"
        try FileManager.default.createDirectory(atPath: sbin, withIntermediateDirectories: true)
        for helper in ["mount.fuse.stowfs", "umount.fuse.stowfs"] {
            try FileManager.default.copyItem(atPath: Self.repoRoot + "/mount-helpers/" + helper, toPath: sbin + "/" + helper)
        }
        try MountedFS.token.write(toFile: m.root + "/token", atomically: false, encoding: .utf8)
        let data = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 7) }
        _ = FileManager.default.createFile(atPath: m.root + "/work/src.bin", contents: Data(data))
        let mnt = m.mountpoint
        let options = "endpoint=\(m.endpoint),token_file=\(m.root)/token,cache_dir=\(m.cacheDirectory),log_level=warning"
        let (status, out) = try Self.inMountNamespace(
            m,
            """
            set -euxo pipefail
            mount --bind \(sbin) /sbin
            mount -t tmpfs none /run/mount 2>/dev/null || { mkdir -p /run/mount && mount -t tmpfs none /run/mount; }
            trap 'umount -l \(mnt) 2>/dev/null || true' EXIT
            export STOWFS=\(MountedFS.binDirectory)/stowfs
            mount -t fuse.stowfs demo \(mnt) -o \(options),cache_size=64M,create
            grep -q " \(mnt) fuse.stowfs " /proc/mounts
            cp \(m.root)/work/src.bin \(mnt)/a.bin
            setfattr -n user.tags -v 'x,y' \(mnt)/a.bin
            umount \(mnt)
            ! grep -q " \(mnt) " /proc/mounts
            # umount(2) took the mount; the daemon stores what is queued, then exits.
            for i in $(seq 1 600); do pgrep -f -- "--cache-dir \(m.cacheDirectory)" >/dev/null || break; sleep 0.1; done
            ! pgrep -f -- "--cache-dir \(m.cacheDirectory)"
            echo "demo \(mnt) fuse.stowfs _netdev,nofail,x-systemd.automount,\(options) 0 0" > \(m.root)/fstab
            mount -T \(m.root)/fstab \(mnt)
            cmp \(m.root)/work/src.bin \(mnt)/a.bin
            echo "tags=$(getfattr --only-values -n user.tags \(mnt)/a.bin)"
            cp \(m.root)/work/src.bin \(mnt)/b.bin
            # This mount has userspace options (utab), so umount(8) runs umount.fuse.stowfs: it returns once b.bin is stored.
            umount \(mnt)
            ! grep -q " \(mnt) " /proc/mounts
            """)
        #expect(status == 0, "\(out)\n\(m.logText)")
        #expect(out.contains("tags=x,y"), "\(out)")
        #expect(out.contains("everything is stored"), "umount went through the helper: \(out)")
        try await m.withClient { c in
            let ns = try Namespace("demo")
            let a = try await c.record(ns, try StoragePath("a.bin"))
            #expect(a.sha256 == sha256(data))
            #expect(a.tags == ["x", "y"])
            #expect(try await c.record(ns, try StoragePath("b.bin")).sha256 == sha256(data))
        }
    }

    @Test("on a machine with hundreds of mounts, stowfs mount finds the mount it made at once, and refuses a mountpoint mounted already")
    func manyMounts() async throws {
        let m = MountedFS()
        defer {
            Self.killLeftovers(m)
            m.cleanup()
        }
        try m.startServer()
        let many = m.root + "/many"
        // /proc/self/mountinfo grows past 4 KiB, which Foundation's String(contentsOfFile:) stopped
        // reading at: the new mount, on its last line, was not seen, and mount waited 2 minutes.
        let (status, out) = try Self.inMountNamespace(
            m,
            """
            set -euo pipefail
            for i in $(seq 1 300); do mkdir -p \(many)/m$i; mount -t tmpfs none \(many)/m$i; done
            echo "mountinfo: $(wc -c < /proc/self/mountinfo) bytes"
            start=$(date +%s)
            \(MountedFS.binDirectory)/stowfs mount test \(m.mountpoint) --endpoint \(m.endpoint) --cache-dir \(m.cacheDirectory) --create --log-level warning
            echo "mounted after $(( $(date +%s) - start )) s"
            echo hello > \(m.mountpoint)/hello.txt
            \(MountedFS.binDirectory)/stowfs unmount \(m.mountpoint)
            mkdir -p \(many)/taken && mount -t tmpfs none \(many)/taken
            \(MountedFS.binDirectory)/stowfs mount test \(many)/taken --endpoint \(m.endpoint) --cache-dir \(m.cacheDirectory)-2 2>&1 || true
            """)
        #expect(status == 0, "\(out)")
        #expect(out.contains("mounted at"), "\(out)")
        let seconds = out.split(separator: "\n").first { $0.hasPrefix("mounted after") }.flatMap { Int($0.split(separator: " ")[2]) }
        #expect((seconds ?? 999) < 60, "\(out)")
        #expect(out.contains("is already mounted"), "a mounted mountpoint was not refused: \(out)")
        #expect(try await m.storedBytes("hello.txt") == Array("hello\n".utf8))
    }

    @Test("the control socket listens before the mount appears: a stowfs sync run the moment the folder is mounted finds the mount")
    func controlBeforeMount() async throws {
        let m = MountedFS()
        defer {
            Self.killLeftovers(m)
            m.cleanup()
        }
        try m.startServer()
        // A CI run failed on `stowfs sync` straight after a remount: "no stowfs is serving". The
        // socket was bound by a task started after the mount; here the mount table is watched
        // without pause, and the socket must be there the first moment the mount is.
        for round in 1...5 {
            try m.mountFS(poll: 0)
            let socket = ControlSocket.path(for: m.mountpoint)
            #expect(FileManager.default.fileExists(atPath: socket), "round \(round): mounted before \(socket) was listening")
            #expect(try m.stowfs(["status", m.mountpoint]).contains("queue"), "round \(round)")
            try m.unmountFS()
        }
    }

    @Test("status requests on the control socket while the mount shuts down: the daemon still ends cleanly (a connection taken as the socket closed crashed it with SIGILL)")
    func controlDuringShutdown() async throws {
        let m = MountedFS()
        defer {
            Self.killLeftovers(m)
            m.cleanup()
        }
        try m.startServer()
        for round in 1...3 {
            try m.mountFS()
            try m.sh("echo \(round) > \(m.mountpoint)/f\(round)")
            // Clients that connect, ask for the status and hang up, as fast as they can, until the
            // socket is gone: some arrive while the daemon stops serving it.
            let hammer = Process()
            hammer.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            hammer.arguments = [
                "-c",
                """
                import socket, sys, threading, time
                path = sys.argv[1]
                def run():
                    misses, end = 0, time.time() + 60
                    while misses < 200 and time.time() < end:
                        try:
                            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                            s.connect(path)
                            s.sendall(b'{"command":"status"}\\n')
                            s.close()
                            misses = 0
                        except OSError:
                            misses += 1
                            time.sleep(0.001)
                ts = [threading.Thread(target=run) for _ in range(4)]
                [t.start() for t in ts]
                [t.join() for t in ts]
                """,
                ControlSocket.path(for: m.mountpoint),
            ]
            try hammer.run()
            defer { if hammer.isRunning { hammer.terminate() } }
            try await Task.sleep(for: .milliseconds(300))
            // unmountFS records a daemon that ends with a signal or an error.
            try m.unmountFS()
            hammer.waitUntilExit()
            #expect(try await m.storedBytes("f\(round)") == Array("\(round)\n".utf8))
        }
    }

    @Test("under systemd (Type=notify): stowd says READY=1 once it listens and STOPPING=1 on SIGTERM; stowfs READY=1 once mounted, the queue as STATUS, STOPPING=1 at unmount")
    func systemdNotify() async throws {
        let m = MountedFS()
        let socket = m.root + "/notify.sock", log = m.root + "/notify.log"
        let listener = Process()
        listener.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        listener.arguments = [Self.repoRoot + "/Tests/tools/notify_socket.py", socket, log, m.mountpoint]
        try listener.run()
        defer {
            kill(listener.processIdentifier, SIGKILL)
            listener.waitUntilExit()
            Self.killLeftovers(m)
            m.cleanup()
        }
        func lines() -> [String] {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
        /// The last line that passes `test`, among those after the first `after` lines.
        func waitFor(_ what: String, after: Int = 0, _ test: (String) -> Bool) async throws -> String {
            for _ in 0..<200 {
                if let l = lines().dropFirst(after).last(where: test) { return l }
                try await Task.sleep(for: .milliseconds(50))
            }
            Issue.record("no message \(what); got \(lines())")
            return ""
        }
        for _ in 0..<100 where !FileManager.default.fileExists(atPath: socket) { try await Task.sleep(for: .milliseconds(20)) }
        let env = ["NOTIFY_SOCKET": socket]

        try m.startServer(environment: env)
        let ready = try await waitFor("READY=1 from stowd") { $0.contains("READY=1") }
        #expect(ready.contains("STATUS=listening on \(m.endpoint)"), "\(ready)")

        try m.mountFS(environment: env)
        let mounted = try await waitFor("READY=1 from stowfs") { $0.contains("READY=1") && $0.contains("STATUS=mounted") }
        #expect(mounted.hasSuffix("[mounted]"), "READY=1 came before the mount: \(mounted)")
        // The queue's length in the status line: the server paused, a file waits.
        // (In a folder made here: its names are known without asking the server.)
        try m.sh("mkdir \(m.mountpoint)/d")
        kill(m.server!.processIdentifier, SIGSTOP)
        try m.sh("echo queued > \(m.mountpoint)/d/q.txt")
        let queued = try await waitFor("a STATUS with the queue") { $0.contains("STATUS=mounted; queue: 1 file(s)") }
        kill(m.server!.processIdentifier, SIGCONT)
        #expect(!queued.isEmpty)
        try m.stowfs(["sync", m.mountpoint])
        // After the queued line: a loaded machine's first status can say "queue empty" before the
        // file was written (CI once took that line for this one, then unmounted before the next).
        let queuedAt = lines().firstIndex(of: queued).map { $0 + 1 } ?? 0
        _ = try await waitFor("a STATUS with the queue empty", after: queuedAt) { $0.contains("STATUS=mounted; queue empty") }
        try m.unmountFS()
        _ = try await waitFor("STOPPING=1 from stowfs") { $0.contains("STOPPING=1") && $0.contains("unmounted") }
        #expect(try await m.storedBytes("d/q.txt") == Array("queued\n".utf8))
        m.stopServer()
        _ = try await waitFor("STOPPING=1 from stowd") { $0.contains("STOPPING=1") && $0.contains("finishing the requests") }
        #expect(listener.isRunning, "the stand-in socket's listener ended early")
        // In that order.
        let all = lines()
        let order = ["listening on", "STATUS=mounted stowfs:", "queue: 1 file(s)", "queue empty", "unmounted", "finishing the requests"]
        let positions = order.map { key in (key == "queue empty" ? all.lastIndex { $0.contains(key) } : all.firstIndex { $0.contains(key) }) ?? -1 }
        #expect(positions == positions.sorted() && !positions.contains(-1), "\(all)")
    }

    @Test("with standard error connected to the journal ($JOURNAL_STREAM names it), stowd logs one line per event with a <N> priority and no time (stowfs's logging is set up the same way); elsewhere the usual lines")
    func journalLines() throws {
        let m = MountedFS()
        defer { m.cleanup() }
        // As systemd does: JOURNAL_STREAM is the device and inode of the stream stderr is.
        func run(_ journal: Bool, _ program: String) throws -> String {
            let out = m.root + "/\(program)-\(journal).txt"
            let script = """
                set -u
                : > \(out)
                js=$(stat -c '%d:%i' \(out)); \(journal ? "" : "js=1:1")
                JOURNAL_STREAM=$js \(MountedFS.binDirectory)/stowd --data-dir \(m.root)/d-\(program)-\(journal) --port 0 --log-level info > /dev/null 2>> \(out) &
                pid=$!
                for i in $(seq 1 100); do grep -q 'listening on' \(out) && break; sleep 0.1; done
                kill $pid; wait $pid
                cat \(out)
                """
            return try m.run("/bin/bash", ["-c", script]).out
        }
        let journal = try run(true, "stowd")
        let lines = journal.split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("<6>stowd: listening on http://") }, "\(journal)")
        #expect(lines.contains { $0.hasPrefix("<6>stowd: stopped") }, "\(journal)")
        #expect(lines.allSatisfy { $0.range(of: #"^<[0-7]>"#, options: .regularExpression) != nil }, "\(journal)")
        let plain = try run(false, "stowd")
        #expect(plain.contains("listening on") && !plain.split(separator: "\n").contains { $0.hasPrefix("<") }, "\(plain)")
    }

    @Test("stowfs mount --metrics serves Prometheus text: during a copy the written bytes climb scrape after scrape; then uploads, reads, cache and per-operation histograms move, and stowd's per-route histograms too")
    func metrics() throws {
        let m = MountedFS()
        defer { m.cleanup() }
        try m.startServer()
        try m.mountFS(extra: ["--metrics", "127.0.0.1:0", "--log-level", "info"])
        // The address is logged once the mount is up, which the harness may see first.
        func logged() -> String? {
            m.logText.split(separator: "\n").compactMap { line in line.range(of: "metrics at ").map { String(line[$0.upperBound...]) } }.first
        }
        for _ in 0..<100 where logged() == nil { usleep(100_000) }
        let url = try #require(logged(), "\(m.logText)")
        #expect(url.hasPrefix("http://127.0.0.1:") && url.hasSuffix("/metrics"), "\(url)")
        func scrape(_ address: String = url) throws -> [String: Double] {
            let text = try m.sh("curl -sf \(address)")
            var values: [String: Double] = [:]
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                guard let space = line.lastIndex(of: " "), let v = Double(line[line.index(after: space)...]) else { continue }
                values[String(line[..<space])] = v
            }
            return values
        }
        let before = try scrape()
        #expect(before["stowfs_queue_files"] == 0, "\(before.filter { $0.key.hasPrefix("stowfs_queue") })")

        // A copy of 30 files that takes a few seconds, both endpoints scraped while it runs: the
        // mount's written bytes climb, and so do the server's received bytes (each file is
        // uploaded once closed, while the next is written).
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/bin/sh")
        writer.arguments = ["-c", "for i in $(seq 1 30); do head -c 1048576 /dev/urandom > \(m.mountpoint)/copy-$i.bin; sleep 0.1; done"]
        try writer.run()
        var written: [Double] = []
        var received: [Double] = []
        while writer.isRunning {
            written.append(try scrape()["stowfs_written_bytes_total"] ?? 0)
            received.append(try scrape(m.endpoint + "/metrics")["stowd_bytes_received_total"] ?? 0)
            usleep(250_000)
        }
        writer.waitUntilExit()
        #expect(writer.terminationStatus == 0)
        func climbs(_ v: [Double]) -> Int { zip(v, v.dropFirst()).filter { $1 > $0 }.count }
        #expect(climbs(written) >= 3, "the mount's written bytes should climb while the copy runs: \(written)")
        #expect(climbs(received) >= 2, "the server's received bytes should climb while the copy runs: \(received)")

        _ = try m.stowfs(["sync", m.mountpoint])
        try m.sh("sync; echo 3 > /proc/sys/vm/drop_caches; cat \(m.mountpoint)/copy-*.bin > /dev/null; ls -l \(m.mountpoint) > /dev/null; cat \(m.mountpoint)/nothing-here 2>/dev/null || true")
        let after = try scrape()
        #expect((after["stowfs_written_bytes_total"] ?? 0) >= 30 * 1048576)
        #expect((after["stowfs_read_bytes_total"] ?? 0) >= 30 * 1048576, "\(after.filter { $0.key.contains("read") })")
        #expect((after["stowfs_uploads_stored_total"] ?? 0) >= 1)
        #expect((after["stowfs_uploaded_bytes_total"] ?? 0) >= 30 * 1048576)
        #expect(after["stowfs_queue_files"] == 0 && after["stowfs_queue_bytes"] == 0)
        #expect((after["stowfs_cache_misses_total"] ?? 0) + (after["stowfs_cache_hits_total"] ?? 0) > 0)
        for op in ["write", "read", "lookup", "create", "flush", "release"] {
            #expect((after["stowfs_fuse_request_duration_seconds_count{op=\"\(op)\"}"] ?? 0) >= 1, "\(op)")
        }
        // The missing file: a lookup that answered ENOENT.
        #expect((after["stowfs_fuse_errors_total{op=\"lookup\"}"] ?? 0) >= 1)
        #expect(after.keys.contains("stowfs_fuse_request_duration_seconds_bucket{op=\"write\",le=\"+Inf\"}"))
        // Only /metrics, only GET.
        #expect(try m.sh("curl -s -o /dev/null -w '%{http_code}' \(url.replacingOccurrences(of: "/metrics", with: "/other"))") == "404")
        #expect(try m.sh("curl -s -o /dev/null -w '%{http_code}' -X POST \(url)") == "405")
        // The server saw the upload: its per-route histograms moved.
        let server = try scrape(m.endpoint + "/metrics")
        let uploads = server.filter { $0.key.hasPrefix("stowd_http_request_duration_seconds_count{method=\"PUT\"") || $0.key.hasPrefix("stowd_http_request_duration_seconds_count{method=\"POST\"") }
        #expect(uploads.values.reduce(0, +) >= 2, "\(server.keys.filter { $0.hasPrefix("stowd_http") }.sorted())")
        // A port in use: the mount is refused, with the reason, and nothing is mounted.
        let port = url.split(separator: ":").last!.split(separator: "/").first!
        let other = MountedFS()
        defer { other.cleanup() }
        other.useServer(of: m)
        #expect(throws: (any Error).self) { try other.mountFS(extra: ["--metrics", "127.0.0.1:\(port)"]) }
        #expect(other.logText.contains("cannot serve metrics on 127.0.0.1:\(port)"), "\(other.logText)")
        #expect(!MountedFS.isMounted(other.mountpoint))
    }

    @Test("make install-files honours PREFIX and DESTDIR; the helper maps fstab options to flags; the systemd units verify")
    func install() throws {
        let m = MountedFS()
        defer { m.cleanup() }
        let prefix = m.root + "/prefix"
        let make = try m.run(
            "/usr/bin/make",
            ["-s", "-C", Self.repoRoot, "install-files", "PREFIX=\(prefix)", "SBINDIR=\(prefix)/sbin", "BUILD_DIR=\(MountedFS.binDirectory)"])
        try #require(make.status == 0, "\(make.out)")
        for (file, executable) in [
            ("bin/stowd", true), ("bin/stowfs", true), ("sbin/mount.fuse.stowfs", true), ("sbin/umount.fuse.stowfs", true),
            ("lib/systemd/system/stowd.service", false), ("lib/systemd/system/stowfs@.service", false), ("share/doc/stowfs/README.md", false),
            ("sbin/mount.stowfs", true), ("lib/sysusers.d/stowd.conf", false), ("share/man/man1/stowfs.1", false),
            ("share/man/man1/stowfs-mount.1", false), ("share/man/man1/stowfs-config-check.1", false), ("share/man/man8/stowd.8", false),
        ] {
            #expect(FileManager.default.fileExists(atPath: prefix + "/" + file), "\(file)")
            #expect(FileManager.default.isExecutableFile(atPath: prefix + "/" + file) == executable, "\(file)")
        }
        // Shell completions, generated from the programs' own arguments: `stowfs <TAB>` in bash
        // offers the commands.
        for file in ["bash-completion/completions/stowfs", "bash-completion/completions/stowd", "zsh/site-functions/_stowfs",
                     "zsh/site-functions/_stowd", "fish/vendor_completions.d/stowfs.fish", "fish/vendor_completions.d/stowd.fish"] {
            let text = (try? String(contentsOfFile: prefix + "/share/" + file, encoding: .utf8)) ?? ""
            #expect(text.count > 200, "\(file): \(text.prefix(200))")
        }
        let offered = try m.run(
            "/bin/bash",
            ["-c", "source \(prefix)/share/bash-completion/completions/stowfs; COMP_WORDS=(stowfs ''); COMP_CWORD=1; COMP_LINE='stowfs '; COMP_POINT=7; _stowfs stowfs '' stowfs; echo \"${COMPREPLY[@]}\""])
        for command in ["mount", "unmount", "sync", "status", "discard"] {
            #expect(offered.out.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.contains(command), "\(command): \(offered.out)")
        }
        // Man pages, made from the programs' own help: each flag is on its command's page.
        let page = try m.run("/bin/sh", ["-c", "MANWIDTH=120 man -l \(prefix)/share/man/man1/stowfs-mount.1 2>&1"])
        #expect(page.status == 0 && page.out.contains("--cache-size") && page.out.contains("stowfs mount"), "\(page.out.prefix(600))")
        let stowdPage = try m.run("/bin/sh", ["-c", "MANWIDTH=120 man -l \(prefix)/share/man/man8/stowd.8 2>&1"])
        #expect(stowdPage.out.contains("--database") && stowdPage.out.contains("--object-store"), "\(stowdPage.out.prefix(600))")
        let helper = try String(contentsOfFile: prefix + "/sbin/mount.fuse.stowfs", encoding: .utf8)
        #expect(helper.contains("\(prefix)/bin/stowfs") && !helper.contains("@BINDIR@"))

        // What the helper makes of an fstab line's options (-f: say it, do not mount).
        let fake = try m.run(
            prefix + "/sbin/mount.fuse.stowfs",
            ["photos", "/mnt/photos", "-o", "rw,_netdev,nofail,x-systemd.automount,endpoint=https://h:8420,token_file=/etc/t,ca_file=/etc/ca.pem,cache_size=2G,allow_other,ro", "-f"])
        #expect(fake.status == 0)
        #expect(
            fake.out.trimmingCharacters(in: .whitespacesAndNewlines)
                == "\(prefix)/bin/stowfs mount photos /mnt/photos --endpoint https://h:8420 --token-file /etc/t --ca-file /etc/ca.pem --cache-size 2G -o allow_other,ro")
        let missingValue = try m.run(prefix + "/sbin/mount.fuse.stowfs", ["photos", "/mnt/photos", "-o", "endpoint", "-f"])
        #expect(missingValue.status != 0 && missingValue.out.contains("needs a value"))

        // systemd reads both units (an instance of the template) and finds their programs.
        let units = prefix + "/lib/systemd/system"
        try FileManager.default.copyItem(atPath: units + "/stowfs@.service", toPath: units + "/stowfs@photos.service")
        let verify = try m.run("/usr/bin/systemd-analyze", ["verify", units + "/stowd.service", units + "/stowfs@photos.service"])
        #expect(verify.status == 0, "\(verify.out)")

        // DESTDIR stages the same tree elsewhere; paths inside name the final places.
        let dest = m.root + "/dest"
        let staged = try m.run("/usr/bin/make", ["-s", "-C", Self.repoRoot, "install-files", "DESTDIR=\(dest)", "PREFIX=/usr", "BUILD_DIR=\(MountedFS.binDirectory)"])
        #expect(staged.status == 0, "\(staged.out)")
        #expect(FileManager.default.isExecutableFile(atPath: dest + "/usr/bin/stowfs"))
        #expect(FileManager.default.isExecutableFile(atPath: dest + "/sbin/mount.fuse.stowfs"))
        #expect(try String(contentsOfFile: dest + "/usr/lib/systemd/system/stowfs@.service", encoding: .utf8).contains("ExecStart=/usr/bin/stowfs mount"))
    }

    @Test("the errors of a first mount name the problem and the fix, exit non-zero and change nothing")
    func firstMountErrors() async throws {
        let m = MountedFS()
        defer { m.cleanup() }
        try m.startServer()
        try await m.withClient { c in _ = try await c.createNamespace(try Namespace("there")) }
        let stowfs = MountedFS.binDirectory + "/stowfs"
        let mnt = m.mountpoint
        func mount(_ args: [String], env: [String: String] = [:], daemon: Bool = false) throws -> (status: Int32, out: String) {
            let prefix = env.map { "\($0.key)='\($0.value)'" }.joined(separator: " ")
            let line = "\(prefix) \(stowfs) mount " + args.map { "'\($0)'" }.joined(separator: " ") + (daemon ? "" : " --foreground")
            return try m.run("/bin/bash", ["-c", line + " 2>&1"])
        }
        let server = ["--endpoint", m.endpoint]
        let cases: [(String, () throws -> (status: Int32, out: String), [String])] = [
            ("mountpoint missing", { try mount(["there", m.root + "/nope"] + server, daemon: true) }, ["does not exist", "mkdir -p"]),
            (
                "mountpoint not empty",
                {
                    try "x".write(toFile: m.root + "/work/file", atomically: false, encoding: .utf8)
                    return try mount(["there", m.root + "/work"] + server)
                }, ["not empty", "nonempty"]
            ),
            ("server unreachable", { try mount(["there", mnt, "--endpoint", "http://127.0.0.1:1"]) }, ["cannot reach the server", "connection refused"]),
            ("token rejected", { try mount(["there", mnt] + server, env: ["STOWFS_TOKEN": "wrong"]) }, ["rejected the token", "STOWFS_TOKEN"]),
            ("no token", { try mount(["there", mnt] + server, env: ["STOWFS_TOKEN": ""]) }, ["no token", "--token-file"]),
            ("token file missing", { try mount(["there", mnt, "--token-file", m.root + "/none"] + server) }, ["token file", "does not exist"]),
            ("namespace missing", { try mount(["missing", mnt] + server) }, ["`missing` does not exist", "--create", "there"]),
            ("cache folder not writable", { try mount(["there", mnt, "--cache-dir", "/proc/1/stowfs-cache"] + server) }, ["cache folder", "--cache-dir"]),
            ("bad config file", { try mount(["there", mnt] + server, env: ["STOWFS_CONFIG": m.root + "/none.toml"]) }, ["config file", "does not exist"]),
            (
                "/dev/fuse missing",
                { try m.run("/usr/bin/unshare", ["--mount", "/bin/bash", "-c", "mount -t tmpfs none /dev && \(stowfs) mount there \(mnt) --endpoint \(m.endpoint) --foreground 2>&1"]) },
                ["/dev/fuse is missing", "modprobe fuse"]
            ),
            (
                "fuse3 not installed",
                {
                    // A private /dev/fuse anyone may open, and no fusermount3: what a non-root user meets without fuse3.
                    try m.run(
                        "/usr/bin/unshare",
                        [
                            "--mount", "/bin/bash", "-c",
                            "mount --bind /dev/null /usr/bin/fusermount3 && mount -t tmpfs none /dev && mknod -m 666 /dev/fuse c 10 229 && "
                                + "setpriv --reuid=65534 --regid=65534 --clear-groups \(stowfs) mount there \(mnt) --endpoint \(m.endpoint) --foreground 2>&1",
                        ])
                }, ["fuse3 is not installed", "apt-get install -y fuse3"]
            ),
            (
                "/dev/fuse not usable by this user",
                {
                    try m.run(
                        "/usr/bin/unshare",
                        [
                            "--mount", "/bin/bash", "-c",
                            "mount -t tmpfs none /dev && mknod -m 600 /dev/fuse c 10 229 && "
                                + "setpriv --reuid=65534 --regid=65534 --clear-groups \(stowfs) mount there \(mnt) --endpoint \(m.endpoint) --foreground 2>&1",
                        ])
                }, ["/dev/fuse is not usable by this user", "run as root"]
            ),
        ]
        for (name, run, words) in cases {
            let started = Date()
            let (status, out) = try run()
            print("\(name): \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
            #expect(status != 0, "\(name): exit status \(status)\n\(out)")
            #expect(out.contains("→"), "\(name): no fix given:\n\(out)")
            for w in words { #expect(out.contains(w), "\(name): `\(w)` not in:\n\(out)") }
            #expect(!MountedFS.isMounted(mnt), "\(name): something was mounted")
        }
        let names = try await m.withClient { c in try await c.namespaces().map(\.name) }
        #expect(names == ["there"], "no namespace was created")
    }
}
