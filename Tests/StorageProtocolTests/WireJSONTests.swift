import Foundation
import StorageProtocol
import Testing

/// The hand-written JSON of listings and searches must be JSONEncoder's, byte for byte: clients
/// written against the seed's API (and the OpenAPI tests) see one format.
@Suite("the wire JSON writer")
struct WireJSONWriterTests {
    /// A small deterministic generator (SplitMix64), so that a failure can be run again.
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Pieces chosen to be awkward: escapes, slashes, every kind of control character, DEL,
    /// combining marks, characters outside the BMP, U+2028, and keys whose order differs between
    /// UTF-8 and UTF-16 (U+FB00 against U+1F600).
    static let pieces = [
        "a", "Z", "0", " ", "\"", "\\", "/", "//", "\n", "\r", "\t", "\u{8}", "\u{c}", "\u{0}", "\u{1}", "\u{f}", "\u{10}", "\u{1f}",
        "\u{7f}", "é", "e\u{301}", "😀", "\u{2028}", "\u{FB00}", "\u{FFFD}", "\u{10FFFF}", "日本", "_", "~", "%2F", "<>&'",
    ]

    static func text(_ g: inout Seeded, max: Int = 6) -> String {
        (0..<Int.random(in: 0...max, using: &g)).map { _ in pieces.randomElement(using: &g)! }.joined()
    }

    /// A record any server could send: every size and inode `RecordNumbers` takes (the writer
    /// meets the others in `numbers`), and every value of the other numbers.
    static func record(_ g: inout Seeded) -> FileRecord {
        var meta: [String: String] = [:]
        for _ in 0..<Int.random(in: 0...4, using: &g) { meta[text(&g, max: 3)] = text(&g) }
        let maybe = { (g: inout Seeded) in Bool.random(using: &g) }
        var r = FileRecord(
            id: text(&g), fileName: text(&g), filePath: text(&g) + "/" + text(&g), contentType: text(&g), namespace: text(&g),
            operation: text(&g), size: Int64.random(in: 0...RecordNumbers.largestSize, using: &g),
            cdn: CDNLink(url: text(&g), absoluteUrl: text(&g), relativeUrl: text(&g)), success: maybe(&g),
            tags: (0..<Int.random(in: 0...3, using: &g)).map { _ in text(&g) }, createdOn: text(&g), modifiedOn: text(&g),
            etag: text(&g), sha256: maybe(&g) ? text(&g) : nil, metadata: meta, isPublic: maybe(&g),
            kind: NodeKind.allCases.randomElement(using: &g)!, inode: UInt64.random(in: 1...UInt64.max, using: &g),
            mode: maybe(&g) ? UInt32.random(in: 0...UInt32.max, using: &g) : nil, uid: maybe(&g) ? UInt32.random(in: 0...UInt32.max, using: &g) : nil,
            gid: maybe(&g) ? 0 : nil, nlink: UInt32.random(in: 0...UInt32.max, using: &g), atimeNs: Int64.random(in: Int64.min...Int64.max, using: &g),
            mtimeNs: -1, ctimeNs: 0, target: maybe(&g) ? text(&g) : nil, rdev: maybe(&g) ? UInt64.max : nil)
        if Int.random(in: 0..<5, using: &g) == 0 {
            r.upload = UploadLink(
                url: text(&g), expiry: 60, expiresAt: maybe(&g) ? 17 : nil,
                direct: maybe(&g) ? DirectUpload(url: text(&g), headers: [text(&g): text(&g)], partSize: 5, parts: 2, expiresAt: 9) : nil)
        }
        return r
    }

    @Test("a browse page and a search page: the same bytes as JSONEncoder's, for 2,000 awkward records")
    func sameBytes() throws {
        var g = Seeded(state: 17)
        for round in 0..<40 {
            let records = (0..<50).map { _ in Self.record(&g) }
            let browse = BrowseResponse(
                items: Array(records.prefix(40)), folders: Array(records.dropFirst(40)),
                page: PageInfo(
                    type: "cursor", current: round, size: 1000, itemTotal: round * 7, hasNext: round % 2 == 0, nextId: round % 3 == 0 ? nil : Self.text(&g),
                    splits: round % 4 == 0 ? nil : (0..<(round % 4 - 1)).map { _ in PageSplit(name: Self.text(&g), nextId: Self.text(&g)) }))
            let written = WireJSON.encode(browse)
            let foundation = try WireJSON.encoder().encode(browse)
            #expect(written == foundation, "round \(round): \(String(decoding: written, as: UTF8.self).prefix(400)) …")
            #expect(try WireJSON.decoder().decode(BrowseResponse.self, from: written) == browse)
            let search = SearchResponse(items: records, nextCursor: round % 2 == 0 ? nil : Self.text(&g))
            #expect(WireJSON.encode(search) == (try WireJSON.encoder().encode(search)))
            #expect(WireJSON.encode(records[0]) == (try WireJSON.encoder().encode(records[0])))
            let posix = PosixBrowseResponse(items: records.prefix(40).map { Self.posix($0, &g) }, folders: records.dropFirst(40).map { Self.posix($0, &g) }, page: browse.page)
            let posixWritten = WireJSON.encode(posix)
            #expect(posixWritten == (try WireJSON.encoder().encode(posix)), "round \(round)")
            #expect(try WireJSON.decoder().decode(PosixBrowseResponse.self, from: posixWritten) == posix)
            #expect(posixWritten.withUnsafeBytes { WireJSONReading.posixBrowse($0) } == posix)
            // A page of the seed's records is not a posix page (no btime_ns): a client reads it as what it is.
            #expect(written.withUnsafeBytes { WireJSONReading.posixBrowse($0) } == nil)
        }
    }

    @Test("lists and maps of strings (tags, metadata): the same bytes as JSONEncoder's")
    func stringsAndMaps() throws {
        var g = Seeded(state: 29)
        for _ in 0..<500 {
            let list = (0..<Int.random(in: 0...5, using: &g)).map { _ in Self.text(&g) }
            var map: [String: String] = [:]
            for _ in 0..<Int.random(in: 0...5, using: &g) { map[Self.text(&g, max: 3)] = Self.text(&g) }
            #expect(WireJSON.encode(list) == (try WireJSON.encoder().encode(list)), "\(list)")
            #expect(WireJSON.encode(map) == (try WireJSON.encoder().encode(map)), "\(map)")
            #expect(try WireJSON.decoder().decode([String: String].self, from: WireJSON.encode(map)) == map)
        }
    }

    static func posix(_ r: FileRecord, _ g: inout Seeded) -> PosixRecord {
        PosixRecord(
            fileName: r.fileName, contentType: r.contentType, size: r.size, tags: r.tags, etag: r.etag, sha256: r.sha256, metadata: r.metadata,
            isPublic: r.isPublic, kind: r.kind, inode: r.inode, mode: r.mode, uid: r.uid, gid: r.gid, nlink: r.nlink, atimeNs: r.atimeNs,
            mtimeNs: r.mtimeNs, ctimeNs: r.ctimeNs, btimeNs: Int64.random(in: Int64.min...Int64.max, using: &g), target: r.target, rdev: r.rdev)
    }
}

extension WireJSONWriterTests {
    @Test("a batch upload's answer: the same bytes as JSONEncoder's, with records, refusals and both")
    func batchResponse() throws {
        var g = Seeded(state: 23)
        for round in 0..<20 {
            let results = (0..<(round % 7)).map { i -> BatchUpload.Result in
                switch (i + round) % 4 {
                case 0: BatchUpload.Result(file: Self.record(&g))
                case 1: BatchUpload.Result(status: 409, error: ErrorBody(message: Self.text(&g), code: .badRequest))
                case 2: BatchUpload.Result(file: Self.record(&g), status: 201)
                default: BatchUpload.Result()
                }
            }
            let response = BatchUpload.Response(results: results)
            let written = WireJSON.encode(response)
            #expect(written == (try WireJSON.encoder().encode(response)), "round \(round): \(String(decoding: written, as: UTF8.self).prefix(400))")
            #expect(try WireJSON.decoder().decode(BatchUpload.Response.self, from: written) == response)
        }
    }

    @Test("upload starts, their extras and a batch's declaration: the same bytes as JSONEncoder's, any field present or not")
    func uploadRequests() throws {
        var g = Seeded(state: 31)
        func maybe<T>(_ v: @autoclosure () -> T) -> T? { Bool.random(using: &g) ? v() : nil }
        var files: [StartUploadRequest] = []
        for round in 0..<200 {
            let params = UploadParams(
                metadata: maybe([Self.text(&g): Self.text(&g), Self.text(&g): Self.text(&g)]), isPublic: maybe(Bool.random(using: &g)),
                ifMatch: maybe(Self.text(&g)), ifNoneMatch: maybe("*"), sha256: maybe(Self.text(&g)), mode: maybe(UInt32.random(in: 0...UInt32.max, using: &g)),
                uid: maybe(UInt32.random(in: 0...UInt32.max, using: &g)), gid: maybe(0), mtimeNs: maybe(Int64.random(in: .min ... .max, using: &g)),
                atimeNs: maybe(-1), ctimeNs: maybe(Int64.max), zerosFrom: maybe(Int64.random(in: 0...1 << 40, using: &g)))
            #expect(WireJSON.encode(params) == (try WireJSON.encoder().encode(params)), "round \(round): \(String(decoding: WireJSON.encode(params), as: UTF8.self))")
            let start = StartUploadRequest(
                fileName: Self.text(&g), contentType: maybe(Self.text(&g)), size: Int64.random(in: 0 ... .max, using: &g),
                tags: maybe((0..<(round % 3)).map { _ in Self.text(&g) }), params: maybe(params), deferLength: maybe(Bool.random(using: &g)))
            #expect(WireJSON.encode(start) == (try WireJSON.encoder().encode(start)), "round \(round): \(String(decoding: WireJSON.encode(start), as: UTF8.self))")
            #expect(try WireJSON.decoder().decode(StartUploadRequest.self, from: WireJSON.encode(start)) == start)
            files.append(start)
        }
        let batch = BatchUpload.Request(files: files)
        #expect(WireJSON.encode(batch) == (try WireJSON.encoder().encode(batch)))
        // Read back by hand as JSONDecoder reads it.
        #expect(WireJSON.encode(batch).withUnsafeBytes { WireJSONReading.batchRequest($0) } == batch)
        // What the hand reader does not take (out of range, missing, twice, null, a fraction) is left to JSONDecoder, which decides.
        for odd in [
            #"{"files":[{"file_name":"a","size":1,"params":{"mode":4294967296}}]}"#, #"{"files":[{"file_name":"a"}]}"#,
            #"{"files":[{"file_name":"a","size":1,"size":2}]}"#, #"{"files":[{"file_name":null,"size":1}]}"#, #"{"files":[{"file_name":"a","size":1.5}]}"#,
        ] {
            let data = Data(odd.utf8)
            #expect(data.withUnsafeBytes { WireJSONReading.batchRequest($0) } == nil, "\(odd)")
        }
        let nulls = Data(#"{"files":[{"file_name":"a","size":0,"tags":null,"params":{"metadata":null,"mode":null,"x":[{}]},"content_type":null,"defer_length":null}],"more":1}"#.utf8)
        let decoded = try JSONDecoder().decode(BatchUpload.Request.self, from: nulls)
        #expect(nulls.withUnsafeBytes { WireJSONReading.batchRequest($0) } == decoded)
        #expect(WireJSON.encode(BatchUpload.Request(files: [])) == (try WireJSON.encoder().encode(BatchUpload.Request(files: []))))
    }

    @Test("numbers at their edges: the same bytes as JSONEncoder's")
    func numbers() throws {
        var g = Seeded(state: 8)
        let base = Self.record(&g)
        for v: Int64 in [.min, .min + 1, -1_000_000_007, -10, -9, -1, 0, 1, 9, 10, 99, 100, 1_795_742_209_078_449_846, .max - 1, .max] {
            var r = base
            r.upload = nil
            r.size = v
            r.atimeNs = v
            r.inode = UInt64(bitPattern: v)
            r.nlink = UInt32(truncatingIfNeeded: v)
            #expect(WireJSON.encode(r) == (try WireJSON.encoder().encode(r)), "\(v)")
        }
    }
}

@Test("a record's _id: its inode in 24 hex digits, as the server has always written it")
func recordIDs() {
    for ino: UInt64 in [0, 1, 15, 16, 255, 0x1234_5678, 0xFFFF_FFFF_FFFF_FFFF] {
        let hex = String(ino, radix: 16)
        #expect(FileRecord.id(inode: ino) == String(repeating: "0", count: 24 - hex.count) + hex)
    }
}

@Suite("timestamps on the wire")
struct TimestampTests {
    @Test("the ISO 8601 writer: Foundation's date and time of the whole second, and the milliseconds truncated, from 1970 to 2262")
    func agreesWithFoundation() {
        var g = WireJSONWriterTests.Seeded(state: 5)
        var values: [Int64] = [0, 1, 499_999, 999_999, 1_000_000, 86_399_999_999_999, 86_399_999_000_000, 951_782_400_000_000_000, 4_107_542_399_999_000_000, .max]
        // Leap days, and the ends of months and years.
        for day in [59, 60, 365, 366, 789, 11_016, 11_017, 106_751] { values.append(Int64(day) * 86_400_000_000_000) }
        for _ in 0..<20_000 { values.append(Int64.random(in: 0...Int64.max, using: &g)) }
        for ns in values {
            // Foundation goes through a Double of seconds since 2001, which can be a millisecond
            // off: it is asked for the middle of the second, to the second.
            let second = Date(timeIntervalSince1970: Double(ns / 1_000_000_000) + 0.5).formatted(.iso8601)
            let millis = String(1000 + ns % 1_000_000_000 / 1_000_000).dropFirst()
            #expect(Timestamp.iso8601(nanoseconds: ns) == second.dropLast() + ".\(millis)Z", "\(ns)")
        }
        #expect(Timestamp.iso8601(nanoseconds: 1_795_742_209_078_449_846) == "2026-11-27T01:16:49.078Z")
        #expect(Timestamp.iso8601(nanoseconds: 86_399_999_999_999) == "1970-01-01T23:59:59.999Z")
    }
}

/// The hand-written reader of browse and search pages must read what JSONDecoder reads, and
/// refuse (leave to JSONDecoder) whatever it does not read the same.
@Suite("the wire JSON reader")
struct WireJSONReaderTests {
    static func fast(_ data: Data) -> BrowseResponse? { data.withUnsafeBytes { WireJSONReading.browse($0) } }
    static func foundation(_ data: Data) -> BrowseResponse? { try? JSONDecoder().decode(BrowseResponse.self, from: data) }

    static func page(_ g: inout WireJSONWriterTests.Seeded, records: Int) -> BrowseResponse {
        var list = (0..<records).map { _ in WireJSONWriterTests.record(&g) }
        for i in list.indices { list[i].upload = nil }
        return BrowseResponse(
            items: Array(list.dropFirst(records / 4)), folders: Array(list.prefix(records / 4)),
            page: PageInfo(
                type: "cursor", current: 1, size: 1000, itemTotal: records, hasNext: Bool.random(using: &g), nextId: Bool.random(using: &g) ? "n" : nil,
                splits: Bool.random(using: &g) ? nil : [PageSplit(name: "a \"b\" 日本", nextId: "YQ"), PageSplit(name: "z", nextId: "eg")]))
    }

    @Test("awkward records, compact and pretty-printed: read as JSONDecoder reads them")
    func sameValues() throws {
        var g = WireJSONWriterTests.Seeded(state: 99)
        for _ in 0..<40 {
            let page = Self.page(&g, records: 50)
            let compact = WireJSON.encode(page)
            #expect(Self.fast(compact) == page)
            let pretty = JSONEncoder()
            pretty.outputFormatting = [.prettyPrinted]
            let spaced = try pretty.encode(page)
            #expect(Self.fast(spaced) == page)
            let search = SearchResponse(items: page.items, nextCursor: page.page.nextId)
            #expect(WireJSON.encode(search).withUnsafeBytes { WireJSONReading.search($0) } == search)
        }
    }

    @Test("a record alone and a batch's answer: read as JSONDecoder reads them; an answer with a refusal is left to JSONDecoder")
    func recordAndBatch() throws {
        var g = WireJSONWriterTests.Seeded(state: 41)
        for round in 0..<40 {
            var record = WireJSONWriterTests.record(&g)
            record.upload = nil
            let one = try WireJSON.encoder().encode(record)
            #expect(one.withUnsafeBytes { WireJSONReading.fileRecord($0) } == (try JSONDecoder().decode(FileRecord.self, from: one)), "round \(round)")
            let results = (0..<(round % 5)).map { i -> BatchUpload.Result in
                var r = WireJSONWriterTests.record(&g)
                r.upload = nil
                return i % 2 == 0 ? BatchUpload.Result(file: r) : BatchUpload.Result(file: r, status: 201)
            }
            let batch = try WireJSON.encoder().encode(BatchUpload.Response(results: results))
            let read = batch.withUnsafeBytes { WireJSONReading.batchResponse($0) }
            let decoded = try JSONDecoder().decode(BatchUpload.Response.self, from: batch)
            #expect(read != nil && read == decoded, "round \(round)")
        }
        let refused = try WireJSON.encoder().encode(
            BatchUpload.Response(results: [BatchUpload.Result(status: 409, error: ErrorBody(message: "exists", code: .badRequest))]))
        #expect(refused.withUnsafeBytes { WireJSONReading.batchResponse($0) } == nil)
        #expect(Data(#"{"results":[{"file":null,"status":null}]}"#.utf8).withUnsafeBytes { WireJSONReading.batchResponse($0) } == BatchUpload.Response(results: [BatchUpload.Result()]))
        #expect(Data(#"{"results":[{"status":1,"status":2}]}"#.utf8).withUnsafeBytes { WireJSONReading.batchResponse($0) } == nil, "a key twice: left to JSONDecoder")
        #expect(Data(#"{"result":[]}"#.utf8).withUnsafeBytes { WireJSONReading.batchResponse($0) } == nil)
    }

    @Test("a change feed's answer: written as JSONEncoder writes it, read as JSONDecoder reads it; a kind it does not know is left to JSONDecoder")
    func changes() throws {
        var g = WireJSONWriterTests.Seeded(state: 57)
        let kinds: [ChangeRecord.Kind] = [.entry, .inode, .namespace, .recall]
        for round in 0..<60 {
            let list = (0..<(round % 9)).map { i in
                ChangeRecord(
                    cursor: WireJSONWriterTests.text(&g), kind: kinds[(i + round) % kinds.count],
                    parent: Bool.random(using: &g) ? UInt64.random(in: 0 ... .max, using: &g) : nil,
                    name: Bool.random(using: &g) ? WireJSONWriterTests.text(&g) : nil, ino: UInt64.random(in: 0 ... .max, using: &g),
                    removed: Bool.random(using: &g), origin: Bool.random(using: &g) ? WireJSONWriterTests.text(&g) : nil)
            }
            let response = ChangesResponse(cursor: WireJSONWriterTests.text(&g), reset: round % 5 == 0, changes: list)
            let written = WireJSON.encode(response)
            #expect(written == (try WireJSON.encoder().encode(response)), "round \(round): \(String(decoding: written, as: UTF8.self).prefix(300))")
            let read = written.withUnsafeBytes { WireJSONReading.changes($0) }
            #expect(read != nil && read == response, "round \(round)")
        }
        let unknown = Data(#"{"changes":[{"cursor":"c1.0","ino":3,"kind":"teleport","removed":false}],"cursor":"c1.0","reset":false}"#.utf8)
        #expect(unknown.withUnsafeBytes { WireJSONReading.changes($0) } == nil)
        let nulls = Data(#"{"reset":true,"cursor":"c2.1","changes":[{"removed":true,"ino":7,"kind":"entry","cursor":"c2.1","parent":null,"name":null,"origin":null,"extra":[1]}]}"#.utf8)
        let decoded = try JSONDecoder().decode(ChangesResponse.self, from: nulls)
        #expect(nulls.withUnsafeBytes { WireJSONReading.changes($0) } == decoded)
        #expect(Data(#"{"changes":[],"cursor":"c1.0"}"#.utf8).withUnsafeBytes { WireJSONReading.changes($0) } == nil, "reset missing")
    }

    @Test("escapes, nulls and keys it does not know: the same as JSONDecoder; an upload link or a fraction: left to JSONDecoder")
    func otherSpellings() throws {
        let record = #"""
            {"_id":"1","file_name":"caf\u00e9 \ud83d\ude00 a\/b \"q\" \\ \t","file_path":"d/x","content_type":"text/plain","namespace":"ns",
             "operation":"putObject","size":12,"cdn":{"url":"u","absolute_url":"a","relative_url":"r","extra":[1,{"x":null}]},
             "success":true,"tags":["t1","t\n2"],"created_on":"c","modified_on":"m","etag":"e","sha256":null,"metadata":{"k":"v","é":""},
             "public":false,"kind":"file","inode":18446744073709551615,"mode":null,"uid":7,"nlink":1,"atime_ns":-9223372036854775808,
             "mtime_ns":0,"ctime_ns":5,"unknown":{"deep":[[[]]],"n":-1.5e3},"rdev":null}
            """#
        let doc = Data(#"{"items":[RECORD],"folders":[],"page":{"type":"cursor","current":1,"size":1000,"item_total":1,"has_next":false,"next_id":null}}"#.replacingOccurrences(of: "RECORD", with: record).utf8)
        let theirs = try #require(Self.foundation(doc))
        #expect(Self.fast(doc) == theirs)
        #expect(theirs.items[0].fileName == "café 😀 a/b \"q\" \\ \t")
        // Left to JSONDecoder: an upload link, a number with a fraction, a lone surrogate; bad UTF-8 below.
        for (from, to) in [(#""rdev":null"#, #""upload":{"url":"u","expiry":1}"#), (#""size":12"#, #""size":12.0"#),
                           (#"\ud83d\ude00"#, #"\ud83d"#)] {
            let changed = Data(String(decoding: doc, as: UTF8.self).replacingOccurrences(of: from, with: to).utf8)
            #expect(changed != doc)
            #expect(Self.fast(changed) == nil, "\(to)")
        }
        // A key given twice (JSONDecoder keeps the first, this reader would keep the last), in a
        // record, in a map of metadata and at the top: left to JSONDecoder.
        for (from, to) in [(#""size":12"#, #""size":12,"size":13"#), (#""k":"v""#, #""k":"v","k":"w""#),
                           (#""has_next":false"#, #""has_next":false,"has_next":true"#)] {
            let changed = Data(String(decoding: doc, as: UTF8.self).replacingOccurrences(of: from, with: to).utf8)
            #expect(changed != doc)
            #expect(Self.fast(changed) == nil, "\(to)")
        }
        // Keys spelled with escapes are the same keys; keys of a known length and first letter that
        // are not one (`mtime_nx`, `file_nam3`, `metadatb`) are unknown ones: as JSONDecoder reads them.
        for (from, to) in [(#""size":12"#, #""\u0073ize":12"#), (#""mtime_ns":0"#, #""mtime_n\u0073":0"#),
                           (#""file_path":"d/x""#, #""file_path":"d/x","file_pat0":1"#), (#""mtime_ns":0"#, #""mtime_nx":0"#),
                           (#""file_path":"d/x""#, #""file_nam3":"d/x""#), (#""ctime_ns":5"#, #""ctime_ns":5,"metadatb":{},"cdm":1,"zzzz":2"#)] {
            let changed = Data(String(decoding: doc, as: UTF8.self).replacingOccurrences(of: from, with: to).utf8)
            #expect(changed != doc)
            #expect(Self.fast(changed) == Self.foundation(changed), "\(to)")
        }
        // A number JSON does not allow, under a key the reader passes over: left to JSONDecoder
        // (which lets some of these through).
        for bad in ["-", "+1", "01", "1.", "1e", ".5", "1e+", "--1"] {
            let changed = Data(String(decoding: doc, as: UTF8.self).replacingOccurrences(of: #""n":-1.5e3"#, with: #""n":\#(bad)"#).utf8)
            #expect(changed != doc)
            #expect(Self.fast(changed) == nil, "\(bad)")
        }
        var invalid = doc
        invalid[invalid.firstRange(of: Data("caf".utf8))!.upperBound - 1] = 0xFF
        #expect(Self.fast(invalid) == nil && Self.foundation(invalid) == nil)
    }

    @Test("every truncation, and 5,000 corrupted copies: never read differently from JSONDecoder, never a crash")
    func corrupted() {
        var g = WireJSONWriterTests.Seeded(state: 3)
        let doc = WireJSON.encode(Self.page(&g, records: 3))
        for n in 0..<doc.count {
            #expect(Self.fast(doc.prefix(n)) == nil, "a prefix of \(n) bytes was read")
        }
        let alphabet = Array(#"{}[]",:0123456789-.etrufalsn\ u"#.utf8) + [0x00, 0x1F, 0x80, 0xC3, 0xFF]
        for _ in 0..<5000 {
            var copy = doc
            for _ in 0..<Int.random(in: 1...3, using: &g) {
                copy[Int.random(in: 0..<copy.count, using: &g)] = alphabet.randomElement(using: &g)!
            }
            if let mine = Self.fast(copy) {
                #expect(Self.foundation(copy) == mine, "read differently: \(String(decoding: copy, as: UTF8.self))")
            }
        }
    }
}
