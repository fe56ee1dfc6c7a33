import Foundation
import PostgresNIO
import StorageClient
import StorageProtocol
import StorageServer
import Testing

/// Locks shared by the mounts of a namespace (`LockRoutes`), on every backend.
@Suite("locks")
struct LockTests {
    static let sessionA = "session-a-0123456789", sessionB = "session-b-0123456789"

    static func request(
        _ session: String, ino: UInt64 = 100, owner: UInt64 = 1, kind: LockKind = .posix, _ type: LockType, _ start: UInt64 = 0, _ end: UInt64 = .max,
        wait: Int? = nil
    ) -> LockRequest {
        LockRequest(session: session, ino: ino, owner: owner, kind: kind, type: type, start: start, end: end, pid: 42, waitMs: wait)
    }

    @Test("sessions and locks: a write lock excludes another session's; read locks share; flock and POSIX locks do not meet; unlock lets the next in; a test takes nothing")
    func basics() async throws {
        // A lease far longer than the test, however slow the machine (a full run starves it).
        try await withServer(configure: { $0.lockLease = 3600 }) { s in
            let first = try await s.admin.renewLockSession(testNamespace, id: Self.sessionA)
            #expect(first.existed == false)
            #expect(first.leaseSeconds == 3600)
            #expect(try await s.admin.renewLockSession(testNamespace, id: Self.sessionA).existed == true)

            let a = try await s.admin.lock(testNamespace, Self.request(Self.sessionA, .write, 0, 99))
            #expect(a.granted)
            #expect(a.fence != nil, "a grant carries the feed's position")
            let b = try await s.admin.lock(testNamespace, Self.request(Self.sessionB, .read, 50, 50))
            #expect(!b.granted)
            #expect(b.conflict?.session == Self.sessionA)
            #expect(b.conflict?.start == 0 && b.conflict?.end == 99 && b.conflict?.pid == 42)
            // Outside the range, or a flock lock of the same file: no conflict.
            #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionB, .write, 100, 199)).granted)
            #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionB, kind: .flock, .write)).granted)
            // Another inode, or another namespace's inode of that number: no conflict.
            #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionB, ino: 101, .write)).granted)
            _ = try await s.admin.createNamespace(try Namespace("test-other"))
            #expect(try await s.admin.lock(try Namespace("test-other"), Self.request(Self.sessionB, .write, 0, 99)).granted)

            // F_GETLK: says who is in the way, takes nothing.
            let test = try await s.admin.testLock(testNamespace, Self.request(Self.sessionB, owner: 7, .write, 0, 0))
            #expect(test.conflict?.owner == 1)
            #expect(try await s.admin.testLock(testNamespace, Self.request(Self.sessionB, owner: 7, .write, 500, 600)).conflict == nil)

            // Read locks share; the writer's unlock of part of its range lets a reader into that part.
            _ = try await s.admin.lock(testNamespace, Self.request(Self.sessionA, .unlock, 40, 59))
            #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionB, .read, 50, 50)).granted)
            #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionA, owner: 2, .read, 45, 55)).granted)
            #expect(!(try await s.admin.lock(testNamespace, Self.request(Self.sessionB, .read, 60, 60)).granted))

            // Ending a session drops its locks at once.
            try await s.admin.endLockSession(testNamespace, id: Self.sessionA)
            #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionB, .write, 0, 39)).granted)
            #expect(try await s.admin.renewLockSession(testNamespace, id: Self.sessionA).existed == false)
        }
    }

    @Test("a waiting lock request is granted as soon as the holder unlocks (this server), and refused when its wait is up")
    func waiting() async throws {
        try await withServer(configure: { $0.lockLease = 3600 }) { s in
            #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionA, kind: .flock, .write)).granted)
            let t0 = ContinuousClock.now
            let refused = try await s.admin.lock(testNamespace, Self.request(Self.sessionB, kind: .flock, .read, wait: 300))
            #expect(!refused.granted)
            #expect(ContinuousClock.now - t0 >= .milliseconds(280), "it waited")

            var delays: [Duration] = []
            for i in 0..<10 {
                let waiter = Task { () -> (LockResponse, ContinuousClock.Instant) in
                    let r = try await s.admin.lock(testNamespace, Self.request(Self.sessionB, kind: .flock, .write, wait: 20_000))
                    return (r, ContinuousClock.now)
                }
                try await Task.sleep(for: .milliseconds(100))
                let unlocked = ContinuousClock.now
                _ = try await s.admin.lock(testNamespace, Self.request(Self.sessionA, kind: .flock, .unlock))
                let (answer, at) = try await waiter.value
                #expect(answer.granted, "round \(i)")
                delays.append(at - unlocked)
                // And back to A, for the next round.
                _ = try await s.admin.lock(testNamespace, Self.request(Self.sessionB, kind: .flock, .unlock))
                #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionA, kind: .flock, .write)).granted)
            }
            let sorted = delays.sorted()
            print("lock wake-up on one server: median \(sorted[sorted.count / 2]), max \(sorted.last!)")
            // Granted while waiting, well before the 20 s wait is up (2.05 s once, on PostgreSQL on a
            // VM losing a third of its CPU to steal; a few milliseconds on SQLite).
            #expect(sorted[sorted.count / 2] < .seconds(10), "\(sorted)")
        }
    }

    @Test("a session that is not renewed loses its locks when its lease ends")
    func leaseEnds() async throws {
        try await withServer(configure: { $0.lockLease = 2 }) { s in
            let t0 = ContinuousClock.now
            #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionA, .write)).granted)
            // B waits: A's lease ends 2 s after its lock, and B gets the lock then — not before
            // (a loaded machine only makes it later).
            let b = try await s.admin.lock(testNamespace, Self.request(Self.sessionB, .write, wait: 20_000))
            #expect(b.granted)
            #expect(ContinuousClock.now - t0 >= .milliseconds(1900), "B got the lock while A's lease ran")
            #expect(try await s.admin.renewLockSession(testNamespace, id: Self.sessionA).existed == false, "A's session had ended")
            // The collector drops what is left of ended sessions.
            try await s.server.collectGarbage()
        }
    }

    @Test("the fence of a grant is at or past every change committed before it")
    func fence() async throws {
        try await withServer { s in
            let start = try await s.admin.changes(testNamespace, since: nil, wait: .zero).cursor
            _ = try await s.admin.makeFolder(testNamespace, path("before"), FolderRequest())
            let grant = try await s.admin.lock(testNamespace, Self.request(Self.sessionA, .write))
            let fenceText = try #require(grant.fence)
            let fence = try #require(ChangeCursor(fenceText))
            // Read the feed up to the fence: the change is in what was read.
            var cursor = start, seen: [ChangeRecord] = []
            let deadline = ContinuousClock.now + .seconds(10)
            while (ChangeCursor(cursor) ?? fence) < fence, ContinuousClock.now < deadline {
                let page = try await s.admin.changes(testNamespace, since: cursor, wait: .zero)
                seen += page.changes
                cursor = page.cursor
            }
            #expect((ChangeCursor(cursor).map { $0 >= fence }) == true, "the feed reached the fence")
            #expect(seen.contains { $0.name == "before" }, "\(seen)")
        }
    }

    @Test("a grant asked with `since` carries the changes after it, up to the fence; a stale `since` gets none (the feed would say reset)")
    func grantCarriesChanges() async throws {
        try await withServer { s in
            let start = try await s.admin.changes(testNamespace, since: nil, wait: .zero).cursor
            _ = try await s.admin.makeFolder(testNamespace, path("one"), FolderRequest())
            _ = try await s.admin.makeFolder(testNamespace, path("two"), FolderRequest())
            var request = Self.request(Self.sessionA, .write)
            request.since = start
            let grant = try await s.admin.lock(testNamespace, request)
            #expect(grant.granted)
            let fence = try #require(grant.fence.flatMap(ChangeCursor.init))
            var cursor = try #require(grant.cursor.flatMap(ChangeCursor.init))
            var seen = try #require(grant.changes)
            if !TestBackend.isPostgres {
                // One writer: what was carried reaches the fence. (On PostgreSQL a transaction of
                // another test still running holds the head back: the rest is read below.)
                #expect(cursor >= fence)
            }
            let deadline = ContinuousClock.now + .seconds(10)
            while cursor < fence, ContinuousClock.now < deadline {
                let page = try await s.admin.changes(testNamespace, since: cursor.text, wait: .zero)
                seen += page.changes
                cursor = try #require(ChangeCursor(page.cursor))
            }
            let names = seen.compactMap(\.name)
            #expect(names.contains("one") && names.contains("two") && names.firstIndex(of: "one")! < names.firstIndex(of: "two")!, "\(names)")
            // The same owner again, from the cursor it was given: nothing new.
            request.since = cursor.text
            let again = try await s.admin.lock(testNamespace, request)
            #expect(again.changes?.contains { $0.name == "one" || $0.name == "two" } == false)
            // A cursor from past the feed's end is no cursor of this server: no changes, only the fence.
            request.since = ChangeCursor(major: Int64.max / 2, minor: 0).text
            let stale = try await s.admin.lock(testNamespace, request)
            #expect(stale.granted && stale.changes == nil && stale.cursor == nil && stale.fence != nil)
            // An unlock carries nothing.
            request.type = .unlock
            let released = try await s.admin.lock(testNamespace, request)
            #expect(released.granted && released.fence == nil && released.changes == nil)
            #expect(grant.etag == nil, "no file has that inode number")
            // A file's lock carries its etag as the grant found it (a mount's copy is checked by it).
            let file = try await s.admin.put(Array("v1".utf8), "locked")
            let fileLock = try await s.admin.lock(testNamespace, Self.request(Self.sessionA, ino: file.inode, owner: 2, .write))
            #expect(fileLock.granted && fileLock.etag == file.etag)
            let folder = try await s.admin.makeFolder(testNamespace, path("a-folder"), FolderRequest())
            let folderLock = try await s.admin.lock(testNamespace, Self.request(Self.sessionA, ino: folder.inode, owner: 2, .write))
            #expect(folderLock.granted && folderLock.etag == nil)
        }
    }

    @Test("a folder made with `names_lease` is that session's to create in, from the same request: another session's names lease on it is refused; a folder that existed is not leased; a malformed session is 400 and makes nothing")
    func namesLeaseWithFolder() async throws {
        try await withServer(configure: { $0.lockLease = 3600 }) { s in
            _ = try await s.admin.renewLockSession(testNamespace, id: Self.sessionA)
            let (made, leased) = try await s.admin.makeFolder(
                testNamespace, try StoragePath("leased"), FolderRequest(parents: false, existOk: false), namesLeaseFor: Self.sessionA)
            #expect(leased)
            let other = try await s.admin.lock(testNamespace, Self.request(Self.sessionB, ino: made.inode, owner: 0, kind: .names, .write))
            #expect(!other.granted)
            #expect(other.conflict?.session == Self.sessionA)
            // Its holder asking again is granted (the lease is the session's, not a second one).
            #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionA, ino: made.inode, owner: 0, kind: .names, .write)).granted)
            let again = try await s.admin.makeFolder(testNamespace, try StoragePath("leased"), FolderRequest(existOk: true), namesLeaseFor: Self.sessionB)
            #expect(!again.leased && again.record.inode == made.inode)
            // Without the field: a folder as always, no lease.
            let plain = try await s.raw.send("PUT", Routes.folder(testNamespace, try StoragePath("plain")), headers: [("Content-Type", "application/json")], body: Data("{}".utf8))
            #expect(plain.status == 201 && plain.header(FolderRequest.namesLeaseHeader) == nil)
            let bad = try await s.raw.send(
                "PUT", Routes.folder(testNamespace, try StoragePath("bad")), headers: [("Content-Type", "application/json")], body: Data(#"{"names_lease":"short"}"#.utf8))
            #expect(bad.status == 400, "\(bad.text)")
            await #expect(throws: StorageError.self) { _ = try await s.admin.record(testNamespace, try StoragePath("bad")) }
        }
    }

    @Test("a folder's lease comes with it in one transaction: a session never seen before is started by it; a lock another session holds on the new inode number is kept, and the lease is not granted")
    func namesLeaseInTheFolderTransaction() async throws {
        try await withServer(configure: { $0.lockLease = 3600 }) { s in
            let newSession = "session-c-0123456789"
            let (made, leased) = try await s.admin.makeFolder(
                testNamespace, try StoragePath("fresh"), FolderRequest(parents: false, existOk: false), namesLeaseFor: newSession)
            #expect(leased)
            // The session the folder's request started is alive: its lease is in another's way.
            let other = try await s.admin.lock(testNamespace, Self.request(Self.sessionB, ino: made.inode, owner: 0, kind: .names, .write))
            #expect(!other.granted && other.conflict?.session == newSession)
            // Session B holds names locks on the next inode numbers (a lock needs no inode to exist).
            let next = (made.inode + 1)...(made.inode + 8)
            for ino in next {
                #expect(try await s.admin.lock(testNamespace, Self.request(Self.sessionB, ino: ino, owner: 0, kind: .names, .write)).granted)
            }
            let (taken, takenLeased) = try await s.admin.makeFolder(
                testNamespace, try StoragePath("taken"), FolderRequest(parents: false, existOk: false), namesLeaseFor: Self.sessionA)
            #expect(next.contains(taken.inode), "the new folder's inode number \(taken.inode) was not one of \(next)")
            #expect(!takenLeased)
            let held = try await s.admin.lock(testNamespace, Self.request(Self.sessionA, ino: taken.inode, owner: 0, kind: .names, .write))
            #expect(!held.granted && held.conflict?.session == Self.sessionB)
            // An existing folder asked for exclusively is refused, and nothing of the lease is taken.
            await #expect(throws: StorageError.self) {
                _ = try await s.admin.makeFolder(testNamespace, try StoragePath("fresh"), FolderRequest(parents: false, existOk: false), namesLeaseFor: Self.sessionA)
            }
            let still = try await s.admin.lock(testNamespace, Self.request(Self.sessionB, ino: made.inode, owner: 0, kind: .names, .write))
            #expect(!still.granted && still.conflict?.session == newSession)
        }
    }

    @Test("bad lock requests are refused with 400; a reader token may lock; an unknown namespace is 404")
    func refusals() async throws {
        try await withServer { s in
            let route = Routes.locks(testNamespace)
            for (body, why) in [
                ("{}", "empty"),
                (#"{"session":"short","ino":1,"owner":1,"kind":"posix","type":"write","start":0,"end":1,"pid":1}"#, "short session"),
                (#"{"session":"session-a-0123456789","ino":9223372036854775808,"owner":1,"kind":"posix","type":"write","start":0,"end":1,"pid":1}"#, "ino past Int64"),
                (#"{"session":"session-a-0123456789","ino":1,"owner":1,"kind":"posix","type":"write","start":5,"end":1,"pid":1}"#, "start past end"),
                (#"{"session":"session-a-0123456789","ino":1,"owner":-1,"kind":"posix","type":"write","start":0,"end":1,"pid":1}"#, "negative owner"),
                (#"{"session":"session-a-0123456789","ino":1,"owner":1,"kind":"posix","type":"write","start":0,"end":18446744073709551616,"pid":1}"#, "end past 2^64"),
                (#"{"session":"session-a-0123456789","ino":1,"owner":1,"kind":"posix","type":"write","start":0,"end":1,"pid":1,"wait_ms":30001}"#, "long wait"),
                (#"{"session":"session-a-0123456789","ino":1,"owner":1,"kind":"byte","type":"write","start":0,"end":1,"pid":1}"#, "kind"),
            ] {
                let answer = try await s.raw.send("POST", route, headers: [("Content-Type", "application/json")], body: Data(body.utf8))
                #expect(answer.status == 400, "\(why): \(answer.status) \(answer.text)")
            }
            let reader = s.client(token: TestServer.readerToken)
            defer { Task { try? await reader.shutdown() } }
            #expect(try await reader.lock(testNamespace, Self.request(Self.sessionA, .read)).granted)
            await #expect(throws: StorageError.self) { _ = try await s.admin.lock(try Namespace("missing"), Self.request(Self.sessionA, .read)) }
            let bad = try await s.raw.send("PUT", Routes.lockSession(testNamespace, "x"))
            #expect(bad.status == 400)
        }
    }

    @Test("a lock released through one replica wakes a request waiting on another at once (LISTEN/NOTIFY, not a poll), also after the listening connection was cut", .enabled(if: TestBackend.isPostgres, "needs STOW_TEST_DATABASE_URL"))
    func acrossReplicas() async throws {
        let dirA = makeTempDirectory("locks-a"), dirB = makeTempDirectory("locks-b")
        defer {
            try? FileManager.default.removeItem(atPath: dirA)
            try? FileManager.default.removeItem(atPath: dirB)
        }
        TestBackend.share(dirA, with: dirB)
        let location = try #require(TestBackend.database(for: dirA))
        // B never polls within a wait (its poll is 60 s, the wait 30 s): without a notification
        // from A's release, the waiter is answered only when its wait is up, 30 s on. So a grant
        // well before that (the bound below) can only have come from the notification. The bound
        // is not a speed: in isolation a wake-up takes ~30 ms, but in the full parallel suite on
        // 2 cores one took 7 s (the wake-up on one server, with no notification at all, 3.5 s).
        try await withServer(dataDirectory: dirA) { a in
            try await withServer(dataDirectory: dirB, configure: { $0.lockPollInterval = .seconds(60) }) { b in
                #expect(try await a.admin.lock(testNamespace, Self.request(Self.sessionA, .write)).granted)
                func rounds(_ n: Int, _ label: String) async throws {
                    var delays: [Duration] = []
                    for i in 0..<n {
                        let waiter = Task { () -> (LockResponse, ContinuousClock.Instant) in
                            let r = try await b.admin.lock(testNamespace, Self.request(Self.sessionB, .write, wait: 30_000))
                            return (r, ContinuousClock.now)
                        }
                        try await Task.sleep(for: .milliseconds(100))
                        let unlocked = ContinuousClock.now
                        _ = try await a.admin.lock(testNamespace, Self.request(Self.sessionA, .unlock))
                        let (answer, at) = try await waiter.value
                        #expect(answer.granted, "\(label) round \(i): the waiter was not woken by the release")
                        delays.append(at - unlocked)
                        _ = try await b.admin.lock(testNamespace, Self.request(Self.sessionB, .unlock))
                        #expect(try await a.admin.lock(testNamespace, Self.request(Self.sessionA, .write)).granted)
                    }
                    let sorted = delays.sorted()
                    print("lock wake-up across replicas (\(label)): median \(sorted[sorted.count / 2]), max \(sorted.last!)")
                    #expect(sorted.last! < .seconds(20), "\(label): woken by the wait's end, not by a notification: \(sorted)")
                }
                try await rounds(10, "listening")
                // The listening connections are cut (a PostgreSQL restart, a proxy's idle timeout):
                // they come back by themselves, and a release wakes the waiter again.
                let name = "stowd listen " + (location.schema ?? "public")
                let cut = try await PostgresTests.sql(location, "SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity WHERE application_name = \(name)")
                #expect(cut.count == 2, "one listening connection per replica")
                var back = 0
                for _ in 0..<100 {
                    try await Task.sleep(for: .milliseconds(100))
                    back = try await PostgresTests.sql(location, "SELECT pid FROM pg_stat_activity WHERE application_name = \(name) AND query LIKE 'LISTEN%'").count
                    if back == 2 { break }
                }
                #expect(back == 2, "the replicas listen again")
                try await rounds(3, "after the cut")
            }
        }
    }
}
