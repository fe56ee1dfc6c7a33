public import Foundation
public import StorageProtocol

/// The metadata of the server: namespaces, a hierarchy of entries and inodes, upload sessions and
/// blobs waiting to be deleted.
///
/// The model is an inode filesystem's (as in JuiceFS): *entries* map (parent inode, name) to an
/// inode; *inodes* carry kind, mode, owner, times, size, blob, tags and metadata. A hard link is a
/// second entry on one inode; a rename moves one entry, a whole folder included, in one
/// transaction. Every method is one transaction: it either changes everything it says or nothing.
///
/// Two implementations: `SQLiteMetadataStore` (the default, in the data directory) and
/// `PostgresMetadataStore` (`--database`, shared by several replicas). Routes and tests see only
/// this protocol; the server's test suite runs on both.
public protocol MetadataStore: StagingLedger, ChangeFeed, LockLedger {
    // MARK: life cycle
    /// Connects, checks and migrates the schema; called once before the server takes requests.
    func prepare() async throws
    /// Lets go of connections; the store is not used after.
    func close() async
    /// Calls `event` for what other servers sharing this store did, as they do it, until the task
    /// is cancelled (see `OtherServersEvent`). A store no other server can share (SQLite) returns
    /// at once: its server's own signals see everything.
    func followOtherServers(_ event: @escaping @Sendable (OtherServersEvent) -> Void) async
    /// A setting every server on this store shares (the URL-signing secret, a generated admin
    /// token): `proposed` if none was kept under `key` yet, else the one kept. nil when the store
    /// keeps none (SQLite: one server, whose data directory holds them).
    func sharedSetting(_ key: String, proposed: Data) async throws -> Data?

    // MARK: namespaces
    func createNamespace(_ ns: Namespace) async throws -> (NamespaceInfo, created: Bool)
    func deleteNamespace(_ ns: Namespace, recursive: Bool) async throws
    func namespaces() async throws -> [NamespaceInfo]
    func namespace(_ ns: Namespace) async throws -> NamespaceInfo?

    // MARK: reading the tree
    func node(_ ns: Namespace, _ path: StoragePath) async throws -> Node
    func list(_ ns: Namespace, _ query: ListQuery) async throws -> ListResult
    /// The entries that match `filter`, in (inode, folder, name) order, after `after`; at most `limit`.
    /// Answered from indexes where the filter has an indexed term (tags, metadata, content type).
    func search(_ ns: Namespace, _ filter: SearchFilter, after: SearchCursor?, limit: Int) async throws -> SearchPage

    // MARK: changing the tree
    func makeFolder(_ ns: Namespace, _ path: StoragePath, attributes: NewNodeAttributes, parents: Bool, existOk: Bool) async throws -> Node
    /// Makes the folder `path` that is not there yet (`makeFolder` with `existOk: false`) and, in
    /// the same transaction, gives lock session `session` the new folder's `names` lease
    /// (`LockSetCoding.namesLease`), starting or renewing the session for `leaseNs`: one commit
    /// where a folder, the renewal and the lock took three. `leased` is false when the new
    /// folder's lock set was not empty (take the lease the usual way then).
    func makeFolder(
        _ ns: Namespace, _ path: StoragePath, attributes: NewNodeAttributes, parents: Bool, namesLeaseFor session: String, leaseNs: Int64
    ) async throws -> (node: Node, leased: Bool)
    func removeFolder(_ ns: Namespace, _ path: StoragePath) async throws
    func removeFile(_ ns: Namespace, _ path: StoragePath, ifMatch: String?) async throws
    /// `removeFile` for each, in order, each done or refused on its own (`BatchDelete`; a file
    /// that is not the server inode `inode` is refused as by a wrong ETag); in one transaction
    /// where the store can. The default removes them one by one.
    func removeFiles(_ ns: Namespace, _ files: [FileDeletion]) async throws -> [Result<Void, any Error>]
    /// With `exchange` and `expecting`: only if `from` is the inode `expecting.from` and `to` is
    /// `expecting.to` (else `preconditionFailed`), decided in the exchange's own transaction.
    func rename(_ ns: Namespace, from: StoragePath, to: StoragePath, replace: Bool, exchange: Bool, expecting: ExchangeExpectation?) async throws -> Node
    func makeNode(_ ns: Namespace, _ path: StoragePath, kind: NodeKind, attributes: NewNodeAttributes, target: String?, rdev: UInt64?) async throws -> Node
    func link(_ ns: Namespace, from: StoragePath, to: StoragePath) async throws -> Node
    func patch(_ ns: Namespace, _ path: StoragePath, _ patch: FilePatch, ifMatch: String?) async throws -> Node
    /// Points a file at a new blob if it still points at `expectedBlob` (used by truncate); with
    /// `inline`, the new blob's bytes are stored in the same transaction.
    func swapBlob(_ ns: Namespace, _ path: StoragePath, expectedBlob: String, newBlob: BlobInfo, inline: Data?, mtimeNs: Int64?) async throws -> Node

    // MARK: uploads
    func createUpload(_ upload: UploadRecord) async throws
    func upload(id: String) async throws -> UploadRecord?
    func deleteUpload(id: String) async throws
    /// An open upload that made progress lives on: its expiry moves to `until` if that is later.
    func extendUpload(id: String, until: Int64) async throws
    /// Publishes a fully received upload: the file appears (or changes) atomically.
    func publish(_ upload: UploadRecord, blob: BlobInfo) async throws -> Node
    /// Stores small files' bytes and publishes them in one transaction, without upload sessions
    /// (each `upload` is a validated declaration; no row of it is kept). Each file is stored or
    /// refused on its own (a savepoint each); the results come in the same order.
    func publishInline(_ files: [InlineFile]) async throws -> [Result<Node, any Error>]
    /// The bytes of a blob stored inline, or nil when the blob is a file of the blob store.
    func inlineBlob(_ id: String) async throws -> Data?
    /// The node a completed upload produced, if it still exists.
    func node(inode: UInt64) async throws -> Node?

    // MARK: garbage collection
    func expiredUploads(before seconds: Int64, limit: Int) async throws -> [UploadRecord]
    /// Deletes an upload whose link expired before `seconds` if it still has; false when it was
    /// renewed meanwhile or is gone (another collector took it). The collector deletes its bytes after.
    func claimExpiredUpload(id: String, before seconds: Int64) async throws -> Bool
    /// Dead blobs due before `nanoseconds`, claimed for `lease` nanoseconds: no other collector gets
    /// them until then (they are due again if this one stops before `forgetDeadBlobs`).
    func claimDeadBlobs(before nanoseconds: Int64, lease: Int64, limit: Int) async throws -> [String]
    /// Drops these ids from the dead list, and the bytes of those stored inline that no inode names.
    func forgetDeadBlobs(_ ids: [String]) async throws
    /// Whether an inode points at this blob.
    func isBlobInUse(_ id: String) async throws -> Bool
    /// Which of these blob ids are still in use (by an inode, an upload, or the dead list).
    func referencedBlobs(among ids: [String]) async throws -> Set<String>
    func statistics() async throws -> StoreStatistics
    /// What is wrong with the tree, if anything (empty when sound): entries whose parent or inode
    /// is missing, inodes no entry names, link counts that do not match, folders with two names,
    /// folders that cannot be reached from their namespace's root (a cycle). At most `limit` lines.
    func integrityProblems(limit: Int) async throws -> [String]
}

extension MetadataStore {
    public func removeFiles(_ ns: Namespace, _ files: [FileDeletion]) async throws -> [Result<Void, any Error>] {
        var results: [Result<Void, any Error>] = []
        for f in files {
            do {
                var ifMatch = f.ifMatch
                if let inode = f.inode {
                    // The inode read, then the delete made conditional on the ETag read with it:
                    // a file put there in between has another (or is refused as changed).
                    let found = try await node(ns, f.path)
                    guard found.inode.ino == inode else { throw StoreError.preconditionFailed("`\(f.path)` is another file now (inode \(found.inode.ino))") }
                    if let wanted = ifMatch, !ETag.matches(wanted, found.inode.etag) {
                        throw StoreError.preconditionFailed("`\(f.path)` has changed (ETag \(found.inode.etag))")
                    }
                    ifMatch = found.inode.etag
                }
                try await removeFile(ns, f.path, ifMatch: ifMatch)
                results.append(.success(()))
            } catch {
                results.append(.failure(error))
            }
        }
        return results
    }

    public func prepare() async throws {}
    public func close() async {}
    public func followOtherServers(_ event: @escaping @Sendable (OtherServersEvent) -> Void) async {}
    public func sharedSetting(_ key: String, proposed: Data) async throws -> Data? { nil }
}

/// What another server sharing the store did: a hint to look again, never the thing itself.
public enum OtherServersEvent: Sendable, Equatable {
    /// Locks changed (a lock set changed, a lock session ended).
    case locks
    /// The hints may have stopped or some were missed (the stream broke, or has just begun):
    /// everything waiting should look again.
    case lost
}

/// A namespace and its root folder.
public struct NamespaceInfo: Sendable, Equatable {
    public var namespace: Namespace
    public var rootInode: UInt64
    public var createdNs: Int64
}

/// The attributes of a stored inode.
public struct Inode: Sendable, Equatable {
    public var ino: UInt64
    public var kind: NodeKind
    /// Permission bits; nil when the file was stored without any (clients apply their default).
    public var mode: UInt32?
    /// Owner; nil when the file was stored without one.
    public var uid: UInt32?
    public var gid: UInt32?
    public var nlink: UInt32
    public var size: Int64
    public var blob: String?
    public var sha256: String?
    public var contentType: String?
    public var tags: [String]
    public var metadata: [String: String]
    public var isPublic: Bool
    public var target: String?
    public var rdev: UInt64?
    public var atimeNs: Int64
    public var mtimeNs: Int64
    public var ctimeNs: Int64
    public var btimeNs: Int64

    /// The ETag of the content: one value per blob (folders: per inode and mtime).
    public var etag: String { blob ?? "d\(ino)-\(mtimeNs)" }
}

/// An entry (a path in a namespace) with its inode.
public struct Node: Sendable, Equatable {
    public var namespace: Namespace
    public var path: StoragePath
    public var inode: Inode
}

/// A blob that has been written, fsynced and published under its id.
public struct BlobInfo: Sendable, Equatable {
    public var id: String
    public var size: Int64
    /// nil for a file made by a large extending truncate (see `BlobStore.makeBlob`).
    public var sha256: String?
}

/// Attributes given when a folder or special node is created.
public struct NewNodeAttributes: Sendable, Equatable {
    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    public init(mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil) {
        self.mode = mode
        self.uid = uid
        self.gid = gid
    }
}

/// An upload session, from start to complete.
public struct UploadRecord: Sendable, Equatable {
    public enum State: String, Sendable { case open, completed }
    public var id: String
    public var namespace: Namespace
    public var path: StoragePath
    public var size: Int64
    public var contentType: String
    /// nil: keep the tags an overwritten file had.
    public var tags: [String]?
    public var params: UploadParams
    public var createdNs: Int64
    /// Seconds since the epoch when the storage link expires.
    public var expiresAt: Int64
    public var state: State
    public var resultInode: UInt64?
    /// tus uploads created at `/tus/files` complete themselves when the last byte arrives.
    public var autoComplete: Bool

    /// `size` of an upload whose length is deferred (set by complete).
    public static let deferredSize: Int64 = -1
    public var isDeferred: Bool { size == Self.deferredSize }
    /// The bytes the client sends: all of them, or those before a tail of zeros it declared (`zeros_from`).
    public var sentSize: Int64 { isDeferred ? size : min(size, max(0, params.zerosFrom ?? size)) }
    /// The most bytes the staging file may grow to.
    func limit(_ maxUploadSize: Int64) -> Int64 { isDeferred ? maxUploadSize : sentSize }
}

/// What to list.
public struct ListQuery: Sendable, Equatable {
    /// The folder to list (its path), and a prefix the names below it must start with.
    public var folder: StoragePath
    public var namePrefix: String
    /// One level (`delimiter=/`) or everything below, recursively.
    public var recursive: Bool
    /// Only names containing this (case-insensitive).
    public var search: String?
    /// Continue after this key (a name for one level, a path for a recursive listing).
    public var after: String?
    /// Page-numbered listing: skip this many.
    public var offset: Int
    public var limit: Int
    /// One level only: also find where up to this many pages after this one begin (`splits`).
    public var splits: Int

    public init(
        folder: StoragePath, namePrefix: String = "", recursive: Bool, search: String? = nil, after: String? = nil, offset: Int = 0, limit: Int,
        splits: Int = 0
    ) {
        self.folder = folder
        self.namePrefix = namePrefix
        self.recursive = recursive
        self.search = search
        self.after = after
        self.offset = offset
        self.limit = limit
        self.splits = splits
    }
}

public struct ListResult: Sendable, Equatable {
    public var nodes: [Node]
    public var total: Int
    /// The key to continue after, when there is more.
    public var next: String?
    /// With `ListQuery.splits`: the names that end this page and each of the following pages of
    /// `limit` entries, in order, while an entry follows them (the first is normally `next`:
    /// found apart from the page, it may differ when names change meanwhile).
    public var splits: [String] = []
}

public struct StoreStatistics: Sendable, Equatable {
    public var namespaces: Int
    public var files: Int
    public var bytes: Int64
    public var openUploads: Int
    public var deadBlobs: Int
}

/// Why a store operation was refused. Each case maps to one HTTP status and error code.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    case namespaceNotFound(Namespace)
    case notFound(StoragePath)
    case exists(StoragePath)
    case notEmpty(StoragePath)
    case notADirectory(StoragePath)
    case isADirectory(StoragePath)
    case invalidRename(String)
    case preconditionFailed(String)
    case conflict(String)
    case badRequest(String)
    /// The store cannot be reached now (a database that is away): try again.
    case unavailable(String)

    public var description: String {
        switch self {
        case .namespaceNotFound(let ns): "namespace `\(ns)` does not exist"
        case .notFound(let p): "`\(p)` does not exist"
        case .exists(let p): "`\(p)` exists already"
        case .notEmpty(let p): "folder `\(p)` is not empty"
        case .notADirectory(let p): "`\(p)` is not a folder"
        case .isADirectory(let p): "`\(p)` is a folder"
        case .invalidRename(let why): why
        case .preconditionFailed(let why): why
        case .conflict(let why): why
        case .badRequest(let why): why
        case .unavailable(let why): why
        }
    }
}

/// A small file to store inline: its validated declaration, its blob's id, size and SHA-256, its bytes.
public struct InlineFile: Sendable {
    public var upload: UploadRecord
    public var blob: BlobInfo
    public var bytes: Data
    public init(upload: UploadRecord, blob: BlobInfo, bytes: Data) {
        self.upload = upload
        self.blob = blob
        self.bytes = bytes
    }
}

/// The checks of `MetadataStore.integrityProblems`, in SQL both stores run: each query selects
/// one `problem` text per thing wrong. The recursive walk from the roots is bounded by depth, so a
/// cycle cannot make it run forever.
enum IntegrityChecks {
    static let queries: [String] = [
        """
        SELECT 'entry ' || e.parent || '/' || e.name || ': its folder (inode ' || e.parent || ') is missing' AS problem
        FROM entries e WHERE NOT EXISTS (SELECT 1 FROM inodes i WHERE i.ino = e.parent)
        """,
        """
        SELECT 'entry ' || e.parent || '/' || e.name || ': its inode ' || e.ino || ' is missing' AS problem
        FROM entries e WHERE NOT EXISTS (SELECT 1 FROM inodes i WHERE i.ino = e.ino)
        """,
        """
        SELECT 'inode ' || i.ino || ' (' || i.kind || ') has no name' AS problem FROM inodes i
        WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.ino = i.ino) AND NOT EXISTS (SELECT 1 FROM namespaces n WHERE n.root = i.ino)
        """,
        """
        SELECT 'inode ' || i.ino || ' has nlink ' || i.nlink || ' but ' || (SELECT count(*) FROM entries e WHERE e.ino = i.ino) || ' names' AS problem
        FROM inodes i WHERE i.kind <> 'dir' AND i.nlink <> (SELECT count(*) FROM entries e WHERE e.ino = i.ino)
        """,
        """
        SELECT 'folder ' || i.ino || ' has nlink ' || i.nlink || ' but ' || (SELECT count(*) FROM entries e JOIN inodes c ON c.ino = e.ino
            WHERE e.parent = i.ino AND c.kind = 'dir') || ' subfolders' AS problem
        FROM inodes i WHERE i.kind = 'dir'
            AND i.nlink <> 2 + (SELECT count(*) FROM entries e JOIN inodes c ON c.ino = e.ino WHERE e.parent = i.ino AND c.kind = 'dir')
        """,
        """
        SELECT 'folder ' || e.ino || ' has ' || count(*) || ' names' AS problem FROM entries e JOIN inodes i ON i.ino = e.ino
        WHERE i.kind = 'dir' GROUP BY e.ino HAVING count(*) > 1
        """,
        """
        WITH RECURSIVE reach(ino, depth) AS (
            SELECT root, 0 FROM namespaces
            UNION ALL
            SELECT e.ino, reach.depth + 1 FROM reach JOIN entries e ON e.parent = reach.ino WHERE reach.depth < 10000
        )
        SELECT 'inode ' || i.ino || ' (' || i.kind || ') cannot be reached from the root of ' || i.namespace || ' (a cycle?)' AS problem
        FROM inodes i WHERE NOT EXISTS (SELECT 1 FROM reach r WHERE r.ino = i.ino)
        """,
    ]
}

/// ETags as the conditional headers name them.
enum ETag {
    /// Compares an `If-Match` value (possibly quoted, possibly a list, possibly `*`) with an ETag.
    /// PostgreSQL's `stow_etag_matches` does the same inside the database.
    static func matches(_ header: String, _ etag: String) -> Bool {
        header.split(separator: ",").contains { raw in
            var v = raw.trimmingCharacters(in: .whitespaces)
            if v.hasPrefix("W/") { v.removeFirst(2) }
            if v == "*" { return true }
            return v.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) == etag
        }
    }
}

/// One part of an upload staged in an object store's multipart upload.
public struct StagedPart: Sendable, Equatable {
    public var number: Int
    public var size: Int64
    public var etag: String
    public init(number: Int, size: Int64, etag: String) {
        self.number = number
        self.size = size
        self.etag = etag
    }
}

/// Where an upload in progress stands in an object store (`S3BlobStore`): its multipart upload,
/// the full parts it holds (numbers 1…n, `partSize` bytes each), and the bytes after them (fewer
/// than a part) kept as an object of their own (`tailKey`). Kept in the metadata store, so that
/// any replica can continue the upload; `version` changes with every commit, so that two
/// requests writing the same upload at once cannot both commit.
public struct StagingState: Sendable, Equatable {
    public var uploadID: String
    public var s3UploadID: String
    public var partSize: Int64
    public var parts: [StagedPart]
    public var tailKey: String?
    public var tailSize: Int64
    public var version: Int64

    /// The bytes received so far.
    public var offset: Int64 { parts.reduce(0) { $0 + $1.size } + tailSize }
}

/// The record of uploads staged in an object store. Both metadata stores keep it (the SQLite one
/// for a single server with blobs in S3).
public protocol StagingLedger: Sendable {
    func stagingState(_ id: String) async throws -> StagingState?
    /// Records a new staging unless there is one already; returns the one kept (whose multipart
    /// upload may be another replica's: the caller aborts its own then).
    func beginStaging(_ id: String, s3UploadID: String, partSize: Int64) async throws -> StagingState
    /// Keeps parts 1…`keep`, adds `added` after them and sets the tail, if the staging is still at
    /// `expected` version; false (nothing changed) when another request committed meanwhile.
    func commitStaging(_ id: String, expected: Int64, keep: Int, added: [StagedPart], tailKey: String?, tailSize: Int64) async throws -> Bool
    func dropStaging(_ id: String) async throws
    /// Every upload staged, with its multipart upload and when it began (ns; for the sweeps).
    func stagings() async throws -> [(id: String, s3UploadID: String, begunNs: Int64)]
}

/// The server inodes an exchange expects at its two names (`RenameRequest.ifFromInode`).
public struct ExchangeExpectation: Sendable, Equatable {
    public var from: UInt64
    public var to: UInt64
    public init(from: UInt64, to: UInt64) {
        self.from = from
        self.to = to
    }
}

extension MetadataStore {
    public func rename(_ ns: Namespace, from: StoragePath, to: StoragePath, replace: Bool, exchange: Bool) async throws -> Node {
        try await rename(ns, from: from, to: to, replace: replace, exchange: exchange, expecting: nil)
    }
}
