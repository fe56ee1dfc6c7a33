import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFileSystem
import NIOHTTP1

/// The few S3 calls stowd makes, signed with `SigV4` in headers, path-style
/// (`ENDPOINT/BUCKET/KEY`), bodies unsigned (`UNSIGNED-PAYLOAD`: they stream from disk and TLS
/// protects them on the way where the endpoint is https).
///
/// Every failure to reach the store, and every answer that is not the one expected, is a
/// `BlobStoreError.unavailable` with the operation, the status and the store's own code; a
/// missing object is `BlobStoreError.notFound`. Calls whose body can be sent again are retried
/// on a connection failure or a 5xx (three tries).
struct S3Client: Sendable {
    let location: S3Location
    let signer: SigV4
    let http: HTTPClient

    /// One client for every store of the process, never shut down (as `HTTPClient.shared`), but
    /// one that does not retry a refused connection until the request's deadline: a store that is
    /// away is said at once (stowd retries a few times itself, then answers 503).
    static let sharedHTTP: HTTPClient = {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow, timeout: .init(connect: .seconds(10), read: .seconds(120)))
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.connectionPool.idleTimeout = .seconds(30)
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }()

    init(_ location: S3Location, http: HTTPClient = S3Client.sharedHTTP) {
        self.location = location
        self.signer = SigV4(accessKey: location.accessKey, secretKey: location.secretKey, region: location.region)
        self.http = http
    }

    /// A key in the bucket: under the prefix, if any.
    func key(_ name: String) -> String { location.prefix.isEmpty ? name : location.prefix + "/" + name }

    /// The body of a request, made again for each try.
    enum Body: Sendable {
        case none
        case bytes(ByteBuffer)
        /// `length` bytes of a local file from `offset`.
        case file(path: String, offset: Int64, length: Int64)
    }

    struct Answer: Sendable {
        var status: Int
        var headers: HTTPHeaders
        var body: ByteBuffer
    }

    // MARK: objects

    func putObject(_ key: String, _ body: Body) async throws {
        _ = try await call("PUT", key: key, body: body, expect: [200])
    }

    /// The object's size; nil when there is none.
    func headObject(_ key: String) async throws -> Int64? {
        let answer = try await call("HEAD", key: key, expect: [200, 404])
        guard answer.status == 200 else { return nil }
        guard let length = answer.headers.first(name: "Content-Length").flatMap({ Int64($0) }), length >= 0 else {
            throw BlobStoreError.unavailable("the object store's HEAD of \(key) has no Content-Length")
        }
        return length
    }

    /// Hands the bytes `range` of an object to `consume` as they arrive (at its pace).
    func getObject(_ key: String, range: Range<Int64>, into consume: (ByteBuffer) async throws -> Void) async throws {
        guard !range.isEmpty else { return }
        let request = try makeRequest("GET", key: key, query: [], headers: [("Range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")], body: .none)
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: .seconds(60))
        } catch {
            throw BlobStoreError.unavailable("the object store cannot be reached for GET \(key): \(error)")
        }
        guard response.status.code == 206 || response.status.code == 200 else {
            let body = try? await response.body.collect(upTo: 64 << 10)
            if response.status.code == 404 { throw BlobStoreError.notFound(key) }
            throw Self.failure("GET \(key)", Int(response.status.code), body)
        }
        // A store that ignores Range answers 200 with everything: skip to the range ourselves.
        var skip = response.status.code == 200 ? range.lowerBound : 0
        var remaining = range.count
        for try await var chunk in response.body {
            if skip > 0 {
                let n = Int(min(skip, Int64(chunk.readableBytes)))
                chunk.moveReaderIndex(forwardBy: n)
                skip -= Int64(n)
            }
            if chunk.readableBytes > remaining { chunk = chunk.getSlice(at: chunk.readerIndex, length: remaining) ?? ByteBuffer() }
            guard chunk.readableBytes > 0 else { continue }
            remaining -= chunk.readableBytes
            try await consume(chunk)
            if remaining == 0 { break }
        }
        guard remaining == 0 else { throw BlobStoreError.unavailable("the object store's answer for \(key) broke off \(remaining) bytes short") }
    }

    func deleteObject(_ key: String) async throws {
        _ = try await call("DELETE", key: key, expect: [204, 200, 404])
    }

    /// Every key under `prefix` with its last change (ListObjectsV2, page by page).
    func listKeys(prefix: String) async throws -> [(key: String, modified: Date?)] {
        var keys: [(key: String, modified: Date?)] = []
        var token: String?
        repeat {
            var query = [("list-type", "2"), ("prefix", prefix), ("max-keys", "1000")]
            if let token { query.append(("continuation-token", token)) }
            let answer = try await call("GET", key: nil, query: query, expect: [200])
            let xml = String(buffer: answer.body)
            for entry in XMLScan.values(of: "Contents", in: xml) {
                guard let key = XMLScan.values(of: "Key", in: entry).first else { continue }
                keys.append((key, XMLScan.values(of: "LastModified", in: entry).first.flatMap(Self.parseTime)))
            }
            token = XMLScan.values(of: "IsTruncated", in: xml).first == "true" ? XMLScan.values(of: "NextContinuationToken", in: xml).first : nil
        } while token != nil
        return keys
    }

    /// S3's times: `2026-11-24T12:15:25.000Z` (fractions optional).
    static func parseTime(_ text: String) -> Date? {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: text) { return d }
        f.formatOptions = [.withInternetDateTime]
        return f.date(from: text)
    }

    // MARK: multipart uploads

    func createMultipartUpload(_ key: String) async throws -> String {
        let answer = try await call("POST", key: key, query: [("uploads", "")], expect: [200])
        guard let id = XMLScan.values(of: "UploadId", in: String(buffer: answer.body)).first, !id.isEmpty else {
            throw BlobStoreError.unavailable("the object store's answer to CreateMultipartUpload for \(key) has no UploadId")
        }
        return id
    }

    /// Sends one part; returns its ETag (as the store gave it, quotes and all).
    func uploadPart(_ key: String, uploadID: String, number: Int, _ body: Body) async throws -> String {
        let answer = try await call("PUT", key: key, query: [("partNumber", String(number)), ("uploadId", uploadID)], body: body, expect: [200])
        guard let etag = answer.headers.first(name: "ETag") else {
            throw BlobStoreError.unavailable("the object store's answer to part \(number) of \(key) has no ETag")
        }
        return etag
    }

    func completeMultipartUpload(_ key: String, uploadID: String, parts: [(number: Int, etag: String)]) async throws {
        var xml = "<CompleteMultipartUpload>"
        for p in parts { xml += "<Part><PartNumber>\(p.number)</PartNumber><ETag>\(XMLScan.escape(p.etag))</ETag></Part>" }
        xml += "</CompleteMultipartUpload>"
        let answer = try await call("POST", key: key, query: [("uploadId", uploadID)], body: .bytes(ByteBuffer(string: xml)), expect: [200])
        // S3 may answer 200 and put its error in the body.
        let text = String(buffer: answer.body)
        if text.contains("<Error>") { throw Self.failure("CompleteMultipartUpload \(key)", 200, answer.body) }
    }

    /// The multipart uploads in progress under `prefix`: key, upload id, when it began (page by page).
    func listMultipartUploads(prefix: String) async throws -> [(key: String, uploadID: String, initiated: Date?)] {
        var uploads: [(key: String, uploadID: String, initiated: Date?)] = []
        var keyMarker: String?, idMarker: String?
        repeat {
            var query = [("uploads", ""), ("prefix", prefix), ("max-uploads", "1000")]
            if let keyMarker { query.append(("key-marker", keyMarker)) }
            if let idMarker { query.append(("upload-id-marker", idMarker)) }
            let answer = try await call("GET", key: nil, query: query, expect: [200])
            let xml = String(buffer: answer.body)
            for entry in XMLScan.values(of: "Upload", in: xml) {
                guard let key = XMLScan.values(of: "Key", in: entry).first, let id = XMLScan.values(of: "UploadId", in: entry).first else { continue }
                uploads.append((key, id, XMLScan.values(of: "Initiated", in: entry).first.flatMap(Self.parseTime)))
            }
            let truncated = XMLScan.values(of: "IsTruncated", in: xml).first == "true"
            keyMarker = truncated ? XMLScan.values(of: "NextKeyMarker", in: xml).first : nil
            idMarker = truncated ? XMLScan.values(of: "NextUploadIdMarker", in: xml).first : nil
        } while keyMarker != nil
        return uploads
    }

    /// The parts a multipart upload holds: number, size, ETag, in the store's order (page by
    /// page). A part sent twice may be listed twice (SeaweedFS keeps both): the last one counts.
    func listParts(_ key: String, uploadID: String) async throws -> [(number: Int, size: Int64, etag: String)] {
        var parts: [(number: Int, size: Int64, etag: String)] = []
        var marker: String?
        repeat {
            var query = [("uploadId", uploadID), ("max-parts", "1000")]
            if let marker { query.append(("part-number-marker", marker)) }
            let answer = try await call("GET", key: key, query: query, expect: [200])
            let xml = String(buffer: answer.body)
            for entry in XMLScan.values(of: "Part", in: xml) {
                guard let n = XMLScan.values(of: "PartNumber", in: entry).first.flatMap({ Int($0) }),
                    let size = XMLScan.values(of: "Size", in: entry).first.flatMap({ Int64($0) }),
                    let etag = XMLScan.values(of: "ETag", in: entry).first
                else { continue }
                parts.append((n, size, etag))
            }
            marker = XMLScan.values(of: "IsTruncated", in: xml).first == "true" ? XMLScan.values(of: "NextPartNumberMarker", in: xml).first : nil
        } while marker != nil
        return parts
    }

    /// A presigned URL for one request on `key` (a client's PUT of a blob or of a part).
    func presign(_ method: String, key: String, query: [(String, String)] = [], headers: [(String, String)] = [], expires: Int) -> String {
        signer.presignedURL(method: method, endpoint: location.endpoint, path: path(key), query: query, headers: headers, expires: expires, now: Date())
    }

    func abortMultipartUpload(_ key: String, uploadID: String) async throws {
        _ = try await call("DELETE", key: key, query: [("uploadId", uploadID)], expect: [204, 200, 404])
    }

    // MARK: the bucket

    /// Makes the bucket if it is not there (a new cluster's first start).
    func ensureBucket() async throws {
        let head = try await call("HEAD", key: nil, expect: [200, 404])
        if head.status == 404 { _ = try await call("PUT", key: nil, expect: [200, 409]) }
    }

    // MARK: requests

    func path(_ key: String?) -> String { "/" + location.bucket + (key.map { "/" + $0 } ?? "") }

    /// A signed request; a file body is read from `file` (opened by the caller around the call).
    func makeRequest(_ method: String, key: String?, query: [(String, String)], headers: [(String, String)], body: Body, file: ReadFileHandle? = nil) throws -> HTTPClientRequest {
        let signed = signer.signedHeaders(
            method: method, endpoint: location.endpoint, path: path(key), query: query, headers: headers.map { ($0.0.lowercased(), $0.1) },
            payloadHash: SigV4.unsignedPayload, now: Date())
        let root = location.endpoint.hasSuffix("/") ? String(location.endpoint.dropLast()) : location.endpoint
        var url = root + SigV4.encode(path(key), keepSlash: true)
        if !query.isEmpty { url += "?" + SigV4.canonicalQuery(query) }
        var request = HTTPClientRequest(url: url)
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in signed { request.headers.add(name: name, value: value) }
        switch body {
        case .none: break
        case .bytes(let b): request.body = .bytes(b)
        case .file(_, let offset, let n):
            guard let file else { preconditionFailure("a file body needs its handle") }
            request.body = .stream(file.readChunks(in: offset..<(offset + n), chunkLength: .mebibytes(1)), length: .known(n))
        }
        return request
    }

    /// Runs `send` with the file of a file body open (closed after, whatever happens).
    func withBodyFile<T>(_ body: Body, _ send: (ReadFileHandle?) async throws -> T) async throws -> T {
        guard case .file(let path, _, _) = body else { return try await send(nil) }
        let handle: ReadFileHandle
        do {
            handle = try await FileSystem.shared.openFile(forReadingAt: FilePath(path))
        } catch {
            throw BlobStoreError.notFound("staging file \(path): \(error)")
        }
        do {
            let result = try await send(handle)
            try? await Task { try await handle.close() }.value
            return result
        } catch {
            try? await Task { try await handle.close() }.value
            throw error
        }
    }

    /// One call whose answer is small: retried on a connection failure or a 5xx.
    func call(
        _ method: String, key: String?, query: [(String, String)] = [], headers: [(String, String)] = [], body: Body = .none, expect: Set<Int>
    ) async throws -> Answer {
        var attempt = 0
        while true {
            attempt += 1
            let what = "\(method) \(key ?? location.bucket)"
            do {
                let (status, responseHeaders, collected) = try await withBodyFile(body) { file in
                    let response = try await http.execute(try makeRequest(method, key: key, query: query, headers: headers, body: body, file: file), timeout: .seconds(300))
                    let collected = method == "HEAD" ? ByteBuffer() : try await response.body.collect(upTo: 16 << 20)
                    return (Int(response.status.code), response.headers, collected)
                }
                if expect.contains(status) { return Answer(status: status, headers: responseHeaders, body: collected) }
                if status == 404 && !expect.contains(404) { throw BlobStoreError.notFound(key ?? location.bucket) }
                let failure = Self.failure(what, status, collected)
                if status >= 500 && attempt < 3 {
                    try await Task.sleep(for: .milliseconds(200 * attempt))
                    continue
                }
                throw failure
            } catch let error as BlobStoreError {
                throw error
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                guard attempt < 3 else { throw BlobStoreError.unavailable("the object store cannot be reached for \(what): \(error)") }
                try await Task.sleep(for: .milliseconds(200 * attempt))
            }
        }
    }

    static func failure(_ what: String, _ status: Int, _ body: ByteBuffer?) -> BlobStoreError {
        let text = body.map { String(buffer: $0) } ?? ""
        let code = XMLScan.values(of: "Code", in: text).first ?? "?"
        let message = XMLScan.values(of: "Message", in: text).first ?? ""
        return .unavailable("the object store answered \(what) with \(status) \(code)\(message.isEmpty ? "" : ": " + message)")
    }
}

/// Reads the few values stowd needs out of S3's XML answers (no nesting ambiguity among them).
enum XMLScan {
    /// The text of every `<tag>…</tag>`, entities decoded.
    static func values(of tag: String, in xml: String) -> [String] {
        var out: [String] = []
        let open = "<\(tag)>", close = "</\(tag)>"
        var rest = xml[...]
        while let start = rest.range(of: open) {
            let after = rest[start.upperBound...]
            guard let end = after.range(of: close) else { break }
            out.append(unescape(String(after[..<end.lowerBound])))
            rest = after[end.upperBound...]
        }
        return out
    }

    /// The five named entities, and numeric ones (`&#34;`, `&#x22;`: SeaweedFS writes ETags' quotes so).
    static func unescape(_ s: String) -> String {
        guard s.contains("&") else { return s }
        var out = ""
        var rest = s[...]
        while let amp = rest.firstIndex(of: "&") {
            out += rest[..<amp]
            let after = rest[amp...]
            guard let semi = after.firstIndex(of: ";"), after.distance(from: after.startIndex, to: semi) <= 10 else {
                out += "&"
                rest = rest[rest.index(after: amp)...]
                continue
            }
            let name = after[after.index(after: after.startIndex)..<semi]
            var decoded: String?
            switch name {
            case "quot": decoded = "\""
            case "apos": decoded = "'"
            case "lt": decoded = "<"
            case "gt": decoded = ">"
            case "amp": decoded = "&"
            default:
                if name.hasPrefix("#x") || name.hasPrefix("#X") {
                    decoded = UInt32(name.dropFirst(2), radix: 16).flatMap(Unicode.Scalar.init).map { String($0) }
                } else if name.hasPrefix("#") {
                    decoded = UInt32(name.dropFirst(1)).flatMap(Unicode.Scalar.init).map { String($0) }
                }
            }
            if let decoded {
                out += decoded
                rest = rest[rest.index(after: semi)...]
            } else {
                out += "&"
                rest = rest[rest.index(after: amp)...]
            }
        }
        return out + rest
    }

    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
            .replacingOccurrences(of: "\"", with: "&quot;")
    }
}
