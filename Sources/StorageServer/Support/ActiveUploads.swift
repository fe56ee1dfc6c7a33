import Crypto
import Foundation
import NIOCore
import StorageProtocol
import Synchronization

/// Uploads being written right now: one writer at a time per upload, and the running SHA-256 of
/// each upload's bytes, carried from one request (tus chunk) to the next, so that complete need
/// not read the file again.
///
/// The digest is only an optimisation: it is kept in memory, and complete hashes the file when it
/// is missing (after a restart, or after a chunk that broke off).
final class ActiveUploads: Sendable {
    private struct State {
        var busy: Set<String> = []
        var running: [String: RunningDigest] = [:]
    }

    private let state = Mutex(State())

    /// Marks the upload busy; false when another request holds it.
    func begin(_ id: String) -> Bool {
        state.withLock { $0.busy.insert(id).inserted }
    }

    func end(_ id: String) {
        state.withLock { _ = $0.busy.remove(id) }
    }

    /// Runs `body` while holding the upload; a second request for the same upload gets a 409.
    func exclusively<T>(_ id: String, _ body: () async throws -> T) async throws -> T {
        guard begin(id) else { throw APIError.conflict(.conflict, "another request is writing this upload; try again when it ends") }
        defer { end(id) }
        return try await body()
    }

    /// The SHA-256 of the upload's first `bytes` bytes, when its running digest covers exactly those.
    func digest(_ id: String, bytes: Int64) -> String? {
        guard let d = state.withLock({ $0.running[id] }), d.bytes == bytes else { return nil }
        return d.hex()
    }

    /// The SHA-256 of the upload's first `bytes` bytes followed by `zeros` zero bytes (a declared
    /// tail of zeros), when its running digest covers exactly those bytes; the digest is not changed.
    func digest(_ id: String, bytes: Int64, thenZeros zeros: Int64) -> String? {
        guard let d = state.withLock({ $0.running[id] }), d.bytes == bytes else { return nil }
        return d.hex(thenZeros: zeros)
    }

    /// A digest for bytes written in one go (a batch's file, a form's part, a copy), for `finish`.
    func startDigest(_ id: String) -> RunningDigest {
        let d = RunningDigest()
        state.withLock { $0.running[id] = d }
        return d
    }

    /// The running digest to go on with for a body written at `offset`: a new one at 0, the kept
    /// one when it covers exactly the bytes before `offset`, else nil (complete will hash the file).
    func runningDigest(_ id: String, at offset: Int64) -> RunningDigest? {
        state.withLock { s in
            if offset == 0 {
                let d = RunningDigest()
                s.running[id] = d
                return d
            }
            guard let d = s.running[id], d.bytes == offset else {
                s.running[id] = nil
                return nil
            }
            return d
        }
    }

    /// The running digest no longer matches the file (a body broke off or was cut back).
    func dropRunningDigest(_ id: String) {
        state.withLock { _ = $0.running.removeValue(forKey: id) }
    }

    func forget(_ id: String) {
        state.withLock { _ = $0.running.removeValue(forKey: id) }
    }
}

/// A SHA-256 being computed over an upload's bytes, in order, possibly over several requests and
/// on another thread than the one receiving (the `Mutex` makes the hasher safe to share).
final class RunningDigest: Sendable {
    private let state = Mutex((hasher: SHA256(), bytes: Int64(0)))

    /// How many bytes went in so far.
    var bytes: Int64 { state.withLock { $0.bytes } }

    func update(_ buffers: [ByteBuffer]) {
        state.withLock { s in
            for b in buffers {
                s.hasher.update(data: b.readableBytesView)
                s.bytes += Int64(b.readableBytes)
            }
        }
    }

    /// The hex digest of everything so far.
    func hex() -> String {
        state.withLock { s in Hex.lowercase(s.hasher.finalize()) }
    }

    /// The hex digest of everything so far and `zeros` zero bytes after it (this digest unchanged).
    func hex(thenZeros zeros: Int64) -> String {
        // Inside the lock: the hasher is not Sendable (no writer runs while an upload completes).
        state.withLock { s in
            var hasher = s.hasher
            let block = [UInt8](repeating: 0, count: 1 << 20)
            var left = zeros
            while left > 0 {
                let n = Int(min(left, Int64(block.count)))
                hasher.update(data: block[0..<n])
                left -= Int64(n)
            }
            return Hex.lowercase(hasher.finalize())
        }
    }
}

/// A staged writer that feeds a running digest with what it writes (uploads written in one go).
struct DigestingWriter: StagedWriter {
    var inner: any StagedWriter
    let digest: RunningDigest
    var offset: Int64 { inner.offset }

    mutating func write(_ buffer: ByteBuffer) async throws {
        try await inner.write(buffer)
        digest.update([buffer])
    }

    mutating func finish() async throws -> Int64 { try await inner.finish() }
    mutating func abandon() async { await inner.abandon() }
}
