public import Foundation

/// What `GET …/namespaces/{ns}/search` looks for (and `stowfs find`): every filter given must hold.
///
/// The server answers from indexes where one applies (tags, metadata, content type, the folders of
/// `path`); the other filters narrow what those give. `matches` is the same test in Swift: the mount
/// runs it on files still waiting in its queue, and the tests compare the stores with it.
public struct SearchFilter: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable, CaseIterable {
        /// Everything but folders (files, links, special files).
        case files
        case folders
        case all
    }

    /// Only below this folder (nil: the whole namespace).
    public var path: StoragePath?
    /// Has every one of these tags.
    public var tags: [String]
    /// Has at least one of these tags.
    public var anyTags: [String]
    /// The name (the last segment) matches this glob: `*`, `?`, `[abc]`, `[a-z]`, `[!x]`; case matters.
    public var name: NameGlob?
    /// The name contains this, ASCII letters matched without regard to case.
    public var nameContains: String?
    /// `type/subtype`, or `type/*` for every subtype.
    public var contentType: String?
    public var isPublic: Bool?
    public var minSize: Int64?
    public var maxSize: Int64?
    /// Modified at or after / before these times (ns since the epoch).
    public var modifiedAfterNs: Int64?
    public var modifiedBeforeNs: Int64?
    /// Has each of these custom metadata keys with this value (as a parameter `key=value`, split at
    /// the first `=`: a key with `=` in it cannot be searched for).
    public var metadata: [String: String]
    public var kind: Kind

    public init(
        path: StoragePath? = nil, tags: [String] = [], anyTags: [String] = [], name: NameGlob? = nil, nameContains: String? = nil,
        contentType: String? = nil, isPublic: Bool? = nil, minSize: Int64? = nil, maxSize: Int64? = nil, modifiedAfterNs: Int64? = nil,
        modifiedBeforeNs: Int64? = nil, metadata: [String: String] = [:], kind: Kind = .files
    ) {
        self.path = path
        self.tags = tags
        self.anyTags = anyTags
        self.name = name
        self.nameContains = nameContains
        self.contentType = contentType
        self.isPublic = isPublic
        self.minSize = minSize
        self.maxSize = maxSize
        self.modifiedAfterNs = modifiedAfterNs
        self.modifiedBeforeNs = modifiedBeforeNs
        self.metadata = metadata
        self.kind = kind
    }

    public static let maxTerms = 32
    public static let maxPatternBytes = 1024
    public static let defaultLimit = 100
    public static let maxLimit = 1000

    /// The `content_type` filter as (exact type) or (prefix ending in `/`) for `type/*`.
    public var contentTypeMatch: (exact: String?, prefix: String?) {
        guard let t = contentType else { return (nil, nil) }
        return t.hasSuffix("/*") ? (nil, String(t.dropLast())) : (t, nil)
    }

    // MARK: - The test itself

    /// Whether a file with these attributes, at `path` (from the namespace's root), is one the filter finds.
    public func matches(
        path: StoragePath, kind: NodeKind, size: Int64, mtimeNs: Int64, contentType: String?, tags: [String], metadata: [String: String],
        isPublic: Bool
    ) -> Bool {
        switch self.kind {
        case .files: if kind == .directory { return false }
        case .folders: if kind != .directory { return false }
        case .all: break
        }
        // Every comparison by bytes, as the stores make them (Swift's `==` on String would take
        // two spellings of "é" as one).
        if let folder = self.path, !folder.isRoot {
            guard path.segments.count > folder.segments.count,
                zip(path.segments, folder.segments).allSatisfy({ $0.isSameName($1) })
            else { return false }
        }
        func has(_ tag: String) -> Bool { tags.contains { $0.isSameName(tag) } }
        if !self.tags.allSatisfy(has) { return false }
        if !anyTags.isEmpty && !anyTags.contains(where: has) { return false }
        if let glob = name, !glob.matches(path.name) { return false }
        if let needle = nameContains, !Self.contains(Self.asciiLowercased(path.name), Self.asciiLowercased(needle)) { return false }
        let ct = contentTypeMatch
        if let exact = ct.exact, !(contentType ?? "").isSameName(exact) || contentType == nil { return false }
        if let prefix = ct.prefix, !(contentType ?? "").utf8.starts(with: prefix.utf8) { return false }
        if let p = self.isPublic, p != isPublic { return false }
        if let m = minSize, size < m { return false }
        if let m = maxSize, size > m { return false }
        if let t = modifiedAfterNs, mtimeNs < t { return false }
        if let t = modifiedBeforeNs, mtimeNs >= t { return false }
        for (k, v) in self.metadata {
            guard let value = metadata.first(where: { $0.key.isSameName(k) })?.value, value.isSameName(v) else { return false }
        }
        return true
    }

    /// Whether `needle`'s bytes occur in `haystack`'s.
    static func contains(_ haystack: String, _ needle: String) -> Bool {
        let h = Array(haystack.utf8), n = Array(needle.utf8)
        guard n.count <= h.count else { return false }
        if n.isEmpty { return true }
        for i in 0...(h.count - n.count) where h[i] == n[0] && h[i..<(i + n.count)].elementsEqual(n) { return true }
        return false
    }

    /// Lowercases A–Z only, as SQLite's `lower()` does (so both stores and this agree).
    public static func asciiLowercased(_ s: String) -> String {
        String(decoding: s.utf8.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    // MARK: - As query parameters

    /// The filter as query parameters (`path`, `tag`…), in the order `parse` reads them.
    public var queryItems: [(String, String)] {
        var q: [(String, String)] = []
        if let path, !path.isRoot { q.append(("path", path.string)) }
        q += tags.map { ("tag", $0) }
        q += anyTags.map { ("any_tag", $0) }
        if let name { q.append(("name", name.pattern)) }
        if let nameContains { q.append(("name_contains", nameContains)) }
        if let contentType { q.append(("type", contentType)) }
        if let isPublic { q.append(("public", isPublic ? "true" : "false")) }
        if let minSize { q.append(("min_size", String(minSize))) }
        if let maxSize { q.append(("max_size", String(maxSize))) }
        if let modifiedAfterNs { q.append(("modified_after", Self.formatTime(modifiedAfterNs))) }
        if let modifiedBeforeNs { q.append(("modified_before", Self.formatTime(modifiedBeforeNs))) }
        q += metadata.sorted { $0.key < $1.key }.map { ("meta", "\($0.key)=\($0.value)") }
        if kind != .files { q.append(("kind", kind.rawValue)) }
        return q
    }

    /// Reads the filter from query parameters; unknown ones are not this function's (the caller
    /// reads `limit` and `cursor`). Every value is checked: a bad one is a `SearchFilterError`.
    public static func parse(_ items: [(String, String)]) throws(SearchFilterError) -> SearchFilter {
        var f = SearchFilter()
        func once(_ key: String, _ seen: inout Set<String>) throws(SearchFilterError) {
            guard seen.insert(key).inserted else { throw SearchFilterError("`\(key)` is given twice") }
        }
        func number(_ key: String, _ value: String) throws(SearchFilterError) -> Int64 {
            guard let n = HTTPNumber.nonNegative(value) else { throw SearchFilterError("`\(key)` must be a whole number of bytes") }
            return n
        }
        var seen = Set<String>()
        for (key, value) in items {
            // No store keeps a NUL in a name, a tag or a value (PostgreSQL refuses one in text).
            if value.utf8.contains(0) { throw SearchFilterError("`\(key)` has a NUL byte") }
            switch key {
            case "path":
                try once(key, &seen)
                let trimmed = value.split(separator: "/").joined(separator: "/")
                do { f.path = trimmed.isEmpty ? nil : try StoragePath(trimmed) } catch { throw SearchFilterError("`path`: \(error)") }
            case "tag":
                try checkTerm(key, value)
                f.tags.append(value)
            case "any_tag":
                try checkTerm(key, value)
                f.anyTags.append(value)
            case "name":
                try once(key, &seen)
                guard value.utf8.count <= maxPatternBytes else { throw SearchFilterError("`name` is longer than \(maxPatternBytes) bytes") }
                f.name = try NameGlob(value)
            case "name_contains":
                try once(key, &seen)
                guard !value.isEmpty, value.utf8.count <= maxPatternBytes else { throw SearchFilterError("`name_contains` must have 1 to \(maxPatternBytes) bytes") }
                f.nameContains = value
            case "type":
                try once(key, &seen)
                let parts = value.split(separator: "/", omittingEmptySubsequences: false)
                guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty, !parts[0].contains("*"), parts[1] == "*" || !parts[1].contains("*"),
                    value.utf8.count <= 255
                else { throw SearchFilterError("`type` must be `type/subtype` or `type/*`, not `\(value)`") }
                f.contentType = value
            case "public":
                try once(key, &seen)
                switch value {
                case "true": f.isPublic = true
                case "false": f.isPublic = false
                default: throw SearchFilterError("`public` must be `true` or `false`")
                }
            case "min_size":
                try once(key, &seen)
                f.minSize = try number(key, value)
            case "max_size":
                try once(key, &seen)
                f.maxSize = try number(key, value)
            case "modified_after", "modified_before":
                try once(key, &seen)
                guard let ns = parseTime(value) else {
                    throw SearchFilterError("`\(key)` must be a time as RFC 3339 (2026-11-26T10:00:00Z) or seconds since 1970")
                }
                if key == "modified_after" { f.modifiedAfterNs = ns } else { f.modifiedBeforeNs = ns }
            case "meta":
                guard let eq = value.firstIndex(of: "=") else { throw SearchFilterError("`meta` must be `key=value`") }
                let k = String(value[..<eq])
                let v = String(value[value.index(after: eq)...])
                try checkTerm(key, k)
                guard f.metadata[k] == nil else { throw SearchFilterError("`meta` names `\(k)` twice") }
                guard v.utf8.count <= maxPatternBytes else { throw SearchFilterError("a `meta` value is longer than \(maxPatternBytes) bytes") }
                f.metadata[k] = v
            case "kind":
                try once(key, &seen)
                guard let k = Kind(rawValue: value) else { throw SearchFilterError("`kind` must be `files`, `folders` or `all`") }
                f.kind = k
            default:
                continue
            }
        }
        guard f.tags.count + f.anyTags.count + f.metadata.count <= maxTerms else {
            throw SearchFilterError("at most \(maxTerms) tags and metadata terms in one search")
        }
        return f
    }

    static func checkTerm(_ key: String, _ value: String) throws(SearchFilterError) {
        guard !value.isEmpty, value.utf8.count <= maxPatternBytes else { throw SearchFilterError("`\(key)` must have 1 to \(maxPatternBytes) bytes") }
    }

    /// RFC 3339 (with or without fractions) or whole seconds since the epoch, as nanoseconds.
    public static func parseTime(_ s: String) -> Int64? {
        if let seconds = Int64(s) {
            let (ns, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
            return overflow ? nil : ns
        }
        let styles = [Date.ISO8601FormatStyle(includingFractionalSeconds: true), Date.ISO8601FormatStyle()]
        for style in styles {
            if let d = try? style.parse(s) {
                let ns = (d.timeIntervalSince1970 * 1_000_000_000).rounded()
                return ns.magnitude < 9.2e18 ? Int64(ns) : nil
            }
        }
        return nil
    }

    public static func formatTime(_ ns: Int64) -> String {
        ns % 1_000_000_000 == 0 ? String(ns / 1_000_000_000) : Timestamp.iso8601(nanoseconds: ns)
    }
}

public struct SearchFilterError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A page of search results: files (and folders, with `kind`), in the order of their inode numbers.
public struct SearchResponse: Codable, Sendable, Equatable {
    public var items: [FileRecord]
    /// Give as `cursor` for the next page; absent on the last one.
    public var nextCursor: String?

    public init(items: [FileRecord], nextCursor: String?) {
        self.items = items
        self.nextCursor = nextCursor
    }

    enum CodingKeys: String, CodingKey {
        case items
        case nextCursor = "next_cursor"
    }
}

/// A shell-style pattern for names: `*` (any run), `?` (one character), `[…]` (one of; `!` or `^`
/// first negates; `a-z` a range); `\` takes the next character as it is. No `/`: it matches one name.
///
/// Each store gets it in its own syntax (`sqliteGlob`, `postgresRegex`), and `matches` is the same
/// test in Swift; characters are Unicode scalars in all three.
public struct NameGlob: Codable, Sendable, Equatable {
    enum Token: Equatable {
        case literal(Unicode.Scalar)
        case one
        case any
        case set(negated: Bool, items: [ClosedRange<Unicode.Scalar>])
    }

    public let pattern: String
    let tokens: [Token]

    public init(_ pattern: String) throws(SearchFilterError) {
        self.pattern = pattern
        var tokens: [Token] = []
        let scalars = Array(pattern.unicodeScalars)
        var i = 0
        while i < scalars.count {
            let c = scalars[i]
            switch c {
            case "*":
                if tokens.last != .any { tokens.append(.any) }
                i += 1
            case "?":
                tokens.append(.one)
                i += 1
            case "\\":
                guard i + 1 < scalars.count else { throw SearchFilterError("`\(pattern)` ends with a lone `\\`") }
                tokens.append(.literal(scalars[i + 1]))
                i += 2
            case "[":
                var j = i + 1
                var negated = false
                if j < scalars.count && (scalars[j] == "!" || scalars[j] == "^") {
                    negated = true
                    j += 1
                }
                var items: [ClosedRange<Unicode.Scalar>] = []
                var first = true
                while j < scalars.count && (scalars[j] != "]" || first) {
                    var lo = scalars[j]
                    if lo == "\\" && j + 1 < scalars.count {
                        j += 1
                        lo = scalars[j]
                    }
                    if j + 2 < scalars.count && scalars[j + 1] == "-" && scalars[j + 2] != "]" {
                        var hi = scalars[j + 2]
                        j += 2
                        if hi == "\\" && j + 1 < scalars.count {
                            j += 1
                            hi = scalars[j]
                        }
                        guard lo <= hi else { throw SearchFilterError("`\(pattern)`: the range \(lo)-\(hi) is backwards") }
                        items.append(lo...hi)
                    } else {
                        items.append(lo...lo)
                    }
                    j += 1
                    first = false
                }
                guard j < scalars.count else { throw SearchFilterError("`\(pattern)` has a `[` without its `]`") }
                tokens.append(.set(negated: negated, items: items))
                i = j + 1
            default:
                tokens.append(.literal(c))
                i += 1
            }
        }
        // Each `*` multiplies what a non-matching name can cost a glob engine (SQLite's included):
        // a handful is all a name needs.
        guard tokens.filter({ $0 == .any }).count <= Self.maxStars else {
            throw SearchFilterError("`\(pattern)` has more than \(Self.maxStars) `*`")
        }
        self.tokens = tokens
    }

    public static let maxStars = 8

    public init(from decoder: any Decoder) throws {
        let s = try decoder.singleValueContainer().decode(String.self)
        try self.init(s)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(pattern)
    }

    public static func == (a: NameGlob, b: NameGlob) -> Bool { a.pattern == b.pattern }

    /// Whether `name` matches (iteratively, with one backtrack point per `*`: linear in practice,
    /// never exponential).
    public func matches(_ name: String) -> Bool {
        let s = Array(name.unicodeScalars)
        var t = 0
        var i = 0
        var star: (t: Int, i: Int)?
        while i < s.count {
            if t < tokens.count {
                switch tokens[t] {
                case .any:
                    star = (t, i)
                    t += 1
                    continue
                case .one:
                    t += 1
                    i += 1
                    continue
                case .literal(let c) where c == s[i]:
                    t += 1
                    i += 1
                    continue
                case .set(let negated, let items) where items.contains { $0.contains(s[i]) } != negated:
                    t += 1
                    i += 1
                    continue
                default:
                    break
                }
            }
            guard let st = star else { return false }
            star = (st.t, st.i + 1)
            t = st.t + 1
            i = st.i + 1
        }
        while t < tokens.count, tokens[t] == .any { t += 1 }
        return t == tokens.count
    }

    /// Whether `sqliteGlob` means exactly this pattern. SQLite reads `]`, `^` and `-` in a set by
    /// rules of its own (first, last, as a range's end): a pattern with them in a set is tested by
    /// a function running `matches` instead (`stow_glob`).
    public var sqliteGlobIsExact: Bool {
        let special: Set<Unicode.Scalar> = ["]", "^", "-"]
        return tokens.allSatisfy { t in
            guard case .set(_, let items) = t else { return true }
            return items.allSatisfy { !special.contains($0.lowerBound) && !special.contains($0.upperBound) }
        }
    }

    /// The pattern in SQLite's GLOB syntax (`[*]` for a literal star, `[^…]` to negate).
    public var sqliteGlob: String {
        var out = ""
        for token in tokens {
            switch token {
            case .any: out += "*"
            case .one: out += "?"
            case .literal(let c):
                if c == "*" || c == "?" || c == "[" { out += "[\(c)]" } else { out.unicodeScalars.append(c) }
            case .set(let negated, let items):
                // SQLite reads `]` first in a set as a member, `-` last as itself, and `^` first as
                // a negation (so a `^` member goes later); each range as lo-hi.
                let single: (ClosedRange<Unicode.Scalar>) -> Bool = { r in r == "]"..."]" || r == "-"..."-" || r == "^"..."^" }
                if !negated && items.count == 1 && items[0] == "^"..."^" {
                    out += "^"
                    continue
                }
                var body = items.contains("]"..."]") ? "]" : ""
                for r in items where !single(r) {
                    body.unicodeScalars.append(r.lowerBound)
                    if r.upperBound != r.lowerBound {
                        body += "-"
                        body.unicodeScalars.append(r.upperBound)
                    }
                }
                var dash = items.contains("-"..."-")
                if items.contains("^"..."^") {
                    if body.isEmpty && !negated && dash {
                        body = "-^"  // `-` first is itself; `^` second is not a negation
                        dash = false
                    } else {
                        body += "^"
                    }
                }
                if dash { body += "-" }
                out += (negated ? "[^" : "[") + body + "]"
            }
        }
        return out
    }

    /// The pattern as an anchored POSIX regular expression for PostgreSQL's `~`.
    public var postgresRegex: String {
        func escaped(_ c: Unicode.Scalar) -> String {
            // Every scalar that is not a letter or digit is escaped, or written as \uXXXX when it is
            // outside ASCII punctuation (so no character is ever taken as regex syntax).
            if CharacterSet.alphanumerics.contains(c) && c.isASCII { return String(c) }
            if c.isASCII && c.value >= 0x20 && c.value < 0x7F { return "\\" + String(c) }
            return c.value <= 0xFFFF ? String(format: "\\u%04x", c.value) : String(format: "\\U%08x", c.value)
        }
        var out = "^"
        for token in tokens {
            switch token {
            case .any: out += ".*"
            case .one: out += "."
            case .literal(let c): out += escaped(c)
            case .set(let negated, let items):
                out += negated ? "[^" : "["
                for r in items {
                    out += escaped(r.lowerBound)
                    if r.upperBound != r.lowerBound { out += "-" + escaped(r.upperBound) }
                }
                out += "]"
            }
        }
        return out + "$"
    }
}
