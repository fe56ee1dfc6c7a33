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
        handWritten(value).map { Data($0) } ?? encodedByFoundation(value)
    }

    /// `encode`'s bytes, as an array (no copy into `Data` for the answers written by hand).
    public static func bytes<T: Encodable>(_ value: T) -> [UInt8] {
        handWritten(value) ?? Array(encodedByFoundation(value))
    }

    /// The bytes of a value that writes itself, or of a list or map of strings (the tags and
    /// metadata stowd stores with every file: through JSONEncoder they were 3% of its CPU
    /// storing small files); nil for the others.
    private static func handWritten<T: Encodable>(_ value: T) -> [UInt8]? {
        var out: [UInt8] = []
        if let writable = value as? any WireJSONWritable {
            writable.writeWireJSON(to: &out)
        } else if let list = value as? [String] {
            JSONOut.strings(list, &out)
        } else if let map = value as? [String: String] {
            JSONOut.map(map, &out)
        } else {
            return nil
        }
        return out
    }

    /// Through JSONEncoder, always (`encode` writes the largest answers itself).
    public static func encodedByFoundation<T: Encodable>(_ value: T) -> Data {
        (try? encoder().encode(value)) ?? Data("{}".utf8)
    }
}

/// Timestamps on the wire: ISO 8601 in UTC with milliseconds, e.g. `2026-11-21T10:00:00.000Z`.
public enum Timestamp {
    private static let style = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// Formats nanoseconds since the Unix epoch, the milliseconds truncated. From 1970 on (an
    /// Int64 of nanoseconds ends in 2262) it is written here, from the integer: a listing formats
    /// two per record, and Foundation's formatter took microseconds each (and, going through a
    /// Double of seconds since 2001, could be a millisecond off). Before 1970, through Foundation.
    public static func iso8601(nanoseconds ns: Int64) -> String {
        guard ns >= 0 else { return foundationISO8601(nanoseconds: ns) }
        let seconds = ns / 1_000_000_000
        let millis = Int(ns % 1_000_000_000 / 1_000_000)
        let days = Int(seconds / 86_400)
        let secondOfDay = Int(seconds % 86_400)
        // Civil date from days since 1970-01-01 (Howard Hinnant's `civil_from_days`).
        let z = days + 719_468
        let era = z / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        var out = [UInt8]()
        out.reserveCapacity(24)
        func digits(_ value: Int, _ width: Int) {
            var divisor = 1
            for _ in 1..<width { divisor *= 10 }
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        digits(year, 4); out.append(UInt8(ascii: "-")); digits(month, 2); out.append(UInt8(ascii: "-")); digits(day, 2)
        out.append(UInt8(ascii: "T"))
        digits(secondOfDay / 3600, 2); out.append(UInt8(ascii: ":")); digits(secondOfDay / 60 % 60, 2); out.append(UInt8(ascii: ":"))
        digits(secondOfDay % 60, 2); out.append(UInt8(ascii: ".")); digits(millis, 3); out.append(UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

    /// Through Foundation's ISO 8601 formatter.
    public static func foundationISO8601(nanoseconds ns: Int64) -> String {
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
    /// Encodes one segment so that it survives as a single URL path segment.
    public static func encode(segment: String) -> String { percentEncoded(segment) }

    /// Encodes a query value.
    public static func encode(query: String) -> String { percentEncoded(query) }

    /// Encodes a storage path as URL path segments (without a leading `/`).
    public static func encode(path: StoragePath) -> String {
        path.segments.map(encode(segment:)).joined(separator: "/")
    }

    /// Every UTF-8 byte but the unreserved ones (`A-Z a-z 0-9 - . _ ~`) as `%XX`, upper-case hex:
    /// what Foundation's `addingPercentEncoding` gives with that set, without its detour through
    /// CFString (a listing makes a link per file: 12% of a mount's time listing 1,000 files).
    static func percentEncoded(_ text: String) -> String {
        func unreserved(_ b: UInt8) -> Bool {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                return true
            default: return false
            }
        }
        if text.utf8.allSatisfy(unreserved) { return text }
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count * 3)
        for b in text.utf8 {
            if unreserved(b) {
                out.append(b)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 0xF)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes one percent-encoded segment; nil when the encoding is invalid.
    public static func decode(_ segment: some StringProtocol) -> String? {
        String(segment).removingPercentEncoding
    }
}
