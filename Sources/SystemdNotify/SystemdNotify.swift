import CStowSystem
import Foundation

/// systemd's service notifications (`Type=notify` units), without libsystemd: one datagram of
/// `KEY=value` lines to the socket named by `$NOTIFY_SOCKET`. Without that variable (not started
/// by systemd, or by a unit of another type) nothing is sent. A failed send is not an error of
/// the program's: it is reported to the caller and otherwise ignored.
public enum SystemdNotify {
    /// The socket systemd listens on for this process, if any.
    public static var socketPath: String? {
        guard let path = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"], !path.isEmpty else { return nil }
        return path
    }

    /// Sends `fields` (such as `READY=1`, `STATUS=…`) as one message; false when there is no
    /// socket or the send failed. A field's newlines would start a new field: they become spaces.
    @discardableResult
    public static func send(_ fields: [String]) -> Bool {
        guard let path = socketPath else { return false }
        let message = fields.map { $0.replacingOccurrences(of: "\n", with: " ") }.joined(separator: "\n") + "\n"
        let bytes = Array(message.utf8)
        return bytes.withUnsafeBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: bytes.count) { CStowSystem_notify(path, $0, bytes.count) } == 0
        }
    }

    /// `READY=1`, with a status line.
    public static func ready(status: String) { send(["READY=1", "STATUS=" + status]) }
    /// `STOPPING=1`, with a status line.
    public static func stopping(status: String) { send(["STOPPING=1", "STATUS=" + status]) }
    /// `STATUS=…` alone.
    public static func status(_ status: String) { send(["STATUS=" + status]) }
}
