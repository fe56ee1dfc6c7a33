import ArgumentParser
import Foundation
import MountService
import StorageProtocol
import StowFS
import Synchronization

struct Find: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Find files in a mount by tags, name, type, visibility, size, time, metadata or upload status.",
        discussion: """
            Prints the paths of the files below PATH (default: the whole mount) that match every
            option given, one a line (--print0: each followed by a NUL, for `xargs -0`). The server
            answers from its indexes; files still in this mount's upload queue are matched on what
            the queue holds for them, so a file just written is found before it is stored.

            Examples:
              stowfs find ~/stow --tag holiday --type 'image/*'
              stowfs find ~/stow photos --name '*.RAW' --larger 20M --print0 | xargs -0 ls -l
              stowfs find ~/stow --status pending --status failed
              stowfs find ~/stow --meta owner=alice --newer 7d
            """)

    @Argument(help: "The mountpoint.")
    var mountpoint: String

    @Argument(help: "A folder in the mount to search below (relative to the mountpoint, or an absolute path inside it).")
    var path: String?

    @Option(name: .customLong("tag"), help: "Has this tag (repeat: has all of them).")
    var tags: [String] = []

    @Option(name: .customLong("any-tag"), help: "Has this tag or another --any-tag (repeat).")
    var anyTags: [String] = []

    @Option(help: "The name matches this glob: * ? [a-z] [!x]; case matters. Quote it from the shell.")
    var name: String?

    @Option(help: "The name contains this text (ASCII letters in any case).")
    var nameContains: String?

    @Option(name: .customLong("type"), help: "The content type: type/subtype, or type/* for all of a type.")
    var contentType: String?

    @Flag(help: "Only public files.")
    var `public` = false

    @Flag(help: "Only private files.")
    var `private` = false

    @Option(help: "pending (queued), uploading, stored or failed (repeat for several); default: any.")
    var status: [String] = []

    @Option(help: "Modified at or after: a date (2026-11-26), a time (RFC 3339), or an age (30m, 12h, 7d).")
    var newer: String?

    @Option(help: "Modified before: as --newer.")
    var older: String?

    @Option(help: "Larger than this size (bytes, or K/M/G).")
    var larger: String?

    @Option(help: "Smaller than this size (bytes, or K/M/G).")
    var smaller: String?

    @Option(help: "Has this custom metadata, KEY=VALUE (repeat: all of them).")
    var meta: [String] = []

    @Flag(help: "Folders instead of files.")
    var folders = false

    @Flag(help: "End each path with a NUL instead of a newline.")
    var print0 = false

    func validate() throws {
        if `public` && `private` { throw ValidationError("--public and --private exclude each other") }
        for s in status where StowFileSystem.FindStatus(rawValue: s) == nil {
            throw ValidationError("--status `\(s)`: one of pending, uploading, stored, failed")
        }
        _ = try filter()
    }

    func filter() throws -> SearchFilter {
        var items: [(String, String)] = []
        items += tags.map { ("tag", $0) } + anyTags.map { ("any_tag", $0) }
        if let name { items.append(("name", name)) }
        if let nameContains { items.append(("name_contains", nameContains)) }
        if let contentType { items.append(("type", contentType)) }
        if `public` || `private` { items.append(("public", `public` ? "true" : "false")) }
        if let larger {
            guard let n = ByteSize.parse(larger), n < Int64.max else { throw ValidationError("--larger `\(larger)` is not a size") }
            items.append(("min_size", String(n + 1)))
        }
        if let smaller {
            guard let n = ByteSize.parse(smaller), n > 0 else { throw ValidationError("--smaller `\(smaller)` is not a size above 0") }
            items.append(("max_size", String(n - 1)))
        }
        for (flag, value, key) in [("--newer", newer, "modified_after"), ("--older", older, "modified_before")] {
            guard let value else { continue }
            guard let ns = Self.time(value) else { throw ValidationError("\(flag) `\(value)`: give a date (2026-11-26), a time (RFC 3339) or an age (30m, 12h, 7d)") }
            items.append((key, SearchFilter.formatTime(ns)))
        }
        items += meta.map { ("meta", $0) }
        if folders { items.append(("kind", "folders")) }
        do { return try SearchFilter.parse(items) } catch { throw ValidationError("\(error)") }
    }

    /// Nanoseconds since the epoch: RFC 3339, a date (midnight UTC), whole seconds, or an age before now.
    static func time(_ text: String) -> Int64? {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604_800]
        if let unit = text.last, let scale = units[unit], let n = Int64(text.dropLast()), n >= 0 {
            let (seconds, o1) = n.multipliedReportingOverflow(by: scale)
            let (ns, o2) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
            let (at, o3) = Timestamp.nowNanoseconds().subtractingReportingOverflow(ns)
            return o1 || o2 || o3 ? nil : at
        }
        if text.count == 10, let ns = SearchFilter.parseTime(text + "T00:00:00Z") { return ns }
        return SearchFilter.parseTime(text)
    }

    func run() async throws {
        let root = URL(fileURLWithPath: mountpoint).standardizedFileURL.path
        var inside = ""
        if let path {
            if path.hasPrefix("/") {
                guard let (_, within) = MountPaths.resolve(path, mountpoints: [root]) else { fail("\(path) is not inside \(root)") }
                inside = within
            } else {
                inside = path.split(separator: "/").filter { $0 != "." }.joined(separator: "/")
            }
        }
        let request = ControlRequest(command: "find", paths: [inside], filter: try filter(), statuses: status)
        let end = print0 ? "\0" : "\n"
        let prefix = root == "/" ? "/" : root + "/"
        let outcome = StatusBox()
        do {
            try await ControlClient.send(request, mountpoint: root) { m in
                if let found = m.found {
                    var text = ""
                    for p in found { text += prefix + p + end }
                    FileHandle.standardOutput.write(Data(text.utf8))
                } else {
                    outcome.set(m)
                }
            }
        } catch {
            fail("\(error)")
        }
        if let e = outcome.value?.error { fail(e) }
        guard outcome.value?.done == true else { fail("the mount stopped answering before the search ended") }
    }
}
