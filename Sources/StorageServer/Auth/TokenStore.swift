import Crypto
import Foundation
import StorageProtocol

#if canImport(Glibc)
import Glibc
#endif

/// What a token may do on a namespace. Each level includes the ones below it.
public enum Permission: Int, Sendable, Comparable, CustomStringConvertible {
    /// Browse, stat, sign and download.
    case read = 1
    /// Also upload, change metadata, rename, delete, make folders.
    case write = 2
    /// Also create and delete namespaces.
    case admin = 3

    public init?(name: String) {
        switch name.lowercased() {
        case "read", "r", "ro": self = .read
        case "write", "w", "rw": self = .write
        case "admin": self = .admin
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .read: "read"
        case .write: "write"
        case .admin: "admin"
        }
    }

    public static func < (a: Permission, b: Permission) -> Bool { a.rawValue < b.rawValue }
}

/// The tokens the server accepts, each granting a permission on namespaces matching a glob.
///
/// Token file format, one grant per line (`#` starts a comment):
///
/// ```
/// # token                namespace-glob   permission
/// s3cr3t-photos          photos           write
/// s3cr3t-reader          *                read
/// s3cr3t-admin           *                admin
/// ```
///
/// Tokens are kept only as SHA-256 digests and looked up by digest, so that the time a lookup
/// takes says nothing about how much of a guessed token was right.
public struct TokenStore: Sendable {
    public struct Grant: Sendable, Equatable {
        public var pattern: String
        public var permission: Permission
    }

    private var grants: [Data: [Grant]] = [:]

    public init() {}

    public struct ParseError: Error, CustomStringConvertible, Equatable {
        public var line: Int
        public var message: String
        public var description: String { "line \(line): \(message)" }
    }

    /// Parses a token file's contents.
    public init(parsing text: String) throws(ParseError) {
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            if fields.isEmpty { continue }
            guard fields.count == 3 else {
                throw ParseError(line: index + 1, message: "expected `token namespace-glob permission`, found \(fields.count) field(s)")
            }
            guard fields[0].count >= 8 else { throw ParseError(line: index + 1, message: "a token must be at least 8 characters long") }
            guard let permission = Permission(name: String(fields[2])) else {
                throw ParseError(line: index + 1, message: "permission must be read, write or admin, not `\(fields[2])`")
            }
            add(token: String(fields[0]), pattern: String(fields[1]), permission: permission)
        }
    }

    /// A store with one token that is admin on every namespace (`STOWD_TOKEN`).
    public static func single(adminToken: String) -> TokenStore {
        var store = TokenStore()
        store.add(token: adminToken, pattern: "*", permission: .admin)
        return store
    }

    public mutating func add(token: String, pattern: String, permission: Permission) {
        grants[Self.digest(token), default: []].append(Grant(pattern: pattern, permission: permission))
    }

    public var isEmpty: Bool { grants.isEmpty }

    private static func digest(_ token: String) -> Data { Data(SHA256.hash(data: Data(token.utf8))) }

    /// Whether the token is known at all.
    public func isKnown(_ token: String) -> Bool { grants[Self.digest(token)] != nil }

    /// The highest permission the token has on a namespace; nil for none.
    public func permission(token: String, namespace: String) -> Permission? {
        guard let list = grants[Self.digest(token)] else { return nil }
        return list.filter { Self.matches($0.pattern, namespace) }.map(\.permission).max()
    }

    static func matches(_ pattern: String, _ name: String) -> Bool {
        fnmatch(pattern, name, 0) == 0
    }
}

extension TokenStore {
    /// The tokens `stowd` uses, by precedence: a token file; the `STOWD_TOKEN` environment variable
    /// (admin on every namespace); else an admin token generated once and kept in
    /// `<data dir>/admin.token`, so that a first start needs no set-up.
    /// - Returns: the store, and a sentence saying where the tokens came from.
    public static func resolve(tokenFile: String?, environment: [String: String], dataDirectory: String) throws -> (TokenStore, String) {
        if let tokenFile {
            guard let data = FileManager.default.contents(atPath: tokenFile), let text = String(data: data, encoding: .utf8) else {
                throw TokenFileError(message: "cannot read token file \(tokenFile)")
            }
            do {
                let store = try TokenStore(parsing: text)
                guard !store.isEmpty else { throw TokenFileError(message: "token file \(tokenFile) holds no tokens") }
                return (store, "tokens from \(tokenFile)")
            } catch let e as ParseError {
                throw TokenFileError(message: "\(tokenFile): \(e)")
            }
        }
        if let token = environment["STOWD_TOKEN"], !token.isEmpty {
            return (.single(adminToken: token), "one admin token from STOWD_TOKEN")
        }
        let path = dataDirectory + "/admin.token"
        if let data = FileManager.default.contents(atPath: path), let token = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines), !token.isEmpty {
            return (.single(adminToken: token), "the admin token in \(path)")
        }
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let token = Hex.random(bytes: 24)
        guard FileManager.default.createFile(atPath: path, contents: Data((token + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
            throw TokenFileError(message: "cannot write \(path)")
        }
        return (.single(adminToken: token), "a new admin token, written to \(path)")
    }
}

public struct TokenFileError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
