import Foundation
import StorageProtocol
import Testing

@Suite("names and paths")
struct NameTests {
    @Test("valid namespaces", arguments: ["a", "photos", "my-ns_1.x", String(repeating: "a", count: 63), "0abc"])
    func validNamespace(_ name: String) throws {
        #expect(try Namespace(name).name == name)
    }

    @Test("invalid namespaces are refused", arguments: ["", "A", "-a", ".a", "a/b", "a b", "ä", String(repeating: "a", count: 64)])
    func invalidNamespace(_ name: String) {
        #expect(throws: NameError.self) { try Namespace(name) }
    }

    @Test("valid paths keep their segments")
    func validPaths() throws {
        #expect(try StoragePath("a/b/c.txt").segments == ["a", "b", "c.txt"])
        #expect(try StoragePath("/a").segments == ["a"])
        #expect(try StoragePath("with space/ünïcödé").segments == ["with space", "ünïcödé"])
        #expect(try StoragePath(String(repeating: "x", count: 255)).name.utf8.count == 255)
    }

    @Test(
        "invalid paths are refused with the reason",
        arguments: [
            ("", NameError.emptyPath), ("a//b", .emptySegment), ("a/", .emptySegment), ("a/../b", .dotSegment("..")),
            ("./a", .dotSegment(".")), ("a\u{0}b", .nulByte), (String(repeating: "x", count: 256), .segmentTooLong(bytes: 256)),
        ])
    func invalidPaths(_ raw: String, _ expected: NameError) {
        #expect(throws: expected) { try StoragePath(raw) }
    }

    @Test("a path over 16 KiB is refused as too long; one of PATH_MAX below a folder is not")
    func longPath() throws {
        _ = try StoragePath("folder/" + Array(repeating: String(repeating: "d", count: 255), count: 16).joined(separator: "/"))
        let raw = Array(repeating: String(repeating: "d", count: 200), count: 82).joined(separator: "/")
        #expect(throws: NameError.pathTooLong(bytes: raw.utf8.count)) { try StoragePath(raw) }
    }

    @Test("a 256-byte segment maps to the name_too_long code; other refusals to invalid_path")
    func codes() {
        #expect(NameError.segmentTooLong(bytes: 256).code == .nameTooLong)
        #expect(NameError.dotSegment("..").code == .invalidPath)
    }

    @Test("isWithin compares whole segments")
    func within() throws {
        #expect(try StoragePath("a/b/c").isWithin(StoragePath("a/b")))
        #expect(try !StoragePath("a/bc").isWithin(StoragePath("a/b")))
        #expect(try StoragePath("a").isWithin(.root))
    }

    @Test("percent-encoding round-trips odd names")
    func encoding() throws {
        let p = try StoragePath("dir with space/q?&#%.txt")
        let encoded = PathEncoding.encode(path: p)
        #expect(!encoded.contains(" ") && !encoded.contains("?") && !encoded.contains("#"))
        let decoded = try encoded.split(separator: "/").map { try #require(PathEncoding.decode($0)) }
        #expect(decoded == p.segments)
    }

    @Test("FileName: equal, ordered and hashed by its bytes (NFC and NFD are two names), as the byte-wise comparisons say")
    func fileNames() {
        #expect(FileName("caf\u{e9}") != FileName("cafe\u{301}"))
        #expect(Set([FileName("caf\u{e9}"), FileName("cafe\u{301}"), FileName("caf\u{e9}")]).count == 2)
        var g = WireJSONWriterTests.Seeded(state: 11)
        let names = [""] + (0..<400).map { _ in WireJSONWriterTests.text(&g, max: 4) }
        for a in names {
            for b in names.prefix(60) {
                #expect((FileName(a) == FileName(b)) == a.utf8.elementsEqual(b.utf8))
                #expect((FileName(a) < FileName(b)) == a.utf8.lexicographicallyPrecedes(b.utf8), "\(Array(a.utf8)) \(Array(b.utf8))")
                if FileName(a) == FileName(b) { #expect(FileName(a).hashValue == FileName(b).hashValue) }
            }
        }
        // A substring's copy hashes as the string it equals.
        let long = "prefix/" + "name.txt"
        #expect(FileName(String(long.dropFirst(7))).hashValue == FileName("name.txt").hashValue)
    }

    @Test("percent-encoding by hand: Foundation's bytes for every byte value, awkward text and 2,000 random strings")
    func encodingAsFoundation() {
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        var samples = (0..<128).map { String(UnicodeScalar(UInt8($0))) } + WireJSONWriterTests.pieces + ["", "plain.txt", "a b", "%41", "ÿ", "\u{FFFF}"]
        var g = WireJSONWriterTests.Seeded(state: 3)
        for _ in 0..<2000 { samples.append(WireJSONWriterTests.text(&g, max: 8)) }
        for s in samples {
            #expect(PathEncoding.encode(segment: s) == s.addingPercentEncoding(withAllowedCharacters: unreserved), "\(Array(s.utf8))")
            #expect(PathEncoding.encode(query: s) == PathEncoding.encode(segment: s))
            #expect(PathEncoding.decode(PathEncoding.encode(segment: s)) == s)
        }
    }

    @Test("content types are inferred from the extension, octet-stream last")
    func contentTypes() {
        #expect(ContentTypes.infer(fileName: "a.JPG") == "image/jpeg")
        #expect(ContentTypes.infer(fileName: "notes.txt") == "text/plain")
        #expect(ContentTypes.infer(fileName: "Makefile") == "application/octet-stream")
        #expect(ContentTypes.infer(fileName: ".hidden") == "application/octet-stream")
        #expect(ContentTypes.isValid("text/plain; charset=utf-8"))
        #expect(!ContentTypes.isValid("text"))
        #expect(!ContentTypes.isValid("text/plain\r\nX-Evil: 1"))
    }

    @Test("sizes parse as people write them", arguments: [("512", 512), ("4k", 4096), ("100M", 104_857_600), ("2G", 2_147_483_648), ("1.5KiB", 1536)] as [(String, Int64)])
    func sizes(_ text: String, _ bytes: Int64) {
        #expect(ByteSize.parse(text) == bytes)
    }

    @Test("bad sizes are refused")
    func badSizes() {
        #expect(ByteSize.parse("lots") == nil)
        #expect(ByteSize.parse("5X") == nil)
        #expect(ByteSize.parse("-1") == nil)
    }
}
