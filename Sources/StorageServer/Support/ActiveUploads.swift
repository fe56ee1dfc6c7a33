import StorageProtocol
import Synchronization

/// Uploads being written right now: one writer at a time per upload, and the SHA-256 of uploads
/// whose bytes all arrived in one request (so that complete need not read the file again).
///
/// The digest is only an optimisation: it is kept in memory, and complete hashes the file when it
/// is missing (after a restart, or when the bytes came in several tus chunks).
final class ActiveUploads: Sendable {
    private struct State {
        var busy: Set<String> = []
        var digests: [String: (bytes: Int64, sha256: String)] = [:]
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

    func digest(_ id: String, bytes: Int64) -> String? {
        state.withLock { s in
            guard let d = s.digests[id], d.bytes == bytes else { return nil }
            return d.sha256
        }
    }

    func setDigest(_ id: String, bytes: Int64, sha256: String?) {
        state.withLock { s in s.digests[id] = sha256.map { (bytes, $0) } }
    }

    func forget(_ id: String) {
        state.withLock { _ = $0.digests.removeValue(forKey: id) }
    }
}
