import Foundation

/// A line of progress, on stderr (the results go to stdout).
func benchNote(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }

/// Helpers shared by the benchmarks: timing, files, the machine's description, a stowd child.
enum Bench {
    static func time(_ body: () throws -> Void) throws -> Double {
        let start = ContinuousClock.now
        try body()
        return (ContinuousClock.now - start).seconds
    }

    static func timeAsync(_ body: () async throws -> Void) async throws -> Double {
        let start = ContinuousClock.now
        try await body()
        return (ContinuousClock.now - start).seconds
    }

    static func writeRandomFile(_ path: String, size: Int64) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil), let h = FileHandle(forWritingAtPath: path) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
        defer { try? h.close() }
        var rng = SystemRandomNumberGenerator()
        var block = [UInt8](repeating: 0, count: 1 << 20)
        for i in 0..<block.count { block[i] = UInt8.random(in: 0...255, using: &rng) }
        var written: Int64 = 0
        var round: UInt8 = 0
        while written < size {
            // Vary each MiB a little so that no two blocks are equal.
            block[0] = round
            block[1] = UInt8(truncatingIfNeeded: written >> 20)
            round &+= 1
            let n = Int(min(Int64(block.count), size - written))
            try h.write(contentsOf: block[0..<n])
            written += Int64(n)
        }
        try h.synchronize()
    }

    /// read + write (+ fsync): what `cp` and then `sync` do.
    static func copyFile(_ from: String, _ to: String, fsync: Bool) throws {
        guard let input = FileHandle(forReadingAtPath: from) else { throw CocoaError(.fileReadNoSuchFile) }
        defer { try? input.close() }
        guard FileManager.default.createFile(atPath: to, contents: nil), let output = FileHandle(forWritingAtPath: to) else {
            throw CocoaError(.fileWriteUnknown)
        }
        defer { try? output.close() }
        while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty { try output.write(contentsOf: chunk) }
        if fsync { try output.synchronize() }
    }

    static func writeFile(_ path: String, _ bytes: [UInt8]) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil), let h = FileHandle(forWritingAtPath: path) else {
            throw CocoaError(.fileWriteUnknown)
        }
        defer { try? h.close() }
        try h.write(contentsOf: bytes)
        try h.synchronize()
    }

    static func fsync(_ path: String) throws {
        guard let h = FileHandle(forUpdatingAtPath: path) else { throw CocoaError(.fileReadNoSuchFile) }
        try h.synchronize()
        try h.close()
    }

    static func median(_ xs: [Double]) -> Double {
        guard !xs.isEmpty else { return .nan }
        let s = xs.sorted()
        return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
    }

    static func machine() -> String {
        let cpu = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?.split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { String($0.split(separator: ":", maxSplits: 1).last ?? "").trimmingCharacters(in: .whitespaces) } ?? "unknown CPU"
        let cores = ProcessInfo.processInfo.activeProcessorCount
        let mem = ProcessInfo.processInfo.physicalMemory >> 30
        let kernel = (try? String(contentsOfFile: "/proc/sys/kernel/osrelease", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
        return "\(cpu), \(cores) cores, \(mem) GiB, Linux \(kernel)"
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

struct BenchResults: Codable {
    var machine: String
    var size: Int64
    var runs: Int
    var smallFiles: Int
    var concurrency: Int
    var copy: [Double] = []
    var put: [Double] = []
    var get: [Double] = []
    var smallLocal: [Double] = []
    var smallStowd: [Double] = []
    var stowdPeakRSS: Int64?

    func mibps(_ seconds: Double) -> Double { Double(size) / 1_048_576 / seconds }

    var table: String {
        let copy = Bench.median(self.copy), put = Bench.median(self.put), get = Bench.median(self.get)
        let local = Double(smallFiles) / Bench.median(smallLocal), remote = Double(smallFiles) / Bench.median(smallStowd)
        func row(_ name: String, _ value: String, _ ratio: String) -> String {
            "| \(name.padding(toLength: 44, withPad: " ", startingAt: 0)) | \(value.padding(toLength: 14, withPad: " ", startingAt: 0)) | \(ratio) |"
        }
        return """
            stowd benchmark — \(machine)
            \(ByteSize.format(size)) file, \(runs) runs, medians; small files: \(smallFiles) × 4 KiB, \(concurrency) in flight

            | measurement                                  | median         | vs baseline |
            |----------------------------------------------|----------------|-------------|
            \(row("baseline: plain file copy + fsync", String(format: "%.0f MiB/s", mibps(copy)), "1.00"))
            \(row("PUT through stowd (start, PUT, complete)", String(format: "%.0f MiB/s", mibps(put)), String(format: "%.2f× the copy's time", put / copy)))
            \(row("GET through stowd (signed URL, to a file)", String(format: "%.0f MiB/s", mibps(get)), String(format: "%.2f× the copy's time", get / copy)))
            \(row("baseline: write + fsync 4 KiB files locally", String(format: "%.0f files/s", local), "1.00"))
            \(row("small files through stowd (3 requests each)", String(format: "%.0f files/s", remote), String(format: "%.2f of local", remote / local)))
            \(row("stowd peak RSS", stowdPeakRSS.map { ByteSize.format($0) } ?? "?", ""))
            """
    }

    var jsonData: Data {
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        return (try? e.encode(self)) ?? Data()
    }
}

import StorageProtocol
