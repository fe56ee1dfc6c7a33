import AsyncHTTPClient
import Foundation
import Logging
public import NIOCore
import NIOFileSystem
import NIOFoundationCompat
import NIOHTTP1
import Synchronization
public import StorageProtocol

/// `ObjectStore` over HTTP with AsyncHTTPClient: keep-alive connection pool, retries of
/// idempotent calls with backoff, streaming uploads from files, bounded reads.
///
/// ```swift
/// let store = HTTPObjectStore(configuration: .init(endpoint: "http://127.0.0.1:8420", token: token))
/// defer { Task { try await store.shutdown() } }
/// let record = try await store.upload(.file(path: "a.txt"), size: 5, to: ns, try StoragePath("docs/a.txt"))
/// ```
public final class HTTPObjectStore: ObjectStore {
    public struct Configuration: Sendable {
        /// The server's base URL, e.g. `http://127.0.0.1:8420`.
        public var endpoint: String
        public var token: String?
        /// Retries of idempotent calls (everything but `send`, whose resumption `upload` handles).
        public var retry: RetryPolicy = .default
        /// Deadline of a metadata call.
        public var requestTimeout: Duration = .seconds(60)
        /// An upload or download that moves no byte for this long fails.
        public var idleTimeout: Duration = .seconds(60)
        public var maxConnectionsPerHost: Int = 32
        /// Sent as `Stow-Origin` on every request: the server records it with the changes this
        /// client makes, so that it can tell its own in the change feed (1–64 of `A-Z a-z 0-9 . _ -`).
        public var origin: String?
        /// For an `https` endpoint: a PEM file of the certificate authorities that sign the server's
        /// certificate (a private CA). Nil: the system's trust store. A certificate that does not
        /// verify fails every call with a `StorageError` of kind `tlsFailure`.
        public var caFile: String?
        /// `--bwlimit`: file contents sent and received wait for their share (nil: no limits).
        public var bandwidth: BandwidthLimits?
        /// `listFolder`: entries per page, and how many pages it reads at once (the first page
        /// says where the next ones begin, `splits`). A folder of 1,000 names is one request: on a
        /// 2-core cluster, that was faster than a first page of 250 and three more at once.
        public var listPageSize = 1000
        public var listPagesAtOnce = 8

        public init(endpoint: String, token: String?) {
            self.endpoint = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
            self.token = token
        }
    }

    public let configuration: Configuration
    let client: HTTPClient
    /// StowFS's own upload routes (`direct`, `batch`) the server turned out not to have (an older
    /// stowd): from then on their work goes the standard way.
    let missingRoutes = Mutex<Set<String>>([])
    /// Where the server redirected signed URLs: presigned GETs of an object store, by version
    /// (`HTTPObjectStore+DirectReads`).
    let directTargets = Mutex(DirectTargets())

    public init(configuration: Configuration) {
        self.configuration = configuration
        var c = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: .seconds(10), read: .nanoseconds(Int64(configuration.idleTimeout.components.seconds) * 1_000_000_000)))
        c.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: configuration.maxConnectionsPerHost)
        // A refused connection fails the request at once; RetryPolicy decides about retrying (AsyncHTTPClient's
        // own retries would hold every request until the connect timeout: 20 s before "cannot reach").
        c.connectionPool.retryConnectionEstablishment = false
        c.decompression = .disabled
        // Without a CA file AHC's own default applies: the system's trust store.
        if let caFile = configuration.caFile { c.tlsConfiguration = Self.tlsConfiguration(caFile: caFile) }
        client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: c)
    }

    /// Closes the connection pool. Call once, when done.
    public func shutdown() async throws { try await client.shutdown() }

    // MARK: - Requests

    struct Answer {
        var status: Int
        var headers: HTTPHeaders
        var body: ByteBuffer
    }

    func url(_ path: String, query: [(String, String)] = []) -> String {
        var u = configuration.endpoint + path
        if !query.isEmpty { u += "?" + query.map { "\($0.0)=\(PathEncoding.encode(query: $0.1))" }.joined(separator: "&") }
        return u
    }

    func makeRequest(_ method: HTTPMethod, _ url: String, body: ByteBuffer? = nil, headers: [(String, String)] = [], authorized: Bool = true) -> HTTPClientRequest {
        var r = HTTPClientRequest(url: url)
        r.method = method
        if authorized, let token = configuration.token { r.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if authorized, let origin = configuration.origin { r.headers.add(name: Routes.originHeader, value: origin) }
        for (k, v) in headers { r.headers.add(name: k, value: v) }
        if let body {
            r.headers.add(name: "Content-Type", value: "application/json")
            r.body = .bytes(body)
        }
        return r
    }

    /// Sends a request (again, on transient failure, when `idempotent`), collects a bounded body.
    func execute(_ request: @autoclosure () -> HTTPClientRequest, idempotent: Bool = true, maxBody: Int = 64 << 20, timeout: Duration? = nil) async throws -> Answer {
        let policy = idempotent ? configuration.retry : .none
        return try await policy.run {
            try await executeOnce(request(), maxBody: maxBody, timeout: timeout ?? configuration.requestTimeout)
        }
    }

    func executeOnce(_ request: HTTPClientRequest, maxBody: Int, timeout: Duration) async throws -> Answer {
        do {
            let response = try await client.execute(request, timeout: .nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000))
            let body = try await response.body.collect(upTo: maxBody)
            let answer = Answer(status: Int(response.status.code), headers: response.headers, body: body)
            if answer.status >= 500 || answer.status == 429 || answer.status == 408 { throw failure(answer) }
            return answer
        } catch {
            throw transportError(error)
        }
    }

    /// A failure of the transport (or of the task) as a typed error; a `StorageError` as it is.
    func transportError(_ error: any Error) -> StorageError {
        if let e = error as? StorageError { return e }
        if error is CancellationError || Task.isCancelled { return StorageError(.cancelled, "cancelled") }
        if let e = tlsError(error) { return e }
        return StorageError(.unavailable, "cannot reach \(configuration.endpoint): \(Self.transportProblem(error))")
    }

    /// An answer that is not a success, as the error to throw (transient for 5xx, 429, 408).
    func failure(_ answer: Answer) -> StorageError {
        if answer.status >= 500 && answer.status != 507 || answer.status == 429 || answer.status == 408 {
            return StorageError(.unavailable, "the server answered \(answer.status)", status: answer.status, code: decodeError(answer.body)?.code)
        }
        return error(for: answer)
    }

    func decodeError(_ body: ByteBuffer) -> ErrorBody? {
        try? JSONDecoder().decode(ErrorBody.self, from: Data(body.readableBytesView))
    }

    func error(for answer: Answer) -> StorageError {
        StorageError.from(status: answer.status, body: decodeError(answer.body))
    }

    func decode<T: Decodable>(_ type: T.Type, _ answer: Answer, expect: Set<Int> = [200, 201]) throws -> T {
        guard expect.contains(answer.status) else { throw error(for: answer) }
        // Listing and search pages (a thousand records) are read by hand when they are in the plain
        // shape; anything else by JSONDecoder, which decides what is refused.
        if T.self == BrowseResponse.self, let page = answer.body.withUnsafeReadableBytes({ WireJSONReading.browse($0) }) as? T { return page }
        if T.self == SearchResponse.self, let page = answer.body.withUnsafeReadableBytes({ WireJSONReading.search($0) }) as? T { return page }
        if T.self == FileRecord.self, let record = answer.body.withUnsafeReadableBytes({ WireJSONReading.fileRecord($0) }) as? T { return record }
        if T.self == ChangesResponse.self, let changes = answer.body.withUnsafeReadableBytes({ WireJSONReading.changes($0) }) as? T { return changes }
        if T.self == BatchUpload.Response.self, let batch = answer.body.withUnsafeReadableBytes({ WireJSONReading.batchResponse($0) }) as? T { return batch }
        do {
            return try JSONDecoder().decode(T.self, from: Data(answer.body.readableBytesView))
        } catch {
            throw StorageError(.protocolViolation, "cannot decode the server's answer as \(T.self): \(error)", status: answer.status)
        }
    }

    func expect(_ answer: Answer, _ statuses: Set<Int>) throws {
        guard statuses.contains(answer.status) else { throw error(for: answer) }
    }

    static func json(_ value: some Encodable) -> ByteBuffer { ByteBuffer(bytes: WireJSON.encode(value)) }

    /// A storage link with this store's origin: a session saved before the server moved (a restart on
    /// another port, another address) still resumes. Signatures cover the path and expiry, not the host.
    func link(_ url: String) -> String {
        guard let scheme = url.range(of: "://"), let slash = url[scheme.upperBound...].firstIndex(of: "/") else { return url }
        return configuration.endpoint + url[slash...]
    }

    // MARK: - Namespaces

    public func namespaces() async throws -> [NamespaceRecord] {
        try decode(NamespaceList.self, try await execute(makeRequest(.GET, url(Routes.namespaces)))).items
    }

    public func createNamespace(_ ns: Namespace) async throws -> NamespaceRecord {
        try decode(NamespaceRecord.self, try await execute(makeRequest(.PUT, url(Routes.namespace(ns)))))
    }

    public func deleteNamespace(_ ns: Namespace, recursive: Bool) async throws {
        let answer = try await execute(makeRequest(.DELETE, url(Routes.namespace(ns), query: recursive ? [("recursive", "true")] : [])))
        try expect(answer, [204])
    }

    // MARK: - Metadata

    public func record(_ ns: Namespace, _ path: StoragePath) async throws -> FileRecord {
        try decode(FileRecord.self, try await execute(makeRequest(.GET, url(Routes.file(ns, path)))))
    }

    public func list(_ ns: Namespace, folder: StoragePath, after: String?, limit: Int) async throws -> ListPage {
        let page = try await posixPage(ns, folder: folder, after: after, limit: limit, splits: 0)
        return ListPage(entries: try page.entries.map { try seed($0, ns, folder) }, next: page.next)
    }

    /// The seed's record of an entry of `folder` from its posix record, equal to the one a plain
    /// listing gives (`TreeTests/posixListing`).
    func seed(_ p: PosixRecord, _ ns: Namespace, _ folder: StoragePath) throws -> FileRecord {
        do {
            return FileRecord(p, namespace: ns, path: try folder.appending(p.fileName), origin: configuration.endpoint)
        } catch {
            throw StorageError(.protocolViolation, "the server listed a name that is not one: \(error)")
        }
    }

    /// A page of a folder, as posix records in name order (by bytes, as the server orders names).
    struct PosixPage {
        var entries: [PosixRecord]
        var next: String?
        /// Where later pages begin, when asked for: after the entry `name`, asked for with `next`.
        var splits: [(name: FileName, next: String)] = []
    }

    /// A page of a folder; with `splits`, also where up to that many pages after it begin (an
    /// older server gives none).
    func posixPage(_ ns: Namespace, folder: StoragePath, after: String?, limit: Int, splits: Int) async throws -> PosixPage {
        // Posix records (a third of the bytes): a mount takes them as they are; `list` makes the
        // seed's records from them. A server that does not know `fields` sends the seed's records.
        var query = [("delimiter", "/"), ("limit", String(limit)), ("fields", "posix")]
        if !folder.isRoot { query.append(("prefix", folder.string + "/")) }
        if let after { query.append(("next_id", after)) }
        if splits > 0 { query.append(("splits", String(splits))) }
        let answer = try await execute(makeRequest(.GET, url(Routes.browse(ns), query: query)))
        let folders: [PosixRecord], items: [PosixRecord], info: PageInfo
        var refused: DecodingError?
        func decodedPosix() -> PosixBrowseResponse? {
            do {
                return try JSONDecoder().decode(PosixBrowseResponse.self, from: Data(answer.body.readableBytesView))
            } catch {
                refused = error as? DecodingError
                return nil
            }
        }
        if answer.status == 200, let posix = answer.body.withUnsafeReadableBytes({ WireJSONReading.posixBrowse($0) }) ?? decodedPosix() {
            (folders, items, info) = (posix.folders, posix.items, posix.page)
        } else if case .dataCorrupted(let context)? = refused {
            // A posix page with a number no record can have (`RecordNumbers`): said as it is, not
            // as the keys a page of the seed's records would lack.
            throw StorageError(.protocolViolation, "cannot decode the server's answer as PosixBrowseResponse: \(context.debugDescription) (at \(context.codingPath.map(\.stringValue).joined(separator: ".")))", status: answer.status)
        } else {
            let page = try decode(BrowseResponse.self, answer)
            (folders, items, info) = (page.folders.map(PosixRecord.init(seed:)), page.items.map(PosixRecord.init(seed:)), page.page)
        }
        var listed = PosixPage(entries: try Self.merged(folders, items), next: info.hasNext ? info.nextId : nil)
        // No more splits than asked for: each is a request sent at once.
        listed.splits = info.hasNext ? (info.splits ?? []).prefix(max(0, splits)).map { (FileName($0.name), $0.nextId) } : []
        return listed
    }

    /// A page's folders and files (each in the server's order) as one list in name order; every
    /// name checked to be one (a path segment), as the engine takes it as a name.
    static func merged(_ folders: [PosixRecord], _ items: [PosixRecord]) throws -> [PosixRecord] {
        for r in folders { try check(r.fileName) }
        for r in items { try check(r.fileName) }
        // Each comes in order from the server; only both together need sorting.
        func inOrder(_ a: [PosixRecord]) -> Bool { a.indices.dropFirst().allSatisfy { before(a[$0 - 1], a[$0]) } }
        if folders.isEmpty && inOrder(items) { return items }
        if items.isEmpty && inOrder(folders) { return folders }
        return (folders + items).sorted(by: Self.before)
    }

    static func before(_ a: PosixRecord, _ b: PosixRecord) -> Bool { FileName(a.fileName) < FileName(b.fileName) }

    static func check(_ name: String) throws {
        do {
            try StoragePath.validate(segment: name)
        } catch {
            throw StorageError(.protocolViolation, "the server listed a name that is not one: \(error)")
        }
    }

    public func listFolder(_ ns: Namespace, folder: StoragePath, cap: Int?) async throws -> FolderListing {
        let listing = try await listFolderPosix(ns, folder: folder, cap: cap)
        return FolderListing(entries: try listing.entries.map { try seed($0, ns, folder) }, complete: listing.complete)
    }

    /// Every entry of a folder, several pages at once: each page says where up to
    /// `listPagesAtOnce` pages after it begin (`splits`), and those are read together, each
    /// from its split up to the next split's name, with the one after the last split (which says
    /// where the next ones begin). A range that grew since it was split (names added meanwhile)
    /// is followed page by page up to its end; names beyond it are its neighbour's. So every name
    /// that stays in the folder throughout is listed once, as when pages are read one by one. A
    /// server that gives no splits (an older one) is read one page after another.
    public func listFolderPosix(_ ns: Namespace, folder: StoragePath, cap: Int?) async throws -> PosixListing {
        let size = max(1, configuration.listPageSize)
        // Each round reads as many pages at once as the page before it names splits.
        let more = max(0, configuration.listPagesAtOnce)
        var page = try await posixPage(ns, folder: folder, after: nil, limit: size, splits: more)
        var progress = ListingProgress(folder: folder.string)
        try progress.take(names: page.entries.lazy.map(\.fileName), cursor: nil, next: page.next)
        var entries = page.entries
        while let next = page.next {
            if let cap, entries.count >= cap { return PosixListing(entries: entries, complete: false) }
            // The ranges begin where this page ended, whatever the first split says (on a server
            // that finds the splits apart from the page, a name removed between the two moves it).
            let splits = page.splits
            let starts = [next] + splits.dropFirst().map(\.next)
            let (ranges, tail) = try await withThrowingTaskGroup(of: (Int, PosixPage).self) { group in
                for i in 0..<(starts.count - 1) {
                    group.addTask {
                        (i, try await self.listRange(ns, folder: folder, after: starts[i], through: splits[i + 1].name, limit: size))
                    }
                }
                group.addTask { (starts.count - 1, try await self.posixPage(ns, folder: folder, after: starts.last!, limit: size, splits: more)) }
                var pages = [PosixPage?](repeating: nil, count: starts.count)
                for try await (i, p) in group { pages[i] = p }
                return (pages.dropLast().map { $0!.entries }, pages.last!!)
            }
            // In order, as they are put together: names never go back, and an end comes. (Each
            // range followed its own pages to a name it was given: it may be empty, and ends.)
            for range in ranges {
                try progress.take(names: range.lazy.map(\.fileName), cursor: nil, next: nil)
                entries += range
            }
            try progress.take(names: tail.entries.lazy.map(\.fileName), cursor: starts.last, next: tail.next)
            entries += tail.entries
            page = tail
        }
        return PosixListing(entries: entries, complete: true)
    }

    /// The entries after the cursor `after` up to the name `end` (included), in pages.
    func listRange(_ ns: Namespace, folder: StoragePath, after: String, through end: FileName, limit: Int) async throws -> PosixPage {
        var out: [PosixRecord] = []
        var cursor = after
        var progress = ListingProgress(folder: folder.string)
        while true {
            let page = try await posixPage(ns, folder: folder, after: cursor, limit: limit, splits: 0)
            try progress.take(names: page.entries.lazy.map(\.fileName), cursor: cursor, next: page.next)
            var reached = false
            for entry in page.entries {
                // By bytes, as the server orders names.
                let name = FileName(entry.fileName)
                if name <= end { out.append(entry) }
                if name >= end { reached = true }
            }
            guard let next = page.next, !reached else { return PosixPage(entries: out, next: nil) }
            cursor = next
        }
    }

    public func search(_ ns: Namespace, _ filter: SearchFilter, cursor: String?, limit: Int) async throws -> SearchResponse {
        var query = filter.queryItems + [("limit", String(limit))]
        if let cursor { query.append(("cursor", cursor)) }
        return try decode(SearchResponse.self, try await execute(makeRequest(.GET, url(Routes.search(ns), query: query))))
    }

    public func update(_ ns: Namespace, _ path: StoragePath, _ patch: FilePatch, ifMatch: String?) async throws -> FileRecord {
        let headers = ifMatch.map { [("If-Match", "\"\($0)\"")] } ?? []
        return try decode(FileRecord.self, try await execute(makeRequest(.PATCH, url(Routes.file(ns, path)), body: Self.json(patch), headers: headers)))
    }

    public func delete(_ ns: Namespace, _ path: StoragePath, ifMatch: String?) async throws {
        let headers = ifMatch.map { [("If-Match", "\"\($0)\"")] } ?? []
        var attempt = 0
        let answer = try await execute({ attempt += 1; return makeRequest(.DELETE, url(Routes.file(ns, path)), headers: headers) }())
        // A retry of a delete whose first answer was lost finds nothing: that is success.
        if answer.status == 404 && attempt > 1 { return }
        try expect(answer, [204])
    }

    public func makeFolder(_ ns: Namespace, _ path: StoragePath, _ request: FolderRequest) async throws -> FileRecord {
        try await makeFolderAnswered(ns, path, request).record
    }

    public func makeFolder(_ ns: Namespace, _ path: StoragePath, _ request: FolderRequest, namesLeaseFor session: String) async throws -> (
        record: FileRecord, leased: Bool
    ) {
        var request = request
        request.namesLease = session
        return try await makeFolderAnswered(ns, path, request)
    }

    private func makeFolderAnswered(_ ns: Namespace, _ path: StoragePath, _ request: FolderRequest) async throws -> (record: FileRecord, leased: Bool) {
        var attempt = 0
        let answer = try await execute({ attempt += 1; return makeRequest(.PUT, url(Routes.folder(ns, path)), body: Self.json(request)) }())
        // A retry of a mkdir whose first answer was lost (a server that died answering) finds the
        // folder it made: that is success (and its lease, if any, is asked for on its own).
        if answer.status == 409, attempt > 1, request.existOk == false, let made = try? await record(ns, path), made.kind == .directory {
            return (made, false)
        }
        let record = try decode(FileRecord.self, answer)
        return (record, answer.status == 201 && answer.headers.first(name: FolderRequest.namesLeaseHeader) == "granted")
    }

    public func removeFolder(_ ns: Namespace, _ path: StoragePath) async throws {
        var attempt = 0
        let answer = try await execute({ attempt += 1; return makeRequest(.DELETE, url(Routes.folder(ns, path))) }())
        if answer.status == 404 && attempt > 1 { return }
        try expect(answer, [204])
    }

    public func rename(_ ns: Namespace, from: StoragePath, to: StoragePath, replace: Bool, exchange: Bool) async throws -> FileRecord {
        if exchange { return try await self.exchange(ns, from: from, to: to) }
        let body = Self.json(RenameRequest(from: from.string, to: to.string, replace: replace, exchange: exchange))
        var attempt = 0
        let answer = try await execute({ attempt += 1; return makeRequest(.POST, url(Routes.rename(ns)), body: body) }())
        if answer.status == 404 && attempt > 1 && !exchange, let moved = try? await record(ns, to) {
            // The first attempt did the rename; its answer was lost.
            return moved
        }
        return try decode(FileRecord.self, answer)
    }

    /// An exchange is its own undoing: sent again after the server swapped and its answer was lost
    /// (a replica killed after its commit, a balancer's timeout while the first is still under
    /// way), it would swap back, and the caller, told it succeeded, would send each side's later
    /// content to the other's name. So it names the server inodes it saw at both names
    /// (`if_from_inode`, `if_to_inode`), and the server swaps only if they are still there: of
    /// any number sent, one swaps and the others are refused (412). It is still sent again only
    /// once the server is seen not to have swapped (a stowd from before the condition ignores
    /// it): the record that stood at `from` found at `to` is the answer; refused, or unknown in
    /// the end, the error says which (`unavailable` when the outcome is unknown).
    private func exchange(_ ns: Namespace, from: StoragePath, to: StoragePath) async throws -> FileRecord {
        let moving = try await record(ns, from).inode
        let staying = try await record(ns, to).inode
        let body = Self.json(RenameRequest(from: from.string, to: to.string, exchange: true, ifFromInode: moving, ifToInode: staying))
        enum Outcome { case swapped(FileRecord), notSwapped, unknown }
        /// The record at `to` is the one that stood at `from`: swapped, and that is the answer.
        func outcome() async -> Outcome {
            guard let there = try? await record(ns, to) else { return .unknown }
            return there.inode == moving ? .swapped(there) : .notSwapped
        }
        let policy = configuration.retry
        var attempt = 1
        while true {
            let failure: StorageError
            do {
                let answer = try await execute(makeRequest(.POST, url(Routes.rename(ns)), body: body), idempotent: false)
                guard answer.status == 412 else { return try decode(FileRecord.self, answer) }
                switch await outcome() {
                case .swapped(let done): return done
                case .notSwapped: throw error(for: answer)
                case .unknown: throw StorageError(.unavailable, "whether `\(from)` and `\(to)` were exchanged is unknown: the server does not answer")
                }
            } catch let e as StorageError where e.isTransient {
                failure = e
            }
            // No answer: sent again (after the policy's pause, within its tries) only once the
            // server is seen not to have swapped; the last try's outcome asked too.
            while true {
                guard attempt < policy.attempts else {
                    if case .swapped(let done) = await outcome() { return done }
                    throw failure
                }
                try await policy.sleep(policy.delay(after: attempt))
                attempt += 1
                let now = await outcome()
                if case .swapped(let done) = now { return done }
                if case .notSwapped = now { break }
            }
        }
    }

    public func makeNode(_ ns: Namespace, _ path: StoragePath, _ request: NodeRequest) async throws -> FileRecord {
        try decode(FileRecord.self, try await execute(makeRequest(.PUT, url(Routes.node(ns, path)), body: Self.json(request)), idempotent: false))
    }

    public func link(_ ns: Namespace, from: StoragePath, to: StoragePath) async throws -> FileRecord {
        let body = Self.json(LinkRequest(from: from.string, to: to.string))
        return try decode(FileRecord.self, try await execute(makeRequest(.POST, url(Routes.link(ns)), body: body), idempotent: false))
    }

    // MARK: - Uploads

    public func startUpload(_ ns: Namespace, _ request: StartUploadRequest) async throws -> StartUploadResponse {
        let answer = try await execute(makeRequest(.POST, url(Routes.startUpload(ns)), body: Self.json(request)))
        let session = try decode(StartUploadResponse.self, answer)
        // The session's size is what gets sent: a start that names another one would have this
        // client send (and the server keep) a file cut short, or send past the file's end.
        if request.deferLength != true, session.size != request.size {
            throw StorageError(.protocolViolation, "the server started an upload of \(session.size) bytes for a file of \(request.size)", status: answer.status)
        }
        return session
    }

    public func uploadedBytes(_ session: StartUploadResponse) async throws -> Int64 {
        let answer = try await execute(makeRequest(.HEAD, link(session.upload.url), headers: [(Tus.resumable, Tus.version)], authorized: false))
        try expect(answer, [200])
        guard let offset = HTTPNumber.nonNegative(answer.headers.first(name: Tus.uploadOffset)) else {
            throw StorageError(.protocolViolation, "the storage link's HEAD has no Upload-Offset")
        }
        // Past the declared size, the bytes up to it would never be sent.
        guard offset <= session.size || session.deferLength == true else {
            throw StorageError(.protocolViolation, "the storage link holds \(offset) bytes of an upload of \(session.size)")
        }
        return offset
    }

    public func send(_ session: StartUploadResponse, from source: UploadSource, offset: Int64, end: Int64, progress: ProgressHandler?) async throws -> Int64 {
        let deferred = session.deferLength == true
        precondition(offset >= 0 && offset <= end && (deferred || end <= session.size))
        // A deferred-length upload goes in PATCHes only: a PUT would say "this is all of it".
        let whole = !deferred && offset == 0 && end == session.size
        var headers: [(String, String)] = []
        if !whole {
            headers = [(Tus.resumable, Tus.version), (Tus.uploadOffset, String(offset)), ("Content-Type", Tus.offsetContentType)]
        }
        var request = makeRequest(whole ? .PUT : .PATCH, link(session.upload.url), headers: headers, authorized: false)
        let total = session.size
        let counter = progress.map { ProgressCounter(base: offset, total: total, report: $0) }
        let answer: Answer
        switch source {
        case .bytes(let buffer):
            guard Int64(buffer.readableBytes) >= end else { throw StorageError(.localIO, "the source has \(buffer.readableBytes) bytes, fewer than \(end)") }
            let slice = buffer.getSlice(at: buffer.readerIndex + Int(offset), length: Int(end - offset)) ?? ByteBuffer()
            request.body = .bytes(slice)
            await configuration.bandwidth?.up.take(slice.readableBytes)
            answer = try await executeOnce(request, maxBody: 1 << 20, timeout: .seconds(3600))
            counter?.add(Int64(slice.readableBytes))
        case .file(let path):
            answer = try await withFile(path) { handle in
                let chunks = handle.readChunks(in: offset..<end, chunkLength: .mebibytes(1))
                request.body = .stream(CountingChunks(base: chunks, counter: counter, limiter: configuration.bandwidth?.up), length: .known(end - offset))
                return try await executeOnce(request, maxBody: 1 << 20, timeout: .seconds(24 * 3600))
            }
        }
        guard answer.status == 200 || answer.status == 204 else { throw error(for: answer) }
        guard let newOffset = HTTPNumber.nonNegative(answer.headers.first(name: Tus.uploadOffset)) else {
            throw StorageError(.protocolViolation, "the storage link's answer has no Upload-Offset")
        }
        // The server cannot hold more than was sent: an offset past `end` would have the bytes
        // in between skipped, and the file stored with a gap.
        guard newOffset <= end else {
            throw StorageError(.protocolViolation, "the storage link says it holds \(newOffset) bytes after bytes up to \(end) were sent", status: answer.status)
        }
        return newOffset
    }

    func withFile<T: Sendable>(_ path: String, _ body: (ReadFileHandle) async throws -> T) async throws -> T {
        let handle: ReadFileHandle
        do {
            handle = try await FileSystem.shared.openFile(forReadingAt: FilePath(path))
        } catch {
            throw StorageError(.localIO, "cannot open \(path): \(error)")
        }
        do {
            let result = try await body(handle)
            await Self.close(handle)
            return result
        } catch {
            await Self.close(handle)
            throw error
        }
    }

    /// Closes a file handle even from a cancelled task (NIOFileSystem refuses work there, and a
    /// handle dropped unclosed is a fatal error).
    static func close(_ handle: ReadFileHandle) async {
        // An unstructured task does not inherit the caller's cancellation.
        try? await Task { try await handle.close() }.value
    }

    public func uploadParts(_ session: StartUploadResponse, numbers: [Int]) async throws -> UploadPartsResponse {
        let ns = try Namespace(session.namespace)
        let body = Self.json(UploadPartsRequest(upload: session, numbers: numbers))
        return try decode(UploadPartsResponse.self, try await execute(makeRequest(.POST, url(Routes.uploadParts(ns)), body: body)))
    }

    public func putDirect(url: String, headers: [String: String], from source: UploadSource, offset: Int64, end: Int64, progress: ProgressHandler?) async throws {
        // The URL is the object store's, presigned: no token goes with it.
        var request = makeRequest(.PUT, url, headers: headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }, authorized: false)
        let counter = progress.map { ProgressCounter(base: offset, total: end, report: $0) }
        let answer: Answer
        switch source {
        case .bytes(let buffer):
            guard Int64(buffer.readableBytes) >= end else { throw StorageError(.localIO, "the source has \(buffer.readableBytes) bytes, fewer than \(end)") }
            let slice = buffer.getSlice(at: buffer.readerIndex + Int(offset), length: Int(end - offset)) ?? ByteBuffer()
            request.body = .bytes(slice)
            await configuration.bandwidth?.up.take(slice.readableBytes)
            answer = try await executeOnce(request, maxBody: 1 << 20, timeout: .seconds(3600))
            counter?.add(Int64(slice.readableBytes))
        case .file(let path):
            answer = try await withFile(path) { handle in
                let chunks = handle.readChunks(in: offset..<end, chunkLength: .mebibytes(1))
                request.body = .stream(CountingChunks(base: chunks, counter: counter, limiter: configuration.bandwidth?.up), length: .known(end - offset))
                return try await executeOnce(request, maxBody: 1 << 20, timeout: .seconds(24 * 3600))
            }
        }
        guard answer.status == 200 else {
            // The store's own answer (XML): 403 is an expired or refused signature (renew), 400
            // BadDigest a body that is not the declared content.
            let text = String(buffer: answer.body)
            if text.contains("<Code>BadDigest</Code>") { throw StorageError(.checksumMismatch, "the object store refused the bytes: they do not match the declared SHA-256", status: answer.status) }
            let kind: StorageError.Kind = answer.status == 403 ? .forbidden : answer.status == 404 ? .notFound : answer.status >= 500 ? .unavailable : .badRequest
            throw StorageError(kind, "the object store answered \(answer.status) to a direct upload", status: answer.status)
        }
    }

    public func completeUpload(_ session: StartUploadResponse) async throws -> FileRecord {
        let ns = try Namespace(session.namespace)
        return try decode(FileRecord.self, try await execute(makeRequest(.POST, url(Routes.completeUpload(ns)), body: Self.json(session))))
    }

    public func renewUpload(_ session: StartUploadResponse) async throws -> StartUploadResponse {
        let ns = try Namespace(session.namespace)
        let answer = try decode(StartUploadResponse.self, try await execute(makeRequest(.POST, url(Routes.renewUpload(ns)), body: Self.json(session))))
        // The declaration stays the client's (a deferred-length upload sends its final size and
        // attributes with complete); only the link is new.
        var renewed = session
        renewed.upload = answer.upload
        return renewed
    }

    /// One POST to `…/upload/direct`: the declaration in a header, the bytes as the body.
    public func uploadDirect(_ ns: Namespace, _ request: StartUploadRequest, from source: UploadSource) async throws -> FileRecord {
        let bytes: ByteBuffer
        switch source {
        case .bytes(let buffer):
            guard Int64(buffer.readableBytes) >= request.size else {
                throw StorageError(.localIO, "the source has \(buffer.readableBytes) bytes, fewer than \(request.size)")
            }
            bytes = buffer.getSlice(at: buffer.readerIndex, length: Int(request.size)) ?? ByteBuffer()
        case .file(let path):
            bytes = try Self.readWhole(path, size: request.size)
        }
        if missingRoutes.withLock({ $0.contains("direct") }) { return try await uploadInThreeSteps(ns, request, from: .bytes(bytes)) }
        let declaration = WireJSON.encode(request).base64EncodedString()
        var r = makeRequest(.POST, url(Routes.directUpload(ns)), headers: [(Routes.directUploadHeader, declaration), ("Content-Type", "application/octet-stream")])
        r.body = .bytes(bytes)
        await configuration.bandwidth?.up.take(bytes.readableBytes)
        let answer = try await executeOnce(r, maxBody: 1 << 20, timeout: configuration.requestTimeout)
        if Self.mayBeMissingRoute(answer) {
            // An older server, or a namespace that does not exist: the standard way tells which.
            let record = try await uploadInThreeSteps(ns, request, from: .bytes(bytes))
            missingRoutes.withLock { _ = $0.insert("direct") }
            return record
        }
        return try decode(FileRecord.self, answer)
    }

    /// A 404 or 405 from one of StowFS's own routes: the server may predate it.
    static func mayBeMissingRoute(_ answer: Answer) -> Bool { answer.status == 404 || answer.status == 405 }

    /// One POST to `…/upload/batch`: the declarations, then every file's bytes.
    public func uploadBatch(_ ns: Namespace, _ files: [(StartUploadRequest, UploadSource)]) async throws -> [Result<FileRecord, StorageError>] {
        if missingRoutes.withLock({ $0.contains("batch") }) { return try await uploadOneByOne(ns, files) }
        let header = BatchUpload.header(BatchUpload.Request(files: files.map(\.0)))
        // The declarations must stay under the server's JSON limit (1 MiB): long paths and
        // metadata split a batch in two, as often as needed.
        if header.count > Self.batchDeclarationLimit && files.count > 1 {
            let half = files.count / 2
            return try await uploadBatch(ns, Array(files[..<half])) + uploadBatch(ns, Array(files[half...]))
        }
        var body = ByteBufferAllocator().buffer(capacity: header.count + Int(files.reduce(Int64(0)) { $0 + $1.0.size }))
        body.writeBytes(header)
        for (request, source) in files {
            switch source {
            case .bytes(let buffer):
                guard Int64(buffer.readableBytes) >= request.size else {
                    throw StorageError(.localIO, "the source of \(request.fileName) has \(buffer.readableBytes) bytes, fewer than \(request.size)")
                }
                body.writeImmutableBuffer(buffer.getSlice(at: buffer.readerIndex, length: Int(request.size)) ?? ByteBuffer())
            case .file(let path):
                var bytes = try Self.readWhole(path, size: request.size)
                body.writeBuffer(&bytes)
            }
        }
        var r = makeRequest(.POST, url(Routes.batchUpload(ns)), headers: [("Content-Type", "application/octet-stream")])
        r.body = .bytes(body)
        await configuration.bandwidth?.up.take(body.readableBytes)
        let answer = try await executeOnce(r, maxBody: 16 << 20, timeout: configuration.requestTimeout)
        if Self.mayBeMissingRoute(answer) {
            // An older server, or a namespace that does not exist: one by one tells which.
            let results = try await uploadOneByOne(ns, files)
            if results.contains(where: { (try? $0.get()) != nil }) { missingRoutes.withLock { _ = $0.insert("batch") } }
            return results
        }
        let response = try decode(BatchUpload.Response.self, answer, expect: [200])
        guard response.results.count == files.count else {
            throw StorageError(.protocolViolation, "the batch answer has \(response.results.count) results for \(files.count) files", status: answer.status)
        }
        return response.results.map { result in
            if let file = result.file { return .success(file) }
            return .failure(StorageError.from(status: result.status ?? 500, body: result.error))
        }
    }

    static let batchDeclarationLimit = 512 << 10

    /// One POST to `…/delete/batch` (split in two while its JSON passes 512 KiB); against a server
    /// without it (404/405), DELETEs a few at a time, and the client remembers.
    public func deleteFiles(_ ns: Namespace, _ files: [FileDeletion]) async -> [Result<Void, StorageError>] {
        if files.isEmpty { return [] }
        if missingRoutes.withLock({ $0.contains("delete-batch") }) { return await deleteConcurrently(ns, files, width: 8) }
        let json = WireJSON.encode(BatchDelete.Request(files: files.map { BatchDelete.Item(path: $0.path.string, ifMatch: $0.ifMatch, inode: $0.inode) }))
        if json.count > Self.batchDeclarationLimit && files.count > 1 {
            let half = files.count / 2
            return await deleteFiles(ns, Array(files[..<half])) + deleteFiles(ns, Array(files[half...]))
        }
        func all(_ error: StorageError) -> [Result<Void, StorageError>] { Array(repeating: .failure(error), count: files.count) }
        let answer: Answer
        do {
            // Retried as a whole: a delete done by a try whose answer was lost is a 404 the next time (done).
            answer = try await execute(makeRequest(.POST, url(Routes.batchDelete(ns)), body: ByteBuffer(data: json), headers: [("Content-Type", "application/json")]))
        } catch let e as StorageError {
            return all(e)
        } catch {
            return all(StorageError(.cancelled, "\(error)"))
        }
        if Self.mayBeMissingRoute(answer) {
            // An older server, or a namespace that does not exist: one by one tells which.
            let results = await deleteConcurrently(ns, files, width: 8)
            if results.contains(where: { if case .failure(let e) = $0 { return e.kind != .notFound }; return true }) {
                missingRoutes.withLock { _ = $0.insert("delete-batch") }
            }
            return results
        }
        do {
            let response = try decode(BatchDelete.Response.self, answer, expect: [200])
            guard response.results.count == files.count else {
                return all(StorageError(.protocolViolation, "the batch answer has \(response.results.count) results for \(files.count) deletes", status: answer.status))
            }
            return response.results.map { r in r.status == 204 ? .success(()) : .failure(StorageError.from(status: r.status, body: r.error)) }
        } catch let e as StorageError {
            return all(e)
        } catch {
            return all(StorageError(.protocolViolation, "\(error)"))
        }
    }

    /// The first `size` bytes of a (small) file, read at once: no thread-pool hop for a few KiB.
    static func readWhole(_ path: String, size: Int64) throws -> ByteBuffer {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StorageError(.localIO, "cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { _ = Glibc.close(fd) }
        var buffer = ByteBufferAllocator().buffer(capacity: Int(size))
        guard size > 0 else { return buffer }
        var got = 0
        var failure: Int32 = 0
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: Int(size)) { space in
            while got < Int(size) {
                let n = pread(fd, space.baseAddress! + got, Int(size) - got, off_t(got))
                if n < 0 {
                    if errno == EINTR { continue }
                    failure = errno
                    break
                }
                if n == 0 { break }
                got += n
            }
            return got
        }
        if failure != 0 { throw StorageError(.localIO, "cannot read \(path): \(String(cString: strerror(failure)))") }
        guard got == Int(size) else { throw StorageError(.localIO, "\(path) has \(got) bytes, fewer than \(size)") }
        return buffer
    }

    public func abandonUpload(_ session: StartUploadResponse) async throws {
        let answer = try await execute(makeRequest(.DELETE, link(session.upload.url), headers: [(Tus.resumable, Tus.version)], authorized: false))
        if answer.status == 404 { return }
        try expect(answer, [204])
    }

    // MARK: - The change feed

    public func changes(_ ns: Namespace, since: String?, wait: Duration) async throws -> ChangesResponse {
        let seconds = max(0, min(60, wait.components.seconds))
        var query: [(String, String)] = [("wait", String(seconds))]
        if let since { query.append(("since", since)) }
        // Answered when something changes or the wait is up: the deadline is the wait and some.
        let answer = try await execute(makeRequest(.GET, url(Routes.changes(ns), query: query)), timeout: .seconds(seconds + 30))
        return try decode(ChangesResponse.self, answer, expect: [200])
    }

    // MARK: - Locks

    public func renewLockSession(_ ns: Namespace, id: String) async throws -> LockSessionResponse {
        try decode(LockSessionResponse.self, try await execute(makeRequest(.PUT, url(Routes.lockSession(ns, id)))), expect: [200])
    }

    public func endLockSession(_ ns: Namespace, id: String) async throws {
        try expect(try await execute(makeRequest(.DELETE, url(Routes.lockSession(ns, id)))), [204])
    }

    /// Idempotent: the same request applied twice holds the same locks.
    public func lock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse {
        let wait = Duration.milliseconds(request.waitMs ?? 0)
        let answer = try await execute(makeRequest(.POST, url(Routes.locks(ns)), body: Self.json(request)), timeout: wait + configuration.requestTimeout)
        return try decode(LockResponse.self, answer, expect: [200])
    }

    public func testLock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse {
        try decode(LockResponse.self, try await execute(makeRequest(.POST, url(Routes.testLock(ns)), body: Self.json(request))), expect: [200])
    }

    // MARK: - Reads

    public func signedURLs(_ ns: Namespace, _ paths: [StoragePath], expiry: Int) async throws -> [SignedURL] {
        var out: [SignedURL] = []
        for start in stride(from: 0, to: paths.count, by: 1000) {
            let batch = paths[start..<min(start + 1000, paths.count)]
            let body = Self.json(SignURLsRequest(expiry: expiry, urls: batch.map { Routes.cdn(ns, $0) }))
            out += try decode(SignURLsResponse.self, try await execute(makeRequest(.POST, url(Routes.signURLs), body: body))).urls
        }
        return out
    }

    public func read(url: String, range: Range<Int64>?, ifMatch: String?) async throws -> ReadResult {
        if let range, range.isEmpty { return ReadResult(bytes: ByteBuffer(), etag: nil, totalSize: nil) }
        let limit = range.map { Int($0.count) + 1024 } ?? (1 << 30)
        var etag: String?
        let answer = try await configuration.retry.run { () async throws -> Answer in
            let followed = try await getFollowingRedirect(url, range: range, ifMatch: ifMatch, timeout: .seconds(600))
            etag = followed.etag
            let body: ByteBuffer
            do {
                body = try await followed.response.body.collect(upTo: limit)
            } catch {
                throw transportError(error)
            }
            let answer = Answer(status: Int(followed.response.status.code), headers: followed.response.headers, body: body)
            await configuration.bandwidth?.down.take(body.readableBytes)
            if answer.status >= 500 || answer.status == 429 || answer.status == 408 { throw failure(answer) }
            return answer
        }
        guard answer.status == 200 || answer.status == 206 else { throw error(for: answer) }
        var total: Int64?
        if let cr = answer.headers.first(name: "Content-Range"), let slash = cr.lastIndex(of: "/") {
            total = HTTPNumber.nonNegative(cr[cr.index(after: slash)...])
        } else if answer.status == 200 {
            total = Int64(answer.body.readableBytes)
        }
        var bytes = answer.body
        if answer.status == 200, let range {
            // The server ignored the range (it may, for a file smaller than asked): cut it here.
            let lower = Int(min(range.lowerBound, Int64(bytes.readableBytes)))
            let upper = Int(min(range.upperBound, Int64(bytes.readableBytes)))
            bytes = bytes.getSlice(at: bytes.readerIndex + lower, length: upper - lower) ?? ByteBuffer()
        }
        return ReadResult(bytes: bytes, etag: etag, totalSize: total)
    }

    /// `Range` (a non-empty range) and `If-Match` of a read.
    static func readHeaders(_ range: Range<Int64>?, ifMatch: String?) -> [(String, String)] {
        var headers: [(String, String)] = []
        if let range { headers.append(("Range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")) }
        if let ifMatch { headers.append(("If-Match", "\"\(ifMatch)\"")) }
        return headers
    }

    /// Streams the range as it arrives: each chunk of the response goes to `consume` without
    /// collecting the body (a cold sequential read moves hundreds of MiB this way). Retries
    /// transient failures only while nothing was handed over.
    public func read(url: String, range: Range<Int64>, ifMatch: String?, consume: (ByteBuffer) throws -> Void) async throws -> Int64 {
        guard !range.isEmpty else { return 0 }
        let policy = configuration.retry
        var attempt = 1
        while true {
            var delivered: Int64 = 0
            do {
                try await stream(url, range: range, ifMatch: ifMatch, delivered: &delivered, consume: consume)
                return delivered
            } catch let e as StorageError where e.isTransient && delivered == 0 && attempt < policy.attempts {
                try await policy.sleep(policy.delay(after: attempt))
                attempt += 1
            }
        }
    }

    func stream(_ url: String, range: Range<Int64>, ifMatch: String?, delivered: inout Int64, consume: (ByteBuffer) throws -> Void) async throws {
        let response = try await getFollowingRedirect(url, range: range, ifMatch: ifMatch, timeout: .minutes(10)).response
        let status = Int(response.status.code)
        guard status == 200 || status == 206 else {
            let body = (try? await response.body.collect(upTo: 1 << 20)) ?? ByteBuffer()
            throw failure(Answer(status: status, headers: response.headers, body: body))
        }
        // A 200 is the whole file (the server may ignore a range): skip to the range.
        var skip = status == 200 ? Int(range.lowerBound) : 0
        let wanted = Int64(range.count)
        var chunks = response.body.makeAsyncIterator()
        while delivered < wanted {
            let next: ByteBuffer?
            do {
                next = try await chunks.next()
            } catch {
                throw transportError(error)
            }
            guard var chunk = next else { return }
            if skip > 0 {
                let n = min(skip, chunk.readableBytes)
                chunk.moveReaderIndex(forwardBy: n)
                skip -= n
            }
            let room = wanted - delivered
            if chunk.readableBytes > room { chunk = chunk.getSlice(at: chunk.readerIndex, length: Int(room))! }
            guard chunk.readableBytes > 0 else { continue }
            await configuration.bandwidth?.down.take(chunk.readableBytes)
            try consume(chunk)
            delivered += Int64(chunk.readableBytes)
        }
    }

    /// A transport failure in a few words a user can act on.
    static func transportProblem(_ error: any Error) -> String {
        let text = String(describing: error)
        if text.contains("Connection refused") || text.contains("errno: 111") { return "connection refused (is the server running?)" }
        if text.contains("connectTimeout") { return "the connection timed out" }
        if text.contains("deadlineExceeded") || text.contains("readTimeout") { return "no answer in time" }
        if text.contains("NXDOMAIN") || text.contains("lookup") || text.contains("dns") { return "the host name does not resolve" }
        if text.contains("remoteConnectionClosed") || text.contains("Connection reset") { return "the connection was closed" }
        return text
    }

    /// Streams a whole file by signed URL into a local file, with progress.
    public func download(url: String, to path: String, progress: ProgressHandler? = nil) async throws -> Int64 {
        let response = try await getFollowingRedirect(url, range: nil, ifMatch: nil, timeout: .hours(24)).response
        guard response.status == .ok else {
            let body = try await response.body.collect(upTo: 1 << 20)
            throw StorageError.from(status: Int(response.status.code), body: decodeError(body))
        }
        let total = HTTPNumber.nonNegative(response.headers.first(name: "Content-Length")) ?? -1
        var written: Int64 = 0
        do {
            try await FileSystem.shared.withFileHandle(forWritingAt: FilePath(path), options: .newFile(replaceExisting: true)) { handle in
                var writer = handle.bufferedWriter(capacity: .mebibytes(1))
                for try await chunk in response.body {
                    await configuration.bandwidth?.down.take(chunk.readableBytes)
                    try await writer.write(contentsOf: chunk)
                    written += Int64(chunk.readableBytes)
                    progress?(written, total)
                }
                try await writer.flush()
            }
        } catch let e as StorageError {
            throw e
        } catch {
            throw StorageError(.localIO, "cannot write \(path): \(error)")
        }
        return written
    }
}

/// Counts bytes handed to the HTTP client and reports progress.
final class ProgressCounter: Sendable {
    private let state: Mutex<Int64>
    let total: Int64
    let report: ProgressHandler

    init(base: Int64, total: Int64, report: @escaping ProgressHandler) {
        state = Mutex(base)
        self.total = total
        self.report = report
    }

    func add(_ n: Int64) {
        let now = state.withLock { v in
            v += n
            return v
        }
        report(now, total)
    }
}

/// File chunks that tick a progress counter as they are consumed.
struct CountingChunks<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    let counter: ProgressCounter?
    /// `--bwlimit`'s upload limit: each chunk waits for its share before it goes.
    var limiter: BandwidthLimiter? = nil

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let counter: ProgressCounter?
        let limiter: BandwidthLimiter?
        mutating func next() async throws -> ByteBuffer? {
            guard let chunk = try await base.next() else { return nil }
            await limiter?.take(chunk.readableBytes)
            counter?.add(Int64(chunk.readableBytes))
            return chunk
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: base.makeAsyncIterator(), counter: counter, limiter: limiter) }
}
