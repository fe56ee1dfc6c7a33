import Foundation
public import NIOCore
public import StorageProtocol
import Synchronization

/// Wraps another `ObjectStore` and makes chosen calls fail, drop halfway, or slow down: for tests
/// of what the filesystem does when the network or the server misbehaves.
///
/// ```swift
/// let faulty = FaultInjectingObjectStore(wrapping: InMemoryObjectStore(namespaces: [ns]))
/// faulty.failNext(2, of: .completeUpload)            // two 500s, then normal
/// faulty.dropHalfway(1, of: .send)                   // half a body arrives, then the connection drops
/// faulty.isOffline = true                            // everything fails as unreachable
/// ```
public final class FaultInjectingObjectStore: ObjectStore {
    public enum Operation: String, Sendable, CaseIterable {
        case namespaces, createNamespace, deleteNamespace, record, list, update, delete, makeFolder, removeFolder, rename, makeNode, link
        case startUpload, uploadedBytes, send, completeUpload, renewUpload, abandonUpload, signedURLs, read, uploadParts, lock
    }

    private struct State {
        var failures: [Operation: [StorageError]] = [:]
        var failAfter: [Operation: Int] = [:]
        var drops: [Operation: Int] = [:]
        var lostAnswers: [Operation: Int] = [:]
        var latency: [Operation: Duration] = [:]
        var holdNext: Set<Operation> = []
        var held = 0
        var released = false
        var defaultLatency: Duration = .zero
        var offline = false
        var calls: [Operation: Int] = [:]
        var readRanges: [Range<Int64>] = []
    }

    public let base: any ObjectStore
    private let state = Mutex(State())

    public init(wrapping base: any ObjectStore) { self.base = base }

    /// The next `count` calls of `op` fail with `error` (default: a transient 500).
    public func failNext(_ count: Int, of op: Operation, with error: StorageError = StorageError(.unavailable, "injected failure", status: 500)) {
        state.withLock { $0.failures[op, default: []] += Array(repeating: error, count: count) }
    }

    /// The first `count` calls of `op` from now succeed; every later one fails as unreachable.
    public func failAfter(_ count: Int, of op: Operation) {
        state.withLock { $0.failAfter[op] = count }
    }

    /// Lifts `failAfter`.
    public func stopFailing(_ op: Operation) {
        state.withLock { $0.failAfter[op] = nil }
    }

    /// The next `count` sends (or streamed reads) deliver half their bytes, then fail as a dropped connection.
    public func dropHalfway(_ count: Int, of op: Operation = .send) {
        state.withLock { $0.drops[op, default: 0] += count }
    }

    /// The next `count` calls of `op` are carried out, then fail as if the answer were lost (a
    /// server that died answering): so far for `completeUpload` (and so for one-request uploads).
    public func loseAnswers(_ count: Int, of op: Operation) {
        state.withLock { $0.lostAnswers[op, default: 0] += count }
    }

    /// Every call of `op` (or of every operation, when nil) waits this long first.
    public func setLatency(_ latency: Duration, for op: Operation? = nil) {
        state.withLock { s in
            if let op { s.latency[op] = latency } else { s.defaultLatency = latency }
        }
    }

    /// The next call of `op` is carried out, and its answer held until `releaseHeldAnswers()`
    /// (so far for `record`, `list` and `rename`). `heldAnswers` counts the answers waiting.
    public func holdNextAnswer(of op: Operation) {
        state.withLock {
            $0.holdNext.insert(op)
            $0.released = false
        }
    }

    public func releaseHeldAnswers() { state.withLock { $0.released = true } }

    public var heldAnswers: Int { state.withLock { $0.held } }

    private func leave(_ op: Operation) async throws {
        let hold = state.withLock { s -> Bool in
            let hold = s.holdNext.remove(op) != nil
            if hold { s.held += 1 }
            return hold
        }
        guard hold else { return }
        defer { state.withLock { $0.held -= 1 } }
        while !state.withLock({ $0.released }) { try await Task.sleep(for: .milliseconds(2)) }
    }

    /// While true, every call fails as if the server were unreachable.
    public var isOffline: Bool {
        get { state.withLock { $0.offline } }
        set { state.withLock { $0.offline = newValue } }
    }

    /// How many times `op` was called.
    public func calls(of op: Operation) -> Int { state.withLock { $0.calls[op] ?? 0 } }

    /// The byte ranges streamed reads asked for, in the order they were asked.
    public var readRanges: [Range<Int64>] { state.withLock { $0.readRanges } }

    private func enter(_ op: Operation) async throws {
        let (delay, failure) = state.withLock { s -> (Duration, StorageError?) in
            s.calls[op, default: 0] += 1
            if s.offline { return (s.latency[op] ?? s.defaultLatency, StorageError(.unavailable, "injected: server unreachable")) }
            var f: StorageError?
            if let left = s.failAfter[op] {
                if left > 0 { s.failAfter[op] = left - 1 } else { f = StorageError(.unavailable, "injected: server unreachable") }
            }
            if f == nil, var list = s.failures[op], !list.isEmpty {
                f = list.removeFirst()
                s.failures[op] = list
            }
            return (s.latency[op] ?? s.defaultLatency, f)
        }
        if delay > .zero { try await Task.sleep(for: delay) }
        if let failure { throw failure }
    }

    private func answer<T>(_ op: Operation, _ value: T) throws -> T {
        let lose = state.withLock { s -> Bool in
            guard let n = s.lostAnswers[op], n > 0 else { return false }
            s.lostAnswers[op] = n - 1
            return true
        }
        if lose { throw StorageError(.unavailable, "injected: the answer was lost") }
        return value
    }

    private func takeDrop(_ op: Operation) -> Bool {
        state.withLock { s in
            guard let n = s.drops[op], n > 0 else { return false }
            s.drops[op] = n - 1
            return true
        }
    }

    public func namespaces() async throws -> [NamespaceRecord] { try await enter(.namespaces); return try await base.namespaces() }
    public func createNamespace(_ ns: Namespace) async throws -> NamespaceRecord { try await enter(.createNamespace); return try await base.createNamespace(ns) }
    public func deleteNamespace(_ ns: Namespace, recursive: Bool) async throws { try await enter(.deleteNamespace); try await base.deleteNamespace(ns, recursive: recursive) }
    public func record(_ ns: Namespace, _ path: StoragePath) async throws -> FileRecord {
        try await enter(.record)
        let r = try await base.record(ns, path)
        try await leave(.record)
        return r
    }
    public func list(_ ns: Namespace, folder: StoragePath, after: String?, limit: Int) async throws -> ListPage {
        try await enter(.list)
        let page = try await base.list(ns, folder: folder, after: after, limit: limit)
        try await leave(.list)
        return page
    }
    public func update(_ ns: Namespace, _ path: StoragePath, _ patch: FilePatch, ifMatch: String?) async throws -> FileRecord {
        try await enter(.update)
        return try await base.update(ns, path, patch, ifMatch: ifMatch)
    }
    public func delete(_ ns: Namespace, _ path: StoragePath, ifMatch: String?) async throws { try await enter(.delete); try await base.delete(ns, path, ifMatch: ifMatch) }
    /// Each delete goes through `enter(.delete)` (its faults), then the wrapped store's `deleteFiles`.
    public func deleteFiles(_ ns: Namespace, _ files: [FileDeletion]) async -> [Result<Void, StorageError>] {
        var results: [Result<Void, StorageError>] = []
        for f in files {
            do {
                try await enter(.delete)
            } catch let e as StorageError {
                results.append(.failure(e))
                continue
            } catch {
                results.append(.failure(StorageError(.cancelled, "\(error)")))
                continue
            }
            results += await base.deleteFiles(ns, [f])
        }
        return results
    }
    public func makeFolder(_ ns: Namespace, _ path: StoragePath, _ request: FolderRequest) async throws -> FileRecord {
        try await enter(.makeFolder)
        return try await base.makeFolder(ns, path, request)
    }
    public func removeFolder(_ ns: Namespace, _ path: StoragePath) async throws { try await enter(.removeFolder); try await base.removeFolder(ns, path) }
    public func rename(_ ns: Namespace, from: StoragePath, to: StoragePath, replace: Bool, exchange: Bool) async throws -> FileRecord {
        try await enter(.rename)
        let record = try await base.rename(ns, from: from, to: to, replace: replace, exchange: exchange)
        try await leave(.rename)
        return try answer(.rename, record)
    }
    public func makeNode(_ ns: Namespace, _ path: StoragePath, _ request: NodeRequest) async throws -> FileRecord {
        try await enter(.makeNode)
        return try await base.makeNode(ns, path, request)
    }
    public func link(_ ns: Namespace, from: StoragePath, to: StoragePath) async throws -> FileRecord {
        try await enter(.link)
        return try await base.link(ns, from: from, to: to)
    }
    public func startUpload(_ ns: Namespace, _ request: StartUploadRequest) async throws -> StartUploadResponse {
        try await enter(.startUpload)
        return try await base.startUpload(ns, request)
    }
    public func uploadedBytes(_ session: StartUploadResponse) async throws -> Int64 { try await enter(.uploadedBytes); return try await base.uploadedBytes(session) }
    public func send(_ session: StartUploadResponse, from source: UploadSource, offset: Int64, end: Int64, progress: ProgressHandler?) async throws -> Int64 {
        try await enter(.send)
        if takeDrop(.send) {
            let half = offset + (end - offset) / 2
            if half > offset {
                // The server keeps what arrived; a PUT that breaks off is resumed as tus chunks.
                let current = try await base.uploadedBytes(session)
                if current == offset || offset == 0 {
                    _ = try await base.send(session, from: source, offset: offset, end: half, progress: progress)
                }
            }
            throw StorageError(.unavailable, "injected: connection dropped after \(half - offset) bytes")
        }
        return try await base.send(session, from: source, offset: offset, end: end, progress: progress)
    }
    public func uploadParts(_ session: StartUploadResponse, numbers: [Int]) async throws -> UploadPartsResponse {
        try await enter(.uploadParts)
        return try await base.uploadParts(session, numbers: numbers)
    }
    /// Counted, failed and dropped as `.send`: a direct PUT that drops stores nothing.
    public func putDirect(url: String, headers: [String: String], from source: UploadSource, offset: Int64, end: Int64, progress: ProgressHandler?) async throws {
        try await enter(.send)
        if takeDrop(.send) { throw StorageError(.unavailable, "injected: connection dropped during a direct PUT") }
        try await base.putDirect(url: url, headers: headers, from: source, offset: offset, end: end, progress: progress)
    }
    public func localBlobPath(url: String, etag: String) async throws -> String? { try await base.localBlobPath(url: url, etag: etag) }
    public func completeUpload(_ session: StartUploadResponse) async throws -> FileRecord {
        try await enter(.completeUpload)
        return try answer(.completeUpload, try await base.completeUpload(session))
    }
    public func renewUpload(_ session: StartUploadResponse) async throws -> StartUploadResponse {
        try await enter(.renewUpload)
        return try await base.renewUpload(session)
    }
    public func abandonUpload(_ session: StartUploadResponse) async throws { try await enter(.abandonUpload); try await base.abandonUpload(session) }
    public func signedURLs(_ ns: Namespace, _ paths: [StoragePath], expiry: Int) async throws -> [SignedURL] {
        try await enter(.signedURLs)
        return try await base.signedURLs(ns, paths, expiry: expiry)
    }
    public func read(url: String, range: Range<Int64>?, ifMatch: String?) async throws -> ReadResult {
        try await enter(.read)
        return try await base.read(url: url, range: range, ifMatch: ifMatch)
    }
    /// With `dropHalfway(n, of: .read)`, a streamed read hands over half its bytes, then fails as
    /// a dropped connection.
    public func read(url: String, range: Range<Int64>, ifMatch: String?, consume: (ByteBuffer) throws -> Void) async throws -> Int64 {
        try await enter(.read)
        state.withLock { $0.readRanges.append(range) }
        let result = try await base.read(url: url, range: range, ifMatch: ifMatch)
        guard takeDrop(.read) else {
            try consume(result.bytes)
            return Int64(result.bytes.readableBytes)
        }
        let half = result.bytes.readableBytes / 2
        if half > 0, let slice = result.bytes.getSlice(at: result.bytes.readerIndex, length: half) { try consume(slice) }
        throw StorageError(.unavailable, "injected: connection dropped after \(half) bytes")
    }

    /// Lock calls are counted, failed and delayed as `.lock`.
    public func renewLockSession(_ ns: Namespace, id: String) async throws -> LockSessionResponse {
        try await enter(.lock)
        return try await base.renewLockSession(ns, id: id)
    }
    public func endLockSession(_ ns: Namespace, id: String) async throws { try await enter(.lock); try await base.endLockSession(ns, id: id) }
    public func lock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse {
        try await enter(.lock)
        return try await base.lock(ns, request)
    }
    public func testLock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse {
        try await enter(.lock)
        return try await base.testLock(ns, request)
    }
    public func changes(_ ns: Namespace, since: String?, wait: Duration) async throws -> ChangesResponse {
        try await base.changes(ns, since: since, wait: wait)
    }
}
