import Crypto
import Foundation
import Prometheus
import HTTPTypes
import Hummingbird
import NIOCore
import StorageProtocol

/// start → PUT (or tus PATCH) to the storage link → complete.
extension StowService {
    func addUploadRoutes(to router: Router<BasicRequestContext>) {
        let v2 = "\(Routes.prefix)/v2.0/namespaces/:ns/upload"
        let v1 = "\(Routes.prefix)/v1.0/namespaces/:ns/upload"
        // The router ignores a trailing slash, so this also serves the v1.0 `…/start/` and `…/complete/`.
        for base in [v2, v1] {
            router.post("\(base)/start") { req, ctx in try await self.start(req, ctx) }
            router.post("\(base)/complete") { req, ctx in try await self.complete(req, ctx) }
        }
        if config.uploadExtensions { router.post("\(v2)/direct") { req, ctx in try await self.direct(req, ctx) } }
        router.post("\(v2)/renew") { req, ctx in try await self.renew(req, ctx) }
        router.post("\(v2)/parts") { req, ctx in try await self.parts(req, ctx) }
        let link = "/storage/uploads/:id"
        router.put(RouterPath(link)) { req, ctx in try await self.storageLink(req, ctx) }
        router.patch(RouterPath(link)) { req, ctx in try await self.storageLink(req, ctx) }
        router.head(RouterPath(link)) { req, ctx in try await self.storageLink(req, ctx) }
        router.delete(RouterPath(link)) { req, ctx in try await self.storageLink(req, ctx) }
        router.on(RouterPath(link), method: .options) { _, _ in self.tusOptions() }
    }

    func start(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .write)
        let body = try await decode(StartUploadRequest.self, from: request)
        let path = try StoragePath(body.fileName)
        let upload = try await createUpload(
            declareUpload(
                ns: ns, path: path, size: body.size, contentType: body.contentType, tags: body.tags, params: body.params ?? UploadParams(),
                autoComplete: false, deferLength: body.deferLength, allowDefer: true))
        let base = baseURL(request)
        return json(try await withDirect(startResponse(upload, base: base), upload))
    }

    /// A start answer with the way straight to the object store, where there is one: a file sent
    /// whole or in parts by the client, not through this server. A deferred length is offered
    /// parts only, their number open (`parts` 0): a file still being written sends each part as
    /// it fills, and complete names the size. A declared tail of zeros goes through the storage
    /// link.
    func withDirect(_ response: StartUploadResponse, _ upload: UploadRecord) async throws -> StartUploadResponse {
        guard upload.params.zerosFrom == nil, upload.size > 0 || upload.isDeferred, !upload.autoComplete else { return response }
        var r = response
        let lifetime = max(60, Int(upload.expiresAt - Timestamp.nowSeconds()))
        r.upload.direct = try await blobs.directUpload(
            upload.id, size: upload.isDeferred ? nil : upload.size, sha256: upload.params.sha256, expiresIn: lifetime)
        return r
    }

    /// Presigned URLs of parts of a direct upload, and the parts the store has (to resume).
    func parts(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .write)
        let body = try await decode(UploadPartsRequest.self, from: request)
        guard body.numbers.count <= 1000 else { throw APIError.badRequest("at most 1000 part numbers a request") }
        guard let id = Self.uploadID(fromLink: body.upload.upload.url) else {
            throw APIError.badRequest("`upload.upload.url` is not a storage link of this server")
        }
        guard let upload = try await store.upload(id: id), upload.namespace == ns else {
            throw APIError.notFound("no upload \(id) in namespace `\(ns)` (it may have expired)")
        }
        guard upload.state == .open else { throw APIError.conflict(.conflict, "this upload has completed already") }
        guard upload.params.zerosFrom == nil else {
            throw APIError.badRequest("this upload goes through its storage link (a declared tail of zeros)")
        }
        // Bytes sent straight to the store do not pass here: asking for parts is the upload's
        // progress, and keeps its session alive (the collector would take it otherwise).
        try await store.extendUpload(id: id, until: Timestamp.nowSeconds() + config.uploadLinkLifetime)
        let lifetime = Int(config.uploadLinkLifetime)
        let size = upload.isDeferred ? nil : upload.size
        guard let answer = try await blobs.directParts(id, size: size, numbers: body.numbers, expiresIn: lifetime) else {
            throw APIError.notFound("this server takes bytes through its storage links only (its files are not in an object store)")
        }
        return json(answer)
    }

    /// start, PUT and complete in one request, for small files: the declaration (start's JSON
    /// body) comes base64-encoded in the `Stow-Upload` header, the bytes as the body; the answer is
    /// complete's. All or nothing: a body that breaks off or does not match leaves no trace.
    func direct(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .write)
        guard let header = request.headers[HTTPField.Name(Routes.directUploadHeader)!] else {
            throw APIError.badRequest("send the upload's declaration (start's JSON body), base64-encoded, in the `\(Routes.directUploadHeader)` header")
        }
        guard header.utf8.count <= config.maxJSONBody * 2, let data = Data(base64Encoded: header) else {
            throw APIError.badRequest("the `\(Routes.directUploadHeader)` header is not base64")
        }
        let body: StartUploadRequest
        do {
            body = try JSONDecoder().decode(StartUploadRequest.self, from: data)
        } catch let e as DecodingError {
            throw APIError.badRequest("malformed JSON in `\(Routes.directUploadHeader)`: \(APIError.describe(e))")
        }
        if let declared = HTTPNumber.nonNegative(request.headers[.contentLength]), declared != body.size {
            throw APIError(.badRequest, .sizeMismatch, "Content-Length is \(declared) but the declaration says size \(body.size)")
        }
        let declared = try await declareUpload(
            ns: ns, path: try StoragePath(body.fileName), size: body.size, contentType: body.contentType, tags: body.tags,
            params: body.params ?? UploadParams(), autoComplete: false, deferLength: body.deferLength)
        if declared.size <= inlineLimit {
            return json(record(try await storeInline(request, declared), base: baseURL(request)), status: .created)
        }
        let upload = try await createUpload(declared)
        do {
            let end = try await receive(request, into: upload, at: 0, checksum: nil)
            guard end == upload.size else {
                throw APIError(.badRequest, .sizeMismatch, "received \(end) of the \(upload.size) bytes declared")
            }
            let node = try await finish(upload)
            return json(record(node, base: baseURL(request)), status: .created)
        } catch {
            await discardUnlessCompleted(upload)
            throw error
        }
    }

    /// A small direct upload: the body is gathered in memory, and its bytes and the file's record
    /// are stored in one transaction (no upload session, no staging file). All or nothing.
    func storeInline(_ request: Request, _ upload: UploadRecord) async throws -> Node {
        var bytes = Data(capacity: Int(upload.size))
        do {
            for try await buffer in request.body {
                guard bytes.count + buffer.readableBytes <= upload.size else {
                    throw APIError(.contentTooLarge, .payloadTooLarge, "the body is longer than the \(upload.size) bytes declared")
                }
                bytes.append(contentsOf: buffer.readableBytesView)
            }
        } catch let e as APIError {
            throw e
        } catch {
            throw APIError(.badRequest, .sizeMismatch, "the body broke off after \(bytes.count) bytes: \(error)")
        }
        metrics.bytesReceived.increment(by: Int64(bytes.count))
        guard bytes.count == upload.size else {
            throw APIError(.badRequest, .sizeMismatch, "received \(bytes.count) of the \(upload.size) bytes declared")
        }
        let node = try await store.publishInline([try inlineFile(upload, bytes)])[0].get()
        metrics.uploadsStarted.increment()
        metrics.uploadsCompleted.increment()
        return node
    }

    /// After a failed one-request upload: its session and staged bytes go, unless it completed
    /// after all (then the file is the server's, and the client learns it on retry).
    func discardUnlessCompleted(_ upload: UploadRecord) async {
        guard (try? await store.upload(id: upload.id))?.state != .completed else { return }
        try? await store.deleteUpload(id: upload.id)
        try? await blobs.deleteStaged(upload.id)
        activeUploads.forget(upload.id)
    }

    /// Refuses content whose SHA-256 is not the one the declaration expects (`params.sha256`).
    func verify(_ digest: String, of upload: UploadRecord) throws {
        if let expected = upload.params.sha256, expected.lowercased() != digest {
            throw APIError(APIError.checksumStatus, .checksumMismatch, "the content's SHA-256 is \(digest), not \(expected)")
        }
    }

    /// A small file's bytes, checked against its declaration, ready to be stored inline.
    func inlineFile(_ upload: UploadRecord, _ bytes: Data) throws -> InlineFile {
        let digest = SHA256.hash(data: bytes).hexString
        try verify(digest, of: upload)
        return InlineFile(upload: upload, blob: BlobInfo(id: upload.id, size: upload.size, sha256: digest), bytes: bytes)
    }

    /// A staging writer for bytes written in one go (not through `receive`), hashed on the way, so
    /// that `finish` need not read them back (a store in S3 could not).
    func openStagedHashing(_ id: String, expecting: Int64?) async throws -> any StagedWriter {
        DigestingWriter(inner: try await blobs.openStaged(id, at: 0, expecting: expecting), digest: activeUploads.startDigest(id))
    }

    /// Validates an upload's declaration and records the session.
    func createUpload(
        id: String = StowService.newID(), ns: Namespace, path: StoragePath, size: Int64, contentType: String?, tags: [String]?, params: UploadParams, autoComplete: Bool
    ) async throws -> UploadRecord {
        try await createUpload(
            declareUpload(id: id, ns: ns, path: path, size: size, contentType: contentType, tags: tags, params: params, autoComplete: autoComplete))
    }

    /// Records a validated upload session.
    func createUpload(_ upload: UploadRecord) async throws -> UploadRecord {
        try await store.createUpload(upload)
        metrics.uploadsStarted.increment()
        return upload
    }

    /// Refuses a declaration's content type, tags or params that the server cannot keep.
    func validateDeclaration(contentType: String?, tags: [String]?, params: UploadParams) throws {
        try validate(contentType: contentType)
        try validate(tags: tags)
        try validate(metadata: params.metadata)
        if let sha = params.sha256, sha.count != 64 || !sha.allSatisfy(\.isHexDigit) {
            throw APIError.badRequest("`params.sha256` must be 64 hex digits")
        }
        if let inm = params.ifNoneMatch, inm != "*" { throw APIError.badRequest("`params.if_none_match` can only be \"*\"") }
    }

    /// Validates an upload's declaration; nothing is recorded. `precheck`: also refuse now what
    /// publishing would refuse (an existing folder, `if_none_match`), before any byte is sent.
    /// `deferLength` (allowed where `allowDefer`): the size comes with complete.
    func declareUpload(
        id: String = StowService.newID(), ns: Namespace, path: StoragePath, size: Int64, contentType: String?, tags: [String]?, params: UploadParams,
        autoComplete: Bool, precheck: Bool = true, deferLength: Bool? = nil, allowDefer: Bool = false
    ) async throws -> UploadRecord {
        guard size >= 0 else { throw APIError.badRequest("`size` must be zero or more") }
        let deferred = deferLength == true
        if deferred {
            guard allowDefer else { throw APIError.badRequest("`defer_length` is for the three-step upload (start, PATCH at increasing offsets, complete with the size)") }
            guard size == 0 else { throw APIError.badRequest("with `defer_length`, `size` must be 0 (complete names the size)") }
        }
        guard size <= config.maxUploadSize else {
            throw APIError(.contentTooLarge, .payloadTooLarge, "`size` \(size) is larger than the \(config.maxUploadSize) bytes allowed")
        }
        try validateDeclaration(contentType: contentType, tags: tags, params: params)
        if let z = params.zerosFrom {
            guard !deferred, z >= 0, z <= size else { throw APIError.badRequest("`params.zeros_from` must be between 0 and `size` (and not with `defer_length`)") }
        }
        // An exclusive create waits for a mount that decides the folder's exclusive creates itself.
        if params.ifNoneMatch == "*" { try await awaitNamesLease(ns, path) }
        // Refuse now what complete would refuse anyway, so that no bytes are sent in vain.
        if precheck {
            do {
                let existing = try await store.node(ns, path)
                if existing.inode.kind == .directory { throw StoreError.isADirectory(path) }
                if params.ifNoneMatch == "*" { throw StoreError.preconditionFailed("`\(path)` exists already") }
            } catch StoreError.notFound {
            } catch StoreError.notADirectory(let p) {
                throw StoreError.notADirectory(p)
            }
        }
        let now = Timestamp.nowNanoseconds()
        var upload = UploadRecord(
            id: id, namespace: ns, path: path, size: size, contentType: contentType ?? ContentTypes.infer(fileName: path.name),
            tags: tags, params: params, createdNs: now, expiresAt: now / 1_000_000_000 + config.uploadLinkLifetime, state: .open,
            resultInode: nil, autoComplete: autoComplete)
        if deferred { upload.size = UploadRecord.deferredSize }
        return upload
    }

    func startResponse(_ u: UploadRecord, base: String) -> StartUploadResponse {
        let link = base + Routes.storageLink(u.id) + "?" + signer.query(scope: .upload, resource: URLSigner.uploadResource(u.id), expires: u.expiresAt)
        let relative = Routes.cdn(u.namespace, u.path)
        return StartUploadResponse(
            fileName: u.path.name, filePath: u.path.string, contentType: u.contentType, namespace: u.namespace.name, size: u.isDeferred ? 0 : u.size,
            tags: u.tags ?? [], upload: UploadLink(url: link, expiry: Int(config.uploadLinkLifetime), expiresAt: u.expiresAt),
            cdn: CDNLink(url: base + relative, absoluteUrl: base + relative, relativeUrl: relative), params: u.params,
            deferLength: u.isDeferred ? true : nil)
    }

    /// What complete and renew take: the namespace (the token may write it), the start answer in
    /// the body, and the upload id of its storage link.
    func sessionRequest(_ request: Request, _ context: BasicRequestContext) async throws -> (ns: Namespace, body: StartUploadResponse, id: String) {
        let ns = try namespace(context)
        try authorize(request, ns.name, .write)
        let body = try await decode(StartUploadResponse.self, from: request)
        guard let id = Self.uploadID(fromLink: body.upload.url) else {
            throw APIError.badRequest("`upload.url` is not a storage link of this server")
        }
        return (ns, body, id)
    }

    func complete(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (ns, body, id) = try await sessionRequest(request, context)
        guard var upload = try await store.upload(id: id), upload.namespace == ns else {
            throw APIError.notFound("no upload \(id) in namespace `\(ns)` (it may have expired)")
        }
        if upload.isDeferred && upload.state == .open {
            // The size is known now: this body's `size`, which must be all that arrived (finish checks).
            guard body.size >= 0, body.size <= config.maxUploadSize else {
                throw APIError.badRequest("`size` must be the upload's final size (0 to \(config.maxUploadSize)) for a deferred-length upload")
            }
            upload.size = body.size
            // And its final declaration: the file's attributes changed while it was written.
            try validateDeclaration(contentType: body.contentType, tags: body.tags, params: body.params ?? upload.params)
            upload.params = body.params ?? upload.params
            upload.contentType = body.contentType
            upload.tags = body.tags
        }
        guard body.filePath.isEmpty || (try? StoragePath(body.filePath)) == upload.path else {
            throw APIError.badRequest("`file_path` does not match the upload's path `\(upload.path)`")
        }
        let node = try await finish(upload)
        var record = record(node, base: baseURL(request))
        record.upload = startResponse(upload, base: baseURL(request)).upload
        return json(record)
    }

    /// A fresh storage link for an upload still open (its old one expired while the client was
    /// away: a laptop asleep, a server that was down). The body is the start answer, as for
    /// complete; the answer is a start answer with the new link. The bytes sent so far stay.
    func renew(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let (ns, _, id) = try await sessionRequest(request, context)
        // Under the session's lock, as the collector takes it: a session being collected is gone
        // when this reads it, never renewed after its bytes were removed.
        let renewed = try await activeUploads.exclusively(id) { () -> UploadRecord in
            guard let upload = try await store.upload(id: id), upload.namespace == ns else {
                throw APIError.notFound("no upload \(id) in namespace `\(ns)` (it may have been collected; start again)")
            }
            guard upload.state == .open else { throw APIError.conflict(.conflict, "this upload has completed already") }
            try await store.extendUpload(id: id, until: Timestamp.nowSeconds() + config.uploadLinkLifetime)
            return try await store.upload(id: id) ?? upload
        }
        return json(try await withDirect(startResponse(renewed, base: baseURL(request)), renewed))
    }

    /// Publishes an upload whose bytes have all arrived; idempotent once it succeeded.
    func finish(_ upload: UploadRecord) async throws -> Node {
        if upload.state == .completed {
            guard let ino = upload.resultInode, let node = try await store.node(inode: ino) else {
                throw APIError(.gone, .gone, "this upload completed, but its file has since been removed or replaced")
            }
            return node
        }
        return try await activeUploads.exclusively(upload.id) {
            // Re-read: a concurrent complete may have finished it.
            guard let current = try await store.upload(id: upload.id) else { throw APIError.notFound("upload \(upload.id) is gone") }
            if current.state == .completed { return try await finish(current) }
            var received = try await blobs.stagedSize(upload.id)
            let alreadyPublished = received == nil ? try await blobs.blobSize(upload.id) : nil
            if received == nil, alreadyPublished == nil, upload.size == 0 {
                var w = try await blobs.openStaged(upload.id, at: 0, expecting: 0)
                received = try await w.finish()
            }
            var have = received ?? alreadyPublished ?? 0
            let sent = received == nil && alreadyPublished != nil ? upload.size : upload.sentSize
            guard have == sent else {
                throw APIError(.conflict, .incomplete, "only \(have) of \(sent) bytes have arrived; send the rest, then complete")
            }
            var digest: String?
            // A store whose staged bytes cannot be read back cheaply (S3: parts of a multipart
            // upload) hashes the published blob instead, and only to check a declared SHA-256.
            var hashAfterPublish = false
            if received != nil && upload.size > have {
                // A declared tail of zeros (`zeros_from`): a hole at the end of the file, no bytes
                // written. Hashed only while that is cheap, or when the client asked for a check.
                try await blobs.truncateStaged(upload.id, to: upload.size)
                if upload.size - have <= BlobStoreLimits.hashedZeros || upload.params.sha256 != nil {
                    if let d = activeUploads.digest(upload.id, bytes: have, thenZeros: upload.size - have) {
                        digest = d
                    } else if blobs.hashesStagedBytesCheaply {
                        digest = try await blobs.sha256(ofStaged: upload.id)
                    } else {
                        hashAfterPublish = upload.params.sha256 != nil
                    }
                }
                have = upload.size
            } else if let d = activeUploads.digest(upload.id, bytes: have) {
                digest = d
            } else if blobs.hashesStagedBytesCheaply {
                digest = try await blobs.sha256(ofStaged: upload.id)
            } else {
                // Parts of a multipart upload, or a blob sent whole straight to the store: read
                // back (once published) only to check a declared SHA-256.
                hashAfterPublish = upload.params.sha256 != nil
            }
            if let digest { try verify(digest, of: upload) } else if upload.params.sha256 != nil && !hashAfterPublish {
                throw APIError(APIError.checksumStatus, .checksumMismatch, "the content's SHA-256 could not be checked")
            }
            if received != nil { try await blobs.publish(upload.id) }
            if hashAfterPublish {
                let d = try await blobs.sha256(ofStaged: upload.id)
                do {
                    try verify(d, of: upload)
                } catch {
                    // Not the content declared: the blob goes, and the upload starts again from 0.
                    try? await blobs.deleteBlob(upload.id)
                    throw error
                }
                digest = d
            }
            let node = try await store.publish(upload, blob: BlobInfo(id: upload.id, size: have, sha256: digest))
            activeUploads.forget(upload.id)
            metrics.uploadsCompleted.increment()
            return node
        }
    }

    /// The upload id in a storage link (`…/storage/uploads/{id}?…` or `…/tus/files/{id}`).
    static func uploadID(fromLink link: String) -> String? {
        let path = link.split(separator: "?", maxSplits: 1).first.map(String.init) ?? link
        let parts = path.split(separator: "/")
        guard parts.count >= 2 else { return nil }
        let kind = parts[parts.count - 2]
        guard kind == "uploads" || kind == "files" else { return nil }
        let id = String(parts[parts.count - 1])
        guard id.count == 32, id.allSatisfy(\.isHexDigit) else { return nil }
        return id
    }

    // MARK: - The storage link

    func storageLink(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let id = context.parameters.get("id") ?? ""
        let q = request.uri.queryParameters
        let now = Timestamp.nowSeconds()
        let upload: UploadRecord?
        do {
            try signer.verify(
                q[Substring(Routes.signatureParameter)].map(String.init), scope: .upload, resource: URLSigner.uploadResource(id),
                expires: HTTPNumber.nonNegative(q[Substring(Routes.expiresParameter)]), now: now)
            upload = try await store.upload(id: id)
        } catch URLSigner.Rejection.expired {
            // The link was signed here, but long ago: it still serves an upload that keeps making
            // progress (each body moves the session's expiry on), so a large upload on a slow link
            // is not cut off at the link's lifetime and started again forever.
            // Alive: it made progress within a lifetime, give or take one more for a request that
            // was slow to arrive (a loaded server, a congested link) — idle past that, it is over.
            guard let live = try await store.upload(id: id), live.state == .open, live.expiresAt + config.uploadLinkLifetime > now else {
                throw URLSigner.Rejection.expired
            }
            upload = live
        }
        guard let upload else { throw APIError.notFound("no such upload (it may have expired)") }
        return try await uploadResource(request, upload, base: baseURL(request))
    }

    /// HEAD / PUT / PATCH / DELETE of an upload resource (the storage link, or a tus file).
    func uploadResource(_ request: Request, _ upload: UploadRecord, base: String) async throws -> Response {
        var headers: HTTPFields = [.cacheControl: "no-store"]
        headers[HTTPField.Name(Tus.resumable)!] = Tus.version
        headers[HTTPField.Name(Tus.uploadExpires)!] = HTTPDate.format(seconds: upload.expiresAt)
        let offsetName = HTTPField.Name(Tus.uploadOffset)!
        switch request.method {
        case .head:
            let offset = upload.state == .completed ? upload.size : (try await blobs.stagedSize(upload.id) ?? 0)
            headers[offsetName] = String(offset)
            if upload.isDeferred {
                headers[HTTPField.Name(Tus.uploadDeferLength)!] = "1"
            } else {
                headers[HTTPField.Name(Tus.uploadLength)!] = String(upload.size)
            }
            return Response(status: .ok, headers: headers)
        case .delete:
            guard upload.state == .open else { throw APIError.conflict(.conflict, "this upload has completed; delete the file instead") }
            try await activeUploads.exclusively(upload.id) {
                try await store.deleteUpload(id: upload.id)
                try? await blobs.deleteStaged(upload.id)
                activeUploads.forget(upload.id)
            }
            return Response(status: .noContent, headers: headers)
        case .put:
            guard upload.state == .open else { throw APIError.conflict(.conflict, "this upload has completed already") }
            if !upload.isDeferred, let declared = HTTPNumber.nonNegative(request.headers[.contentLength]), declared != upload.sentSize {
                throw APIError(.badRequest, .sizeMismatch, "Content-Length is \(declared) but the upload was started to send \(upload.sentSize) bytes")
            }
            let end = try await receive(request, into: upload, at: 0, checksum: nil)
            guard end == upload.sentSize || upload.isDeferred else {
                throw APIError(
                    .badRequest, .sizeMismatch,
                    "received \(end) of the \(upload.size) bytes declared; send the rest with PATCH at offset \(end), or PUT again")
            }
            headers[offsetName] = String(end)
            return Response(status: .ok, headers: headers)
        case .patch:
            guard upload.state == .open else { throw APIError.conflict(.conflict, "this upload has completed already") }
            try checkTusVersion(request)
            guard request.headers[.contentType]?.lowercased().hasPrefix(Tus.offsetContentType) == true else {
                throw APIError(.unsupportedMediaType, .unsupportedMediaType, "PATCH needs `Content-Type: \(Tus.offsetContentType)`")
            }
            guard let offset = HTTPNumber.nonNegative(request.headers[offsetName]) else {
                throw APIError.badRequest("PATCH needs an `Upload-Offset` header")
            }
            let checksum = try request.headers[HTTPField.Name(Tus.uploadChecksum)!].map(ChunkChecksum.init(header:))
            let end = try await receive(request, into: upload, at: offset, checksum: checksum)
            headers[offsetName] = String(end)
            if upload.autoComplete && end == upload.sentSize {
                _ = try await finish(upload)
            }
            return Response(status: .noContent, headers: headers)
        default:
            throw APIError(.methodNotAllowed, .methodNotAllowed, "use HEAD, PUT, PATCH or DELETE on a storage link")
        }
    }

    /// Streams a request body into an upload's staging file at `offset` and returns the new size.
    ///
    /// A PUT starts at 0 and replaces what was there; a PATCH must name the current size as its
    /// offset (409 otherwise). With a checksum, a chunk that does not match is cut off again (460).
    func receive(_ request: Request, into upload: UploadRecord, at offset: Int64, checksum: ChunkChecksum?) async throws -> Int64 {
        // NIO takes any Content-Length a UInt64 holds; one past Int64.max is no size an upload can have.
        if let raw = request.headers[.contentLength], HTTPNumber.nonNegative(raw) == nil {
            throw APIError(.contentTooLarge, .payloadTooLarge, "Content-Length \(raw.prefix(40)) is larger than any upload")
        }
        return try await activeUploads.exclusively(upload.id) {
            // Re-read under the lock: a complete (or DELETE) that ran between this request's first
            // look and now has moved or removed the staging file, and writing would make a new one
            // that nothing ever collects.
            guard let fresh = try await store.upload(id: upload.id), fresh.state == .open else {
                throw APIError.conflict(.conflict, "this upload has completed or was abandoned already")
            }
            // A body arriving keeps the session alive for a lifetime from now (and from its end, below).
            try? await store.extendUpload(id: upload.id, until: Timestamp.nowSeconds() + config.uploadLinkLifetime)
            let current = try await blobs.stagedSize(upload.id) ?? 0
            if request.method == .patch && offset != current {
                throw APIError(.conflict, .offsetMismatch, "Upload-Offset is \(offset) but the server has \(current) bytes; resume from \(current)")
            }
            let limit = upload.limit(config.maxUploadSize)
            // A declared body that would take the upload past its size (or past the largest upload,
            // for one of deferred length) is refused before any of it is read, whatever the method.
            if let declared = HTTPNumber.nonNegative(request.headers[.contentLength]),
                HTTPNumber.sum(offset, declared).map({ $0 > limit }) ?? true {
                throw APIError(.contentTooLarge, .payloadTooLarge, "this body would take the upload past its \(limit) bytes")
            }
            let expected = HTTPNumber.nonNegative(request.headers[.contentLength]) ?? (upload.isDeferred || offset > upload.sentSize ? nil : upload.sentSize - offset)
            var writer = try await blobs.openStaged(upload.id, at: offset, expecting: expected)
            // The whole file's SHA-256 goes on from the last chunk, hashed on another thread in
            // batches of 1 MiB while the next bytes are written.
            let whole = activeUploads.runningDigest(upload.id, at: offset)
            var hashing: Task<Void, Never>?
            var batch: [ByteBuffer] = []
            var batchBytes = 0
            var chunk = checksum.map { ChunkHasher(algorithm: $0.algorithm) }
            var failure: (any Error)?
            do {
                for try await buffer in request.body {
                    guard writer.offset + Int64(buffer.readableBytes) <= limit else {
                        throw APIError(.contentTooLarge, .payloadTooLarge, "the body is longer than the \(limit) bytes allowed")
                    }
                    if let whole {
                        batch.append(buffer)
                        batchBytes += buffer.readableBytes
                        if batchBytes >= 1 << 20 {
                            await hashing?.value
                            let ready = batch
                            hashing = Task { whole.update(ready) }
                            batch.removeAll(keepingCapacity: true)
                            batchBytes = 0
                        }
                    }
                    chunk?.update(buffer.readableBytesView)
                    try await writer.write(buffer)
                }
            } catch let e as APIError {
                failure = e
            } catch let e as BlobStoreError {
                // A full disk: what was written whole is kept, and the client is told why (507).
                failure = e
            } catch {
                // The client went away mid-body (a cancelled or broken upload): what arrived is kept.
                failure = APIError(.badRequest, .sizeMismatch, "the body broke off after \(writer.offset - offset) bytes: \(error)")
            }
            await hashing?.value
            whole?.update(batch)
            // A chunk refused whole (past the upload's size, or not matching its checksum) is
            // undone; a body that broke off keeps what arrived.
            let tooLarge = (failure as? APIError)?.code == .payloadTooLarge
            let badChecksum = failure == nil && checksum.map { chunk?.digest() != $0.digest } == true
            if tooLarge || badChecksum {
                activeUploads.dropRunningDigest(upload.id)
                try await blobs.discard(&writer, of: upload.id, backTo: offset)
                if let checksum, badChecksum {
                    throw APIError(APIError.checksumStatus, .checksumMismatch, "the chunk's \(checksum.algorithm) does not match Upload-Checksum; it was discarded")
                }
                throw failure ?? APIError(.contentTooLarge, .payloadTooLarge, "the body is too large")
            }
            let end: Int64
            do {
                end = try await writer.finish()
            } catch {
                await writer.abandon()
                activeUploads.dropRunningDigest(upload.id)
                throw failure ?? error
            }
            metrics.bytesReceived.increment(by: end - offset)
            // Progress keeps the session alive: it expires a link's lifetime after the last bytes arrived.
            if end > offset { try? await store.extendUpload(id: upload.id, until: Timestamp.nowSeconds() + config.uploadLinkLifetime) }
            if let failure {
                activeUploads.dropRunningDigest(upload.id)
                throw failure
            }
            if let whole, whole.bytes != end { activeUploads.dropRunningDigest(upload.id) }
            return end
        }
    }

    func checkTusVersion(_ request: Request) throws {
        guard request.headers[HTTPField.Name(Tus.resumable)!] == Tus.version else {
            var headers: HTTPFields = [:]
            headers[HTTPField.Name("Tus-Version")!] = Tus.version
            throw APIError(.preconditionFailed, .preconditionFailed, "this server speaks tus \(Tus.version); send `Tus-Resumable: \(Tus.version)`", headers: headers)
        }
    }

    func tusOptions() -> Response {
        var headers: HTTPFields = [:]
        headers[HTTPField.Name(Tus.resumable)!] = Tus.version
        headers[HTTPField.Name("Tus-Version")!] = Tus.version
        headers[HTTPField.Name("Tus-Extension")!] = Tus.extensions
        headers[HTTPField.Name("Tus-Max-Size")!] = String(config.maxUploadSize)
        headers[HTTPField.Name("Tus-Checksum-Algorithm")!] = Tus.checksumAlgorithms
        return Response(status: .noContent, headers: headers)
    }
}

/// An `Upload-Checksum` header: `sha256 <base64>` or `sha1 <base64>`.
struct ChunkChecksum: Sendable {
    enum Algorithm: String, Sendable { case sha1, sha256 }
    var algorithm: Algorithm
    var digest: Data

    init(header: String) throws {
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, let alg = Algorithm(rawValue: parts[0].lowercased()) else {
            throw APIError.badRequest("Upload-Checksum must be `sha256 <base64>` or `sha1 <base64>`")
        }
        guard let digest = Data(base64Encoded: String(parts[1])) else { throw APIError.badRequest("Upload-Checksum's digest is not base64") }
        algorithm = alg
        self.digest = digest
    }
}

struct ChunkHasher {
    var sha1: Insecure.SHA1?
    var sha256: SHA256?

    init(algorithm: ChunkChecksum.Algorithm) {
        switch algorithm {
        case .sha1: sha1 = Insecure.SHA1()
        case .sha256: sha256 = SHA256()
        }
    }

    mutating func update(_ bytes: some DataProtocol) {
        sha1?.update(data: bytes)
        sha256?.update(data: bytes)
    }

    func digest() -> Data {
        if let sha1 { return Data(sha1.finalize()) }
        if let sha256 { return Data(sha256.finalize()) }
        return Data()
    }
}
