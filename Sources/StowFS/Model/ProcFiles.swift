import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Files of /proc, read whole.
///
/// Foundation's `String(contentsOfFile:)` reads a /proc file (whose size shows as 0) only up to
/// about 4 KiB: `/proc/self/mountinfo` on a machine with more than ~70 mounts lost its last lines,
/// so a mount that had come up was not found there — `stowfs mount` waited 2 minutes and failed,
/// and in a full test run with many mounts, tests failed with "the mount did not come up".
public enum ProcFiles {
    /// The whole file (read until its end), or nil when it cannot be opened.
    public static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n > 0 {
                out += buffer[0..<n]
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                break
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `/proc/self/mountinfo`, whole.
    public static var mountinfo: String? { read("/proc/self/mountinfo") }
}
