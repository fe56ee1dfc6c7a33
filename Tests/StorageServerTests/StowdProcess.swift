import Foundation
import StorageClient
import Testing

/// The `stowd` executable, built beside the tests, run as a child process.
final class StowdProcess: Sendable {
    let child: StowdChildBox
    let dataDirectory: String
    static let token = "crash-test-admin-token"

    /// Where `swift build` put the executables: `$STOW_BIN_DIR`, or beside the test bundle.
    static var binDirectory: String {
        if let dir = ProcessInfo.processInfo.environment["STOW_BIN_DIR"] { return dir }
        let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var dir = me.deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: dir.path + "/stowd") && dir.path != "/" { dir = dir.deletingLastPathComponent() }
        return dir.path
    }

    init(dataDirectory: String, port: Int = 0, extraArguments: [String] = []) throws {
        self.dataDirectory = dataDirectory
        var env = ProcessInfo.processInfo.environment
        env["STOWD_TOKEN"] = Self.token
        // The same bucket prefix for every start on this data directory (a restart finds its blobs).
        let backend = TestBackend.stowdArguments(for: dataDirectory)
        env.merge(backend.environment) { $1 }
        child = StowdChildBox(try StowdChild(
            binary: Self.binDirectory + "/stowd",
            arguments: ["--data-dir", dataDirectory, "--port", String(port), "--log-level", "warning"] + backend.arguments + extraArguments, environment: env))
    }

    var url: String { child.value.url }
    var port: Int { child.value.port }
    var pid: Int32 { child.value.pid }
    func kill9() { child.value.kill9() }
    func stop() -> Int32 { child.value.stop() }
    func peakRSS() -> Int64? { child.value.peakRSS() }

    /// Runs `body` with a client of this server; the client is shut down however `body` ends.
    /// - Parameter caFile: the CA file the client trusts (for a server started with `--tls-cert`).
    func withClient<T>(caFile: String? = nil, _ body: (HTTPObjectStore) async throws -> T) async throws -> T {
        var c = HTTPObjectStore.Configuration(endpoint: url, token: Self.token)
        c.retry = RetryPolicy(attempts: 1)
        c.caFile = caFile
        let client = HTTPObjectStore(configuration: c)
        do {
            let result = try await body(client)
            try? await client.shutdown()
            return result
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    deinit { _ = child.value.stop() }
}

/// Lets tests share a child process between tasks. `@unchecked Sendable`: tests only; the child is
/// created once and its methods (signals, waits, reading /proc) are safe from any thread.
final class StowdChildBox: @unchecked Sendable {
    let value: StowdChild
    init(_ v: StowdChild) { value = v }
}
