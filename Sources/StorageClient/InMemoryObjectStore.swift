import Foundation
import NIOCore
import NIOFoundationCompat
public import StorageProtocol

/// An `ObjectStore` held in memory, with the server's semantics (a tree of inodes, uploads that
/// publish at complete, ETags per content, hard links, rename rules), for tests and benchmarks
/// that need no server. Reads go through `memory://` URLs that `signedURLs` hands out.
public actor InMemoryObjectStore: ObjectStore {
    struct Node {
        var kind: NodeKind
        var mode: UInt32?
        var uid: UInt32?
        var gid: UInt32?
        var nlink: UInt32
        var content = ByteBuffer()
        var etag: String
        var tags: [String] = []
        var metadata: [String: String] = [:]
        var contentType: String?
        var isPublic = false
        var target: String?
        var rdev: UInt64?
        var atime: Int64
        var mtime: Int64
        var ctime: Int64
        var btime: Int64
    }

    struct Upload {
        var namespace: Namespace
        var path: StoragePath
        var request: StartUploadRequest
        var bytes = ByteBuffer()
        var resultInode: UInt64?
    }

    private var namespaceRoots: [String: UInt64] = [:]
    private var namespaceCreated: [String: Int64] = [:]
    private var nodes: [UInt64: Node] = [:]
    private var entries: [UInt64: [String: UInt64]] = [:]
    private var uploads: [String: Upload] = [:]
    private var nextInode: UInt64 = 16
    private var nextID = 0
    /// Locks by namespace, inode and kind; sessions by namespace and id, with their expiry.
    private var lockSets: [String: [HeldLock]] = [:]
    private var lockSessions: [String: ContinuousClock.Instant] = [:]
    /// How long a lock session lives without a renewal (stowd's `--lock-lease`).
    public var lockLease: Duration = .seconds(20)

    public init() {}

    /// Creates a store with these namespaces already there.
    public init(namespaces: [Namespace]) {
        for ns in namespaces {
            let root = nextInode
            nextInode += 1
            let now = Timestamp.nowNanoseconds()
            nodes[root] = Node(kind: .directory, nlink: 2, etag: "d\(root)", atime: now, mtime: now, ctime: now, btime: now)
            entries[root] = [:]
            namespaceRoots[ns.name] = root
            namespaceCreated[ns.name] = now
        }
    }

    // MARK: Helpers

    private func newInode() -> UInt64 {
        defer { nextInode += 1 }
        return nextInode
    }

    private func newETag() -> String {
        nextID += 1
        return String(format: "mem%028x", nextID)
    }

    private func root(_ ns: Namespace) throws -> UInt64 {
        guard let r = namespaceRoots[ns.name] else { throw StorageError(.notFound, "namespace `\(ns)` does not exist", status: 404) }
        return r
    }

    private func resolve(_ ns: Namespace, _ path: StoragePath) throws -> UInt64 {
        var ino = try root(ns)
        for (i, name) in path.segments.enumerated() {
            if i > 0, nodes[ino]?.kind != .directory { throw StorageError(.notADirectory, "a parent of `\(path)` is not a folder", status: 409) }
            guard let next = entries[ino]?[name] else { throw StorageError(.notFound, "`\(path)` does not exist", status: 404) }
            ino = next
        }
        return ino
    }

    private func resolveFolder(_ ns: Namespace, _ path: StoragePath) throws -> UInt64 {
        let ino = try resolve(ns, path)
        guard nodes[ino]?.kind == .directory else { throw StorageError(.notADirectory, "`\(path)` is not a folder", status: 409) }
        return ino
    }

    private func touch(_ dir: UInt64) {
        let now = Timestamp.nowNanoseconds()
        nodes[dir]?.mtime = now
        nodes[dir]?.ctime = now
    }

    private func record(_ ns: Namespace, _ path: StoragePath, _ ino: UInt64) -> FileRecord {
        let n = nodes[ino]!
        let rel = Routes.cdn(ns, path)
        return FileRecord(
            id: String(format: "%024llx", ino), fileName: path.name, filePath: path.string,
            contentType: n.contentType ?? (n.kind == .directory ? "inode/directory" : ContentTypes.fallback), namespace: ns.name,
            size: n.kind == .symlink ? Int64(n.target?.utf8.count ?? 0) : Int64(n.content.readableBytes),
            cdn: CDNLink(url: "memory:/" + rel, absoluteUrl: "memory:/" + rel, relativeUrl: rel), tags: n.tags,
            createdOn: Timestamp.iso8601(nanoseconds: n.btime), modifiedOn: Timestamp.iso8601(nanoseconds: n.mtime), etag: n.etag, sha256: nil,
            metadata: n.metadata, isPublic: n.isPublic, kind: n.kind, inode: ino, mode: n.mode, uid: n.uid, gid: n.gid, nlink: n.nlink,
            atimeNs: n.atime, mtimeNs: n.mtime, ctimeNs: n.ctime, target: n.target, rdev: n.rdev)
    }

    private func insert(_ node: Node, parent: UInt64, name: String) -> UInt64 {
        let ino = newInode()
        nodes[ino] = node
        entries[parent, default: [:]][name] = ino
        if node.kind == .directory {
            entries[ino] = [:]
            nodes[parent]?.nlink += 1
        }
        touch(parent)
        return ino
    }

    private func unlinkEntry(parent: UInt64, name: String, ino: UInt64) {
        entries[parent]?[name] = nil
        touch(parent)
        guard var n = nodes[ino] else { return }
        if n.kind == .directory {
            nodes[ino] = nil
            entries[ino] = nil
            nodes[parent]?.nlink -= 1
            return
        }
        n.nlink -= 1
        n.ctime = Timestamp.nowNanoseconds()
        nodes[ino] = n.nlink == 0 ? nil : n
    }

    private func matches(_ ifMatch: String?, _ etag: String) -> Bool {
        guard let ifMatch else { return true }
        let v = ifMatch.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        return v == "*" || v == etag
    }

    // MARK: Namespaces

    public func namespaces() async throws -> [NamespaceRecord] {
        namespaceRoots.keys.sorted().map {
            NamespaceRecord(name: $0, createdOn: Timestamp.iso8601(nanoseconds: namespaceCreated[$0] ?? 0), rootInode: namespaceRoots[$0]!)
        }
    }

    public func createNamespace(_ ns: Namespace) async throws -> NamespaceRecord {
        if namespaceRoots[ns.name] == nil {
            let root = newInode()
            let now = Timestamp.nowNanoseconds()
            nodes[root] = Node(kind: .directory, nlink: 2, etag: "d\(root)", atime: now, mtime: now, ctime: now, btime: now)
            entries[root] = [:]
            namespaceRoots[ns.name] = root
            namespaceCreated[ns.name] = now
        }
        return NamespaceRecord(name: ns.name, createdOn: Timestamp.iso8601(nanoseconds: namespaceCreated[ns.name]!), rootInode: namespaceRoots[ns.name]!)
    }

    public func deleteNamespace(_ ns: Namespace, recursive: Bool) async throws {
        let r = try root(ns)
        if !(entries[r]?.isEmpty ?? true) && !recursive { throw StorageError(.notEmpty, "namespace `\(ns)` is not empty", status: 409) }
        namespaceRoots[ns.name] = nil
    }

    // MARK: Metadata

    public func record(_ ns: Namespace, _ path: StoragePath) async throws -> FileRecord {
        record(ns, path, try resolve(ns, path))
    }

    public func list(_ ns: Namespace, folder: StoragePath, after: String?, limit: Int) async throws -> ListPage {
        let dir = try resolveFolder(ns, folder)
        let names = (entries[dir] ?? [:]).keys.sorted().filter { after == nil || $0 > after! }
        let page = names.prefix(limit)
        let records = try page.map { record(ns, try folder.appending($0), entries[dir]![$0]!) }
        return ListPage(entries: records, next: names.count > limit ? page.last : nil)
    }

    public func update(_ ns: Namespace, _ path: StoragePath, _ patch: FilePatch, ifMatch: String?) async throws -> FileRecord {
        let ino = try resolve(ns, path)
        var n = nodes[ino]!
        guard matches(ifMatch, n.etag) else { throw StorageError(.preconditionFailed, "`\(path)` has changed", status: 412) }
        if let t = patch.tags { n.tags = t }
        if let m = patch.metadata { n.metadata = m }
        for (k, v) in patch.metadataSet ?? [:] { n.metadata[k] = v }
        for k in patch.metadataRemove ?? [] { n.metadata[k] = nil }
        if let c = patch.contentType { n.contentType = c }
        if let p = patch.isPublic { n.isPublic = p }
        if let m = patch.mode { n.mode = m & 0o7777 }
        if let u = patch.uid { n.uid = u }
        if let g = patch.gid { n.gid = g }
        if let a = patch.atimeNs { n.atime = a }
        if let size = patch.size, n.kind == .file {
            var content = n.content
            if Int64(content.readableBytes) > size {
                content = content.getSlice(at: content.readerIndex, length: Int(size))!
            } else {
                content.writeRepeatingByte(0, count: Int(size) - content.readableBytes)
            }
            n.content = content
            n.etag = newETag()
            n.mtime = Timestamp.nowNanoseconds()
        }
        if let m = patch.mtimeNs { n.mtime = m }
        n.ctime = Timestamp.nowNanoseconds()
        nodes[ino] = n
        return record(ns, path, ino)
    }

    /// Checks each file's inode too, as stowd's `…/delete/batch` does.
    public func deleteFiles(_ ns: Namespace, _ files: [FileDeletion]) async -> [Result<Void, StorageError>] {
        var results: [Result<Void, StorageError>] = []
        for f in files {
            do {
                if let inode = f.inode, try await record(ns, f.path).inode != inode {
                    throw StorageError(.preconditionFailed, "`\(f.path)` is another file now", status: 412)
                }
                try await delete(ns, f.path, ifMatch: f.ifMatch)
                results.append(.success(()))
            } catch let e as StorageError {
                results.append(.failure(e))
            } catch {
                results.append(.failure(StorageError(.localIO, "\(error)")))
            }
        }
        return results
    }

    public func delete(_ ns: Namespace, _ path: StoragePath, ifMatch: String?) async throws {
        let parent = try resolveFolder(ns, path.parent)
        guard let ino = entries[parent]?[path.name] else { throw StorageError(.notFound, "`\(path)` does not exist", status: 404) }
        guard nodes[ino]?.kind != .directory else { throw StorageError(.isADirectory, "`\(path)` is a folder", status: 409) }
        guard matches(ifMatch, nodes[ino]!.etag) else { throw StorageError(.preconditionFailed, "`\(path)` has changed", status: 412) }
        unlinkEntry(parent: parent, name: path.name, ino: ino)
    }

    public func makeFolder(_ ns: Namespace, _ path: StoragePath, _ request: FolderRequest) async throws -> FileRecord {
        var dir = try root(ns)
        let now = Timestamp.nowNanoseconds()
        for (i, name) in path.segments.enumerated() {
            let last = i == path.segments.count - 1
            if let existing = entries[dir]?[name] {
                guard nodes[existing]?.kind == .directory else { throw StorageError(.exists, "`\(name)` exists and is not a folder", status: 409) }
                if last && request.existOk == false { throw StorageError(.exists, "`\(path)` exists already", status: 409) }
                dir = existing
            } else {
                if !last && request.parents == false { throw StorageError(.notFound, "a parent of `\(path)` does not exist", status: 404) }
                dir = insert(
                    Node(kind: .directory, mode: request.mode, uid: request.uid, gid: request.gid, nlink: 2, etag: "d", atime: now,
                         mtime: now, ctime: now, btime: now), parent: dir, name: name)
            }
        }
        return record(ns, path, dir)
    }

    public func removeFolder(_ ns: Namespace, _ path: StoragePath) async throws {
        let parent = try resolveFolder(ns, path.parent)
        guard let ino = entries[parent]?[path.name] else { throw StorageError(.notFound, "`\(path)` does not exist", status: 404) }
        guard nodes[ino]?.kind == .directory else { throw StorageError(.notADirectory, "`\(path)` is not a folder", status: 409) }
        guard entries[ino]?.isEmpty ?? true else { throw StorageError(.notEmpty, "folder `\(path)` is not empty", status: 409) }
        unlinkEntry(parent: parent, name: path.name, ino: ino)
    }

    public func rename(_ ns: Namespace, from: StoragePath, to: StoragePath, replace: Bool, exchange: Bool) async throws -> FileRecord {
        let fromParent = try resolveFolder(ns, from.parent)
        guard let ino = entries[fromParent]?[from.name] else { throw StorageError(.notFound, "`\(from)` does not exist", status: 404) }
        let toParent = try resolveFolder(ns, to.parent)
        let source = nodes[ino]!
        if source.kind == .directory && to.isWithin(from) && to != from {
            throw StorageError(.invalidRename, "cannot move `\(from)` into itself", status: 400)
        }
        let existing = entries[toParent]?[to.name]
        if exchange {
            guard let other = existing else { throw StorageError(.notFound, "`\(to)` does not exist", status: 404) }
            entries[fromParent]![from.name] = other
            entries[toParent]![to.name] = ino
            touch(fromParent)
            touch(toParent)
            return record(ns, to, ino)
        }
        if let existing {
            if existing == ino { return record(ns, to, ino) }
            guard replace else { throw StorageError(.exists, "`\(to)` exists already", status: 409) }
            let target = nodes[existing]!
            if source.kind == .directory {
                guard target.kind == .directory else { throw StorageError(.notADirectory, "`\(to)` is not a folder", status: 409) }
                guard entries[existing]?.isEmpty ?? true else { throw StorageError(.notEmpty, "`\(to)` is not empty", status: 409) }
            } else if target.kind == .directory {
                throw StorageError(.isADirectory, "`\(to)` is a folder", status: 409)
            }
            unlinkEntry(parent: toParent, name: to.name, ino: existing)
        }
        entries[fromParent]![from.name] = nil
        entries[toParent, default: [:]][to.name] = ino
        if source.kind == .directory && fromParent != toParent {
            nodes[fromParent]?.nlink -= 1
            nodes[toParent]?.nlink += 1
        }
        nodes[ino]?.ctime = Timestamp.nowNanoseconds()
        touch(fromParent)
        touch(toParent)
        return record(ns, to, ino)
    }

    public func makeNode(_ ns: Namespace, _ path: StoragePath, _ request: NodeRequest) async throws -> FileRecord {
        let parent = try resolveFolder(ns, path.parent)
        guard entries[parent]?[path.name] == nil else { throw StorageError(.exists, "`\(path)` exists already", status: 409) }
        let now = Timestamp.nowNanoseconds()
        let ino = insert(
            Node(kind: request.kind, mode: request.mode, uid: request.uid, gid: request.gid,
                 nlink: 1, etag: newETag(), target: request.target, rdev: request.rdev, atime: now, mtime: now, ctime: now, btime: now),
            parent: parent, name: path.name)
        return record(ns, path, ino)
    }

    public func link(_ ns: Namespace, from: StoragePath, to: StoragePath) async throws -> FileRecord {
        let ino = try resolve(ns, from)
        guard nodes[ino]?.kind != .directory else { throw StorageError(.isADirectory, "`\(from)` is a folder", status: 409) }
        let parent = try resolveFolder(ns, to.parent)
        guard entries[parent]?[to.name] == nil else { throw StorageError(.exists, "`\(to)` exists already", status: 409) }
        entries[parent]![to.name] = ino
        nodes[ino]!.nlink += 1
        nodes[ino]!.ctime = Timestamp.nowNanoseconds()
        touch(parent)
        return record(ns, to, ino)
    }

    // MARK: Uploads

    public func startUpload(_ ns: Namespace, _ request: StartUploadRequest) async throws -> StartUploadResponse {
        _ = try root(ns)
        let path = try StoragePath(request.fileName)
        nextID += 1
        let id = String(format: "%032x", nextID)
        uploads[id] = Upload(namespace: ns, path: path, request: request)
        let ct = request.contentType ?? ContentTypes.infer(fileName: path.name)
        let rel = Routes.cdn(ns, path)
        return StartUploadResponse(
            fileName: path.name, filePath: path.string, contentType: ct, namespace: ns.name, size: request.size, tags: request.tags ?? [],
            upload: UploadLink(url: "memory://upload/\(id)", expiry: 1800, expiresAt: Timestamp.nowSeconds() + 1800),
            cdn: CDNLink(url: "memory:/" + rel, absoluteUrl: "memory:/" + rel, relativeUrl: rel), params: request.params,
            deferLength: request.deferLength == true ? true : nil)
    }

    private func uploadID(_ session: StartUploadResponse) throws -> String {
        let id = String(session.upload.url.dropFirst("memory://upload/".count))
        guard uploads[id] != nil else { throw StorageError(.notFound, "no such upload", status: 404) }
        return id
    }

    public func uploadedBytes(_ session: StartUploadResponse) async throws -> Int64 {
        let u = uploads[try uploadID(session)]!
        return u.resultInode != nil ? u.request.size : Int64(u.bytes.readableBytes)
    }

    public func send(_ session: StartUploadResponse, from source: UploadSource, offset: Int64, end: Int64, progress: ProgressHandler?) async throws -> Int64 {
        let id = try uploadID(session)
        var u = uploads[id]!
        let sentSize = min(u.request.size, u.request.params?.zerosFrom ?? u.request.size)
        let whole = u.request.deferLength != true && offset == 0 && end == sentSize
        if !whole && offset != Int64(u.bytes.readableBytes) {
            throw StorageError(.offsetMismatch, "offset \(offset) but the upload has \(u.bytes.readableBytes)", status: 409)
        }
        var chunk: ByteBuffer
        switch source {
        case .bytes(let b):
            chunk = b.getSlice(at: b.readerIndex + Int(offset), length: Int(end - offset)) ?? ByteBuffer()
        case .file(let path):
            guard let h = FileHandle(forReadingAtPath: path) else { throw StorageError(.localIO, "cannot open \(path)") }
            defer { try? h.close() }
            try h.seek(toOffset: UInt64(offset))
            chunk = ByteBuffer(data: try h.read(upToCount: Int(end - offset)) ?? Data())
        }
        if whole { u.bytes.clear() }
        u.bytes.writeBuffer(&chunk)
        uploads[id] = u
        progress?(Int64(u.bytes.readableBytes), u.request.size)
        return Int64(u.bytes.readableBytes)
    }

    public func completeUpload(_ session: StartUploadResponse) async throws -> FileRecord {
        let id = try uploadID(session)
        var u = uploads[id]!
        if let ino = u.resultInode, nodes[ino] != nil { return record(u.namespace, u.path, ino) }
        // A deferred-length upload learns its size here.
        if u.request.deferLength == true {
            // And its final declaration, as stowd takes it.
            u.request.size = session.size
            u.request.params = session.params
            u.request.tags = session.tags
            u.request.contentType = session.contentType
        }
        // A declared tail of zeros is not sent (stowd makes it a hole); here it is written out.
        if let zerosFrom = u.request.params?.zerosFrom, u.request.deferLength != true, Int64(u.bytes.readableBytes) == zerosFrom, zerosFrom < u.request.size {
            u.bytes.writeRepeatingByte(0, count: Int(u.request.size - zerosFrom))
        }
        guard Int64(u.bytes.readableBytes) == u.request.size else {
            throw StorageError(.incomplete, "only \(u.bytes.readableBytes) of \(u.request.size) bytes arrived", status: 409)
        }
        let ns = u.namespace, path = u.path, p = u.request.params ?? UploadParams()
        _ = try await makeFolder(ns, path.parent, FolderRequest())
        let parent = try resolveFolder(ns, path.parent)
        let now = Timestamp.nowNanoseconds()
        let ct = u.request.contentType ?? ContentTypes.infer(fileName: path.name)
        var ino: UInt64
        if let existing = entries[parent]?[path.name] {
            if p.ifNoneMatch == "*" { throw StorageError(.preconditionFailed, "`\(path)` exists", status: 412) }
            guard matches(p.ifMatch, nodes[existing]!.etag) else { throw StorageError(.preconditionFailed, "`\(path)` has changed", status: 412) }
            var n = nodes[existing]!
            guard n.kind != .directory else { throw StorageError(.isADirectory, "`\(path)` is a folder", status: 409) }
            if n.kind == .file {
                n.content = u.bytes
                n.etag = newETag()
                n.contentType = ct
                if let t = u.request.tags { n.tags = t }
                if let m = p.metadata { n.metadata = m }
                if let pub = p.isPublic { n.isPublic = pub }
                if let mode = p.mode { n.mode = mode }
                if let uid = p.uid { n.uid = uid }
                if let gid = p.gid { n.gid = gid }
                n.mtime = p.mtimeNs ?? now
                n.ctime = now
                nodes[existing] = n
                ino = existing
            } else {
                unlinkEntry(parent: parent, name: path.name, ino: existing)
                ino = 0
            }
        } else {
            if let m = p.ifMatch, m != "*" { throw StorageError(.preconditionFailed, "`\(path)` does not exist", status: 412) }
            ino = 0
        }
        if ino == 0 {
            ino = insert(
                Node(kind: .file, mode: p.mode, uid: p.uid, gid: p.gid, nlink: 1, content: u.bytes, etag: newETag(), tags: u.request.tags ?? [],
                     metadata: p.metadata ?? [:], contentType: ct, isPublic: p.isPublic ?? false, atime: p.atimeNs ?? now, mtime: p.mtimeNs ?? now, ctime: now,
                     btime: now), parent: parent, name: path.name)
        }
        u.resultInode = ino
        uploads[id] = u
        return record(ns, path, ino)
    }

    /// Links here never expire: the session as it is, once it is known to be open.
    public func renewUpload(_ session: StartUploadResponse) async throws -> StartUploadResponse {
        let id = try uploadID(session)
        if uploads[id]?.resultInode != nil { throw StorageError(.conflict, "this upload has completed already", status: 409) }
        return session
    }

    public func abandonUpload(_ session: StartUploadResponse) async throws {
        uploads[String(session.upload.url.dropFirst("memory://upload/".count))] = nil
    }

    // MARK: Reads

    public func signedURLs(_ ns: Namespace, _ paths: [StoragePath], expiry: Int) async throws -> [SignedURL] {
        _ = try root(ns)
        return paths.map {
            let rel = Routes.cdn(ns, $0)
            return SignedURL(url: rel, signedUrl: "memory:/" + rel + "?expires=\(Timestamp.nowSeconds() + Int64(expiry))", expiry: expiry, expiresAt: nil)
        }
    }

    public func read(url: String, range: Range<Int64>?, ifMatch: String?) async throws -> ReadResult {
        guard url.hasPrefix("memory://cdn/") else { throw StorageError(.badRequest, "not a memory URL: \(url)") }
        let rest = url.dropFirst("memory://cdn/".count).split(separator: "?").first ?? ""
        let parts = rest.split(separator: "/").map { PathEncoding.decode($0) ?? String($0) }
        guard let first = parts.first else { throw StorageError(.badRequest, "bad URL") }
        let ns = try Namespace(first)
        let path = try StoragePath(segments: Array(parts.dropFirst()))
        let ino = try resolve(ns, path)
        let n = nodes[ino]!
        guard n.kind == .file else { throw StorageError(.notFound, "`\(path)` is not a file", status: 404) }
        if let ifMatch, !matches(ifMatch, n.etag) { throw StorageError(.preconditionFailed, "changed", status: 412) }
        let size = Int64(n.content.readableBytes)
        var r = range ?? 0..<size
        if r.lowerBound >= size && size > 0 { throw StorageError(.rangeNotSatisfiable, "past the end", status: 416) }
        r = r.clamped(to: 0..<size)
        let bytes = n.content.getSlice(at: n.content.readerIndex + Int(r.lowerBound), length: Int(r.count)) ?? ByteBuffer()
        return ReadResult(bytes: bytes, etag: n.etag, totalSize: size)
    }
}

// MARK: - Locks, with stowd's rules (`LockArithmetic`); waits poll every 2 ms.
extension InMemoryObjectStore {
    public func setLockLease(_ lease: Duration) { lockLease = lease }

    private func liveLocks(_ key: String, _ ns: Namespace) -> [HeldLock] {
        let now = ContinuousClock.now
        return (lockSets[key] ?? []).filter { (lockSessions[ns.name + "/" + $0.session] ?? now) > now }
    }

    public func renewLockSession(_ ns: Namespace, id: String) async throws -> LockSessionResponse {
        guard namespaceRoots[ns.name] != nil else { throw StorageError(.notFound, "no namespace `\(ns)`", status: 404) }
        let now = ContinuousClock.now
        let existed = (lockSessions[ns.name + "/" + id] ?? now) > now
        lockSessions[ns.name + "/" + id] = now + lockLease
        return LockSessionResponse(leaseSeconds: Int(lockLease.components.seconds), existed: existed)
    }

    public func endLockSession(_ ns: Namespace, id: String) async throws { lockSessions[ns.name + "/" + id] = nil }

    public func lock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse {
        _ = try await renewLockSession(ns, id: request.session)
        let deadline = ContinuousClock.now + .milliseconds(request.waitMs ?? 0)
        while true {
            let answer = apply(ns, request, test: false)
            if answer.granted || ContinuousClock.now >= deadline { return answer }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    public func testLock(_ ns: Namespace, _ request: LockRequest) async throws -> LockResponse { apply(ns, request, test: true) }

    private func apply(_ ns: Namespace, _ request: LockRequest, test: Bool) -> LockResponse {
        let key = "\(ns.name)/\(request.ino)/\(request.kind.rawValue)"
        var wanted = request.asHeld
        if request.kind == .flock {
            wanted.start = 0
            wanted.end = .max
        }
        let held = liveLocks(key, ns)
        if let conflict = LockArithmetic.conflict(held, wanted) { return LockResponse(granted: false, conflict: conflict) }
        if !test { lockSets[key] = LockArithmetic.apply(held, wanted) }
        return LockResponse(granted: true)
    }
}
