import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Answers `Expect: 100-continue` with `100 Continue` as soon as the request's head arrives.
///
/// A client that asks waits for it (or for a final answer) before it sends the body, and
/// Hummingbird sends neither by itself: such a client waited until it gave up (curl sends the body
/// after a second anyway; others wait for ever). Every stowd route either reads the body or
/// answers without it, so agreeing at once is always right; a route that refuses the request
/// still answers its final status, and the client stops sending.
final class ExpectContinueHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data), head.headerFields[.expect]?.lowercased() == "100-continue" {
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
        }
        context.fireChannelRead(data)
    }
}
