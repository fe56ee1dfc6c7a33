import Foundation
import StowFS
import Testing
#if canImport(Glibc)
import Glibc
#endif

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

    @Test("copyData copies a sparse file's data extents at their offsets, and leaves its holes holes (and a file all hole, and one that ends in data)")
    func copyDataKeepsHoles() throws {
        let dir = FileManager.default.temporaryDirectory.path + "/cachefile-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let size: Int64 = 8 << 20
        let pieces: [(Int64, [UInt8])] = [(0, Array(repeating: 7, count: 5000)), (3 << 20, Array("middle".utf8)), (size - 3, [1, 2, 3])]
        for (n, layout) in [pieces, [], [pieces[2]]].enumerated() {
            let source = try CacheFile(path: dir + "/s\(n)")
            for (offset, bytes) in layout { try source.write(bytes, at: offset) }
            try source.truncate(to: size)
            let target = try CacheFile(path: dir + "/t\(n)")
            #expect(target.copyData(from: source, size: size))
            try target.truncate(to: size)
            #expect(target.read(at: 0, length: Int(size)) == source.read(at: 0, length: Int(size)), "layout \(n)")
            let used = (try FileManager.default.attributesOfItem(atPath: dir + "/t\(n)")[.size] as? Int64) ?? -1
            #expect(used == size)
            var st = stat()
            #expect(lstat(dir + "/t\(n)", &st) == 0)
            #expect(Int64(st.st_blocks) * 512 < 1 << 20, "layout \(n): \(st.st_blocks) blocks allocated: the holes were written")
        }
    }
}
