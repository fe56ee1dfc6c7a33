import Foundation
public import Logging
import StorageClient
import StorageProtocol
#if canImport(Glibc)
import Glibc
#endif

/// The user's home: `$HOME` as the shell has it, else the password database's.
func userHomeDirectory(_ environment: [String: String]) -> String {
    environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
}

/// A setting of `stowfs mount` that a flag or a config file can give.
public enum SettingKey: String, CaseIterable, Sendable {
    case endpoint
    case tokenFile = "token_file"
    case caFile = "ca_file"
    case cacheDir = "cache_dir"
    case cacheSize = "cache_size"
    case attrTTL = "attr_ttl"
    case parallel
    case logLevel = "log_level"
    case uid
    case gid
    case umask
    case bwlimit
    case metrics

    /// The command-line flag that gives it.
    public var flag: String { "--" + rawValue.replacingOccurrences(of: "_", with: "-") }

    /// What it is when nothing gives it.
    public var defaultText: String? {
        switch self {
        case .cacheSize: "2G"
        case .attrTTL: "5"
        case .parallel: "8"
        case .logLevel: "info"
        case .umask: "022"
        case .bwlimit: "off"
        case .endpoint, .tokenFile, .caFile, .cacheDir, .uid, .gid, .metrics: nil
        }
    }

    /// How the default reads when there is no plain value.
    var defaultDescription: String {
        switch self {
        case .endpoint: "a local stowd started beside stowfs"
        case .tokenFile: "none (STOWFS_TOKEN, or the local stowd's own token)"
        case .caFile: "none (the system's trust store)"
        case .cacheDir: "~/.cache/stowfs/<server>/<namespace>"
        case .uid: "yours (\(getuid()))"
        case .gid: "yours (\(getgid()))"
        case .metrics: "off"
        default: defaultText ?? ""
        }
    }
}

/// Where a setting's value came from.
public enum SettingSource: Sendable, Equatable, CustomStringConvertible {
    case flag(String)
    case environment(String)
    case file(String, line: Int)
    case builtIn

    public var description: String {
        switch self {
        case .flag(let f): "flag \(f)"
        case .environment(let v): "environment \(v)"
        case .file(let path, let line): "\(path) line \(line)"
        case .builtIn: "default"
        }
    }
}

/// The settings of a mount, each with where it came from: flags override the user's config file,
/// which overrides `/etc/stowfs/config.toml`, which overrides the defaults. The token is a secret:
/// `--token-file`, then `STOWFS_TOKEN`, then `token_file` from a config file.
public struct ResolvedSettings: Sendable {
    public struct Value: Sendable, Equatable {
        public var text: String
        public var source: SettingSource
        public init(text: String, source: SettingSource) {
            self.text = text
            self.source = source
        }
    }

    /// The config files looked at, highest priority first, and whether each was there.
    public var configFiles: [(path: String, found: Bool)] = []
    public var values: [SettingKey: Value] = [:]
    /// The token, unread until needed: its source and, for a file, its path.
    public var tokenFromEnvironment: String?

    public static func userConfigPath(environment: [String: String]) -> String {
        let base = environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? (userHomeDirectory(environment) + "/.config")
        return base + "/stowfs/config.toml"
    }

    public static let systemConfigPath = "/etc/stowfs/config.toml"

    /// Resolves flags, environment and config files. `configPath` (from `--config` or
    /// `STOWFS_CONFIG`) replaces the two usual files.
    public static func resolve(
        flags: [SettingKey: String], environment: [String: String], configPath: String? = nil,
        systemConfigPath: String = ResolvedSettings.systemConfigPath
    ) throws(ConfigError) -> ResolvedSettings {
        var settings = ResolvedSettings()
        var files: [ConfigFile] = []
        if let given = configPath ?? environment["STOWFS_CONFIG"].flatMap({ $0.isEmpty ? nil : $0 }) {
            let explicit = URL(fileURLWithPath: given).standardizedFileURL.path
            guard let file = try ConfigFile.load(explicit) else {
                throw ConfigError(path: explicit, line: nil, message: "does not exist")
            }
            files = [file]
            settings.configFiles = [(explicit, true)]
        } else {
            for path in [userConfigPath(environment: environment), systemConfigPath] {
                let file = try ConfigFile.load(path)
                settings.configFiles.append((path, file != nil))
                if let file { files.append(file) }
            }
        }
        // Lowest priority first, so that later writes win.
        for key in SettingKey.allCases {
            if let d = key.defaultText { settings.values[key] = Value(text: d, source: .builtIn) }
        }
        for file in files.reversed() {
            for (name, entry) in file.entries {
                let normalized = name.replacingOccurrences(of: "-", with: "_")
                guard let key = SettingKey(rawValue: normalized) else {
                    throw ConfigError(path: file.path, line: entry.line, message: unknownKeyMessage(name))
                }
                var text = entry.value.text
                if key == .umask, case .integer(let i) = entry.value {
                    text = String(String(i, radix: 8).reversed()).padding(toLength: 3, withPad: "0", startingAt: 0).reversed().map(String.init).joined()
                }
                // A relative file is relative to the config file (`~/…` is the user's home).
                if key == .tokenFile || key == .caFile, !text.hasPrefix("/"), !(key == .caFile && text.hasPrefix("~")) {
                    text = ((file.path as NSString).deletingLastPathComponent as NSString).appendingPathComponent(text)
                }
                settings.values[key] = Value(text: text, source: .file(file.path, line: entry.line))
            }
        }
        if let token = environment["STOWFS_TOKEN"], !token.isEmpty {
            settings.tokenFromEnvironment = token
        }
        for (key, text) in flags {
            // A CA file is read by the mount process, which may not share the shell's folder.
            let given = key == .caFile ? URL(fileURLWithPath: (text as NSString).expandingTildeInPath).standardizedFileURL.path : text
            settings.values[key] = Value(text: given, source: .flag(key.flag))
        }
        return settings
    }

    static func unknownKeyMessage(_ name: String) -> String {
        let known = SettingKey.allCases.map(\.rawValue)
        let close = known.min { distance($0, name) < distance($1, name) }!
        let hint = distance(close, name) <= 3 ? " — did you mean `\(close)`?" : ""
        return "`\(name)` is not a stowfs setting\(hint) (known: \(known.joined(separator: ", ")))"
    }

    /// Levenshtein distance, for "did you mean".
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var row = Array(0...b.count)
        for i in 1...max(1, a.count) where !a.isEmpty {
            var prev = row[0]
            row[0] = i
            for j in 1...max(1, b.count) where !b.isEmpty {
                let old = row[j]
                row[j] = min(row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] == b[j - 1] ? 0 : 1))
                prev = old
            }
        }
        return row[b.count]
    }

    public subscript(_ key: SettingKey) -> Value? { values[key] }

    private func problem(_ key: SettingKey, _ what: String, example: String) -> MountProblem {
        let v = values[key]!
        return MountProblem("\(key.rawValue) `\(v.text)` (from \(v.source)) \(what)", fix: "give it as e.g. \(key.rawValue) = \(example) in the config file, or \(key.flag) \(example)")
    }

    /// The token to use, and where it came from; nil with none given.
    public func token() throws(MountProblem) -> (value: String, source: String)? {
        if let file = values[.tokenFile], case .flag = file.source {
            return (try Self.readToken(file.text, source: file.source), file.source.description)
        }
        if let t = tokenFromEnvironment { return (t, "environment STOWFS_TOKEN") }
        if let file = values[.tokenFile] {
            return (try Self.readToken(file.text, source: file.source), "\(file.text) (token_file, \(file.source))")
        }
        return nil
    }

    static func readToken(_ path: String, source: SettingSource) throws(MountProblem) -> String {
        guard FileManager.default.fileExists(atPath: path) else {
            throw MountProblem("the token file \(path) (from \(source)) does not exist", fix: "write the token into it, or set STOWFS_TOKEN")
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw MountProblem("the token file \(path) (from \(source)) cannot be read", fix: "check its permissions (chmod 600, owned by the user who mounts)")
        }
        guard let line = text.split(separator: "\n").first(where: { !$0.trimmingCharacters(in: .whitespaces).isEmpty }) else {
            throw MountProblem("the token file \(path) (from \(source)) is empty", fix: "write the token on its first line")
        }
        return line.trimmingCharacters(in: .whitespaces)
    }

    /// The log level (checked).
    public func logLevel() throws(MountProblem) -> Logger.Level {
        guard let level = Logger.Level(rawValue: values[.logLevel]?.text.lowercased() ?? "info") else {
            throw problem(.logLevel, "is not a log level (trace, debug, info, notice, warning, error)", example: "info")
        }
        return level
    }

    /// Fills `options` from the settings, each value checked; the first bad one is the error.
    public func apply(to options: inout MountOptions) throws(MountProblem) {
        if let e = values[.endpoint] {
            guard e.text.hasPrefix("http://") || e.text.hasPrefix("https://"), URL(string: e.text)?.host != nil else {
                throw problem(.endpoint, "is not an http(s) URL", example: "http://127.0.0.1:8420")
            }
            options.endpoint = e.text
        }
        if let ca = values[.caFile] {
            let path = (ca.text as NSString).expandingTildeInPath
            do {
                try HTTPObjectStore.checkCAFile(path)
            } catch {
                throw MountProblem(
                    "ca_file: \(error.message) (from \(ca.source))",
                    fix: "give the PEM file of the certificate authority that signed the server's certificate: "
                        + "ca_file = \"/etc/stowfs/ca.pem\" in the config file, or --ca-file FILE")
            }
            options.caFile = path
        }
        options.token = try token()?.value
        if options.endpoint != nil && options.token == nil {
            throw MountProblem("no token for \(options.endpoint!)", fix: "set STOWFS_TOKEN, pass --token-file FILE, or set token_file in the config file")
        }
        options.cacheDirectory = values[.cacheDir].map { ($0.text as NSString).expandingTildeInPath }
        guard let size = values[.cacheSize].flatMap({ ByteSize.parse($0.text) }), size > 0 else {
            throw problem(.cacheSize, "is not a size", example: "2G")
        }
        options.cacheSize = size
        guard let ttl = values[.attrTTL].flatMap({ Double($0.text) }), ttl >= 0, ttl <= 86400 else {
            throw problem(.attrTTL, "is not a number of seconds (0 to 86400)", example: "5")
        }
        options.attributeTTL = ttl
        guard let parallel = values[.parallel].flatMap({ Int($0.text) }), (1...256).contains(parallel) else {
            throw problem(.parallel, "is not a count of uploads from 1 to 256", example: "8")
        }
        options.uploadParallelism = parallel
        for key in [SettingKey.uid, .gid] {
            guard let v = values[key] else { continue }
            guard let id = UInt32(v.text) else { throw problem(key, "is not a numeric id", example: "1000") }
            if key == .uid { options.uid = id } else { options.gid = id }
        }
        guard let mask = values[.umask].flatMap({ UInt32($0.text, radix: 8) }), mask <= 0o777 else {
            throw problem(.umask, "is not an octal mask", example: "\"022\"")
        }
        options.umask = mask
        guard let bw = values[.bwlimit].flatMap({ BandwidthLimits.parse($0.text) }) else {
            throw problem(.bwlimit, "is not RATE or UP:DOWN in bytes per second", example: "\"10M\" (or \"1M:10M\", or \"off\")")
        }
        options.bandwidth = bw
        if let m = values[.metrics] {
            guard MetricsServer.Address(m.text) != nil else {
                throw problem(.metrics, "is not HOST:PORT", example: "\"127.0.0.1:9560\"")
            }
            options.metricsAddress = m.text
        }
    }

    /// What `stowfs config check` prints: every setting, its value and where it came from.
    public func explanation() -> String {
        var lines = ["config files (first wins):"]
        for f in configFiles { lines.append("  \(f.path)  \(f.found ? "read" : "not present")") }
        lines.append("settings:")
        let width = SettingKey.allCases.map(\.rawValue.count).max()!
        for key in SettingKey.allCases {
            let name = key.rawValue.padding(toLength: width, withPad: " ", startingAt: 0)
            let (text, source) = values[key].map { ($0.text, $0.source.description) } ?? (key.defaultDescription, "default")
            lines.append("  \(name)  \(text.padding(toLength: max(text.count, 38), withPad: " ", startingAt: 0))  ← \(source)")
        }
        return lines.joined(separator: "\n")
    }
}
