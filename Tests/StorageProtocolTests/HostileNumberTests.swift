import Foundation
import StorageProtocol
import Testing

/// Every number from the network can overflow: a server's answer with a number no server can
/// mean is refused as it is read (a decoding error, which a client answers as a protocol
/// violation), where a mount would otherwise trap on it later (`UInt64(-1)`, `end - start + 1`,
/// a division by a part size of 0), taking every file written and not yet stored with it.
@Suite("numbers no server can mean")
struct HostileNumberTests {
    static let record = FileRecord(
        id: FileRecord.id(inode: 42), fileName: "a.txt", filePath: "d/a.txt", contentType: "text/plain", namespace: "ns", size: 5,
        cdn: CDNLink(url: "u", absoluteUrl: "a", relativeUrl: "r"), tags: ["t"], createdOn: "2026-01-02T03:04:05.678Z",
        modifiedOn: "2026-01-02T03:04:05.678Z", etag: "e", sha256: nil, metadata: ["k": "v"], isPublic: false, kind: .file, inode: 42, mode: 0o644,
        uid: 1000, gid: 1000, nlink: 1, atimeNs: 1, mtimeNs: 2, ctimeNs: 3)

    static let posix = PosixRecord(seed: record)

    /// `json` with the number of `key` replaced by `value`.
    static func with(_ json: Data, _ key: String, _ value: String) -> Data {
        let text = String(decoding: json, as: UTF8.self)
        let pattern = try! Regex(#""\#(key)":-?[0-9]+"#)
        #expect(text.contains(pattern), "\(key) in \(text)")
        return Data(text.replacing(pattern, with: #""\#(key)":\#(value)"#).utf8)
    }

    static func page(_ record: Data) -> Data {
        Data((#"{"items":["# + String(decoding: record, as: UTF8.self) + #"],"folders":[],"page":{"type":"cursor","current":1,"size":1000,"item_total":1,"has_next":false,"next_id":null}}"#).utf8)
    }

    static let refused: [(key: String, value: String)] = [
        ("size", "-1"), ("size", "-9223372036854775808"), ("size", "9223372036854775807"), ("size", "\(RecordNumbers.largestSize + 1)"),
        ("inode", "0"),
    ]

    @Test("a record with a negative size, a size past 4 EiB or inode 0 is refused, by JSONDecoder and by the hand reader alike, alone and in a page")
    func refusedRecords() throws {
        let seed = WireJSON.encode(Self.record)
        let posix = WireJSON.encode(Self.posix)
        for (key, value) in Self.refused {
            let one = Self.with(seed, key, value)
            #expect(throws: DecodingError.self, "\(key): \(value)") { try JSONDecoder().decode(FileRecord.self, from: one) }
            #expect(one.withUnsafeBytes { WireJSONReading.fileRecord($0) } == nil, "\(key): \(value)")
            let page = Self.page(one)
            #expect(throws: DecodingError.self, "\(key): \(value)") { try JSONDecoder().decode(BrowseResponse.self, from: page) }
            #expect(page.withUnsafeBytes { WireJSONReading.browse($0) } == nil, "\(key): \(value)")
            let search = Data(#"{"items":[\#(String(decoding: one, as: UTF8.self))],"next_cursor":null}"#.utf8)
            #expect(throws: DecodingError.self, "\(key): \(value)") { try JSONDecoder().decode(SearchResponse.self, from: search) }
            #expect(search.withUnsafeBytes { WireJSONReading.search($0) } == nil, "\(key): \(value)")
            let batch = Data(#"{"results":[{"file":\#(String(decoding: one, as: UTF8.self))}]}"#.utf8)
            #expect(throws: DecodingError.self, "\(key): \(value)") { try JSONDecoder().decode(BatchUpload.Response.self, from: batch) }
            #expect(batch.withUnsafeBytes { WireJSONReading.batchResponse($0) } == nil, "\(key): \(value)")

            let posixPage = Self.page(Self.with(posix, key, value))
            #expect(throws: DecodingError.self, "\(key): \(value)") { try JSONDecoder().decode(PosixBrowseResponse.self, from: posixPage) }
            #expect(posixPage.withUnsafeBytes { WireJSONReading.posixBrowse($0) } == nil, "\(key): \(value)")
        }
    }

    @Test("the other numbers of a record are taken as they are, at their edges: link count 0, times of 1677 and 2262, any mode or device")
    func takenRecords() throws {
        let seed = WireJSON.encode(Self.record)
        let posix = WireJSON.encode(Self.posix)
        let edges: [(String, String)] = [
            ("size", "0"), ("size", "\(RecordNumbers.largestSize)"), ("inode", "1"), ("inode", "18446744073709551615"), ("nlink", "0"),
            ("nlink", "4294967295"), ("mtime_ns", "-9223372036854775808"), ("atime_ns", "9223372036854775807"), ("ctime_ns", "-1"),
            ("mode", "4294967295"), ("uid", "4294967295"),
        ]
        for (key, value) in edges {
            let one = Self.with(seed, key, value)
            let decoded = try JSONDecoder().decode(FileRecord.self, from: one)
            #expect(one.withUnsafeBytes { WireJSONReading.fileRecord($0) } == decoded, "\(key): \(value)")
            #expect(WireJSON.encode(decoded) == one, "\(key): \(value)")
            let page = Self.page(Self.with(posix, key, value))
            let decodedPage = try JSONDecoder().decode(PosixBrowseResponse.self, from: page)
            #expect(page.withUnsafeBytes { WireJSONReading.posixBrowse($0) } == decodedPage, "\(key): \(value)")
        }
    }

    @Test("a seed record created before 1677 or after 2262: its posix record's birth time is its ctime, not a trap")
    func birthTimeOutOfRange() {
        var r = Self.record
        for created in ["9999-12-31T23:59:59.999Z", "2262-04-12T00:00:00.000Z", "1600-01-01T00:00:00.000Z", "0001-01-01T00:00:00.000Z"] {
            r.createdOn = created
            #expect(PosixRecord(seed: r).btimeNs == r.ctimeNs, "\(created)")
        }
        r.createdOn = "2262-04-11T00:00:00.000Z"
        #expect(PosixRecord(seed: r).btimeNs == 9_223_286_400_000_000_000)
        r.createdOn = "1677-09-22T00:00:00.000Z"
        #expect(PosixRecord(seed: r).btimeNs == -9_223_286_400_000_000_000)
    }

    @Test("a lock answer whose conflict ends before it starts is refused; any other range is taken")
    func lockAnswers() throws {
        func answer(start: String, end: String) -> Data {
            Data(#"{"granted":false,"conflict":{"session":"s","owner":1,"type":"write","start":\#(start),"end":\#(end),"pid":7}}"#.utf8)
        }
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(LockResponse.self, from: answer(start: "10", end: "9")) }
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(LockResponse.self, from: answer(start: "18446744073709551615", end: "0")) }
        for (start, end) in [("0", "0"), ("9", "10"), ("0", "18446744073709551615"), ("18446744073709551615", "18446744073709551615")] {
            let conflict = try #require(try JSONDecoder().decode(LockResponse.self, from: answer(start: start, end: end)).conflict)
            #expect(conflict.start == UInt64(start) && conflict.end == UInt64(end))
        }
        let granted = LockResponse(granted: true, fence: "c1.0", changes: [], cursor: "c1.0", etag: "e")
        #expect(try JSONDecoder().decode(LockResponse.self, from: WireJSON.encode(granted)) == granted)
    }

    @Test("an answer of upload/parts with a part size or part a client cannot compute offsets from is refused")
    func partAnswers() throws {
        func answer(partSize: String = "8388608", number: String = "2", size: String = "8388608", storedNumber: String = "1") -> Data {
            Data(#"{"part_size":\#(partSize),"parts":[{"number":\#(number),"url":"u","size":\#(size)}],"stored":[{"number":\#(storedNumber),"size":8388608}]}"#.utf8)
        }
        let fine = try JSONDecoder().decode(UploadPartsResponse.self, from: answer())
        #expect(fine == UploadPartsResponse(partSize: 8 << 20, parts: [.init(number: 2, url: "u", size: 8 << 20)], stored: [.init(number: 1, url: nil, size: 8 << 20)]))
        _ = try JSONDecoder().decode(UploadPartsResponse.self, from: answer(partSize: "\(DirectUpload.largestPart)", number: "10000", size: "0"))
        for bad in [
            answer(partSize: "0"), answer(partSize: "-1"), answer(partSize: "9223372036854775807"), answer(partSize: "\(DirectUpload.largestPart + 1)"),
            answer(number: "0"), answer(number: "-1"), answer(number: "-9223372036854775808"), answer(number: "10001"), answer(size: "-1"),
            answer(size: "9223372036854775807"), answer(storedNumber: "0"), answer(storedNumber: "9223372036854775807"),
        ] {
            #expect(throws: DecodingError.self, "\(String(decoding: bad, as: UTF8.self))") { try JSONDecoder().decode(UploadPartsResponse.self, from: bad) }
        }
    }
}
