import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Testing

@Suite("mount: reading, listing, renaming, removing", .serialized)
struct ReadMountTests {
    @Test("a file stored on the server reads back whole, cold after a remount and warm after")
    func read() async throws {
        try await withMount { m in
            let local = try await storeDirectly(m, bytes: 20_000_000, at: "remote/data.bin")
            #expect(try m.sh("sha256sum < \(m.mountpoint)/remote/data.bin | cut -d' ' -f1") == local)
            try m.unmountFS()
            try m.mountFS()
            try m.sh("sync; echo 3 > /proc/sys/vm/drop_caches")
            #expect(try m.sh("sha256sum < \(m.mountpoint)/remote/data.bin | cut -d' ' -f1") == local)
            #expect(try m.sh("sha256sum < \(m.mountpoint)/remote/data.bin | cut -d' ' -f1") == local)
            // Random reads at odd offsets.
            for offset in [0, 1, 4095, 1_048_575, 1_048_576, 7_777_777, 19_999_990] {
                let a = try m.sh("dd if=data.bin bs=1 skip=\(offset) count=10 status=none | od -An -tx1")
                let b = try m.sh("dd if=\(m.mountpoint)/remote/data.bin bs=1 skip=\(offset) count=10 status=none | od -An -tx1")
                #expect(a == b, "offset \(offset)")
            }
        }
    }

    @Test("a cold sequential read fetches every byte once, even with two readers at the same time")
    func fetchedOnce() async throws {
        try await withMount { m in
            let local = try await storeDirectly(m, bytes: 48_000_000, at: "data.bin")
            for readers in [1, 2] {
                try m.unmountFS()
                // Cold: the block cache a clean unmount keeps (S8a) is dropped.
                try FileManager.default.removeItem(atPath: m.cacheDirectory + "/blocks")
                // Through HTTP and the block cache (not the server's own file, `localReadsInPlace`).
                try m.mountFS(extra: ["--no-local-reads"])
                try m.sh("sync; echo 3 > /proc/sys/vm/drop_caches")
                let before = try bytesSent(m)
                let sums = try m.sh((0..<readers).map { _ in "(sha256sum < \(m.mountpoint)/data.bin | cut -d' ' -f1) &" }.joined(separator: " ") + " wait")
                #expect(sums.split(separator: "\n").map(String.init) == Array(repeating: local, count: readers))
                // Read-ahead and the reads it serves share each block's fetch: no byte comes twice.
                #expect(try bytesSent(m) - before == 48_000_000, "\(readers) reader(s)")
            }
        }
    }

    @Test("a file of a stowd on this machine is read from the server's own blob file: no byte through HTTP, none into the cache; a new version is read as it comes; the next mount reads it without asking, also with the server away")
    func localReadsInPlace() async throws {
        try await withMount { m in
            let mp = m.mountpoint
            let first = try await storeDirectly(m, bytes: 8_000_000, at: "big/data.bin")
            try m.unmountFS()
            try FileManager.default.removeItem(atPath: m.cacheDirectory + "/blocks")
            try m.mountFS()
            try m.sh("sync; echo 3 > /proc/sys/vm/drop_caches")
            let sent = try bytesSent(m), inPlace = try localReads(m)
            #expect(try m.sh("sha256sum < \(mp)/big/data.bin | cut -d' ' -f1") == first)
            #expect(try bytesSent(m) == sent, "no byte of the file came through HTTP")
            #expect(try localReads(m) > inPlace, "the server gave the blob file's path (once; more only if reads raced to ask)")
            let status = try m.stowfs(["status", mp])
            #expect(status.contains("reads in place on, 1 server file(s) read so"), "\(status)")
            let cached = Int(try m.sh("du -sb \(m.cacheDirectory)/blocks | cut -f1")) ?? -1
            #expect(cached >= 0 && cached < 1_000_000, "the block cache holds \(cached) bytes")
            for offset in [0, 1, 4095, 1_048_575, 1_048_576, 7_999_990] {
                let a = try m.sh("dd if=data.bin bs=1 skip=\(offset) count=10 status=none | od -An -tx1")
                let b = try m.sh("dd if=\(mp)/big/data.bin bs=1 skip=\(offset) count=10 status=none | od -An -tx1")
                #expect(a == b, "offset \(offset)")
            }
            // Written to in place: the copy to write into comes from the server's file, not HTTP.
            let appended = try m.sh("cp data.bin appended.bin && echo tail >> appended.bin && sha256sum < appended.bin | cut -d' ' -f1")
            try m.sh("echo tail >> \(mp)/big/data.bin")
            #expect(try bytesSent(m) == sent, "the local copy came from the blob file")
            _ = try m.stowfs(["sync", mp])
            #expect(try await m.storedSHA256("big/data.bin") == appended)
            #expect(try m.sh("sha256sum < \(mp)/big/data.bin | cut -d' ' -f1") == appended)
            // Another version, stored by someone else: read once the mount hears of it.
            let second = try await storeDirectly(m, bytes: 6_000_000, at: "big/data.bin")
            var seen = ""
            for _ in 0..<100 {
                seen = try m.sh("sha256sum < \(mp)/big/data.bin | cut -d' ' -f1")
                if seen == second { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(seen == second, "the new version is read")
            // The next mount opens the file it read without asking, also while the server is away.
            try m.unmountFS()
            #expect(FileManager.default.fileExists(atPath: m.cacheDirectory + "/local-blobs.json"))
            let port = m.port
            m.stopServer()
            try m.mountFS()
            try m.sh("sync; echo 3 > /proc/sys/vm/drop_caches")
            #expect(try m.sh("sha256sum < \(mp)/big/data.bin | cut -d' ' -f1") == second, "read with the server away")
            m.port = port
            try m.startServer()
            try m.unmountFS()
        }
    }

    /// How many downloads stowd answered with a blob file's path (its Prometheus counter).
    func localReads(_ m: MountedFS) throws -> Int {
        let line = try m.sh("curl -sf \(m.endpoint)/metrics | grep '^stowd_local_reads_total' || echo 'x 0'")
        return Int(Double(line.split(separator: " ").last ?? "") ?? -1)
    }

    /// Puts `bytes` random bytes on the server at `path` directly, not through the mount (a copy
    /// stays in the work folder as data.bin); returns their SHA-256.
    func storeDirectly(_ m: MountedFS, bytes: Int, at path: String) async throws -> String {
        try m.sh("head -c \(bytes) /dev/urandom > data.bin")
        try await m.withClient { c in
            _ = try await c.upload(.file(path: m.root + "/work/data.bin"), size: Int64(bytes), to: m.namespace, try StoragePath(path))
        }
        return try m.sh("sha256sum < data.bin | cut -d' ' -f1")
    }

    /// Bytes stowd has sent so far (its Prometheus counter).
    func bytesSent(_ m: MountedFS) throws -> Int {
        let line = try m.sh("curl -sf \(m.endpoint)/metrics | grep '^stowd_bytes_sent_total'")
        return Int(Double(line.split(separator: " ").last ?? "") ?? -1)
    }

    @Test("ls -l of a folder of 2,000 files, made through the server, lists every one with its size")
    func listing() async throws {
        try await withMount { m in
            try await m.withClient { c in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for batch in 0..<8 {
                        group.addTask {
                            for i in stride(from: batch, to: 2000, by: 8) {
                                let body = String(repeating: "x", count: i % 50)
                                _ = try await c.upload(.bytes(ByteBuffer(string: body)), size: Int64(body.utf8.count), to: m.namespace, try StoragePath(String(format: "many/f%04d.txt", i)))
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            #expect(try m.sh("ls \(m.mountpoint)/many | wc -l") == "2000")
            // Every name once, each with its own size (readdirplus pages: the kernel reads a
            // big folder a buffer at a time, each from where the last one stopped).
            let listed = try m.sh("ls -l \(m.mountpoint)/many | awk 'NR>1 {print $9, $5}'")
            let expected = (0..<2000).map { String(format: "f%04d.txt %d", $0, $0 % 50) }.joined(separator: "\n")
            #expect(listed == expected)
            #expect(try m.sh("find \(m.mountpoint)/many -type f | wc -l") == "2000")
        }
    }

    @Test("mkdir -p, empty folders, rmdir, rm -r — and they stay that way after a remount")
    func folders() async throws {
        try await withMount { m in
            let d = m.mountpoint
            try m.sh("mkdir -p \(d)/a/b/c && mkdir \(d)/empty && echo x > \(d)/a/b/c/f")
            try m.sh("rmdir \(d)/a/b 2>&1", expectFailure: true)
            #expect(try m.sh("rmdir \(d)/a/b 2>&1 || true").contains("not empty"))
            try m.sh("mkdir -p \(d)/gone/x && echo y > \(d)/gone/x/y && rm -r \(d)/gone")
            try m.unmountFS()
            try m.mountFS()
            #expect(try m.sh("cd \(d) && find . | sort") == ".\n./a\n./a/b\n./a/b/c\n./a/b/c/f\n./empty")
        }
    }

    @Test("mv of files and whole folders, over existing files, across folders")
    func rename() async throws {
        try await withMount { m in
            let d = m.mountpoint
            try m.sh("mkdir -p \(d)/src/sub && echo 1 > \(d)/src/sub/one && echo 2 > \(d)/two && echo 3 > \(d)/three")
            try m.stowfs(["sync", d])
            try m.sh("mv \(d)/src \(d)/dst && mv \(d)/two \(d)/dst/sub/ && mv -f \(d)/three \(d)/dst/sub/one")
            #expect(try m.sh("cd \(d) && find . -type f | sort | xargs -n1 sh -c 'echo $0 $(cat $0)'") == "./dst/sub/one 3\n./dst/sub/two 2")
            try m.stowfs(["sync", d])
            try m.unmountFS()
            try m.mountFS()
            #expect(try m.sh("cd \(d) && find . -type f | sort | xargs -n1 sh -c 'echo $0 $(cat $0)'") == "./dst/sub/one 3\n./dst/sub/two 2")
            #expect(try m.sh("ls \(d)") == "dst")
        }
    }

    @Test("names: a 256-byte name is ENAMETOOLONG; odd characters round-trip")
    func names() async throws {
        try await withMount { m in
            let long = String(repeating: "n", count: 256)
            #expect(try m.sh("touch \(m.mountpoint)/\(long) 2>&1 || true").contains("File name too long"))
            let odd = "sp ace?&#%ü€"
            try m.sh("echo ok > '\(m.mountpoint)/\(odd)'")
            try m.stowfs(["sync", m.mountpoint])
            try m.unmountFS()
            try m.mountFS()
            #expect(try m.sh("cat '\(m.mountpoint)/\(odd)'") == "ok")
        }
    }
}
