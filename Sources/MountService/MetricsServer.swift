import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import StowFS

/// `stowfs mount --metrics HOST:PORT`: `GET /metrics` answers with the mount's Prometheus text;
/// anything else is a 404 (a HEAD or another method a 405). Plain HTTP/1.1 with keep-alive, for a
/// Prometheus on the same machine or network; it shows counts, never names of files.
struct MetricsServer {
    /// Where to listen: `HOST:PORT`, `[IPv6]:PORT`, or a bare port (on 127.0.0.1).
    struct Address: Sendable, Equatable, CustomStringConvertible {
        var host: String
        var port: Int

        init?(_ text: String) {
            let t = text.trimmingCharacters(in: .whitespaces)
            if let port = Int(t) {
                host = "127.0.0.1"
                self.port = port
            } else if t.hasPrefix("["), let close = t.firstIndex(of: "]") {
                host = String(t[t.index(after: t.startIndex)..<close])
                let rest = t[t.index(after: close)...]
                guard rest.hasPrefix(":"), let port = Int(rest.dropFirst()) else { return nil }
                self.port = port
            } else {
                guard let colon = t.lastIndex(of: ":"), let port = Int(t[t.index(after: colon)...]) else { return nil }
                host = String(t[..<colon])
                self.port = port
            }
            guard !host.isEmpty, !host.contains(" "), (0...65535).contains(port) else { return nil }
        }

        var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    typealias Connection = NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>

    let channel: NIOAsyncChannel<AcceptedConnection, Never>

    /// Binds (an error here stops the mount before it is made).
    static func bind(_ address: Address) async throws -> MetricsServer {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .acceptingConnectionsLater()
            .bind(host: address.host, port: address.port) { channel in
                channel.eventLoop.makeCompletedFuture { AcceptedConnection(channel) }
            }
        return MetricsServer(channel: server)
    }

    /// `http://HOST:PORT/metrics`, with the port bound.
    var url: String {
        let a = channel.channel.localAddress
        let host = a?.ipAddress ?? "?"
        return "http://\(host.contains(":") ? "[\(host)]" : host):\(a?.port ?? 0)/metrics"
    }

    /// Stops listening without serving (the mount failed).
    func close() async { try? await channel.channel.close() }

    /// Answers until the task is cancelled; `text` makes each answer.
    func serve(_ text: @escaping @Sendable () async -> String) async {
        // Not a cancelled `for await` over the connections: see `serveAcceptedConnections`.
        try? await serveAcceptedConnections(
            channel,
            wrap: { channel in
                try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                return try Connection(wrappingChannelSynchronously: channel)
            }
        ) { connection in try? await Self.answer(connection, text) }
    }

    private static func answer(_ connection: Connection, _ text: @Sendable () async -> String) async throws {
        let underlying = connection.channel
        try await withTaskCancellationHandler {
            try await connection.executeThenClose { inbound, outbound in
                var head: HTTPRequestHead?
                for try await part in inbound {
                    switch part {
                    case .head(let h): head = h
                    case .body: break
                    case .end:
                        guard let h = head else { return }
                        head = nil
                        let path = h.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? h.uri
                        let (status, body): (HTTPResponseStatus, String) =
                            path != "/metrics" ? (.notFound, "not found: the metrics are at /metrics\n")
                            : h.method != .GET ? (.methodNotAllowed, "only GET\n")
                            : (.ok, await text())
                        var headers = HTTPHeaders()
                        headers.add(name: "Content-Type", value: status == .ok ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8")
                        headers.add(name: "Content-Length", value: String(body.utf8.count))
                        if !h.isKeepAlive { headers.add(name: "Connection", value: "close") }
                        try await outbound.write(.head(HTTPResponseHead(version: h.version, status: status, headers: headers)))
                        try await outbound.write(.body(.byteBuffer(ByteBuffer(string: body))))
                        try await outbound.write(.end(nil))
                        if !h.isKeepAlive { return }
                    }
                }
            }
        } onCancel: {
            underlying.close(promise: nil)
        }
    }
}
