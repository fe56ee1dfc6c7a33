import Foundation
import StorageProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Empty local copies made ahead of need, and emptied ones kept for the next file written here.
///
/// Each file written through the mount gets a local copy in the cache folder's `files`. Making a
/// new file there costs the filesystem an inode, and on ext4 without a journal that is slow:
/// every new inode is found by stepping past the recently deleted ones (`recently_deleted` in the
/// kernel's profile), about 1 ms a file on this kind of machine, where a folder of an undisturbed
/// block group takes 30 µs. A `create` answered on the FUSE thread paid it, and `cp -r` waits for
/// each create. So the pool keeps:
/// - up to `capacity` emptied copies open (a create takes one without a system call);
/// - up to `spareCapacity` empty files closed (no descriptor held; a create opens one by path,
///   which allocates nothing), filled from behind by a thread of its own whenever fewer than
///   `refillBelow` are left, up to `refillTo` — so the inode is made off the FUSE thread;
/// - and it deletes nothing it can keep: a copy that is not adopted by the block cache is emptied
///   and kept rather than unlinked (deleting is what makes the next allocation slow).
/// The files left at unmount are empty; the next mount of the cache folder adopts them (`adopt`).
final class CacheFilePool: Sendable {
    private struct Lists {
        var open: [CacheFile] = []
        var spare: [String] = []
        var refilling = false
        var stopped = false
        /// When a refill last failed (a full disk, no inodes, no descriptors): none is tried for a while.
        var failedAt: ContinuousClock.Instant?
        /// How many files the refill thread made, and how many refills started (for tests).
        var made = 0
        var refills = 0
    }

    private let lists = Mutex(Lists())
    let directory: String
    let capacity: Int
    let spareCapacity: Int
    let refillBelow: Int
    let refillTo: Int

    init(directory: String, capacity: Int = 64, spareCapacity: Int = 1024, refillBelow: Int = 128, refillTo: Int = 256) {
        self.directory = directory
        self.capacity = capacity
        self.spareCapacity = spareCapacity
        self.refillTo = min(refillTo, spareCapacity)
        self.refillBelow = min(refillBelow, self.refillTo)
    }

    /// A new name for a local copy in the pool's folder: 128 random bits (Foundation's `UUID()`
    /// opened, read and closed /dev/urandom for each).
    func newPath() -> String { directory + "/" + Hex.random(bytes: 16) }

    /// An empty copy: a kept one, a spare one opened, or a new file.
    func take() throws(FSError) -> CacheFile {
        let (kept, spare) = lists.withLock { l -> (CacheFile?, String?) in
            if let f = l.open.popLast() { return (f, nil) }
            return (nil, l.spare.popLast())
        }
        refillIfLow()
        if let kept { return kept }
        if let spare {
            if let f = try? CacheFile(existing: spare) { return f }
            // It could not be opened (no descriptor left?): not lost, a spare again.
            lists.withLock { $0.spare.append(spare) }
        }
        return try CacheFile(path: newPath(), truncate: true)
    }

    /// Keeps an uploaded copy for reuse, emptied — open while fewer than `capacity` are, else
    /// closed as a spare — or deletes it (both full, or it cannot be emptied).
    /// `file` must be held by nobody else: a reader of the old content would see the next file's.
    func give(_ file: consuming CacheFile) {
        let f = file
        guard ftruncate(f.descriptor, 0) == 0 else {
            unlink(f.path)
            return
        }
        let kept = lists.withLock { l -> Bool in
            if l.open.count < capacity {
                l.open.append(f)
                return true
            }
            guard l.spare.count < spareCapacity else { return false }
            l.spare.append(f.path)
            return true
        }
        if !kept { unlink(f.path) }
    }

    /// Files found in the folder at start that no upload needs (spares of the last mount, or a
    /// copy left by a crash after its upload): emptied and kept as spares, as many as fit; the
    /// rest deleted.
    func adopt(_ paths: [String]) {
        for path in paths {
            let room = lists.withLock { $0.spare.count < spareCapacity }
            if room, truncate(path, 0) == 0 {
                lists.withLock { $0.spare.append(path) }
            } else {
                unlink(path)
            }
        }
    }

    /// Starts the refill thread when spares run low (and none runs).
    private func refillIfLow() {
        let start = lists.withLock { l -> Bool in
            guard !l.refilling, !l.stopped, l.open.count + l.spare.count < refillBelow else { return false }
            if let failed = l.failedAt, ContinuousClock.now - failed < Self.refillBackoff { return false }
            l.refilling = true
            l.refills += 1
            return true
        }
        guard start else { return }
        let thread = Thread { [self] in refill() }
        thread.name = "stowfs-spares"
        thread.start()
    }

    private func refill() {
        while true {
            let more = lists.withLock { l -> Bool in
                guard !l.stopped, l.open.count + l.spare.count < refillTo else {
                    l.refilling = false
                    return false
                }
                return true
            }
            guard more else { return }
            let path = newPath()
            let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                // A full disk or a folder gone: creates make their own files (and say why if they
                // cannot); the next refill waits `refillBackoff`.
                lists.withLock {
                    $0.refilling = false
                    $0.failedAt = .now
                }
                return
            }
            close(fd)
            lists.withLock {
                $0.spare.append(path)
                $0.made += 1
            }
        }
    }

    static let refillBackoff: Duration = .seconds(10)

    /// No more refills (the mount is going away).
    func stop() { lists.withLock { $0.stopped = true } }

    /// Emptied copies held open (each holds a descriptor).
    var count: Int { lists.withLock { $0.open.count } }
    /// Empty files kept closed.
    var spares: Int { lists.withLock { $0.spare.count } }
    /// Files the refill thread made so far.
    var made: Int { lists.withLock { $0.made } }
    /// Refills started so far.
    var refills: Int { lists.withLock { $0.refills } }
}
