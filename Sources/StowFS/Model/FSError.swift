public import StorageClient

/// Why a filesystem operation failed. FuseKit turns each case into one errno, in one table.
public enum FSError: Error, Sendable, Equatable, CustomStringConvertible {
    case notFound
    case exists
    case notEmpty
    case notADirectory
    case isADirectory
    /// Not allowed by the server's token (EACCES).
    case accessDenied
    /// Not allowed by POSIX rules (EPERM).
    case notPermitted
    case nameTooLong
    case invalidArgument
    case noSpace
    case quotaExceeded
    case readOnly
    case crossDevice
    case tooManyLinks
    case noAttribute
    case attributeTooLarge
    case notSupported
    case badHandle
    case busy
    case interrupted
    /// A lock held by another owner, and the caller would not wait (EAGAIN).
    case wouldBlock
    /// Beyond the largest file StowFS keeps (EFBIG).
    case fileTooLarge
    /// The server could not be reached or kept failing (EIO). A write is never dropped for it.
    case io(String)

    public var description: String {
        switch self {
        case .notFound: "no such file or folder"
        case .exists: "exists already"
        case .notEmpty: "folder not empty"
        case .notADirectory: "not a folder"
        case .isADirectory: "is a folder"
        case .accessDenied: "the server refused access"
        case .notPermitted: "operation not permitted"
        case .nameTooLong: "name too long"
        case .invalidArgument: "invalid argument"
        case .fileTooLarge: "file too large"
        case .noSpace: "no space left"
        case .quotaExceeded: "quota exceeded"
        case .readOnly: "read-only mount"
        case .crossDevice: "across namespaces"
        case .tooManyLinks: "too many links"
        case .noAttribute: "no such attribute"
        case .attributeTooLarge: "attribute too large"
        case .notSupported: "not supported"
        case .badHandle: "bad file handle"
        case .busy: "busy"
        case .interrupted: "interrupted"
        case .wouldBlock: "held by another owner"
        case .io(let why): "I/O error: \(why)"
        }
    }

    /// The filesystem's view of a storage error.
    public init(_ error: StorageError) {
        switch error.kind {
        case .notFound, .gone: self = .notFound
        case .exists: self = .exists
        case .notEmpty: self = .notEmpty
        case .notADirectory: self = .notADirectory
        case .isADirectory: self = .isADirectory
        case .invalidRename, .badRequest, .invalidPath, .rangeNotSatisfiable: self = .invalidArgument
        case .nameTooLong: self = .nameTooLong
        case .unauthorized, .forbidden: self = .accessDenied
        case .noSpace: self = .noSpace
        case .tooLarge: self = .quotaExceeded
        case .cancelled: self = .interrupted
        case .preconditionFailed, .conflict, .incomplete, .offsetMismatch, .checksumMismatch, .unavailable, .protocolViolation, .localIO, .tlsFailure:
            self = .io(error.description)
        }
    }

    /// Maps any error met below the filesystem: storage errors by kind, anything else as EIO.
    public static func from(_ error: any Error) -> FSError {
        switch error {
        case let e as FSError: e
        case let e as StorageError: FSError(e)
        case is CancellationError: .interrupted
        default: .io("\(error)")
        }
    }
}
