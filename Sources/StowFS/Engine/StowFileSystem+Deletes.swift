import StorageClient
import Synchronization
import StorageProtocol

/// Deletes owed to the server. An unlink of a file's last name is written to the journal (one
/// synced commit, like a close) and sent by the queue, many in one round, in line with the
/// uploads of the same path; it returns without waiting for the server (`rm -rf` of a folder of
/// 100,000 files paid a server transaction per file). Until the server has done it, and for
/// listings and lookups that began before it did, the file's server record is hidden here.
///
/// What is done on the server at once, and would meet the file still there, first waits for the
/// deletes at (or under) its paths: `rename` (both sides), `rmdir`, `mkdir`, `symlink`/`mknod`,
/// `link`, and an exclusive create the server decides.
extension StowFileSystem {
    struct OwedDelete: Sendable {
        var id: Int64
        /// When the server did it (nil: not yet).
        var doneAt: ContinuousClock.Instant?

        /// Whether a record of the deleted file, observed at `observedAt`, is out of date: the delete
        /// is still owed, or was done after the record was asked for.
        func hides(observedAt: ContinuousClock.Instant) -> Bool {
            guard let doneAt else { return true }
            return doneAt >= observedAt
        }
    }

    /// Starts a read of the server's records whose answer is checked with `deletedHere`: returns
    /// its token (for `endRead`, once the answer is taken in) and when it began, its `observedAt`.
    /// While it is on its way, the deletes done after it began are kept.
    func beginRead() -> (token: UInt64, at: ContinuousClock.Instant) {
        state.withLock { s in
            s.lastRead += 1
            let now = ContinuousClock.now
            s.readsInFlight[s.lastRead] = now
            return (s.lastRead, now)
        }
    }

    func endRead(_ token: UInt64) {
        state.withLock { s in
            s.readsInFlight[token] = nil
            Self.pruneDoneDeletes(&s)
        }
    }

    /// Done deletes go once no read in flight began before (or as) they were done: only such a
    /// read can bring back a record of the deleted file (`hides`). They were kept 60 s, so an
    /// `rm -rf` of 100,000 files held all 100,000 in memory at its end.
    static func pruneDoneDeletes(_ s: inout State) {
        let oldest = s.readsInFlight.values.min()
        while s.doneDeletesHead < s.doneDeletes.count, oldest.map({ s.doneDeletes[s.doneDeletesHead].at < $0 }) ?? true {
            let (ino, id, _) = s.doneDeletes[s.doneDeletesHead]
            if s.owedDeletes[ino]?.id == id { s.owedDeletes[ino] = nil }
            s.doneDeletesHead += 1
        }
        if s.doneDeletesHead == s.doneDeletes.count {
            s.doneDeletes.removeAll(keepingCapacity: s.doneDeletes.count <= 4096)
            s.doneDeletesHead = 0
        } else if s.doneDeletesHead > 1024 && s.doneDeletesHead * 2 > s.doneDeletes.count {
            s.doneDeletes.removeFirst(s.doneDeletesHead)
            s.doneDeletesHead = 0
        }
    }

    static func noteDeleteOwed(_ s: inout State, id: Int64, _ deletion: UploadJournal.Deletion) {
        if let replaced = s.owedDeletes[deletion.remoteIno], replaced.doneAt == nil { s.deletesPending -= 1 }
        s.owedDeletes[deletion.remoteIno] = OwedDelete(id: id, doneAt: nil)
        s.deletesPending += 1
    }

    /// Whether `r`, from the server, is a file this mount deleted (the server has not, or had not
    /// when `observedAt`).
    func deletedHere(_ s: State, _ r: some EntryRecord, observedAt: ContinuousClock.Instant) -> Bool {
        guard let d = s.owedDeletes[r.inode] else { return false }
        return d.hides(observedAt: observedAt)
    }

    /// The queue's report: these deletes are done on the server.
    func deletesDone(_ done: [UploadQueue.Deleted]) {
        let now = ContinuousClock.now
        state.withLock { s in
            for d in done {
                guard var owed = s.owedDeletes[d.deletion.remoteIno], owed.id == d.id, owed.doneAt == nil else { continue }
                owed.doneAt = now
                s.owedDeletes[d.deletion.remoteIno] = owed
                s.deletesPending -= 1
                s.doneDeletes.append((d.deletion.remoteIno, d.id, now))
            }
            // Those no read in flight needs go, oldest first (a filter of the whole map on every
            // answer made `rm -rf` of thousands of files quadratic).
            Self.pruneDoneDeletes(&s)
        }
    }

    /// A delete the queue will not send (`stowfs discard` of a refused one): the file shows again —
    /// its folder's listing (and the kernel's) is dropped, to be read from the server again.
    func deleteDropped(id: Int64, location: Location) async {
        let folder: InodeNumber? = state.withLock { s in
            if let (ino, owed) = s.owedDeletes.first(where: { $0.value.id == id }) {
                s.owedDeletes[ino] = nil
                if owed.doneAt == nil { s.deletesPending -= 1 }
            }
            let parent = Location(namespace: location.namespace, path: location.path.parent)
            for (ino, e) in s.inodes where e.directory != nil && (try? self.location(s, ino)) == parent {
                s.inodes[ino]?.directory?.expire()
                s.inodes[ino]?.directory?.complete = false
                s.inodes[ino]?.directory?.negative[location.path.name] = nil
                s.inodes[ino]?.validUntil = Self.forcedStale
                return ino
            }
            return nil
        }
        if let folder {
            notifyKernel([.entry(parent: folder, name: FileName(location.path.name)), .inode(folder)])
            await kernelBarrier()
        }
    }

    /// The server's record after a change of `ino`'s attributes (chmod, truncate, xattrs). A file
    /// unlinked here and still open (its delete on the way) takes the attributes, not its name back.
    func applyUpdated(_ s: inout State, _ ino: InodeNumber, _ record: FileRecord) {
        guard let e = s.inodes[ino] else { return }
        if e.unlinked {
            var a = attributes(record, ino: ino)
            a.nlink = 0
            s.inodes[ino]?.attributes = a
            return
        }
        upsert(&s, record, parent: e.parent, name: e.name)
    }

    /// Queues the delete of the server's file `remoteIno` (ETag `etag`) at `location` (the last
    /// name of a file was unlinked). Returns when the journal holds it.
    func queueDelete(_ location: Location, remoteIno: UInt64, etag: String) throws(FSError) {
        // Only that file, in the version this mount knew: not one another client put there (a new
        // file, or new content: the server keeps the inode of a file written over) before the
        // delete went out. Changes made here to the file meanwhile stay here (`applyUpdated`).
        let deletion = RemoteInfo(ino: remoteIno, etag: etag).deletion
        let id: Int64
        do {
            id = try queue.enqueueDeletion(location: location, deletion)
        } catch {
            throw FSError.from(error)
        }
        state.withLock { s in Self.noteDeleteOwed(&s, id: id, deletion) }
    }

    /// Waits until the deletes owed at `location` (and, with `under`, below it) are done on the
    /// server; EIO if it refused one, or did not answer within `uploadWaitLimit`.
    func settleDeletes(at location: Location, under: Bool = false) async throws(FSError) {
        guard state.withLock({ $0.deletesPending > 0 }) else { return }
        // The queue's paths, not the engine's copy: a folder's rename moves the records under it.
        let ids = await queue.records(under: location).filter { $0.isDeletion && (under || $0.location == location) }.map(\.id)
        if ids.isEmpty { return }
        try await waitForUploads(Set(ids))
    }
}
