import Foundation
import Testing

/// docs/SEMANTICS.md names, for each claim, the tests that check it. This keeps the two together:
/// every named test must exist.
@Suite("docs/SEMANTICS.md")
struct SemanticsDocTests {
    static var root: String {
        var url = URL(fileURLWithPath: #filePath)
        while url.path != "/" && !FileManager.default.fileExists(atPath: url.path + "/Package.swift") { url.deleteLastPathComponent() }
        return url.path
    }

    /// `Suite/test` references after "Tested by:".
    static func references() throws -> [(claim: String, suite: String, test: String)] {
        let text = try String(contentsOfFile: root + "/docs/SEMANTICS.md", encoding: .utf8)
        var out: [(String, String, String)] = []
        var claim = ""
        for line in text.split(separator: "\n") {
            if line.hasPrefix("**S"), let end = line.dropFirst(2).firstIndex(of: ".") { claim = String(line[line.index(line.startIndex, offsetBy: 2)..<end]) }
            guard line.hasPrefix("Tested by:") else { continue }
            for ref in line.split(separator: "`").enumerated().filter({ $0.offset % 2 == 1 }).map(\.element) {
                let parts = ref.split(separator: "/")
                if parts.count == 2 { out.append((claim, String(parts[0]), String(parts[1]))) }
            }
        }
        return out
    }

    @Test("every claim with tests names tests that exist")
    func referencesResolve() throws {
        let refs = try Self.references()
        #expect(refs.count >= 30)
        var sources: [String: String] = [:]
        let testsDir = Self.root + "/Tests"
        for case let file as String in FileManager.default.enumerator(atPath: testsDir)! where file.hasSuffix(".swift") {
            sources[file] = try String(contentsOfFile: testsDir + "/" + file, encoding: .utf8)
        }
        for r in refs {
            let found = sources.values.contains { text in
                text.contains("struct \(r.suite)") && text.contains("func \(r.test)(")
            }
            #expect(found, "S\(r.claim): no test \(r.suite)/\(r.test)")
        }
    }
}
