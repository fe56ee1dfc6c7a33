import Foundation
@testable import StorageClient
import StorageProtocol
import Testing

/// How the client puts a listed page together before the engine takes it: folders and files in
/// one list in the order of their bytes (as the server orders names), every name checked.
@Suite("a listed page as the mount takes it")
struct PosixListingTests {
    static func record(_ name: String, _ kind: NodeKind = .file) -> PosixRecord {
        PosixRecord(
            fileName: name, contentType: "application/octet-stream", size: 1, tags: [], etag: "e", sha256: nil, metadata: [:], isPublic: false,
            kind: kind, inode: 7, mode: nil, uid: nil, gid: nil, nlink: 1, atimeNs: 0, mtimeNs: 0, ctimeNs: 0, btimeNs: 0, target: nil, rdev: nil)
    }

    @Test("folders and files in one list by bytes: two spellings of é stay two, in byte order")
    func byBytes() throws {
        let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
        // Equal as Swift Strings, two files on the server: a sort by String could put them either way.
        #expect(nfc == nfd)
        let merged = try HTTPObjectStore.merged([Self.record(nfc, .directory), Self.record("B", .directory)], [Self.record("a"), Self.record(nfd), Self.record("Z")])
        #expect(merged.map { Array($0.fileName.utf8) } == ["B", "Z", "a", nfd, nfc].map { Array($0.utf8) })
        // A page of files only, already in order, comes back as it is.
        let files = [Self.record("a"), Self.record("b")]
        #expect(try HTTPObjectStore.merged([], files) == files)
    }

    @Test("a listed name that is not one (empty, a dot, a slash, a NUL) is the server's fault, not a name here")
    func badNames() {
        for bad in ["", ".", "..", "a/b", "a\u{0}b"] {
            #expect(throws: StorageError.self, "\(bad.debugDescription)") { try HTTPObjectStore.merged([], [Self.record("ok"), Self.record(bad)]) }
            #expect(throws: StorageError.self, "\(bad.debugDescription)") { try HTTPObjectStore.merged([Self.record(bad, .directory)], []) }
        }
    }

    @Test("a seed record's posix record: the same attributes, its creation time to the millisecond")
    func fromSeed() {
        var p = Self.record("x.txt")
        p.btimeNs = 1_795_819_732_472_588_123
        p.mtimeNs = 5
        p.tags = ["t"]
        p.metadata = ["k": "v"]
        let seed = FileRecord(p, namespace: try! Namespace("ns"), path: try! StoragePath("d/x.txt"), origin: "http://h:1")
        var back = PosixRecord(seed: seed)
        #expect(back.btimeNs == 1_795_819_732_472_000_000)
        back.btimeNs = p.btimeNs
        #expect(back == p)
    }
}
