import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StorageProtocol

/// File records, metadata changes, delete, folders, rename, nodes and links.
extension StowService {
    /// Segments before the path in `/service/application/assets/v1.0/namespaces/{ns}/files/…`.
    static let fixedSegmentsBeforePath = Routes.prefix.split(separator: "/").count + 4

    func addFileRoutes(to router: Router<BasicRequestContext>) {
        let ns = "\(Routes.prefix)/v1.0/namespaces/:ns"
        let skip = Self.fixedSegmentsBeforePath
        router.get("\(ns)/files/**") { req, ctx in try await self.fileRecord(req, ctx) }
        router.head("\(ns)/files/**") { req, ctx in try await self.fileRecord(req, ctx) }
        router.patch("\(ns)/files/**") { req, ctx in try await self.patchFile(req, ctx) }
        router.delete("\(ns)/files/**") { req, ctx in
            let ns = try self.namespace(ctx)
            try self.authorize(req, ns.name, .write)
            try await self.store.removeFile(ns, try self.path(req, after: skip), ifMatch: req.headers[.ifMatch])
            return Response(status: .noContent)
        }
        router.put("\(ns)/folders/**") { req, ctx in
            let ns = try self.namespace(ctx)
            try self.authorize(req, ns.name, .write)
            let path = try self.path(req, after: skip, allowTrailingSlash: true)
            let body = try await self.decodeIfPresent(FolderRequest.self, from: req) ?? FolderRequest()
            if let session = body.namesLease, !Self.isSessionID(session) {
                throw APIError.badRequest("`names_lease` is a lock session: 16 to 64 of A-Z a-z 0-9 . _ -")
            }
            let attributes = NewNodeAttributes(mode: body.mode, uid: body.uid, gid: body.gid)
            if let session = body.namesLease, body.existOk == false {
                // A new folder (it is an error if it is there) and its lease, in one transaction.
                var (node, leased) = try await self.store.makeFolder(
                    ns, path, attributes: attributes, parents: body.parents ?? true, namesLeaseFor: session, leaseNs: self.config.lockLease * 1_000_000_000)
                if leased {
                    self.lockSignal.bump()
                } else {
                    leased = try await self.takeNamesLease(ns, folder: node.inode.ino, session: session)
                }
                var response = self.json(self.record(node, base: self.baseURL(req)), status: .created)
                if leased { response.headers[Self.namesLeaseHeader] = "granted" }
                return response
            }
            let existedBefore = (try? await self.store.node(ns, path)) != nil
            let node = try await self.store.makeFolder(ns, path, attributes: attributes, parents: body.parents ?? true, existOk: body.existOk ?? true)
            var response = self.json(self.record(node, base: self.baseURL(req)), status: existedBefore ? .ok : .created)
            if let session = body.namesLease, !existedBefore, try await self.takeNamesLease(ns, folder: node.inode.ino, session: session) {
                response.headers[Self.namesLeaseHeader] = "granted"
            }
            return response
        }
        router.delete("\(ns)/folders/**") { req, ctx in
            let ns = try self.namespace(ctx)
            try self.authorize(req, ns.name, .write)
            try await self.store.removeFolder(ns, try self.path(req, after: skip, allowTrailingSlash: true))
            return Response(status: .noContent)
        }
        router.post("\(ns)/rename") { req, ctx in
            let ns = try self.namespace(ctx)
            try self.authorize(req, ns.name, .write)
            let body = try await self.decode(RenameRequest.self, from: req)
            var expecting: ExchangeExpectation?
            switch (body.ifFromInode, body.ifToInode) {
            case (let f?, let t?):
                guard body.exchange == true else { throw APIError.badRequest("`if_from_inode` and `if_to_inode` go with `exchange`") }
                expecting = ExchangeExpectation(from: f, to: t)
            case (nil, nil):
                break
            default:
                throw APIError.badRequest("`if_from_inode` and `if_to_inode` go together")
            }
            let node = try await self.store.rename(
                ns, from: try StoragePath(body.from), to: try StoragePath(body.to), replace: body.replace ?? false, exchange: body.exchange ?? false,
                expecting: expecting)
            return self.json(self.record(node, base: self.baseURL(req)))
        }
        router.put("\(ns)/nodes/**") { req, ctx in
            let ns = try self.namespace(ctx)
            try self.authorize(req, ns.name, .write)
            let path = try self.path(req, after: skip)
            let body = try await self.decode(NodeRequest.self, from: req)
            switch body.kind {
            case .file, .directory:
                throw APIError.badRequest("use the upload routes for files and `folders/` for folders")
            case .symlink:
                guard let target = body.target, (1...4095).contains(target.utf8.count), !target.utf8.contains(0) else {
                    throw APIError.badRequest("a symlink needs a `target` of 1–4095 bytes without NUL")
                }
            case .characterDevice, .blockDevice:
                guard body.rdev != nil else { throw APIError.badRequest("a device node needs `rdev`") }
            case .fifo, .socket:
                break
            }
            let node = try await self.store.makeNode(
                ns, path, kind: body.kind, attributes: NewNodeAttributes(mode: body.mode, uid: body.uid, gid: body.gid),
                target: body.kind == .symlink ? body.target : nil, rdev: body.rdev)
            return self.json(self.record(node, base: self.baseURL(req)), status: .created)
        }
        router.post("\(ns)/link") { req, ctx in
            let ns = try self.namespace(ctx)
            try self.authorize(req, ns.name, .write)
            let body = try await self.decode(LinkRequest.self, from: req)
            let node = try await self.store.link(ns, from: try StoragePath(body.from), to: try StoragePath(body.to))
            return self.json(self.record(node, base: self.baseURL(req)), status: .created)
        }
    }

    func fileRecord(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .read)
        let node = try await store.node(ns, try path(request, after: Self.fixedSegmentsBeforePath, allowRoot: true, allowTrailingSlash: true))
        let headers: HTTPFields = [.eTag: "\"\(node.inode.etag)\""]
        if request.method == .head {
            var h = headers
            h[HTTPField.Name("X-Stow-Kind")!] = node.inode.kind.rawValue
            h[HTTPField.Name("X-Stow-Size")!] = String(node.inode.size)
            return Response(status: .ok, headers: h)
        }
        return json(record(node, base: baseURL(request)), headers: headers)
    }

    func patchFile(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .write)
        let path = try path(request, after: Self.fixedSegmentsBeforePath, allowRoot: true)
        var patch = try await decode(FilePatch.self, from: request)
        try validate(tags: patch.tags)
        try validate(metadata: patch.metadata)
        try validate(metadata: patch.metadataSet)
        try validate(contentType: patch.contentType)
        if let mode = patch.mode, mode > 0o7777 { throw APIError.badRequest("`mode` holds permission bits only (at most 0o7777)") }
        var ifMatch = request.headers[.ifMatch]
        if let size = patch.size {
            guard size >= 0, size <= config.maxUploadSize else { throw APIError.badRequest("`size` must be between 0 and \(config.maxUploadSize)") }
            let node = try await store.node(ns, path)
            guard node.inode.kind == .file, let blob = node.inode.blob else { throw StoreError.isADirectory(path) }
            if let ifMatch, !ETag.matches(ifMatch, node.inode.etag) {
                throw StoreError.preconditionFailed("`\(path)` has changed (ETag \(node.inode.etag))")
            }
            if size != node.inode.size {
                let id = Self.newID()
                let source = try await locateBlob(blob, size: node.inode.size)
                if size <= inlineLimit {
                    // Small enough to keep in the database: made in memory, stored with the swap.
                    var bytes = Data(capacity: Int(size))
                    try await source.read(0..<min(size, node.inode.size), from: blobs) { bytes.append(contentsOf: $0.readableBytesView) }
                    bytes.append(Data(count: Int(size) - bytes.count))
                    let digest = SHA256.hash(data: bytes).hexString
                    _ = try await store.swapBlob(
                        ns, path, expectedBlob: blob, newBlob: BlobInfo(id: id, size: size, sha256: digest), inline: bytes, mtimeNs: patch.mtimeNs)
                } else {
                    let digest = try await blobs.makeBlob(id, fromPrefixOf: source, size: size)
                    do {
                        _ = try await store.swapBlob(
                            ns, path, expectedBlob: blob, newBlob: BlobInfo(id: id, size: size, sha256: digest), inline: nil, mtimeNs: patch.mtimeNs)
                    } catch {
                        try? await blobs.deleteBlob(id)
                        throw error
                    }
                }
                ifMatch = nil
            }
            patch.size = nil
        }
        let node = patch.isEmpty ? try await store.node(ns, path) : try await store.patch(ns, path, patch, ifMatch: ifMatch)
        return json(record(node, base: baseURL(request)), headers: [.eTag: "\"\(node.inode.etag)\""])
    }
}
