import Foundation
import NIOCore
import StorageClient
import StorageProtocol
@testable import StorageServer
import Testing

/// Requests that race on the same names, sent at once through different replicas (on PostgreSQL:
/// separate servers sharing the database; on the embedded backend: one server, whose single writer
/// serializes them). Whatever the order, the outcome is one of the serial ones and the tree stays
/// sound (`integrityProblems`, which every `withServer` also checks at the end).
@Suite("races on the same names, through several replicas")
struct ConcurrencyTests {
    /// Runs the operations at the same moment (as close as tasks allow) and returns their outcomes in order.
    static func race<T: Sendable>(_ operations: [@Sendable () async throws -> T]) async -> [Result<T, StorageError>] {
        await withTaskGroup(of: (Int, Result<T, StorageError>).self) { group in
            let gate = Gate(count: operations.count)
            for (i, op) in operations.enumerated() {
                group.addTask {
                    await gate.arrive()
                    do { return (i, .success(try await op())) } catch let e as StorageError { return (i, .failure(e)) } catch {
                        return (i, .failure(StorageError(.protocolViolation, "\(error)")))
                    }
                }
            }
            var results = [Result<T, StorageError>?](repeating: nil, count: operations.count)
            for await (i, r) in group { results[i] = r }
            return results.map { $0! }
        }
    }

    @Test("two clients moving two folders into each other at once: exactly one wins, and no cycle is made")
    func crossedFolderMoves() async throws {
        try await withReplicas(2) { replicas in
            let one = replicas[0].admin, two = replicas[1].admin
            for round in 0..<20 {
                let a = "r\(round)a", b = "r\(round)b"
                _ = try await one.makeFolder(testNamespace, path("\(a)/inner"), FolderRequest())
                _ = try await one.makeFolder(testNamespace, path("\(b)/inner"), FolderRequest())
                let outcomes = await Self.race([
                    { @Sendable in try await one.rename(testNamespace, from: path(a), to: path("\(b)/inner/\(a)"), replace: false, exchange: false) },
                    { @Sendable in try await two.rename(testNamespace, from: path(b), to: path("\(a)/inner/\(b)"), replace: false, exchange: false) },
                ])
                let won = outcomes.filter { if case .success = $0 { true } else { false } }.count
                #expect(won == 1, "round \(round): \(outcomes)")
                for case .failure(let e) in outcomes {
                    #expect(e.kind == .notFound || e.kind == .invalidRename, "round \(round): \(e)")
                }
                let problems = try await replicas[0].server.store.integrityProblems(limit: 10)
                #expect(problems.isEmpty, "round \(round): \(problems)")
            }
        }
    }

    @Test("a folder moved below itself through another name at once with a move of its parent is refused")
    func moveUnderMovingParent() async throws {
        try await withReplicas(2) { replicas in
            let one = replicas[0].admin, two = replicas[1].admin
            for round in 0..<15 {
                let p = "m\(round)"
                _ = try await one.makeFolder(testNamespace, path("\(p)/x/y"), FolderRequest())
                _ = try await one.makeFolder(testNamespace, path("\(p)/z"), FolderRequest())
                // One client moves x into z; the other moves z into x/y. Either order is fine alone;
                // together, the second would put z inside itself.
                let outcomes = await Self.race([
                    { @Sendable in try await one.rename(testNamespace, from: path("\(p)/x"), to: path("\(p)/z/x"), replace: false, exchange: false) },
                    { @Sendable in try await two.rename(testNamespace, from: path("\(p)/z"), to: path("\(p)/x/y/z"), replace: false, exchange: false) },
                ])
                let won = outcomes.filter { if case .success = $0 { true } else { false } }.count
                #expect(won == 1, "round \(round): \(outcomes)")
                let problems = try await replicas[0].server.store.integrityProblems(limit: 10)
                #expect(problems.isEmpty, "round \(round): \(problems)")
            }
        }
    }

    @Test("eight clients making the same folder or node at once: exactly one makes it, the rest are told it exists")
    func sameNameCreates() async throws {
        try await withReplicas(2) { replicas in
            for round in 0..<10 {
                let folder = path("c\(round)/d")
                let mkdirs = await Self.race((0..<8).map { i in
                    { @Sendable in try await replicas[i % 2].admin.makeFolder(testNamespace, folder, FolderRequest(existOk: false)) }
                })
                #expect(mkdirs.filter { if case .success = $0 { true } else { false } }.count == 1, "\(mkdirs)")
                for case .failure(let e) in mkdirs { #expect(e.kind == .exists) }
                let link = path("c\(round)/l")
                let symlinks = await Self.race((0..<8).map { i in
                    { @Sendable in try await replicas[i % 2].admin.makeNode(testNamespace, link, NodeRequest(kind: .symlink, target: "t\(i)")) }
                })
                #expect(symlinks.filter { if case .success = $0 { true } else { false } }.count == 1, "\(symlinks)")
                // The same file written by everyone at once: each write wins in turn, one name, one inode.
                let writes = await Self.race((0..<8).map { i in
                    { @Sendable in try await replicas[i % 2].admin.put(Array("v\(i)".utf8), "c\(round)/f") }
                })
                for case .failure(let e) in writes { Issue.record("a write failed: \(e)") }
                let inodes = Set(writes.compactMap { try? $0.get().inode })
                #expect(inodes.count == 1)
                let last = String(decoding: try await replicas[0].admin.get("c\(round)/f"), as: UTF8.self)
                #expect((0..<8).map { "v\($0)" }.contains(last))
            }
            #expect(try await replicas[0].server.store.integrityProblems(limit: 10).isEmpty)
        }
    }

    @Test("rmdir racing a create inside the folder: never a name in a folder that is gone")
    func rmdirRacingCreate() async throws {
        try await withReplicas(2) { replicas in
            let one = replicas[0].admin, two = replicas[1].admin
            for round in 0..<20 {
                _ = try await one.makeFolder(testNamespace, path("q\(round)"), FolderRequest())
                let outcomes = await Self.race([
                    { @Sendable in _ = try await one.makeFolder(testNamespace, path("q\(round)/sub"), FolderRequest(parents: false)) },
                    { @Sendable in try await two.removeFolder(testNamespace, path("q\(round)")) },
                ])
                switch (outcomes[0], outcomes[1]) {
                case (.success, .failure(let e)): #expect(e.kind == .notEmpty)
                case (.failure(let e), .success): #expect(e.kind == .notFound)
                default: Issue.record("round \(round): \(outcomes)")
                }
            }
            #expect(try await replicas[0].server.store.integrityProblems(limit: 10).isEmpty)
        }
    }

    @Test("a hard link racing the unlink of the file's last name: the link count stays true")
    func linkRacingUnlink() async throws {
        try await withReplicas(2) { replicas in
            let one = replicas[0].admin, two = replicas[1].admin
            for round in 0..<20 {
                _ = try await one.put(Array("x".utf8), "h\(round)")
                let outcomes = await Self.race([
                    { @Sendable in _ = try await one.link(testNamespace, from: path("h\(round)"), to: path("h\(round)-link")) },
                    { @Sendable in try await two.delete(testNamespace, path("h\(round)"), ifMatch: nil) },
                ])
                if case .failure(let e) = outcomes[1] { Issue.record("the unlink failed: \(e)") }
                if case .success = outcomes[0] {
                    let linked = try await one.record(testNamespace, path("h\(round)-link"))
                    #expect(linked.nlink == 1)
                    #expect(try await one.get("h\(round)-link") == Array("x".utf8))
                }
            }
            #expect(try await replicas[0].server.store.integrityProblems(limit: 10).isEmpty)
        }
    }

    @Test("an upload started on one replica, sent in chunks through the others, completes anywhere, byte for byte")
    func uploadAcrossReplicas() async throws {
        try await withReplicas(3) { replicas in
            let clients = replicas.map(\.admin)
            // Chunks that end inside a part (16 MiB), so that each replica goes on from the tail another kept.
            let bytes = randomBytes((40 << 20) + 5, seed: 21)
            let session = try await clients[0].startUpload(testNamespace, StartUploadRequest(fileName: "across/big.bin", size: Int64(bytes.count)))
            var offset: Int64 = 0
            var i = 0
            for cut in [Int64(7 << 20), Int64(23 << 20) + 1, Int64(bytes.count)] {
                let client = clients[i % 3]
                // Each replica reports where the upload stands, whoever received its bytes.
                #expect(try await client.uploadedBytes(session) == offset)
                offset = try await client.send(session, from: .bytes(ByteBuffer(bytes: bytes)), offset: offset, end: cut, progress: nil)
                #expect(offset == cut)
                i += 1
            }
            let record = try await clients[1].completeUpload(session)
            #expect(record.size == Int64(bytes.count))
            #expect(try await clients[2].get("across/big.bin") == bytes)
            #expect(try await replicas[0].stagedCount() == 0)
        }
    }

    @Test("collectors running at once delete each dead blob once: their claims never overlap")
    func collectorsAtOnce() async throws {
        try await withReplicas(2) { replicas in
            for i in 0..<30 {
                _ = try await replicas[0].admin.put(Array("old \(i)".utf8), "g\(i)")
                _ = try await replicas[0].admin.put(Array("new \(i)".utf8), "g\(i)")
            }
            let later = Timestamp.nowNanoseconds() + 2 * 3600 * 1_000_000_000
            let passes = await Self.race(replicas.map { r in { @Sendable in try await r.server.collectGarbage(now: later).blobs } })
            let deleted = try passes.map { try $0.get() }.reduce(0, +)
            #expect(deleted == 30)
            #expect(try await replicas[0].server.store.statistics().deadBlobs == 0)
            for i in [0, 29] { #expect(try await replicas[1].admin.get("g\(i)") == Array("new \(i)".utf8)) }
        }
    }
}

/// Lets `count` tasks through together once they have all arrived.
actor Gate {
    private var waiting: [CheckedContinuation<Void, Never>] = []
    private let count: Int
    init(count: Int) { self.count = count }

    func arrive() async {
        if waiting.count + 1 >= count {
            for c in waiting { c.resume() }
            waiting = []
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }
}
