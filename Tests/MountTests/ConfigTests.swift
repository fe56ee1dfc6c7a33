import Foundation
import MountService
import Testing

@Suite("Config files and settings")
struct ConfigTests {
    @Test("the TOML subset: strings, numbers, booleans, comments; the rest refused with its line")
    func parsing() throws {
        let f = try ConfigFile.parse(
            """
            # stowfs
            endpoint = "http://host:8420"   # a comment
            token_file = '/etc/stowfs/token'
            parallel = 1_6
            umask = 0o027
            attr_ttl = 2.5
            flag = true
            escaped = "a\\"b\\u00e9"
            """, path: "c.toml")
        #expect(f.entries["endpoint"]?.value == .string("http://host:8420"))
        #expect(f.entries["token_file"]?.value == .string("/etc/stowfs/token"))
        #expect(f.entries["parallel"]?.value == .integer(16))
        #expect(f.entries["umask"]?.value == .integer(0o27))
        #expect(f.entries["attr_ttl"]?.value == .float(2.5))
        #expect(f.entries["flag"]?.value == .bool(true))
        #expect(f.entries["escaped"]?.value == .string("a\"bé"))
        #expect(f.entries["endpoint"]?.line == 2)

        let bad: [(String, Int, String)] = [
            ("[mount]", 1, "tables"),
            ("a = \"open", 1, "not closed"),
            ("\n\nsize = 2G", 3, "quote strings"),
            ("a = 1\na = 2", 2, "set twice"),
            ("a = [1, 2]", 1, "arrays"),
            ("just words", 1, "key = value"),
            ("umask = 022", 1, "quote strings"),
            ("a = 1 2", 1, "unexpected"),
        ]
        for (text, line, words) in bad {
            #expect {
                _ = try ConfigFile.parse(text, path: "c.toml")
            } throws: { e in
                let e = e as! ConfigError
                return e.line == line && e.description.contains(words)
            }
        }
    }

    @Test("flags override the user's file, which overrides /etc's; each value says where it came from")
    func precedence() throws {
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-config-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir + "/xdg/stowfs", withIntermediateDirectories: true)
        try "cache_size = \"1G\"\nparallel = 4\ntoken_file = \"token\"\n".write(toFile: dir + "/xdg/stowfs/config.toml", atomically: false, encoding: .utf8)
        try "endpoint = \"http://system:1\"\ncache_size = \"9G\"\nattr_ttl = 30\n".write(toFile: dir + "/system.toml", atomically: false, encoding: .utf8)
        try "  secret-from-file \n".write(toFile: dir + "/xdg/stowfs/token", atomically: false, encoding: .utf8)

        let env = ["XDG_CONFIG_HOME": dir + "/xdg"]
        let s = try ResolvedSettings.resolve(flags: [.attrTTL: "1"], environment: env, systemConfigPath: dir + "/system.toml")
        #expect(s[.endpoint] == .init(text: "http://system:1", source: .file(dir + "/system.toml", line: 1)))
        #expect(s[.cacheSize] == .init(text: "1G", source: .file(dir + "/xdg/stowfs/config.toml", line: 1)))
        #expect(s[.attrTTL] == .init(text: "1", source: .flag("--attr-ttl")))
        #expect(s[.logLevel] == .init(text: "info", source: .builtIn))
        // A relative token_file is relative to its config file.
        #expect(try s.token()?.value == "secret-from-file")
        var o = MountOptions(namespace: nil, mountpoint: "/m")
        try s.apply(to: &o)
        #expect(o.cacheSize == 1 << 30 && o.uploadParallelism == 4 && o.attributeTTL == 1 && o.endpoint == "http://system:1")
        #expect(s.explanation().contains("cache_size"))

        // The secret from the environment beats a token_file from a config file; a --token-file flag beats both.
        let withEnv = try ResolvedSettings.resolve(flags: [:], environment: env.merging(["STOWFS_TOKEN": "from-env"]) { $1 }, systemConfigPath: dir + "/system.toml")
        #expect(try withEnv.token()?.value == "from-env")
        let withFlag = try ResolvedSettings.resolve(
            flags: [.tokenFile: dir + "/xdg/stowfs/token"], environment: env.merging(["STOWFS_TOKEN": "from-env"]) { $1 }, systemConfigPath: dir + "/system.toml")
        #expect(try withFlag.token()?.value == "secret-from-file")

        // --config replaces both files.
        let only = try ResolvedSettings.resolve(flags: [:], environment: env, configPath: dir + "/system.toml", systemConfigPath: "/nonexistent")
        #expect(only[.cacheSize]?.text == "9G" && only[.parallel]?.source == .builtIn)
    }

    @Test("ca_file: relative to its config file, a flag's made absolute, checked to hold a certificate, and passed to the mount")
    func caFile() throws {
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-config-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let certs = try TestCertificates.make(in: dir + "/conf/tls")
        let path = dir + "/conf/c.toml"
        try "endpoint = \"https://127.0.0.1:8420\"\nca_file = \"tls/ca.pem\"\n".write(toFile: path, atomically: false, encoding: .utf8)
        let env = ["STOWFS_TOKEN": "t"]
        let s = try ResolvedSettings.resolve(flags: [:], environment: env, configPath: path)
        #expect(s[.caFile] == .init(text: certs.caCertificate, source: .file(path, line: 2)))
        var o = MountOptions(namespace: nil, mountpoint: "/m")
        try s.apply(to: &o)
        #expect(o.caFile == certs.caCertificate)
        #expect(s.explanation().contains("ca_file"))

        // A flag beats the file; a relative flag is relative to the working folder, made absolute.
        let flag = try ResolvedSettings.resolve(flags: [.caFile: "ca.pem"], environment: env, configPath: path)
        #expect(flag[.caFile] == .init(text: FileManager.default.currentDirectoryPath + "/ca.pem", source: .flag("--ca-file")))

        // None given: the system's trust store.
        try "endpoint = \"https://127.0.0.1:8420\"\n".write(toFile: path, atomically: false, encoding: .utf8)
        var none = MountOptions(namespace: nil, mountpoint: "/m")
        try ResolvedSettings.resolve(flags: [:], environment: env, configPath: path).apply(to: &none)
        #expect(none.caFile == nil)

        for (file, words) in [("tls/missing.pem", "does not exist"), ("tls/server.key", "holds no PEM certificate")] {
            try "ca_file = \"\(file)\"\n".write(toFile: path, atomically: false, encoding: .utf8)
            var bad = MountOptions(namespace: nil, mountpoint: "/m")
            #expect {
                try ResolvedSettings.resolve(flags: [:], environment: env, configPath: path).apply(to: &bad)
            } throws: { e in
                let d = String(describing: e)
                return d.contains("ca_file: the CA file \(dir)/conf/\(file) \(words)") && d.contains("\(path) line 1") && d.contains("→")
            }
        }
    }

    @Test("a bad value or an unknown key is named with its file and line, and what to write instead")
    func badValues() throws {
        let dir = FileManager.default.temporaryDirectory.path + "/stowfs-config-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let path = dir + "/c.toml"
        func settings(_ text: String) throws -> ResolvedSettings {
            try text.write(toFile: path, atomically: false, encoding: .utf8)
            return try ResolvedSettings.resolve(flags: [:], environment: [:], configPath: path)
        }
        #expect {
            _ = try settings("parallel = 2\ncache_sise = \"1G\"")
        } throws: { e in
            let e = e as! ConfigError
            return e.line == 2 && e.description.contains("did you mean `cache_size`")
        }
        let cases: [(String, String)] = [
            ("cache_size = \"lots\"", "cache_size `lots`"),
            ("parallel = 0", "parallel `0`"),
            ("endpoint = \"host:8420\"", "not an http(s) URL"),
            ("umask = \"999\"", "octal"),
            ("token_file = \"/nonexistent/token\"\nendpoint = \"http://h:1\"", "does not exist"),
            ("uid = \"bob\"", "numeric id"),
            ("metrics = \"localhost\"", "not HOST:PORT"),
            ("metrics = \"127.0.0.1:70000\"", "not HOST:PORT"),
            ("metrics = \"[::1]9560\"", "not HOST:PORT"),
            ("metrics = \":9560\"", "not HOST:PORT"),
        ]
        for (text, words) in cases {
            let s = try settings(text)
            var o = MountOptions(namespace: nil, mountpoint: "/m")
            #expect {
                try s.apply(to: &o)
            } throws: { e in
                let d = String(describing: e)
                return d.contains(words) && d.contains(path) && d.contains("→")
            }
        }
        // Good addresses: HOST:PORT, [IPv6]:PORT, a bare port (on loopback); an integer in TOML too.
        for text in ["metrics = \"127.0.0.1:9560\"", "metrics = \"[::1]:9560\"", "metrics = 9560", "metrics = \"0.0.0.0:0\""] {
            var o = MountOptions(namespace: nil, mountpoint: "/m")
            try settings(text).apply(to: &o)
            #expect(o.metricsAddress != nil, "\(text)")
        }
        #expect(throws: ConfigError(path: dir + "/missing.toml", line: nil, message: "does not exist")) {
            _ = try ResolvedSettings.resolve(flags: [:], environment: [:], configPath: dir + "/missing.toml")
        }
    }
}
