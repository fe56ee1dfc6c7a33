import Foundation
import Testing

/// Mounts of an https stowd: a private CA and a certificate for 127.0.0.1 made with openssl.
@Suite("mount: https with a private CA", .serialized)
struct TLSMountTests {
    /// A MountedFS whose stowd serves https with fresh test certificates (in its root, removed with it).
    static func httpsServer(_ m: MountedFS) throws -> TestCertificates {
        let certs = try TestCertificates.make(in: m.root + "/tls")
        try m.startServer(extraArguments: ["--tls-cert", certs.serverCertificate, "--tls-key", certs.serverKey], caFile: certs.caCertificate)
        return certs
    }

    @Test("--ca-file: files written are stored over https and read back after a remount with an empty cache")
    func mountWithCA() async throws {
        let m = MountedFS()
        defer { m.cleanup() }
        let certs = try Self.httpsServer(m)
        #expect(m.endpoint.hasPrefix("https://127.0.0.1:"), "\(m.endpoint)")
        do {
            try m.mountFS(extra: ["--ca-file", certs.caCertificate])
            try m.sh("head -c 1500000 /dev/urandom > a.bin && echo small > s.txt && mkdir -p \(m.mountpoint)/d && cp a.bin s.txt \(m.mountpoint)/d/")
            try m.unmountFS()
            // Stored: the server has the bytes (read through an https signed URL).
            #expect(try await m.storedSHA256("d/a.bin") == (try m.sh("sha256sum a.bin | cut -d' ' -f1")))
            #expect(try await m.storedBytes("d/s.txt") == Array("small\n".utf8))
            // Nothing local left: the remount reads from the server.
            try FileManager.default.removeItem(atPath: m.cacheDirectory)
            try m.mountFS(extra: ["--ca-file", certs.caCertificate])
            try m.sh("cmp a.bin \(m.mountpoint)/d/a.bin && cmp s.txt \(m.mountpoint)/d/s.txt")
            try m.unmountFS()
        } catch {
            Issue.record("stowfs log:\n\(m.logText)")
            throw error
        }
    }

    @Test("without the CA, mount and config check refuse with the certificate error and the fix; ca_file in a config file is relative to it")
    func refusedWithoutCA() async throws {
        let m = MountedFS()
        defer { m.cleanup() }
        let certs = try Self.httpsServer(m)
        let stowfs = MountedFS.binDirectory + "/stowfs"
        let empty = m.root + "/empty.toml"
        try "".write(toFile: empty, atomically: false, encoding: .utf8)

        let mount = try m.run(
            stowfs, ["mount", "test", m.mountpoint, "--endpoint", m.endpoint, "--config", empty, "--cache-dir", m.cacheDirectory, "--create", "--foreground"])
        #expect(mount.status != 0)
        #expect(mount.out.contains("cannot connect to the server at \(m.endpoint) securely: the server's certificate does not verify against the system's trust store: "), "\(mount.out)")
        #expect(mount.out.contains("--ca-file FILE"), "\(mount.out)")
        #expect(!MountedFS.isMounted(m.mountpoint))

        let check = try m.run(stowfs, ["config", "check", "--config", empty, "--endpoint", m.endpoint])
        #expect(check.status != 0)
        #expect(check.out.contains("✗ cannot connect to the server at \(m.endpoint) securely: the server's certificate does not verify"), "\(check.out)")

        // The same, with the CA from a config file (a relative path: relative to the file).
        let config = m.root + "/stowfs.toml"
        try "endpoint = \"\(m.endpoint)\"\nca_file = \"tls/ca.pem\"\n".write(toFile: config, atomically: false, encoding: .utf8)
        let ok = try m.run(stowfs, ["config", "check", "--config", config])
        #expect(ok.status == 0, "\(ok.out)")
        #expect(ok.out.contains("ca_file"), "\(ok.out)")
        #expect(ok.out.contains("✓ the server's certificate verifies against the CA file \(certs.caCertificate)"), "\(ok.out)")

        // A CA file that holds no certificate is named, with the line that gave it.
        try "endpoint = \"\(m.endpoint)\"\nca_file = \"tls/server.key\"\n".write(toFile: config, atomically: false, encoding: .utf8)
        let bad = try m.run(stowfs, ["config", "check", "--config", config])
        #expect(bad.status != 0)
        #expect(bad.out.contains("ca_file: the CA file \(m.root)/tls/server.key holds no PEM certificate"), "\(bad.out)")
        #expect(bad.out.contains("\(config) line 2"), "\(bad.out)")
    }
}
