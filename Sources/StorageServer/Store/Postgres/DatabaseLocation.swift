import Foundation

/// Where a PostgreSQL metadata store is: `stowd --database postgres://USER[:PASSWORD]@HOST[:PORT]/DB`.
///
/// Also `postgresql://`. Query parameters:
/// - `sslmode`: `disable`, `prefer` (the default, as libpq's: TLS when the server offers it, its
///   certificate not checked), `require` (TLS, not checked) or `verify-full` (TLS, checked against the
///   system's trust store, or `sslrootcert`);
/// - `sslrootcert`: a PEM file of CA certificates, for `verify-full`;
/// - `host`: a folder holding PostgreSQL's Unix socket, instead of a TCP host;
/// - `schema`: a schema of its own inside the database (made if missing), so that several stowd
///   deployments, or test servers, can share one database;
/// - `pool`: the most connections this stowd opens (default 20).
///
/// The user name and password may be percent-encoded. `description` never shows the password.
public struct DatabaseLocation: Sendable, Equatable, CustomStringConvertible {
    public enum TLSMode: String, Sendable, CaseIterable { case disable, prefer, require, verifyFull = "verify-full" }

    public var user: String
    public var password: String?
    /// A TCP host, or nil when `socketFolder` is set.
    public var host: String?
    public var port: Int
    public var socketFolder: String?
    public var database: String
    public var tls: TLSMode
    public var rootCertificates: String?
    public var schema: String?
    public var poolSize: Int

    /// Why a `--database` URL was refused.
    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    /// Parses a URL; the error says what is wrong with it (never echoing a password).
    public init(parsing string: String) throws(Invalid) {
        guard let components = URLComponents(string: string), let scheme = components.scheme?.lowercased() else {
            throw Invalid(description: "not a URL; the form is postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        }
        guard scheme == "postgres" || scheme == "postgresql" else {
            throw Invalid(description: "the scheme is `\(scheme)`; a database URL starts with postgres:// or postgresql://")
        }
        guard let user = components.percentEncodedUser.flatMap({ $0.removingPercentEncoding }), !user.isEmpty else {
            throw Invalid(description: "the URL names no user: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        }
        self.user = user
        password = components.percentEncodedPassword.flatMap { $0.removingPercentEncoding }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        guard !path.isEmpty, !path.contains("/") else {
            throw Invalid(description: "the URL names no database: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        }
        database = path.removingPercentEncoding ?? path
        port = components.port ?? 5432
        guard (1...65535).contains(port) else { throw Invalid(description: "the port \(port) is not between 1 and 65535") }
        var query: [String: String] = [:]
        for item in components.queryItems ?? [] {
            guard let value = item.value, !value.isEmpty else { throw Invalid(description: "the parameter `\(item.name)` has no value") }
            query[item.name] = value
        }
        let known: Set<String> = ["sslmode", "sslrootcert", "host", "schema", "pool"]
        if let unknown = query.keys.sorted().first(where: { !known.contains($0) }) {
            throw Invalid(description: "unknown parameter `\(unknown)`; known: \(known.sorted().joined(separator: ", "))")
        }
        socketFolder = query["host"]
        if let folder = socketFolder {
            guard folder.hasPrefix("/") else { throw Invalid(description: "`host=` names the folder of PostgreSQL's socket, an absolute path") }
            host = nil
        } else {
            guard let h = components.host, !h.isEmpty else { throw Invalid(description: "the URL names no host") }
            host = h.hasPrefix("[") && h.hasSuffix("]") ? String(h.dropFirst().dropLast()) : h
        }
        guard let mode = TLSMode(rawValue: query["sslmode"] ?? "prefer") else {
            throw Invalid(description: "sslmode `\(query["sslmode"] ?? "")` is not one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        tls = mode
        rootCertificates = query["sslrootcert"]
        if let schema = query["schema"] {
            guard Self.isPlainIdentifier(schema) else {
                throw Invalid(description: "schema `\(schema)`: use 1 to 63 of a-z, 0-9 and _, starting with a letter or _")
            }
            self.schema = schema
        }
        if let pool = query["pool"] {
            guard let n = Int(pool), (1...1000).contains(n) else { throw Invalid(description: "pool `\(pool)` is not a number from 1 to 1000") }
            poolSize = n
        } else {
            poolSize = 20
        }
    }

    /// A lower-case SQL identifier that needs no quoting.
    static func isPlainIdentifier(_ s: String) -> Bool {
        let bytes = Array(s.utf8)
        guard (1...63).contains(bytes.count) else { return false }
        for (i, b) in bytes.enumerated() {
            let letter = (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || b == UInt8(ascii: "_")
            let digit = b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")
            if !(letter || (i > 0 && digit)) { return false }
        }
        return true
    }

    /// The URL without its password.
    public var description: String {
        let credentials = user + (password == nil ? "" : ":***")
        var s = "postgres://\(credentials)@\(host.map { $0.contains(":") ? "[\($0)]" : $0 } ?? "")"
        if host != nil { s += ":\(port)" }
        s += "/\(database)"
        var params: [String] = []
        if let socketFolder { params.append("host=\(socketFolder)") }
        if let schema { params.append("schema=\(schema)") }
        if tls != .prefer { params.append("sslmode=\(tls.rawValue)") }
        return params.isEmpty ? s : s + "?" + params.joined(separator: "&")
    }
}
