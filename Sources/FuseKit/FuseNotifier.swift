import CFuse
import Dispatch
import Foundation
import StowFS
import Synchronization

/// Tells the kernel to forget cached names, attributes and pages (`fuse_lowlevel_notify_inval_*`),
/// for changes other mounts made (the change feed).
///
/// The calls run on a serial queue of their own, never on a thread serving a request: libfuse
/// documents that notifying about an inode from inside a request for it can deadlock (the kernel
/// waits for the request's lock). `close()` runs before the session is destroyed: it waits for
/// the calls under way, and later ones do nothing.
final class FuseNotifier: KernelNotifier, @unchecked Sendable {
    // @unchecked: `session` is set once and used only on `queue` while not closed; `closed` is in a Mutex.
    private let session: OpaquePointer
    private let queue = DispatchQueue(label: "stowfs.kernel-notify")
    private let closed = Mutex(false)

    init(session: OpaquePointer) {
        self.session = session
    }

    func invalidateEntry(parent: InodeNumber, name: String) {
        queue.async { [self] in
            guard !closed.withLock({ $0 }) else { return }
            // A name the kernel does not have is no error (ENOENT): nothing to forget.
            _ = name.withCString { fuse_lowlevel_notify_inval_entry(session, fuse_ino_t(parent), $0, name.utf8.count) }
        }
    }

    func invalidateInode(_ ino: InodeNumber) {
        queue.async { [self] in
            guard !closed.withLock({ $0 }) else { return }
            // Offset 0, length 0: the attributes and every cached page.
            _ = fuse_lowlevel_notify_inval_inode(session, fuse_ino_t(ino), 0, 0)
        }
    }

    func close() {
        closed.withLock { $0 = true }
        queue.sync {}
    }
}
