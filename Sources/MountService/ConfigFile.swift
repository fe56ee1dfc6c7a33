import Foundation

/// A value written in a config file.
public enum ConfigValue: Sendable, Equatable {
    case string(String)
    case integer(Int64)
    case float(Double)
    case bool(Bool)

    /// The value as a flag would give it.
    public var text: String {
        switch self {
        case .string(let s): s
        case .integer(let i): String(i)
        case .float(let d): String(d)
        case .bool(let b): String(b)
        }
    }
}

/// A config file that cannot be used, with where and why.
public struct ConfigError: Error, CustomStringConvertible, Sendable, Equatable {
    public var path: String
    public var line: Int?
    public var message: String
    public init(path: String, line: Int?, message: String) {
        self.path = path
        self.line = line
        self.message = message
    }
    public var description: String { line.map { "\(path) line \($0): \(message)" } ?? "\(path): \(message)" }
}

/// One stowfs config file: flat `key = value` pairs in TOML.
///
/// The subset of TOML that settings need — bare keys, strings (basic and literal), integers
/// (also `0o22`, `1_000`), floats, booleans, comments. Tables, arrays and multi-line strings are
/// refused with a clear message rather than half-understood.
public struct ConfigFile: Sendable {
    public struct Entry: Sendable, Equatable {
        public var value: ConfigValue
        public var line: Int
    }

    public let path: String
    public private(set) var entries: [String: Entry] = [:]

    /// The file at `path`, or nil when there is none.
    public static func load(_ path: String) throws(ConfigError) -> ConfigFile? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigError(path: path, line: nil, message: "cannot be read (permissions?)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ConfigError(path: path, line: nil, message: "is not UTF-8 text")
        }
        return try parse(text, path: path)
    }

    public static func parse(_ text: String, path: String) throws(ConfigError) -> ConfigFile {
        var file = ConfigFile(path: path)
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = index + 1
            func error(_ message: String) -> ConfigError { ConfigError(path: path, line: number, message: message) }
            var line = Substring(raw).trimmingCharacters(in: .whitespaces)[...]
            if line.hasSuffix("\r") { line = line.dropLast() }
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") {
                throw error("tables are not used by stowfs; write `key = value` lines at the top level")
            }
            guard let eq = line.firstIndex(of: "=") else { throw error("expected `key = value`") }
            let key = line[..<eq].trimmingCharacters(in: .whitespaces)
            guard !key.isEmpty, key.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }) else {
                throw error("`\(key)` is not a key (letters, digits, `_` and `-`)")
            }
            var rest = line[line.index(after: eq)...].drop { $0 == " " || $0 == "\t" }
            let value = try parseValue(&rest, error: error)
            rest = rest.drop { $0 == " " || $0 == "\t" }
            guard rest.isEmpty || rest.hasPrefix("#") else { throw error("unexpected `\(rest)` after the value") }
            guard file.entries[key] == nil else { throw error("`\(key)` is set twice (first on line \(file.entries[key]!.line))") }
            file.entries[key] = Entry(value: value, line: number)
        }
        return file
    }

    private static func parseValue(_ s: inout Substring, error: (String) -> ConfigError) throws(ConfigError) -> ConfigValue {
        guard let first = s.first else { throw error("a value is missing after `=`") }
        switch first {
        case "\"":
            if s.hasPrefix("\"\"\"") { throw error("multi-line strings are not supported here") }
            s = s.dropFirst()
            var out = ""
            while let c = s.first {
                s = s.dropFirst()
                if c == "\"" { return .string(out) }
                if c == "\\" {
                    guard let e = s.first else { break }
                    s = s.dropFirst()
                    switch e {
                    case "\"": out.append("\"")
                    case "\\": out.append("\\")
                    case "n": out.append("\n")
                    case "t": out.append("\t")
                    case "r": out.append("\r")
                    case "u", "U":
                        let n = e == "u" ? 4 : 8
                        guard s.count >= n, let code = UInt32(s.prefix(n), radix: 16), let scalar = Unicode.Scalar(code) else {
                            throw error("a bad \\\(e) escape in a string")
                        }
                        out.unicodeScalars.append(scalar)
                        s = s.dropFirst(n)
                    default: throw error("unknown escape `\\\(e)` in a string (write \\\\ for a backslash)")
                    }
                } else {
                    out.append(c)
                }
            }
            throw error("a string is not closed (missing `\"`)")
        case "'":
            if s.hasPrefix("'''") { throw error("multi-line strings are not supported here") }
            s = s.dropFirst()
            guard let end = s.firstIndex(of: "'") else { throw error("a string is not closed (missing `'`)") }
            let v = String(s[..<end])
            s = s[s.index(after: end)...]
            return .string(v)
        case "[", "{":
            throw error("arrays and inline tables are not used by stowfs settings")
        default:
            let end = s.firstIndex { $0 == " " || $0 == "\t" || $0 == "#" } ?? s.endIndex
            let word = String(s[..<end])
            s = s[end...]
            if word == "true" { return .bool(true) }
            if word == "false" { return .bool(false) }
            if let i = parseInteger(word) { return .integer(i) }
            if word.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }), let d = Double(word.replacingOccurrences(of: "_", with: "")) {
                return .float(d)
            }
            throw error("`\(word)` is not a value: quote strings, e.g. \"\(word)\"")
        }
    }

    private static func parseInteger(_ word: String) -> Int64? {
        var w = word.replacingOccurrences(of: "_", with: "")[...]
        var sign: Int64 = 1
        if w.hasPrefix("+") { w = w.dropFirst() } else if w.hasPrefix("-") { sign = -1; w = w.dropFirst() }
        guard !w.isEmpty else { return nil }
        for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] where w.hasPrefix(prefix) {
            return Int64(w.dropFirst(2), radix: radix).map { $0 * sign }
        }
        guard w.allSatisfy(\.isNumber), !(w.count > 1 && w.hasPrefix("0")) else { return nil }
        return Int64(w).map { $0 * sign }
    }
}
