import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StorageProtocol

/// `POST /v1.0/namespaces/{ns}/upload/form`: browser and `curl -F` uploads.
///
/// Fields: `path` (a folder ending in `/`, or the full path when one file is sent), `tags`
/// (comma-separated). Every file part is streamed to its own staging file; all are published
/// once the whole body has arrived, so a broken request leaves nothing behind.
extension StowService {
    /// Parts (files and fields) in one form, and the bytes of all its fields together: a form's
    /// memory stays bounded whatever it holds (file parts stream to disk).
    static let maxFormParts = 256
    static let maxFormFieldBytes = 1 << 20

    func addFormRoutes(to router: Router<BasicRequestContext>) {
        router.post("\(Routes.prefix)/v1.0/namespaces/:ns/upload/form") { req, ctx in try await self.formUpload(req, ctx) }
    }

    private struct StagedPart {
        var id: String
        var filename: String
        var contentType: String?
        var size: Int64
    }

    func formUpload(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .write)
        guard let boundary = request.headers[.contentType].flatMap(MultipartParser.boundary(contentType:)) else {
            throw APIError(.unsupportedMediaType, .unsupportedMediaType, "send `Content-Type: multipart/form-data; boundary=…`")
        }
        var parser = MultipartParser(boundary: boundary)
        var fields: [String: String] = [:]
        var staged: [StagedPart] = []
        var writer: (any StagedWriter)?
        var current: (name: String, filename: String?, contentType: String?)?
        var fieldValue = ByteBuffer()
        var total: Int64 = 0
        var parts = 0
        var fieldBytes = 0
        var bodyRead = false
        do {
            for try await chunk in request.body {
                for event in try parser.feed(chunk) {
                    switch event {
                    case .headers(let h):
                        parts += 1
                        guard parts <= Self.maxFormParts else { throw APIError(.contentTooLarge, .payloadTooLarge, "a form holds at most \(Self.maxFormParts) parts") }
                        let disposition = parseContentDisposition(h["content-disposition"] ?? "")
                        guard let name = disposition["name"] else { throw APIError.badRequest("a form part has no name") }
                        current = (name, disposition["filename"], h["content-type"])
                        fieldValue.clear()
                        if let filename = disposition["filename"] {
                            let base = filename.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last.map(String.init) ?? ""
                            try StoragePath.validate(segment: base)
                            let id = Self.newID()
                            writer = try await openStagedHashing(id, expecting: nil)
                            staged.append(StagedPart(id: id, filename: base, contentType: h["content-type"], size: 0))
                        }
                    case .data(let data):
                        total += Int64(data.readableBytes)
                        guard total <= config.maxUploadSize else { throw BlobStoreError.tooLarge(limit: config.maxUploadSize) }
                        if writer != nil {
                            try await writer!.write(data)
                        } else {
                            var d = data
                            guard fieldValue.readableBytes + d.readableBytes <= 65536 else { throw APIError.badRequest("form field `\(current?.name ?? "")` is longer than 64 KiB") }
                            fieldBytes += d.readableBytes
                            guard fieldBytes <= Self.maxFormFieldBytes else {
                                throw APIError(.contentTooLarge, .payloadTooLarge, "a form's fields hold at most \(Self.maxFormFieldBytes) bytes in all")
                            }
                            fieldValue.writeBuffer(&d)
                        }
                    case .partEnd:
                        if var w = writer {
                            staged[staged.count - 1].size = try await w.finish()
                            writer = nil
                        } else if let current {
                            guard let text = String(validating: fieldValue.readableBytesView, as: UTF8.self) else {
                                throw APIError.badRequest("form field `\(current.name)` is not valid UTF-8")
                            }
                            fields[current.name] = text
                        }
                        current = nil
                    }
                }
            }
            bodyRead = true
            guard parser.isDone else { throw APIError.badRequest("the multipart body ended before its closing boundary") }
            guard !staged.isEmpty else { throw APIError.badRequest("the form holds no file part") }
            let tags = fields["tags"].map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } }
            let target = fields["path"] ?? ""
            var uploads: [UploadRecord] = []
            for part in staged {
                let path: StoragePath
                if target.isEmpty || target == "/" {
                    path = try StoragePath(part.filename)
                } else if target.hasSuffix("/") {
                    path = try StoragePath(target + part.filename)
                } else if staged.count == 1 {
                    path = try StoragePath(target)
                } else {
                    path = try StoragePath(target + "/" + part.filename)
                }
                uploads.append(
                    try await createUpload(
                        id: part.id, ns: ns, path: path, size: part.size, contentType: fields["content_type"] ?? part.contentType.flatMap { ContentTypes.isValid($0) && $0 != "application/octet-stream" ? $0 : nil },
                        tags: tags, params: UploadParams(isPublic: fields["public"].map { $0 == "true" }), autoComplete: false))
            }
            var records: [FileRecord] = []
            let base = baseURL(request)
            for u in uploads { records.append(record(try await finish(u), base: base)) }
            return json(FormUploadResponse(files: records), status: .created)
        } catch {
            if var w = writer { await w.abandon() }
            for part in staged {
                try? await blobs.deleteStaged(part.id)
                activeUploads.forget(part.id)
            }
            if let m = error as? MultipartParser.Malformed { throw APIError.badRequest("malformed multipart body: \(m.description)") }
            // The body stream itself failed (the client went away, a length that lied): nothing was stored.
            if !bodyRead && !(error is APIError || error is BlobStoreError || error is NameError || error is StoreError) {
                throw APIError(.badRequest, .sizeMismatch, "the multipart body broke off before its end")
            }
            throw error
        }
    }
}
