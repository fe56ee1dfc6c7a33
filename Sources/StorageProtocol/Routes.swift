/// The paths of the API, in one place, for the server's router and the client alike.
public enum Routes {
    /// The prefix of every API route.
    public static let prefix = "/service/application/assets"

    public static func startUpload(_ ns: Namespace) -> String { "\(prefix)/v2.0/namespaces/\(ns)/upload/start" }
    public static func completeUpload(_ ns: Namespace) -> String { "\(prefix)/v2.0/namespaces/\(ns)/upload/complete" }
    public static func startUploadV1(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)/upload/start/" }
    /// start + PUT + complete in one request (a StowFS extension, for small files).
    public static func renewUpload(_ ns: Namespace) -> String { "\(prefix)/v2.0/namespaces/\(ns)/upload/renew" }
    public static func directUpload(_ ns: Namespace) -> String { "\(prefix)/v2.0/namespaces/\(ns)/upload/direct" }
    /// The header that carries a direct upload's declaration (start's JSON body, base64).
    public static let directUploadHeader = "Stow-Upload"
    /// Several small files in one request and one transaction (a StowFS extension); see `BatchUpload`.
    public static func batchUpload(_ ns: Namespace) -> String { "\(prefix)/v2.0/namespaces/\(ns)/upload/batch" }
    /// Several deletes in one request and one transaction (a StowFS extension); see `BatchDelete`.
    public static func batchDelete(_ ns: Namespace) -> String { "\(prefix)/v2.0/namespaces/\(ns)/delete/batch" }
    /// Presigned part URLs of a direct upload (a server whose blobs are in S3).
    public static func uploadParts(_ ns: Namespace) -> String { "\(prefix)/v2.0/namespaces/\(ns)/upload/parts" }
    public static func completeUploadV1(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)/upload/complete/" }
    public static let signURLs = "\(prefix)/v1.0/sign-urls"
    public static func browse(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)/browse" }
    public static func search(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)/search" }
    public static let copy = "\(prefix)/v1.0/uploads/copy"
    public static func copyTask(_ id: String) -> String { "\(prefix)/v1.0/uploads/copy/\(id)" }

    public static let namespaces = "\(prefix)/v1.0/namespaces"
    public static func namespace(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)" }
    public static func file(_ ns: Namespace, _ path: StoragePath) -> String {
        "\(prefix)/v1.0/namespaces/\(ns)/files/\(PathEncoding.encode(path: path))"
    }
    public static func folder(_ ns: Namespace, _ path: StoragePath) -> String {
        "\(prefix)/v1.0/namespaces/\(ns)/folders/\(PathEncoding.encode(path: path))"
    }
    public static func node(_ ns: Namespace, _ path: StoragePath) -> String {
        "\(prefix)/v1.0/namespaces/\(ns)/nodes/\(PathEncoding.encode(path: path))"
    }
    public static func rename(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)/rename" }
    public static func link(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)/link" }
    public static func formUpload(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)/upload/form" }
    /// The namespace's change feed (`?since=CURSOR&wait=SECONDS`, or `&stream=true` for SSE).
    public static func changes(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)/changes" }
    /// Take, change or release a lock (`LockRequest`); `locks/test` asks without taking (F_GETLK).
    public static func locks(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)/locks" }
    public static func testLock(_ ns: Namespace) -> String { "\(prefix)/v1.0/namespaces/\(ns)/locks/test" }
    /// A mount's lock session: PUT starts or renews it, DELETE ends it (its locks go with it).
    public static func lockSession(_ ns: Namespace, _ id: String) -> String { "\(prefix)/v1.0/namespaces/\(ns)/locks/sessions/\(id)" }
    /// The header by which a client names itself on every request, so that it can tell its own
    /// changes in the feed (`ChangeRecord.origin`): 1–64 of `A-Z a-z 0-9 . _ -`.
    public static let originHeader = "Stow-Origin"

    /// The storage link of an upload (signed; also a tus upload resource).
    public static func storageLink(_ uploadID: String) -> String { "/storage/uploads/\(uploadID)" }
    /// tus creation endpoint.
    public static let tusFiles = "/tus/files"
    public static func tusFile(_ uploadID: String) -> String { "/tus/files/\(uploadID)" }
    /// Public (or signed) read of a file.
    public static func cdn(_ ns: Namespace, _ path: StoragePath) -> String { "/cdn/\(ns)/\(PathEncoding.encode(path: path))" }
    public static let health = "/healthz"
    public static let metrics = "/metrics"

    /// Query parameter names of signed URLs.
    public static let expiresParameter = "expires"
    public static let signatureParameter = "signature"
}
