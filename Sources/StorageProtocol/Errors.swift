/// A stable, machine-readable error code carried in every error answer (`{"message", "code"}`).
///
/// New codes can be added without breaking clients: unknown codes decode as themselves.
public struct ErrorCode: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    public static let badRequest = ErrorCode(rawValue: "bad_request")
    public static let invalidPath = ErrorCode(rawValue: "invalid_path")
    public static let nameTooLong = ErrorCode(rawValue: "name_too_long")
    public static let unauthorized = ErrorCode(rawValue: "unauthorized")
    public static let forbidden = ErrorCode(rawValue: "forbidden")
    public static let notFound = ErrorCode(rawValue: "not_found")
    public static let conflict = ErrorCode(rawValue: "conflict")
    public static let exists = ErrorCode(rawValue: "exists")
    public static let notEmpty = ErrorCode(rawValue: "not_empty")
    public static let notADirectory = ErrorCode(rawValue: "not_a_directory")
    public static let isADirectory = ErrorCode(rawValue: "is_a_directory")
    public static let invalidRename = ErrorCode(rawValue: "invalid_rename")
    public static let incomplete = ErrorCode(rawValue: "incomplete")
    public static let offsetMismatch = ErrorCode(rawValue: "offset_mismatch")
    public static let sizeMismatch = ErrorCode(rawValue: "size_mismatch")
    public static let checksumMismatch = ErrorCode(rawValue: "checksum_mismatch")
    public static let preconditionFailed = ErrorCode(rawValue: "precondition_failed")
    public static let payloadTooLarge = ErrorCode(rawValue: "payload_too_large")
    public static let rangeNotSatisfiable = ErrorCode(rawValue: "range_not_satisfiable")
    public static let unsupportedMediaType = ErrorCode(rawValue: "unsupported_media_type")
    public static let gone = ErrorCode(rawValue: "gone")
    public static let insufficientStorage = ErrorCode(rawValue: "insufficient_storage")
    public static let methodNotAllowed = ErrorCode(rawValue: "method_not_allowed")
    public static let internalError = ErrorCode(rawValue: "internal")
    public static let unavailable = ErrorCode(rawValue: "unavailable")
}

/// The JSON body of every error answer. `message` is the seed API's FailedResponse; `code` is stable.
public struct ErrorBody: Codable, Sendable, Equatable {
    public var message: String
    public var code: ErrorCode
    public init(message: String, code: ErrorCode) {
        self.message = message
        self.code = code
    }
}

/// tus 1.0 uses 460 for a checksum mismatch; HTTP has no name for it.
public let httpStatusChecksumMismatch = 460
