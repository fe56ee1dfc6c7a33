import Foundation
import StorageClient
import Testing

@Suite("mount: writing with real tools", .serialized)
struct WriteMountTests {
    @Test("cp of a file and cp -r of a tree produce exactly the bytes a local disk has, on the server too")
    func copy() async throws {
        try await withMount { m in
            try m.sh("head -c 3000000 /dev/urandom > big.bin && mkdir -p tree/a/b && for i in $(seq 1 40); do head -c $((i*97)) /dev/urandom > tree/a/f$i; done && echo hi > tree/a/b/deep.txt && mkdir tree/empty")
            try m.sh("cp big.bin \(m.mountpoint)/ && cp -r tree \(m.mountpoint)/")
            try m.sh("cmp big.bin \(m.mountpoint)/big.bin && diff -r tree \(m.mountpoint)/tree")
            try m.stowfs(["sync", m.mountpoint])
            let local = try m.sh("sha256sum big.bin | cut -d' ' -f1")
            #expect(try await m.storedSHA256("big.bin") == local)
            #expect(try await m.storedSHA256("tree/a/b/deep.txt") == (try m.sh("sha256sum tree/a/b/deep.txt | cut -d' ' -f1")))
            // Remounted: the same tree, empty folder included.
            try m.unmountFS()
            try m.mountFS()
            try m.sh("diff -r tree \(m.mountpoint)/tree && test -d \(m.mountpoint)/tree/empty && cmp big.bin \(m.mountpoint)/big.bin")
        }
    }

    @Test("cp -r of 300 small files: all on the server byte for byte, sent several to a request")
    func smallFilesBatched() async throws {
        try await withMount { m in
            try m.sh("mkdir many && for i in $(seq 1 300); do head -c $(( (i * 37) % 9000 )) /dev/urandom > many/f$i; done")
            func uploadRequests() throws -> Int {
                let lines = try m.sh("curl -sf \(m.endpoint)/metrics | grep '^stowd_http_requests_total' | grep -E 'upload/(batch|direct|start)' || true")
                return lines.split(separator: "\n").reduce(0) { $0 + (Int(Double($1.split(separator: " ").last ?? "") ?? 0)) }
            }
            let before = try uploadRequests()
            try m.sh("cp -r many \(m.mountpoint)/")
            try m.stowfs(["sync", m.mountpoint])
            let requests = try uploadRequests() - before
            #expect(requests >= 1 && requests < 300, "\(requests) upload requests for 300 files")
            #expect(try await m.storedSHA256("many/f7") == (try m.sh("sha256sum many/f7 | cut -d' ' -f1")))
            // Remounted (the local copies are gone): every file comes from the server.
            try m.unmountFS()
            try m.mountFS()
            try m.sh("diff -r many \(m.mountpoint)/many")
        }
    }

    @Test("rm -rf of a tree: gone from the mount at once, and from the server when rm returns")
    func removeTree() async throws {
        try await withMount { m in
            try m.sh("mkdir -p tree/a/b tree/c && for i in $(seq 1 100); do echo $i > tree/a/f$i; echo $i > tree/c/g$i; done && echo deep > tree/a/b/deep")
            try m.sh("cp -r tree \(m.mountpoint)/ && mkdir \(m.mountpoint)/keep && echo kept > \(m.mountpoint)/keep/k")
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedSHA256("tree/c/g7") != nil)
            try m.sh("rm -rf \(m.mountpoint)/tree")
            #expect(try m.sh("ls -A \(m.mountpoint)") == "keep")
            // fsync of a folder (it now syncs the journal, whose unlink records are not synced one
            // by one): it answers, and what it removed stays removed. That it reaches the disk
            // cannot be seen without a power cut; JournalTests/deletionNotSynced checks the rest.
            try m.sh("echo x > \(m.mountpoint)/keep/k2 && rm \(m.mountpoint)/keep/k2 && python3 -c 'import os; fd = os.open(\"\(m.mountpoint)/keep\", os.O_RDONLY); os.fsync(fd)'")
            #expect(try m.sh("ls -A \(m.mountpoint)/keep") == "k")
            // Each rmdir waited for the deletes queued under its folder: the server has none of it.
            for path in ["tree/c/g7", "tree/a/b/deep", "tree/a", "tree"] {
                do {
                    _ = try await m.storedSHA256(path)
                    Issue.record("\(path) is still on the server")
                } catch let e as StorageError where e.kind == .notFound {
                }
            }
            try m.unmountFS()
            try m.mountFS()
            #expect(try m.sh("ls -A \(m.mountpoint)") == "keep")
            #expect(try m.sh("cat \(m.mountpoint)/keep/k") == "kept")
        }
    }

    @Test("appending with >>, overwriting in place, truncate")
    func modify() async throws {
        try await withMount { m in
            let f = m.mountpoint + "/log.txt"
            try m.sh("printf 'one\\n' > \(f) && printf 'two\\n' >> \(f) && printf 'three\\n' >> \(f)")
            #expect(try m.sh("cat \(f)") == "one\ntwo\nthree")
            try m.sh("printf 'ONE' | dd of=\(f) bs=1 seek=0 conv=notrunc status=none")
            #expect(try m.sh("cat \(f)") == "ONE\ntwo\nthree")
            try m.sh("truncate -s 7 \(f)")
            #expect(try m.sh("cat \(f)") == "ONE\ntwo")
            try m.sh("truncate -s 10 \(f) && test $(stat -c %s \(f)) = 10")
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedBytes("log.txt") == Array("ONE\ntwo".utf8) + [0, 0, 0])
            try m.unmountFS()
            try m.mountFS()
            #expect(try m.sh("head -c 7 \(f)") == "ONE\ntwo")
        }
    }

    @Test("an editor's save (write a temp file, rename it over the original) leaves only the new file")
    func editorSave() async throws {
        try await withMount { m in
            let dir = m.mountpoint
            try m.sh("echo original > \(dir)/notes.txt && \(m.mountpoint.isEmpty ? "" : "") echo edited > \(dir)/.notes.txt.swp && mv \(dir)/.notes.txt.swp \(dir)/notes.txt")
            #expect(try m.sh("cat \(dir)/notes.txt") == "edited")
            #expect(try m.sh("ls -A \(dir)") == "notes.txt")
            try m.stowfs(["sync", m.mountpoint])
            #expect(try await m.storedBytes("notes.txt") == Array("edited\n".utf8))
        }
    }

    @Test("echo x > tmp; mv tmp P; rm P over a stored P: no P, here or on the server, after a remount too")
    func replacedThenRemoved() async throws {
        try await withMount { m in
            let dir = m.mountpoint
            try m.sh("echo old > \(dir)/P")
            try m.stowfs(["sync", m.mountpoint])
            try m.sh("echo x > \(dir)/tmp && mv \(dir)/tmp \(dir)/P && rm \(dir)/P")
            #expect(try m.sh("ls -A \(dir)") == "")
            try m.stowfs(["sync", m.mountpoint])
            await #expect(throws: (any Error).self) { try await m.storedBytes("P") }
            try m.unmountFS()
            try m.mountFS()
            #expect(try m.sh("ls -A \(dir)") == "")
        }
    }

    @Test("tar x of a source tree, then a second rsync -a of it transfers nothing")
    func tarAndRsync() async throws {
        try await withMount { m in
            try m.sh("mkdir -p src && cp -r /usr/include/linux src/ && tar cf src.tar -C src linux")
            try m.sh("mkdir \(m.mountpoint)/t && tar xf src.tar -C \(m.mountpoint)/t && diff -r src/linux \(m.mountpoint)/t/linux")
            try m.sh("rsync -a src/ \(m.mountpoint)/r/")
            try m.sh("diff -r src \(m.mountpoint)/r")
            try m.stowfs(["sync", m.mountpoint])
            try m.unmountFS()
            try m.mountFS()
            let stats = try m.sh("rsync -a --stats src/ \(m.mountpoint)/r/ | grep 'Number of regular files transferred'")
            #expect(stats.hasSuffix(": 0"), "\(stats)")
        }
    }

    @Test("a file's ctime stays what it was here when its upload lands, and after a remount with an empty cache")
    func ctimeKept() async throws {
        try await withMount { m in
            try m.sh("printf data > \(m.mountpoint)/c.txt")
            let before = try m.sh("stat -c '%.9Z' \(m.mountpoint)/c.txt")
            try m.stowfs(["sync", m.mountpoint])
            try m.unmountFS()
            try FileManager.default.removeItem(atPath: m.cacheDirectory)
            try m.mountFS()
            #expect(try m.sh("stat -c '%.9Z' \(m.mountpoint)/c.txt") == before)
        }
    }

    @Test("cp -a keeps modes and times across a remount")
    func cpPreserve() async throws {
        try await withMount { m in
            try m.sh("echo x > keep && chmod 640 keep && touch -d '2020-02-03 04:05:06.123456789' keep && cp -a keep \(m.mountpoint)/keep")
            let local = try m.sh("stat -c '%a %Y %y' keep")
            #expect(try m.sh("stat -c '%a %Y %y' \(m.mountpoint)/keep") == local)
            try m.unmountFS()
            try m.mountFS()
            #expect(try m.sh("stat -c '%a %Y %y' \(m.mountpoint)/keep") == local)
        }
    }
}
