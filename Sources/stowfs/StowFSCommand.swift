import ArgumentParser
import Foundation
import Logging
import SystemdNotify
import MountService
import StorageClient
import StorageProtocol
import StowFS
#if canImport(Glibc)
import Glibc
#endif

@main
struct StowFSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stowfs",
        abstract: "Mount remote file storage (a stowd namespace) as a folder.",
        discussion: """
            Files written to the mount are stored locally first and uploaded in the background; close(2)
            returns once they are safe in the local journal. `stowfs sync`, fsync(2) and unmount wait
            until the server has everything.
            """,
        version: StowVersion.string,
        subcommands: [
            Mount.self, Unmount.self, Sync.self, Status.self, Find.self, Pause.self, Resume.self, SetCommand.self, Retry.self, Discard.self,
            Config.self,
        ])
}

func bootstrapLogging(level: Logger.Level) {
    JournalLogging.bootstrap(level: level)
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("stowfs: \(message)\n".utf8))
    exit(1)
}

struct Mount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mount a namespace (or, with --all, every namespace) at a folder.",
        discussion: """
            Without --endpoint, stowfs uses the stowd installed beside it, started on loopback with its
            data under ~/.local/share/stowfs/stowd (or the one already running there).
            Settings come from flags, then ~/.config/stowfs/config.toml, then /etc/stowfs/config.toml
            (`key = value`, keys as the flags with `_`: endpoint, token_file, cache_size, ...);
            `stowfs config check` shows what a mount would use and why.
            Examples:
              stowfs mount photos /mnt/photos --endpoint http://127.0.0.1:8420
              stowfs mount --all /mnt/stow
              stowfs mount demo ./mnt --create -o allow_other
            When the server (--endpoint) cannot be reached, the mount comes up from what the last clean
            unmount kept in its cache folder — the listings it had and the file contents it had read or
            written — says so, and queues writes until the server is back; files whose contents are not
            there fail with EIO. --require-server refuses to mount instead.
            """)

    @Argument(help: "The namespace to mount (omit with --all).")
    var namespace: String?

    @Argument(help: "The folder to mount at (empty).")
    var mountpoint: String?

    @Flag(help: "Mount the root: each top-level folder is a namespace.")
    var all = false

    @OptionGroup var settings: SettingsFlags

    @Flag(help: "Stay attached to the terminal (default: return once the mount is live).")
    var foreground = false

    @Option(name: .customShort("o"), help: "FUSE mount options, comma-separated (allow_other, ro, nonempty, ...).")
    var options: [String] = []

    @Flag(help: "Create the namespace if it does not exist.")
    var create = false

    @Flag(help: "Refuse to mount when the server cannot be reached (default: mount from what the last clean unmount kept in the cache, and queue writes until the server is back).")
    var requireServer = false

    @Flag(help: "Read every file through HTTP, also from a stowd on this machine that offers its blob files (default: files above 1 MiB are read from the server's own file, in place).")
    var noLocalReads = false

    @Flag(help: .hidden)
    var daemonChild = false

    func validate() throws {
        if all {
            guard mountpoint == nil, namespace != nil else { throw ValidationError("with --all, give only the mountpoint: stowfs mount --all MOUNTPOINT") }
        } else {
            guard let ns = namespace, mountpoint != nil else { throw ValidationError("give a namespace and a mountpoint: stowfs mount NAMESPACE MOUNTPOINT") }
            guard Namespace.isValid(ns) else { throw ValidationError("`\(ns)` is not a valid namespace (a–z, 0–9, `.`, `_`, `-`; at most 63)") }
        }
    }

    var target: String { (all ? namespace : mountpoint) ?? "" }

    func run() async throws {
        var opts = MountOptions(namespace: all ? nil : namespace.flatMap { try? Namespace($0) }, mountpoint: target)
        let level: Logger.Level
        do {
            let resolved = try settings.resolve()
            try resolved.apply(to: &opts)
            level = try resolved.logLevel()
        } catch let e as ConfigError {
            fail("the config file cannot be used: \(e)\n  → fix it, or check it with: stowfs config check")
        } catch let p as MountProblem {
            fail(p.description)
        }
        opts.fuseOptions = options.flatMap { $0.split(separator: ",").map(String.init) }
        opts.createNamespace = create
        opts.requireServer = requireServer
        opts.localReads = !noLocalReads

        if !foreground {
            Glibc.exit(Daemon.spawn(mountpoint: target, logFile: MountRunner.logFile(mountpoint: target)))
        }
        if daemonChild { _ = setsid() }
        bootstrapLogging(level: level)
        let logger = Logger(label: "stowfs")
        do {
            let rc = try await MountRunner.run(opts, logger: logger)
            Glibc.exit(rc)
        } catch let p as MountProblem {
            fail(p.description)
        } catch {
            fail("\(error)")
        }
    }
}

/// Starting the mount in the background and waiting until it is live.
enum Daemon {
    static func spawn(mountpoint: String, logFile: String) -> Int32 {
        try? FileManager.default.createDirectory(atPath: (logFile as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        if !FileManager.default.fileExists(atPath: logFile) { _ = FileManager.default.createFile(atPath: logFile, contents: nil) }
        guard let log = FileHandle(forWritingAtPath: logFile) else { fail("cannot write the log file \(logFile)") }
        log.seekToEndOfFile()
        let start = log.offsetInFile
        // The mount to wait for is a new StowFS mount at the mountpoint: not any mount there (one
        // that was there before made this say "mounted" while the child refused to mount on it).
        let before = Preflight.stowfsMounts(at: mountpoint)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: StowdChild.currentExecutable())
        p.arguments = Array(CommandLine.arguments.dropFirst()) + ["--foreground", "--daemon-child"]
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = log
        p.standardError = log
        do { try p.run() } catch { fail("cannot start the mount process: \(error)") }
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline {
            if !Preflight.stowfsMounts(at: mountpoint).subtracting(before).isEmpty {
                print("mounted at \(mountpoint) (log: \(logFile))")
                let text = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
                if (String(text.utf8.dropFirst(Int(start))) ?? "").contains("mounting from the cache") {
                    print("the server is unreachable: mounted from the cache; writes queue until it is back (files not cached fail with EIO)")
                }
                return 0
            }
            if !p.isRunning {
                let text = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
                let mine = String(text.utf8.dropFirst(Int(start))) ?? text
                FileHandle.standardError.write(Data(mine.utf8))
                return p.terminationStatus == 0 ? 1 : p.terminationStatus
            }
            usleep(100_000)
        }
        fail("the mount did not come up within 2 minutes; see \(logFile)")
    }
}

struct Unmount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Store what is queued, then unmount (with progress).",
        discussion: """
            With --no-wait (or --leave-queued), unmount at once and keep the queue for the next mount of
            the same cache folder: for a server that is away. Uploads the server refused for good
            (see `stowfs status`) do not keep the mount: they stay queued for the next mount, are
            listed, and the exit status is 1.
            """)

    @Argument(help: "The mountpoint.")
    var mountpoint: String

    @Flag(name: [.customLong("no-wait"), .customLong("leave-queued")], help: "Do not wait for the queue; the next mount resumes it.")
    var leaveQueued = false

    func run() async throws {
        let progress = ProgressPrinter()
        let failures = FailureBox()
        // What --no-wait keeps, to say so afterwards.
        let kept = StatusBox()
        if leaveQueued { try? await ControlClient.send(ControlRequest(command: "status"), mountpoint: mountpoint) { kept.set($0) } }
        do {
            try await ControlClient.send(ControlRequest(command: "unmount", leaveQueued: leaveQueued), mountpoint: mountpoint) { m in
                if let p = m.progress { progress.show(p) }
                if let e = m.error { fail(e) }
                if let f = m.failures { failures.set(f) }
            }
            // With --no-wait nothing was stored: what stays queued is said below.
            if !leaveQueued { progress.finish(failures: failures.value, kept: true) }
        } catch let e as ControlClient.Unreachable {
            guard Preflight.isMounted(mountpoint) else { fail("\(mountpoint) is not mounted") }
            // No daemon answers (it died): the kernel mount can still go.
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/fusermount3")
            p.arguments = ["-u", mountpoint]
            try p.run()
            p.waitUntilExit()
            guard p.terminationStatus == 0 else { fail("\(e.description); fusermount3 -u failed too") }
            print("unmounted \(mountpoint) (no stowfs was serving it; files still queued resume at the next mount)")
            return
        }
        // Wait for the mount to go, then for the daemon to finish (its socket stops answering last).
        for _ in 0..<100 where Preflight.isMounted(mountpoint) { usleep(100_000) }
        if Preflight.isMounted(mountpoint) { fail("\(mountpoint) is still mounted (busy?); it goes when the last file on it is closed") }
        for _ in 0..<300 {
            guard (try? await ControlClient.send(ControlRequest(command: "status"), mountpoint: mountpoint) { _ in }) != nil else { break }
            usleep(100_000)
        }
        if leaveQueued {
            let q = kept.value?.status?.queue
            let what = q.map { "\($0.files) file(s), \(ByteSize.format($0.bytes)), stay" } ?? "what was queued stays"
            print("unmounted \(mountpoint); \(what) queued in the cache folder and go at the next mount")
            for item in q?.items.prefix(20) ?? [] {
                print(item.delete == true ? "  kept the delete of \(item.path)" : "  kept \(item.path)  \(ByteSize.format(item.size))")
            }
        } else {
            print("unmounted \(mountpoint)")
        }
        if !failures.value.isEmpty { throw ExitCode(1) }
    }
}

struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Return once the server has everything written to the mount before now.",
        discussion: """
            Uploads that failed before are tried once more. When the server refuses some for good
            (a name or attribute it does not take, a token without write access, a full quota),
            they are listed with the reason and the exit status is 1; they stay queued (`stowfs
            retry`, `stowfs discard`). While uploads are paused (`stowfs pause`) it says so and
            waits for `stowfs resume`; with --no-wait it exits 1 at once instead.
            """)

    @Argument(help: "The mountpoint.")
    var mountpoint: String

    @Flag(help: "When uploads are paused and files wait, say so and exit 1 instead of waiting.")
    var noWait = false

    func run() async throws {
        let progress = ProgressPrinter()
        let failures = FailureBox()
        do {
            try await ControlClient.send(ControlRequest(command: "sync", noWait: noWait ? true : nil), mountpoint: mountpoint) { m in
                if m.paused == true {
                    FileHandle.standardError.write(Data("stowfs: uploads are paused: waiting until `stowfs resume \(mountpoint)` (Ctrl-C stops waiting; nothing is lost)\n".utf8))
                }
                if let p = m.progress { progress.show(p) }
                if let e = m.error { fail(e) }
                if let f = m.failures { failures.set(f) }
            }
        } catch {
            fail("\(error)")
        }
        progress.finish(failures: failures.value, kept: false)
        if !failures.value.isEmpty { throw ExitCode(1) }
    }
}

struct Pause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop sending uploads to the server until `stowfs resume`.",
        discussion: """
            Uploads in flight stop (a large file's upload keeps what the server has and goes on from
            there) and no new one starts; files written meanwhile land in the local cache and queue
            as usual, and reads work. `stowfs status` shows "paused"; `stowfs sync` and fsync(2)
            wait until the uploads resume; `stowfs unmount` resumes them to store what is queued
            (with --leave-queued they stay queued for the next mount). A new mount starts unpaused.
            """)

    @Argument(help: "The mountpoint.")
    var mountpoint: String

    func run() async throws {
        try await sendSimple("pause", mountpoint: mountpoint)
        print("uploads paused at \(mountpoint); `stowfs resume \(mountpoint)` sends them again")
    }
}

struct Resume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Send uploads again after `stowfs pause`.")

    @Argument(help: "The mountpoint.")
    var mountpoint: String

    func run() async throws {
        try await sendSimple("resume", mountpoint: mountpoint)
        print("uploads resumed at \(mountpoint)")
    }
}

struct SetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set",
        abstract: "Change a setting of a running mount, now.",
        discussion: """
            --bwlimit RATE (both directions) or UP:DOWN, in bytes per second with binary K, M, G as
            rclone's (10M is 10 MiB/s); off or 0 for no limit. Uploads and reads in flight slow down
            or speed up at once. The mount's setting (--bwlimit of stowfs mount) is what a new mount
            starts with.
            """)

    @Argument(help: "The mountpoint.")
    var mountpoint: String

    @Option(help: "RATE or UP:DOWN, e.g. 10M, 1M:10M, off.")
    var bwlimit: String

    func validate() throws {
        guard BandwidthLimits.parse(bwlimit) != nil else {
            throw ValidationError("--bwlimit `\(bwlimit)`: give RATE or UP:DOWN in bytes per second, e.g. 10M, 1M:10M, off")
        }
    }

    func run() async throws {
        let answer = StatusBox()
        do {
            try await ControlClient.send(ControlRequest(command: "set", bwlimit: bwlimit), mountpoint: mountpoint) { m in answer.set(m) }
        } catch {
            fail("\(error)")
        }
        if let e = answer.value?.error { fail(e) }
        let (up, down) = BandwidthLimits.parse(bwlimit)!
        print("bandwidth at \(mountpoint): \(BandwidthLimits.describe(up: up, down: down))")
    }
}

/// Sends a command whose answer is `done` or an error; fails with the error.
private func sendSimple(_ command: String, mountpoint: String) async throws {
    let answer = StatusBox()
    do {
        try await ControlClient.send(ControlRequest(command: command), mountpoint: mountpoint) { m in answer.set(m) }
    } catch {
        fail("\(error)")
    }
    if let e = answer.value?.error { fail(e) }
    guard answer.value?.done == true else { fail("the mount did not answer `\(command)`") }
}

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the upload queue and cache of a mount.")

    @Argument(help: "The mountpoint.")
    var mountpoint: String

    @Flag(help: "Print JSON.")
    var json = false

    func run() async throws {
        let received = StatusBox()
        do {
            try await ControlClient.send(ControlRequest(command: "status"), mountpoint: mountpoint) { m in received.set(m) }
        } catch {
            fail("\(error)")
        }
        guard let message = received.value, let s = message.status else { fail("the mount sent no status") }
        if json {
            let e = JSONEncoder()
            e.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: (try? e.encode(s)) ?? Data(), as: UTF8.self))
            return
        }
        print(StatusText.render(s, mountpoint: mountpoint))
    }
}
