import ServiceLifecycle
import Synchronization

/// Wakes readers of the change feed that wait for changes: bumped after every request of this
/// server that changed something (`OriginMiddleware`), so a reader re-reads the feed at once
/// instead of at its next poll. Closed at shutdown: every wait ends, and streams with it.
final class ChangeSignal: Sendable {
    private struct State {
        var generation: UInt64 = 0
        var closed = false
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let state = Mutex(State())

    var generation: UInt64 { state.withLock { $0.generation } }
    var isClosed: Bool { state.withLock { $0.closed } }

    func bump() {
        let woken = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.generation &+= 1
            defer { s.waiters.removeAll() }
            return Array(s.waiters.values)
        }
        for w in woken { w.resume() }
    }

    func close() {
        let woken = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.closed = true
            s.generation &+= 1
            defer { s.waiters.removeAll() }
            return Array(s.waiters.values)
        }
        for w in woken { w.resume() }
    }

    /// Returns once the generation is past `generation`, the signal is closed, `timeout` passed,
    /// or the task is cancelled.
    func wait(after generation: UInt64, timeout: Duration) async {
        let id = state.withLock { s -> UInt64 in
            s.nextWaiter &+= 1
            return s.nextWaiter
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                try? await Task.sleep(for: timeout)
                self.resume(id)
            }
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                        let now = self.state.withLock { s -> Bool in
                            // Checked under the lock that the cancellation handler takes too.
                            if s.closed || s.generation != generation || Task.isCancelled { return true }
                            s.waiters[id] = c
                            return false
                        }
                        if now { c.resume() }
                    }
                } onCancel: {
                    self.resume(id)
                }
            }
            // The first to end (a bump, the timeout) ends the other.
            await group.next()
            group.cancelAll()
            self.resume(id)
        }
    }

    private func resume(_ id: UInt64) {
        state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
    }
}

/// Closes the change signal when the server begins to shut down, so that streams of the feed
/// end and the server's graceful shutdown does not wait for them.
struct ChangeSignalCloser: Service {
    let signal: ChangeSignal

    func run() async throws {
        try? await gracefulShutdown()
        signal.close()
    }
}

/// Wakes this server's lock waits when another server sharing the store changed locks
/// (`MetadataStore.followOtherServers`), until the server begins to shut down.
struct OtherServersFollower: Service {
    let store: any MetadataStore
    let lockSignal: ChangeSignal

    func run() async throws {
        let signal = lockSignal
        try? await cancelWhenGracefulShutdown {
            await store.followOtherServers { _ in signal.bump() }
        }
        // A store no one else shares returns at once: stay until the shutdown, as the others do.
        try? await gracefulShutdown()
    }
}

/// Calls `action` when the server's graceful shutdown begins.
struct ShutdownHook: Service {
    let action: @Sendable () -> Void

    func run() async throws {
        try? await gracefulShutdown()
        action()
    }
}
