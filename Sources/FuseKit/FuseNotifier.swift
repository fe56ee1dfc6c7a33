import CFuse
import Dispatch
import Foundation
import Logging
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
    private let logger: Logger

    init(session: OpaquePointer, logger: Logger) {
        self.session = session
        self.logger = logger
    }

    func invalidateEntry(parent: InodeNumber, name: String) {
        queue.async { [self] in
            guard !closed.withLock({ $0 }) else { return }
            // A name the kernel does not have is no error (ENOENT): nothing to forget.
            let rc = name.withCString { fuse_lowlevel_notify_inval_entry(session, fuse_ino_t(parent), $0, name.utf8.count) }
            if rc != 0 && rc != -ENOENT { logger.debug("notify_inval_entry(\(parent), \(name)): \(rc)") }
        }
    }

    /// Offset 0, length 0: the attributes and every cached page.
    func invalidateInode(_ ino: InodeNumber) { invalidate(ino, from: 0) }

    /// A negative offset: the attributes only.
    func invalidateAttributes(_ ino: InodeNumber) { invalidate(ino, from: -1) }

    private func invalidate(_ ino: InodeNumber, from offset: Int64) {
        queue.async { [self] in
            guard !closed.withLock({ $0 }) else { return }
            let rc = fuse_lowlevel_notify_inval_inode(session, fuse_ino_t(ino), off_t(offset), 0)
            if rc != 0 && rc != -ENOENT { logger.debug("notify_inval_inode(\(ino), \(offset)): \(rc)") }
        }
    }

    func barrier(timeout: Duration) async {
        // Resumed once: by the queue reaching it, or by the timer (a notification stuck in the
        // kernel must not hold a lock's holder for ever).
        let once = Mutex(false)
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let resume: @Sendable () -> Void = {
                if once.withLock({ done in defer { done = true }; return !done }) { c.resume() }
            }
            queue.async(execute: resume)
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(timeout.components.seconds * 1000)), execute: resume)
        }
    }

    func close() {
        closed.withLock { $0 = true }
        queue.sync {}
    }
}
