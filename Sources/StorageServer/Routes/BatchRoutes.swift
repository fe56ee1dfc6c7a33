import Crypto
import Foundation
import Hummingbird
import NIOCore
import NIOFoundationCompat
import Prometheus
import StorageProtocol

/// `POST …/upload/batch`: several small files in one request (see `BatchUpload`).
extension StowService {
    func addBatchRoutes(to router: Router<BasicRequestContext>) {
        router.post("\(Routes.prefix)/v2.0/namespaces/:ns/upload/batch") { req, ctx in try await self.batch(req, ctx) }
        router.post("\(Routes.prefix)/v2.0/namespaces/:ns/delete/batch") { req, ctx in try await self.batchDelete(req, ctx) }
    }

    /// `POST …/delete/batch`: each file deleted or refused on its own, in one transaction.
    func batchDelete(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .write)
        let files = try await decode(BatchDelete.Request.self, from: request).files
        guard (1...BatchDelete.maxFiles).contains(files.count) else { throw APIError.badRequest("a batch deletes 1 to \(BatchDelete.maxFiles) files") }
        var results = [BatchDelete.Result](repeating: BatchDelete.Result(status: 204), count: files.count)
        var valid: [(index: Int, deletion: FileDeletion)] = []
        for (i, f) in files.enumerated() {
            do {
                valid.append((i, FileDeletion(path: try StoragePath(f.path), ifMatch: f.ifMatch, inode: f.inode)))
            } catch {
                results[i] = Self.deleteRefusal(error)
            }
        }
        let outcomes = try await store.removeFiles(ns, valid.map(\.deletion))
        for (item, outcome) in zip(valid, outcomes) {
            if case .failure(let error) = outcome { results[item.index] = Self.deleteRefusal(error) }
        }
        return json(BatchDelete.Response(results: results))
    }

    static func deleteRefusal(_ error: any Error) -> BatchDelete.Result {
        let api = APIError.from(error)
        return BatchDelete.Result(status: Int(api.status.code), error: ErrorBody(message: api.message, code: api.code))
    }

    /// Each file is checked and stored on its own; those small enough to live in the database are
    /// stored together, in one transaction (one commit for the lot).
    func batch(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .write)
        var body: ByteBuffer
        let most = 4 + config.maxJSONBody + Int(BatchUpload.maxBytes)
        if let raw = request.headers[.contentLength], (HTTPNumber.nonNegative(raw) ?? .max) > most {
            throw APIError(.contentTooLarge, .payloadTooLarge, "a batch carries at most \(BatchUpload.maxBytes) bytes of content")
        }
        do {
            body = try await request.body.collect(upTo: 4 + config.maxJSONBody + Int(BatchUpload.maxBytes))
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, .payloadTooLarge, "a batch carries at most \(BatchUpload.maxBytes) bytes of content")
        } catch {
            throw APIError(.badRequest, .sizeMismatch, "the batch's body broke off before its end")
        }
        guard let length = body.readInteger(as: UInt32.self) else {
            throw APIError.badRequest("a batch starts with its declaration's length (4 bytes, big-endian), then the declaration (JSON)")
        }
        guard length <= config.maxJSONBody else {
            throw APIError(.contentTooLarge, .payloadTooLarge, "the batch's declaration has \(length) bytes; at most \(config.maxJSONBody) are taken")
        }
        guard let header = body.readData(length: Int(length)) else {
            throw APIError.badRequest("a batch starts with its declaration's length (4 bytes, big-endian), then the declaration (JSON)")
        }
        let declaration: BatchUpload.Request
        do {
            // By hand when it is in the plain shape; anything else as JSONDecoder decides.
            declaration = try header.withUnsafeBytes { WireJSONReading.batchRequest($0) } ?? JSONDecoder().decode(BatchUpload.Request.self, from: header)
        } catch let e as DecodingError {
            throw APIError.badRequest("malformed JSON in the batch's declaration: \(APIError.describe(e))")
        }
        let files = declaration.files
        guard (1...BatchUpload.maxFiles).contains(files.count) else { throw APIError.badRequest("a batch holds 1 to \(BatchUpload.maxFiles) files") }
        guard files.allSatisfy({ (0...ServerConfiguration.inlineCeiling).contains($0.size) }) else {
            throw APIError.badRequest("each file of a batch has 0 to \(ServerConfiguration.inlineCeiling) bytes")
        }
        let declared = files.reduce(Int64(0)) { $0 + $1.size }
        guard declared == body.readableBytes else {
            throw APIError(.badRequest, .sizeMismatch, "the declaration says \(declared) bytes of content, the body has \(body.readableBytes)")
        }
        metrics.bytesReceived.increment(by: declared)

        let base = baseURL(request)
        var results = [BatchUpload.Result](repeating: BatchUpload.Result(), count: files.count)
        var inline: [(index: Int, file: InlineFile)] = []
        for (i, f) in files.enumerated() {
            let bytes = body.readData(length: Int(f.size)) ?? Data()
            do {
                // No early check against the tree: the bytes are here already, and publishing checks it.
                let upload = try await declareUpload(
                    ns: ns, path: try StoragePath(f.fileName), size: f.size, contentType: f.contentType, tags: f.tags, params: f.params ?? UploadParams(),
                    autoComplete: false, precheck: false, deferLength: f.deferLength)
                if upload.size <= inlineLimit {
                    inline.append((i, try inlineFile(upload, bytes)))
                } else {
                    // Hashed and checked by the publish, as any staged upload.
                    results[i] = BatchUpload.Result(file: record(try await storeStaged(upload, bytes), base: base))
                }
            } catch {
                results[i] = Self.refusal(error)
            }
        }
        let stored = try await store.publishInline(inline.map(\.file))
        for (item, outcome) in zip(inline, stored) {
            switch outcome {
            case .success(let node):
                results[item.index] = BatchUpload.Result(file: record(node, base: base))
                metrics.uploadsStarted.increment()
                metrics.uploadsCompleted.increment()
            case .failure(let error):
                results[item.index] = Self.refusal(error)
            }
        }
        return json(BatchUpload.Response(results: results))
    }

    static func refusal(_ error: any Error) -> BatchUpload.Result {
        let api = APIError.from(error)
        return BatchUpload.Result(status: Int(api.status.code), error: ErrorBody(message: api.message, code: api.code))
    }

    /// Stores bytes already in memory through a staging file and an upload session (a batch's file
    /// above the server's inline limit). All or nothing.
    func storeStaged(_ declared: UploadRecord, _ bytes: Data) async throws -> Node {
        let upload = try await createUpload(declared)
        do {
            var writer = try await openStagedHashing(upload.id, expecting: upload.size)
            do {
                try await writer.write(ByteBuffer(data: bytes))
                _ = try await writer.finish()
            } catch {
                await writer.abandon()
                throw error
            }
            return try await finish(upload)
        } catch {
            await discardUnlessCompleted(upload)
            throw error
        }
    }
}
