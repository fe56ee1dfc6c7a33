import Foundation
import FuseKit
public import Logging
import StorageClient
import SystemdNotify
public import StorageProtocol
public import StowFS
#if canImport(Glibc)
import Glibc
#endif

/// Runs one mount from start to clean exit: checks, server, engine, FUSE session, control
/// socket, signals, and the drain of the upload queue before the process ends.
public enum MountRunner {
    /// The root of stowfs's caches: `$XDG_CACHE_HOME/stowfs` or `~/.cache/stowfs`.
    public static func cacheRoot() -> String {
        let env = ProcessInfo.processInfo.environment
        let base = env["XDG_CACHE_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? (userHomeDirectory(env) + "/.cache")
        return base + "/stowfs"
    }

    /// The default cache folder of a mount: one per server and namespace, so that a remount finds its journal.
    public static func defaultCacheDirectory(endpoint: String, namespace: Namespace?) -> String {
        let server = endpoint.replacingOccurrences(of: "http://", with: "").replacingOccurrences(of: "https://", with: "")
            .map { $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" ? $0 : "_" }
        return cacheRoot() + "/" + String(server) + "/" + (namespace?.name ?? "_all")
    }

    /// Where a daemonized mount logs.
    public static func logFile(mountpoint: String) -> String {
        cacheRoot() + "/logs/" + (ControlSocket.path(for: mountpoint) as NSString).lastPathComponent.replacingOccurrences(of: ".sock", with: ".log")
    }

    /// What keeps the server from being used, if anything.
    static func serverProblem(_ store: HTTPObjectStore, endpoint: String, options: MountOptions) async -> MountProblem? {
        do {
            try await Preflight.checkServer(store, endpoint: endpoint, namespace: options.namespace, create: options.createNamespace)
            return nil
        } catch {
            return error
        }
    }

    /// Mounts and serves until unmounted; returns the exit status.
    public static func run(_ options: MountOptions, logger: Logger) async throws -> Int32 {
        let mountpoint = URL(fileURLWithPath: options.mountpoint, isDirectory: true).standardizedFileURL.path
        try Preflight.checkFuse()
        try Preflight.checkMountpoint(mountpoint, allowNonEmpty: options.fuseOptions.contains("nonempty"))

        var embedded: EmbeddedServer?
        let endpoint: String
        let token: String?
        if let e = options.endpoint {
            endpoint = e
            token = options.token
        } else {
            let server = try await EmbeddedServer.findOrStart(dataDirectory: options.embeddedDataDirectory ?? EmbeddedServer.defaultDataDirectory(), logger: logger)
            embedded = server
            endpoint = server.endpoint
            token = server.token
        }
        var storeConfig = HTTPObjectStore.Configuration(endpoint: endpoint, token: token)
        // The embedded server is plain http on loopback: a CA file is for a server given by --endpoint.
        storeConfig.caFile = embedded == nil ? options.caFile : nil
        // A filesystem must answer: metadata calls give up after 15 s (twice), and the caller sees EIO
        // (uploads are not affected: they stay queued and retry on their own schedule).
        storeConfig.requestTimeout = .seconds(15)
        storeConfig.retry = RetryPolicy(attempts: 2, baseDelay: .milliseconds(200))
        storeConfig.maxConnectionsPerHost = max(16, options.uploadParallelism * 2)
        // Limiters on every mount (unlimited unless --bwlimit), so that `stowfs set` can add a limit later.
        let bandwidth = BandwidthLimits(up: options.bandwidth.up, down: options.bandwidth.down)
        storeConfig.bandwidth = bandwidth
        // Every request names this mount, so that it can pass over its own changes in the feed.
        let origin = "m-" + UUID().uuidString.lowercased()
        storeConfig.origin = origin
        let store = HTTPObjectStore(configuration: storeConfig)
        func cleanup() async {
            try? await store.shutdown()
            embedded?.stop()
        }
        do {
            // The embedded server moves between ports: its mounts are keyed by "local", so a remount finds its journal.
            let cacheDirectory = options.cacheDirectory ?? defaultCacheDirectory(endpoint: embedded == nil ? endpoint : "local", namespace: options.namespace)
            let problem = await Self.serverProblem(store, endpoint: endpoint, options: options)
            var offline = false
            if let problem {
                // Away, not refusing: mount from what the last clean unmount kept, if it kept anything.
                guard problem.unreachable, !options.requireServer, embedded == nil else { throw problem }
                guard FileManager.default.fileExists(atPath: StowFileSystem.snapshotPath(cacheDirectory)) else {
                    throw MountProblem(
                        problem.problem + "; and the cache folder \(cacheDirectory) keeps nothing to mount from",
                        fix: problem.fix + " (a mount made while the server is away shows what the last clean unmount kept)")
                }
                logger.warning("\(problem.problem): mounting from the cache (what the last clean unmount kept); writes queue until the server is back")
                offline = true
            }
            try Preflight.checkCacheDirectory(cacheDirectory)
            var lock: CacheLock? = try CacheLock(cacheDirectory: cacheDirectory)

            var config = MountConfiguration(scope: options.namespace.map { .namespace($0) } ?? .all, cacheDirectory: cacheDirectory)
            config.cacheSize = options.cacheSize
            config.attributeTTL = .milliseconds(Int(options.attributeTTL * 1000))
            config.entryTTL = config.attributeTTL
            config.uploadParallelism = options.uploadParallelism
            config.defaultUID = options.uid ?? getuid()
            config.defaultGID = options.gid ?? getgid()
            config.umask = options.umask
            config.readOnly = options.readOnly || options.fuseOptions.contains("ro")
            config.localReads = options.localReads
            config.origin = origin
            config.bandwidth = bandwidth
            config.startOffline = offline
            let engine = try await StowFileSystem(configuration: config, store: store, logger: logger)
            if let name = ProcessInfo.processInfo.environment["STOWFS_TEST_FAULT"], !name.isEmpty {
                // Faults for the tests of the whole program, which run debug builds; a release
                // build has none to put in.
                #if DEBUG
                guard let fault = StowFileSystem.TestFault(rawValue: name) else { throw MountProblem("STOWFS_TEST_FAULT: no fault is called `\(name)`", fix: "unset STOWFS_TEST_FAULT (it is for tests)") }
                logger.warning("a fault put in by a test: \(name)")
                engine.inject(fault)
                #else
                logger.warning("STOWFS_TEST_FAULT is ignored: faults are put in by debug builds only (this one is a release build)")
                #endif
            }
            if !offline { await engine.listRootAhead(within: .seconds(1)) }

            let fuseOptions = ["default_permissions"] + options.fuseOptions.filter { $0 != "nonempty" && $0 != "default_permissions" }
            let fsname = "stowfs:" + (options.namespace?.name ?? "all")
            // The control socket listens before the mount appears: a script that runs `stowfs sync`
            // as soon as the folder is mounted must find it (a CI run once did not).
            let leaveQueued = LeaveQueued()
            let exit = ExitRequest()
            let control = ControlServer(engine: engine, mountpoint: mountpoint, logger: logger) { leave in
                if leave { leaveQueued.set() }
                exit.request()
            }
            let controlTask: Task<Void, any Error>
            do {
                controlTask = try await control.start()
            } catch {
                throw MountProblem("cannot listen on the control socket \(ControlSocket.path(for: mountpoint)): \(error)", fix: "fix the runtime folder named above, or set XDG_RUNTIME_DIR to one of your own")
            }
            // Metrics: bound before the mount is made, so that a port in use stops the mount with a clear error.
            var metrics: (server: MetricsServer, instruments: MountMetrics)?
            if let text = options.metricsAddress, let address = MetricsServer.Address(text) {
                do {
                    metrics = (try await MetricsServer.bind(address), MountMetrics())
                } catch {
                    controlTask.cancel()
                    _ = try? await controlTask.value
                    throw MountProblem("cannot serve metrics on \(address): \(error)", fix: "pick a free port with --metrics HOST:PORT (or leave it out)")
                }
            }
            let mount: FuseMount
            do {
                mount = try FuseMount(
                    engine: engine, mountpoint: mountpoint, options: fuseOptions, fsname: fsname, logger: logger, observer: metrics?.instruments)
            } catch {
                await metrics?.server.close()
                controlTask.cancel()
                _ = try? await controlTask.value
                throw error
            }
            // Mounted: what the last clean unmount kept is this mount's now; then uploads start.
            engine.claimKept()
            await engine.start()
            let metricsTask = metrics.map { m in
                Task {
                    logger.info("metrics at \(m.server.url)")
                    await m.server.serve { await m.instruments.scrape(engine) }
                }
            }
            exit.attach(mount)
            mount.setReadAhead(kilobytes: 1024)
            engine.startFollowingChanges()
            mount.onSignal { sig in
                Task {
                    logger.info("signal \(sig): storing what is queued, then unmounting")
                    SystemdNotify.stopping(status: "signal \(sig): storing what is queued, then unmounting")
                    await engine.resumeUploads()
                    await engine.sync { logger.info("\(ProgressText.line($0))") }
                    mount.requestExit()
                }
            }
            logger.info("mounted \(fsname) at \(mountpoint) (server \(endpoint), cache \(cacheDirectory))\(offline ? " from the cache: the server is unreachable" : "")")
            // Type=notify: the mount is there and its control socket listens. Then the queue's
            // length as the unit's status line (`systemctl status`), when it changes.
            SystemdNotify.ready(status: "mounted \(fsname) at \(mountpoint)")
            let statusTask = Task {
                var last = ""
                while !Task.isCancelled, SystemdNotify.socketPath != nil {
                    try? await Task.sleep(for: .seconds(2))
                    let q = await engine.status().queue
                    var line = q.files == 0 ? "mounted; queue empty" : "mounted; queue: \(q.files) file(s), \(ByteSize.format(q.bytes))"
                    if q.paused == true { line += "; uploads paused (stowfs resume)" }
                    if line != last {
                        SystemdNotify.status(line)
                        last = line
                    }
                }
            }
            let rc = await mount.run()
            statusTask.cancel()
            metricsTask?.cancel()
            await metricsTask?.value
            logger.info("unmounted \(mountpoint)")
            SystemdNotify.stopping(status: "unmounted; storing what is still queued")
            if !leaveQueued.isSet {
                // The mount is gone (unmount, fusermount3 -u, a signal): what is still owed goes now.
                // Always, and resumed if paused: a file written and not yet queued (a descriptor
                // still open when the mount was detached) has no record to count.
                let pending = await engine.status().queue.files
                if await engine.uploadsArePaused() {
                    logger.info("uploads were paused: resuming them to store what is queued")
                    await engine.resumeUploads()
                }
                if pending > 0 { logger.info("storing \(pending) file(s) still queued before exiting") }
                let syncing = Task { await engine.sync { logger.info("\(ProgressText.line($0))") } }
                // `stowfs unmount --no-wait` (a server that is away) ends the wait: the queue stops,
                // and what is left stays in the journal for the next mount.
                let giveUp = Task {
                    while !Task.isCancelled {
                        if leaveQueued.isSet {
                            logger.info("leaving what is still queued for the next mount (unmount --no-wait)")
                            await engine.stop()
                            return
                        }
                        try? await Task.sleep(for: .milliseconds(100))
                    }
                }
                _ = await syncing.value
                giveUp.cancel()
                await giveUp.value
            } else {
                let left = await engine.status().queue.files
                logger.info("leaving \(left) file(s) queued for the next mount")
            }
            await engine.stopFollowingChanges()
            // What was written is stored: the locks this mount holds go now, not at lease's end.
            await engine.endLockSessions()
            await engine.stop()
            // A clean end: what the mount knew is kept for a later mount made while the server is
            // away (what is still queued is the journal's, and comes back from it).
            engine.keepForNextMount()
            await cleanup()
            lock = nil
            // Last: while the control socket answers, `stowfs unmount` knows this process is not done.
            controlTask.cancel()
            _ = try? await controlTask.value
            return rc == 0 || rc == SIGTERM || rc == SIGINT ? 0 : 1
        } catch {
            await cleanup()
            throw error
        }
    }
}

/// Set when an unmount asked to leave the queue for the next mount.
final class LeaveQueued: Sendable {
    private let flag = SendableFlag()
    func set() { flag.set() }
    var isSet: Bool { flag.isSet }
}

/// `stowfs unmount` may arrive before the mount exists (the socket listens first): it is kept and
/// honoured when the mount is attached.
final class ExitRequest: Sendable {
    private let state = Mutex<(mount: FuseMount?, requested: Bool)>((nil, false))
    func request() {
        let m = state.withLock { s -> FuseMount? in
            s.requested = true
            return s.mount
        }
        m?.requestExit()
    }
    func attach(_ mount: FuseMount) {
        let requested = state.withLock { s -> Bool in
            s.mount = mount
            return s.requested
        }
        if requested { mount.requestExit() }
    }
}

/// An exclusive lock on a cache folder (its `lock` file), held while the object lives.
final class CacheLock {
    let fd: Int32
    init(cacheDirectory: String) throws {
        let path = cacheDirectory + "/lock"
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw MountProblem("cannot open \(path): \(String(cString: strerror(errno)))", fix: "check the cache folder's permissions, or give this mount another --cache-dir")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let why = errno
            close(fd)
            if why == EWOULDBLOCK {
                throw MountProblem("another stowfs is using the cache folder \(cacheDirectory)", fix: "unmount it first, or give this mount its own --cache-dir")
            }
            throw MountProblem("cannot lock \(path): \(String(cString: strerror(why)))", fix: "give this mount a cache folder on a local disk (--cache-dir)")
        }
    }
    deinit { close(fd) }
}

import Synchronization

final class SendableFlag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}

/// How queue progress reads in a log line or on a terminal.
public enum ProgressText {
    public static func line(_ q: QueueStatus, rate: Double? = nil) -> String {
        if q.files == 0 { return "all stored (\(q.uploadedFiles) file(s), \(ByteSize.format(q.uploadedBytes)) this mount)" }
        var s = "\(q.files) file(s), \(ByteSize.format(max(0, q.bytes - q.bytesSent))) left"
        if q.uploading > 0 { s += ", \(q.uploading) uploading" }
        if let rate, rate > 0 {
            s += String(format: ", %@/s", ByteSize.format(Int64(rate)))
            let eta = Double(max(0, q.bytes - q.bytesSent)) / rate
            s += eta < 3600 ? String(format: ", ETA %.0fs", eta) : ""
        }
        if q.failed > 0 { s += ", \(q.failed) failed" }
        if let why = q.items.first(where: { $0.lastError != nil })?.lastError { s += " — waiting: \(why)" }
        return s
    }
}
