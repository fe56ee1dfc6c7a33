import Foundation

/// Where an S3-compatible store keeps blobs, and how to reach it (`stowd --object-store
/// s3://BUCKET[/PREFIX] --s3-endpoint URL --s3-region REGION`, credentials from the environment).
public struct S3Location: Sendable, Equatable {
    public var bucket: String
    /// Prepended to every key, without a trailing slash; empty for none.
    public var prefix: String
    /// The service's base URL (`http://127.0.0.1:8333`); path-style addressing (`ENDPOINT/BUCKET/KEY`).
    public var endpoint: String
    public var region: String
    public var accessKey: String
    public var secretKey: String

    public init(bucket: String, prefix: String = "", endpoint: String, region: String = "us-east-1", accessKey: String, secretKey: String) {
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint = endpoint
        self.region = region
        self.accessKey = accessKey
        self.secretKey = secretKey
    }

    /// Parses `s3://BUCKET[/PREFIX]`; nil when it is not one.
    public static func parse(_ url: String, endpoint: String, region: String, accessKey: String, secretKey: String) -> S3Location? {
        guard url.hasPrefix("s3://") else { return nil }
        let rest = url.dropFirst(5)
        let parts = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        let bucket = String(parts[0])
        // Bucket names: 3 to 63 of lower-case letters, digits, dots and hyphens.
        guard (3...63).contains(bucket.utf8.count), bucket.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x2D }) else {
            return nil
        }
        var prefix = parts.count > 1 ? String(parts[1]) : ""
        while prefix.hasSuffix("/") { prefix.removeLast() }
        while prefix.hasPrefix("/") { prefix.removeFirst() }
        return S3Location(bucket: bucket, prefix: prefix, endpoint: endpoint, region: region, accessKey: accessKey, secretKey: secretKey)
    }
}
