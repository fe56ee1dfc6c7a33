import Foundation
import StorageClient
import StorageProtocol
@testable import StorageServer
import Testing

/// Numbers from the network that once ended the process (arithmetic overflow): each must be
/// answered, and the server must go on answering. The systematic suite is `Tests/hostile`
/// (Python, against the stowd executable) and schemathesis; these are the regressions in Swift.
@Suite("hostile numbers do not crash stowd")
struct HostileInputTests {
    @Test("a Range ending at Int64.max on a public file")
    func rangeToInt64Max() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("public bytes".utf8), "pub.txt", options: UploadOptions(params: UploadParams(isPublic: true)))
            let cdn = Routes.cdn(testNamespace, path("pub.txt"))
            for (range, status, body) in [
                ("bytes=0-9223372036854775807", 206, "public bytes"), ("bytes=7-9223372036854775807", 206, "bytes"),
                ("bytes=9223372036854775807-", 416, nil), ("bytes=-9223372036854775807", 206, "public bytes"),
                ("bytes=0-9223372036854775808", 200, "public bytes"), ("bytes=+1-2", 200, "public bytes"),
            ] {
                let answer = try await s.raw.send("GET", cdn, token: nil, headers: [("Range", range)])
                #expect(answer.status == status, "\(range): \(answer.status)")
                if let body { #expect(answer.text == body, "\(range)") }
            }
            #expect(try await s.raw.send("GET", Routes.health).status == 200)
        }
    }

    @Test("a PATCH whose Content-Length is Int64.max after one byte arrived")
    func patchLengthInt64Max() async throws {
        try await withServer { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "big-claim", size: 2))
            _ = try await s.admin.send(session, from: .bytes(.init(string: "a")), offset: 0, end: 1, progress: nil)
            let link = URL(string: session.upload.url)!
            let target = link.path + "?" + (link.query ?? "")
            let request = Array("""
                PATCH \(target) HTTP/1.1\r
                Host: 127.0.0.1\r
                Tus-Resumable: 1.0.0\r
                Content-Type: application/offset+octet-stream\r
                Upload-Offset: 1\r
                Content-Length: 9223372036854775807\r
                \r
                b
                """.utf8)
            let answer = try await RawSocket.exchange(s.url, request, closeAfterSending: true, timeout: .seconds(60))
            #expect(RawSocket.status(answer) == 413, "\(String(decoding: answer, as: UTF8.self))")
            #expect(try await s.raw.send("GET", Routes.health).status == 200)
            #expect(try await s.admin.uploadedBytes(session) == 1)
        }
    }

    @Test("a PUT of Content-Length Int64.max to a deferred-length upload, and a tus creation whose body claims it: 413 before the body, the server alive")
    func bodyClaimsInt64Max() async throws {
        // On S3 the part size was picked from the claim, and the part buffer of ~900 TB trapped.
        try await withServer { s in
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "deferred-claim", size: 0, deferLength: true))
            let link = URL(string: session.upload.url)!
            let put = Array("PUT \(link.path)?\(link.query ?? "") HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 9223372036854775807\r\n\r\nx".utf8)
            let answer = try await RawSocket.exchange(s.url, put, closeAfterSending: true, timeout: .seconds(60))
            #expect(RawSocket.status(answer) == 413, "\(String(decoding: answer, as: UTF8.self))")
            let create = Array("""
                POST \(Routes.tusFiles) HTTP/1.1\r
                Host: 127.0.0.1\r
                Authorization: Bearer \(TestServer.adminToken)\r
                Tus-Resumable: 1.0.0\r
                Upload-Length: 10\r
                Upload-Metadata: namespace dGVzdA==,path Yi5iaW4=\r
                Content-Type: application/offset+octet-stream\r
                Content-Length: 9223372036854775807\r
                \r
                abc
                """.utf8)
            let created = try await RawSocket.exchange(s.url, create, closeAfterSending: true, timeout: .seconds(60))
            #expect(RawSocket.status(created) == 413, "\(String(decoding: created, as: UTF8.self))")
            #expect(try await s.raw.send("GET", Routes.health).status == 200)
        }
    }

    @Test("a tus creation with an Upload-Length past Int64.max or with a sign")
    func tusLength() async throws {
        try await withServer { s in
            for length in ["9223372036854775808", "-1", "+5", "1e3", ""] {
                let answer = try await s.raw.send(
                    "POST", Routes.tusFiles,
                    headers: [("Tus-Resumable", "1.0.0"), ("Upload-Length", length), ("Upload-Metadata", "namespace dGVzdA==,path YQ==")])
                #expect(answer.status == 400, "Upload-Length \(length): \(answer.status) \(answer.text)")
            }
        }
    }

    @Test("an internal error does not tell the client the server's paths")
    func internalErrorHidesPaths() throws {
        struct Leaky: Error, CustomStringConvertible { var description: String { "cannot open /var/lib/stowd/secret/thing" } }
        let api = APIError.from(Leaky())
        #expect(api.status.code == 500)
        #expect(!api.message.contains("/var/lib"), "\(api.message)")
        #expect(api.detail?.contains("/var/lib/stowd/secret/thing") == true)
    }

    @Test("/metrics can require an admin token, or be off")
    func metricsAccess() async throws {
        try await withServer(configure: { $0.metricsAccess = .admin }) { s in
            #expect(try await s.raw.send("GET", Routes.metrics, token: nil).status == 401)
            #expect(try await s.raw.send("GET", Routes.metrics, token: TestServer.writerToken).status == 403)
            let admin = try await s.raw.send("GET", Routes.metrics)
            #expect(admin.status == 200 && admin.text.contains("stowd_"))
        }
        try await withServer(configure: { $0.metricsAccess = .off }) { s in
            let answer = try await s.raw.send("GET", Routes.metrics)
            #expect(answer.status == 404)
        }
        try await withServer { s in
            let answer = try await s.raw.send("GET", Routes.metrics, token: nil)
            #expect(answer.status == 200)
        }
    }

    @Test("/metrics times each route in a histogram of its own, by its pattern; refused requests are counted too")
    func metricsPerRoute() async throws {
        try await withServer { s in
            _ = try await s.admin.put(randomBytes(1000, seed: 3), "m/one.bin")
            // Refused: a token that is not one (401), a route that does not exist (404).
            #expect(try await s.raw.send("GET", "/service/application/assets/v1.0/namespaces/\(testNamespace.name)/browse", token: "not-a-token").status == 401)
            #expect(try await s.raw.send("GET", "/no/such/route/\(UUID().uuidString)").status == 404)
            // Methods a client makes up never become labels (a series each would grow without bound).
            for made in ["FROB", "XYZZY\(Int.random(in: 0..<1000))"] { _ = try await s.raw.send(made, "/healthz") }
            let text = try await s.raw.send("GET", Routes.metrics).text
            let lines = text.split(separator: "\n").map(String.init)
            func count(_ prefix: String) -> Double? {
                lines.first { $0.hasPrefix(prefix) }.flatMap { Double($0.split(separator: " ").last ?? "") }
            }
            // The upload went through some POST route of a namespace (whichever the client picks).
            let counted = lines.filter { $0.hasPrefix(#"stowd_http_request_duration_seconds_count{method="POST",route="/service/application/assets/"#) && $0.contains("{ns}") }
            let first = try #require(counted.first, "\(text.prefix(3000))")
            #expect((Double(first.split(separator: " ").last ?? "") ?? 0) >= 1, "\(first)")
            let labels = first[first.firstIndex(of: "{")!..<first.lastIndex(of: "}")!]
            let buckets = lines.filter { $0.hasPrefix("stowd_http_request_duration_seconds_bucket" + labels + ",le=") }
            #expect(buckets.count == ServerMetrics.durationBuckets.count + 1, "\(labels): \(buckets)")
            #expect((count(#"stowd_http_requests_total{method="GET",route="/service/application/assets/v1.0/namespaces/{ns}/browse",status="401"}"#) ?? 0) >= 1, "\(text.prefix(3000))")
            // No route: one label for all such requests, whatever their path (Hummingbird names it NotFound).
            #expect(lines.contains { $0.hasPrefix(#"stowd_http_requests_total{method="GET",route="NotFound",status="404"}"#) }, "\(text.prefix(3000))")
            // No path a client sent becomes a label: the namespace's name and the file's are not there.
            #expect(!text.contains("m/one.bin") && !text.contains("no/such/route"))
            #expect(!text.contains("FROB") && !text.contains("XYZZY"), "\(text.prefix(3000))")
        }
    }

    @Test("a PUT racing the complete of its upload leaves no staging file behind")
    func putRacingComplete() async throws {
        try await withServer { s in
            for round in 0..<40 {
                let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "race\(round)", size: 1))
                _ = try await s.admin.send(session, from: .bytes(.init(string: "a")), offset: 0, end: 1, progress: nil)
                async let put = s.raw.send("PUT", session.upload.url, token: nil, body: Data("b".utf8))
                async let complete = s.raw.json("POST", Routes.completeUpload(testNamespace), session)
                let (p, c) = try await (put, complete)
                #expect([200, 409].contains(p.status) && [200, 409].contains(c.status), "PUT \(p.status) \(p.text), complete \(c.status) \(c.text)")
            }
            // Each upload is either completed (its staging file moved into place) or still open with its bytes.
            let open = try await s.raw.send("GET", Routes.browse(testNamespace) + "?limit=100").json(BrowseResponse.self).items.count
            let staged = try await s.stagedCount()
            #expect(staged == 40 - open, "\(staged) uploads staged, \(open) files published")
        }
    }
}
