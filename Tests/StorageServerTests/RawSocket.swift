import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Bytes on a TCP connection, exactly as given: for requests no HTTP client would send (a
/// `Content-Length` that lies, a body cut off half way, headers of any size).
enum RawSocket {
    struct Failure: Error, CustomStringConvertible { var description: String }

    /// Connects to `url`'s host and port, sends `request`, optionally closes the sending side,
    /// and returns what the server answered within `timeout` (until it closes, or the time is up).
    /// The blocking socket calls run on a thread of their own: on the cooperative pool (two threads
    /// on two cores) a few of them at once would starve the in-process servers they wait for.
    static func exchange(_ url: String, _ request: [UInt8], closeAfterSending: Bool = false, timeout: Duration = .seconds(5)) async throws -> [UInt8] {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(with: Result { try exchangeBlocking(url, request, closeAfterSending: closeAfterSending, timeout: timeout) })
            }
        }
    }

    static func exchangeBlocking(_ url: String, _ request: [UInt8], closeAfterSending: Bool, timeout: Duration) throws -> [UInt8] {
        guard let u = URL(string: url), let host = u.host, let port = u.port else { throw Failure(description: "not a URL: \(url)") }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host, &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw Failure(description: "connect: \(errno)") }
        var tv = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var sent = 0
        while sent < request.count {
            let n = request[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }  // the server may close early (it refused the request): read its answer
            sent += n
        }
        if closeAfterSending { shutdown(fd, Int32(SHUT_WR)) }
        var answer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            answer += chunk[0..<n]
        }
        return answer
    }

    /// The status code of the first answer in `bytes` (`HTTP/1.1 413 …`), or nil.
    static func status(_ bytes: [UInt8]) -> Int? {
        let text = String(decoding: bytes.prefix(64), as: UTF8.self)
        let parts = text.split(separator: " ", maxSplits: 2)
        return parts.count >= 2 && parts[0].hasPrefix("HTTP/") ? Int(parts[1]) : nil
    }
}
