import Foundation
import StorageProtocol
import Testing
@testable import StowFS

@Suite("engine: the tree and the block index kept at unmount, written by hand")
struct SnapshotJSONTests {
    typealias Item = StowFileSystem.TreeSnapshot.Item

    static func awkward(_ i: Int) -> Item {
        let names = ["plain.txt", "quote\"back\\slash", "tab\tnew\nline\u{1}", "ünïcödé ✓", "e\u{301}", "\u{2028}sep", "/slash", "", "emoji 👩‍👩‍👧"]
        let kinds = NodeKind.allCases
        return Item(
            ino: UInt64(i) &* 0x9E37_79B9_7F4A_7C15, parent: UInt64(i / 3), name: names[i % names.count] + "\(i)", kind: kinds[i % kinds.count],
            mode: UInt32(i % 0o7777), uid: UInt32.max - UInt32(i), gid: UInt32(i), size: UInt64.max - UInt64(i), nlink: UInt32(i % 5),
            atimeNs: Int64.min + Int64(i), mtimeNs: Int64.max - Int64(i), ctimeNs: -Int64(i), rdev: UInt64(i) << 40,
            remoteIno: UInt64(i), etag: "\"etag-\(i)\"", id: "id\u{0}\(i)", tags: i % 4 == 0 ? [] : ["a", "b\"\(i)", names[(i + 1) % names.count]],
            metadata: i % 3 == 0 ? [:] : ["k": "v", "ß": "\u{7f}", "Z\(i)": names[(i + 2) % names.count], "a": ""],
            contentType: i % 2 == 0 ? nil : "text/plain; charset=\"utf-8\"", isPublic: i % 5 == 0, target: i % 7 == 0 ? "../t\u{8}\(i)" : nil,
            complete: i % 3 == 0 ? nil : i % 3 == 1)
    }

    @Test("JSONDecoder reads back exactly the tree written, whatever the names, tags, metadata and numbers")
    func roundTrip() throws {
        for namespace in [nil, "photos"] as [String?] {
            for rootRemote in [nil, UInt64.max] as [UInt64?] {
                let snapshot = StowFileSystem.TreeSnapshot(
                    namespace: namespace, rootRemote: rootRemote, rootComplete: rootRemote == nil, savedNs: 1_764_000_000_123_456_789,
                    items: (0..<500).map(Self.awkward))
                var whole: [UInt8] = []
                StowFileSystem.snapshotJSON(snapshot, chunk: 1 << 20) { whole += $0 }
                let read = try JSONDecoder().decode(StowFileSystem.TreeSnapshot.self, from: Data(whole))
                #expect(read == snapshot)
                // In small pieces: the same bytes.
                var pieces: [[UInt8]] = []
                StowFileSystem.snapshotJSON(snapshot, chunk: 700) { pieces.append($0) }
                #expect(pieces.count > 10)
                #expect(Array(pieces.joined()) == whole)
            }
        }
        let empty = StowFileSystem.TreeSnapshot(namespace: nil, rootRemote: nil, rootComplete: false, savedNs: 0, items: [])
        var bytes: [UInt8] = []
        StowFileSystem.snapshotJSON(empty, chunk: 16) { bytes += $0 }
        #expect(try JSONDecoder().decode(StowFileSystem.TreeSnapshot.self, from: Data(bytes)) == empty)
    }

    @Test("the block cache's index, written by hand in pieces, reads back as written")
    func blockIndex() throws {
        let names = ["\"W/\\\"abc\"", "plain", "ünï\u{1}", ""]
        let index = BlockCache.Index(
            blockSize: 1 << 20,
            files: (0..<300).map { i in
                BlockCache.Index.Entry(etag: names[i % names.count] + "\(i)", blocks: (0..<(i % 7)).map { Int64($0 * i) }, bytes: Int64.max - Int64(i))
            })
        var whole: [UInt8] = []
        index.writeJSON(chunk: 1 << 20) { whole += $0 }
        #expect(try JSONDecoder().decode(BlockCache.Index.self, from: Data(whole)) == index)
        var pieces: [[UInt8]] = []
        index.writeJSON(chunk: 500) { pieces.append($0) }
        #expect(pieces.count > 10)
        #expect(Array(pieces.joined()) == whole)
        var empty: [UInt8] = []
        BlockCache.Index(blockSize: 4096, files: []).writeJSON(chunk: 1) { empty += $0 }
        #expect(try JSONDecoder().decode(BlockCache.Index.self, from: Data(empty)) == BlockCache.Index(blockSize: 4096, files: []))
    }
}
