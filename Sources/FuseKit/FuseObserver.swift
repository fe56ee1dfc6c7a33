/// The kernel's requests, by kind: what a `FuseObserver` hears about.
public enum FuseOperation: String, CaseIterable, Sendable {
    case lookup, getattr, setattr, readlink, mknod, mkdir, unlink, rmdir, symlink, rename, link
    case create, open, read, write, flush, release, fsync
    case opendir, readdir, readdirplus, releasedir, fsyncdir, statfs
    case setxattr, getxattr, listxattr, removexattr
    case getlk, setlk, flock
}

/// Hears of every request once it is answered: how long the answer took (from the callback to the
/// reply), the error it carried (0 for none) and the bytes of a read or a write. Called on the
/// thread that replied; must be quick and must not block.
public protocol FuseObserver: Sendable {
    func finished(_ operation: FuseOperation, after: Duration, errno: Int32, bytes: Int)
}
