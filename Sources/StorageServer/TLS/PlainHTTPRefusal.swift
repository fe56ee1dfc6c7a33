import Foundation
import NIOCore
import StorageProtocol

/// The first handler of a connection to an https stowd. A connection that opens with a TLS
/// handshake record goes on to TLS (and this handler leaves the pipeline); one that opens with
/// anything else — a plain http request — is answered `400` with a JSON error that says to use
/// https, then closed, as nginx does. Without it, such a client sees only a closed connection.
final class PlainHTTPRefusal: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// The first byte of a TLS record that carries a handshake (a ClientHello).
    static let handshakeRecord: UInt8 = 0x16

    /// The error body of the answer.
    static let body = WireJSON.encode(
        ErrorBody(message: "this server speaks https only: use https:// in the URL (the request arrived as plain http)", code: .badRequest))

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return }
        if first == Self.handshakeRecord {
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        var answer = context.channel.allocator.buffer(capacity: 160 + Self.body.count)
        answer.writeString("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\n")
        answer.writeString("Content-Length: \(Self.body.count)\r\nConnection: close\r\n\r\n")
        answer.writeBytes(Self.body)
        context.writeAndFlush(wrapOutboundOut(answer), promise: nil)
        context.close(promise: nil)
    }
}
