import Foundation
import StorageClient
public import StorageProtocol

/// `stowfs find`: the server's search, plus the files still owed to it from this mount's queue.
extension StowFileSystem {
    /// Where a file stands for `stowfs find --status`.
    public enum FindStatus: String, Sendable, CaseIterable, Codable {
        /// Waiting in the queue (or held by a file still open for writing).
        case pending
        /// Being sent now.
        case uploading
        /// On the server, with nothing owed for it.
        case stored
        /// Refused by the server; kept in the queue (`stowfs status` says why).
        case failed
    }

    /// Calls `emit` with the mount paths (relative to the mountpoint) of the files below `folder`
    /// that `filter` finds and whose status is one of `statuses` (empty: any), a batch at a time.
    /// A file found on the server that is also owed from the queue is given once.
    ///
    /// Queued files are matched on what the queue holds for them: their size, type, tags,
    /// metadata and visibility as they will be stored, and the modification time they will carry.
    public func find(
        under folder: String, filter: SearchFilter, statuses: Set<FindStatus>, emit: @Sendable ([String]) async throws -> Void
    ) async throws {
        let base = try location(ofMountPath: folder)
        let namespaces: [Namespace]
        if let ns = base.namespace {
            namespaces = [ns]
        } else {
            namespaces = try await store.namespaces().compactMap { try? Namespace($0.name) }
        }
        let owed = await queue.owed()
        let any = statuses.isEmpty
        for ns in namespaces {
            let within = Location(namespace: ns, path: base.path)
            // One entry per file: a file rewritten while its last version uploads has two records.
            // The newest says what the file will be; the oldest where it stands (the queue sends a
            // path's records oldest first: a failed one holds the newer back).
            var byPath: [[UInt8]: (newest: UploadJournal.Record, oldest: UploadJournal.Record, status: String)] = [:]
            var order: [[UInt8]] = []
            for (r, status) in owed where r.location.isWithin(within) {
                let key = Array(mountPath(of: r.location).utf8)
                if let known = byPath[key] {
                    let newest = r.id > known.newest.id ? r : known.newest
                    let oldest = r.id < known.oldest.id ? (r, status) : (known.oldest, known.status)
                    byPath[key] = (newest, oldest.0, oldest.1)
                } else {
                    byPath[key] = (r, r, status)
                    order.append(key)
                }
            }
            let mine = order.map { (record: byPath[$0]!.newest, status: byPath[$0]!.status) }
            // Locations are compared by their bytes (two spellings of a name are two files).
            let owedPaths = Set(mine.map { Array(mountPath(of: $0.record.location).utf8) })
            var searchFilter = filter
            searchFilter.path = base.path.isRoot ? nil : base.path
            if any || statuses.contains(.stored) {
                var cursor: String?
                var emptyInARow = 0
                repeat {
                    let page = try await store.search(ns, searchFilter, cursor: cursor, limit: SearchFilter.maxLimit)
                    // A server whose pages do not move would be followed without end (as a listing's, `ListingProgress`).
                    if let next = page.nextCursor {
                        emptyInARow = page.items.isEmpty ? emptyInARow + 1 : 0
                        if next == cursor || emptyInARow >= ListingProgress.mostEmptyPages {
                            throw StorageError(.protocolViolation, "the server's search pages do not move (cursor \(next)); not followed further")
                        }
                    }
                    var batch: [String] = []
                    for item in page.items {
                        guard let path = try? StoragePath(item.filePath) else { continue }
                        let shown = mountPath(of: Location(namespace: ns, path: path))
                        // Owed files are given below, from the queue (with `stored` alone: not at all).
                        if owedPaths.contains(Array(shown.utf8)) { continue }
                        batch.append(shown)
                    }
                    if !batch.isEmpty { try await emit(batch) }
                    cursor = page.nextCursor
                } while cursor != nil
            }
            var batch: [String] = []
            for (owed, status) in mine {
                // A file deleted here (its delete on its way): not found, though the server still has it.
                if owed.isDeletion { continue }
                guard any || statuses.contains(FindStatus(rawValue: status) ?? .pending) else { continue }
                let r = owed.withPatchApplied
                guard
                    searchFilter.matches(
                        path: r.location.path, kind: .file, size: r.size, mtimeNs: r.params.mtimeNs ?? Timestamp.nowNanoseconds(),
                        contentType: r.contentType, tags: r.tags ?? [], metadata: r.params.metadata ?? [:], isPublic: r.params.isPublic ?? false)
                else { continue }
                batch.append(mountPath(of: r.location))
            }
            if !batch.isEmpty { try await emit(batch) }
        }
    }

    /// A location as a path relative to the mountpoint.
    func mountPath(of location: Location) -> String {
        switch configuration.scope {
        case .namespace: location.path.string
        case .all: location.namespace.map { location.path.isRoot ? $0.name : "\($0.name)/\(location.path.string)" } ?? ""
        }
    }
}
