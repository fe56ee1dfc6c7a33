public import Foundation

/// The JSON conventions of the API: snake_case keys (declared per type), ISO 8601 UTC timestamps.
public enum WireJSON {
    public static func encoder() -> JSONEncoder {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }

    public static func decoder() -> JSONDecoder { JSONDecoder() }

    /// Encodes one of the API's own types. These hold only strings, numbers, maps and arrays, so
    /// encoding cannot fail; should it ever, the answer is an empty object rather than a crash.
    public static func encode<T: Encodable>(_ value: T) -> Data {
        if let writable = value as? any WireJSONWritable {
            var out: [UInt8] = []
            writable.writeWireJSON(to: &out)
            return Data(out)
        }
        return encodedByFoundation(value)
    }

    /// Through JSONEncoder, always (`encode` writes the largest answers itself).
    public static func encodedByFoundation<T: Encodable>(_ value: T) -> Data {
        (try? encoder().encode(value)) ?? Data("{}".utf8)
    }
}

/// Timestamps on the wire: ISO 8601 in UTC with milliseconds, e.g. `2026-11-21T10:00:00.000Z`.
public enum Timestamp {
    private static let style = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// Formats nanoseconds since the Unix epoch.
    public static func iso8601(nanoseconds ns: Int64) -> String {
        Date(timeIntervalSince1970: Double(ns) / 1_000_000_000).formatted(style)
    }

    /// Nanoseconds since the Unix epoch, now.
    public static func nowNanoseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }

    /// Seconds since the Unix epoch, now.
    public static func nowSeconds() -> Int64 { nowNanoseconds() / 1_000_000_000 }
}

/// Percent-encoding of path segments and query values for URLs.
public enum PathEncoding {
    private static let unreserved: CharacterSet = {
        var set = CharacterSet()
        set.insert(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return set
    }()

    /// Encodes one segment so that it survives as a single URL path segment.
    public static func encode(segment: String) -> String {
        segment.addingPercentEncoding(withAllowedCharacters: unreserved) ?? segment
    }

    /// Encodes a query value.
    public static func encode(query: String) -> String {
        query.addingPercentEncoding(withAllowedCharacters: unreserved) ?? query
    }

    /// Encodes a storage path as URL path segments (without a leading `/`).
    public static func encode(path: StoragePath) -> String {
        path.segments.map(encode(segment:)).joined(separator: "/")
    }

    /// Decodes one percent-encoded segment; nil when the encoding is invalid.
    public static func decode(_ segment: some StringProtocol) -> String? {
        String(segment).removingPercentEncoding
    }
}
