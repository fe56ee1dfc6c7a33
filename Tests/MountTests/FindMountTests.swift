import Foundation
import StorageProtocol
import Testing

/// `stowfs find` (issue 18), against a real mount and a real stowd: the server's search plus the
/// files still in the mount's queue.
@Suite("stowfs find", .serialized)
struct FindMountTests {
    /// The paths `stowfs find` prints, relative to the mountpoint, sorted.
    static func find(_ m: MountedFS, _ args: [String]) throws -> [String] {
        let out = try m.stowfs(["find", m.mountpoint] + args)
        return out.split(separator: "\n").map { String($0.dropFirst(m.mountpoint.count + 1)) }.sorted()
    }

    @Test("by tag, type, name, folder, size and metadata; --print0 keeps a name with a newline whole; bad options say what is wrong")
    func filters() async throws {
        try await withMount { m in
            let mp = m.mountpoint
            try m.sh(
                """
                mkdir -p \(mp)/photos/2026 \(mp)/docs
                echo a > \(mp)/photos/a.jpg && echo b > \(mp)/photos/2026/b.png && echo n > \(mp)/docs/n.txt
                head -c 2097152 /dev/zero > \(mp)/docs/big.bin
                printf 'x' > "\(mp)/docs/odd
                name.txt"
                setfattr -n user.tags -v holiday,sea \(mp)/photos/a.jpg
                setfattr -n user.tags -v holiday \(mp)/photos/2026/b.png
                setfattr -n user.stow.content-type -v image/x-raw \(mp)/docs/big.bin
                setfattr -n user.owner -v alice \(mp)/docs/n.txt
                setfattr -n user.tags -v odd "\(mp)/docs/odd
                name.txt"
                """)
            _ = try m.stowfs(["sync", mp])
            #expect(try Self.find(m, ["--tag", "holiday"]) == ["photos/2026/b.png", "photos/a.jpg"])
            #expect(try Self.find(m, ["--tag", "holiday", "--tag", "sea"]) == ["photos/a.jpg"])
            #expect(try Self.find(m, ["--type", "image/*"]) == ["docs/big.bin", "photos/2026/b.png", "photos/a.jpg"])
            #expect(try Self.find(m, ["photos", "--name", "*.png"]) == ["photos/2026/b.png"])
            #expect(try Self.find(m, [mp + "/photos/2026", "--tag", "holiday"]) == ["photos/2026/b.png"])
            #expect(try Self.find(m, ["--larger", "1M"]) == ["docs/big.bin"])
            #expect(try Self.find(m, ["--meta", "owner=alice"]) == ["docs/n.txt"])
            #expect(try Self.find(m, ["--folders", "--name", "2*"]) == ["photos/2026"])
            #expect(try m.stowfs(["find", mp, "--newer", "1h", "--smaller", "2", "--print0"]) == mp + "/docs/odd\nname.txt\0")
            #expect(try Self.find(m, ["--older", "1h"]).isEmpty)

            // NUL-separated: the name with a newline in it comes out whole, and xargs -0 takes it.
            let zero = try m.sh("\(MountedFS.binDirectory)/stowfs find \(mp) --tag odd --print0 | xargs -0 cat")
            #expect(zero == "x")

            for (args, says) in [
                (["--status", "stowed"], "--status"), (["--type", "image"], "type"), (["--public", "--private"], "exclude"),
                (["--larger", "big"], "--larger"), (["--newer", "yesterday"], "--newer"), (["--newer", "99999999999d"], "--newer"), (["nowhere"], "`nowhere` does not exist"),
            ] {
                let (status, out) = try m.run(MountedFS.binDirectory + "/stowfs", ["find", mp] + args)
                #expect(status != 0 && out.contains(says), "\(args): \(status) \(out)")
            }
        }
    }

    @Test("files still in the queue are found with their status: pending while paused, stored once sent, never twice")
    func queued() async throws {
        try await withMount { m in
            let mp = m.mountpoint
            try m.sh("echo old > \(mp)/old.txt && setfattr -n user.tags -v trip \(mp)/old.txt")
            _ = try m.stowfs(["sync", mp])
            _ = try m.stowfs(["pause", mp])
            try m.sh(
                """
                echo new > \(mp)/new.txt && setfattr -n user.tags -v trip \(mp)/new.txt
                echo changed > \(mp)/old.txt
                echo other > \(mp)/other.txt
                """)
            #expect(try Self.find(m, ["--status", "pending"]) == ["new.txt", "old.txt", "other.txt"])
            #expect(try Self.find(m, ["--status", "pending", "--tag", "trip"]) == ["new.txt", "old.txt"])
            #expect(try Self.find(m, ["--tag", "trip"]) == ["new.txt", "old.txt"], "any status: each file once")
            #expect(try Self.find(m, ["--status", "stored"]).isEmpty, "old.txt has a change owed: not `stored`")
            #expect(try Self.find(m, ["--status", "uploading"]).isEmpty)
            _ = try m.stowfs(["resume", mp])
            _ = try m.stowfs(["sync", mp])
            #expect(try Self.find(m, ["--status", "pending"]).isEmpty)
            #expect(try Self.find(m, ["--status", "stored", "--tag", "trip"]) == ["new.txt", "old.txt"])
        }
    }
}
