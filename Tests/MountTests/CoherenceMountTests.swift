import Foundation
import StorageProtocol
import Testing

/// Two mounts of one namespace (two cache folders, one server), the attribute TTL set to 60 s:
/// what mount A changes shows in mount B through the change feed, well before any TTL runs out.
@Suite("several mounts: changes are pushed")
struct CoherenceMountTests {
    static let ttl = ["--attr-ttl", "60"]
    /// Well inside the 60 s TTL, and generous for a loaded machine.
    static let within: Duration = .seconds(10)

    /// Polls `check` until it holds or `within` passes; returns how long it took, or nil.
    static func eventually(_ check: () throws -> Bool) async throws -> Duration? {
        let start = ContinuousClock.now
        while ContinuousClock.now - start < within {
            if try check() { return ContinuousClock.now - start }
            try await Task.sleep(for: .milliseconds(20))
        }
        return nil
    }

    static func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

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
            let tagged = try await Self.eventually {
                try b.run("/usr/bin/getfattr", ["--absolute-names", "--only-values", "-n", "user.tags", b.mountpoint + "/shared/f"]).out == "red,blue"
            }
            #expect(tagged != nil, "B kept the old tags")

            // Renamed: the old name goes, the new one comes.
            try a.sh("mv \(a.mountpoint)/shared/f \(a.mountpoint)/shared/h")
            let renamed = try await Self.eventually {
                !fm.fileExists(atPath: b.mountpoint + "/shared/f") && Self.read(b.mountpoint + "/shared/h") == "rewritten\n"
            }
            #expect(renamed != nil, "B did not see the rename")

            // Deleted.
            try a.sh("rm \(a.mountpoint)/shared/g")
            #expect(try await Self.eventually { !fm.fileExists(atPath: b.mountpoint + "/shared/g") } != nil, "B still shows a deleted file")

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
}
