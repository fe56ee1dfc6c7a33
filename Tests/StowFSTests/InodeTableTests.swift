import Foundation
import Testing
@testable import StowFS

@Suite("engine: the inode table")
struct InodeTableTests {
    static func entry(_ ino: InodeNumber, name: String) -> StowFileSystem.InodeEntry {
        StowFileSystem.InodeEntry(
            ino: ino, parent: 1, name: name,
            attributes: FileAttributes(ino: ino, kind: .file, mode: 0o644, uid: 0, gid: 0, size: 0, nlink: 1, atime: .now, mtime: .now, ctime: .now),
            validUntil: .now)
    }

    @Test("20,000 random inserts, changes in place, removals and reads agree with a dictionary; freed places are used again")
    func agreesWithADictionary() {
        var table = InodeTable()
        var model: [InodeNumber: String] = [:]
        var rng = SystemRandomNumberGenerator()
        for step in 0..<20_000 {
            let ino = InodeNumber.random(in: 1...3_000, using: &rng)
            switch Int.random(in: 0..<5, using: &rng) {
            case 0:
                table[ino] = Self.entry(ino, name: "n\(step)")
                model[ino] = "n\(step)"
            case 1:
                // In place, through optional chaining (the engine's usual way).
                table[ino]?.name = "m\(step)"
                if model[ino] != nil { model[ino] = "m\(step)" }
            case 2:
                table[ino] = nil
                model[ino] = nil
            case 3:
                // Removed through `_modify` (an inout access that sets nil).
                func drop(_ e: inout StowFileSystem.InodeEntry?) { e = nil }
                drop(&table[ino])
                model[ino] = nil
            default:
                #expect(table[ino]?.name == model[ino])
            }
        }
        #expect(table.count == model.count)
        var seen: [InodeNumber: String] = [:]
        for (ino, e) in table {
            #expect(e.ino == ino)
            seen[ino] = e.name
        }
        #expect(seen == model)
        #expect(Set(table.values.map(\.ino)) == Set(model.keys))
        #expect(Set(table.keys) == Set(model.keys))
        // A table emptied and filled again stays as large as it was at most (places reused).
        for ino in Array(table.keys) { table[ino] = nil }
        #expect(table.count == 0)
        #expect(Array(table).isEmpty)
        for ino in InodeNumber(1)...3_000 { table[ino] = Self.entry(ino, name: "again") }
        #expect(table.count == 3_000)
        #expect(table[1_500]?.name == "again")
    }

    @Test("a change made while iterating leaves the iteration's view alone and lands in the table")
    func changeWhileIterating() {
        var table = InodeTable()
        for ino in InodeNumber(1)...2_000 { table[ino] = Self.entry(ino, name: "old") }
        var visited = 0
        for (ino, e) in table {
            #expect(e.name == "old")
            table[ino]?.name = "new"
            visited += 1
        }
        #expect(visited == 2_000)
        #expect(table.values.allSatisfy { $0.name == "new" })
    }

    @Test("an inode record takes at most 240 bytes (100,000 files hold 100,000 of them); its instants and metadata, kept small, read back as set")
    func recordSize() {
        #expect(MemoryLayout<StowFileSystem.InodeEntry?>.stride <= 240, "\(MemoryLayout<StowFileSystem.InodeEntry?>.stride)")
        var e = Self.entry(7, name: "a")
        let now = ContinuousClock.now
        for t in [now, now + .milliseconds(1500), now - .seconds(3), StowFileSystem.forcedStale] {
            e.validUntil = t
            #expect(e.validUntil == t)
            e.changedAt = t
            #expect(e.changedAt == t)
        }
        #expect(e.validUntil == StowFileSystem.forcedStale)
        e.changedAt = nil
        #expect(e.changedAt == nil)
        // A TTL of centuries is kept at the end of the range: still later than any reading here.
        e.validUntil = now + .seconds(Int64.max / 4)
        #expect(e.validUntil > now + .seconds(100 * 365 * 86_400))
        e.validUntil = now - .seconds(Int64.max / 4)
        #expect(e.validUntil < now - .seconds(5 * 365 * 86_400))
        e.openHandles += 3
        e.submitting = 2
        #expect(e.openHandles == 3 && e.submitting == 2)

        var m = StowFileSystem.FileMeta()
        #expect(m.tags.isEmpty && m.metadata.isEmpty && !m.isPublic && m.target == nil && m.contentType == nil)
        m.tags = ["x", "y"]
        m.metadata["k"] = "v"
        m.isPublic = true
        m.contentType = "image/jpeg"
        #expect(m == StowFileSystem.FileMeta(tags: ["x", "y"], metadata: ["k": "v"], contentType: "image/jpeg", isPublic: true))
        var copy = m
        copy.tags.append("z")
        #expect(m.tags == ["x", "y"] && copy.tags == ["x", "y", "z"], "value semantics: a copy changed leaves the first as it was")
        m.tags = []
        m.metadata = [:]
        m.isPublic = false
        #expect(m == StowFileSystem.FileMeta(contentType: "image/jpeg"))
        #expect(m != copy)
    }
}
