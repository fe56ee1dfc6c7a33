/// `POST …/v2.0/namespaces/{ns}/delete/batch` (a StowFS extension): several files deleted in one
/// request. Each is deleted or refused on its own, as `DELETE …/files/{path}` would (with its own
/// `If-Match`); the server makes them in one transaction where it can (one commit for the lot).
/// The answer (200) has one result per file, in order: 204, or the status and error the single
/// delete would have answered (404 for a file that is not there, 412 for an ETag or inode that does not match).
/// One delete of several (`BatchDelete`, `ObjectStore.deleteFiles`): the file at `path`, only if
/// its ETag is `ifMatch` and its server inode is `inode` (each when given).
public struct FileDeletion: Sendable, Equatable {
    public var path: StoragePath
    public var ifMatch: String?
    /// The server inode the deleter saw there: another file that took the name since is not deleted (412).
    public var inode: UInt64?
    public init(path: StoragePath, ifMatch: String? = nil, inode: UInt64? = nil) {
        self.path = path
        self.ifMatch = ifMatch
        self.inode = inode
    }
}

public enum BatchDelete {
    /// At most this many files in one request.
    public static let maxFiles = 1024

    public struct Item: Codable, Sendable, Equatable {
        public var path: String
        /// Delete only if the file's ETag is this one.
        public var ifMatch: String?
        /// Delete only if the file is this server inode (`FileRecord.inode`): not another file that took the name.
        public var inode: UInt64?

        public init(path: String, ifMatch: String? = nil, inode: UInt64? = nil) {
            self.path = path
            self.ifMatch = ifMatch
            self.inode = inode
        }

        enum CodingKeys: String, CodingKey {
            case path
            case ifMatch = "if_match"
            case inode
        }
    }

    public struct Request: Codable, Sendable, Equatable {
        public var files: [Item]
        public init(files: [Item]) { self.files = files }
    }

    public struct Result: Codable, Sendable, Equatable {
        public var status: Int
        public var error: ErrorBody?
        public init(status: Int, error: ErrorBody? = nil) {
            self.status = status
            self.error = error
        }
    }

    public struct Response: Codable, Sendable, Equatable {
        public var results: [Result]
        public init(results: [Result]) { self.results = results }
    }
}
