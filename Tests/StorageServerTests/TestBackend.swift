import Foundation
import StorageServer
import Synchronization

/// Which stores the server tests run on. By default the embedded ones (SQLite and a local
/// folder); with `STOW_TEST_S3_ENDPOINT` (and `_ACCESS_KEY`, `_SECRET_KEY`, `_BUCKET`, as
/// `scripts/s3-test.sh start` prints them), blobs go to that S3 server, each server under a
/// prefix of its own, so the same suite checks both (`make test` runs it twice).
enum TestBackend {
    static let environment = ProcessInfo.processInfo.environment

    static var isS3: Bool { environment["STOW_TEST_S3_ENDPOINT"] != nil }

    /// A bucket location with a fresh prefix, or nil on the embedded backend.
    static func s3Location() -> S3Location? {
        guard let endpoint = environment["STOW_TEST_S3_ENDPOINT"] else { return nil }
        return S3Location(
            bucket: environment["STOW_TEST_S3_BUCKET"] ?? "stow-test", prefix: "t-" + UUID().uuidString.prefix(8).lowercased(), endpoint: endpoint,
            accessKey: environment["STOW_TEST_S3_ACCESS_KEY"] ?? "", secretKey: environment["STOW_TEST_S3_SECRET_KEY"] ?? "")
    }

    static let byDirectory = Mutex<[String: S3Location]>([:])

    /// The location for a data directory: the same one each time a server starts on it (a
    /// restart finds its blobs), nil on the embedded backend.
    static func s3Location(for dataDirectory: String) -> S3Location? {
        byDirectory.withLock { map in
            if let known = map[dataDirectory] { return known }
            guard let fresh = s3Location() else { return nil }
            map[dataDirectory] = fresh
            return fresh
        }
    }

    /// stowd's arguments and environment for the same (`StowdProcess`).
    static func stowdArguments(_ location: S3Location?) -> (arguments: [String], environment: [String: String]) {
        guard let location else { return ([], [:]) }
        return (
            ["--object-store", "s3://\(location.bucket)/\(location.prefix)", "--s3-endpoint", location.endpoint],
            ["AWS_ACCESS_KEY_ID": location.accessKey, "AWS_SECRET_ACCESS_KEY": location.secretKey]
        )
    }
}
