import CFuse
import Dispatch
import Foundation
public import Logging
public import StowFS
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A mounted filesystem: the libfuse session, its loop on a thread of its own, signals, and an
/// orderly shutdown.
///
/// Shutdown order (FUSE-NOTES §5): the loop returns → replies still in flight are awaited (they
/// hold pointers into the session) → `fuse_session_unmount` → `fuse_session_destroy` → the
/// retained adapter is released.
///
/// ```swift
/// let mount = try FuseMount(engine: fs, mountpoint: "/mnt/x", options: ["default_permissions"])
/// try await mount.run()      // until unmounted (fusermount3 -u, stowfs unmount, SIGTERM)
/// ```
public final class FuseMount: @unchecked Sendable {
    // @unchecked: `session` and `userdata` are set in init and only used by the loop thread and
    // by `requestExit`, which libfuse allows from any thread (fuse_session_exit sets a flag).
    private let session: OpaquePointer
    private let adapter: FuseAdapter
    private let userdata: UnsafeMutableRawPointer
    public let mountpoint: String
    let logger: Logger
    private let exitRequested = Mutex(false)
    private let notifier: FuseNotifier
    private var signalSources: [any DispatchSourceSignal] = []

    public struct MountError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Mounts `engine` at `mountpoint` with these `-o` options; `observer` hears of every answer.
    public init(
        engine: StowFileSystem, mountpoint: String, options: [String], fsname: String, logger: Logger, observer: (any FuseObserver)? = nil
    ) throws {
        self.mountpoint = mountpoint
        self.logger = logger
        adapter = FuseAdapter(engine: engine, logger: logger, observer: observer)
        let all = ["fsname=\(fsname)", "subtype=stowfs"] + options
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup("stowfs"), strdup("-o"), strdup(all.joined(separator: ","))]
        var args = fuse_args(argc: Int32(argv.count), argv: nil, allocated: 0)
        var ops = makeOperations()
        let retained = Unmanaged.passRetained(adapter).toOpaque()
        let created: OpaquePointer? = argv.withUnsafeMutableBufferPointer { buf in
            args.argv = buf.baseAddress
            return fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, retained)
        }
        for p in argv { free(p) }
        argv.removeAll()
        guard let created else {
            Unmanaged<FuseAdapter>.fromOpaque(retained).release()
            throw MountError(description: "libfuse refused the options: \(all.joined(separator: ","))")
        }
        guard fuse_session_mount(created, mountpoint) == 0 else {
            fuse_session_destroy(created)
            Unmanaged<FuseAdapter>.fromOpaque(retained).release()
            throw MountError(description: "cannot mount at \(mountpoint) (see the message above; is fuse3 installed and /dev/fuse usable?)")
        }
        session = created
        userdata = retained
        notifier = FuseNotifier(session: created, logger: logger)
        engine.setKernelNotifier(notifier)
    }

    /// The kernel's FUSE connection number of this mount (for /sys/fs/fuse/connections and the bdi).
    public var deviceMinor: String? {
        // /proc/self/mountinfo: "id parent major:minor root mountpoint …"
        guard let text = ProcFiles.mountinfo else { return nil }
        for line in text.split(separator: "\n") {
            let f = line.split(separator: " ")
            if f.count > 4, f[4] == mountpoint { return String(f[2]) }
        }
        return nil
    }

    /// Lets the kernel read ahead up to `kilobytes` on this mount (so reads arrive in large pieces).
    public func setReadAhead(kilobytes: Int) {
        guard let minor = deviceMinor else { return }
        let path = "/sys/class/bdi/\(minor)/read_ahead_kb"
        if let h = FileHandle(forWritingAtPath: path) {
            try? h.write(contentsOf: Data("\(kilobytes)\n".utf8))
            try? h.close()
        }
    }

    /// Serves requests until the filesystem is unmounted. Then waits for replies still in flight
    /// and tears the session down. Returns libfuse's loop result.
    @discardableResult
    public func run(threads: Int = 16) async -> Int32 {
        let box = SessionPointer(raw: session)
        let rc: Int32 = await withCheckedContinuation { continuation in
            let thread = Thread {
                let cfg = fuse_loop_cfg_create()
                fuse_loop_cfg_set_max_threads(cfg, UInt32(threads))
                let rc = fuse_session_loop_mt(box.raw, cfg)
                fuse_loop_cfg_destroy(cfg)
                continuation.resume(returning: rc)
            }
            thread.name = "fuse-loop"
            thread.start()
        }
        // Replies still owed hold pointers into the session: wait for them (bounded).
        let deadline = ContinuousClock.now + .seconds(30)
        while adapter.requestsInFlight > 0 && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        if adapter.requestsInFlight > 0 { logger.warning("\(adapter.requestsInFlight) request(s) still in flight at unmount") }
        for s in signalSources { s.cancel() }
        notifier.close()
        // No `requestExit` from now on (it would use the session destroyed below).
        exitRequested.withLock { $0 = true }
        fuse_session_unmount(session)
        fuse_session_destroy(session)
        Unmanaged<FuseAdapter>.fromOpaque(userdata).release()
        return rc
    }

    /// Ends the loop: marks the session exited and detaches the mount, which wakes the loop.
    public func requestExit() {
        // Under the lock: `run` marks it before it destroys the session, so a request that comes
        // later (`stowfs unmount --no-wait` while the mount's process stores what is queued, after
        // `fusermount3 -u` ended the loop) touches neither the freed session nor the path.
        let first = exitRequested.withLock { already -> Bool in
            guard !already else { return false }
            already = true
            fuse_session_exit(session)
            return true
        }
        guard first else { return }
        if geteuid() == 0 {
            umount2(mountpoint, Int32(MNT_DETACH))
        } else {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/fusermount3")
            p.arguments = ["-u", "-z", mountpoint]
            try? p.run()
            p.waitUntilExit()
        }
    }

    /// Calls `handler` (once) on SIGTERM, SIGINT or SIGHUP. libfuse's own handlers are not used: in
    /// an async Swift process they wake the loop late (FUSE-NOTES §5).
    public func onSignal(_ handler: @escaping @Sendable (Int32) -> Void) {
        for sig in [SIGTERM, SIGINT, SIGHUP] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { @Sendable in handler(sig) }
            source.resume()
            signalSources.append(source)
        }
    }
}

/// The session pointer, handed to the loop thread. `@unchecked Sendable`: libfuse's session is made
/// to be driven by its loop thread while other threads reply and call `fuse_session_exit`.
struct SessionPointer: @unchecked Sendable {
    let raw: OpaquePointer
}
