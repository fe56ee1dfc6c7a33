import ArgumentParser
import Foundation
import NIOCore
import StorageClient
import StorageProtocol

@main
struct StowBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stow-bench",
        abstract: "Benchmarks of StowFS, each against a baseline measured in the same run.",
        subcommands: [ServerBench.self, CreatesBench.self, SearchBench.self])
}

/// `stow-bench server`: PUT and GET of a large file through stowd, against a plain file copy on the
/// same disk; and start/PUT/complete cycles per second for small files, against writing and
/// fsyncing the same files locally.
struct ServerBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "server",
        abstract: "Throughput of stowd (PUT, GET, small-file completes) against plain file copies on the same disk.")

    @Option(help: "Size of the large file (e.g. 1G, 64M).")
    var size: String = "1G"

    @Option(help: "Runs of each measurement; the table shows medians.")
    var runs: Int = 3

    @Option(help: "Number of small (4 KiB) files for the completes/second measurement.")
    var smallFiles: Int = 2000

    @Option(help: "Uploads in flight at once for the small files.")
    var concurrency: Int = 16

    @Option(help: "Scratch folder (on the disk to measure); default under /var/tmp.")
    var dir: String?

    @Option(help: "The stowd binary; default: beside this one.")
    var stowd: String?

    @Option(help: "Also write the results as JSON to this file.")
    var json: String?

    func run() async throws {
        guard let bytes = ByteSize.parse(size), bytes > 0 else { throw ValidationError("--size: `\(size)` is not a size") }
        let scratch = dir ?? "/var/tmp/stow-bench-\(getpid())"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { if dir == nil { try? FileManager.default.removeItem(atPath: scratch) } }
        let binary = stowd ?? StowdChild.siblingBinary()
        guard FileManager.default.isExecutableFile(atPath: binary) else { throw ValidationError("no stowd at \(binary); build it or pass --stowd") }

        let source = scratch + "/source.bin"
        benchNote("writing a \(ByteSize.format(bytes)) random source file …")
        try Bench.writeRandomFile(source, size: bytes)

        var results = BenchResults(machine: Bench.machine(), size: bytes, runs: runs, smallFiles: smallFiles, concurrency: concurrency)
        for run in 1...runs {
            benchNote("run \(run)/\(runs): plain copy …")
            results.copy.append(try Bench.time { try Bench.copyFile(source, scratch + "/copy.bin", fsync: true) })
            try? FileManager.default.removeItem(atPath: scratch + "/copy.bin")
        }

        let token = "bench-token-\(UUID().uuidString)"
        var env = ProcessInfo.processInfo.environment
        env["STOWD_TOKEN"] = token
        let server = try StowdChild(binary: binary, arguments: ["--data-dir", scratch + "/data", "--port", "0", "--log-level", "warning"], environment: env)
        defer { server.stop() }
        var config = HTTPObjectStore.Configuration(endpoint: server.url, token: token)
        config.maxConnectionsPerHost = max(16, concurrency)
        let client = HTTPObjectStore(configuration: config)
        let ns = try Namespace("bench")
        do {
            _ = try await client.createNamespace(ns)
            for run in 1...runs {
                benchNote("run \(run)/\(runs): PUT through stowd …")
                let p = try StoragePath("big-\(run).bin")
                results.put.append(try await Bench.timeAsync {
                    _ = try await client.upload(.file(path: source), size: bytes, to: ns, p, options: UploadOptions(chunkSize: bytes))
                })
                benchNote("run \(run)/\(runs): GET through stowd …")
                let url = try await client.signedURLs(ns, [p], expiry: 3600)[0].signedUrl
                let target = scratch + "/download.bin"
                results.get.append(try await Bench.timeAsync {
                    _ = try await client.download(url: url, to: target)
                    try Bench.fsync(target)
                })
                try? FileManager.default.removeItem(atPath: target)
                try await client.delete(ns, p, ifMatch: nil)
            }
            let small = [UInt8](repeating: 0x61, count: 4096)
            for run in 1...runs {
                benchNote("run \(run)/\(runs): \(smallFiles) small files, locally …")
                let local = scratch + "/small-\(run)"
                try FileManager.default.createDirectory(atPath: local, withIntermediateDirectories: true)
                results.smallLocal.append(try Bench.time {
                    for i in 0..<smallFiles { try Bench.writeFile(local + "/f\(i)", small) }
                })
                try? FileManager.default.removeItem(atPath: local)
                benchNote("run \(run)/\(runs): \(smallFiles) small files through stowd (\(concurrency) in flight) …")
                results.smallStowd.append(try await Bench.timeAsync {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        var next = 0
                        func launch() {
                            guard next < smallFiles else { return }
                            let p = try! StoragePath("small-\(run)/f\(next)")
                            next += 1
                            group.addTask { _ = try await client.upload(.bytes(ByteBuffer(bytes: small)), size: 4096, to: ns, p) }
                        }
                        for _ in 0..<concurrency { launch() }
                        while try await group.next() != nil { launch() }
                    }
                })
            }
            results.stowdPeakRSS = server.peakRSS()
        } catch {
            try? await client.shutdown()
            throw error
        }
        try? await client.shutdown()
        print(results.table)
        if let json { try results.jsonData.write(to: URL(fileURLWithPath: json)) }
    }
}
