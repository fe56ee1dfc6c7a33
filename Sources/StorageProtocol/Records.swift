import Foundation

/// What a path names: a file, a folder, or (POSIX completeness) a link or special file.
public enum NodeKind: String, Codable, Sendable, CaseIterable {
    case file
    case directory = "dir"
    case symlink
    case fifo
    case socket
    case characterDevice = "chr"
    case blockDevice = "blk"
}

/// A file record (the seed's DbRecord): a view of one entry (a path) plus its inode.
///
/// Folders use the same record with `kind == .directory`, so that one listing call can fill the
/// attributes of every child.
public struct FileRecord: Codable, Sendable, Equatable {
    public var id: String
    public var fileName: String
    public var filePath: String
    public var contentType: String
    public var namespace: String
    public var operation: String
    /// Bytes; from 0 to `RecordNumbers.largestSize` in a record read from JSON.
    public var size: Int64
    public var upload: UploadLink?
    public var cdn: CDNLink
    public var success: Bool
    public var tags: [String]
    public var createdOn: String
    public var modifiedOn: String
    /// Changes whenever the content changes (one value per stored blob).
    public var etag: String
    public var sha256: String?
    public var metadata: [String: String]
    public var isPublic: Bool
    // POSIX view of the inode.
    public var kind: NodeKind
    public var inode: UInt64
    /// Permission bits (no file-type bits); nil when the file carries none.
    public var mode: UInt32?
    /// Owner and group; nil when the file carries none.
    public var uid: UInt32?
    public var gid: UInt32?
    public var nlink: UInt32
    public var atimeNs: Int64
    public var mtimeNs: Int64
    public var ctimeNs: Int64
    public var target: String?
    public var rdev: UInt64?

    public init(
        id: String, fileName: String, filePath: String, contentType: String, namespace: String, operation: String = "putObject",
        size: Int64, upload: UploadLink? = nil, cdn: CDNLink, success: Bool = true, tags: [String], createdOn: String,
        modifiedOn: String, etag: String, sha256: String?, metadata: [String: String], isPublic: Bool, kind: NodeKind,
        inode: UInt64, mode: UInt32?, uid: UInt32?, gid: UInt32?, nlink: UInt32, atimeNs: Int64, mtimeNs: Int64, ctimeNs: Int64,
        target: String? = nil, rdev: UInt64? = nil
    ) {
        self.id = id
        self.fileName = fileName
        self.filePath = filePath
        self.contentType = contentType
        self.namespace = namespace
        self.operation = operation
        self.size = size
        self.upload = upload
        self.cdn = cdn
        self.success = success
        self.tags = tags
        self.createdOn = createdOn
        self.modifiedOn = modifiedOn
        self.etag = etag
        self.sha256 = sha256
        self.metadata = metadata
        self.isPublic = isPublic
        self.kind = kind
        self.inode = inode
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.nlink = nlink
        self.atimeNs = atimeNs
        self.mtimeNs = mtimeNs
        self.ctimeNs = ctimeNs
        self.target = target
        self.rdev = rdev
    }

    enum CodingKeys: String, CodingKey {
        case id = "_id"
        case fileName = "file_name"
        case filePath = "file_path"
        case contentType = "content_type"
        case namespace, operation, size, upload, cdn, success, tags
        case createdOn = "created_on"
        case modifiedOn = "modified_on"
        case etag, sha256, metadata
        case isPublic = "public"
        case kind, inode, mode, uid, gid, nlink
        case atimeNs = "atime_ns"
        case mtimeNs = "mtime_ns"
        case ctimeNs = "ctime_ns"
        case target, rdev
    }

    /// As the synthesized decoder, then `RecordNumbers.check`: a record with a size or inode no
    /// server can mean is not a record (a decoding error, which a client answers as a protocol
    /// violation), so that no user of one meets them.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(String.self, forKey: .id)
        fileName = try c.decode(String.self, forKey: .fileName)
        filePath = try c.decode(String.self, forKey: .filePath)
        contentType = try c.decode(String.self, forKey: .contentType)
        namespace = try c.decode(String.self, forKey: .namespace)
        operation = try c.decode(String.self, forKey: .operation)
        size = try c.decode(Int64.self, forKey: .size)
        upload = try c.decodeIfPresent(UploadLink.self, forKey: .upload)
        cdn = try c.decode(CDNLink.self, forKey: .cdn)
        success = try c.decode(Bool.self, forKey: .success)
        tags = try c.decode([String].self, forKey: .tags)
        createdOn = try c.decode(String.self, forKey: .createdOn)
        modifiedOn = try c.decode(String.self, forKey: .modifiedOn)
        etag = try c.decode(String.self, forKey: .etag)
        sha256 = try c.decodeIfPresent(String.self, forKey: .sha256)
        metadata = try c.decode([String: String].self, forKey: .metadata)
        isPublic = try c.decode(Bool.self, forKey: .isPublic)
        kind = try c.decode(NodeKind.self, forKey: .kind)
        inode = try c.decode(UInt64.self, forKey: .inode)
        mode = try c.decodeIfPresent(UInt32.self, forKey: .mode)
        uid = try c.decodeIfPresent(UInt32.self, forKey: .uid)
        gid = try c.decodeIfPresent(UInt32.self, forKey: .gid)
        nlink = try c.decode(UInt32.self, forKey: .nlink)
        atimeNs = try c.decode(Int64.self, forKey: .atimeNs)
        mtimeNs = try c.decode(Int64.self, forKey: .mtimeNs)
        ctimeNs = try c.decode(Int64.self, forKey: .ctimeNs)
        target = try c.decodeIfPresent(String.self, forKey: .target)
        rdev = try c.decodeIfPresent(UInt64.self, forKey: .rdev)
        try RecordNumbers.check(size: size, inode: inode, in: c, sizeKey: .size, inodeKey: .inode)
    }
}

/// The numbers of a server's record of an entry (`FileRecord`, `PosixRecord`) that no server can
/// mean, refused as the record is read — by JSONDecoder and by `WireJSONReading` alike — so that
/// no user of a record meets them: a mount turns a record's numbers into `stat`'s, sums them
/// with offsets and block sizes, and a number that traps there (`UInt64(-1)`) took the whole
/// mount down, with every file written and not yet stored. A server that sends one gets an error
/// answer instead (the operation fails with EIO; an upload whose completion it was is tried
/// again, its file kept).
///
/// The other numbers of a record are taken as they are: every `Int64` of nanoseconds is a time
/// (1677 to 2262) and every `UInt32` a link count, mode, owner or group, and their users must
/// take each (a link count of 0 is shown as 1; a mode's file-type bits are dropped).
public enum RecordNumbers {
    /// The largest size a record may give: 4 EiB, more than any store holds. Refusing larger ones
    /// leaves room below `Int64.max` for the sums a client makes with a size (an offset and a
    /// length, the end of the block that holds the last byte).
    public static let largestSize: Int64 = 1 << 62

    /// Why a record with these numbers cannot be one; nil when it can.
    public static func problem(size: Int64, inode: UInt64) -> String? {
        if size < 0 { return "a negative size (\(size))" }
        if size > largestSize { return "a size past 4 EiB (\(size))" }
        // Servers number inodes from 16; FUSE reserves 0 (a lookup answered with it is a miss).
        if inode == 0 { return "inode 0 (no entry has it)" }
        return nil
    }

    /// Throws the decoding error that names the number `problem` finds.
    static func check<K: CodingKey>(size: Int64, inode: UInt64, in container: KeyedDecodingContainer<K>, sizeKey: K, inodeKey: K) throws {
        guard let problem = problem(size: size, inode: inode) else { return }
        throw DecodingError.dataCorruptedError(
            forKey: size < 0 || size > largestSize ? sizeKey : inodeKey, in: container, debugDescription: "not a record of an entry: \(problem)")
    }
}

/// A page of a listing.
public struct PageInfo: Codable, Sendable, Equatable {
    /// `"number"` for page-numbered listings, `"cursor"` when paginated by `next_id`.
    public var type: String
    public var current: Int
    public var size: Int
    public var itemTotal: Int
    public var hasNext: Bool
    /// Pass as `next_id` to get the following page.
    public var nextId: String?
    /// With `splits=K` (a StowFS extension, one-level listings only): where the pages after this
    /// one begin, as if each were read in turn with the same `limit` — at most K of them. The
    /// first is this page's own end, unless names changed while the two were found. A client may
    /// read those pages at once, each from its split to the next one's name.
    public var splits: [PageSplit]?

    public init(type: String, current: Int, size: Int, itemTotal: Int, hasNext: Bool, nextId: String?, splits: [PageSplit]? = nil) {
        self.type = type
        self.current = current
        self.size = size
        self.itemTotal = itemTotal
        self.hasNext = hasNext
        self.nextId = nextId
        self.splits = splits
    }

    enum CodingKeys: String, CodingKey {
        case type, current, size, splits
        case itemTotal = "item_total"
        case hasNext = "has_next"
        case nextId = "next_id"
    }
}

/// Where a later page of a listing begins: after the entry `name`, asked for with `next_id`.
public struct PageSplit: Codable, Sendable, Equatable {
    /// The last name before the page (the one a page of the listing ended with).
    public var name: String
    public var nextId: String

    public init(name: String, nextId: String) {
        self.name = name
        self.nextId = nextId
    }

    enum CodingKeys: String, CodingKey {
        case name
        case nextId = "next_id"
    }
}

/// `GET /v1.0/namespaces/{ns}/browse` answer. With `delimiter=/`, `folders` holds the sub-folders.
public struct BrowseResponse: Codable, Sendable, Equatable {
    public var items: [FileRecord]
    public var folders: [FileRecord]
    public var page: PageInfo

    public init(items: [FileRecord], folders: [FileRecord], page: PageInfo) {
        self.items = items
        self.folders = folders
        self.page = page
    }
}

/// An entry as `GET browse?fields=posix` lists it (a StowFS extension): what a filesystem shows,
/// without what a client can make itself (the CDN links, the path, the ISO dates). A third of the
/// seed record's bytes. `FileRecord(_:namespace:path:origin:)` makes the seed record again, equal
/// to the one the plain listing gives.
public struct PosixRecord: Codable, Sendable, Equatable {
    public var fileName: String
    public var contentType: String
    /// Bytes; from 0 to `RecordNumbers.largestSize` in a record read from JSON.
    public var size: Int64
    public var tags: [String]
    public var etag: String
    public var sha256: String?
    public var metadata: [String: String]
    public var isPublic: Bool
    public var kind: NodeKind
    public var inode: UInt64
    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    public var nlink: UInt32
    public var atimeNs: Int64
    public var mtimeNs: Int64
    public var ctimeNs: Int64
    /// When the inode was made: the seed record's `created_on`.
    public var btimeNs: Int64
    public var target: String?
    public var rdev: UInt64?

    public init(
        fileName: String, contentType: String, size: Int64, tags: [String], etag: String, sha256: String?, metadata: [String: String],
        isPublic: Bool, kind: NodeKind, inode: UInt64, mode: UInt32?, uid: UInt32?, gid: UInt32?, nlink: UInt32, atimeNs: Int64,
        mtimeNs: Int64, ctimeNs: Int64, btimeNs: Int64, target: String?, rdev: UInt64?
    ) {
        self.fileName = fileName
        self.contentType = contentType
        self.size = size
        self.tags = tags
        self.etag = etag
        self.sha256 = sha256
        self.metadata = metadata
        self.isPublic = isPublic
        self.kind = kind
        self.inode = inode
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.nlink = nlink
        self.atimeNs = atimeNs
        self.mtimeNs = mtimeNs
        self.ctimeNs = ctimeNs
        self.btimeNs = btimeNs
        self.target = target
        self.rdev = rdev
    }

    enum CodingKeys: String, CodingKey {
        case fileName = "file_name"
        case contentType = "content_type"
        case size, tags, etag, sha256, metadata
        case isPublic = "public"
        case kind, inode, mode, uid, gid, nlink
        case atimeNs = "atime_ns"
        case mtimeNs = "mtime_ns"
        case ctimeNs = "ctime_ns"
        case btimeNs = "btime_ns"
        case target, rdev
    }

    /// As the synthesized decoder, then `RecordNumbers.check` (see `FileRecord.init(from:)`).
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        fileName = try c.decode(String.self, forKey: .fileName)
        contentType = try c.decode(String.self, forKey: .contentType)
        size = try c.decode(Int64.self, forKey: .size)
        tags = try c.decode([String].self, forKey: .tags)
        etag = try c.decode(String.self, forKey: .etag)
        sha256 = try c.decodeIfPresent(String.self, forKey: .sha256)
        metadata = try c.decode([String: String].self, forKey: .metadata)
        isPublic = try c.decode(Bool.self, forKey: .isPublic)
        kind = try c.decode(NodeKind.self, forKey: .kind)
        inode = try c.decode(UInt64.self, forKey: .inode)
        mode = try c.decodeIfPresent(UInt32.self, forKey: .mode)
        uid = try c.decodeIfPresent(UInt32.self, forKey: .uid)
        gid = try c.decodeIfPresent(UInt32.self, forKey: .gid)
        nlink = try c.decode(UInt32.self, forKey: .nlink)
        atimeNs = try c.decode(Int64.self, forKey: .atimeNs)
        mtimeNs = try c.decode(Int64.self, forKey: .mtimeNs)
        ctimeNs = try c.decode(Int64.self, forKey: .ctimeNs)
        btimeNs = try c.decode(Int64.self, forKey: .btimeNs)
        target = try c.decodeIfPresent(String.self, forKey: .target)
        rdev = try c.decodeIfPresent(UInt64.self, forKey: .rdev)
        try RecordNumbers.check(size: size, inode: inode, in: c, sizeKey: .size, inodeKey: .inode)
    }
}

extension FileRecord {
    /// A record's `_id`: its inode number in hex, 24 digits.
    public static func id(inode: UInt64) -> String {
        var digits = [UInt8](repeating: UInt8(ascii: "0"), count: 24)
        var rest = inode
        var i = 23
        while rest > 0 {
            let d = UInt8(rest & 0xF)
            digits[i] = d < 10 ? UInt8(ascii: "0") + d : UInt8(ascii: "a") + d - 10
            rest >>= 4
            i -= 1
        }
        return String(decoding: digits, as: UTF8.self)
    }

    /// The seed record of an entry at `path` of `ns`, from what a posix listing gives; `origin`
    /// (`http://host:port`) begins its CDN link.
    public init(_ p: PosixRecord, namespace ns: Namespace, path: StoragePath, origin: String) {
        let relative = Routes.cdn(ns, path)
        self.init(
            id: Self.id(inode: p.inode), fileName: p.fileName, filePath: path.string, contentType: p.contentType, namespace: ns.name,
            size: p.size, cdn: CDNLink(url: origin + relative, absoluteUrl: origin + relative, relativeUrl: relative), tags: p.tags,
            createdOn: Timestamp.iso8601(nanoseconds: p.btimeNs), modifiedOn: Timestamp.iso8601(nanoseconds: p.mtimeNs), etag: p.etag,
            sha256: p.sha256, metadata: p.metadata, isPublic: p.isPublic, kind: p.kind, inode: p.inode, mode: p.mode, uid: p.uid, gid: p.gid,
            nlink: p.nlink, atimeNs: p.atimeNs, mtimeNs: p.mtimeNs, ctimeNs: p.ctimeNs, target: p.target, rdev: p.rdev)
    }
}

/// What a filesystem takes from a server's record of an entry: the seed's `FileRecord` and the
/// posix listing's `PosixRecord` both have it, so a mount reads either without making one from
/// the other.
public protocol EntryRecord: Sendable {
    var fileName: String { get }
    var contentType: String { get }
    var size: Int64 { get }
    var tags: [String] { get }
    var etag: String { get }
    var metadata: [String: String] { get }
    var isPublic: Bool { get }
    var kind: NodeKind { get }
    var inode: UInt64 { get }
    var mode: UInt32? { get }
    var uid: UInt32? { get }
    var gid: UInt32? { get }
    var nlink: UInt32 { get }
    var atimeNs: Int64 { get }
    var mtimeNs: Int64 { get }
    var ctimeNs: Int64 { get }
    var target: String? { get }
    var rdev: UInt64? { get }
}

extension FileRecord: EntryRecord {}
extension PosixRecord: EntryRecord {}

extension PosixRecord {
    /// The posix record of a seed record (a listing from a store that gives only those). Its
    /// `created_on` has milliseconds, so `btimeNs` has no finer part; ctime when it cannot be read,
    /// or names a time nanoseconds since 1970 do not hold in an `Int64` (before 1677 or after 2262:
    /// the date is the server's, and `9999-12-31` trapped in the multiplication).
    public init(seed r: FileRecord) {
        let created = try? Date(r.createdOn, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
        self.init(
            fileName: r.fileName, contentType: r.contentType, size: r.size, tags: r.tags, etag: r.etag, sha256: r.sha256, metadata: r.metadata,
            isPublic: r.isPublic, kind: r.kind, inode: r.inode, mode: r.mode, uid: r.uid, gid: r.gid, nlink: r.nlink, atimeNs: r.atimeNs,
            mtimeNs: r.mtimeNs, ctimeNs: r.ctimeNs, btimeNs: created.flatMap(Self.nanoseconds(of:)) ?? r.ctimeNs, target: r.target, rdev: r.rdev)
    }

    /// Nanoseconds since 1970 of a date read to the millisecond; nil past what an `Int64` holds.
    static func nanoseconds(of date: Date) -> Int64? {
        guard let millis = Int64(exactly: (date.timeIntervalSince1970 * 1000).rounded()) else { return nil }
        let (ns, overflow) = millis.multipliedReportingOverflow(by: 1_000_000)
        return overflow ? nil : ns
    }
}

/// `GET /v1.0/namespaces/{ns}/browse?fields=posix` answer: `BrowseResponse` with posix records.
public struct PosixBrowseResponse: Codable, Sendable, Equatable {
    public var items: [PosixRecord]
    public var folders: [PosixRecord]
    public var page: PageInfo

    public init(items: [PosixRecord], folders: [PosixRecord], page: PageInfo) {
        self.items = items
        self.folders = folders
        self.page = page
    }
}

/// `POST /v1.0/sign-urls` body.
public struct SignURLsRequest: Codable, Sendable, Equatable {
    /// Seconds the signed URLs stay valid.
    public var expiry: Int
    /// CDN URLs (absolute or relative) of the files to sign.
    public var urls: [String]

    public init(expiry: Int, urls: [String]) {
        self.expiry = expiry
        self.urls = urls
    }
}

public struct SignedURL: Codable, Sendable, Equatable {
    public var url: String
    public var signedUrl: String
    public var expiry: Int
    public var expiresAt: Int64?

    public init(url: String, signedUrl: String, expiry: Int, expiresAt: Int64?) {
        self.url = url
        self.signedUrl = signedUrl
        self.expiry = expiry
        self.expiresAt = expiresAt
    }

    enum CodingKeys: String, CodingKey {
        case url, expiry
        case signedUrl = "signed_url"
        case expiresAt = "expires_at"
    }
}

public struct SignURLsResponse: Codable, Sendable, Equatable {
    public var urls: [SignedURL]
    public init(urls: [SignedURL]) { self.urls = urls }
}

/// A namespace as listed by `GET /v1.0/namespaces`.
public struct NamespaceRecord: Codable, Sendable, Equatable {
    public var name: String
    public var createdOn: String
    public var rootInode: UInt64

    public init(name: String, createdOn: String, rootInode: UInt64) {
        self.name = name
        self.createdOn = createdOn
        self.rootInode = rootInode
    }

    enum CodingKeys: String, CodingKey {
        case name
        case createdOn = "created_on"
        case rootInode = "root_inode"
    }
}

public struct NamespaceList: Codable, Sendable, Equatable {
    public var items: [NamespaceRecord]
    public init(items: [NamespaceRecord]) { self.items = items }
}

/// `PATCH /v1.0/namespaces/{ns}/files/{path}` body: every field is optional; absent means unchanged.
public struct FilePatch: Codable, Sendable, Equatable {
    public var tags: [String]?
    /// Replaces the whole custom metadata map.
    public var metadata: [String: String]?
    /// Sets these keys, leaving the others.
    public var metadataSet: [String: String]?
    /// Removes these keys.
    public var metadataRemove: [String]?
    public var contentType: String?
    public var isPublic: Bool?
    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    public var atimeNs: Int64?
    public var mtimeNs: Int64?
    /// When the change was made, by the client's clock (the server keeps it as the ctime, never
    /// later than its own clock; without it, the server's now). An upload landing later that
    /// creates an entry in this folder compares its file's ctime with it: see `UploadParams.ctimeNs`.
    public var ctimeNs: Int64?
    /// Truncates or extends (with zeros) the content to this size.
    public var size: Int64?

    public init(
        tags: [String]? = nil, metadata: [String: String]? = nil, metadataSet: [String: String]? = nil,
        metadataRemove: [String]? = nil, contentType: String? = nil, isPublic: Bool? = nil, mode: UInt32? = nil,
        uid: UInt32? = nil, gid: UInt32? = nil, atimeNs: Int64? = nil, mtimeNs: Int64? = nil, ctimeNs: Int64? = nil, size: Int64? = nil
    ) {
        self.tags = tags
        self.metadata = metadata
        self.metadataSet = metadataSet
        self.metadataRemove = metadataRemove
        self.contentType = contentType
        self.isPublic = isPublic
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.atimeNs = atimeNs
        self.mtimeNs = mtimeNs
        self.ctimeNs = ctimeNs
        self.size = size
    }

    public var isEmpty: Bool { self == FilePatch() }

    enum CodingKeys: String, CodingKey {
        case tags, metadata, mode, uid, gid, size
        case metadataSet = "metadata_set"
        case metadataRemove = "metadata_remove"
        case contentType = "content_type"
        case isPublic = "public"
        case atimeNs = "atime_ns"
        case mtimeNs = "mtime_ns"
        case ctimeNs = "ctime_ns"
    }
}

/// `POST /v1.0/namespaces/{ns}/rename` body.
public struct RenameRequest: Codable, Sendable, Equatable {
    public var from: String
    public var to: String
    /// Replace an existing file (or empty folder) at `to`; without it an existing target is a 409.
    public var replace: Bool?
    /// Swap `from` and `to` (both must exist), as `renameat2(RENAME_EXCHANGE)`.
    public var exchange: Bool?
    /// A StowFS extension, with `exchange`: swap only if `from` is the server inode `ifFromInode`
    /// and `to` is `ifToInode` (else 412). An exchange is its own undoing, so a client that sends
    /// one again (its answer lost) must not swap back what the first did.
    public var ifFromInode: UInt64?
    public var ifToInode: UInt64?

    enum CodingKeys: String, CodingKey {
        case from, to, replace, exchange
        case ifFromInode = "if_from_inode"
        case ifToInode = "if_to_inode"
    }

    public init(from: String, to: String, replace: Bool? = nil, exchange: Bool? = nil, ifFromInode: UInt64? = nil, ifToInode: UInt64? = nil) {
        self.from = from
        self.to = to
        self.replace = replace
        self.exchange = exchange
        self.ifFromInode = ifFromInode
        self.ifToInode = ifToInode
    }
}

/// `PUT /v1.0/namespaces/{ns}/folders/{path}` body (optional).
public struct FolderRequest: Codable, Sendable, Equatable {
    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    /// Create missing parents too (`mkdir -p`); default true.
    public var parents: Bool?
    /// Succeed when the folder exists already; default true.
    public var existOk: Bool?
    /// A StowFS extension: a lock session of the caller's. The folder this request makes takes its
    /// `names` lease for that session in the same request, and the answer says so with
    /// `Stow-Names-Lease: granted` (a folder that was there already is not leased). Saves a mount
    /// the lock request after each `mkdir`; a server without it ignores the field.
    public var namesLease: String?

    public init(mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil, parents: Bool? = nil, existOk: Bool? = nil, namesLease: String? = nil) {
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.parents = parents
        self.existOk = existOk
        self.namesLease = namesLease
    }

    /// The answer's header that says the lease asked for with `namesLease` is held.
    public static let namesLeaseHeader = "Stow-Names-Lease"

    enum CodingKeys: String, CodingKey {
        case mode, uid, gid, parents
        case existOk = "exist_ok"
        case namesLease = "names_lease"
    }
}

/// `PUT /v1.0/namespaces/{ns}/nodes/{path}` body: a symlink or special file.
public struct NodeRequest: Codable, Sendable, Equatable {
    public var kind: NodeKind
    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    public var target: String?
    public var rdev: UInt64?

    public init(kind: NodeKind, mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil, target: String? = nil, rdev: UInt64? = nil) {
        self.kind = kind
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.target = target
        self.rdev = rdev
    }
}

/// `POST /v1.0/namespaces/{ns}/link` body: a hard link `to` → the inode of `from`.
public struct LinkRequest: Codable, Sendable, Equatable {
    public var from: String
    public var to: String
    public init(from: String, to: String) {
        self.from = from
        self.to = to
    }
}

/// `POST /v1.0/uploads/copy` body.
public struct CopyRequest: Codable, Sendable, Equatable {
    public struct Destination: Codable, Sendable, Equatable {
        public var namespace: String
        public var rewrite: String?
        public var basepath: String?
        public init(namespace: String, rewrite: String? = nil, basepath: String? = nil) {
            self.namespace = namespace
            self.rewrite = rewrite
            self.basepath = basepath
        }
    }

    public struct Configuration: Codable, Sendable, Equatable {
        public var concurrency: Int?
        public init(concurrency: Int? = nil) { self.concurrency = concurrency }
    }

    public var urls: [String]
    public var destination: Destination
    public var configuration: Configuration?

    public init(urls: [String], destination: Destination, configuration: Configuration? = nil) {
        self.urls = urls
        self.destination = destination
        self.configuration = configuration
    }
}

/// The state of a copy task.
public struct CopyTask: Codable, Sendable, Equatable {
    public struct Failure: Codable, Sendable, Equatable {
        public var url: String
        public var message: String
        public init(url: String, message: String) {
            self.url = url
            self.message = message
        }
    }

    public var id: String
    public var name: String
    /// Percent done, 0–100.
    public var progress: Int
    public var attemptsMade: Int
    public var state: String
    public var files: [FileRecord]
    public var failures: [Failure]
    public var timestamp: Int64

    public init(id: String, progress: Int, attemptsMade: Int, state: String, files: [FileRecord], failures: [Failure], timestamp: Int64) {
        self.id = id
        self.name = "copy"
        self.progress = progress
        self.attemptsMade = attemptsMade
        self.state = state
        self.files = files
        self.failures = failures
        self.timestamp = timestamp
    }

    enum CodingKeys: String, CodingKey {
        case id, name, progress, state, files, failures, timestamp
        case attemptsMade = "attempts_made"
    }
}

public struct CopyResponse: Codable, Sendable, Equatable {
    public var trackingUrl: String
    public var task: CopyTask

    public init(trackingUrl: String, task: CopyTask) {
        self.trackingUrl = trackingUrl
        self.task = task
    }

    enum CodingKeys: String, CodingKey {
        case task
        case trackingUrl = "tracking_url"
    }
}

/// The answer of a multipart/form-data upload.
public struct FormUploadResponse: Codable, Sendable, Equatable {
    public var files: [FileRecord]
    public init(files: [FileRecord]) { self.files = files }
}
