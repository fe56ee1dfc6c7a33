import Crypto
public import Foundation

/// What a signature allows: reading a file (GET/HEAD) or writing an upload (PUT/PATCH/HEAD/DELETE).
public enum SignatureScope: String, Sendable {
    case read = "r"
    case upload = "w"
}

/// Signs and verifies URLs with HMAC-SHA256 over scope, resource and expiry.
///
/// The resource is the decoded, canonical form (`cdn/{ns}/{path}` or `upload/{id}`), so that two
/// spellings of one URL share a signature and a signature for one path or method class never
/// verifies for another.
///
/// ```swift
/// let signer = URLSigner(secret: key)
/// let sig = signer.signature(scope: .read, resource: "cdn/photos/a.jpg", expires: 1_900_000_000)
/// signer.isValid(sig, scope: .read, resource: "cdn/photos/a.jpg", expires: 1_900_000_000, now: now) // true
/// ```
public struct URLSigner: Sendable {
    /// The secret's bytes (SymmetricKey is not Sendable; a key is made per use, which is cheap).
    private let secret: Data

    public init(secret: Data) { self.secret = secret }

    private var key: SymmetricKey { SymmetricKey(data: secret) }

    public static func readResource(_ ns: Namespace, _ path: StoragePath) -> String { "cdn/\(ns)/\(path)" }
    public static func uploadResource(_ id: String) -> String { "upload/\(id)" }

    private func message(scope: SignatureScope, resource: String, expires: Int64) -> Data {
        Data("\(scope.rawValue)\n\(resource)\n\(expires)".utf8)
    }

    /// The signature, base64url without padding.
    public func signature(scope: SignatureScope, resource: String, expires: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: message(scope: scope, resource: resource, expires: expires), using: key)
        return Base64URL.encode(Data(mac))
    }

    /// Why a signature was refused.
    public enum Rejection: Error, Sendable, Equatable {
        case missing
        case expired
        case invalid
    }

    /// Checks a signature in constant time; expiry is checked against `now` (seconds since the epoch).
    public func verify(_ signature: String?, scope: SignatureScope, resource: String, expires: Int64?, now: Int64) throws(Rejection) {
        guard let signature, let expires else { throw .missing }
        guard let mac = Base64URL.decode(signature), mac.count == SHA256.byteCount else { throw .invalid }
        let valid = HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: message(scope: scope, resource: resource, expires: expires), using: key)
        guard valid else { throw .invalid }
        guard expires > now else { throw .expired }
    }

    /// The query string (`expires=…&signature=…`) for a resource.
    public func query(scope: SignatureScope, resource: String, expires: Int64) -> String {
        "\(Routes.expiresParameter)=\(expires)&\(Routes.signatureParameter)=\(signature(scope: scope, resource: resource, expires: expires))"
    }
}

/// base64url (RFC 4648 §5) without padding.
public enum Base64URL {
    public static func encode(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    public static func decode(_ string: String) -> Data? {
        var s = string.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s)
    }
}
