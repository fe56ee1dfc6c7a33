@testable import StorageServer
import StorageProtocol
import Testing

/// `uploads/copy` tasks live in memory: their number stays bounded however many are made.
@Suite("copy tasks are bounded")
struct CopyTaskLimitTests {
    static func task(_ i: Int, state: String = "running") -> CopyTask {
        CopyTask(id: "t\(i)", progress: 0, attemptsMade: 0, state: state, files: [], failures: [], timestamp: 0)
    }

    @Test("finished tasks are forgotten after an hour; at the cap the oldest finished goes; with all running, a new one is refused")
    func bounded() async throws {
        let tasks = CopyTasks()
        let ns = try Namespace("test")
        let now = Timestamp.nowSeconds()
        for i in 0..<CopyTasks.maxTasks { #expect(await tasks.put(Self.task(i), namespace: ns, now: now)) }
        #expect(await tasks.put(Self.task(-1), namespace: ns, now: now) == false)
        await tasks.update("t0") { $0.state = "completed" }
        #expect(await tasks.put(Self.task(-1), namespace: ns, now: now))
        #expect(await tasks.get("t0") == nil)
        #expect(await tasks.get("t-1") != nil)
        await tasks.update("t1") { $0.state = "failed" }
        // An hour later the finished one is gone without any pressure.
        #expect(await tasks.put(Self.task(-2), namespace: ns, now: now + CopyTasks.keepFinished + 1))
        #expect(await tasks.get("t1") == nil)
        #expect(await tasks.count == CopyTasks.maxTasks)
    }
}
