import Foundation
import StorageServer
import Synchronization

/// Which stores the server tests run on. By default the embedded ones (SQLite and a local
/// folder); with `STOW_TEST_S3_ENDPOINT` (and `_ACCESS_KEY`, `_SECRET_KEY`, `_BUCKET`, as
/// `scripts/s3-test.sh start` prints them), blobs go to that S3 server, each server under a
/// prefix of its own; with `STOW_TEST_DATABASE_URL` (`scripts/pg-test.sh start`), metadata goes to
/// that PostgreSQL, each server in a schema of its own. So the same suite checks every backend
/// (`make test` runs it on the embedded stores, then on PostgreSQL + S3).
enum TestBackend {
    static let environment = ProcessInfo.processInfo.environment

    static var isPostgres: Bool { environment["STOW_TEST_DATABASE_URL"] != nil }

    static let databaseByDirectory = Mutex<[String: DatabaseLocation]>([:])

    /// A database location with a fresh schema, or nil on the embedded backend.
    static func database() -> DatabaseLocation? {
        guard let url = environment["STOW_TEST_DATABASE_URL"] else { return nil }
        var location = try! DatabaseLocation(parsing: url)
        location.schema = "t_" + UUID().uuidString.prefix(8).lowercased()
        location.tls = .disable
        location.poolSize = 8
        return location
    }

    /// The database for a data directory: the same schema each time a server starts on it.
    static func database(for dataDirectory: String) -> DatabaseLocation? {
        databaseByDirectory.withLock { map in
            if let known = map[dataDirectory] { return known }
            guard let fresh = database() else { return nil }
            map[dataDirectory] = fresh
            return fresh
        }
    }

    /// Makes `other` use the same database schema and bucket prefix as `dataDirectory` (replicas).
    static func share(_ dataDirectory: String, with other: String) {
        let database = database(for: dataDirectory), bucket = s3Location(for: dataDirectory)
        databaseByDirectory.withLock { $0[other] = database }
        byDirectory.withLock { $0[other] = bucket }
    }

    /// The URL of a location, password included (for a stowd child process).
    static func url(_ l: DatabaseLocation) -> String {
        let password = l.password.map { ":" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? ""
        return "postgres://\(l.user)\(password)@\(l.host ?? "127.0.0.1"):\(l.port)/\(l.database)?sslmode=disable&pool=\(l.poolSize)"
            + (l.schema.map { "&schema=\($0)" } ?? "")
    }

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

    /// stowd's arguments and environment for a data directory's stores (`StowdProcess`).
    static func stowdArguments(for dataDirectory: String) -> (arguments: [String], environment: [String: String]) {
        var arguments: [String] = [], environment: [String: String] = [:]
        if let location = s3Location(for: dataDirectory) {
            arguments += ["--object-store", "s3://\(location.bucket)/\(location.prefix)", "--s3-endpoint", location.endpoint]
            environment = ["AWS_ACCESS_KEY_ID": location.accessKey, "AWS_SECRET_ACCESS_KEY": location.secretKey]
        }
        if let database = database(for: dataDirectory) {
            // In the environment: a password does not belong on a command line (ps shows it).
            environment["STOWD_DATABASE"] = url(database)
        }
        return (arguments, environment)
    }
}
