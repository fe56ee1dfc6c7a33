import Foundation
import Prometheus
import HTTPTypes
import Hummingbird
import NIOCore
import StorageProtocol

/// `GET`/`HEAD /cdn/{ns}/{path}`: a file's bytes, for public files, signed URLs, or a token with read.
extension StowService {
    func addDownloadRoutes(to router: Router<BasicRequestContext>) {
        router.get("/cdn/:ns/**") { req, ctx in try await self.download(req, ctx) }
        router.head("/cdn/:ns/**") { req, ctx in try await self.download(req, ctx) }
    }

    func download(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        let path = try path(request, after: 2)
        let q = request.uri.queryParameters
        let signature = q[Substring(Routes.signatureParameter)].map(String.init)
        var authorized = false
        if signature != nil || q[Substring(Routes.expiresParameter)] != nil {
            try signer.verify(
                signature, scope: .read, resource: URLSigner.readResource(ns, path),
                expires: HTTPNumber.nonNegative(q[Substring(Routes.expiresParameter)]), now: Timestamp.nowSeconds())
            authorized = true
        } else if bearerToken(request) != nil {
            try authorize(request, ns.name, .read)
            authorized = true
        }
        let node: Node
        do {
            node = try await store.node(ns, path)
        } catch let e as StoreError where !authorized {
            // Without a grant, do not tell a private file from a missing one.
            _ = e
            throw APIError.forbidden("this file is not public; use a signed URL")
        }
        if !authorized && !node.inode.isPublic { throw APIError.forbidden("this file is not public; use a signed URL") }
        guard node.inode.kind == .file, let blob = node.inode.blob else { throw APIError.notFound("`\(path)` is not a file") }

        let size = node.inode.size
        let etag = "\"\(node.inode.etag)\""
        var headers: HTTPFields = [
            .eTag: etag, .acceptRanges: "bytes", .contentType: node.inode.contentType ?? ContentTypes.fallback,
            .lastModified: HTTPDate.format(seconds: node.inode.mtimeNs / 1_000_000_000),
            .cacheControl: node.inode.isPublic && !authorized ? "public, max-age=60" : "private, max-age=60",
        ]
        if let ifNoneMatch = request.headers[.ifNoneMatch], ETag.matches(ifNoneMatch, node.inode.etag) {
            return Response(status: .notModified, headers: headers)
        }
        if let ifMatch = request.headers[.ifMatch], !ETag.matches(ifMatch, node.inode.etag) {
            throw APIError(.preconditionFailed, .preconditionFailed, "the file has changed (ETag is now \(etag))", headers: [.eTag: etag])
        }
        var status = HTTPResponse.Status.ok
        var range: Range<Int64> = 0..<size
        switch Self.parseRange(request.headers[.range], size: size) {
        case .full:
            break
        case .partial(let r):
            range = r
            status = .partialContent
            headers[.contentRange] = "bytes \(r.lowerBound)-\(r.upperBound - 1)/\(size)"
        case .unsatisfiable:
            throw APIError(.rangeNotSatisfiable, .rangeNotSatisfiable, "the file has \(size) bytes", headers: [.contentRange: "bytes */\(size)"])
        }
        let length = range.upperBound - range.lowerBound
        headers[.contentLength] = String(length)
        if request.method == .head { return Response(status: status, headers: headers) }
        let source = try await locateBlob(blob, size: size)
        if case .stored(let id) = source, size > 0, authorized, request.headers[Self.localReadHeader] == "1", config.localReads, let path = blobs.localPath(id) {
            // A client on this machine reads the version's blob file itself (`localReads`): the
            // checks above and the grant are the server's, the bytes the disk's. The file is
            // immutable, and kept `blobGrace` after the version is superseded.
            metrics.localReads.increment()
            return Response(status: .temporaryRedirect, headers: [.location: "file://" + path, .eTag: etag, .contentLength: "0", .cacheControl: "private, no-store"])
        }
        if case .stored(let id) = source, size > 0, !config.proxyDownloads, Self.mayRedirect(request, range: status == .partialContent),
            let direct = blobs.directRead(id, contentType: headers[.contentType] ?? ContentTypes.fallback, expiresIn: config.directReadLifetime)
        {
            // The bytes come straight from the object store: a presigned GET of this version's
            // blob (immutable), which honours the same Range. The ETag, the checks above and the
            // grant stay the server's; the redirect is good for `directReadLifetime` seconds.
            metrics.directReads.increment()
            return Response(
                status: .temporaryRedirect,
                headers: [.location: direct, .eTag: etag, .cacheControl: "private, max-age=\(config.directReadLifetime / 2)", .contentLength: "0"])
        }
        let blobs = self.blobs, metrics = self.metrics, bytes = range
        return Response(
            status: status, headers: headers,
            body: ResponseBody(contentLength: Int(length)) { writer in
                try await source.read(bytes, from: blobs) { chunk in
                    try await writer.write(chunk)
                    metrics.bytesSent.increment(by: Int64(chunk.readableBytes))
                }
                try await writer.finish(nil)
            })
    }

    /// The header with which a client says it follows a redirect to the object store without
    /// sending on `If-Match` (which the store would compare with an ETag of its own).
    static let directReadHeader = HTTPField.Name("Stow-Direct-Read")!

    /// The header with which a client on this machine asks for the path of the blob file instead
    /// of its bytes (`ServerConfiguration.localReads`).
    static let localReadHeader = HTTPField.Name("Stow-Local-Read")!

    /// Whether a download may be answered with a redirect to the object store: not when it carries
    /// a condition (`If-Match`, `If-None-Match`, `If-Range`, `If-Modified-Since`,
    /// `If-Unmodified-Since`), which a client following the redirect would send on to the store —
    /// whose ETags and dates are its own, and which refuses some the server ignores — unless the
    /// client says it does not (`Stow-Direct-Read: 1`, as StowFS's client does). The server then
    /// sends the bytes itself.
    /// A `Range` goes on to the store as it is, so only a plain one (`bytes=A-B`, `bytes=A-`,
    /// `bytes=-N`, digits only) that this server took as a range (`isRange`) is redirected: the
    /// store may read another (several ranges, numbers past 2^63, signs) differently than this
    /// server does, which serves those itself.
    static func mayRedirect(_ request: Request, range isRange: Bool) -> Bool {
        if let range = request.headers[.range], !(isRange && isPlainRange(range)) { return false }
        if request.headers[directReadHeader] == "1" { return true }
        return conditions.allSatisfy { request.headers[$0] == nil }
    }

    static let conditions: [HTTPField.Name] = [.ifMatch, .ifNoneMatch, .ifRange, .ifModifiedSince, .ifUnmodifiedSince]

    /// `bytes=A-B`, `bytes=A-` or `bytes=-N` with ASCII digits and nothing else.
    static func isPlainRange(_ header: String) -> Bool {
        guard header.hasPrefix("bytes=") else { return false }
        let spec = header.utf8.dropFirst("bytes=".count)
        let parts = spec.split(separator: UInt8(ascii: "-"), maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, !(parts[0].isEmpty && parts[1].isEmpty) else { return false }
        return parts.allSatisfy { $0.count <= 19 && $0.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) } }
    }

    enum RangeRequest: Equatable {
        case full
        case partial(Range<Int64>)
        case unsatisfiable
    }

    /// One `bytes=` range; anything else (several ranges, bad syntax, a number past `Int64.max`)
    /// is served whole, as RFC 9110 allows. No arithmetic here can overflow: every bound is
    /// compared with `size` before one is added to it.
    static func parseRange(_ header: String?, size: Int64) -> RangeRequest {
        guard let header, header.hasPrefix("bytes="), !header.contains(",") else { return .full }
        let spec = header.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .full }
        if parts[0].isEmpty {
            guard let n = HTTPNumber.nonNegative(parts[1]) else { return .full }
            guard n > 0 else { return .unsatisfiable }
            return size == 0 ? .unsatisfiable : .partial((n >= size ? 0 : size - n)..<size)
        }
        guard let start = HTTPNumber.nonNegative(parts[0]) else { return .full }
        if start >= size { return .unsatisfiable }
        if parts[1].isEmpty { return .partial(start..<size) }
        guard let end = HTTPNumber.nonNegative(parts[1]), end >= start else { return .full }
        return .partial(start..<(end >= size ? size : end + 1))
    }
}
