import Synchronization

/// Async locks by inode number: an inode's changes of local state (a snapshot handed to the queue,
/// attributes amended into an owed upload, a rename re-targeting it, an unlink cancelling it) happen
/// one at a time, even though each of them awaits the queue.
final class InodeLocks: Sendable {
    private struct State {
        var held: Set<InodeNumber> = []
        var waiters: [InodeNumber: [CheckedContinuation<Void, Never>]] = [:]
    }

    private let state = Mutex(State())

    /// Runs `body` holding the locks of `inodes` (taken in ascending order, so two callers never deadlock).
    func withLocks<T>(_ inodes: [InodeNumber], _ body: () async throws -> T) async rethrows -> T {
        let ordered = Array(Set(inodes)).sorted()
        for ino in ordered { await lock(ino) }
        defer { for ino in ordered.reversed() { unlock(ino) } }
        return try await body()
    }

    func withLock<T>(_ ino: InodeNumber, _ body: () async throws -> T) async rethrows -> T {
        try await withLocks([ino], body)
    }

    /// Runs `body` if the inode's lock is free now, without waiting; nil when it is held.
    func ifFree<T, E: Error>(_ ino: InodeNumber, _ body: () throws(E) -> T) throws(E) -> T? {
        guard state.withLock({ $0.held.insert(ino).inserted }) else { return nil }
        defer { unlock(ino) }
        return try body()
    }

    private func lock(_ ino: InodeNumber) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.held.insert(ino).inserted { return true }
                s.waiters[ino, default: []].append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    private func unlock(_ ino: InodeNumber) {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if var queue = s.waiters[ino], !queue.isEmpty {
                let c = queue.removeFirst()
                s.waiters[ino] = queue.isEmpty ? nil : queue
                return c  // ownership passes to the next waiter
            }
            s.held.remove(ino)
            return nil
        }
        next?.resume()
    }
}

/// Blocking locks by inode for steps done on the FUSE thread (close's flush): two flushes of one
/// file — two descriptors closed at once — take turns. Striped: two inodes may share a stripe.
final class FlushLocks: Sendable {
    private final class Stripe: Sendable { let lock = Mutex(()) }
    private let stripes = (0..<64).map { _ in Stripe() }

    func withLock(_ ino: InodeNumber, _ body: () throws(FSError) -> Void) throws(FSError) {
        try stripes[Int(ino % 64)].lock.withLock { (_: inout ()) throws(FSError) in try body() }
    }

    /// The locks of several inodes at once (each stripe once, in the stripes' order).
    func withLocks(_ inodes: [InodeNumber], _ body: () -> Void) {
        func nest(_ rest: ArraySlice<Int>) {
            guard let first = rest.first else { return body() }
            stripes[first].lock.withLock { _ in nest(rest.dropFirst()) }
        }
        nest(Array(Set(inodes.map { Int($0 % 64) })).sorted()[...])
    }

    /// Every inode's lock at once: no close's flush, sync's copy or unlink is halfway (its path
    /// read, its record not yet written) while `body` runs. For a folder's rename, whose files are
    /// too many to name.
    func withAllLocks(_ body: () -> Void) {
        withLocks((0..<64).map { InodeNumber($0) }, body)
    }
}
