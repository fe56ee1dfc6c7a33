import Foundation
import Testing

/// The README's walkthrough is run as written, in a fresh home folder, with the built programs on
/// the PATH: if the README says it, it works.
@Suite("README")
struct ReadmeTests {
    static func readme() throws -> String {
        try String(contentsOfFile: SemanticsDocTests.root + "/README.md", encoding: .utf8)
    }

    @Test("the 60-second walkthrough runs as written")
    func walkthrough() throws {
        let text = try Self.readme()
        let begin = try #require(text.range(of: "<!-- walkthrough: begin"))
        let end = try #require(text.range(of: "<!-- walkthrough: end -->"))
        let block = text[begin.upperBound..<end.lowerBound]
            .split(separator: "\n", omittingEmptySubsequences: false)
            .dropFirst()  // the rest of the marker line
            .filter { !$0.hasPrefix("```") }
            .joined(separator: "\n")
        #expect(block.contains("stowfs mount demo ~/stow"))

        let m = MountedFS()
        let home = m.root + "/home"
        defer {
            // Whatever the outcome: no mount and no process of this home folder stays behind.
            _ = try? m.run("/bin/sh", ["-c", "umount -l \(home)/stow 2>/dev/null; pkill -KILL -f -- '\(home)/' ; true"])
            m.cleanup()
        }
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        try ("set -euo pipefail\n" + block + "\n").write(toFile: m.root + "/walkthrough.sh", atomically: true, encoding: .utf8)
        let env = "HOME=\(home) XDG_CACHE_HOME= XDG_DATA_HOME= XDG_CONFIG_HOME= STOWFS_TOKEN= PATH=\(MountedFS.binDirectory):$PATH"
        let (status, out) = try m.run("/bin/bash", ["-c", "env \(env) bash \(m.root)/walkthrough.sh 2>&1"])
        #expect(status == 0, "the walkthrough failed:\n\(out)")
        for line in ["user.tags=\"legal,gpl\"", "the link serves the file", "all there", "everything is stored"] {
            #expect(out.contains(line), "`\(line)` missing from:\n\(out)")
        }
        #expect(!MountedFS.isMounted(home + "/stow"))
    }

    @Test("every stowfs and stowd subcommand and flag the README names exists")
    func namedCommandsExist() throws {
        let text = try Self.readme()
        let m = MountedFS()
        defer { m.cleanup() }
        var checked = 0
        for sub in ["mount", "unmount", "sync", "status", "config check"] where text.contains("stowfs \(sub)") {
            let help = try m.run("/bin/sh", ["-c", "\(MountedFS.binDirectory)/stowfs \(sub) --help"])
            #expect(help.status == 0, "stowfs \(sub): \(help.out)")
            // Flags in the same command: up to a comment, a table cell's end or a closing backtick.
            let flags = text.components(separatedBy: "stowfs \(sub)").dropFirst().compactMap { $0.split(separator: "\n").first }
                .map { $0.prefix { $0 != "#" && $0 != "|" && $0 != "`" } }
                .flatMap { rest in rest.matches(of: /--[a-z][a-z-]*/).map { String(rest[$0.range]) } }
            for flag in Set(flags) {
                #expect(help.out.contains(flag), "stowfs \(sub) has no \(flag)")
                checked += 1
            }
        }
        let stowd = try m.run(MountedFS.binDirectory + "/stowd", ["--help"])
        for flag in ["--data-dir", "--host", "--port", "--token-file"] { #expect(stowd.out.contains(flag)) }
        #expect(checked >= 5)
    }
}
