import Crypto
public import Foundation
import StorageProtocol

/// AWS Signature Version 4 for S3-compatible stores: presigned URLs (the data path straight
/// between clients and the store) and signed requests (stowd's own calls).
///
/// Written from the published algorithm (no S3 SDK exists for Swift here) and checked against
/// botocore's signatures for the same inputs (`SigV4Tests`). Paths are S3's: each segment is
/// percent-encoded once (RFC 3986 unreserved characters stay), `/` separates them.
///
/// ```swift
/// let signer = SigV4(accessKey: "AKID", secretKey: "…", region: "us-east-1")
/// let url = signer.presignedURL(method: "GET", endpoint: "http://127.0.0.1:8333", path: "/bucket/a b.txt",
///                               expires: 3600, now: Date())
/// ```
public struct SigV4: Sendable {
    public var accessKey: String
    public var secretKey: String
    public var sessionToken: String?
    public var region: String
    public var service: String

    public init(accessKey: String, secretKey: String, sessionToken: String? = nil, region: String = "us-east-1", service: String = "s3") {
        self.accessKey = accessKey
        self.secretKey = secretKey
        self.sessionToken = sessionToken
        self.region = region
        self.service = service
    }

    static let algorithm = "AWS4-HMAC-SHA256"
    /// The payload hash of a presigned URL: the body is not known when the URL is made.
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"

    /// `20130524T000000Z` and `20130524` for a moment.
    static func stamps(_ date: Date) -> (time: String, day: String) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        let day = String(format: "%04d%02d%02d", c.year!, c.month!, c.day!)
        return (day + String(format: "T%02d%02d%02dZ", c.hour!, c.minute!, c.second!), day)
    }

    /// RFC 3986 percent-encoding as SigV4 wants it: unreserved characters stay, the rest `%XX`
    /// (upper case); `/` stays too when `keepSlash` (a path).
    public static func encode(_ text: String, keepSlash: Bool = false) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepSlash:
                out.append("/")
            default:
                out += "%" + Hex.uppercase(CollectionOfOne(byte))
            }
        }
        return out
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String { Hex.lowercase(bytes) }

    public static func sha256Hex(_ bytes: [UInt8]) -> String { hex(SHA256.hash(data: bytes)) }

    func signingKey(day: String) -> SymmetricKey {
        func hmac(_ key: SymmetricKey, _ text: String) -> SymmetricKey {
            SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(text.utf8), using: key)))
        }
        let dated = hmac(SymmetricKey(data: Data(("AWS4" + secretKey).utf8)), day)
        return hmac(hmac(hmac(dated, region), service), "aws4_request")
    }

    func scope(day: String) -> String { "\(day)/\(region)/\(service)/aws4_request" }

    /// The canonical query string: each name and value encoded, sorted by name, then value.
    static func canonicalQuery(_ items: [(String, String)]) -> String {
        // Encoded text is ASCII, so String order is byte order here.
        let encoded: [(name: String, value: String)] = items.map { (encode($0.0), encode($0.1)) }
        let sorted = encoded.sorted { a, b in a.name == b.name ? a.value < b.value : a.name < b.name }
        return sorted.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
    }

    /// The signature of a request already in canonical parts.
    func signature(method: String, encodedPath: String, query: [(String, String)], headers: [(String, String)], payloadHash: String, time: String, day: String) -> (signature: String, signedHeaders: String) {
        let canonicalHeaders = headers.map { ($0.0.lowercased(), $0.1.trimmingCharacters(in: .whitespaces)) }.sorted { $0.0 < $1.0 }
        let signedHeaders = canonicalHeaders.map(\.0).joined(separator: ";")
        let canonicalRequest = [
            method, encodedPath, Self.canonicalQuery(query), canonicalHeaders.map { "\($0.0):\($0.1)\n" }.joined(), signedHeaders, payloadHash,
        ].joined(separator: "\n")
        let stringToSign = [Self.algorithm, time, scope(day: day), Self.sha256Hex(Array(canonicalRequest.utf8))].joined(separator: "\n")
        let mac = HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: signingKey(day: day))
        return (Self.hex(mac), signedHeaders)
    }

    /// `host` or `host:port` of an endpoint URL, as the `Host` header carries it (the port left
    /// out when it is the scheme's default).
    static func hostHeader(_ endpoint: URL) -> String {
        let host = endpoint.host ?? ""
        guard let port = endpoint.port, !(endpoint.scheme == "http" && port == 80), !(endpoint.scheme == "https" && port == 443) else { return host }
        return "\(host):\(port)"
    }

    /// A presigned URL: anyone holding it may make this one request until it expires.
    /// - Parameters:
    ///   - path: the object's path on the endpoint (path-style: `/bucket/key`), not yet encoded.
    ///   - query: extra query items (`partNumber`, `uploadId` for a multipart part).
    ///   - headers: headers the request must then carry, signed too (lower-case names), e.g.
    ///     `x-amz-checksum-sha256`, which makes the store check the body against it.
    public func presignedURL(
        method: String, endpoint: String, path: String, query: [(String, String)] = [], headers: [(String, String)] = [], expires: Int, now: Date
    ) -> String {
        let base = URL(string: endpoint)!
        let (time, day) = Self.stamps(now)
        let encodedPath = Self.encode(path, keepSlash: true)
        let signedHeaders = ([("host", Self.hostHeader(base))] + headers).sorted { $0.0 < $1.0 }
        var items = query + [
            ("X-Amz-Algorithm", Self.algorithm), ("X-Amz-Credential", "\(accessKey)/\(scope(day: day))"), ("X-Amz-Date", time),
            ("X-Amz-Expires", String(expires)), ("X-Amz-SignedHeaders", signedHeaders.map(\.0).joined(separator: ";")),
        ]
        if let sessionToken { items.append(("X-Amz-Security-Token", sessionToken)) }
        let (sig, _) = signature(
            method: method, encodedPath: encodedPath, query: items, headers: signedHeaders, payloadHash: Self.unsignedPayload,
            time: time, day: day)
        let root = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        return root + encodedPath + "?" + Self.canonicalQuery(items) + "&X-Amz-Signature=" + sig
    }

    /// The headers that sign a request (`Authorization`, `x-amz-date`, `x-amz-content-sha256`,
    /// and `x-amz-security-token` with temporary credentials), for stowd's own calls to the store.
    public func signedHeaders(
        method: String, endpoint: String, path: String, query: [(String, String)] = [], headers: [(String, String)] = [], payloadHash: String, now: Date
    ) -> [(String, String)] {
        let base = URL(string: endpoint)!
        let (time, day) = Self.stamps(now)
        var signed = headers + [("host", Self.hostHeader(base)), ("x-amz-date", time), ("x-amz-content-sha256", payloadHash)]
        if let sessionToken { signed.append(("x-amz-security-token", sessionToken)) }
        let (sig, names) = signature(
            method: method, encodedPath: Self.encode(path, keepSlash: true), query: query, headers: signed, payloadHash: payloadHash, time: time, day: day)
        let authorization = "\(Self.algorithm) Credential=\(accessKey)/\(scope(day: day)), SignedHeaders=\(names), Signature=\(sig)"
        return signed.filter { $0.0 != "host" } + [("Authorization", authorization)]
    }
}
