import ArgumentParser
import Foundation
import MountService
import StorageClient
import StorageProtocol

/// The settings a flag or a config file can give, shared by `mount` and `config check`.
struct SettingsFlags: ParsableArguments {
    @Option(help: "The stowd to use, e.g. http://127.0.0.1:8420. Default: a local stowd beside stowfs.")
    var endpoint: String?

    @Option(help: "A file whose first line is the token (else STOWFS_TOKEN, else token_file in the config).")
    var tokenFile: String?

    @Option(help: "For an https endpoint: a PEM file of the CA that signed the server's certificate (default: the system's trust store).")
    var caFile: String?

    @Option(help: "Where local copies, the block cache and the upload journal live. Default: ~/.cache/stowfs/<server>/<namespace>.")
    var cacheDir: String?

    @Option(help: "Size bound of the block cache (default 2G).")
    var cacheSize: String?

    @Option(help: "Seconds that attributes from the server are trusted, and listings while the change feed is not followed (default 5).")
    var attrTTL: String?

    @Option(help: "Uploads in flight at once (default 8).")
    var parallel: String?

    @Option(help: "Log level: trace, debug, info, notice, warning, error (default info).")
    var logLevel: String?

    @Option(help: "Owner shown for files that carry none (default: yours).")
    var uid: String?

    @Option(help: "Group shown for files that carry none (default: yours).")
    var gid: String?

    @Option(help: "Mode mask for files that carry no mode, in octal (default 022).")
    var umask: String?

    @Option(help: "Bandwidth limit in bytes per second, binary K/M/G: RATE for both directions or UP:DOWN (10M, 1M:10M; off). Change it live with `stowfs set`.")
    var bwlimit: String?

    @Option(help: "Serve Prometheus metrics of the mount at http://HOST:PORT/metrics (HOST:PORT, [IPv6]:PORT, or a port on 127.0.0.1; default: off).")
    var metrics: String?

    @Option(help: "Read settings from this file only (else STOWFS_CONFIG, else ~/.config/stowfs/config.toml and /etc/stowfs/config.toml).")
    var config: String?

    var given: [SettingKey: String] {
        var f: [SettingKey: String] = [:]
        f[.endpoint] = endpoint
        f[.tokenFile] = tokenFile
        f[.caFile] = caFile
        f[.cacheDir] = cacheDir
        f[.cacheSize] = cacheSize
        f[.attrTTL] = attrTTL
        f[.parallel] = parallel
        f[.logLevel] = logLevel
        f[.uid] = uid
        f[.gid] = gid
        f[.umask] = umask
        f[.bwlimit] = bwlimit
        f[.metrics] = metrics
        return f
    }

    func resolve() throws(ConfigError) -> ResolvedSettings {
        try ResolvedSettings.resolve(flags: given, environment: ProcessInfo.processInfo.environment, configPath: config)
    }
}

struct Config: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Settings: where they come from.",
        subcommands: [Check.self])

    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Explain the settings a mount would use and why, and check that they work.",
            discussion: """
                Reads the same flags and config files as `stowfs mount`, prints each setting with its
                source, then checks the token, the server (and NAMESPACE, when given) and the cache
                folder. Exits non-zero when something would stop a mount.
                """)

        @Argument(help: "A namespace to look for on the server.")
        var namespace: String?

        @OptionGroup var settings: SettingsFlags

        func run() async throws {
            let resolved: ResolvedSettings
            do {
                resolved = try settings.resolve()
            } catch {
                fail("the config file cannot be used: \(error)\n  → fix that line, then run this again")
            }
            print(resolved.explanation())
            var problems: [String] = []
            var options = MountOptions(namespace: nil, mountpoint: "")
            print("checks:")
            do {
                try resolved.apply(to: &options)
                _ = try resolved.logLevel()
                print("  ✓ every value is well-formed")
                if let t = try resolved.token() { print("  ✓ token from \(t.source)") }
            } catch {
                problems.append(error.description)
            }
            var ns: Namespace?
            if let namespace {
                do { ns = try Namespace(namespace) } catch { problems.append("`\(namespace)` is not a valid namespace") }
            }
            if problems.isEmpty {
                if let endpoint = options.endpoint {
                    let store = HTTPObjectStore(configuration: {
                        var c = HTTPObjectStore.Configuration(endpoint: endpoint, token: options.token)
                        c.retry = .none
                        c.requestTimeout = .seconds(5)
                        c.caFile = options.caFile
                        return c
                    }())
                    do {
                        try await Preflight.checkServer(store, endpoint: endpoint, namespace: ns, create: false)
                        if endpoint.hasPrefix("https://") {
                            let trust = options.caFile.map { "the CA file \($0)" } ?? "the system's trust store"
                            print("  ✓ the server's certificate verifies against \(trust)")
                        }
                        print("  ✓ the server at \(endpoint) accepts the token" + (ns.map { "; namespace `\($0)` exists" } ?? ""))
                    } catch {
                        problems.append(error.description)
                    }
                    try? await store.shutdown()
                } else {
                    let binary = StowdChild.siblingBinary()
                    if FileManager.default.isExecutableFile(atPath: binary) {
                        print("  ✓ no endpoint: the local stowd \(binary) will serve \(EmbeddedServer.defaultDataDirectory())")
                    } else {
                        problems.append(MountProblem("no endpoint is set and there is no stowd beside stowfs (\(binary))", fix: "set endpoint in the config file or pass --endpoint URL").description)
                    }
                }
                if let dir = options.cacheDirectory {
                    do {
                        try Preflight.checkCacheDirectory(dir)
                        print("  ✓ the cache folder \(dir) is writable")
                    } catch {
                        problems.append(error.description)
                    }
                }
            }
            for p in problems { print("  ✗ " + p.replacingOccurrences(of: "\n", with: "\n    ")) }
            if !problems.isEmpty { throw ExitCode(1) }
        }
    }
}
