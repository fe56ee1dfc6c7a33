import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Testing

/// Issue 17: a folder that fills up must not slow to a crawl.
@Suite("big folders", .serialized)
struct BigFolderTests {
    @Test("a mount with 400 descriptors, uploads paused: 1,000 new files wait for uploads to store some instead of failing with EIO, and all are stored after the resume")
    func filesBeyondTheDescriptorLimit() async throws {
        let m = MountedFS()
        defer { m.cleanup() }
        try m.startServer()
        // Before, each file written and not stored held a descriptor, and a create past the
        // limit failed: EIO ("Too many open files").
        try m.mountFS(fileLimit: 400)
        #expect(try m.stowfs(["pause", m.mountpoint]).contains("paused"))
        let writer = """
            import os, sys
            d = sys.argv[1]
            os.mkdir(d)
            for i in range(1000):
                fd = os.open(os.path.join(d, f"f{i:04d}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, b"%d" % i)
                os.close(fd)
            """
        try writer.write(toFile: m.root + "/writer.py", atomically: true, encoding: .utf8)
        // (Not a listing of the folder meanwhile: the waiting create holds the folder's lock in
        // the kernel, so a listing would wait too.)
        let started = try m.sh("(python3 \(m.root)/writer.py \(m.mountpoint)/many > \(m.root)/writer.out 2>&1; echo $? > \(m.root)/writer.rc) > /dev/null 2>&1 & sleep 3; ls \(m.root)")
        #expect(!started.contains("writer.rc"), "the writer should wait for uploads while they are paused: \(started) \((try? String(contentsOfFile: m.root + "/writer.out", encoding: .utf8)) ?? "")")
        #expect(m.logText.contains("wait for their upload"), "the wait is not logged: \(m.logText)")
        #expect(try m.stowfs(["resume", m.mountpoint]).contains("resumed"))
        _ = try m.sh("for i in $(seq 1 600); do [ -f \(m.root)/writer.rc ] && exit 0; sleep 0.1; done; exit 1")
        let rc = try String(contentsOfFile: m.root + "/writer.rc", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(rc == "0", "the writer failed: \((try? String(contentsOfFile: m.root + "/writer.out", encoding: .utf8)) ?? "")")
        _ = try m.stowfs(["sync", m.mountpoint])
        try await m.withClient { c in
            var names: Set<String> = []
            var after: String?
            repeat {
                let page = try await c.list(m.namespace, folder: try StoragePath("many"), after: after, limit: 1000)
                names.formUnion(page.entries.map(\.fileName))
                after = page.next
            } while after != nil
            #expect(names.count == 1000)
        }
        #expect(!m.logText.contains("answered EIO"), "\(m.logText)")
    }

    @Test("creates in a folder of 6,000 files whose listing went stale cost a small request each, not a relisting of the folder per create (4 creates/s at 8,000 files before)")
    func createsInAStaleBigFolder() async throws {
        let m = MountedFS()
        defer { m.cleanup() }
        try m.startServer()
        try await m.withClient { c in
            _ = try await c.createNamespace(m.namespace)
            let files = (0..<6000).map { i in
                (StartUploadRequest(fileName: "big/f\(i)", contentType: nil, size: 1, tags: nil, params: nil), UploadSource.bytes(ByteBuffer(string: "x")))
            }
            for start in stride(from: 0, to: files.count, by: 250) {
                for result in try await c.uploadBatch(m.namespace, Array(files[start..<start + 250])) { _ = try result.get() }
            }
        }
        // Listings and attributes trusted for 1 s only: the folder's listing is stale at once.
        try m.mountFS(extra: ["--attr-ttl", "1"])
        #expect(try m.sh("ls \(m.mountpoint)/big | wc -l") == "6000")
        usleep(1_500_000)
        /// Listing requests stowd has answered so far (its per-route counter).
        func listings() throws -> Int {
            let text = try m.sh("curl -sf \(m.endpoint)/metrics")
            return text.split(separator: "\n")
                .filter { $0.hasPrefix(#"stowd_http_requests_total{method="GET",route="/service/application/assets/v1.0/namespaces/{ns}/browse""#) }
                .compactMap { Double($0.split(separator: " ").last ?? "").map(Int.init) }.reduce(0, +)
        }
        let before = try listings()
        try m.sh("for i in $(seq 1 100); do : > \(m.mountpoint)/big/new-$i; done")
        let spent = try listings() - before
        print("100 creates in a stale folder of 6,000 names: \(spent) listing page(s)")
        #expect(spent <= 10, "100 creates in a stale folder of 6,000 names asked for \(spent) listing pages")
        _ = try m.stowfs(["sync", m.mountpoint])
        #expect(try m.sh("ls \(m.mountpoint)/big | wc -l") == "6100")
        let stored = try await m.withClient { c in try await c.listAll(m.namespace, folder: try StoragePath("big")).count }
        #expect(stored == 6100)
    }
}
