import Foundation
public import StorageProtocol
#if canImport(Glibc)
import Glibc
#endif

/// The control socket of a running mount: one JSON request per line, answers as JSON lines.
///
/// - `status` → one `ControlMessage` with `status`;
/// - `sync` → `progress` lines while the queue drains, then `done`;
/// - `unmount` → like `sync` (unless `leave_queued`), then the mount goes away, then `done`;
///   uploads the server refused stay in the journal for the next mount, and `done` lists them;
/// - `retry` (`paths`, relative to the mountpoint; none: all) → failed uploads go again now; `done` with `count`;
/// - `discard` (`paths`) → the refused uploads there are dropped; `done` with `discarded`;
/// - `set` (`bwlimit`: `RATE` or `UP:DOWN`) → the mount's limits change now; `done`;
/// - `pause` / `resume` → uploads stop / go on; `done`. While paused, `sync` first says `paused`
///   and then waits (with `no_wait`: an `error` at once instead), and `unmount` resumes them.
///
/// - `find` (`filter`, `statuses`, `paths`: the folder to search, relative to the mountpoint) →
///   `found` lines (mount paths, relative to the mountpoint) and then `done`.
///
/// `sync` and `unmount` end with `done` and, when the server refused some uploads for good,
/// `failures` (path and reason each): they are kept, not dropped.
public struct ControlRequest: Codable, Sendable, Equatable {
    public var command: String
    public var leaveQueued: Bool?
    public var paths: [String]?
    /// `sync`: while uploads are paused, answer at once (an error) instead of waiting.
    public var noWait: Bool?
    /// `set`: the new bandwidth limit.
    public var bwlimit: String?
    /// `find`: what to look for, and in which states (`StowFileSystem.FindStatus`; none: any).
    public var filter: SearchFilter?
    public var statuses: [String]?

    public init(
        command: String, leaveQueued: Bool? = nil, paths: [String]? = nil, noWait: Bool? = nil, bwlimit: String? = nil, filter: SearchFilter? = nil,
        statuses: [String]? = nil
    ) {
        self.command = command
        self.leaveQueued = leaveQueued
        self.paths = paths
        self.noWait = noWait
        self.bwlimit = bwlimit
        self.filter = filter
        self.statuses = statuses
    }

    enum CodingKeys: String, CodingKey {
        case command, paths, bwlimit, filter, statuses
        case leaveQueued = "leave_queued"
        case noWait = "no_wait"
    }
}

public struct ControlMessage: Codable, Sendable, Equatable {
    public var status: MountStatus?
    public var progress: QueueStatus?
    public var done: Bool?
    public var error: String?
    public var mountpoint: String?
    /// Uploads the server refused for good (kept in the queue).
    public var failures: [UploadQueue.Failure]?
    /// `retry`: how many uploads go again.
    public var count: Int?
    /// `discard`: the locations whose refused uploads were dropped.
    public var discarded: [String]?
    /// `sync` while uploads are paused: said before it waits.
    public var paused: Bool?
    /// `find`: some of the files found (mount paths, relative to the mountpoint).
    public var found: [String]?

    public init(
        status: MountStatus? = nil, progress: QueueStatus? = nil, done: Bool? = nil, error: String? = nil, mountpoint: String? = nil,
        failures: [UploadQueue.Failure]? = nil, count: Int? = nil, discarded: [String]? = nil, paused: Bool? = nil, found: [String]? = nil
    ) {
        self.found = found
        self.status = status
        self.progress = progress
        self.done = done
        self.error = error
        self.mountpoint = mountpoint
        self.failures = failures
        self.count = count
        self.discarded = discarded
        self.paused = paused
    }
}

/// Where the control socket of a mount lives: a runtime folder of the user, one socket per mountpoint.
public enum ControlSocket {
    public struct UnsafeDirectory: Error, CustomStringConvertible {
        public var description: String
    }

    /// Makes the runtime folder (mode 0700) or checks the one there: it must be a real folder (not
    /// a link), owned by this user, writable by nobody else. Under `/tmp` another user could
    /// otherwise make it first and plant a socket that `stowfs sync` and `unmount` would talk to.
    public static func prepareDirectory(_ path: String = directory()) throws(UnsafeDirectory) {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw UnsafeDirectory(description: "cannot make \(path): \(String(cString: strerror(errno)))")
        }
        try checkDirectory(path)
    }

    /// Checks the runtime folder as `prepareDirectory` does, without making it.
    public static func checkDirectory(_ path: String = directory()) throws(UnsafeDirectory) {
        // FileManager's attributes are lstat's: a link is reported as a link, not followed.
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else {
            throw UnsafeDirectory(description: "cannot read the attributes of \(path)")
        }
        guard attributes[.type] as? FileAttributeType == .typeDirectory else {
            throw UnsafeDirectory(description: "\(path) is not a folder (a link?); remove it")
        }
        let owner = (attributes[.ownerAccountID] as? NSNumber)?.uint32Value
        guard owner == geteuid() else {
            throw UnsafeDirectory(description: "\(path) belongs to uid \(owner.map(String.init) ?? "?"), not to you (uid \(geteuid())); remove it, or set XDG_RUNTIME_DIR")
        }
        let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue ?? 0o777
        guard mode & 0o022 == 0 else {
            throw UnsafeDirectory(description: "\(path) is writable by others (mode \(String(mode, radix: 8))); chmod 700 it")
        }
    }

    public static func directory() -> String {
        if geteuid() == 0 { return "/run/stowfs" }
        if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], !runtime.isEmpty { return runtime + "/stowfs" }
        return "/tmp/stowfs-\(geteuid())"
    }

    /// The socket of the mount at `mountpoint`.
    ///
    /// Only the mountpoint's parent is resolved (symlinks): the mountpoint itself is never touched,
    /// since it may be a mount that is not served yet (or any more), where a stat would hang.
    public static func path(for mountpoint: String) -> String {
        let standard = URL(fileURLWithPath: mountpoint, isDirectory: true).standardizedFileURL.path
        let parent = URL(fileURLWithPath: (standard as NSString).deletingLastPathComponent, isDirectory: true).resolvingSymlinksInPath().path
        let canonical = (parent == "/" ? "" : parent) + "/" + (standard as NSString).lastPathComponent
        // FNV-1a: a short, stable name per mountpoint.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in canonical.utf8 {
            hash ^= UInt64(b)
            hash = hash &* 0x100_0000_01b3
        }
        return directory() + "/" + String(hash, radix: 16) + ".sock"
    }
}
