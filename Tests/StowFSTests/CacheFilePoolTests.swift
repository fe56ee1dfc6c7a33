import Foundation
import Testing
@testable import StowFS

@Suite("local files: the pool of empty copies")
struct CacheFilePoolTests {
    static func folder() throws -> String {
        let dir = FileManager.default.temporaryDirectory.path + "/pool-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    static func waitFor(_ what: () -> Bool) async throws {
        let end = ContinuousClock.now + .seconds(20)
        while !what() {
            guard ContinuousClock.now < end else { return }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test("spares are made ahead by a thread of their own; a take opens one and makes no file", .timeLimit(.minutes(1)))
    func madeAhead() async throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let pool = CacheFilePool(directory: dir, capacity: 4, spareCapacity: 50, refillBelow: 10, refillTo: 20)
        // The first take finds nothing, makes its own file, and starts the refill.
        let first = try pool.take()
        try await Self.waitFor { pool.spares == 20 }
        #expect(pool.spares == 20)
        let before = Set(try FileManager.default.contentsOfDirectory(atPath: dir))
        #expect(before.count == 21)
        // Eleven takes, to below the refill mark: each is a spare made before.
        var taken: [CacheFile] = []
        for _ in 0..<11 { taken.append(try pool.take()) }
        #expect(taken.allSatisfy { before.contains(($0.path as NSString).lastPathComponent) })
        #expect(Set(taken.map(\.path)).count == 11)
        // The refill made new ones, back to 20.
        try await Self.waitFor { pool.spares == 20 }
        #expect(pool.spares == 20)
        #expect(pool.made == 31)
        // A copy given back is emptied and kept (open first, then as a spare): nothing is deleted.
        try first.write(Array("content".utf8), at: 0)
        let path = first.path
        pool.give(first)
        #expect(pool.count == 1)
        for f in taken { pool.give(f) }
        #expect(pool.count == 4)
        #expect(pool.spares == 28)
        #expect(FileManager.default.fileExists(atPath: path))
        let all = try FileManager.default.contentsOfDirectory(atPath: dir)
        #expect(try all.allSatisfy { try FileManager.default.attributesOfItem(atPath: dir + "/" + $0)[.size] as? Int == 0 })
        pool.stop()
    }

    @Test("files a mount leaves are emptied and kept by the next one, up to the pool's room; the rest are deleted")
    func adopted() throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var paths: [String] = []
        for i in 0..<8 {
            let p = dir + "/left\(i)"
            FileManager.default.createFile(atPath: p, contents: Data(repeating: UInt8(i), count: 100 * i))
            paths.append(p)
        }
        let pool = CacheFilePool(directory: dir, capacity: 2, spareCapacity: 5, refillBelow: 0, refillTo: 0)
        pool.adopt(paths)
        #expect(pool.spares == 5)
        let left = try FileManager.default.contentsOfDirectory(atPath: dir)
        #expect(left.count == 5)
        #expect(try left.allSatisfy { try FileManager.default.attributesOfItem(atPath: dir + "/" + $0)[.size] as? Int == 0 })
        // A take is one of them, opened empty.
        let f = try pool.take()
        #expect(left.contains((f.path as NSString).lastPathComponent))
        #expect(f.size == 0)
    }

    @Test("a refill that cannot make files is not tried again at every create; the marks are kept in order", .timeLimit(.minutes(1)))
    func failedRefillBacksOff() async throws {
        let dir = try Self.folder()
        let pool = CacheFilePool(directory: dir, capacity: 2, spareCapacity: 10, refillBelow: 5, refillTo: 8)
        // The folder goes: nothing can be made there.
        try FileManager.default.removeItem(atPath: dir)
        for _ in 0..<20 { #expect(throws: FSError.self) { _ = try pool.take() } }
        try await Self.waitFor { pool.refills == 1 && pool.spares == 0 }
        try await Task.sleep(for: .milliseconds(100))
        for _ in 0..<20 { #expect(throws: FSError.self) { _ = try pool.take() } }
        try await Task.sleep(for: .milliseconds(100))
        #expect(pool.refills == 1)
        #expect(pool.made == 0)
        // Marks given out of order are put in order (spare room 3 < refill marks).
        let small = CacheFilePool(directory: dir, capacity: 1, spareCapacity: 3, refillBelow: 128, refillTo: 256)
        #expect(small.refillTo == 3)
        #expect(small.refillBelow == 3)
        small.stop()
        pool.stop()
    }
}
