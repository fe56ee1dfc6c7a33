import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import StorageServer
import Testing

/// https end to end: a private CA and a certificate for 127.0.0.1 made with openssl, stowd serving
/// with them, clients that trust the CA (and ones that do not).
@Suite("TLS")
struct TLSTests {
    /// Runs `body` with fresh certificates; removes them however it ends.
    func withCertificates(_ body: (TestCertificates) async throws -> Void) async throws {
        let dir = makeTempDirectory("tls")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try await body(try TestCertificates.make(in: dir))
    }

    /// Makes `config` an https server with the test certificate.
    static func https(_ certificates: TestCertificates) -> (inout ServerConfiguration) -> Void {
        { $0.tls = .init(certificateChain: certificates.serverCertificate, privateKey: certificates.serverKey) }
    }

    /// The client of `url` with `caFile`, shut down however `body` ends.
    func withClient(_ url: String, caFile: String?, _ body: (HTTPObjectStore) async throws -> Void) async throws {
        var c = HTTPObjectStore.Configuration(endpoint: url, token: TestServer.adminToken)
        c.caFile = caFile
        c.retry = RetryPolicy(attempts: 2, baseDelay: .milliseconds(20))
        try await withHTTPClient(c, body)
    }

    /// The StorageError a call throws (a test failure, and nil, when it throws none or another error).
    func storageError(_ call: () async throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) async -> StorageError? {
        do {
            try await call()
            Issue.record("the call succeeded", sourceLocation: sourceLocation)
        } catch let e as StorageError {
            return e
        } catch {
            Issue.record("not a StorageError: \(error)", sourceLocation: sourceLocation)
        }
        return nil
    }

    @Test("an https server: its URL and every link are https; a client with the CA file uploads and reads back through them")
    func roundTrip() async throws {
        try await withCertificates { certs in
            try await withServer(caFile: certs.caCertificate, configure: Self.https(certs)) { s in
                #expect(s.url.wholeMatch(of: /https:\/\/127\.0\.0\.1:\d+/) != nil, "\(s.url)")
                let written = try String(contentsOfFile: s.dataDirectory + "/stowd.url", encoding: .utf8)
                #expect(written == s.url + "\n")

                // Large enough for the three steps (start, the storage link, complete): the storage link is https.
                let big = randomBytes(300_000, seed: 7)
                let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "tls/big.bin", size: Int64(big.count)))
                #expect(session.upload.url.hasPrefix(s.url + "/"), "\(session.upload.url)")
                #expect(session.cdn.url.hasPrefix("https://"))
                let record = try await s.admin.resumeUpload(session, from: .bytes(ByteBuffer(bytes: big)), knownOffset: 0)
                #expect(record.cdn.url.hasPrefix(s.url + "/"), "\(record.cdn.url)")

                // A small file goes the direct way; both come back through https signed URLs.
                let small = randomBytes(1000, seed: 8)
                _ = try await s.admin.put(small, "tls/small.bin")
                let links = try await s.admin.signedURLs(testNamespace, [path("tls/big.bin"), path("tls/small.bin")], expiry: 60)
                for link in links { #expect(link.signedUrl.hasPrefix(s.url + "/"), "\(link.signedUrl)") }
                #expect(Array(try await s.admin.read(url: links[0].signedUrl, range: nil, ifMatch: nil).bytes.readableBytesView) == big)
                #expect(Array(try await s.admin.read(url: links[1].signedUrl, range: nil, ifMatch: nil).bytes.readableBytesView) == small)
                #expect(try await s.admin.get("tls/small.bin") == small)
                let ranged = try await s.admin.read(url: links[0].signedUrl, range: 1000..<5000, ifMatch: nil)
                #expect(Array(ranged.bytes.readableBytesView) == Array(big[1000..<5000]))

                // Raw: the tus Location header is https too.
                let meta = "namespace \(Data("test".utf8).base64EncodedString()),path \(Data("tls/tus.bin".utf8).base64EncodedString())"
                let created = try await s.raw.send("POST", "/tus/files", headers: [("Tus-Resumable", "1.0.0"), ("Upload-Length", "3"), ("Upload-Metadata", meta)])
                #expect(created.status == 201)
                #expect(created.header("Location")?.hasPrefix(s.url + "/") == true, "\(created.headers)")
            }
        }
    }

    @Test("a certificate that does not verify is refused with a clear error: no CA file, another CA, another name")
    func untrusted() async throws {
        try await withCertificates { certs in
            try await withServer(caFile: certs.caCertificate, configure: Self.https(certs)) { s in
                try await withClient(s.url, caFile: nil) { c in
                    let e = await storageError { _ = try await c.namespaces() }
                    #expect(e?.kind == .tlsFailure)
                    #expect(e?.isTransient == false)
                    #expect(e?.message.hasPrefix("the server's certificate does not verify against the system's trust store: ") == true, "\(String(describing: e))")
                    // Not retried, not read as a dropped connection.
                    #expect(e?.message.contains("cannot reach") == false)
                }
                try await withClient(s.url, caFile: certs.otherCACertificate) { c in
                    let e = await storageError { _ = try await c.namespaces() }
                    #expect(e?.kind == .tlsFailure)
                    #expect(
                        e?.message.hasPrefix("the server's certificate does not verify against the CA file \(certs.otherCACertificate): ") == true,
                        "\(String(describing: e))")
                }
                // A signed URL read is checked the same way.
                let url = try await s.admin.signedURLs(testNamespace, [path("nothing")], expiry: 60)[0].signedUrl
                try await withClient(s.url, caFile: nil) { c in
                    let e = await storageError { _ = try await c.read(url: url, range: 0..<10, ifMatch: nil, consume: { _ in }) }
                    #expect(e?.kind == .tlsFailure)
                }
            }
            // Signed by the trusted CA, but for another name than the one connected to.
            let dir = makeTempDirectory("tls-stowd")
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let server = try StowdProcess(dataDirectory: dir, extraArguments: ["--tls-cert", certs.dnsOnlyCertificate, "--tls-key", certs.serverKey])
            defer { _ = server.stop() }
            try await server.withClient(caFile: certs.caCertificate) { c in
                let e = await storageError { _ = try await c.namespaces() }
                #expect(e?.kind == .tlsFailure)
                #expect(
                    e?.message == "the server's certificate does not verify against the CA file \(certs.caCertificate): it is not made out to 127.0.0.1",
                    "\(String(describing: e))")
            }
        }
    }

    @Test("plain http to an https server is answered 400 saying to use https; https to a plain http server says it does not speak TLS")
    func wrongScheme() async throws {
        try await withCertificates { certs in
            try await withServer(caFile: certs.caCertificate, configure: Self.https(certs)) { s in
                let plain = "http://" + s.url.dropFirst("https://".count)
                try await withClient(plain, caFile: nil) { c in
                    let e = await storageError { _ = try await c.namespaces() }
                    #expect(e?.status == 400 && e?.code == .badRequest, "\(String(describing: e))")
                    #expect(e?.message.contains("this server speaks https only: use https://") == true, "\(String(describing: e))")
                }
                // The server still serves https after refusing plain http.
                #expect(try await s.admin.namespaces().contains { $0.name == "test" })
            }
            try await withServer { s in
                let secure = "https://" + s.url.dropFirst("http://".count)
                try await withClient(secure, caFile: certs.caCertificate) { c in
                    let e = await storageError { _ = try await c.namespaces() }
                    #expect(e?.kind == .tlsFailure)
                    #expect(e?.message.contains("does not speak TLS") == true, "\(String(describing: e))")
                }
            }
        }
    }

    @Test("certificate and key files that cannot serve stop the server at start, naming the file")
    func badFiles() async throws {
        try await withCertificates { certs in
            let data = makeTempDirectory("tls-data")
            defer { try? FileManager.default.removeItem(atPath: data) }
            let missing = certs.directory + "/missing.pem"
            let cases: [(ServerConfiguration.TLSFiles, String)] = [
                (.init(certificateChain: missing, privateKey: certs.serverKey), "the TLS certificate \(missing) does not exist"),
                (.init(certificateChain: certs.serverKey, privateKey: certs.serverKey), "the TLS certificate \(certs.serverKey) "),
                (.init(certificateChain: certs.serverCertificate, privateKey: certs.serverCertificate), "the TLS key \(certs.serverCertificate) is not"),
                (.init(certificateChain: certs.serverCertificate, privateKey: certs.otherCAKey), "does not go with the certificate \(certs.serverCertificate)"),
            ]
            for (files, words) in cases {
                var config = ServerConfiguration(dataDirectory: data, tokens: TokenStore())
                config.tls = files
                #expect {
                    _ = try StowServer(configuration: config)
                } throws: { e in
                    String(describing: e).contains(words)
                }
            }
        }
    }

    @Test("stowd --tls-cert --tls-key: the first line is https://127.0.0.1:PORT, and a client with the CA stores and reads a file")
    func executable() async throws {
        try await withCertificates { certs in
            let dir = makeTempDirectory("tls-stowd")
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let server = try StowdProcess(dataDirectory: dir, extraArguments: ["--tls-cert", certs.serverCertificate, "--tls-key", certs.serverKey])
            defer { _ = server.stop() }
            #expect(server.url.wholeMatch(of: /https:\/\/127\.0\.0\.1:\d+/) != nil, "\(server.url)")
            #expect(server.port > 0)
            try await server.withClient(caFile: certs.caCertificate) { c in
                let ns = try Namespace("tls")
                _ = try await c.createNamespace(ns)
                let bytes = randomBytes(200_000, seed: 9)
                let record = try await c.upload(.bytes(ByteBuffer(bytes: bytes)), size: Int64(bytes.count), to: ns, path("a.bin"))
                #expect(record.cdn.url.hasPrefix(server.url + "/"))
                let url = try await c.signedURLs(ns, [path("a.bin")], expiry: 60)[0].signedUrl
                #expect(url.hasPrefix(server.url + "/"))
                #expect(Array(try await c.read(url: url, range: nil, ifMatch: nil).bytes.readableBytesView) == bytes)
            }
            // Without the CA: refused.
            _ = try await server.withClient { c in
                await #expect(throws: StorageError.self) { _ = try await c.namespaces() }
            }
        }
    }

    @Test("stowd refuses --tls-cert without --tls-key")
    func certificateNeedsKey() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: StowdProcess.binDirectory + "/stowd")
        p.arguments = ["--data-dir", "/nonexistent", "--tls-cert", "/nonexistent/cert.pem"]
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus != 0)
        #expect(text.contains("--tls-cert and --tls-key go together"), "\(text)")
    }
}
