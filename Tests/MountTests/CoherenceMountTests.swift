import Foundation
#if canImport(Glibc)
import Glibc
#endif
import StorageProtocol
import Synchronization
import Testing

/// Two mounts of one namespace (two cache folders, one server), the attribute TTL set to 300 s:
/// what mount A changes shows in mount B through the change feed, well before any TTL runs out.
@Suite("several mounts: changes are pushed")
struct CoherenceMountTests {
    static let ttl = ["--attr-ttl", "300"]
    /// Well inside the 300 s TTL, and generous for a loaded machine: in a full run other tests'
    /// loop-device filesystems stalled the disk (and a feed's answer) for 15 s once; alone, under
    /// a CPU load, each change shows within a second.
    static let within: Duration = .seconds(60)

    /// Polls `check` until it holds or `within` passes; returns how long it took, or nil.
    /// Checks once more after the time is up: a test whose thread waited out the whole time
    /// behind other tests' blocking commands (a full run) is judged on what it sees, not on the wait.
    /// A shell command printing how many GET requests the mount's server answered on `routes`
    /// (`|` between route suffixes, each matched with its closing quote), from its Prometheus counters.
    static func requestCount(_ m: MountedFS, routes: String) -> String {
        let pattern = routes.split(separator: "|").map { "\($0)\"" }.joined(separator: "|")
        return "curl -sf \(m.endpoint)/metrics | grep '^stowd_http_requests_total' | grep 'method=\"GET\"' | grep -E '\(pattern)' | awk '{s+=$NF} END {print s+0}'"
    }

    static func eventually(_ check: () throws -> Bool) async throws -> Duration? {
        let start = ContinuousClock.now
        while true {
            let expired = ContinuousClock.now - start >= within
            if try check() { return ContinuousClock.now - start }
            if expired { return nil }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    static func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

    /// An xattr's value, read with getfattr.
    static func xattr(_ m: MountedFS, _ path: String, _ name: String) -> String? {
        guard let r = try? m.run("/usr/bin/getfattr", ["--absolute-names", "--only-values", "-n", name, path]), r.status == 0 else { return nil }
        return r.out
    }

    /// What B's mount says of itself, for a failure's message.
    static func diagnosis(_ m: MountedFS) -> String {
        let status = (try? m.stowfs(["status", m.mountpoint])) ?? "(no status)"
        let log = m.logText.split(separator: "\n").suffix(40).joined(separator: "\n")
        return "\(status)\nlog:\n\(log)"
    }

    @Test("a file made, rewritten, renamed, chmodded, tagged and deleted through A shows in B, which had cached the old state")
    func everyKind() async throws {
        try await withTwoMounts(extra: Self.ttl) { a, b in
            let fm = FileManager.default
            try a.sh("mkdir \(a.mountpoint)/shared && echo one > \(a.mountpoint)/shared/f")
            _ = try a.stowfs(["sync", a.mountpoint])
            // B caches the folder, the file's attributes and its bytes (60 s TTL).
            #expect(try await Self.eventually { Self.read(b.mountpoint + "/shared/f") == "one\n" } != nil, "B never saw the file")
            _ = try b.sh("ls -l \(b.mountpoint)/shared; stat \(b.mountpoint)/shared/f; getfattr -d \(b.mountpoint)/shared/f || true")

            // Made: a new name in a folder B listed.
            try a.sh("echo new > \(a.mountpoint)/shared/g")
            _ = try a.stowfs(["sync", a.mountpoint])
            let made = try await Self.eventually { try fm.contentsOfDirectory(atPath: b.mountpoint + "/shared").contains("g") }
            #expect(made != nil, "a new file did not show in B's listing")

            // Rewritten: B reads the new bytes on its next open (close-to-open), not its cached ones.
            try a.sh("echo rewritten > \(a.mountpoint)/shared/f")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { Self.read(b.mountpoint + "/shared/f") == "rewritten\n" } != nil, "B kept the old content")
            #expect(try await Self.eventually { (try fm.attributesOfItem(atPath: b.mountpoint + "/shared/f")[.size] as? Int) == 10 } != nil)

            // chmod: seen by stat alone.
            try a.sh("chmod 640 \(a.mountpoint)/shared/f")
            let mode = try await Self.eventually { (try fm.attributesOfItem(atPath: b.mountpoint + "/shared/f")[.posixPermissions] as? Int) == 0o640 }
            #expect(mode != nil, "B's stat kept the old mode")

            // Tags (an xattr).
            try a.sh("setfattr -n user.tags -v red,blue \(a.mountpoint)/shared/f")
            let tagged = try await Self.eventually { Self.xattr(b, b.mountpoint + "/shared/f", "user.tags") == "red,blue" }
            #expect(tagged != nil, "B kept the old tags")

            // Renamed: the old name goes, the new one comes.
            try a.sh("mv \(a.mountpoint)/shared/f \(a.mountpoint)/shared/h")
            let renamed = try await Self.eventually {
                !fm.fileExists(atPath: b.mountpoint + "/shared/f") && Self.read(b.mountpoint + "/shared/h") == "rewritten\n"
            }
            #expect(renamed != nil, "B did not see the rename")

            // Deleted.
            try a.sh("rm \(a.mountpoint)/shared/g")
            let deleted = try await Self.eventually { !fm.fileExists(atPath: b.mountpoint + "/shared/g") }
            #expect(deleted != nil, "B still shows a deleted file; B: \(Self.diagnosis(b))")

            // A made all of that: its feed passed its own changes over and applied none of B's.
            let status = try a.stowfs(["status", a.mountpoint, "--json"])
            let json = try JSONSerialization.jsonObject(with: Data(status.utf8)) as? [String: Any]
            let feed = try #require(json?["feed"] as? [String: Any], "\(status)")
            #expect(feed["connected"] as? Bool == true)
            #expect((feed["echoes"] as? Int ?? 0) > 0, "\(feed)")
            #expect(feed["applied"] as? Int == 0, "A applied changes it made itself: \(feed)")
        }
    }

    @Test("a change made with the HTTP API directly (no mount) is pushed like one made through a mount")
    func apiChange() async throws {
        try await withTwoMounts(extra: Self.ttl) { a, b in
            try a.sh("echo x > \(a.mountpoint)/api.txt")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { Self.read(b.mountpoint + "/api.txt") == "x\n" } != nil)
            try await a.withClient { c in
                _ = try await c.rename(a.namespace, from: try StoragePath("api.txt"), to: try StoragePath("moved.txt"), replace: false, exchange: false)
            }
            let seen = try await Self.eventually {
                !FileManager.default.fileExists(atPath: b.mountpoint + "/api.txt") && FileManager.default.fileExists(atPath: b.mountpoint + "/moved.txt")
            }
            #expect(seen != nil, "a rename made through the API did not show in B")
        }
    }

    /// Listing requests stowd has answered so far (its Prometheus counter for the browse route).
    static func listRequests(_ m: MountedFS) throws -> Int {
        let lines = try m.sh("curl -sf \(m.endpoint)/metrics | grep '^stowd_http_requests_total' | grep '/browse\"' || true")
        return lines.split(separator: "\n").reduce(0) { $0 + Int(Double($1.split(separator: " ").last ?? "") ?? 0) }
    }

    @Test("with the feed followed, a warm ls -lR asks the server nothing; a change another client makes still shows; ls -l asks no file for SELinux labels or ACLs")
    func warmListing() async throws {
        try await withTwoMounts(extra: Self.ttl) { a, b in
            try a.sh("mkdir \(a.mountpoint)/tree && for d in 1 2 3 4 5; do mkdir \(a.mountpoint)/tree/d$d && for f in 1 2 3 4 5 6 7 8; do echo $d$f > \(a.mountpoint)/tree/d$d/f$f; done; done")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { (try? b.sh("ls \(b.mountpoint)/tree/d5 | wc -l")) == "8" } != nil)
            let cold = try b.sh("ls -lR \(b.mountpoint)/tree")
            let before = try Self.listRequests(b)
            let warm = try b.sh("ls -lR \(b.mountpoint)/tree")
            #expect(try Self.listRequests(b) == before, "a warm listing asked the server again")
            #expect(warm == cold)
            // Another client adds a file to a folder B listed: B's next listing has it.
            try a.sh("echo new > \(a.mountpoint)/tree/d3/added")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { (try? b.sh("ls \(b.mountpoint)/tree/d3")).map { $0.contains("added") } == true } != nil, "B's cached listing hid A's new file")
            // Only user.* names exist: security.* and system.* answer ENOTSUP (not ENODATA), which
            // `ls -l` remembers for the whole mount instead of asking every file.
            for name in ["security.selinux", "system.posix_acl_access"] {
                let said = try b.sh("getfattr -n \(name) \(b.mountpoint)/tree/d1/f1 2>&1 || true")
                #expect(said.contains("Operation not supported"), "getfattr -n \(name): \(said)")
            }
        }
    }

    @Test("with the feed followed, a listing stands past the TTL: ls and new names in a listed folder ask the server nothing; another client's file still shows")
    func listingHeldByFeed() async throws {
        try await withTwoMounts(extra: ["--attr-ttl", "1"]) { a, b in
            try a.sh("mkdir \(a.mountpoint)/held && for f in 1 2 3; do echo $f > \(a.mountpoint)/held/f$f; done")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { (try? b.sh("ls \(b.mountpoint)/held | wc -l")) == "3" } != nil)
            // B lists the folder once more, after the feed brought A's last changes (which expire
            // a listing taken before they came). Then, from inside the folder (so that the folder's
            // own name, whose attributes do expire, is not looked up again), past B's TTL: 30 new
            // names, a listing, and lookups of the names it had (their TTL ran out too), with the
            // server's count of name requests read before and after.
            try await Task.sleep(for: .seconds(1))
            _ = try b.sh("ls \(b.mountpoint)/held")
            let count = Self.requestCount(b, routes: "/browse|/files/[*][*]")
            let browse = Self.requestCount(b, routes: "/browse")
            let counts = try b.sh("cd \(b.mountpoint)/held && sleep 2 && x=$(\(browse)) && a=$(\(count)) && stat -c %s f1 f2 f3 > /dev/null && for i in $(seq 1 30); do : > new$i; done && ls > /dev/null && echo $a $(\(count)) browse $x $(\(browse))")
            let pair = counts.split(separator: " ").prefix(2)
            #expect(pair.count == 2 && pair[0] == pair[1], "a lookup or a listing asked the server (requests before and after, then listings before and after: \(counts))")
            #expect(try b.sh("ls \(b.mountpoint)/held | wc -l") == "33")
            // Another client's new name still shows in B.
            try a.sh("echo new > \(a.mountpoint)/held/fromA")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { (try? b.sh("ls \(b.mountpoint)/held")).map { $0.contains("fromA") } == true } != nil, "B's held listing hid A's new file")
            try await Task.sleep(for: .seconds(2))
            #expect(try b.sh("cat \(b.mountpoint)/held/fromA") == "new")
        }
    }

    @Test("a file another mount rewrote shows its new size in ls -l of a folder the feed holds, at once and from the kept tree of B's next mount; a new name shows too")
    func keptTreeKeepsWhatTheFeedNamed() async throws {
        try await withTwoMounts(extra: Self.ttl) { a, b in
            try await Task.sleep(for: .seconds(1))
            try a.sh("mkdir \(a.mountpoint)/k \(a.mountpoint)/l \(a.mountpoint)/n && for d in k l; do echo one > \(a.mountpoint)/$d/f; echo two > \(a.mountpoint)/$d/g; done && echo x > \(a.mountpoint)/n/x")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { (try? b.sh("ls \(b.mountpoint)/k \(b.mountpoint)/l \(b.mountpoint)/n | wc -l")) == "10" } != nil)
            // B lists the folders and reads the sizes once the feed brought A's changes.
            try await Task.sleep(for: .seconds(1))
            #expect(try b.sh("ls -l \(b.mountpoint)/k \(b.mountpoint)/l \(b.mountpoint)/n > /dev/null && stat -c %s \(b.mountpoint)/k/f \(b.mountpoint)/l/f") == "4\n4")
            // A rewrites both f (their inodes change; the folders' names do not) and adds a name
            // to n. B's feed names all three.
            func applied() -> Int? {
                guard let text = try? b.stowfs(["status", b.mountpoint]), let r = text.range(of: " change(s) of others applied") else { return nil }
                return Int(text[..<r.lowerBound].split(separator: " ").last ?? "")
            }
            let before = applied() ?? -1
            try a.sh("echo a-longer-line > \(a.mountpoint)/k/f && echo a-longer-line > \(a.mountpoint)/l/f && echo three > \(a.mountpoint)/n/h")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { (applied() ?? -1) >= before + 3 } != nil, "B's feed did not bring A's changes: \(Self.diagnosis(b))")
            // Now: `ls -l` of l, still held by the feed, shows f's new size — also once the kernel
            // forgot f (its inode made afresh from the listing, which gave the old size).
            let listed = try b.sh("sync && echo 2 > /proc/sys/vm/drop_caches && ls -l \(b.mountpoint)/l | awk '$NF == \"f\" {print $5}'")
            #expect(listed == "14", "ls -l of a held folder showed a rewritten file's old size: \(listed)")
            // B reads nothing of k or n again before its clean unmount; then mounts again.
            try b.unmountFS()
            try b.mountFS(extra: Self.ttl)
            // k was kept as listed (no listing asked), but f's attributes were not: its new size.
            let browse = Self.requestCount(b, routes: "/browse")
            let counts = try b.sh("x=$(\(browse)) && ls \(b.mountpoint)/k > /dev/null && echo $x $(\(browse))").split(separator: " ")
            #expect(counts.count == 2 && counts[0] == counts[1], "k's kept listing was not used: \(counts)")
            #expect(try b.sh("ls -l \(b.mountpoint)/k | awk '$NF == \"f\" {print $5}'") == "14", "B's kept tree showed f's size from before A's rewrite")
            #expect(try b.sh("stat -c %s \(b.mountpoint)/k/f") == "14")
            #expect(try b.sh("cat \(b.mountpoint)/k/f") == "a-longer-line")
            #expect(try b.sh("ls \(b.mountpoint)/n") == "h\nx", "B's kept tree hid A's new name")
        }
    }

    @Test("the kernel forgetting what a listing the feed holds names (drop_caches) costs no request: the next ls -l and stat are answered by the mount")
    func heldListingOutlivesForget() async throws {
        try await withTwoMounts(extra: ["--attr-ttl", "1"]) { a, b in
            try a.sh("mkdir \(a.mountpoint)/kept && for f in 1 2 3; do echo $f > \(a.mountpoint)/kept/f$f; done")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { (try? b.sh("ls \(b.mountpoint)/kept | wc -l")) == "3" } != nil)
            // After the feed brought A's last changes: B lists the root and the folder (readdirplus:
            // the kernel takes each name), then the kernel drops every unused entry and forgets
            // their inodes. Before, the mount let those records go with them, and a listing
            // answers only while each name it has has one: the next `ls -l` asked the server.
            try await Task.sleep(for: .seconds(1))
            _ = try b.sh("ls -l \(b.mountpoint) > /dev/null && ls -l \(b.mountpoint)/kept > /dev/null")
            let count = Self.requestCount(b, routes: "/browse|/files/[*][*]")
            let counts = try b.sh(
                "x=$(\(count)) && sync && echo 2 > /proc/sys/vm/drop_caches && ls -l \(b.mountpoint)/kept > /dev/null && stat -c %s \(b.mountpoint)/kept/f1 > /dev/null && echo $x $(\(count))")
            let pair = counts.split(separator: " ")
            #expect(pair.count == 2 && pair[0] == pair[1], "the listing or a lookup asked the server after the kernel forgot the names (requests before and after: \(counts))")
            #expect(try b.sh("cat \(b.mountpoint)/kept/f2") == "2")
        }
    }

    @Test("a descriptor B holds open reads A's new content once the change is pushed, each read whole in one version")
    func heldDescriptor() async throws {
        try await withTwoMounts(extra: Self.ttl) { a, b in
            try a.sh("echo first > \(a.mountpoint)/held")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { Self.read(b.mountpoint + "/held") == "first\n" } != nil)
            let fd = Glibc.open(b.mountpoint + "/held", O_RDONLY)
            try #require(fd >= 0)
            defer { Glibc.close(fd) }
            func pread0() -> String {
                var buffer = [UInt8](repeating: 0, count: 64)
                let n = buffer.withUnsafeMutableBytes { Glibc.pread(fd, $0.baseAddress, 64, 0) }
                return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : ""
            }
            #expect(pread0() == "first\n")
            try a.sh("echo the-second-version > \(a.mountpoint)/held")
            _ = try a.stowfs(["sync", a.mountpoint])
            var seen: [String] = []
            let took = try await Self.eventually {
                let text = pread0()
                if seen.last != text { seen.append(text) }
                return text == "the-second-version\n"
            }
            #expect(took != nil, "the held descriptor kept reading \(seen)")
            #expect(seen.allSatisfy { $0 == "first\n" || $0 == "the-second-version\n" }, "a read mixed the versions: \(seen)")
        }
    }

    /// What the readers of `heldDescriptorGrowing` share.
    final class GrowingReads: Sendable {
        let stop = Atomic<Bool>(false)
        let reads = Atomic<Int>(0)
        let torn = Mutex<[String]>([])
    }

    /// Version `n` of `heldDescriptorGrowing`'s file: n+1 digits n and a newline, each longer than the one before.
    static func growingVersion(_ n: Int) -> String { String(repeating: String(n % 10), count: n + 1) + "\n" }

    static func pread(_ fd: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = buffer.withUnsafeMutableBytes { Glibc.pread(fd, $0.baseAddress, 256, 0) }
        return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : ""
    }

    /// `count` threads reading `fd` from its start until `shared.stop`, noting each read that is not in `whole`.
    static func startReaders(_ count: Int, fd: Int32, whole: Set<String>, _ shared: GrowingReads) {
        for _ in 0..<count {
            Thread {
                while !shared.stop.load(ordering: .relaxed) {
                    let text = pread(fd)
                    shared.reads.add(1, ordering: .relaxed)
                    if !whole.contains(text) { shared.torn.withLock { if $0.count < 10 { $0.append(text) } } }
                }
            }.start()
        }
    }

    @Test("readers of a descriptor B holds open, reading all the time while A makes the file longer and longer, each read one whole version (a read under way when a change came was once cut at the old size)")
    func heldDescriptorGrowing() async throws {
        try await withTwoMounts(extra: Self.ttl) { a, b in
            let versions = 24
            try a.sh("printf '\(Self.growingVersion(0))' > \(a.mountpoint)/grows")
            _ = try a.stowfs(["sync", a.mountpoint])
            #expect(try await Self.eventually { Self.read(b.mountpoint + "/grows") == Self.growingVersion(0) } != nil)
            let fd = Glibc.open(b.mountpoint + "/grows", O_RDONLY)
            try #require(fd >= 0)
            defer { Glibc.close(fd) }
            let whole = Set((0..<versions).map(Self.growingVersion))
            let shared = GrowingReads()
            Self.startReaders(3, fd: fd, whole: whole, shared)
            for n in 1..<versions {
                try a.sh("printf '\(Self.growingVersion(n))' > \(a.mountpoint)/grows")
                _ = try a.stowfs(["sync", a.mountpoint])
                _ = try await Self.eventually { Self.pread(fd) == Self.growingVersion(n) }
            }
            shared.stop.store(true, ordering: .relaxed)
            try await Task.sleep(for: .milliseconds(100))
            #expect(shared.reads.load(ordering: .relaxed) > versions, "the readers read")
            let torn = shared.torn.withLock { $0 }
            // A version padded with zeros to a later size: the kernel, taking a new size
            // (fuse_change_attributes), writes it before it drops the old pages, and a read in
            // between copies the old page up to the new size. Not the mount's to prevent; known.
            let padded = torn.filter { t in whole.contains(where: { v in t.count > v.count && t.hasPrefix(v) && t.dropFirst(v.count).allSatisfy { $0 == "\0" } }) }
            let cut = torn.filter { !padded.contains($0) }
            #expect(cut.isEmpty, "reads that were not one whole version (a new one cut at the old size?): \(cut)")
            withKnownIssue("the kernel sets a file's new size before it drops its old pages: a read in between gets the old version padded with zeros", isIntermittent: true) {
                #expect(padded.isEmpty, "old versions padded with zeros: \(padded)")
            }
            #expect(Self.pread(fd) == Self.growingVersion(versions - 1), "the held descriptor reads the last version")
        }
    }

    /// Two processes, one on each mount, race `open(O_CREAT|O_EXCL)` of one new name, `rounds`
    /// times (a barrier starts each round); prints one line per round: who won.
    static let exclusiveRace = #"""
        import multiprocessing as mp, os, sys
        a, b, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
        def racer(root, barrier, out):
            wins = []
            for i in range(rounds):
                barrier.wait()
                try:
                    fd = os.open(os.path.join(root, "race", "n%d" % i), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                    os.write(fd, root.encode())
                    os.close(fd)
                    wins.append(1)
                except FileExistsError:
                    wins.append(0)
            out.put((root, wins))
        barrier, out = mp.Barrier(2), mp.Queue()
        ps = [mp.Process(target=racer, args=(r, barrier, out)) for r in (a, b)]
        for p in ps: p.start()
        got = dict(out.get() for _ in ps)
        for p in ps: p.join()
        for i in range(rounds):
            print(got[a][i], got[b][i])
        """#

    @Test("O_CREAT|O_EXCL of one name from two processes on two mounts: exactly one wins, 100 times in a row; a lock file made in A refuses B")
    func exclusiveCreate() async throws {
        try await withTwoMounts(extra: Self.ttl) { a, b in
            try a.sh("mkdir \(a.mountpoint)/race")
            // B lists the folder first: it has cached it empty, so only the server can say no.
            #expect(try FileManager.default.contentsOfDirectory(atPath: b.mountpoint + "/race") == [])
            let script = a.root + "/race.py"
            try Self.exclusiveRace.write(toFile: script, atomically: true, encoding: .utf8)
            let out = try a.sh("python3 \(script) \(a.mountpoint) \(b.mountpoint) 100")
            let rounds = out.split(separator: "\n").map { $0.split(separator: " ").compactMap { Int($0) } }
            #expect(rounds.count == 100, "\(out)")
            let notOne = rounds.enumerated().filter { $0.element.reduce(0, +) != 1 }
            #expect(notOne.isEmpty, "rounds without exactly one winner: \(notOne)")
            let aWins = rounds.filter { $0.first == 1 }.count
            // Each round's file holds its winner's mount path, on the server as in both mounts.
            _ = try a.stowfs(["sync", a.mountpoint])
            _ = try b.stowfs(["sync", b.mountpoint])
            for (i, r) in rounds.enumerated().prefix(10) {
                let winner = r.first == 1 ? a.mountpoint : b.mountpoint
                #expect(String(decoding: try await a.storedBytes("race/n\(i)"), as: UTF8.self) == winner)
            }
            print("exclusive create: A won \(aWins) of 100 rounds")

            // A lock file as shell scripts make one (noclobber opens with O_EXCL).
            try a.sh("set -C; echo a > \(a.mountpoint)/race/lock")
            _ = try b.sh("set -C; echo b > \(b.mountpoint)/race/lock", expectFailure: true)
            // B's refused create forgot the name (the kernel's entry is invalidated by a
            // notification): a read that finds nothing is tried again for a few seconds. Once
            // read, it is A's, empty or written. (A local CI run under load once read nothing
            // here, with no value to show: the value is printed now.)
            var seen = Self.read(b.mountpoint + "/race/lock")
            for _ in 0..<50 where seen == nil {
                try await Task.sleep(for: .milliseconds(100))
                seen = Self.read(b.mountpoint + "/race/lock")
            }
            #expect(seen == "a\n" || seen == "", "B's lock file: \(String(describing: seen))")
        }
    }
}
