import Foundation
import MountService
import StorageClient
import StorageProtocol
import StowFS
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Progress of a drain: one live line on a terminal, plain lines (every few seconds) otherwise.
final class ProgressPrinter: Sendable {
    private struct State {
        var lastBytes: Int64?
        var lastTime = Date()
        var rate: Double = 0
        var lastPrinted = Date.distantPast
        var shown = false
    }

    private let state = Mutex(State())
    let isTerminal = isatty(STDOUT_FILENO) != 0

    func show(_ q: QueueStatus) {
        let line: String? = state.withLock { s in
            let now = Date()
            let done = q.uploadedBytes
            if let last = s.lastBytes {
                let dt = now.timeIntervalSince(s.lastTime)
                if dt > 0.2 {
                    let r = Double(done - last) / dt
                    s.rate = s.rate == 0 ? r : s.rate * 0.6 + r * 0.4
                    s.lastBytes = done
                    s.lastTime = now
                }
            } else {
                s.lastBytes = done
                s.lastTime = now
            }
            if q.files == 0 && !s.shown { return nil }
            if !isTerminal && now.timeIntervalSince(s.lastPrinted) < 2 { return nil }
            s.lastPrinted = now
            s.shown = true
            return ProgressText.line(q, rate: s.rate)
        }
        guard let line else { return }
        if isTerminal {
            FileHandle.standardOutput.write(Data("\r\u{1b}[2K↑ \(line)".utf8))
        } else {
            print(line)
        }
    }

    /// Ends the progress line and says how the drain ended: everything stored, or which uploads
    /// the server refused (on standard error; they stay queued).
    func finish(failures: [UploadQueue.Failure] = [], kept: Bool = false) {
        let shown = state.withLock { $0.shown }
        if isTerminal && shown { FileHandle.standardOutput.write(Data("\n".utf8)) }
        guard !failures.isEmpty else {
            print("everything is stored")
            return
        }
        let notSent = failures.filter { $0.reason == UploadQueue.Failure.notSent }
        let refused = failures.filter { $0.reason != UploadQueue.Failure.notSent }
        var text = ""
        if !refused.isEmpty {
            text += "stowfs: the server refused \(refused.count) upload(s); they stay queued\(kept ? " for the next mount" : ""):\n"
            for f in refused { text += "  \(f.path): \(f.reason)\n" }
            text += "  `stowfs retry PATH` sends them again, `stowfs discard PATH` drops them (`stowfs status` lists them)\n"
        }
        if !notSent.isEmpty {
            text += "stowfs: \(notSent.count) upload(s) were not sent: the mount ended first; they stay queued for the next mount of its cache folder:\n"
            for f in notSent { text += "  \(f.path)\n" }
        }
        FileHandle.standardError.write(Data(text.utf8))
    }
}

/// The failures a drain ended with.
final class FailureBox: Sendable {
    private let failures = Mutex<[UploadQueue.Failure]>([])
    func set(_ f: [UploadQueue.Failure]) { failures.withLock { $0 = f } }
    var value: [UploadQueue.Failure] { failures.withLock { $0 } }
}

final class StatusBox: Sendable {
    private let message = Mutex<ControlMessage?>(nil)
    func set(_ m: ControlMessage) { message.withLock { $0 = m } }
    var value: ControlMessage? { message.withLock { $0 } }
}

enum StatusText {
    static func render(_ s: MountStatus, mountpoint: String) -> String {
        let q = s.queue
        var lines = ["\(mountpoint)"]
        if q.files == 0 {
            lines.append("  queue:   empty — everything is stored")
        } else {
            let deletes = q.deletions.map { " (\($0) of them deletes)" } ?? ""
            lines.append("  queue:   \(q.files) file(s)\(deletes), \(ByteSize.format(q.bytes)) (\(ByteSize.format(q.bytesSent)) sent), \(q.uploading) uploading, \(q.failed) failed")
        }
        if q.paused == true { lines.append("  uploads: paused — nothing is sent until `stowfs resume \(mountpoint)`") }
        lines.append("  stored:  \(q.uploadedFiles) file(s), \(ByteSize.format(q.uploadedBytes)) since mount" + (q.deletedFiles.map { "; \($0) deleted" } ?? ""))
        let hitRate = s.cache.hits + s.cache.misses > 0 ? Double(s.cache.hits) * 100 / Double(s.cache.hits + s.cache.misses) : 0
        lines.append(String(format: "  cache:   %@ of %@, %.0f%% hits", ByteSize.format(s.cache.bytes), ByteSize.format(s.cache.capacity), hitRate))
        lines.append("  open:    \(s.openFiles) handle(s), \(s.inodes) inode(s) known")
        if let b = s.bandwidth, b.up > 0 || b.down > 0 {
            lines.append("  limit:   \(BandwidthLimits.describe(up: b.up, down: b.down)) (stowfs set \(mountpoint) --bwlimit …)")
        }
        if let r = s.localReads, r.state != "not offered" {
            lines.append("  local:   reads in place \(r.state), \(r.opened) server file(s) read so, \(r.open) open")
        }
        if let f = s.feed {
            var line = "  feed:    " + (f.connected ? "connected" : "not connected")
            if f.connected, let ago = f.secondsSinceAnswer { line += String(format: " (last answer %.1f s ago)", ago) }
            line += ", \(f.applied) change(s) of others applied, \(f.echoes) of this mount's passed over"
            if f.resets > 0 { line += ", \(f.resets) reset(s)" }
            if !f.connected, let why = f.lastError { line += " — \(why)" }
            lines.append(line)
        }
        for item in q.items.prefix(20) {
            var l = "  \(item.state.padding(toLength: 9, withPad: " ", startingAt: 0)) \(item.path)" + (item.delete == true ? "  (delete)" : "  \(ByteSize.format(item.size))")
            if item.state == "uploading" && item.size > 0 { l += String(format: "  %.0f%%", Double(item.sent) * 100 / Double(item.size)) }
            if let e = item.lastError { l += "  (attempt \(item.attempts): \(e))" }
            if let r = item.retryInSeconds { l += String(format: "  retry in %.0fs", r) }
            lines.append(l)
        }
        if q.items.count > 20 { lines.append("  … and \(q.items.count - 20) more") }
        if q.failed > 0 { lines.append("  failed:  refused by the server; `stowfs retry PATH` sends again, `stowfs discard PATH` drops the change") }
        let log = MountRunner.logFile(mountpoint: mountpoint)
        if FileManager.default.fileExists(atPath: log) { lines.append("  log:     \(log)") }
        return lines.joined(separator: "\n")
    }
}
