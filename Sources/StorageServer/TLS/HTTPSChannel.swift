import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL

/// The connections of an https stowd: Hummingbird's HTTP/1.1 behind HummingbirdTLS's `TLSChannel`,
/// with `PlainHTTPRefusal` in front of both so that a plain http request gets an answer that says why.
struct HTTPSChannel: ServerChildChannel {
    typealias Value = HTTP1Channel.Value
    let tls: TLSChannel<HTTP1Channel>

    init(responder: @escaping HTTPChannelHandler.Responder, tlsConfiguration: TLSConfiguration) throws {
        tls = try TLSChannel(HTTP1Channel(responder: responder, configuration: StowServer.http1Configuration), tlsConfiguration: tlsConfiguration)
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(PlainHTTPRefusal(), position: .first)
        }.flatMap {
            tls.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await tls.handle(value: value, logger: logger)
    }

    /// The server builder for `Application(server:)`.
    static func builder(tlsConfiguration: TLSConfiguration) -> HTTPServerBuilder {
        HTTPServerBuilder { responder in try HTTPSChannel(responder: responder, tlsConfiguration: tlsConfiguration) }
    }
}
