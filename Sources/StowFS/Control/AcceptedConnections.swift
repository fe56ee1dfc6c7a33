public import NIOCore
public import NIOPosix
import Synchronization

/// A connection a listener accepted, not yet wrapped: reads wait (`autoRead` off, see
/// `acceptingConnectionsLater`) until `serveAcceptedConnections` serves it.
public struct AcceptedConnection: Sendable {
    public let channel: any Channel
    public init(_ channel: any Channel) { self.channel = channel }
}

extension ServerBootstrap {
    /// Accepted connections read nothing until they are served (`serveAcceptedConnections`).
    public func acceptingConnectionsLater() -> ServerBootstrap { childChannelOption(.autoRead, value: false) }
}

/// Serves every connection a listening channel accepts, each wrapped by `wrap` (on its event loop)
/// and answered by `handle` in a task of its own, until the calling task is cancelled; then the
/// listener closes, connections not served yet are closed, and this returns once those being
/// served have ended (they are cancelled).
///
/// Why connections are wrapped here and not where they are accepted: a `NIOAsyncChannel` made
/// with `wrappingChannelSynchronously` stops the process (a precondition of its writer) if it goes
/// without `executeThenClose`, and accepted connections can be dropped on the way — those waiting
/// when a `for await` over them is cancelled, and those the listener's channel takes after its own
/// sequence finished. `stowfs unmount` asks for the status while the daemon stops, to know when it
/// has: one such request, accepted as the socket closed, ended the daemon with SIGILL. A plain
/// channel dropped is only closed when the process ends. Its reads wait until it is wrapped, so
/// no byte reaches the pipeline before the wrapper's handlers do.
public func serveAcceptedConnections<Inbound: Sendable, Outbound: Sendable>(
    _ server: NIOAsyncChannel<AcceptedConnection, Never>,
    wrap: @escaping @Sendable (any Channel) throws -> NIOAsyncChannel<Inbound, Outbound>,
    _ handle: @escaping @Sendable (NIOAsyncChannel<Inbound, Outbound>) async -> Void
) async throws {
    let stopping = StopFlag()
    let listener = server.channel
    // In a task nothing cancels: the loop ends when the listener is closed.
    let serving = Task {
        try await withThrowingDiscardingTaskGroup { group in
            try await server.executeThenClose { inbound in
                for try await accepted in inbound {
                    let channel = accepted.channel
                    group.addTask {
                        guard !stopping.isSet,
                            let connection = try? await channel.eventLoop.submit({ () throws -> NIOAsyncChannel<Inbound, Outbound> in
                                let connection = try wrap(channel)
                                try channel.syncOptions?.setOption(.autoRead, value: true)
                                return connection
                            }).get()
                        else {
                            try? await channel.close()
                            return
                        }
                        await handle(connection)
                    }
                }
            }
            // The listener is closed: the requests still being answered end.
            group.cancelAll()
        }
    }
    try await withTaskCancellationHandler {
        try await serving.value
    } onCancel: {
        stopping.set()
        listener.close(promise: nil)
    }
}

private final class StopFlag: Sendable {
    private let flag = Mutex(false)
    var isSet: Bool { flag.withLock { $0 } }
    func set() { flag.withLock { $0 = true } }
}
