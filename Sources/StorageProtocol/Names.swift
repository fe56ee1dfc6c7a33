/// Validation of the names the API accepts: namespaces and file paths.
///
/// Every name is checked here, before anything is stored, so that the server, the client and
/// the filesystem agree on one set of rules:
///
/// - a namespace is `[a-z0-9][a-z0-9._-]{0,62}`;
/// - a file path is `/`-separated segments, each 1–255 bytes of UTF-8, never `.` or `..`, no NUL,
///   the whole path at most 16 KiB (PROTOCOL.md said 1024; a filesystem needs PATH_MAX, 4096 bytes,
///   *below any folder*: see docs/architecture.md).

/// Why a name was refused.
public enum NameError: Error, Sendable, Equatable, CustomStringConvertible {
    case emptyPath
    case emptySegment
    case dotSegment(String)
    case nulByte
    case segmentTooLong(bytes: Int)
    case pathTooLong(bytes: Int)
    case invalidNamespace(String)

    public var description: String {
        switch self {
        case .emptyPath: "the path is empty"
        case .emptySegment: "the path has an empty segment (`//`, or a leading or trailing `/`)"
        case .dotSegment(let s): "the path has a `\(s)` segment; use plain names"
        case .nulByte: "the path contains a NUL byte"
        case .segmentTooLong(let n): "a path segment is \(n) bytes long; the limit is \(StoragePath.maxSegmentBytes)"
        case .pathTooLong(let n): "the path is \(n) bytes long; the limit is \(StoragePath.maxPathBytes)"
        case .invalidNamespace(let s):
            "`\(s)` is not a valid namespace: use 1–63 characters of a–z, 0–9, `.`, `_` and `-`, starting with a letter or digit"
        }
    }

    /// The stable error code that goes with this refusal on the wire.
    public var code: ErrorCode {
        switch self {
        case .segmentTooLong, .pathTooLong: .nameTooLong
        default: .invalidPath
        }
    }
}

/// A validated namespace name.
public struct Namespace: Hashable, Sendable, Codable, CustomStringConvertible, Comparable {
    public let name: String

    public static let maxLength = 63

    public init(_ name: String) throws(NameError) {
        guard Self.isValid(name) else { throw .invalidNamespace(name) }
        self.name = name
    }

    public static func isValid(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...maxLength).contains(bytes.count) else { return false }
        for (i, b) in bytes.enumerated() {
            let lowerOrDigit = (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9"))
            if i == 0 {
                if !lowerOrDigit { return false }
            } else if !(lowerOrDigit || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")) {
                return false
            }
        }
        return true
    }

    public var description: String { name }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let raw = try container.decode(String.self)
        do { try self.init(raw) } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.description)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(name)
    }

    public static func < (lhs: Namespace, rhs: Namespace) -> Bool { lhs.name < rhs.name }
}

/// A validated path of a file or folder inside a namespace, such as `images/mountains.jpg`.
///
/// The root of a namespace is the path with no segments (`StoragePath.root`); its string form is `""`.
public struct StoragePath: Hashable, Sendable, CustomStringConvertible, Comparable {
    public static let maxSegmentBytes = 255
    public static let maxPathBytes = 16 * 1024

    /// The segments, each a valid name.
    public let segments: [String]

    public static let root = StoragePath(validated: [])

    init(validated segments: [String]) { self.segments = segments }

    /// Parses a `/`-separated path. A single leading `/` is accepted and ignored.
    /// - Throws: `NameError` when any rule is broken.
    public init(_ string: String) throws(NameError) {
        var s = Substring(string)
        if s.hasPrefix("/") { s = s.dropFirst() }
        guard !s.isEmpty else { throw .emptyPath }
        guard s.utf8.count <= Self.maxPathBytes else { throw .pathTooLong(bytes: s.utf8.count) }
        let parts = s.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        for part in parts { try Self.validate(segment: part) }
        self.segments = parts
    }

    /// Builds a path from already split segments, validating each.
    public init(segments: [String]) throws(NameError) {
        for part in segments { try Self.validate(segment: part) }
        let total = segments.reduce(0) { $0 + $1.utf8.count } + max(0, segments.count - 1)
        guard total <= Self.maxPathBytes else { throw .pathTooLong(bytes: total) }
        self.segments = segments
    }

    /// Checks one segment (a file or folder name).
    public static func validate(segment: String) throws(NameError) {
        let n = segment.utf8.count
        if n == 0 { throw .emptySegment }
        if segment == "." || segment == ".." { throw .dotSegment(segment) }
        if segment.utf8.contains(0) { throw .nulByte }
        if segment.utf8.contains(UInt8(ascii: "/")) { throw .emptySegment }
        if n > maxSegmentBytes { throw .segmentTooLong(bytes: n) }
    }

    public var isRoot: Bool { segments.isEmpty }
    public var name: String { segments.last ?? "" }
    public var parent: StoragePath { isRoot ? self : StoragePath(validated: Array(segments.dropLast())) }
    public var string: String { segments.joined(separator: "/") }
    public var description: String { string }

    /// The path of a child called `name`.
    public func appending(_ name: String) throws(NameError) -> StoragePath {
        try StoragePath(segments: segments + [name])
    }

    /// Whether `self` is `other` or lies inside it.
    public func isWithin(_ other: StoragePath) -> Bool {
        segments.count >= other.segments.count && zip(segments, other.segments).allSatisfy { $0.isSameName($1) }
    }

    /// Paths are equal, hashed and ordered by their bytes (see `FileName`): `café` in NFC and in NFD are two paths.
    public static func == (lhs: StoragePath, rhs: StoragePath) -> Bool {
        lhs.segments.count == rhs.segments.count && zip(lhs.segments, rhs.segments).allSatisfy { $0.isSameName($1) }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(segments.count)
        for s in segments { hasher.combine(FileName(s)) }
    }

    public static func < (lhs: StoragePath, rhs: StoragePath) -> Bool { lhs.string.utf8.lexicographicallyPrecedes(rhs.string.utf8) }
}

extension StoragePath: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let raw = try container.decode(String.self)
        if raw.isEmpty || raw == "/" {
            self = .root
            return
        }
        do { try self.init(raw) } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.description)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(string)
    }
}
