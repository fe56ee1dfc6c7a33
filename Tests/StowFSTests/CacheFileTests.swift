import Foundation
import StowFS
import Testing

@Suite("local files")
struct CacheFileTests {
    @Test("a copy of a copy has the right bytes (copies use explicit offsets, not the descriptors')")
    func copyChain() throws {
        let dir = FileManager.default.temporaryDirectory.path + "/cachefile-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let a = try CacheFile(path: dir + "/a")
        try a.write(Array("one\n".utf8), at: 0)
        let b = try a.copy(to: dir + "/b", length: 4)
        try b.write(Array("two\n".utf8), at: 4)
        let c = try b.copy(to: dir + "/c", length: 8)
        try c.write(Array("three\n".utf8), at: 8)
        let d = try c.copy(to: dir + "/d", length: 14)
        #expect(String(decoding: d.read(at: 0, length: 100), as: UTF8.self) == "one\ntwo\nthree\n")
        let e = try d.copy(to: dir + "/e", length: 20)
        #expect(e.size == 20)
    }
}
