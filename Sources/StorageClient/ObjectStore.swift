public import NIOCore
public import StorageProtocol

/// The storage service as the filesystem sees it: namespaces, a tree of files and folders,
/// uploads in three steps, and ranged reads through signed URLs.
///
/// Three implementations ship as library code: `HTTPObjectStore` (a real `stowd` over HTTP),
/// `InMemoryObjectStore` (for engine tests and benchmarks without a server) and
/// `FaultInjectingObjectStore` (wraps another and drops, fails or delays calls).
///
/// Every method throws `StorageError`. Transient failures are retried inside the HTTP
/// implementation (3 attempts with backoff) before `.unavailable` is thrown.
public protocol ObjectStore: Sendable {
    // MARK: Namespaces
    func namespaces() async throws -> [NamespaceRecord]
    func createNamespace(_ ns: Namespace) async throws -> NamespaceRecord
    func deleteNamespace(_ ns: Namespace, recursive: Bool) async throws

    // MARK: Metadata
    /// The record of a file, folder or other node; `.notFound` when missing.
    func record(_ ns: Namespace, _ path: StoragePath) async throws -> FileRecord
    /// One level of a folder, in name order, after the name `after`.
    func list(_ ns: Namespace, folder: StoragePath, after: String?, limit: Int) async throws -> ListPage
    /// Every entry of a folder in name order, up to about `cap` of them (all when nil). A store
    /// may read several pages at once; the default reads them one after another.
    func listFolder(_ ns: Namespace, folder: StoragePath, cap: Int?) async throws -> FolderListing
    /// `listFolder` as a filesystem needs it: posix records, in name order (by bytes). The default
    /// makes them from `listFolder`'s records.
    func listFolderPosix(_ ns: Namespace, folder: StoragePath, cap: Int?) async throws -> PosixListing
    func update(_ ns: Namespace, _ path: StoragePath, _ patch: FilePatch, ifMatch: String?) async throws -> FileRecord
    func delete(_ ns: Namespace, _ path: StoragePath, ifMatch: String?) async throws
    /// Several deletes (`delete`, each with its own `ifMatch`; `inode` where the store can check
    /// it): one result per path, in order, each done or refused on its own. The default sends them
    /// a few at a time, by path and ETag only.
    func deleteFiles(_ ns: Namespace, _ files: [FileDeletion]) async -> [Result<Void, StorageError>]
    func makeFolder(_ ns: Namespace, _ path: StoragePath, _ request: FolderRequest) async throws -> FileRecord
    /// Makes a folder and, where the store can in the same request, takes its `names` lease for
    /// lock session `session` (`FolderRequest.namesLease`): the record, and whether the lease is
    /// held. The default makes the folder only (`leased` false: the caller asks for the lease).
    func makeFolder(_ ns: Namespace, _ path: StoragePath, _ request: FolderRequest, namesLeaseFor session: String) async throws -> (
        record: FileRecord, leased: Bool
    )
    func removeFolder(_ ns: Namespace, _ path: StoragePath) async throws
    func rename(_ ns: Namespace, from: StoragePath, to: StoragePath, replace: Bool, exchange: Bool) async throws -> FileRecord
    func makeNode(_ ns: Namespace, _ path: StoragePath, _ request: NodeRequest) async throws -> FileRecord
    func link(_ ns: Namespace, from: StoragePath, to: StoragePath) async throws -> FileRecord

    // MARK: Uploads (start → send → complete)
    func startUpload(_ ns: Namespace, _ request: StartUploadRequest) async throws -> StartUploadResponse
    /// How many bytes of the upload the server holds (tus HEAD).
    func uploadedBytes(_ session: StartUploadResponse) async throws -> Int64
    /// Sends `source[offset..<end]`: a PUT of the whole when `offset` is 0 and `end` is the size, a
    /// tus PATCH otherwise. Returns the server's new offset. No retries here: see `upload(…)`.
    func send(_ session: StartUploadResponse, from source: UploadSource, offset: Int64, end: Int64, progress: ProgressHandler?) async throws -> Int64
    func completeUpload(_ session: StartUploadResponse) async throws -> FileRecord
    /// The session with a fresh storage link (its old one expired while nothing was sent); the
    /// bytes the server has stay. `.notFound` when the server has collected the session.
    func renewUpload(_ session: StartUploadResponse) async throws -> StartUploadResponse
    /// start, send and complete in one request, for a small file (read whole into memory). Not
    /// retried here; like complete, it may have stored the file even when the answer is lost.
    func uploadDirect(_ ns: Namespace, _ request: StartUploadRequest, from source: UploadSource) async throws -> FileRecord
    /// Several small files in one request (`BatchUpload`): one result per file, in order, each
    /// stored or refused on its own. Throws when the request as a whole failed (then any of them
    /// may have been stored, as with `uploadDirect`). Not retried here.
    func uploadBatch(_ ns: Namespace, _ files: [(StartUploadRequest, UploadSource)]) async throws -> [Result<FileRecord, StorageError>]
    func abandonUpload(_ session: StartUploadResponse) async throws
    /// Presigned URLs of these parts of a direct upload (`upload.direct`: a server whose files are
    /// in an object store), and the parts the store holds already.
    func uploadParts(_ session: StartUploadResponse, numbers: [Int]) async throws -> UploadPartsResponse
    /// PUTs `source[offset..<end]` to a presigned URL of the object store: a direct upload's whole
    /// file, or one of its parts. No retries here.
    func putDirect(url: String, headers: [String: String], from source: UploadSource, offset: Int64, end: Int64, progress: ProgressHandler?) async throws
    /// The path of the blob file of version `etag` behind a signed URL, for a client on the
    /// server's machine to read itself (`HTTPObjectStore.localBlobPath`); nil where the store
    /// offers none (the default).
    func localBlobPath(url: String, etag: String) async throws -> String?

    // MARK: Reads
    /// Signed URLs for reading these paths, valid `expiry` seconds.
    func signedURLs(_ ns: Namespace, _ paths: [StoragePath], expiry: Int) async throws -> [SignedURL]
    /// Bytes of a file by signed URL. `ifMatch`: fail with `.preconditionFailed` if the file's ETag changed.
    func read(url: String, range: Range<Int64>?, ifMatch: String?) async throws -> ReadResult
    /// Bytes `range` of a file by signed URL, handed to `consume` in order as they arrive (no
    /// buffering of the whole range). Returns how many bytes were handed over: fewer than asked
    /// when the file ends sooner. A failure after some bytes were handed over is thrown as is (no
    /// retry): the caller keeps what it got and asks again for the rest.
    func read(url: String, range: Range<Int64>, ifMatch: String?, consume: (ByteBuffer) throws -> Void) async throws -> Int64

    // MARK: Locks (see `LockRequest`)
    /// Starts or renews the lock session `id`.
    func renewLockSession(_ ns: Namespace, id: String) async throws -> LockSessionResponse
    /// Ends the session: its locks go.
    func endLockSession(_ ns: Namespace, id: String) async throws
    /// Takes, changes or releases a lock, waiting up to `waitMs` for one in the way.
    func lock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse
    /// Whether the lock could be taken (F_GETLK).
    func testLock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse

    // MARK: The change feed
    /// The namespace's changes after `since` (nil: none, and the head to start from), waiting up
    /// to `wait` for some when there are none yet (a long poll).
    func changes(_ ns: Namespace, since: String?, wait: Duration) async throws -> ChangesResponse

    // MARK: Search
    /// One page of the files `filter` finds (`cursor`: the last page's `nextCursor`).
    func search(_ ns: Namespace, _ filter: SearchFilter, cursor: String?, limit: Int) async throws -> SearchResponse
}

extension ObjectStore {
    /// Stores that cannot take a lease with a folder: the folder only.
    public func makeFolder(_ ns: Namespace, _ path: StoragePath, _ request: FolderRequest, namesLeaseFor session: String) async throws -> (
        record: FileRecord, leased: Bool
    ) {
        (try await makeFolder(ns, path, request), false)
    }

    /// Stores that keep no locks: `.notFound` (a mount then leaves locks to the kernel, local).
    public func renewLockSession(_ ns: Namespace, id: String) async throws -> LockSessionResponse {
        throw StorageError(.notFound, "this store keeps no locks")
    }
    public func endLockSession(_ ns: Namespace, id: String) async throws { throw StorageError(.notFound, "this store keeps no locks") }
    public func lock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse { throw StorageError(.notFound, "this store keeps no locks") }
    public func testLock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse {
        throw StorageError(.notFound, "this store keeps no locks")
    }

    /// Stores that cannot search.
    public func search(_ ns: Namespace, _ filter: SearchFilter, cursor: String?, limit: Int) async throws -> SearchResponse {
        throw StorageError(.notFound, "this store cannot search")
    }

    /// Stores without a change feed.
    public func changes(_ ns: Namespace, since: String?, wait: Duration) async throws -> ChangesResponse {
        throw StorageError(.notFound, "this store has no change feed")
    }

    /// Stores that never offer direct uploads.
    public func uploadParts(_ session: StartUploadResponse, numbers: [Int]) async throws -> UploadPartsResponse {
        throw StorageError(.notFound, "this store takes no direct uploads")
    }

    public func putDirect(url: String, headers: [String: String], from source: UploadSource, offset: Int64, end: Int64, progress: ProgressHandler?) async throws {
        throw StorageError(.notFound, "this store takes no direct uploads")
    }

    /// Stores without a one-request upload take the three steps.
    public func uploadDirect(_ ns: Namespace, _ request: StartUploadRequest, from source: UploadSource) async throws -> FileRecord {
        try await uploadInThreeSteps(ns, request, from: source)
    }

    /// start, send and complete, for one small file.
    public func uploadInThreeSteps(_ ns: Namespace, _ request: StartUploadRequest, from source: UploadSource) async throws -> FileRecord {
        let session = try await startUpload(ns, request)
        return try await resumeUpload(
            session, from: source, knownOffset: 0, options: UploadOptions(chunkSize: max(1, request.size), retry: RetryPolicy(attempts: 3, baseDelay: .milliseconds(300))))
    }

    /// Stores without a request for several deletes send them a few at a time.
    public func deleteFiles(_ ns: Namespace, _ files: [FileDeletion]) async -> [Result<Void, StorageError>] {
        await deleteConcurrently(ns, files, width: 8)
    }

    /// `delete` for each path, up to `width` at once; each result on its own.
    public func deleteConcurrently(_ ns: Namespace, _ files: [FileDeletion], width: Int) async -> [Result<Void, StorageError>] {
        var results = [Result<Void, StorageError>](repeating: .success(()), count: files.count)
        await withTaskGroup(of: (Int, Result<Void, StorageError>).self) { group in
            var next = 0
            func add() {
                let i = next, file = files[i]
                next += 1
                group.addTask {
                    do {
                        try await self.delete(ns, file.path, ifMatch: file.ifMatch)
                        return (i, .success(()))
                    } catch let e as StorageError {
                        return (i, .failure(e))
                    } catch {
                        return (i, .failure(StorageError(.cancelled, "\(error)")))
                    }
                }
            }
            while next < min(width, files.count) { add() }
            for await (i, result) in group {
                results[i] = result
                if next < files.count { add() }
            }
        }
        return results
    }

    /// Stores without a batch request send the files one by one.
    public func uploadBatch(_ ns: Namespace, _ files: [(StartUploadRequest, UploadSource)]) async throws -> [Result<FileRecord, StorageError>] {
        try await uploadOneByOne(ns, files)
    }

    /// `uploadDirect` for each file, each result on its own.
    public func uploadOneByOne(_ ns: Namespace, _ files: [(StartUploadRequest, UploadSource)]) async throws -> [Result<FileRecord, StorageError>] {
        var results: [Result<FileRecord, StorageError>] = []
        for (request, source) in files {
            do {
                results.append(.success(try await uploadDirect(ns, request, from: source)))
            } catch let e as StorageError {
                results.append(.failure(e))
            } catch {
                results.append(.failure(StorageError(.localIO, "\(error)")))
            }
        }
        return results
    }

    /// Stores without a streaming transport read the range whole, then hand it over.
    public func read(url: String, range: Range<Int64>, ifMatch: String?, consume: (ByteBuffer) throws -> Void) async throws -> Int64 {
        let result = try await read(url: url, range: range, ifMatch: ifMatch)
        try consume(result.bytes)
        return Int64(result.bytes.readableBytes)
    }
}

/// One page of a folder listing: its files and sub-folders (records), and where to continue.
public struct ListPage: Sendable, Equatable {
    public var entries: [FileRecord]
    /// Pass as `after` to get the next page; nil on the last page.
    public var next: String?
    /// Where later pages begin, when asked for (`HTTPObjectStore.listFolder`): after the entry
    /// `name`, asked for with `next`. The first is normally this page's own end (`listFolder`
    /// starts from `next` whatever it says).
    public var splits: [(name: FileName, next: String)] = []

    public init(entries: [FileRecord], next: String?) {
        self.entries = entries
        self.next = next
    }

    public static func == (a: ListPage, b: ListPage) -> Bool {
        a.entries == b.entries && a.next == b.next && a.splits.map(\.name) == b.splits.map(\.name) && a.splits.map(\.next) == b.splits.map(\.next)
    }
}

/// A whole folder listing: its entries in name order, and whether that is all of them (false
/// when it stopped at its cap). `listFolder` gives seed records, `listFolderPosix` posix records
/// (no seed record made).
public struct Listing<Entry: Sendable & Equatable>: Sendable, Equatable {
    public var entries: [Entry]
    public var complete: Bool
    public init(entries: [Entry], complete: Bool) {
        self.entries = entries
        self.complete = complete
    }
}

public typealias FolderListing = Listing<FileRecord>
public typealias PosixListing = Listing<PosixRecord>

/// What an upload reads its bytes from.
public enum UploadSource: Sendable {
    case bytes(ByteBuffer)
    /// A local file; only the range an upload asks for is read.
    case file(path: String)
}

/// Bytes read from a file, with the ETag and total size the server reported.
public struct ReadResult: Sendable {
    public var bytes: ByteBuffer
    public var etag: String?
    public var totalSize: Int64?
    public init(bytes: ByteBuffer, etag: String?, totalSize: Int64?) {
        self.bytes = bytes
        self.etag = etag
        self.totalSize = totalSize
    }
}

/// Called as bytes go out: (bytes sent so far in this upload, total bytes).
public typealias ProgressHandler = @Sendable (Int64, Int64) -> Void

extension ObjectStore {
    public func listFolder(_ ns: Namespace, folder: StoragePath, cap: Int?) async throws -> FolderListing {
        try await pageByPage(ns, folder: folder, pageSize: 1000, cap: cap)
    }

    public func localBlobPath(url: String, etag: String) async throws -> String? { nil }

    public func listFolderPosix(_ ns: Namespace, folder: StoragePath, cap: Int?) async throws -> PosixListing {
        let listing = try await listFolder(ns, folder: folder, cap: cap)
        return PosixListing(entries: listing.entries.map(PosixRecord.init(seed:)), complete: listing.complete)
    }

    /// Every entry of a folder, following pages.
    public func listAll(_ ns: Namespace, folder: StoragePath, pageSize: Int = 1000) async throws -> [FileRecord] {
        try await pageByPage(ns, folder: folder, pageSize: pageSize, cap: nil).entries
    }

    /// A folder read one page after another, until its end or `cap` entries.
    func pageByPage(_ ns: Namespace, folder: StoragePath, pageSize: Int, cap: Int?) async throws -> FolderListing {
        var entries: [FileRecord] = []
        var after: String?
        var progress = ListingProgress(folder: folder.string)
        repeat {
            let page = try await list(ns, folder: folder, after: after, limit: pageSize)
            try progress.take(names: page.entries.lazy.map(\.fileName), cursor: after, next: page.next)
            entries += page.entries
            after = page.next
        } while after != nil && (cap == nil || entries.count < cap!)
        return FolderListing(entries: entries, complete: after == nil)
    }
}
