import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Reads whose bytes come straight from an object store.
///
/// A stowd that keeps files in an S3 bucket answers `GET` of a signed URL with a redirect (307)
/// to a presigned GET of the version's blob, with the file's ETag. The blob is immutable, so the
/// redirect stands for that version while it is valid: reads pinned to the same ETag go to the
/// store directly (one request instead of two), and the server sees only the first. A target
/// the store refuses (expired, the blob collected) is forgotten and the server asked again, which
/// answers for the file as it is now (412 if it changed).
extension HTTPObjectStore {
    /// Where a signed URL was redirected, and for which version.
    struct DirectTarget: Sendable {
        var url: String
        var etag: String
        var until: ContinuousClock.Instant
    }

    /// Redirect targets by signed URL, bounded (`limit`).
    struct DirectTargets: Sendable {
        static let limit = 4096
        var byURL: [String: DirectTarget] = [:]

        func target(for url: String, etag: String, now: ContinuousClock.Instant) -> String? {
            guard let t = byURL[url], t.etag == etag, now < t.until else { return nil }
            return t.url
        }

        mutating func insert(_ target: DirectTarget, for url: String, now: ContinuousClock.Instant) {
            if byURL.count >= Self.limit {
                byURL = byURL.filter { now < $0.value.until }
                // Still full of live ones: drop any half (a dropped one costs one redirect more).
                if byURL.count >= Self.limit { byURL = Dictionary(uniqueKeysWithValues: byURL.prefix(Self.limit / 2).map { ($0.key, $0.value) }) }
            }
            byURL[url] = target
        }
    }

    /// The answer of a GET of a signed URL, redirects followed; `etag` is the file's (the
    /// server's, also when the bytes came from the store).
    struct FollowedResponse {
        var response: HTTPClientResponse
        var etag: String?
    }

    static let redirectStatuses: Set<UInt> = [301, 302, 303, 307, 308]

    /// GETs a signed URL with `Range` and `If-Match`, and follows the server's redirect to the
    /// object store (sending only `Range` there: the store's ETags are not the server's). The body
    /// of the answer returned is not read yet.
    func getFollowingRedirect(_ url: String, range: Range<Int64>?, ifMatch: String?, timeout: TimeAmount) async throws -> FollowedResponse {
        let rangeOnly = Self.readHeaders(range, ifMatch: nil)
        if let ifMatch, let target = directTargets.withLock({ $0.target(for: url, etag: ifMatch, now: .now) }) {
            let response = try await send(makeRequest(.GET, target, headers: rangeOnly, authorized: false), timeout: timeout)
            if response.status == .ok || response.status == .partialContent { return FollowedResponse(response: response, etag: ifMatch) }
            // Expired, or the blob is gone: ask the server about the file as it is now.
            _ = try? await response.body.collect(upTo: 1 << 20)
            forgetDirectTarget(url)
        }
        // With If-Match, say that a redirect is welcome: it is not sent on to the store.
        let headers = Self.readHeaders(range, ifMatch: ifMatch) + (ifMatch == nil ? [] : [("Stow-Direct-Read", "1")])
        let response = try await send(makeRequest(.GET, url, headers: headers, authorized: false), timeout: timeout)
        let etag = response.headers.first(name: "ETag").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) }
        guard Self.redirectStatuses.contains(response.status.code), let location = response.headers.first(name: "Location"), !location.isEmpty else {
            return FollowedResponse(response: response, etag: etag)
        }
        _ = try? await response.body.collect(upTo: 1 << 20)
        if let etag {
            // Valid for half what the server allowed (its Cache-Control max-age), to be safe from clocks.
            let seconds = Self.maxAge(response.headers.first(name: "Cache-Control")) ?? 0
            if seconds > 0 {
                directTargets.withLock {
                    $0.insert(DirectTarget(url: location, etag: etag, until: .now + .seconds(seconds)), for: url, now: .now)
                }
            }
        }
        let direct = try await send(makeRequest(.GET, location, headers: rangeOnly, authorized: false), timeout: timeout)
        return FollowedResponse(response: direct, etag: etag)
    }

    func forgetDirectTarget(_ url: String) {
        _ = directTargets.withLock { $0.byURL.removeValue(forKey: url) }
    }

    /// `max-age=N` of a Cache-Control header.
    static func maxAge(_ header: String?) -> Int? {
        guard let header else { return nil }
        for part in header.split(separator: ",") {
            let p = part.trimmingCharacters(in: .whitespaces)
            if p.hasPrefix("max-age="), let n = Int(p.dropFirst("max-age=".count)), n >= 0 { return min(n, 24 * 3600) }
        }
        return nil
    }

    func send(_ request: HTTPClientRequest, timeout: TimeAmount) async throws -> HTTPClientResponse {
        do {
            return try await client.execute(request, timeout: timeout)
        } catch {
            throw transportError(error)
        }
    }
}

/// Reads beside the server: a stowd on this machine whose blobs are files in a local folder
/// answers a client that asks (`Stow-Local-Read: 1`) with the path of the version's blob file
/// (307 to `file://…`), which the client reads itself: no copy through HTTP, none into a cache.
extension HTTPObjectStore {
    /// The blob file of version `etag` of the file a signed URL names, if the server offers it;
    /// nil when it does not (then the bytes come as always). A version that is no longer the
    /// file's throws `.preconditionFailed`.
    public func localBlobPath(url: String, etag: String) async throws -> String? {
        // Only a server reached on loopback is on this machine; another's paths mean nothing here
        // (and it is not asked: one round trip saved per file).
        guard Self.isLoopback(endpoint: configuration.endpoint) else { return nil }
        let headers = Self.readHeaders(0..<1, ifMatch: etag) + [("Stow-Local-Read", "1")]
        let response = try await send(makeRequest(.GET, url, headers: headers, authorized: false), timeout: .seconds(60))
        let status = Int(response.status.code)
        let body = (try? await response.body.collect(upTo: 1 << 20)) ?? ByteBuffer()
        if status == 200 || status == 206 { return nil }
        guard Self.redirectStatuses.contains(response.status.code) else { throw failure(Answer(status: status, headers: response.headers, body: body)) }
        guard let location = response.headers.first(name: "Location"), location.hasPrefix("file:///") else { return nil }
        let path = String(location.dropFirst("file://".count))
        guard Self.isBlobFilePath(path) else {
            throw StorageError(.protocolViolation, "the server gave a local path that is not one of its blob files: \(location)")
        }
        return path
    }

    /// Whether an endpoint's host is a loopback address (`127.0.0.0/8`, `::1`, `localhost`): an
    /// address read as one (`inet_pton`), not a name that begins like one (`127.evil.example`).
    static func isLoopback(endpoint: String) -> Bool {
        guard let host = URLComponents(string: endpoint)?.host else { return false }
        let bare = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if bare == "localhost" { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, bare, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, bare, &v6) == 1 { return withUnsafeBytes(of: v6) { $0.elementsEqual([UInt8](repeating: 0, count: 15) + [1]) } }
        return false
    }

    /// A stowd blob file's path, and nothing else: absolute, plain (no NUL, no `.` or `..`, no
    /// empty segment), ending in `blobs/<xy>/<id>` with a hex id that begins with `xy`. A server
    /// that points elsewhere (`/etc/shadow`, another user's file) is refused: through a mount with
    /// `allow_other`, anyone could read what the mount's user can.
    public static func isBlobFilePath(_ path: String) -> Bool {
        guard path.hasPrefix("/"), !path.utf8.contains(0) else { return false }
        let parts = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 4, !parts.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) else { return false }
        let id = parts[parts.count - 1], shard = parts[parts.count - 2]
        let hex = id.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) || $0 == 45 }
        return parts[parts.count - 3] == "blobs" && id.count >= 16 && hex && shard == id.prefix(2)
    }
}
