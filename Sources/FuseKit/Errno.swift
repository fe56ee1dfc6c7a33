import StowFS
#if canImport(Glibc)
import Glibc
#endif

/// The one table from the engine's errors to errno. Anything unforeseen is EIO.
extension FSError {
    var errno: Int32 {
        switch self {
        case .notFound: ENOENT
        case .exists: EEXIST
        case .notEmpty: ENOTEMPTY
        case .notADirectory: ENOTDIR
        case .isADirectory: EISDIR
        case .accessDenied: EACCES
        case .notPermitted: EPERM
        case .nameTooLong: ENAMETOOLONG
        case .invalidArgument: EINVAL
        case .noSpace: ENOSPC
        case .quotaExceeded: EDQUOT
        case .readOnly: EROFS
        case .crossDevice: EXDEV
        case .tooManyLinks: EMLINK
        case .noAttribute: ENODATA
        case .attributeTooLarge: E2BIG
        case .notSupported: EOPNOTSUPP
        case .badHandle: EBADF
        case .busy: EBUSY
        case .interrupted: EINTR
        case .wouldBlock: EAGAIN
        case .fileTooLarge: EFBIG
        case .io: EIO
        }
    }
}
