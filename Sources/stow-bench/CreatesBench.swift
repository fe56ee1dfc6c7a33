import ArgumentParser
import Foundation
import NIOCore
import StorageClient
import StorageProtocol

/// `stow-bench creates`: small files created per second through a running stowd (or a cluster's
/// balancer) by several writers at once, each a client of its own, as separate machines would be.
/// `bench/replica-curve.sh` runs it against clusters of 1, 2 and 3 replicas.
struct CreatesBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "creates",
        abstract: "Small-file creates per second through a running stowd, by several writers at once.")

    @Option(help: "The server's (or the balancer's) URL.")
    var endpoint: String

    @Option(help: "A file holding an admin or write token (default: $STOWFS_TOKEN).")
    var tokenFile: String?

    @Option(help: "The namespace to create the files in (made when missing; its own folder for each run).")
    var namespace: String = "bench-creates"

    @Option(help: "Writers at once, each with its own connections.")
    var writers: Int = 8

    @Option(help: "Files per run, over all writers.")
    var files: Int = 2000

    @Option(help: "Bytes per file.")
    var fileSize: Int = 4096

    @Option(help: "Runs; the median is printed.")
    var runs: Int = 3

    @Option(help: "Also write the results as JSON to this file.")
    var json: String?

    func validate() throws {
        guard writers >= 1, writers <= 256 else { throw ValidationError("--writers: 1 to 256") }
        guard files >= writers else { throw ValidationError("--files must be at least --writers") }
        guard (0...(1 << 20)).contains(fileSize) else { throw ValidationError("--file-size: 0 to 1 MiB") }
        guard runs >= 1 else { throw ValidationError("--runs: at least 1") }
    }

    func run() async throws {
        let token: String
        if let tokenFile {
            token = try String(contentsOfFile: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        } else if let t = ProcessInfo.processInfo.environment["STOWFS_TOKEN"], !t.isEmpty {
            token = t
        } else {
            throw ValidationError("give --token-file, or set STOWFS_TOKEN")
        }
        let ns = try Namespace(namespace)
        let clients = (0..<writers).map { _ in HTTPObjectStore(configuration: HTTPObjectStore.Configuration(endpoint: endpoint, token: token)) }
        defer { for c in clients { Task { try? await c.shutdown() } } }
        if try await clients[0].namespaces().contains(where: { $0.name == ns.name }) == false { _ = try await clients[0].createNamespace(ns) }
        let bytes = [UInt8](repeating: 0x62, count: fileSize)
        let stamp = UInt64(Date().timeIntervalSince1970 * 1000)
        var rates: [Double] = []
        for run in 1...runs {
            let folder = "creates-\(stamp)-\(run)"
            let perWriter = files / writers
            let seconds = try await Bench.timeAsync {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for (w, client) in clients.enumerated() {
                        group.addTask {
                            for i in 0..<perWriter {
                                let p = try StoragePath("\(folder)/w\(w)/f\(i)")
                                _ = try await client.upload(.bytes(ByteBuffer(bytes: bytes)), size: Int64(bytes.count), to: ns, p)
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            let rate = Double(perWriter * writers) / seconds
            rates.append(rate)
            FileHandle.standardError.write(Data("run \(run)/\(runs): \(perWriter * writers) files in \(String(format: "%.2f", seconds)) s, \(Int(rate)) files/s\n".utf8))
        }
        let sorted = rates.sorted()
        let median = sorted[sorted.count / 2]
        print("creates/s: median \(Int(median)), min \(Int(sorted.first!)), max \(Int(sorted.last!)) (\(writers) writers, \(fileSize) B files, \(runs) runs)")
        if let json {
            let object: [String: Any] = ["endpoint": endpoint, "writers": writers, "files": files, "file_size": fileSize, "rates": rates, "median": median]
            try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys]).write(to: URL(fileURLWithPath: json))
        }
    }
}
