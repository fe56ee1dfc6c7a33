import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Testing

/// Issue 17: a folder that fills up must not slow to a crawl.
@Suite("big folders", .serialized)
struct BigFolderTests {
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
