import Foundation
import StowFS

/// Which StowFS mount a path is in, found by name only: nothing inside a mount is touched (a
/// stat of a mount whose daemon is gone would hang).
public enum MountPaths {
    /// The mountpoints of StowFS mounts (`fuse.stowfs`) on this machine, from `/proc/self/mountinfo`.
    public static func stowfsMountpoints(mountinfo: String? = nil) -> [String] {
        guard let text = mountinfo ?? ProcFiles.mountinfo else { return [] }
        return text.split(separator: "\n").compactMap { line in
            // `… mountpoint options … - fstype source super-options`
            let halves = line.components(separatedBy: " - ")
            guard halves.count >= 2 else { return nil }
            let before = halves[0].split(separator: " ")
            let after = halves[halves.count - 1].split(separator: " ")
            guard before.count > 4, after.first == "fuse.stowfs" else { return nil }
            return unescape(String(before[4]))
        }
    }

    /// `path` (absolute, or relative to `cwd`) as its mountpoint and the path inside the mount
    /// (`""` for the mountpoint itself); nil when it is in no StowFS mount.
    public static func resolve(_ path: String, cwd: String? = nil, mountpoints: [String]? = nil) -> (mountpoint: String, inside: String)? {
        let absolute = path.hasPrefix("/") ? path : (cwd ?? FileManager.default.currentDirectoryPath) + "/" + path
        let standard = URL(fileURLWithPath: absolute).standardizedFileURL.path
        let candidates = (mountpoints ?? stowfsMountpoints()).sorted { $0.count > $1.count }
        for m in candidates {
            if standard == m { return (m, "") }
            let prefix = m == "/" ? "/" : m + "/"
            if standard.hasPrefix(prefix) { return (m, String(standard.dropFirst(prefix.count))) }
        }
        return nil
    }

    /// mountinfo writes a space as `\040`, a tab as `\011`, a newline as `\012`, a backslash as `\134`.
    static func unescape(_ s: String) -> String {
        s.replacingOccurrences(of: "\\040", with: " ").replacingOccurrences(of: "\\011", with: "\t")
            .replacingOccurrences(of: "\\012", with: "\n").replacingOccurrences(of: "\\134", with: "\\")
    }
}
