/// The three-step upload of the seed API: start → PUT to the storage link → complete.

/// Extras of an upload, carried in `params` of the start request.
public struct UploadParams: Codable, Sendable, Equatable {
    /// Custom metadata (string map).
    public var metadata: [String: String]?
    /// Whether the file is readable through its public `/cdn/` URL without a signature.
    public var isPublic: Bool?
    /// Fail with 412 at complete unless the current file has this ETag.
    public var ifMatch: String?
    /// `"*"`: fail with 412 at complete if the file exists (create only).
    public var ifNoneMatch: String?
    /// Expected SHA-256 of the whole content (hex); complete fails with 460 on a mismatch.
    public var sha256: String?
    /// POSIX attributes the filesystem keeps with the file.
    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    public var mtimeNs: Int64?
    public var atimeNs: Int64?
    /// The file's ctime as the client last changed it; the server keeps it at complete (never later
    /// than its own clock), so that an upload landing does not move ctime.
    public var ctimeNs: Int64?
    /// The bytes from this offset to `size` are zeros and are not sent: the client sends
    /// `zerosFrom` bytes, and the server makes the rest a hole at complete. For a file extended by
    /// truncate (`truncate -s 1T`), whose zeros would otherwise cross the network and fill a disk.
    public var zerosFrom: Int64?

    public init(
        metadata: [String: String]? = nil, isPublic: Bool? = nil, ifMatch: String? = nil, ifNoneMatch: String? = nil,
        sha256: String? = nil, mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil, mtimeNs: Int64? = nil,
        atimeNs: Int64? = nil, ctimeNs: Int64? = nil, zerosFrom: Int64? = nil
    ) {
        self.metadata = metadata
        self.isPublic = isPublic
        self.ifMatch = ifMatch
        self.ifNoneMatch = ifNoneMatch
        self.sha256 = sha256
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.mtimeNs = mtimeNs
        self.atimeNs = atimeNs
        self.ctimeNs = ctimeNs
        self.zerosFrom = zerosFrom
    }

    enum CodingKeys: String, CodingKey {
        case metadata, sha256, mode, uid, gid
        case isPublic = "public"
        case ifMatch = "if_match"
        case ifNoneMatch = "if_none_match"
        case mtimeNs = "mtime_ns"
        case atimeNs = "atime_ns"
        case ctimeNs = "ctime_ns"
        case zerosFrom = "zeros_from"
    }
}

/// `POST /v2.0/namespaces/{ns}/upload/start` body.
public struct StartUploadRequest: Codable, Sendable, Equatable {
    /// The full path inside the namespace.
    public var fileName: String
    public var contentType: String?
    public var size: Int64
    public var tags: [String]?
    public var params: UploadParams?
    /// The size is not known yet (a file still being written): `size` is 0, bytes come in PATCHes
    /// at increasing offsets (or, where `upload.direct` is offered, in parts straight to the
    /// object store), and complete names the final size.
    public var deferLength: Bool?

    public init(
        fileName: String, contentType: String? = nil, size: Int64, tags: [String]? = nil, params: UploadParams? = nil, deferLength: Bool? = nil
    ) {
        self.fileName = fileName
        self.contentType = contentType
        self.size = size
        self.tags = tags
        self.params = params
        self.deferLength = deferLength
    }

    enum CodingKeys: String, CodingKey {
        case size, tags, params
        case fileName = "file_name"
        case contentType = "content_type"
        case deferLength = "defer_length"
    }
}

/// The signed storage link of an upload.
public struct UploadLink: Codable, Sendable, Equatable {
    public var url: String
    /// Seconds the link is valid for, from when it was issued.
    public var expiry: Int
    /// When the link expires (seconds since the Unix epoch).
    public var expiresAt: Int64?
    /// A StowFS extension: where the bytes may go straight to the object store instead of through
    /// `url` (a server whose blobs are in S3). Clients that do not know it use `url` as always.
    public var direct: DirectUpload?

    public init(url: String, expiry: Int, expiresAt: Int64?, direct: DirectUpload? = nil) {
        self.url = url
        self.expiry = expiry
        self.expiresAt = expiresAt
        self.direct = direct
    }

    enum CodingKeys: String, CodingKey {
        case url, expiry, direct
        case expiresAt = "expires_at"
    }
}

/// How to send an upload's bytes straight to the object store: the whole file in one `PUT` to
/// `url` (with `headers`), or in parts of `partSize` bytes, in any order and in parallel, to
/// URLs asked of `upload/parts` (which also says which parts the store has). Then complete as
/// usual. Both kinds of URL expire with the storage link; renew gives fresh ones.
public struct DirectUpload: Codable, Sendable, Equatable {
    /// A presigned `PUT` of the whole file (nil when the file is too large for one: parts only).
    public var url: String?
    /// Headers the whole-file `PUT` must carry (a checksum the store checks the body against).
    public var headers: [String: String]?
    public var partSize: Int64
    /// How many parts the file takes; 0 for a deferred length (up to 10,000 parts, each
    /// `partSize` but the last; complete names the size they hold).
    public var parts: Int
    public var expiresAt: Int64

    public init(url: String?, headers: [String: String]?, partSize: Int64, parts: Int, expiresAt: Int64) {
        self.url = url
        self.headers = headers
        self.partSize = partSize
        self.parts = parts
        self.expiresAt = expiresAt
    }

    /// The largest part an object store takes (S3's limit, 5 GiB): a client sends a file in
    /// parts only of 1 byte to this many.
    public static let largestPart: Int64 = 5 << 30
    /// The most parts an upload may have (S3's limit).
    public static let mostParts = 10_000

    enum CodingKeys: String, CodingKey {
        case url, headers, parts
        case partSize = "part_size"
        case expiresAt = "expires_at"
    }
}

/// `POST …/upload/parts`: presigned URLs for some parts of a direct upload.
public struct UploadPartsRequest: Codable, Sendable, Equatable {
    /// The start answer (as complete takes it).
    public var upload: StartUploadResponse
    /// Part numbers, from 1 (at most 1000 a request).
    public var numbers: [Int]

    public init(upload: StartUploadResponse, numbers: [Int]) {
        self.upload = upload
        self.numbers = numbers
    }
}

public struct UploadPartsResponse: Codable, Sendable, Equatable {
    public struct Part: Codable, Sendable, Equatable {
        public var number: Int
        /// Where to `PUT` the part (absent in `stored`).
        public var url: String?
        public var size: Int64

        public init(number: Int, url: String?, size: Int64) {
            self.number = number
            self.url = url
            self.size = size
        }
    }

    public var partSize: Int64
    /// The URLs asked for.
    public var parts: [Part]
    /// The parts the store has already, whole (a resumed upload sends only the others).
    public var stored: [Part]

    public init(partSize: Int64, parts: [Part], stored: [Part]) {
        self.partSize = partSize
        self.parts = parts
        self.stored = stored
    }

    enum CodingKeys: String, CodingKey {
        case parts, stored
        case partSize = "part_size"
    }

    /// As the synthesized decoder, with the numbers a client computes offsets from checked: a
    /// part size of 1 to `DirectUpload.largestPart` (0 divided the file into parts by zero, a
    /// negative one made a range that ends before it starts), and parts numbered 1 to
    /// `DirectUpload.mostParts`, of 0 to `largestPart` bytes (so that `(number - 1) * partSize`
    /// and the part's end cannot overflow). Anything else is a decoding error.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        partSize = try c.decode(Int64.self, forKey: .partSize)
        parts = try c.decode([Part].self, forKey: .parts)
        stored = try c.decode([Part].self, forKey: .stored)
        guard (1...DirectUpload.largestPart).contains(partSize) else {
            throw DecodingError.dataCorruptedError(forKey: .partSize, in: c, debugDescription: "a part size of \(partSize) bytes")
        }
        for (key, list) in [(CodingKeys.parts, parts), (.stored, stored)] {
            for p in list where !(1...DirectUpload.mostParts).contains(p.number) || !(0...DirectUpload.largestPart).contains(p.size) {
                throw DecodingError.dataCorruptedError(forKey: key, in: c, debugDescription: "part \(p.number) of \(p.size) bytes")
            }
        }
    }
}

/// Where a file can be read: the CDN URL (public files) that `sign-urls` turns into a signed URL.
public struct CDNLink: Codable, Sendable, Equatable {
    public var url: String
    public var absoluteUrl: String
    public var relativeUrl: String

    public init(url: String, absoluteUrl: String, relativeUrl: String) {
        self.url = url
        self.absoluteUrl = absoluteUrl
        self.relativeUrl = relativeUrl
    }

    enum CodingKeys: String, CodingKey {
        case url
        case absoluteUrl = "absolute_url"
        case relativeUrl = "relative_url"
    }
}

/// The answer to start; the SDK sends it back whole as the body of complete.
public struct StartUploadResponse: Codable, Sendable, Equatable {
    public var fileName: String
    public var filePath: String
    public var contentType: String
    public var namespace: String
    public var operation: String
    public var size: Int64
    public var tags: [String]
    public var upload: UploadLink
    public var cdn: CDNLink
    public var method: String
    public var params: UploadParams?
    /// A deferred-length upload (`size` is 0 until the client sets it, in complete's body).
    public var deferLength: Bool?

    public init(
        fileName: String, filePath: String, contentType: String, namespace: String, operation: String = "putObject",
        size: Int64, tags: [String], upload: UploadLink, cdn: CDNLink, method: String = "PUT", params: UploadParams?, deferLength: Bool? = nil
    ) {
        self.deferLength = deferLength
        self.fileName = fileName
        self.filePath = filePath
        self.contentType = contentType
        self.namespace = namespace
        self.operation = operation
        self.size = size
        self.tags = tags
        self.upload = upload
        self.cdn = cdn
        self.method = method
        self.params = params
    }

    enum CodingKeys: String, CodingKey {
        case namespace, operation, size, tags, upload, cdn, method, params
        case fileName = "file_name"
        case filePath = "file_path"
        case contentType = "content_type"
        case deferLength = "defer_length"
    }
}

/// tus 1.0 header names and values.
public enum Tus {
    public static let version = "1.0.0"
    public static let extensions = "creation,creation-with-upload,termination,expiration,checksum"
    public static let checksumAlgorithms = "sha1,sha256"
    public static let resumable = "Tus-Resumable"
    public static let uploadOffset = "Upload-Offset"
    public static let uploadLength = "Upload-Length"
    public static let uploadDeferLength = "Upload-Defer-Length"
    public static let uploadMetadata = "Upload-Metadata"
    public static let uploadExpires = "Upload-Expires"
    public static let uploadChecksum = "Upload-Checksum"
    public static let offsetContentType = "application/offset+octet-stream"
}

/// `POST …/upload/batch`: several small files in one request, stored in one transaction.
///
/// The body is a 4-byte big-endian length, that many bytes of `BatchUpload.Request` JSON, then
/// each file's bytes, one after the other, in the order and with the sizes the JSON declares. The
/// answer (200) has one result per file, in the same order: each file is stored or refused on its
/// own (a refused file changes nothing). A body that does not match its declaration is refused
/// whole (400), and nothing of it is stored.
public enum BatchUpload {
    /// At most this many files in one batch.
    public static let maxFiles = 256
    /// At most this many bytes of content in one batch.
    public static let maxBytes: Int64 = 16 << 20

    public struct Request: Codable, Sendable, Equatable {
        public var files: [StartUploadRequest]
        public init(files: [StartUploadRequest]) { self.files = files }
    }

    public struct Response: Codable, Sendable, Equatable {
        public var results: [Result]
        public init(results: [Result]) { self.results = results }
    }

    /// A stored file's record, or the status and error it was refused with.
    public struct Result: Codable, Sendable, Equatable {
        public var file: FileRecord?
        public var status: Int?
        public var error: ErrorBody?
        public init(file: FileRecord? = nil, status: Int? = nil, error: ErrorBody? = nil) {
            self.file = file
            self.status = status
            self.error = error
        }
    }

    /// The body's first bytes: the declaration's length, then the declaration.
    public static func header(_ request: Request) -> [UInt8] {
        let json = Array(WireJSON.encode(request))
        let n = UInt32(json.count)
        return [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)] + json
    }
}
