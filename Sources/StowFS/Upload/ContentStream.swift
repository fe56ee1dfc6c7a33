import Foundation
import Logging
import StorageClient
import StorageProtocol
import Synchronization

/// A large file sent to the server while it is still being written: a deferred-length upload
/// whose PATCHes follow the appends, completed by the last close with the final size and
/// attributes. Then close(2) needs no fsync of the local copy and no journal record: the server
/// has every byte (docs/SEMANTICS.md S1).
///
/// With an object store behind the server (its start offers a direct way in parts), the bytes
/// go straight to the store, in whole parts as the file fills them, several at a time
/// (`GrowingDirectUpload`); else through the storage link, one PATCH after another.
///
/// Only a file written from empty by appends streams: a write anywhere else, a truncate, a
/// rename, a second writer or any upload of the file the usual way abandons the stream (its
/// session is deleted), and the file goes the usual way — a stream never completes unless it
/// is exactly the file as it was closed.
final class ContentStream: Sendable {
    /// Where the stream stands.
    private struct State {
        /// Bytes appended to the local copy so far.
        var written: Int64 = 0
        /// Bytes the server has.
        var sent: Int64 = 0
        var abandoned = false
        /// Set by `finish`: the final size and declaration, and what to do just before complete.
        var final: Final?
        /// The parts sent straight to the object store, when the server offers that.
        var parts: GrowingDirectUpload?
    }

    /// The final size and declaration, and what to do just before complete.
    private typealias Final = (size: Int64, request: StartUploadRequest, prepare: @Sendable (StartUploadResponse) async throws -> Void)

    let location: Location
    let cacheFile: String
    private let store: any ObjectStore
    private let chunk: Int64
    private let logger: Logger
    private let state = Mutex(State())
    private let wake = Wakeup()
    private let task = Mutex<Task<FileRecord?, Never>?>(nil)
    private let support: StreamSupport
    private let began = ContinuousClock.now

    /// Starts sending `cacheFile` as it grows to `location`, declared as `request` (its size is deferred).
    init(
        location: Location, cacheFile: String, request: StartUploadRequest, written: Int64, store: any ObjectStore, chunk: Int64, logger: Logger,
        support: StreamSupport
    ) {
        self.support = support
        self.location = location
        self.cacheFile = cacheFile
        self.store = store
        self.chunk = chunk
        self.logger = logger
        state.withLock { $0.written = written }
        let t = Task { [self] in await self.run(request) }
        task.withLock { $0 = t }
    }

    /// Bytes the server has so far.
    var sent: Int64 {
        let (sent, parts) = state.withLock { ($0.sent, $0.parts) }
        return parts?.stored ?? sent
    }

    /// Whether the last `tail` bytes would reach the server within `limit` at the pace so far
    /// (a close waits that long at most, or the file goes the usual way).
    func catchesUp(tail: Int64, within limit: Duration) -> Bool {
        if tail <= 4 * chunk { return true }
        // With parts in parallel, every part the store has counts, not only those without a gap.
        let (patched, parts) = state.withLock { ($0.sent, $0.parts) }
        let pace = Double(parts?.sent ?? patched) / max((ContinuousClock.now - began) / .seconds(1), 0.001)
        return pace > 0 && Double(tail) / pace <= limit / .seconds(1)
    }

    /// The local copy grew (by appends) to `size` bytes.
    func grew(to size: Int64) {
        let (due, parts) = state.withLock { s -> (Bool, GrowingDirectUpload?) in
            s.written = size
            return (s.written - s.sent >= chunk, s.parts)
        }
        if let parts {
            parts.grew(to: size)
        } else if due {
            wake.signal()
        }
    }

    /// Stops for good: the file goes the usual way. The session is deleted.
    func abandon() {
        let parts = state.withLock { s in
            s.abandoned = true
            return s.parts
        }
        parts?.stop()
        wake.signal()
    }

    /// Sends what is left and completes with this size and declaration (the file as it was
    /// closed); nil when the stream failed or was abandoned (the caller then goes the usual way).
    /// `prepare` runs with complete's body just before it is sent (a failure abandons the stream).
    func finish(
        size: Int64, request: StartUploadRequest, timeout: Duration, prepare: @escaping @Sendable (StartUploadResponse) async throws -> Void
    ) async -> FileRecord? {
        let parts = state.withLock { s in
            s.written = size
            s.final = (size, request, prepare)
            return s.parts
        }
        parts?.finish(size: size)
        wake.signal()
        guard let t = task.withLock({ $0 }) else { return nil }
        // A server that stalls does not hold close(2) forever: past the timeout the file goes the usual way.
        let timer = Task { [self] in
            try? await Task.sleep(for: timeout)
            if !Task.isCancelled { abandon() }
        }
        let record = await t.value
        timer.cancel()
        return record
    }

    private func run(_ request: StartUploadRequest) async -> FileRecord? {
        guard let ns = location.namespace else { return nil }
        var session: StartUploadResponse?
        // Once a journal record stands for this upload (`prepare`), its session is left for the
        // next mount to complete, or for the server to collect: never deleted from here.
        var prepared = false
        do {
            var started = try await store.startUpload(ns, request)
            session = started
            // A server from before deferred lengths sized the upload 0: it cannot take this.
            guard started.deferLength == true else {
                support.works = false
                throw StorageError(.protocolViolation, "the server does not take deferred-length uploads")
            }
            /// Completes with the file as it was closed, unless it was abandoned meanwhile (then
            /// the file goes the usual way).
            func complete(_ final: Final) async throws -> FileRecord? {
                var complete = started
                complete.size = final.size
                complete.params = final.request.params
                complete.tags = final.request.tags ?? []
                complete.contentType = final.request.contentType ?? started.contentType
                if state.withLock({ $0.abandoned }) { return nil }
                prepared = true
                try await final.prepare(complete)
                let record = try await store.completeUpload(complete)
                try UploadQueue.check(record, holds: final.size, of: location)
                logger.debug("streamed \(location) (\(final.size) bytes)")
                return record
            }
            if let parts = GrowingDirectUpload(store: store, session: started, path: cacheFile) {
                // Straight to the object store: what was written and declared so far is handed over.
                let (abandoned, written, final) = state.withLock { s in
                    s.parts = parts
                    return (s.abandoned, s.written, s.final)
                }
                parts.grew(to: written)
                if let final { parts.finish(size: final.size) }
                if abandoned { parts.stop() }
                try await parts.run()
                guard let final = state.withLock({ $0.final }) else { throw StorageError(.protocolViolation, "the parts of \(location) ended before its close") }
                if let record = try await complete(final) { return record }
            }
            while state.withLock({ $0.parts == nil }) {
                let (abandoned, written, sent, final) = state.withLock { s in (s.abandoned, s.written, s.sent, s.final) }
                if abandoned { break }
                let target = final?.size ?? written
                if let final, sent > final.size { throw StorageError(.localIO, "\(location) is shorter than what was sent") }
                if let final, sent == final.size {
                    if let record = try await complete(final) { return record }
                    break
                }
                if target - sent >= chunk || (final != nil && target > sent) {
                    // A writer idle for longer than the link's lifetime finds it expired: renewed.
                    let reached = try await store.renewing(&started) { try await store.send($0, from: .file(path: cacheFile), offset: sent, end: target, progress: nil) }
                    session = started
                    guard reached > sent else { throw StorageError(.localIO, "no byte of \(location) past \(sent) was taken") }
                    state.withLock { $0.sent = reached }
                    continue
                }
                await wake.wait(timeout: .seconds(3600))
            }
        } catch {
            logger.debug("stream of \(location) stopped: \(error)")
        }
        state.withLock { $0.abandoned = true }
        if let session, !prepared {
            let store = self.store
            Task { try? await store.abandonUpload(session) }
        }
        return nil
    }
}

/// Whether the server takes deferred-length uploads: false once one showed it does not (a stowd
/// from before them sizes such an upload 0); then no file streams any more.
final class StreamSupport: Sendable {
    private let flag = Atomic<Bool>(true)
    var works: Bool {
        get { flag.load(ordering: .relaxed) }
        set { flag.store(newValue, ordering: .relaxed) }
    }
}
