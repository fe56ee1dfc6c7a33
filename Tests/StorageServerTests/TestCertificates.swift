import Foundation

/// A private certificate authority and a server certificate it signed for 127.0.0.1 (an IP
/// subject alternative name, no DNS name), made with `openssl` in `directory`; one for a DNS name
/// only; and a second CA that signed nothing here. EC P-256 keys: made in milliseconds.
/// (MountTests has the same helper: test targets share no code.)
struct TestCertificates {
    let directory: String
    /// The CA's certificate (`openssl req -x509`): what a client trusts with `--ca-file`.
    var caCertificate: String { directory + "/ca.pem" }
    /// The server's certificate, signed by the CA.
    var serverCertificate: String { directory + "/server.pem" }
    var serverKey: String { directory + "/server.key" }
    /// The same key's certificate for the DNS name `stowd.invalid` only: it does not name 127.0.0.1.
    var dnsOnlyCertificate: String { directory + "/server-dns.pem" }
    /// Another CA's certificate: a server certificate does not verify against it.
    var otherCACertificate: String { directory + "/other-ca.pem" }
    var otherCAKey: String { directory + "/other-ca.key" }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Makes the certificates in `directory` (created if missing).
    static func make(in directory: String) throws -> TestCertificates {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let certificates = TestCertificates(directory: directory)
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        for (name, subject) in [("ca", "/CN=StowFS test CA"), ("other-ca", "/CN=StowFS other test CA")] {
            try openssl(
                ["req", "-x509"] + key + [
                    "-keyout", "\(name).key", "-out", "\(name).pem", "-days", "2", "-subj", subject,
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                ], in: directory)
        }
        try openssl(["req"] + key + ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"], in: directory)
        try "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\nkeyUsage = digitalSignature\nextendedKeyUsage = serverAuth\n"
            .write(toFile: directory + "/server.ext", atomically: false, encoding: .utf8)
        try openssl(
            [
                "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
                "-extfile", "server.ext", "-out", "server.pem",
            ], in: directory)
        try "subjectAltName = DNS:stowd.invalid\nbasicConstraints = CA:FALSE\nkeyUsage = digitalSignature\nextendedKeyUsage = serverAuth\n"
            .write(toFile: directory + "/server-dns.ext", atomically: false, encoding: .utf8)
        try openssl(
            [
                "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
                "-extfile", "server-dns.ext", "-out", "server-dns.pem",
            ], in: directory)
        return certificates
    }

    private static func openssl(_ arguments: [String], in directory: String) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = arguments
        p.currentDirectoryURL = URL(fileURLWithPath: directory, isDirectory: true)
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try p.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw Failure(description: "openssl \(arguments.joined(separator: " ")) failed: \(text)") }
    }
}
