import Foundation
import StorageServer
import Testing

/// The SigV4 signer, checked against botocore (the AWS SDK for Python, which signs for the AWS
/// CLI) on the same inputs at a fixed moment, and against AWS's documented example key derivation.
@Suite("SigV4 signer")
struct SigV4Tests {
    static let accessKey = "AKIDEXAMPLE"
    static let secretKey = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
    /// 2013-05-24T00:00:00Z, the moment of AWS's S3 SigV4 examples.
    static let moment = Date(timeIntervalSince1970: 1_369_353_600)

    /// botocore's answer for the same request (`make test` installs botocore, pinned in
    /// Tests/hostile/requirements.txt; its absence fails the test rather than skipping it).
    static func botocore(_ script: String) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", "-c", """
            import datetime, sys
            from unittest import mock
            try:
                import botocore.auth
                from botocore.awsrequest import AWSRequest
                from botocore.credentials import Credentials
            except ImportError:
                print("NO-BOTOCORE"); sys.exit(0)
            creds = Credentials('\(accessKey)', '\(secretKey)', token=None)
            moment = datetime.datetime(2013, 5, 24, tzinfo=datetime.timezone.utc)
            with mock.patch('botocore.auth.get_current_datetime', return_value=moment):
            \(script.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n"))
            """]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if text == "NO-BOTOCORE" { throw SigV4Failure(description: "botocore is not installed: python3 -m pip install -r Tests/hostile/requirements.txt") }
        guard p.terminationStatus == 0 else { throw SigV4Failure(description: text) }
        return text
    }

    struct SigV4Failure: Error, CustomStringConvertible { var description: String }

    @Test("presigned GET and PUT URLs are botocore's, byte for byte", arguments: [
        ("GET", "http://127.0.0.1:8333", "/bucket/test.txt", [(String, String)]()),
        ("PUT", "http://127.0.0.1:8333", "/bucket/photos/a b+c%d ü.jpg", []),
        ("PUT", "https://s3.example.com", "/bucket/big.bin", [("partNumber", "3"), ("uploadId", "VXBsb2FkIElE/==")]),
    ])
    func presigned(_ method: String, _ endpoint: String, _ path: String, _ query: [(String, String)]) throws {
        let signer = SigV4(accessKey: Self.accessKey, secretKey: Self.secretKey, region: "us-east-1")
        let mine = signer.presignedURL(method: method, endpoint: endpoint, path: path, query: query, expires: 3600, now: Self.moment)
        let queryText = query.map { "('\($0.0)', '\($0.1)')" }.joined(separator: ", ")
        let theirs = try Self.botocore("""
            import urllib.parse
            url = '\(endpoint)' + urllib.parse.quote('\(path)', safe='/~') + ('?' + urllib.parse.urlencode([\(queryText)]) if [\(queryText)] else '')
            req = AWSRequest(method='\(method)', url=url)
            botocore.auth.S3SigV4QueryAuth(creds, 's3', 'us-east-1', expires=3600).add_auth(req)
            print(req.url)
            """)
        #expect(theirs.contains("X-Amz-Signature="), "\(theirs)")
        // Same signature, same query items (botocore may order the query differently).
        func items(_ url: String) -> [String: String] {
            let query = url.split(separator: "?", maxSplits: 1).last.map(String.init) ?? ""
            return Dictionary(uniqueKeysWithValues: query.split(separator: "&").map { pair in
                let kv = pair.split(separator: "=", maxSplits: 1).map(String.init)
                return (kv[0], kv.count > 1 ? kv[1] : "")
            })
        }
        #expect(items(mine) == items(theirs), "mine:   \(mine)\ntheirs: \(theirs)")
        #expect(mine.split(separator: "?")[0] == theirs.split(separator: "?")[0])
    }

    @Test("a header-signed PUT carries botocore's Authorization")
    func headerSigned() throws {
        let signer = SigV4(accessKey: Self.accessKey, secretKey: Self.secretKey, region: "us-east-1")
        let body = Array("Welcome to Amazon S3.".utf8)
        let headers = signer.signedHeaders(
            method: "PUT", endpoint: "http://127.0.0.1:8333", path: "/examplebucket/test$file.text", payloadHash: SigV4.sha256Hex(body), now: Self.moment)
        let mine = headers.first { $0.0 == "Authorization" }?.1 ?? ""
        let theirs = try Self.botocore("""
            import hashlib
            body = b'Welcome to Amazon S3.'
            req = AWSRequest(method='PUT', url='http://127.0.0.1:8333/examplebucket/test%24file.text', data=body)
            req.headers['X-Amz-Content-SHA256'] = hashlib.sha256(body).hexdigest()
            botocore.auth.S3SigV4Auth(creds, 's3', 'us-east-1').add_auth(req)
            print(req.headers['Authorization'])
            """)
        #expect(theirs.hasPrefix("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20130524/us-east-1/s3/aws4_request"), "\(theirs)")
        #expect(mine == theirs)
    }

    @Test("names and values are percent-encoded as SigV4 wants")
    func encoding() {
        #expect(SigV4.encode("a b/ü~.-_") == "a%20b%2F%C3%BC~.-_")
        #expect(SigV4.encode("a b/c", keepSlash: true) == "a%20b/c")
        #expect(SigV4.encode("+=&%") == "%2B%3D%26%25")
    }
}
