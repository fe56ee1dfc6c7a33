import CStowSystem
import Foundation
public import Logging

/// Logging to standard error in the form the journal keeps best when systemd connected standard
/// error to it (`$JOURNAL_STREAM` names that stream): one line per event, its level as a `<N>`
/// syslog priority prefix, no time (the journal stamps each line), metadata as `key=value`.
/// Anywhere else, swift-log's usual lines.
public enum JournalLogging {
    /// Whether standard error is the journal.
    public static var toJournal: Bool {
        guard let stream = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return false }
        return CStowSystem_stderr_is_journal(stream) == 1
    }

    /// Bootstraps swift-log (once per process) at `level`.
    public static func bootstrap(level: Logger.Level) {
        let journal = toJournal
        LoggingSystem.bootstrap { label in
            if journal { return JournalLogHandler(label: label, logLevel: level) }
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = level
            return h
        }
    }
}

/// One line per event on standard error: `<priority>label: message key=value …`.
public struct JournalLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    let label: String

    public init(label: String, logLevel: Logger.Level) {
        self.label = label
        self.logLevel = logLevel
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// The syslog priority of a level (sd-daemon(3)).
    public static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    public func log(event: LogEvent) {
        var fields = metadata
        if let more = event.metadata { fields.merge(more) { $1 } }
        // A message's own newlines would start lines without a priority: they become spaces.
        var line = "<\(Self.priority(event.level))>\(label): " + "\(event.message)".replacingOccurrences(of: "\n", with: " ")
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            let text = "\(value)"
            let quoted = text.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0 == "\n" })
                ? "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n") + "\""
                : text
            line += " \(key)=\(quoted)"
        }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
