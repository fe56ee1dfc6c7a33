/// What a file's tags and custom metadata may be: one rule, used by the server to refuse and by
/// the mount to refuse at the system call, so that nothing the mount accepts is refused later by
/// the server (an upload refused for good after `close` returned is a change the user thinks is made).
public enum AttributeRules {
    public static let maxTags = 64
    public static let maxTagBytes = 128
    public static let maxMetadataKeys = 256
    public static let maxKeyBytes = 200
    /// The longest metadata value, in bytes of its text (an xattr value that is not text is kept as
    /// `base64:…`, see `XattrValue`, and that text counts).
    public static let maxValueBytes = 65536

    /// 1–128 bytes, no comma (tags travel comma-separated in `user.tags`), no control characters.
    public static func isValidTag(_ tag: String) -> Bool {
        let n = tag.utf8.count
        return n >= 1 && n <= maxTagBytes && !tag.utf8.contains(UInt8(ascii: ",")) && !tag.utf8.contains(where: { $0 < 0x20 || $0 == 0x7f })
    }

    /// 1–200 bytes, no control characters (spaces are fine: Linux takes any xattr name but NUL).
    public static func isValidMetadataKey(_ key: String) -> Bool {
        let n = key.utf8.count
        return n >= 1 && n <= maxKeyBytes && !key.utf8.contains(where: { $0 < 0x20 || $0 == 0x7f })
    }

    /// At most 64 KiB, no NUL (a value with NUL bytes travels as `base64:…`).
    public static func isValidMetadataValue(_ value: String) -> Bool {
        value.utf8.count <= maxValueBytes && !value.utf8.contains(0)
    }
}

/// An xattr value (any bytes) as a metadata value (text), and back, exactly.
///
/// Text that is valid UTF-8, has no NUL and does not start with `base64:` is kept as it is, so
/// values set as text read the same through the HTTP API; anything else is `base64:` followed by
/// the bytes in standard base64. Decoding reverses it, so every byte string round-trips.
///
/// ```swift
/// XattrValue.encode([0x00, 0xff])        // "base64:AP8="
/// XattrValue.decode("base64:AP8=")       // [0x00, 0xff]
/// XattrValue.encode(Array("plain".utf8)) // "plain"
/// ```
public enum XattrValue {
    public static let prefix = "base64:"

    public static func encode(_ bytes: [UInt8]) -> String {
        if !bytes.contains(0), let text = String(validating: bytes, as: UTF8.self), !text.hasPrefix(prefix) { return text }
        return prefix + Base64.encode(bytes)
    }

    public static func decode(_ text: String) -> [UInt8] {
        if text.hasPrefix(prefix), let bytes = Base64.decode(String(text.dropFirst(prefix.count))) { return bytes }
        return Array(text.utf8)
    }
}

/// Standard base64 (RFC 4648, with padding), without Foundation.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let b0 = bytes[i], b1 = i + 1 < bytes.count ? bytes[i + 1] : 0, b2 = i + 2 < bytes.count ? bytes[i + 2] : 0
            out.append(alphabet[Int(b0 >> 2)])
            out.append(alphabet[Int((b0 & 0x03) << 4 | b1 >> 4)])
            out.append(i + 1 < bytes.count ? alphabet[Int((b1 & 0x0f) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            out.append(i + 2 < bytes.count ? alphabet[Int(b2 & 0x3f)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 4 * 3)
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): c - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): c - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0") + 52
            case UInt8(ascii: "+"): 62
            case UInt8(ascii: "/"): 63
            default: nil
            }
        }
        var i = 0
        while i < chars.count {
            let pad = (chars[i + 2] == UInt8(ascii: "=") ? 1 : 0) + (chars[i + 3] == UInt8(ascii: "=") ? 1 : 0)
            // Padding only at the very end, and "x=y=" is not padding.
            if pad > 0 && (i + 4 != chars.count || (chars[i + 2] == UInt8(ascii: "=") && chars[i + 3] != UInt8(ascii: "="))) { return nil }
            guard let a = value(chars[i]), let b = value(chars[i + 1]) else { return nil }
            let c = pad >= 2 ? 0 : value(chars[i + 2])
            let d = pad >= 1 ? 0 : value(chars[i + 3])
            guard let c, let d else { return nil }
            out.append(a << 2 | b >> 4)
            if pad < 2 { out.append((b & 0x0f) << 4 | c >> 2) }
            if pad < 1 { out.append((c & 0x03) << 6 | d) }
            i += 4
        }
        // Canonical only (unused bits zero), so that decode(encode(x)) and encode(decode(s)) agree.
        guard encode(out) == text else { return nil }
        return out
    }
}
