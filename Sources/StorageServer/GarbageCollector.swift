import Foundation
import Prometheus
import Logging
import ServiceLifecycle
import StorageProtocol

/// Deletes what nobody needs any more:
/// - uploads started and never completed, once their link expired plus a grace period (bytes too);
/// - blobs superseded or deleted, once no read that already began can still need them;
/// - files in the blob and staging folders that no record names (left by a crash), at start-up;
/// - multipart uploads in an object store that no staging records, once old enough;
/// - changes of the feed older than `changeRetention`.
struct GarbageCollector: Service {
    let service: StowService

    /// How long a collector keeps the dead blobs it claimed before another may claim them (ns).
    static let claimLease: Int64 = 10 * 60 * 1_000_000_000

    init(service: StowService) { self.service = service }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: service.config.gcInterval) }
            } catch { return }
            do {
                try await runOnce()
            } catch {
                service.logger.warning("garbage collection failed: \(error)")
            }
        }
    }

    /// One pass over expired uploads and due blobs. Returns how many of each were removed.
    @discardableResult
    func runOnce(now: Int64 = Timestamp.nowNanoseconds()) async throws -> (uploads: Int, blobs: Int) {
        let store = service.store, blobs = service.blobs
        var uploads = 0, deleted = 0
        let cutoff = now / 1_000_000_000 - service.config.abandonedUploadGrace
        for u in try await store.expiredUploads(before: cutoff, limit: 2000) {
            // Being written right now: leave it to the next pass.
            guard service.activeUploads.begin(u.id) else { continue }
            defer { service.activeUploads.end(u.id) }
            // The record goes first, if it is still expired (a renewal may have come, and with
            // several replicas another collector may have taken it); then its bytes. A crash in
            // between leaves bytes no record names, which the start-up sweep removes.
            guard try await store.claimExpiredUpload(id: u.id, before: cutoff) else { continue }
            if u.state == .open {
                try? await blobs.deleteStaged(u.id)
                // A blob published by a complete that crashed before its commit names no inode.
                if try await !store.isBlobInUse(u.id) { try? await blobs.deleteBlob(u.id) }
                service.metrics.gcExpiredUploads.increment()
            }
            service.activeUploads.forget(u.id)
            uploads += 1
        }
        // Claimed for a lease: collectors of other replicas pass over them meanwhile.
        let due = try await store.claimDeadBlobs(before: now, lease: Self.claimLease, limit: 2000)
        for id in due where try await !store.isBlobInUse(id) {
            try? await blobs.deleteBlob(id)
            deleted += 1
        }
        try await store.forgetDeadBlobs(due)
        // Multipart uploads (S3) that no staging records, begun long enough ago: aborted.
        if let aborted = try? await blobs.abortAbandonedUploads(), aborted > 0 {
            service.logger.info("aborted \(aborted) abandoned multipart upload(s) or staging object(s) in the object store")
        }
        service.metrics.gcDeletedBlobs.increment(by: Int64(deleted))
        // Changes older than the feed keeps (a reader that far behind is told to reset).
        _ = try await store.trimChanges(before: now - service.config.changeRetention * 1_000_000_000)
        // Lock sets no live session holds a lock in, and sessions ended a lease ago.
        _ = try await store.trimLocks(graceNs: service.config.lockLease * 1_000_000_000)
        return (uploads, deleted)
    }

    /// Removes blob and staging files that no record names (left behind by a crash).
    ///
    /// Runs before the server accepts requests, so no upload can be between writing its file and
    /// recording it.
    @discardableResult
    func sweepOrphans() async throws -> Int {
        let blobs = service.blobs, store = service.store
        var removed = 0
        let blobIDs = try await blobs.blobIDs()
        for batch in stride(from: 0, to: blobIDs.count, by: 500).map({ Array(blobIDs[$0..<min($0 + 500, blobIDs.count)]) }) {
            let used = try await store.referencedBlobs(among: batch)
            for id in batch where !used.contains(id) {
                try? await blobs.deleteBlob(id)
                removed += 1
            }
        }
        for id in try await blobs.stagedIDs() {
            if try await store.upload(id: id) == nil {
                try? await blobs.deleteStaged(id)
                removed += 1
            }
        }
        if removed > 0 { service.logger.info("removed \(removed) orphaned file(s) from the data directory") }
        return removed
    }
}
