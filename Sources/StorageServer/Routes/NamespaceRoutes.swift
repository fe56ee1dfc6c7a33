import Foundation
import HTTPTypes
import Hummingbird
import StorageProtocol

/// Namespaces, browse, sign-urls, health and metrics.
extension StowService {
    func addNamespaceRoutes(to router: Router<BasicRequestContext>) {
        router.get(RouterPath(Routes.namespaces)) { req, _ in
            guard let token = self.bearerToken(req), self.tokens.isKnown(token) else {
                throw APIError(.unauthorized, .unauthorized, "this request needs `Authorization: Bearer <token>`", headers: [.wwwAuthenticate: "Bearer"])
            }
            let visible = try await self.store.namespaces().filter { self.permission(req, $0.namespace.name) != nil }
            return self.json(NamespaceList(items: visible.map(Self.namespaceRecord)))
        }
        router.get("\(Routes.prefix)/v1.0/namespaces/:ns") { req, ctx in
            let ns = try self.namespace(ctx)
            try self.authorize(req, ns.name, .read)
            guard let info = try await self.store.namespace(ns) else { throw StoreError.namespaceNotFound(ns) }
            return self.json(Self.namespaceRecord(info))
        }
        router.put("\(Routes.prefix)/v1.0/namespaces/:ns") { req, ctx in
            let ns = try self.namespace(ctx)
            try self.authorize(req, ns.name, .admin)
            let (info, created) = try await self.store.createNamespace(ns)
            return self.json(Self.namespaceRecord(info), status: created ? .created : .ok)
        }
        router.delete("\(Routes.prefix)/v1.0/namespaces/:ns") { req, ctx in
            let ns = try self.namespace(ctx)
            try self.authorize(req, ns.name, .admin)
            let recursive = req.uri.queryParameters["recursive"] == "true"
            try await self.store.deleteNamespace(ns, recursive: recursive)
            return Response(status: .noContent)
        }
        router.get("\(Routes.prefix)/v1.0/namespaces/:ns/browse") { req, ctx in try await self.browse(req, ctx) }
        router.post(RouterPath(Routes.signURLs)) { req, _ in try await self.signURLs(req) }
        router.get(RouterPath(Routes.health)) { _, _ in
            _ = try await self.store.statistics()
            return self.json(["status": "ok"])
        }
        router.get(RouterPath(Routes.metrics)) { req, _ in
            switch self.config.metricsAccess {
            case .open: break
            case .admin: try self.authorize(req, "*", .admin)
            case .off: throw APIError.notFound("no such route")
            }
            let stats = try? await self.store.statistics()
            var text = self.metrics.text
            if let stats {
                text += """
                    # TYPE stowd_files gauge
                    stowd_files \(stats.files)
                    # TYPE stowd_stored_bytes gauge
                    stowd_stored_bytes \(stats.bytes)
                    # TYPE stowd_open_uploads gauge
                    stowd_open_uploads \(stats.openUploads)
                    # TYPE stowd_namespaces gauge
                    stowd_namespaces \(stats.namespaces)

                    """
            }
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: ResponseBody(byteBuffer: .init(string: text)))
        }
    }

    static func namespaceRecord(_ info: NamespaceInfo) -> NamespaceRecord {
        NamespaceRecord(name: info.namespace.name, createdOn: Timestamp.iso8601(nanoseconds: info.createdNs), rootInode: info.rootInode)
    }

    func browse(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .read)
        let q = request.uri.queryParameters
        func int(_ name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
            guard let raw = q[Substring(name)] else { return value }
            guard let v = Int(raw), range.contains(v) else { throw APIError.badRequest("`\(name)` must be a whole number in \(range)") }
            return v
        }
        let limit = try int("limit", default: 50, range: 1...5000)
        let page = try int("page", default: 1, range: 1...Int(Int32.max))
        let delimiter = q["delimiter"].map(String.init)
        if let delimiter, delimiter != "/" { throw APIError.badRequest("`delimiter` can only be `/`") }
        // `fields=posix` (a StowFS extension): records without what a client can make itself.
        let posix = q["fields"].map { $0 == "posix" }
        if posix == false { throw APIError.badRequest("`fields` can only be `posix`") }
        let prefix = q["prefix"].map(String.init) ?? ""
        var folder = StoragePath.root
        var namePrefix = ""
        if !prefix.isEmpty && prefix != "/" {
            let trimmed = prefix.hasPrefix("/") ? String(prefix.dropFirst()) : prefix
            if trimmed.hasSuffix("/") {
                folder = try StoragePath(String(trimmed.dropLast()))
            } else {
                let parts = trimmed.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
                folder = try StoragePath(segments: Array(parts.dropLast()))
                namePrefix = parts.last ?? ""
                if !namePrefix.isEmpty { try StoragePath.validate(segment: namePrefix) }
            }
        }
        var after: String?
        if let next = q["next_id"], !next.isEmpty {
            guard let data = Base64URL.decode(String(next)), let key = String(data: data, encoding: .utf8) else {
                throw APIError.badRequest("`next_id` is not one this server gave out")
            }
            after = key
        }
        // `splits=K` (a StowFS extension): where the next K pages begin, so that a client can read
        // them at once. One level only: a recursive listing's pages are not cut by names.
        let splits = try int("splits", default: 0, range: 0...100)
        if splits > 0 && delimiter == nil { throw APIError.badRequest("`splits` needs `delimiter=/`") }
        let query = ListQuery(
            folder: folder, namePrefix: namePrefix, recursive: delimiter == nil, search: q["search"].map(String.init), after: after,
            offset: (page - 1) * limit, limit: limit, splits: splits)
        let result = try await store.list(ns, query)
        func cursor(_ key: String) -> String { Base64URL.encode(Data(key.utf8)) }
        let info = PageInfo(
            type: after == nil ? "number" : "cursor", current: after == nil ? page : 1, size: limit, itemTotal: result.total,
            hasNext: result.next != nil, nextId: result.next.map(cursor),
            splits: splits > 0 ? result.splits.map { PageSplit(name: $0, nextId: cursor($0)) } : nil)
        let folders = result.nodes.filter { $0.inode.kind == .directory }
        let items = result.nodes.filter { $0.inode.kind != .directory }
        if posix == true {
            return json(PosixBrowseResponse(items: items.map(posixRecord), folders: folders.map(posixRecord), page: info))
        }
        let base = baseURL(request)
        return json(BrowseResponse(items: items.map { record($0, base: base) }, folders: folders.map { record($0, base: base) }, page: info))
    }

    func signURLs(_ request: Request) async throws -> Response {
        let body = try await decode(SignURLsRequest.self, from: request)
        guard (1...config.maxSignedURLExpiry).contains(body.expiry) else {
            throw APIError.badRequest("`expiry` must be between 1 and \(config.maxSignedURLExpiry) seconds")
        }
        guard body.urls.count <= 1000 else { throw APIError.badRequest("at most 1000 URLs per request") }
        let base = baseURL(request)
        let expires = Timestamp.nowSeconds() + Int64(body.expiry)
        var out: [SignedURL] = []
        for url in body.urls {
            let (ns, path) = try Self.parseCDN(url)
            try authorize(request, ns.name, .read)
            let query = signer.query(scope: .read, resource: URLSigner.readResource(ns, path), expires: expires)
            out.append(SignedURL(url: url, signedUrl: base + Routes.cdn(ns, path) + "?" + query, expiry: body.expiry, expiresAt: expires))
        }
        return json(SignURLsResponse(urls: out))
    }

    /// The namespace and path of a CDN URL (absolute, or relative: `/cdn/{ns}/{path}`).
    static func parseCDN(_ url: String) throws -> (Namespace, StoragePath) {
        var rest = Substring(url)
        if let scheme = rest.range(of: "://") {
            rest = rest[scheme.upperBound...]
            guard let slash = rest.firstIndex(of: "/") else { throw APIError.badRequest("`\(url)` is not a CDN URL of this server") }
            rest = rest[slash...]
        }
        if let q = rest.firstIndex(of: "?") { rest = rest[..<q] }
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0].isEmpty, parts[1] == "cdn" else { throw APIError.badRequest("`\(url)` is not a CDN URL (`/cdn/{namespace}/{path}`)") }
        let ns = try Namespace(String(parts[2]))
        var names: [String] = []
        for p in parts.dropFirst(3) {
            guard let n = PathEncoding.decode(p) else { throw APIError(.badRequest, .invalidPath, "bad percent-encoding in `\(url)`") }
            names.append(n)
        }
        return (ns, try StoragePath(segments: names))
    }
}
