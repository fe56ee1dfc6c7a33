public import StorageProtocol
import Synchronization

/// A file sent straight to the object store while it is still being written: the parts of a
/// deferred-length upload whose start offered a direct way (`upload.direct` with no whole-file
/// `url` and `parts` 0). Each whole part of `partSize` bytes goes as soon as the file holds it,
/// up to `parallel` at a time, read from the file; the last, short one once the final size is
/// known (`finish`). `run` returns when the store has every part of that size; the caller then
/// completes the upload with it, as any deferred-length upload.
///
/// The file may only grow while this runs: a part is read once, when the file holds all of it.
/// A part that fails is sent again (a refused signature: with a fresh URL) up to the retry
/// policy's attempts; after that, `run` throws, and the caller abandons the session.
///
/// ```swift
/// let started = try await store.startUpload(ns, StartUploadRequest(fileName: "big.bin", size: 0, deferLength: true))
/// if let parts = GrowingDirectUpload(store: store, session: started, path: file) {
///     // grew(to:) as the file is written, finish(size:) when it is whole
///     try await parts.run()
/// }
/// ```
public final class GrowingDirectUpload: Sendable {
    /// The most parts an upload may have (S3's limit).
    public static let maxParts = 10_000

    private struct State {
        /// Bytes the file holds.
        var available: Int64 = 0
        /// The final size, once known.
        var final: Int64?
        var stopped = false
        var failure: StorageError?
        /// Parts in the store, by number: where each ends.
        var done: [Int: Int64] = [:]
        /// Parts in the store from the first on, without a gap, and the bytes they hold.
        var storedParts = 0
        var stored: Int64 = 0
        /// Bytes of every part in the store, gaps or not.
        var sent: Int64 = 0
    }

    public let partSize: Int64
    private let store: any ObjectStore
    private let session: StartUploadResponse
    private let path: String
    private let parallel: Int
    private let retry: RetryPolicy
    private let state = Mutex(State())
    /// A signal kept until the loop takes it (at most one is kept: one look covers them all).
    private let signals: AsyncStream<Void>
    private let signal: AsyncStream<Void>.Continuation

    /// nil when `session` is not a deferred-length upload with a direct way in parts, or one whose
    /// part size no object store takes (then the bytes go through the storage link): a size past
    /// `DirectUpload.largestPart` would overflow `(next - 1) * partSize` below.
    public init?(store: any ObjectStore, session: StartUploadResponse, path: String, parallel: Int = 4, retry: RetryPolicy = .default) {
        guard session.deferLength == true, let direct = session.upload.direct, direct.url == nil, (1...DirectUpload.largestPart).contains(direct.partSize)
        else { return nil }
        self.store = store
        self.session = session
        self.path = path
        self.partSize = direct.partSize
        self.parallel = max(1, parallel)
        self.retry = retry
        (signals, signal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// The most bytes the upload can take (`maxParts` parts).
    public var capacity: Int64 { partSize * Int64(Self.maxParts) }

    /// Bytes the store has, from the start on without a gap.
    public var stored: Int64 { state.withLock { $0.stored } }

    /// Bytes of all the parts the store has (the pace of the upload: parts finish out of order).
    public var sent: Int64 { state.withLock { $0.sent } }

    /// The file holds `size` bytes now (it only grows).
    public func grew(to size: Int64) {
        let due = state.withLock { s -> Bool in
            guard size > s.available else { return false }
            let whole = s.available / partSize
            s.available = size
            return size / partSize > whole
        }
        if due { signal.yield() }
    }

    /// The file is whole, of `size` bytes: its last part may go.
    public func finish(size: Int64) {
        state.withLock { s in
            s.final = size
            s.available = max(s.available, size)
        }
        signal.yield()
    }

    /// Stops sending: `run` throws `.cancelled`. Parts in flight are cancelled.
    public func stop() {
        state.withLock { $0.stopped = true }
        signal.yield()
    }

    /// Sends the parts as the file grows; returns once the store has every part of the final size.
    public func run() async throws {
        var wakes = signals.makeAsyncIterator()
        try await withThrowingTaskGroup(of: Void.self) { group in
            // On a throw, the group cancels the parts still in flight and waits for them.
            var next = 1
            // Where the last part launched ends: the final size may not be short of it.
            var launchedEnd: Int64 = 0
            var urls: [Int: String] = [:]
            while true {
                let s = state.withLock { $0 }
                if s.stopped || Task.isCancelled { throw StorageError(.cancelled, "the direct upload of \(path) was stopped") }
                if let failure = s.failure { throw failure }
                if let final = s.final {
                    let count = Int((final + partSize - 1) / partSize)
                    guard launchedEnd <= final else {
                        throw StorageError(.localIO, "\(path) ended at \(final) bytes, before parts already sent")
                    }
                    if s.storedParts == count { return }
                }
                let limit = s.final ?? s.available
                var inFlight = next - 1 - s.done.count
                while inFlight < parallel {
                    let start = Int64(next - 1) * partSize
                    let end = min(start + partSize, limit)
                    // A whole part, or the last one once the size is final.
                    guard end > start, end - start == partSize || s.final != nil else { break }
                    guard next <= Self.maxParts else {
                        throw StorageError(.tooLarge, "\(path) is larger than \(Self.maxParts) parts of \(partSize) bytes")
                    }
                    if urls[next] == nil { urls = try await self.urls(from: next) }
                    let number = next, url = urls.removeValue(forKey: number)
                    group.addTask { await self.send(number, url: url, start, end) }
                    launchedEnd = end
                    next += 1
                    inFlight += 1
                }
                _ = await wakes.next()
            }
        }
    }

    /// Presigned URLs of the next parts from `first` on (16 at a time: asking also keeps the
    /// session alive, so not too far ahead).
    private func urls(from first: Int) async throws -> [Int: String] {
        let numbers = Array(first...min(first + 15, Self.maxParts))
        let answer = try await retry.run { try await store.uploadParts(session, numbers: numbers) }
        var urls: [Int: String] = [:]
        for part in answer.parts {
            if let url = part.url { urls[part.number] = url }
        }
        guard urls[first] != nil else { throw StorageError(.protocolViolation, "the server gave no URL for part \(first)") }
        return urls
    }

    /// One part, sent until the store has it or the attempts are spent (then `failure`).
    private func send(_ number: Int, url: String?, _ start: Int64, _ end: Int64) async {
        var url = url
        var attempt = 1
        while !Task.isCancelled {
            do {
                if url == nil { url = try await urls(from: number)[number] }
                guard let target = url else { throw StorageError(.protocolViolation, "the server gave no URL for part \(number)") }
                try await store.putDirect(url: target, headers: [:], from: .file(path: path), offset: start, end: end, progress: nil)
                state.withLock { s in
                    s.done[number] = end
                    s.sent += end - start
                    while let e = s.done[s.storedParts + 1] {
                        s.storedParts += 1
                        s.stored = e
                    }
                }
                signal.yield()
                return
            } catch {
                if Task.isCancelled { return }
                let failure = error as? StorageError ?? StorageError(.localIO, "part \(number) of \(path): \(error)")
                if failure.isTransient || failure.kind == .forbidden, attempt < retry.attempts {
                    // A refused signature: the URL expired (a writer idle for long); ask again.
                    if failure.kind == .forbidden { url = nil }
                    try? await retry.sleep(retry.delay(after: attempt))
                    attempt += 1
                    continue
                }
                state.withLock { s in
                    if s.failure == nil { s.failure = failure }
                }
                signal.yield()
                return
            }
        }
    }
}
