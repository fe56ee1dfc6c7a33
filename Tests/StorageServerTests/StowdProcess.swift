import Foundation
import StorageClient
import Testing

/// The `stowd` executable, built beside the tests, run as a child process.
final class StowdProcess: @unchecked Sendable {
    // @unchecked: `process` and `url` are set in init and only read afterwards; Process itself is thread-safe for
    // the calls made here (terminate, processIdentifier, waitUntilExit).
    let process = Process()
    let url: String
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

    /// The port of `url`.
    var port: Int { Int(url.split(separator: ":").last ?? "") ?? 0 }

    init(dataDirectory: String, port: Int = 0, extraArguments: [String] = []) throws {
        self.dataDirectory = dataDirectory
        process.executableURL = URL(fileURLWithPath: Self.binDirectory + "/stowd")
        process.arguments = ["--data-dir", dataDirectory, "--port", String(port), "--log-level", "warning"] + extraArguments
        var env = ProcessInfo.processInfo.environment
        env["STOWD_TOKEN"] = Self.token
        process.environment = env
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        // The first line of stdout is the URL.
        var line = Data()
        while true {
            let byte = out.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte == Data("\n".utf8) { break }
            line += byte
        }
        guard let text = String(data: line, encoding: .utf8), text.hasPrefix("http://") else {
            process.terminate()
            throw StorageError(.unavailable, "stowd did not print its URL (got \(String(decoding: line, as: UTF8.self)))")
        }
        url = text
    }

    var pid: Int32 { process.processIdentifier }

    func kill9() {
        kill(pid, SIGKILL)
        process.waitUntilExit()
    }

    /// SIGTERM and wait; returns the exit status.
    func stop() -> Int32 {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        return process.terminationStatus
    }

    /// Peak resident memory so far (VmHWM), in bytes.
    func peakRSS() -> Int64? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let kb = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int64($0) }
            return kb.map { $0 * 1024 }
        }
        return nil
    }

    /// Runs `body` with a client of this server; the client is shut down however `body` ends.
    func withClient<T>(_ body: (HTTPObjectStore) async throws -> T) async throws -> T {
        var c = HTTPObjectStore.Configuration(endpoint: url, token: Self.token)
        c.retry = RetryPolicy(attempts: 1)
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

    deinit {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }
}
