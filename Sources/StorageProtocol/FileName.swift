/// A name (one path segment) compared, hashed and ordered by its bytes.
///
/// Swift's `String` equality is canonical equivalence: `"café"` written with `é` (NFC) and with
/// `e` + U+0301 (NFD) are equal Strings, and one key of a `[String: …]` dictionary. On ext4 and on
/// the server they are two files. Every table of names keys on `FileName` instead, so the two
/// stay two. (A `Dictionary` keyed by `FileName` also takes a `String` subscript.)
public struct FileName: Hashable, Comparable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let string: String

    public init(_ string: String) { self.string = string }
    public init(stringLiteral value: String) { self.string = value }

    public var description: String { string }

    public static func == (a: FileName, b: FileName) -> Bool { a.string.utf8.elementsEqual(b.string.utf8) }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(string.utf8.count)
        for byte in string.utf8 { hasher.combine(byte) }
    }

    public static func < (a: FileName, b: FileName) -> Bool { a.string.utf8.lexicographicallyPrecedes(b.string.utf8) }
}

extension String {
    /// Byte equality (not canonical equivalence): the test for two names being the same file.
    public func isSameName(_ other: String) -> Bool { utf8.elementsEqual(other.utf8) }
}

extension Dictionary where Key == FileName {
    /// The value for a name given as a `String`, compared by bytes.
    public subscript(_ name: String) -> Value? {
        get { self[FileName(name)] }
        set { self[FileName(name)] = newValue }
    }
}
