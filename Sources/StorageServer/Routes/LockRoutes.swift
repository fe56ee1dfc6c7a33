import Foundation
import HTTPTypes
import Hummingbird
import StorageProtocol

/// Advisory locks shared by the mounts of a namespace (see `LockRequest`), for a token with read
/// on it (an advisory lock, like `flock(2)` on a read-only file, changes no data):
///
/// - `PUT …/namespaces/{ns}/locks/sessions/{id}`: starts or renews a lock session for
///   `lockLease` seconds (`LockSessionResponse`); `DELETE` ends it, and its locks go.
/// - `POST …/namespaces/{ns}/locks`: takes, changes or releases a lock (`LockResponse`). A lock
///   held by another owner answers `granted: false` with it, after waiting up to `wait_ms` for it
///   to go: a release on this server wakes the wait at once, one on another server too when the
///   store tells of it (`MetadataStore.followOtherServers`), else within `lockPollInterval`. A
///   grant carries the change feed's `fence`, with `since` the changes up to it, and the locked
///   file's `etag`.
/// - `POST …/namespaces/{ns}/locks/test`: whether the lock could be taken (F_GETLK), without
///   taking it: `conflict` is the lock in the way.
///
/// A lock request renews its session, so a session is alive while it takes locks.
extension StowService {
    func addLockRoutes(to router: Router<BasicRequestContext>) {
        router.put("\(Routes.prefix)/v1.0/namespaces/:ns/locks/sessions/:id") { req, ctx in
            let (ns, id) = try await self.lockSession(req, ctx)
            let existed = try await self.store.renewLockSession(ns, id: id, leaseNs: self.config.lockLease * 1_000_000_000)
            return self.json(LockSessionResponse(leaseSeconds: Int(self.config.lockLease), existed: existed))
        }
        router.delete("\(Routes.prefix)/v1.0/namespaces/:ns/locks/sessions/:id") { req, ctx in
            let (ns, id) = try await self.lockSession(req, ctx)
            try await self.store.endLockSession(ns, id: id)
            self.lockSignal.bump()
            return Response(status: .noContent)
        }
        router.post("\(Routes.prefix)/v1.0/namespaces/:ns/locks") { req, ctx in try await self.lock(req, ctx, test: false) }
        router.post("\(Routes.prefix)/v1.0/namespaces/:ns/locks/test") { req, ctx in try await self.lock(req, ctx, test: true) }
    }

    /// The namespace and session id of a session route, checked.
    private func lockSession(_ request: Request, _ context: BasicRequestContext) async throws -> (Namespace, String) {
        let ns = try namespace(context)
        try authorize(request, ns.name, .read)
        let id = context.parameters.get("id") ?? ""
        guard Self.isSessionID(id) else { throw APIError.badRequest("a lock session id is 16 to 64 of A-Z a-z 0-9 . _ -") }
        guard try await store.namespace(ns) != nil else { throw StoreError.namespaceNotFound(ns) }
        return (ns, id)
    }

    /// 16–64 of `A-Z a-z 0-9 . _ -`: chosen at random by the client (it is the session's only proof).
    static func isSessionID(_ id: String) -> Bool {
        (16...64).contains(id.utf8.count) && ChangeOrigin.validated(id) == id
    }

    func lock(_ request: Request, _ context: BasicRequestContext, test: Bool) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .read)
        let r = try await decode(LockRequest.self, from: request)
        // A folder's exclusive creates are a writer's to hold (holding them makes others wait).
        if r.kind == .names { try authorize(request, ns.name, .write) }
        guard Self.isSessionID(r.session) else { throw APIError.badRequest("`session` is 16 to 64 of A-Z a-z 0-9 . _ -") }
        guard r.ino <= UInt64(Int64.max) else { throw APIError.badRequest("`ino` is past the largest inode number") }
        guard r.start <= r.end else { throw APIError.badRequest("`start` is past `end`") }
        guard !(test && r.type == .unlock) else { throw APIError.badRequest("a test asks for a read or a write lock") }
        let wait = Duration.milliseconds(r.waitMs ?? 0)
        guard (0...30_000).contains(r.waitMs ?? 0) else { throw APIError.badRequest("`wait_ms` must be 0 to 30000") }
        guard try await store.namespace(ns) != nil else { throw StoreError.namespaceNotFound(ns) }
        if !test { _ = try await store.renewLockSession(ns, id: r.session, leaseNs: config.lockLease * 1_000_000_000) }
        let deadline = ContinuousClock.now + wait
        while true {
            let generation = lockSignal.generation
            let outcome = try await store.applyLock(ns, r, test: test)
            if outcome.granted {
                guard !test else { return json(LockResponse(granted: true)) }
                lockSignal.bump()
                guard r.type != .unlock else { return json(LockResponse(granted: true)) }
                // Read after the grant, which came after the previous holder let go, which came
                // after its last change committed: that change is at or before the fence.
                let since = r.since.flatMap(ChangeCursor.init)
                let batch = try await store.changes(ns, after: since, limit: Self.lockChangesLimit)
                var etag: String?
                if r.kind != .names, let node = try await store.node(inode: r.ino), node.namespace == ns, node.inode.kind == .file {
                    etag = node.inode.etag
                }
                guard since != nil, !batch.reset else { return json(LockResponse(granted: true, fence: batch.fence.text, etag: etag)) }
                return json(LockResponse(granted: true, fence: batch.fence.text, changes: batch.changes, cursor: batch.cursor.text, etag: etag))
            }
            let now = ContinuousClock.now
            if test || now >= deadline || lockSignal.isClosed || Task.isCancelled {
                return json(LockResponse(granted: false, conflict: outcome.conflict, fence: nil))
            }
            await lockSignal.wait(after: generation, timeout: min(config.lockPollInterval, deadline - now))
        }
    }

    static let namesLeaseHeader = HTTPField.Name(FolderRequest.namesLeaseHeader)!

    /// A folder just made takes its `names` lease for `session` (`FolderRequest.namesLease`): what
    /// a lock request for it would do, without the answer's changes (a mount does not use them
    /// for a names lease). False when it was not granted.
    func takeNamesLease(_ ns: Namespace, folder ino: UInt64, session: String) async throws -> Bool {
        _ = try await store.renewLockSession(ns, id: session, leaseNs: config.lockLease * 1_000_000_000)
        let request = LockRequest(session: session, ino: ino, owner: 0, kind: .names, type: .write, start: 0, end: .max, pid: 0)
        guard try await store.applyLock(ns, request, test: false).granted else { return false }
        lockSignal.bump()
        return true
    }

    /// The most changes a grant carries (`LockResponse.changes`).
    static let lockChangesLimit = 1000

    /// Before an exclusive create (`if_none_match: "*"`) in a folder whose exclusive creates another
    /// mount holds (its `names` lease: it decides them itself, without asking): the lease is
    /// recalled — a `recall` change in the feed tells the holder, which stores what it made there
    /// and lets go — and this waits until it is gone (the holder's session ending ends it too), so
    /// that the server knows every name the holder made before deciding this one. The request's
    /// `Stow-Origin` is the asking mount's session: its own lease is no obstacle.
    func awaitNamesLease(_ ns: Namespace, _ path: StoragePath) async throws {
        guard !path.isRoot, let folder = try? await store.node(ns, path.parent), folder.inode.kind == .directory else { return }
        let key = LockSetKey(namespace: ns, ino: folder.inode.ino, kind: .names)
        let me = ChangeOrigin.current
        let deadline = ContinuousClock.now + .seconds(config.lockLease + 5)
        var recalled = false
        while true {
            let generation = lockSignal.generation
            guard try await store.lockSet(key).locks.contains(where: { $0.session != me }) else { return }
            if !recalled {
                try await store.recordRecall(ns, folder: folder.inode.ino)
                changeSignal.bump()
                recalled = true
            }
            let now = ContinuousClock.now
            if now >= deadline || lockSignal.isClosed || Task.isCancelled {
                throw APIError(.conflict, .conflict, "another mount holds the exclusive creates of `\(path.parent)` and has not let them go")
            }
            await lockSignal.wait(after: generation, timeout: min(config.lockPollInterval, deadline - now))
        }
    }
}
