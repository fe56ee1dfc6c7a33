import Crypto
import Foundation
import NIOCore
import StorageClient
import StorageProtocol
import Testing

/// `params.zeros_from`: a tail of zeros declared, not sent (a file extended by truncate).
@Suite("uploads with a declared tail of zeros")
struct SparseUploadTests {
    @Test("only the bytes before zeros_from are sent; the file reads back whole; a hole on disk; a large tail is not hashed")
    func declaredZeros() async throws {
        try await withServer { s in
            let size: Int64 = 256 << 20
            let record = try await s.admin.upload(
                .bytes(ByteBuffer(string: "data")), size: size, to: testNamespace, path("sparse"),
                options: UploadOptions(params: UploadParams(zerosFrom: 4)))
            #expect(record.size == size)
            #expect(record.sha256 == nil)
            let url = try await s.admin.signedURLs(testNamespace, [path("sparse")], expiry: 60)[0].signedUrl
            #expect(Array(try await s.admin.read(url: url, range: 0..<6, ifMatch: nil).bytes.readableBytesView) == Array("data".utf8) + [0, 0])
            #expect(Array(try await s.admin.read(url: url, range: (size - 3)..<size, ifMatch: nil).bytes.readableBytesView) == [0, 0, 0])
            #expect(try await s.blobCount() == 1)
            // A local folder keeps the tail as a hole; S3 has no holes (the zeros are stored).
            if !TestBackend.isS3 {
                let blob = try #require(FileManager.default.enumerator(atPath: s.dataDirectory + "/blobs")?.allObjects.compactMap { $0 as? String }.first { $0.count > 10 })
                let attributes = try URL(fileURLWithPath: s.dataDirectory + "/blobs/" + blob).resourceValues(forKeys: [.totalFileAllocatedSizeKey])
                #expect((attributes.totalFileAllocatedSize ?? .max) < 1 << 20, "the zeros were written")
            }
            // A small tail is hashed: the record's SHA-256 is the whole content's.
            let small = try await s.admin.upload(
                .bytes(ByteBuffer(string: "ab")), size: 5, to: testNamespace, path("small"), options: UploadOptions(params: UploadParams(zerosFrom: 2)))
            #expect(small.sha256 == SHA256.hash(data: Data([0x61, 0x62, 0, 0, 0])).map { String(format: "%02x", $0) }.joined())
            #expect(try await s.admin.get("small") == [0x61, 0x62, 0, 0, 0])
        }
    }

    @Test("zeros_from past the size, or with a deferred length, is refused; bytes past zeros_from are refused")
    func refused() async throws {
        try await withServer { s in
            let past = try await s.raw.json("POST", Routes.startUpload(testNamespace), StartUploadRequest(fileName: "a", size: 3, params: UploadParams(zerosFrom: 4)))
            #expect(past.status == 400)
            let deferred = try await s.raw.json(
                "POST", Routes.startUpload(testNamespace), StartUploadRequest(fileName: "b", size: 0, params: UploadParams(zerosFrom: 0), deferLength: true))
            #expect(deferred.status == 400)
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "c", size: 10, params: UploadParams(zerosFrom: 2)))
            let tooMuch = try await s.raw.send("PUT", session.upload.url, token: nil, body: Data("abc".utf8))
            #expect(tooMuch.status == 400 || tooMuch.status == 413, "\(tooMuch.status) \(tooMuch.text)")
        }
    }
}
