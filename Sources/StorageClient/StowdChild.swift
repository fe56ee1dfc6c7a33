public import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A `stowd` run as a child process: the embedded server of `stowfs`, and the server of tests and
/// benchmarks. It is started with `--port 0` (unless told otherwise) and its first line of output
/// — the URL it listens on — is read before `init` returns.
public final class StowdChild {
    public let process = Process()
    /// The URL the server listens on, e.g. `http://127.0.0.1:40123`.
    public let url: String

    public struct StartFailure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Starts `binary` with these arguments and environment; returns once it listens.
    public init(binary: String, arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.environment = environment
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        var line = Data()
        while true {
            let byte = out.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte == Data("\n".utf8) { break }
            line += byte
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("http") else {
            if process.isRunning { process.terminate() }
            throw StartFailure(description: "stowd did not start (it printed: \(text.isEmpty ? "nothing" : text))")
        }
        url = text
    }

    /// The stowd beside the running executable (`…/bin/stowd` next to `…/bin/stowfs`).
    public static func siblingBinary() -> String {
        URL(fileURLWithPath: currentExecutable()).deletingLastPathComponent().path + "/stowd"
    }

    /// This program's own file, however it was started (by PATH, a relative path or a symlink).
    public static func currentExecutable() -> String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().path
    }

    public var pid: Int32 { process.processIdentifier }
    public var port: Int { Int(url.split(separator: ":").last ?? "") ?? 0 }
    public var isRunning: Bool { process.isRunning }

    /// SIGTERM (a graceful stop) and wait; returns the exit status.
    @discardableResult
    public func stop() -> Int32 {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        return process.terminationStatus
    }

    /// SIGKILL and wait: a crash.
    public func kill9() {
        kill(pid, SIGKILL)
        process.waitUntilExit()
    }

    /// Peak resident memory so far (VmHWM), in bytes.
    public func peakRSS() -> Int64? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        return text.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
            .flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int64($0) }.map { $0 * 1024 }
    }
}
