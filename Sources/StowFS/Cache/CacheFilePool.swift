import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Emptied local copies kept open for the next file written here.
///
/// Each file written through the mount gets a local copy, which goes once the server has its
/// content. Creating and deleting a file per upload costs the cache's filesystem an inode each
/// way — on ext4 without a journal, every new inode is found by stepping past the recently
/// deleted ones — so an uploaded copy that nobody else holds is emptied and reused instead.
final class CacheFilePool: Sendable {
    private let free = Mutex<[CacheFile]>([])
    let capacity: Int

    init(capacity: Int = 64) { self.capacity = capacity }

    /// An empty copy: a kept one, or a new file at `path`.
    func take(orCreateAt path: @autoclosure () -> String) throws(FSError) -> CacheFile {
        if let kept = free.withLock({ $0.popLast() }) { return kept }
        return try CacheFile(path: path(), truncate: true)
    }

    /// Keeps an uploaded copy for reuse, emptied, or deletes it (pool full, or it cannot be emptied).
    /// `file` must be held by nobody else: a reader of the old content would see the next file's.
    func give(_ file: consuming CacheFile) {
        let f = file
        if ftruncate(f.descriptor, 0) == 0, free.withLock({ (list: inout [CacheFile]) -> Bool in
            guard list.count < capacity else { return false }
            list.append(f)
            return true
        }) {
            return
        }
        unlink(f.path)
    }

    var count: Int { free.withLock { $0.count } }
}
