import Foundation
public import Logging
import NIOCore
import NIOPosix
import StorageClient
import StorageProtocol

/// Serves the control socket of a mount (status, sync, unmount).
public final class ControlServer: Sendable {
    let engine: StowFileSystem
    let mountpoint: String
    let path: String
    let logger: Logger
    /// Drains (unless told not to) and unmounts; called for `unmount`.
    let unmount: @Sendable (_ leaveQueued: Bool) async -> Void

    public init(engine: StowFileSystem, mountpoint: String, logger: Logger, unmount: @escaping @Sendable (Bool) async -> Void) {
        self.engine = engine
        self.mountpoint = mountpoint
        self.path = ControlSocket.path(for: mountpoint)
        self.logger = logger
        self.unmount = unmount
    }

    /// Binds the socket, so that a `stowfs sync` run the moment the mount appears finds it, and
    /// returns the task that serves it until cancelled (the socket file goes when it ends).
    public func start() async throws -> Task<Void, any Error> {
        try ControlSocket.prepareDirectory()
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .acceptingConnectionsLater()
            .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true) { channel in
                channel.eventLoop.makeCompletedFuture { AcceptedConnection(channel) }
            }
        chmod(path, 0o600)
        let path = self.path
        return Task {
            defer { unlink(path) }
            try await serveAcceptedConnections(server, wrap: { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: $0) }) { connection in
                do {
                    try await self.serve(connection)
                } catch {
                    self.logger.debug("control connection ended: \(error)")
                }
            }
        }
    }

    func serve(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>) async throws {
        try await connection.executeThenClose { inbound, outbound in
            var pending = ByteBuffer()
            for try await var chunk in inbound {
                pending.writeBuffer(&chunk)
                guard let newline = pending.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
                    if pending.readableBytes > 64 * 1024 { return }
                    continue
                }
                let line = pending.readSlice(length: newline - pending.readerIndex)!
                let request = try? JSONDecoder().decode(ControlRequest.self, from: Data(line.readableBytesView))
                let send: @Sendable (ControlMessage) async throws -> Void = { m in
                    var out = ByteBuffer(bytes: WireJSON.encode(m))
                    out.writeString("\n")
                    try await outbound.write(out)
                }
                switch request?.command {
                case "status":
                    try await send(ControlMessage(status: await engine.status(), mountpoint: mountpoint))
                case "sync":
                    if await engine.uploadsArePaused() {
                        let waiting = await engine.status().queue.files
                        if request?.noWait == true && waiting > 0 {
                            try await send(ControlMessage(error: "uploads are paused: \(waiting) file(s) wait; `stowfs resume \(mountpoint)` sends them"))
                            return
                        }
                        try await send(ControlMessage(paused: true))
                    }
                    let failures = try await drain(send)
                    try await send(ControlMessage(done: true, failures: failures.isEmpty ? nil : failures))
                case "set":
                    guard let text = request?.bwlimit, let (up, down) = BandwidthLimits.parse(text) else {
                        try await send(ControlMessage(error: "--bwlimit wants RATE or UP:DOWN in bytes per second (10M, 512K:4M, off)"))
                        return
                    }
                    guard engine.setBandwidth(up: up, down: down) else {
                        try await send(ControlMessage(error: "this mount has no bandwidth limiter"))
                        return
                    }
                    try await send(ControlMessage(done: true))
                case "pause":
                    await engine.pauseUploads()
                    try await send(ControlMessage(done: true))
                case "resume":
                    await engine.resumeUploads()
                    try await send(ControlMessage(done: true))
                case "unmount":
                    // Unmounting means storing what is queued: paused uploads go on (unless they stay queued).
                    if request?.leaveQueued != true, await engine.uploadsArePaused() { await engine.resumeUploads() }
                    // Refused uploads do not keep the mount: they stay in the journal for the next one.
                    let failures = request?.leaveQueued == true ? [] : try await drain(send)
                    await unmount(request?.leaveQueued == true)
                    try await send(ControlMessage(done: true, failures: failures.isEmpty ? nil : failures))
                case "retry":
                    do {
                        try await send(ControlMessage(done: true, count: try await engine.retryFailed(paths: request?.paths ?? [])))
                    } catch {
                        try await send(ControlMessage(error: "\(error)"))
                    }
                case "discard":
                    do {
                        guard let paths = request?.paths, !paths.isEmpty else { throw FSError.invalidArgument }
                        try await send(ControlMessage(done: true, discarded: try await engine.discard(paths: paths)))
                    } catch FSError.busy {
                        try await send(ControlMessage(error: "the file is open for writing; close it first"))
                    } catch {
                        try await send(ControlMessage(error: "\(error)"))
                    }
                case "find":
                    do {
                        var statuses = Set<StowFileSystem.FindStatus>()
                        for s in request?.statuses ?? [] {
                            guard let status = StowFileSystem.FindStatus(rawValue: s) else { throw FindFailure("unknown status `\(s)`") }
                            statuses.insert(status)
                        }
                        try await engine.find(under: request?.paths?.first ?? "", filter: request?.filter ?? SearchFilter(), statuses: statuses) {
                            try await send(ControlMessage(found: $0))
                        }
                        try await send(ControlMessage(done: true))
                    } catch FSError.notFound {
                        try await send(ControlMessage(error: "no such folder in the mount: \(request?.paths?.first ?? "")"))
                    } catch {
                        try await send(ControlMessage(error: "\(error)"))
                    }
                default:
                    try await send(ControlMessage(error: "unknown command; use status, sync, unmount, retry, discard, pause, resume, set or find"))
                }
                return
            }
        }
    }

    /// Waits for the queue to drain, sending progress about twice a second; returns the refusals.
    private func drain(_ send: @escaping @Sendable (ControlMessage) async throws -> Void) async throws -> [UploadQueue.Failure] {
        let progress = AsyncStream.makeStream(of: QueueStatus.self, bufferingPolicy: .bufferingNewest(1))
        async let syncing: [UploadQueue.Failure] = {
            let failures = await engine.sync { progress.continuation.yield($0) }
            progress.continuation.finish()
            return failures
        }()
        for await p in progress.stream { try? await send(ControlMessage(progress: p)) }
        return await syncing
    }
}

/// Talks to a mount's control socket.
public enum ControlClient {
    public struct Unreachable: Error, CustomStringConvertible {
        public var description: String
    }

    /// Sends one request; calls `onMessage` for every answer line until `done`, an error, or the end.
    public static func send(_ request: ControlRequest, mountpoint: String, onMessage: @escaping @Sendable (ControlMessage) -> Void) async throws {
        let path = ControlSocket.path(for: mountpoint)
        // A socket in a folder someone else controls is not the mount's: do not talk to it.
        try ControlSocket.checkDirectory()
        let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(unixDomainSocketPath: path) { ch in
                    ch.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: ch) }
                }
        } catch {
            throw Unreachable(description: "no stowfs is serving \(mountpoint) (no answer on \(path))")
        }
        try await channel.executeThenClose { inbound, outbound in
            var line = ByteBuffer(bytes: WireJSON.encode(request))
            line.writeString("\n")
            try await outbound.write(line)
            var pending = ByteBuffer()
            for try await var chunk in inbound {
                pending.writeBuffer(&chunk)
                while let newline = pending.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) {
                    let slice = pending.readSlice(length: newline - pending.readerIndex)!
                    pending.moveReaderIndex(forwardBy: 1)
                    guard let message = try? JSONDecoder().decode(ControlMessage.self, from: Data(slice.readableBytesView)) else { continue }
                    onMessage(message)
                    if message.done == true || message.error != nil || message.status != nil { return }
                }
            }
        }
    }
}

/// A `find` request the mount cannot run, and why.
struct FindFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
