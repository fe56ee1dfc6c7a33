import Crypto
import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import StowFS
import Testing

/// Real mounts for tests: a `stowd` child process on a loopback port with its own data folder, and
/// `stowfs mount` (in the foreground, as a child process) at a fresh mountpoint.
/// `withMount` always unmounts and stops both, even when the test fails.
final class MountedFS: @unchecked Sendable {
    // @unchecked: the processes are set in start() and only read afterwards; Process is thread-safe for these calls.
    static let token = "mount-test-token-0001"
    let root: String
    var mountpoint: String { root + "/mnt" }
    var cacheDirectory: String { root + "/cache" }
    var dataDirectory: String { root + "/data" }
    let namespace = try! Namespace("test")
    private(set) var stowd: StowdChild?
    var server: Process? { stowd?.process }
    private(set) var mount: Process?
    private(set) var endpoint = ""
    var port = 0
    /// Extra arguments for stowd (a token file, say).
    var serverArguments: [String] = []
    /// The token the mount (and the stowfs commands) use.
    var mountToken = MountedFS.token
    /// The CA file the test's clients trust, for a server started with `--tls-cert`.
    private(set) var caFile: String?

    init() {
        root = FileManager.default.temporaryDirectory.path + "/stowfs-mount-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: root + "/mnt", withIntermediateDirectories: true)
        try? FileManager.default.createDirectory(atPath: root + "/work", withIntermediateDirectories: true)
    }

    static var binDirectory: String {
        if let dir = ProcessInfo.processInfo.environment["STOW_BIN_DIR"] { return dir }
        var dir = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: dir.path + "/stowfs") && dir.path != "/" { dir = dir.deletingLastPathComponent() }
        return dir.path
    }

    /// Starts stowd (on `port`, 0 for a free one).
    /// - Parameters:
    ///   - extraArguments: more flags for stowd (`--tls-cert`, `--tls-key`).
    ///   - caFile: the CA file that `withClient` trusts.
    func startServer(extraArguments: [String] = [], caFile: String? = nil, environment: [String: String] = [:]) throws {
        releasePort()
        var env = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        env["STOWD_TOKEN"] = Self.token
        self.caFile = caFile
        let child = try StowdChild(
            binary: Self.binDirectory + "/stowd",
            arguments: ["--data-dir", dataDirectory, "--port", String(port), "--log-level", "warning"] + serverArguments + extraArguments,
            environment: env)
        endpoint = child.url
        port = child.port
        stowd = child
    }

    /// Mounts against `other`'s server instead of one of its own (a second machine's mount of
    /// the same namespace).
    func useServer(of other: MountedFS) {
        endpoint = other.endpoint
        port = other.port
        caFile = other.caFile
    }

    func stopServer() {
        stowd?.stop()
        stowd = nil
        holdPort()
    }

    /// A socket bound to the stopped server's port (not listening: connections are refused, as
    /// with nothing there) until a server starts on it again. Without it, another test's stowd
    /// (port 0) could be given the port, and a mount waiting for its own server would find that
    /// one — another namespace "test", other files.
    private var portHold: Int32 = -1

    private func holdPort() {
        releasePort()
        guard port > 0 else { return }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        if bound == 0 { portHold = fd } else { close(fd) }
    }

    private func releasePort() {
        if portHold >= 0 { close(portHold) }
        portHold = -1
    }

    /// Mounts (the namespace is created if missing) and waits until the mount is live.
    /// Starts `stowfs mount --foreground` and returns once the mount is in the mount table
    /// (looked for every `poll` microseconds; 0 looks as fast as it can).
    /// `fileLimit`: the daemon's limit of open descriptors, soft and hard (set with `prlimit`,
    /// which then runs stowfs in its own process).
    func mountFS(extra: [String] = [], poll: useconds_t = 50_000, environment: [String: String] = [:], fileLimit: Int? = nil) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.binDirectory + "/stowfs")
        p.arguments = ["mount", "test", mountpoint, "--endpoint", endpoint, "--cache-dir", cacheDirectory, "--create", "--foreground", "--log-level", ProcessInfo.processInfo.environment["STOWFS_TEST_LOG_LEVEL"] ?? "warning"] + extra
        if let fileLimit {
            p.arguments = ["--nofile=\(fileLimit):\(fileLimit)", "--", Self.binDirectory + "/stowfs"] + (p.arguments ?? [])
            p.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
        }
        var env = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        env["STOWFS_TOKEN"] = mountToken
        p.environment = env
        let log = FileHandle(forWritingAtPath: root + "/stowfs.log") ?? {
            _ = FileManager.default.createFile(atPath: root + "/stowfs.log", contents: nil)
            return FileHandle(forWritingAtPath: root + "/stowfs.log")!
        }()
        log.seekToEndOfFile()
        p.standardOutput = log
        p.standardError = log
        try p.run()
        mount = p
        // Up to 60 s: in a full run another test's loop-device ext4 can stall the machine's mounts
        // and disk for many seconds (a mount took over 15 s once).
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if Self.isMounted(mountpoint) { return }
            if !p.isRunning { throw Failure("stowfs exited: \(logText)") }
            if poll > 0 { usleep(poll) }
        }
        throw Failure("the mount did not come up: \(logText)")
    }

    var logText: String { (try? String(contentsOfFile: root + "/stowfs.log", encoding: .utf8)) ?? "" }

    /// `stowfs unmount` (drains the queue), then waits for the daemon to exit.
    @discardableResult
    func unmountFS(leaveQueued: Bool = false) throws -> String {
        let out = try stowfs(["unmount", mountpoint] + (leaveQueued ? ["--leave-queued"] : []))
        if let m = mount {
            m.waitUntilExit()
            // A clean unmount ends the daemon cleanly: a crash on the way out (a signal) or an
            // error is a failure, even with everything stored.
            if m.terminationReason == .uncaughtSignal || m.terminationStatus != 0 {
                Issue.record(
                    "the mount daemon ended with \(m.terminationReason == .uncaughtSignal ? "signal" : "status") \(m.terminationStatus) after stowfs unmount: \(logText.suffix(2000))"
                )
            }
        }
        mount = nil
        return out
    }

    /// kill -9 of the daemon; the dead mount is taken away as a user would (fusermount3 -u).
    func killMount() {
        if let m = mount, m.isRunning {
            kill(m.processIdentifier, SIGKILL)
            m.waitUntilExit()
        }
        mount = nil
        forceUnmount()
    }

    func forceUnmount() {
        guard Self.isMounted(mountpoint) else { return }
        _ = try? run("/bin/sh", ["-c", "for c in /sys/fs/fuse/connections/*/abort; do :; done; fusermount3 -u -z '\(mountpoint)' 2>/dev/null || umount -l '\(mountpoint)'"])
    }

    /// Tears everything down, whatever state it is in.
    func cleanup() {
        if mount != nil, Self.isMounted(mountpoint) { _ = try? unmountFS() }
        if let m = mount, m.isRunning {
            m.terminate()
            m.waitUntilExit()
        }
        forceUnmount()
        stopServer()
        releasePort()
        try? FileManager.default.removeItem(atPath: root)
    }

    static func isMounted(_ path: String) -> Bool {
        guard let text = ProcFiles.mountinfo else { return false }
        return text.split(separator: "\n").contains { $0.split(separator: " ").count > 4 && $0.split(separator: " ")[4] == path }
    }

    // MARK: - Running commands

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ d: String) { description = d }
    }

    @discardableResult
    func run(_ tool: String, _ args: [String], cwd: String? = nil) throws -> (status: Int32, out: String) {
        var env = ProcessInfo.processInfo.environment
        env["STOWFS_TOKEN"] = mountToken
        env["LC_ALL"] = "C"
        // Not Foundation's Process: it crashes now and then on Linux (see `Spawn`).
        return try Spawn.run(tool, args, cwd: cwd, environment: env)
    }

    /// Runs a shell command (cwd: the test's work folder); fails the test with its output if it fails.
    @discardableResult
    func sh(_ command: String, expectFailure: Bool = false, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let (status, out) = try run("/bin/bash", ["-o", "pipefail", "-c", command], cwd: root + "/work")
        if expectFailure {
            #expect(status != 0, "`\(command)` should have failed: \(out)", sourceLocation: sourceLocation)
        } else if status != 0 {
            Issue.record("`\(command)` failed (\(status)): \(out)", sourceLocation: sourceLocation)
        }
        return out.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @discardableResult
    func stowfs(_ args: [String]) throws -> String {
        let (status, out) = try run(Self.binDirectory + "/stowfs", args)
        guard status == 0 else { throw Failure("stowfs \(args.joined(separator: " ")) failed: \(out)") }
        return out
    }

    // MARK: - The server's view

    func withClient<T>(_ body: (HTTPObjectStore) async throws -> T) async throws -> T {
        var configuration = HTTPObjectStore.Configuration(endpoint: endpoint, token: Self.token)
        configuration.caFile = caFile
        let c = HTTPObjectStore(configuration: configuration)
        do {
            let r = try await body(c)
            try? await c.shutdown()
            return r
        } catch {
            try? await c.shutdown()
            throw error
        }
    }

    /// SHA-256 of a file as the server has it.
    func storedSHA256(_ path: String) async throws -> String? {
        try await withClient { c in try await c.record(namespace, try StoragePath(path)).sha256 }
    }

    func storedBytes(_ path: String) async throws -> [UInt8] {
        try await withClient { c in
            // An hour: in a full run this test's thread can wait a minute between the two requests.
            let url = try await c.signedURLs(namespace, [try StoragePath(path)], expiry: 3600)[0].signedUrl
            return Array(try await c.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView)
        }
    }
}

/// Runs `body` against a fresh server and mount; always unmounts and stops everything.
func withMount(_ body: (MountedFS) async throws -> Void) async throws {
    let m = MountedFS()
    do {
        try m.startServer()
        try m.mountFS()
        try await body(m)
    } catch {
        let log = m.logText
        m.cleanup()
        if !log.isEmpty { Issue.record("stowfs log:\n\(log)") }
        throw error
    }
    m.cleanup()
}

/// Two mounts of one namespace on one server, each with its own cache folder, as two machines
/// would have: `a` starts the server, `b` uses it. Both are unmounted and the server stopped
/// whatever happens. `extra`: more flags for both mounts.
func withTwoMounts(extra: [String] = [], serverArguments: [String] = [], _ body: (MountedFS, MountedFS) async throws -> Void) async throws {
    let a = MountedFS(), b = MountedFS()
    do {
        try a.startServer(extraArguments: serverArguments)
        try a.mountFS(extra: extra)
        b.useServer(of: a)
        try b.mountFS(extra: extra)
        try await body(a, b)
    } catch {
        for (label, m) in [("a", a), ("b", b)] where !m.logText.isEmpty { Issue.record("stowfs log of mount \(label):\n\(m.logText)") }
        b.cleanup()
        a.cleanup()
        throw error
    }
    b.cleanup()
    a.cleanup()
}

func sha256(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }
