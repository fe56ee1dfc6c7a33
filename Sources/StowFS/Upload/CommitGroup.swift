import Foundation

/// Callers on several threads that each wait for their item to be committed, one commit for all
/// of those waiting: the first caller commits what is waiting while the others wait; those that
/// arrive during that commit go together in the next. (The journal's synced commits and the
/// close log's writes.)
final class CommitGroup<Item>: @unchecked Sendable {
    private final class Waiter {
        let item: Item
        /// Set by the thread that committed it, under `lock`.
        var result: Result<Int64, any Error>?
        init(_ item: Item) { self.item = item }
    }
    private let lock = NSCondition()
    /// Guarded by `lock`.
    private var waiting: [Waiter] = []
    private var committing = false
    private var sharedCount = 0

    /// Returns `item`'s result once a commit that held it is done. `commit` gets the items waiting,
    /// in order, and returns one result for each.
    func run(_ item: Item, commit: ([Item]) -> [Result<Int64, any Error>]) throws -> Int64 {
        let me = Waiter(item)
        lock.lock()
        waiting.append(me)
        while me.result == nil {
            if committing {
                lock.wait()
                continue
            }
            committing = true
            let batch = waiting
            waiting = []
            if batch.count > 1 { sharedCount += 1 }
            lock.unlock()
            let results = commit(batch.map(\.item))
            lock.lock()
            for (w, r) in zip(batch, results) { w.result = r }
            committing = false
            lock.broadcast()
        }
        lock.unlock()
        return try me.result!.get()
    }

    /// How many commits carried more than one caller's item (for tests).
    var shared: Int {
        lock.lock()
        defer { lock.unlock() }
        return sharedCount
    }
}
