import Foundation
import StorageProtocol
import Testing

@Suite("search filters: globs and query parameters")
struct SearchFilterTests {
    @Test("globs match as a shell's do, one name at a time")
    func globs() throws {
        let cases: [(String, String, Bool)] = [
            ("*.png", "a.png", true), ("*.png", "a.png.txt", false), ("*.png", ".png", true), ("?.txt", "ab.txt", false),
            ("?.txt", "ü.txt", true), ("[a-c]*", "banana", true), ("[a-c]*", "date", false), ("[!a-c]*", "date", true),
            ("[^a-c]*", "apple", false), ("\\*", "*", true), ("\\*", "a", false), ("[]]", "]", true), ("[-x]", "-", true),
            ("a*b*c", "aXXbYYc", true), ("a*b*c", "aXXbYY", false), ("", "", true), ("*", "", true), ("**a", "ba", true),
            ("IMG_*.JPG", "img_1.jpg", false), ("*[0-9]", "f9", true), ("[[]x]", "[x]", true),
        ]
        for (pattern, name, expected) in cases {
            #expect(try NameGlob(pattern).matches(name) == expected, "\(pattern) ~ \(name)")
        }
        for bad in ["[abc", "a\\", "[z-a]"] {
            #expect(throws: SearchFilterError.self) { try NameGlob(bad) }
        }
    }

    @Test("a glob of many stars against a long name that does not match ends at once (no backtracking blow-up); more than 8 stars are refused")
    func noBlowUp() throws {
        #expect(throws: SearchFilterError.self) { try NameGlob(String(repeating: "*a", count: 9)) }
        let glob = try NameGlob(String(repeating: "*a", count: 8) + "b")
        let name = String(repeating: "a", count: 255)
        // 8 stars over 255 characters: a backtracking matcher tries some 255^8 splits and would
        // not finish; this one makes one pass per star at most.
        #expect(!glob.matches(name))
        #expect(try NameGlob("*a*b*").matches(String(repeating: "a", count: 200) + "b"))
    }

    @Test("globs in SQLite's and PostgreSQL's syntax")
    func translations() throws {
        #expect(try NameGlob("a*[?]").sqliteGlob == "a*[?]")
        #expect(try NameGlob("\\*x").sqliteGlob == "[*]x")
        #expect(try NameGlob("[-^]").sqliteGlob == "[-^]")
        #expect(try NameGlob("[^-]").sqliteGlob == "[^-]")
        #expect(try NameGlob("[\\^]").sqliteGlob == "^")
        #expect(try NameGlob("[]a]").sqliteGlob == "[]a]")
        #expect(try NameGlob("a.b*").postgresRegex == "^a\\.b.*$")
        #expect(try NameGlob("[!a-c]?").postgresRegex == "^[^a-c].$")
        #expect(try NameGlob("ü").postgresRegex == "^\\u00fc$")
    }

    @Test("a filter survives its query parameters, and bad parameters say what is wrong")
    func roundTrip() throws {
        let f = SearchFilter(
            path: try StoragePath("photos/2026"), tags: ["a b", "c&d"], anyTags: ["x"], name: try NameGlob("*.png"), nameContains: "Img",
            contentType: "image/*", isPublic: false, minSize: 1, maxSize: 1 << 40, modifiedAfterNs: 1_700_000_000_000_000_000,
            modifiedBeforeNs: 1_700_000_000_500_000_000, metadata: ["k 1": "v=2"], kind: .all)
        #expect(try SearchFilter.parse(f.queryItems) == f)
        #expect(try SearchFilter.parse([("modified_after", "2026-11-26T10:00:00Z")]).modifiedAfterNs == 1_795_687_200_000_000_000)
        #expect(try SearchFilter.parse([("path", "/a/b/")]).path == (try StoragePath("a/b")))
        let bad: [[(String, String)]] = [
            [("type", "image")], [("public", "1")], [("min_size", "-5")], [("modified_after", "9223372037")], [("meta", "x")],
            [("kind", "dirs")], [("tag", String(repeating: "t", count: 2000))], [("path", "a/../b")],
            Array(repeating: ("tag", "t"), count: 40),
        ]
        for items in bad {
            #expect(throws: SearchFilterError.self, "\(items.prefix(1))") { try SearchFilter.parse(items) }
        }
    }
}
