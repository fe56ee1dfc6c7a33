import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import StorageProtocol
import Synchronization

/// The state every route shares: stores, signer, tokens, metrics, uploads in progress.
final class StowService: Sendable {
    let config: ServerConfiguration
    let store: any MetadataStore
    let blobs: any BlobStore
    /// Set once at start; with a shared database, replaced by the database's secret before requests are taken.
    private let signerBox: Mutex<URLSigner>
    var signer: URLSigner { signerBox.withLock { $0 } }
    /// The configuration's; with a shared database and a generated admin token, the database's, set before requests are taken.
    private let tokensBox: Mutex<TokenStore>
    var tokens: TokenStore { tokensBox.withLock { $0 } }
    let metrics = ServerMetrics()
    let activeUploads = ActiveUploads()
    /// Wakes readers of the change feed after this server changed something.
    let changeSignal = ChangeSignal()
    /// Wakes lock requests waiting for a lock after this server released or granted one.
    let lockSignal = ChangeSignal()
    let copies: CopyTasks
    let logger: Logger

    init(config: ServerConfiguration, store: any MetadataStore, blobs: any BlobStore, signer: URLSigner, logger: Logger) {
        self.config = config
        self.store = store
        self.blobs = blobs
        self.signerBox = Mutex(signer)
        self.tokensBox = Mutex(config.tokens)
        self.logger = logger
        self.copies = CopyTasks()
    }

    /// Signs and checks links with this secret from now on (the shared one, before the server listens).
    func useSigningSecret(_ secret: Data) {
        signerBox.withLock { $0 = URLSigner(secret: secret) }
    }

    /// Takes these tokens from now on (the shared admin token, before the server listens).
    func useTokens(_ tokens: TokenStore) {
        tokensBox.withLock { $0 = tokens }
    }

    // MARK: - Auth

    /// The bearer token of a request, if any.
    func bearerToken(_ request: Request) -> String? {
        guard let value = request.headers[.authorization] else { return nil }
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return String(parts[1]).trimmingCharacters(in: .whitespaces)
    }

    /// Checks that the request's token has `needed` on `namespace`: 401 without a known token, 403 without the permission.
    func authorize(_ request: Request, _ namespace: String, _ needed: Permission) throws {
        guard let token = bearerToken(request) else {
            throw APIError(.unauthorized, .unauthorized, "this request needs `Authorization: Bearer <token>`", headers: [.wwwAuthenticate: "Bearer"])
        }
        guard tokens.isKnown(token) else {
            throw APIError(.unauthorized, .unauthorized, "the token is not known to this server", headers: [.wwwAuthenticate: "Bearer"])
        }
        guard let has = tokens.permission(token: token, namespace: namespace), has >= needed else {
            throw APIError(.forbidden, .forbidden, "the token does not grant \(needed) on namespace `\(namespace)`")
        }
    }

    /// The permission the request's token has on a namespace, without throwing.
    func permission(_ request: Request, _ namespace: String) -> Permission? {
        bearerToken(request).flatMap { tokens.permission(token: $0, namespace: namespace) }
    }

    // MARK: - Request helpers

    /// Decodes a JSON body of at most `maxJSONBody` bytes.
    func decode<T: Decodable>(_ type: T.Type, from request: Request) async throws -> T {
        guard let value = try await decodeIfPresent(type, from: request) else { throw APIError.badRequest("the request needs a JSON body") }
        return value
    }

    /// Decodes an optional JSON body: an empty body gives nil.
    func decodeIfPresent<T: Decodable>(_ type: T.Type, from request: Request) async throws -> T? {
        let buffer = try await collectJSON(request)
        guard buffer.readableBytes > 0 else { return nil }
        // Foundation's decoder lets invalid UTF-8 and raw NULs through in values it skips: JSON has neither.
        guard String(validating: buffer.readableBytesView, as: UTF8.self) != nil, !buffer.readableBytesView.contains(0) else {
            throw APIError.badRequest("malformed JSON body: not valid UTF-8, or a raw NUL byte")
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(buffer.readableBytesView))
        } catch let e as DecodingError {
            throw APIError.badRequest("malformed JSON body: \(APIError.describe(e))")
        }
    }

    /// A JSON body, whole: 413 past `maxJSONBody`, 400 when it breaks off.
    func collectJSON(_ request: Request) async throws -> ByteBuffer {
        // A declared length past the limit is refused before any of the body is read (a client
        // waiting on `Expect: 100-continue` hears it at once).
        if let raw = request.headers[.contentLength], (HTTPNumber.nonNegative(raw) ?? .max) > config.maxJSONBody {
            throw APIError(.contentTooLarge, .payloadTooLarge, "the JSON body is larger than \(config.maxJSONBody) bytes")
        }
        var request = request
        do {
            return try await request.collectBody(upTo: config.maxJSONBody)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, .payloadTooLarge, "the JSON body is larger than \(config.maxJSONBody) bytes")
        } catch {
            throw APIError(.badRequest, .sizeMismatch, "the JSON body broke off before its end")
        }
    }

    func json(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: WireJSON.bytes(value))))
    }

    /// The namespace named by the `:ns` route parameter.
    func namespace(_ context: some RequestContext) throws -> Namespace {
        let raw = context.parameters.get("ns") ?? ""
        return try Namespace(PathEncoding.decode(raw) ?? raw)
    }

    /// The storage path after a route's fixed prefix, percent-decoded and validated.
    ///
    /// Taken from the raw request path (not the router's split) so that `//`, `.` and `..`
    /// segments are seen and refused rather than normalised away.
    func path(_ request: Request, after fixedSegments: Int, allowRoot: Bool = false, allowTrailingSlash: Bool = false) throws -> StoragePath {
        var segments = request.uri.path.split(separator: "/", omittingEmptySubsequences: false).dropFirst(1 + fixedSegments)
        if allowTrailingSlash, segments.count > 1, segments.last == "" { segments = segments.dropLast() }
        if segments.isEmpty || segments == [""] {
            if allowRoot { return .root }
            throw NameError.emptyPath
        }
        var names: [String] = []
        for s in segments {
            guard let name = PathEncoding.decode(s) else { throw APIError(.badRequest, .invalidPath, "bad percent-encoding in `\(s)`") }
            names.append(name)
        }
        return try StoragePath(segments: names)
    }

    /// The base URL for links in answers.
    func baseURL(_ request: Request) -> String {
        if let configured = config.publicURL { return configured.hasSuffix("/") ? String(configured.dropLast()) : configured }
        let host = request.head.authority ?? "\(config.host):\(config.port)"
        return "\(config.scheme)://\(host)"
    }

    /// A file record of a node, as answered to clients.
    func record(_ node: Node, base: String) -> FileRecord {
        FileRecord(posixRecord(node), namespace: node.namespace, path: node.path, origin: base)
    }

    /// What `browse?fields=posix` lists of a node; the seed's record is made from it.
    func posixRecord(_ node: Node) -> PosixRecord {
        let i = node.inode
        return PosixRecord(
            fileName: node.path.name, contentType: i.contentType ?? (i.kind == .directory ? "inode/directory" : ContentTypes.fallback),
            size: i.size, tags: i.tags, etag: i.etag, sha256: i.sha256, metadata: i.metadata, isPublic: i.isPublic, kind: i.kind, inode: i.ino,
            mode: i.mode, uid: i.uid, gid: i.gid, nlink: i.nlink, atimeNs: i.atimeNs, mtimeNs: i.mtimeNs, ctimeNs: i.ctimeNs, btimeNs: i.btimeNs,
            target: i.target, rdev: i.rdev)
    }

    // MARK: - Validation of user-given attributes

    func validate(tags: [String]?) throws {
        guard let tags else { return }
        guard tags.count <= AttributeRules.maxTags else { throw APIError.badRequest("at most \(AttributeRules.maxTags) tags per file") }
        for t in tags where !AttributeRules.isValidTag(t) {
            throw APIError.badRequest("tag `\(t)` is not valid: 1–\(AttributeRules.maxTagBytes) bytes, no commas or control characters")
        }
    }

    func validate(metadata: [String: String]?) throws {
        guard let metadata else { return }
        guard metadata.count <= AttributeRules.maxMetadataKeys else {
            throw APIError.badRequest("at most \(AttributeRules.maxMetadataKeys) metadata keys per file")
        }
        for (k, v) in metadata {
            guard AttributeRules.isValidMetadataKey(k) else {
                throw APIError.badRequest("metadata key `\(k)` is not valid: 1–\(AttributeRules.maxKeyBytes) bytes, no control characters")
            }
            guard AttributeRules.isValidMetadataValue(v) else {
                throw APIError.badRequest("metadata value of `\(k)` is not valid: at most \(AttributeRules.maxValueBytes) bytes, no NUL")
            }
        }
    }

    func validate(contentType: String?) throws {
        if let ct = contentType, !ContentTypes.isValid(ct) {
            throw APIError.badRequest("content type `\(ct)` is not valid: use `type/subtype`")
        }
    }

    /// A new random id (upload ids double as blob ids): 128 bits, hex.
    static func newID() -> String {
        Hex.random(bytes: 16)
    }
}
