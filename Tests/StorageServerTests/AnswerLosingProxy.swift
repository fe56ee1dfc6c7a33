import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// An HTTP proxy in front of a server that passes requests on, and for chosen ones throws the
/// server's answer away and answers 503 instead: a request that was carried out, whose answer
/// was lost (the server died answering, a balancer gave up on it). One thread per connection,
/// one request per connection (it closes after each answer, and says so). `stop()` closes it.
final class AnswerLosingProxy: @unchecked Sendable {
    // @unchecked: the listening socket is set once in init; the rules are in a Mutex.
    let port: Int
    let target: (host: String, port: Int)
    private let listener: Int32
    private let rules = Mutex<[(match: String, left: Int)]>([])
    let lost = Atomic<Int>(0)

    var url: String { "http://127.0.0.1:\(port)" }

    init(target url: String) throws {
        guard let u = URL(string: url), let port = u.port else { throw RawSocket.Failure(description: "not a URL: \(url)") }
        target = ("127.0.0.1", port)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        listener = fd
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        self.port = Int(UInt16(bigEndian: address.sin_port))
        listen(fd, 64)
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 { return }
                Thread.detachNewThread { self.serve(client) }
            }
        }
    }

    /// The next `count` requests whose request line contains `match` are carried out, and answered 503.
    func loseAnswers(_ count: Int, of match: String) {
        rules.withLock { $0.append((match, count)) }
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve(_ client: Int32) {
        defer { close(client) }
        guard let request = Self.readMessage(client) else { return }
        let line = String(decoding: request.prefix { $0 != 13 }, as: UTF8.self)
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(server) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(target.port).bigEndian)
        inet_pton(AF_INET, target.host, &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0, Self.sendAll(server, request), let answer = Self.readMessage(server) else { return }
        let lose = rules.withLock { rules -> Bool in
            guard let i = rules.firstIndex(where: { line.contains($0.match) && $0.left > 0 }) else { return false }
            rules[i].left -= 1
            return true
        }
        if lose {
            lost.add(1, ordering: .relaxed)
            _ = Self.sendAll(client, Array("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8))
        } else {
            _ = Self.sendAll(client, Self.closing(answer))
        }
    }

    /// The answer, saying that the connection closes after it (it does): else the client keeps it
    /// for its next request, which then fails on a closed channel under load (a stale connection,
    /// not the lost answer a test means).
    static func closing(_ answer: [UInt8]) -> [UInt8] {
        guard let lineEnd = find([13, 10], in: answer) else { return answer }
        return Array(answer[..<(lineEnd + 2)]) + Array("Connection: close\r\n".utf8) + Array(answer[(lineEnd + 2)...])
    }

    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return false }
            sent += n
        }
        return true
    }

    /// One HTTP message: its head, and a body of its Content-Length (none without one).
    static func readMessage(_ fd: Int32) -> [UInt8]? {
        var data: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        var headEnd: Int?
        var total: Int?
        while true {
            if let t = total, data.count >= t { return Array(data.prefix(t)) }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return total == nil && headEnd == nil ? nil : data }
            data += chunk[0..<n]
            if headEnd == nil, let r = Self.find([13, 10, 13, 10], in: data) {
                headEnd = r + 4
                let head = String(decoding: data[0..<r], as: UTF8.self).lowercased()
                let length = head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                total = r + 4 + length
            }
        }
    }

    static func find(_ needle: [UInt8], in hay: [UInt8]) -> Int? {
        guard hay.count >= needle.count else { return nil }
        for i in 0...(hay.count - needle.count) where hay[i] == needle[0] && Array(hay[i..<(i + needle.count)]) == needle { return i }
        return nil
    }
}

extension Result where Failure == any Error {
    /// The result of an async throwing call.
    init(_ body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
