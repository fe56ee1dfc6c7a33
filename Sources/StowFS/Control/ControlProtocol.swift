import Foundation

/// The control socket of a running mount: one JSON request per line, answers as JSON lines.
///
/// - `status` → one `ControlMessage` with `status`;
/// - `sync` → `progress` lines while the queue drains, then `done`;
/// - `unmount` → like `sync` (unless `leave_queued`), then the mount goes away, then `done`.
public struct ControlRequest: Codable, Sendable, Equatable {
    public var command: String
    public var leaveQueued: Bool?

    public init(command: String, leaveQueued: Bool? = nil) {
        self.command = command
        self.leaveQueued = leaveQueued
    }

    enum CodingKeys: String, CodingKey {
        case command
        case leaveQueued = "leave_queued"
    }
}

public struct ControlMessage: Codable, Sendable, Equatable {
    public var status: MountStatus?
    public var progress: QueueStatus?
    public var done: Bool?
    public var error: String?
    public var mountpoint: String?

    public init(status: MountStatus? = nil, progress: QueueStatus? = nil, done: Bool? = nil, error: String? = nil, mountpoint: String? = nil) {
        self.status = status
        self.progress = progress
        self.done = done
        self.error = error
        self.mountpoint = mountpoint
    }
}

/// Where the control socket of a mount lives: a runtime folder of the user, one socket per mountpoint.
public enum ControlSocket {
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
