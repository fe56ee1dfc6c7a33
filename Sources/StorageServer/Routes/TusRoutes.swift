import Foundation
import HTTPTypes
import Hummingbird
import StorageProtocol

/// tus 1.0 creation at `/tus/files` (token auth); the upload then completes itself on its last byte.
extension StowService {
    func addTusRoutes(to router: Router<BasicRequestContext>) {
        router.on(RouterPath(Routes.tusFiles), method: .options) { _, _ in self.tusOptions() }
        router.on("\(Routes.tusFiles)/:id", method: .options) { _, _ in self.tusOptions() }
        router.post(RouterPath(Routes.tusFiles)) { req, _ in try await self.tusCreate(req) }
        for method in [HTTPRequest.Method.head, .patch, .delete] {
            router.on("\(Routes.tusFiles)/:id", method: method) { req, ctx in
                let id = ctx.parameters.get("id") ?? ""
                guard let upload = try await self.store.upload(id: id) else { throw APIError.notFound("no such upload (it may have expired)") }
                try self.authorize(req, upload.namespace.name, .write)
                if req.method != .head { try self.checkTusVersion(req) }
                return try await self.uploadResource(req, upload, base: self.baseURL(req))
            }
        }
    }

    func tusCreate(_ request: Request) async throws -> Response {
        try checkTusVersion(request)
        guard let length = HTTPNumber.nonNegative(request.headers[HTTPField.Name(Tus.uploadLength)!]) else {
            throw APIError.badRequest("`Upload-Length` must be a whole number of bytes (deferred length is not supported here)")
        }
        let meta = try Self.parseTusMetadata(request.headers[HTTPField.Name(Tus.uploadMetadata)!] ?? "")
        guard let nsName = meta["namespace"] ?? meta["ns"] else { throw APIError.badRequest("Upload-Metadata needs `namespace`") }
        let ns = try Namespace(nsName)
        try authorize(request, ns.name, .write)
        guard let rawPath = meta["path"] ?? meta["filename"] ?? meta["name"] else { throw APIError.badRequest("Upload-Metadata needs `path`") }
        let path = try StoragePath(rawPath)
        let tags = meta["tags"].map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } }
        var params = UploadParams()
        if let p = meta["public"] { params.isPublic = p == "true" || p == "1" }
        let upload = try await createUpload(
            ns: ns, path: path, size: length, contentType: meta["content_type"] ?? meta["filetype"] ?? meta["contentType"], tags: tags,
            params: params, autoComplete: true)
        var headers: HTTPFields = [:]
        headers[.location] = baseURL(request) + Routes.tusFile(upload.id)
        headers[HTTPField.Name(Tus.resumable)!] = Tus.version
        headers[HTTPField.Name(Tus.uploadExpires)!] = HTTPDate.format(seconds: upload.expiresAt)
        var offset: Int64 = 0
        // creation-with-upload: the POST may carry the first chunk.
        if request.headers[.contentType]?.hasPrefix(Tus.offsetContentType) == true {
            offset = try await receive(request, into: upload, at: 0, checksum: nil)
            if offset == length { _ = try await finish(upload) }
        } else if length == 0 {
            _ = try await finish(upload)
        }
        headers[HTTPField.Name(Tus.uploadOffset)!] = String(offset)
        return Response(status: .created, headers: headers)
    }

    /// `key base64value, key2 base64value2` (a value may be absent).
    static func parseTusMetadata(_ header: String) throws -> [String: String] {
        var out: [String: String] = [:]
        for pair in header.split(separator: ",") {
            let parts = pair.trimmingCharacters(in: .whitespaces).split(separator: " ", maxSplits: 1)
            guard let key = parts.first.map(String.init), !key.isEmpty else { continue }
            if parts.count == 1 {
                out[key] = ""
                continue
            }
            guard let data = Data(base64Encoded: String(parts[1])), let value = String(data: data, encoding: .utf8) else {
                throw APIError.badRequest("Upload-Metadata value of `\(key)` is not base64 UTF-8")
            }
            out[key] = value
        }
        return out
    }
}
