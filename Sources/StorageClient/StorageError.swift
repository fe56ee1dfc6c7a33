public import StorageProtocol

/// Why a storage operation failed, typed so that callers (the filesystem) can decide what to do:
/// `kind` says what happened, `status`/`code` carry the server's answer when there was one.
public struct StorageError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        case notFound
        case exists
        case notEmpty
        case notADirectory
        case isADirectory
        case invalidRename
        case invalidPath
        case nameTooLong
        case unauthorized
        case forbidden
        case preconditionFailed
        case conflict
        /// complete was called before every byte arrived.
        case incomplete
        /// A chunk was sent at the wrong offset.
        case offsetMismatch
        case checksumMismatch
        case tooLarge
        /// The server's disk or quota is full.
        case noSpace
        case rangeNotSatisfiable
        case gone
        case badRequest
        /// The server could not be reached, or kept failing, after every retry.
        case unavailable
        /// The server answered something this client does not understand.
        case protocolViolation
        case cancelled
        /// A local file (the upload's source, or a download's target) could not be used.
        case localIO
        /// https failed: the server's certificate does not verify (against `caFile`, or the system's
        /// trust store), the server does not speak TLS, or the CA file cannot be used. Not transient:
        /// trying again does not help until the certificate or the settings change.
        case tlsFailure
    }

    public var kind: Kind
    public var message: String
    public var status: Int?
    public var code: ErrorCode?

    public init(_ kind: Kind, _ message: String, status: Int? = nil, code: ErrorCode? = nil) {
        self.kind = kind
        self.message = message
        self.status = status
        self.code = code
    }

    public var description: String {
        if let status { return "\(message) (HTTP \(status)\(code.map { ", \($0)" } ?? ""))" }
        return message
    }

    /// Whether trying again later may succeed (network trouble, an overloaded or restarting server).
    public var isTransient: Bool { kind == .unavailable }

    /// Whether the server answered that nothing is at the path asked about: not there (404), a
    /// parent on the way that is a file (409), a path it refuses, or gone.
    public var saysNothingThere: Bool { [.notFound, .notADirectory, .invalidPath, .gone].contains(kind) }

    /// The error for a server's error answer.
    public static func from(status: Int, body: ErrorBody?) -> StorageError {
        let code = body?.code
        let message = body?.message ?? "the server answered \(status)"
        let kind: Kind
        switch (status, code) {
        case (_, .some(.notFound)): kind = .notFound
        case (_, .some(.exists)): kind = .exists
        case (_, .some(.notEmpty)): kind = .notEmpty
        case (_, .some(.notADirectory)): kind = .notADirectory
        case (_, .some(.isADirectory)): kind = .isADirectory
        case (_, .some(.invalidRename)): kind = .invalidRename
        case (_, .some(.nameTooLong)): kind = .nameTooLong
        case (_, .some(.invalidPath)): kind = .invalidPath
        case (_, .some(.incomplete)): kind = .incomplete
        case (_, .some(.offsetMismatch)): kind = .offsetMismatch
        case (_, .some(.checksumMismatch)): kind = .checksumMismatch
        case (_, .some(.insufficientStorage)): kind = .noSpace
        case (_, .some(.gone)): kind = .gone
        case (400, _): kind = .badRequest
        case (401, _): kind = .unauthorized
        case (403, _): kind = .forbidden
        case (404, _): kind = .notFound
        case (409, _): kind = .conflict
        case (410, _): kind = .gone
        case (412, _): kind = .preconditionFailed
        case (413, _): kind = .tooLarge
        case (416, _): kind = .rangeNotSatisfiable
        case (460, _): kind = .checksumMismatch
        case (507, _): kind = .noSpace
        case (500..., _), (408, _), (429, _): kind = .unavailable
        default: kind = .protocolViolation
        }
        return StorageError(kind, message, status: status, code: code)
    }
}
