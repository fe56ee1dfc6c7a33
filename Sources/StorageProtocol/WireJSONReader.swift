#if canImport(Glibc)
import Glibc
#endif

/// Reads the API's largest answers — browse and search pages of up to a thousand records — by
/// hand: JSONDecoder took two thirds of a mount's time to list a big folder (`perf` of `stowfs`
/// during `ls -f` of 12,000 files). Only the plain shape is read here: strict JSON, integers
/// without fraction or exponent, valid UTF-8, no upload link in a record, no number
/// `RecordNumbers` refuses. Anything else returns nil, and the caller decodes with JSONDecoder
/// as before, so what is accepted or refused does not change. `WireJSONTests` checks both agree.
public enum WireJSONReading {
    /// `bytes` read whole by `body`; nil for anything `body` does not take.
    static func whole<T>(_ bytes: UnsafeRawBufferPointer, _ body: (inout JSONReader) throws(JSONReader.Failure) -> T) -> T? {
        var r = JSONReader(bytes)
        return try? r.whole(body)
    }

    public static func browse(_ bytes: UnsafeRawBufferPointer) -> BrowseResponse? {
        whole(bytes, browse)
    }

    /// A `fields=posix` browse page.
    public static func posixBrowse(_ bytes: UnsafeRawBufferPointer) -> PosixBrowseResponse? {
        whole(bytes, posixBrowse)
    }

    public static func search(_ bytes: UnsafeRawBufferPointer) -> SearchResponse? {
        whole(bytes, search)
    }

    /// One record (the answer of a complete, a folder made, a file's attributes changed).
    public static func fileRecord(_ bytes: UnsafeRawBufferPointer) -> FileRecord? {
        whole(bytes, record)
    }

    /// A batch upload's answer whose every file was stored (a refusal's error body is left to
    /// JSONDecoder, with the rest of the answer).
    public static func batchResponse(_ bytes: UnsafeRawBufferPointer) -> BatchUpload.Response? {
        whole(bytes, batchResponse)
    }

    /// A batch's declaration (read by `stowd` for every batch of small files a mount sends).
    public static func batchRequest(_ bytes: UnsafeRawBufferPointer) -> BatchUpload.Request? {
        whole(bytes) { (r: inout JSONReader) throws(JSONReader.Failure) in
            var files: [StartUploadRequest]?
            var seen = SeenKeys()
            try r.object { r, key throws(JSONReader.Failure) in
                switch key {
                case "files":
                    try seen.first(0)
                    files = try r.list(startUpload)
                default: try r.skipValue()
                }
            }
            guard let files else { throw JSONReader.Failure() }
            return BatchUpload.Request(files: files)
        }
    }

    static func startUpload(_ r: inout JSONReader) throws(JSONReader.Failure) -> StartUploadRequest {
        var fileName: String?, contentType: String?, size: Int64?, tags: [String]?, params: UploadParams?, deferLength: Bool?
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "file_name":
                try seen.first(0)
                fileName = try r.string()
            case "content_type":
                try seen.first(1)
                contentType = try r.optional { r throws(JSONReader.Failure) in try r.string() }
            case "size":
                try seen.first(2)
                size = try r.int64()
            case "tags":
                try seen.first(3)
                tags = try r.optional { r throws(JSONReader.Failure) in try r.strings() }
            case "params":
                try seen.first(4)
                params = try r.optional { r throws(JSONReader.Failure) in try uploadParams(&r) }
            case "defer_length":
                try seen.first(5)
                deferLength = try r.optional { r throws(JSONReader.Failure) in try r.bool() }
            default: try r.skipValue()
            }
        }
        guard let fileName, let size else { throw JSONReader.Failure() }
        return StartUploadRequest(fileName: fileName, contentType: contentType, size: size, tags: tags, params: params, deferLength: deferLength)
    }

    static func uploadParams(_ r: inout JSONReader) throws(JSONReader.Failure) -> UploadParams {
        var p = UploadParams()
        var seen = SeenKeys()
        func uint32(_ r: inout JSONReader) throws(JSONReader.Failure) -> UInt32? {
            try r.optional { r throws(JSONReader.Failure) in
                let v = try r.uint64()
                guard v <= UInt64(UInt32.max) else { throw JSONReader.Failure() }
                return UInt32(v)
            }
        }
        func int64(_ r: inout JSONReader) throws(JSONReader.Failure) -> Int64? {
            try r.optional { r throws(JSONReader.Failure) in try r.int64() }
        }
        func string(_ r: inout JSONReader) throws(JSONReader.Failure) -> String? {
            try r.optional { r throws(JSONReader.Failure) in try r.string() }
        }
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "metadata":
                try seen.first(0)
                p.metadata = try r.optional { r throws(JSONReader.Failure) in try r.stringMap() }
            case "public":
                try seen.first(1)
                p.isPublic = try r.optional { r throws(JSONReader.Failure) in try r.bool() }
            case "if_match":
                try seen.first(2)
                p.ifMatch = try string(&r)
            case "if_none_match":
                try seen.first(3)
                p.ifNoneMatch = try string(&r)
            case "sha256":
                try seen.first(4)
                p.sha256 = try string(&r)
            case "mode":
                try seen.first(5)
                p.mode = try uint32(&r)
            case "uid":
                try seen.first(6)
                p.uid = try uint32(&r)
            case "gid":
                try seen.first(7)
                p.gid = try uint32(&r)
            case "mtime_ns":
                try seen.first(8)
                p.mtimeNs = try int64(&r)
            case "atime_ns":
                try seen.first(9)
                p.atimeNs = try int64(&r)
            case "ctime_ns":
                try seen.first(10)
                p.ctimeNs = try int64(&r)
            case "zeros_from":
                try seen.first(11)
                p.zerosFrom = try int64(&r)
            default: try r.skipValue()
            }
        }
        return p
    }

    /// A change feed's answer.
    public static func changes(_ bytes: UnsafeRawBufferPointer) -> ChangesResponse? {
        whole(bytes, changes)
    }

    static func changes(_ r: inout JSONReader) throws(JSONReader.Failure) -> ChangesResponse {
        var cursor: String?, reset: Bool?, changes: [ChangeRecord]?
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "cursor":
                try seen.first(0)
                cursor = try r.string()
            case "reset":
                try seen.first(1)
                reset = try r.bool()
            case "changes":
                try seen.first(2)
                changes = try r.list(change)
            default: try r.skipValue()
            }
        }
        guard let cursor, let reset, let changes else { throw JSONReader.Failure() }
        return ChangesResponse(cursor: cursor, reset: reset, changes: changes)
    }

    static func change(_ r: inout JSONReader) throws(JSONReader.Failure) -> ChangeRecord {
        var cursor: String?, kind: ChangeRecord.Kind?, parent: UInt64?, name: String?, ino: UInt64?, removed: Bool?, origin: String?
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "cursor":
                try seen.first(0)
                cursor = try r.string()
            case "kind":
                try seen.first(1)
                // A kind this client does not know: JSONDecoder decides (it refuses the answer).
                guard let k = ChangeRecord.Kind(rawValue: try r.string()) else { throw JSONReader.Failure() }
                kind = k
            case "parent":
                try seen.first(2)
                parent = try r.optional { r throws(JSONReader.Failure) in try r.uint64() }
            case "name":
                try seen.first(3)
                name = try r.optional { r throws(JSONReader.Failure) in try r.string() }
            case "ino":
                try seen.first(4)
                ino = try r.uint64()
            case "removed":
                try seen.first(5)
                removed = try r.bool()
            case "origin":
                try seen.first(6)
                origin = try r.optional { r throws(JSONReader.Failure) in try r.string() }
            default: try r.skipValue()
            }
        }
        guard let cursor, let kind, let ino, let removed else { throw JSONReader.Failure() }
        return ChangeRecord(cursor: cursor, kind: kind, parent: parent, name: name, ino: ino, removed: removed, origin: origin)
    }

    static func batchResponse(_ r: inout JSONReader) throws(JSONReader.Failure) -> BatchUpload.Response {
        var results: [BatchUpload.Result]?
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "results":
                try seen.first(0)
                results = try r.list(batchResult)
            default: try r.skipValue()
            }
        }
        guard let results else { throw JSONReader.Failure() }
        return BatchUpload.Response(results: results)
    }

    static func batchResult(_ r: inout JSONReader) throws(JSONReader.Failure) -> BatchUpload.Result {
        var result = BatchUpload.Result()
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "file":
                try seen.first(0)
                result.file = try r.optional { r throws(JSONReader.Failure) in try record(&r) }
            case "status":
                try seen.first(1)
                result.status = try r.optional { r throws(JSONReader.Failure) in Int(try r.int64()) }
            // An error body: JSONDecoder reads the whole answer.
            case "error": throw JSONReader.Failure()
            default: try r.skipValue()
            }
        }
        return result
    }

    static func browse(_ r: inout JSONReader) throws(JSONReader.Failure) -> BrowseResponse {
        let (items, folders, page) = try page(&r, record)
        return BrowseResponse(items: items, folders: folders, page: page)
    }

    static func posixBrowse(_ r: inout JSONReader) throws(JSONReader.Failure) -> PosixBrowseResponse {
        let (items, folders, page) = try page(&r, posixRecord)
        return PosixBrowseResponse(items: items, folders: folders, page: page)
    }

    /// A browse page whose records `element` reads.
    static func page<R>(
        _ r: inout JSONReader, _ element: (inout JSONReader) throws(JSONReader.Failure) -> R
    ) throws(JSONReader.Failure) -> ([R], [R], PageInfo) {
        var items: [R]?, folders: [R]?, page: PageInfo?
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "items":
                try seen.first(0)
                items = try r.list(element)
            case "folders":
                try seen.first(1)
                folders = try r.list(element)
            case "page":
                try seen.first(2)
                page = try pageInfo(&r)
            default: try r.skipValue()
            }
        }
        guard let items, let folders, let page else { throw JSONReader.Failure() }
        return (items, folders, page)
    }

    static func search(_ r: inout JSONReader) throws(JSONReader.Failure) -> SearchResponse {
        var items: [FileRecord]?, next: String?
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "items":
                try seen.first(0)
                items = try records(&r)
            case "next_cursor":
                try seen.first(1)
                next = try r.optional { r throws(JSONReader.Failure) in try r.string() }
            default: try r.skipValue()
            }
        }
        guard let items else { throw JSONReader.Failure() }
        return SearchResponse(items: items, nextCursor: next)
    }

    static func records(_ r: inout JSONReader) throws(JSONReader.Failure) -> [FileRecord] {
        try r.list(record)
    }

    static func pageInfo(_ r: inout JSONReader) throws(JSONReader.Failure) -> PageInfo {
        var type: String?, current: Int?, size: Int?, total: Int?, hasNext: Bool?, nextId: String?, splits: [PageSplit]?
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "type":
                try seen.first(0)
                type = try r.string()
            case "current":
                try seen.first(1)
                current = Int(try r.int64())
            case "size":
                try seen.first(2)
                size = Int(try r.int64())
            case "item_total":
                try seen.first(3)
                total = Int(try r.int64())
            case "has_next":
                try seen.first(4)
                hasNext = try r.bool()
            case "next_id":
                try seen.first(5)
                nextId = try r.optional { r throws(JSONReader.Failure) in try r.string() }
            case "splits":
                try seen.first(6)
                splits = try r.optional { r throws(JSONReader.Failure) in try r.list(pageSplit) }
            default: try r.skipValue()
            }
        }
        guard let type, let current, let size, let total, let hasNext else { throw JSONReader.Failure() }
        return PageInfo(type: type, current: current, size: size, itemTotal: total, hasNext: hasNext, nextId: nextId, splits: splits)
    }

    static func pageSplit(_ r: inout JSONReader) throws(JSONReader.Failure) -> PageSplit {
        var name: String?, nextId: String?
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "name":
                try seen.first(0)
                name = try r.string()
            case "next_id":
                try seen.first(1)
                nextId = try r.string()
            default: try r.skipValue()
            }
        }
        guard let name, let nextId else { throw JSONReader.Failure() }
        return PageSplit(name: name, nextId: nextId)
    }

    static func cdn(_ r: inout JSONReader) throws(JSONReader.Failure) -> CDNLink {
        var url: String?, absolute: String?, relative: String?
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch key {
            case "url":
                try seen.first(0)
                url = try r.string()
            case "absolute_url":
                try seen.first(1)
                absolute = try r.string()
            case "relative_url":
                try seen.first(2)
                relative = try r.string()
            default: try r.skipValue()
            }
        }
        guard let url, let absolute, let relative else { throw JSONReader.Failure() }
        return CDNLink(url: url, absoluteUrl: absolute, relativeUrl: relative)
    }

    /// The keys of a record as read: those of the seed's record, or of a posix one.
    struct Fields {
        var id: String?, fileName: String?, filePath: String?, contentType: String?, namespace: String?, operation: String?
        var size: Int64?, cdnLink: CDNLink?, success: Bool?, tags: [String]?, createdOn: String?, modifiedOn: String?, etag: String?
        var sha256: String?, metadata: [String: String]?, isPublic: Bool?, kind: NodeKind?, inode: UInt64?
        var mode: UInt32?, uid: UInt32?, gid: UInt32?, nlink: UInt32?, atime: Int64?, mtime: Int64?, ctime: Int64?, btime: Int64?
        var target: String?, rdev: UInt64?
    }

    static func record(_ r: inout JSONReader) throws(JSONReader.Failure) -> FileRecord {
        let f = try fields(&r)
        guard let id = f.id, let fileName = f.fileName, let filePath = f.filePath, let contentType = f.contentType, let namespace = f.namespace,
            let operation = f.operation, let size = f.size, let cdnLink = f.cdnLink, let success = f.success, let tags = f.tags,
            let createdOn = f.createdOn, let modifiedOn = f.modifiedOn, let etag = f.etag, let metadata = f.metadata, let isPublic = f.isPublic,
            let kind = f.kind, let inode = f.inode, let nlink = f.nlink, let atime = f.atime, let mtime = f.mtime, let ctime = f.ctime,
            RecordNumbers.problem(size: size, inode: inode) == nil
        else { throw JSONReader.Failure() }
        return FileRecord(
            id: id, fileName: fileName, filePath: filePath, contentType: contentType, namespace: namespace, operation: operation,
            size: size, upload: nil, cdn: cdnLink, success: success, tags: tags, createdOn: createdOn, modifiedOn: modifiedOn, etag: etag,
            sha256: f.sha256, metadata: metadata, isPublic: isPublic, kind: kind, inode: inode, mode: f.mode, uid: f.uid, gid: f.gid,
            nlink: nlink, atimeNs: atime, mtimeNs: mtime, ctimeNs: ctime, target: f.target, rdev: f.rdev)
    }

    static func posixRecord(_ r: inout JSONReader) throws(JSONReader.Failure) -> PosixRecord {
        let f = try fields(&r)
        guard let fileName = f.fileName, let contentType = f.contentType, let size = f.size, let tags = f.tags, let etag = f.etag,
            let metadata = f.metadata, let isPublic = f.isPublic, let kind = f.kind, let inode = f.inode, let nlink = f.nlink,
            let atime = f.atime, let mtime = f.mtime, let ctime = f.ctime, let btime = f.btime,
            RecordNumbers.problem(size: size, inode: inode) == nil
        else { throw JSONReader.Failure() }
        return PosixRecord(
            fileName: fileName, contentType: contentType, size: size, tags: tags, etag: etag, sha256: f.sha256, metadata: metadata,
            isPublic: isPublic, kind: kind, inode: inode, mode: f.mode, uid: f.uid, gid: f.gid, nlink: nlink, atimeNs: atime, mtimeNs: mtime,
            ctimeNs: ctime, btimeNs: btime, target: f.target, rdev: f.rdev)
    }

    static func fields(_ r: inout JSONReader) throws(JSONReader.Failure) -> Fields {
        var f = Fields()
        func u32(_ r: inout JSONReader) throws(JSONReader.Failure) -> UInt32 {
            guard let v = UInt32(exactly: try r.int64()) else { throw JSONReader.Failure() }
            return v
        }
        var seen = SeenKeys()
        try r.object { r, key throws(JSONReader.Failure) in
            switch RecordKey(key) {
            case .id:
                try seen.first(0)
                f.id = try r.string()
            case .fileName:
                try seen.first(1)
                f.fileName = try r.string()
            case .filePath:
                try seen.first(2)
                f.filePath = try r.string()
            case .contentType:
                try seen.first(3)
                f.contentType = try r.string()
            case .namespace:
                try seen.first(4)
                f.namespace = try r.string()
            case .operation:
                try seen.first(5)
                f.operation = try r.string()
            case .size:
                try seen.first(6)
                f.size = try r.int64()
            case .cdn:
                try seen.first(7)
                f.cdnLink = try cdn(&r)
            case .success:
                try seen.first(8)
                f.success = try r.bool()
            case .tags:
                try seen.first(9)
                f.tags = try r.strings()
            case .createdOn:
                try seen.first(10)
                f.createdOn = try r.string()
            case .modifiedOn:
                try seen.first(11)
                f.modifiedOn = try r.string()
            case .etag:
                try seen.first(12)
                f.etag = try r.string()
            case .sha256:
                try seen.first(13)
                f.sha256 = try r.optional { r throws(JSONReader.Failure) in try r.string() }
            case .metadata:
                try seen.first(14)
                f.metadata = try r.stringMap()
            case .isPublic:
                try seen.first(15)
                f.isPublic = try r.bool()
            case .kind:
                try seen.first(16)
                guard let k = NodeKind(rawValue: try r.string()) else { throw JSONReader.Failure() }
                f.kind = k
            case .inode:
                try seen.first(17)
                f.inode = try r.uint64()
            case .mode:
                try seen.first(18)
                f.mode = try r.optional { r throws(JSONReader.Failure) in try u32(&r) }
            case .uid:
                try seen.first(19)
                f.uid = try r.optional { r throws(JSONReader.Failure) in try u32(&r) }
            case .gid:
                try seen.first(20)
                f.gid = try r.optional { r throws(JSONReader.Failure) in try u32(&r) }
            case .nlink:
                try seen.first(21)
                f.nlink = try u32(&r)
            case .atime:
                try seen.first(22)
                f.atime = try r.int64()
            case .mtime:
                try seen.first(23)
                f.mtime = try r.int64()
            case .ctime:
                try seen.first(24)
                f.ctime = try r.int64()
            case .target:
                try seen.first(25)
                f.target = try r.optional { r throws(JSONReader.Failure) in try r.string() }
            case .rdev:
                try seen.first(26)
                f.rdev = try r.optional { r throws(JSONReader.Failure) in try r.uint64() }
            case .btime:
                try seen.first(28)
                f.btime = try r.int64()
            case .upload:
                try seen.first(27)
                // An upload link (not in listings): JSONDecoder reads those.
                guard try r.peek() == UInt8(ascii: "n") else { throw JSONReader.Failure() }
                try r.skipValue()
            case nil: try r.skipValue()
            }
        }
        return f
    }
}

/// A key of a file record, found by its length and first byte before its bytes are compared (a
/// record has up to 29 keys, and each was compared with the names one after another). The raw
/// values are the keys' places in `SeenKeys`.
enum RecordKey: Int {
    case id = 0, fileName, filePath, contentType, namespace, operation, size, cdn, success, tags, createdOn, modifiedOn, etag, sha256,
        metadata, isPublic, kind, inode, mode, uid, gid, nlink, atime, mtime, ctime, target, rdev, upload, btime

    init?(_ key: JSONReader.Key) {
        guard let raw = key.raw else {
            // Written with escapes: compared as bytes after all.
            let bytes = Array(key.string.utf8)
            guard let k = bytes.withUnsafeBytes({ Self(bytes: $0) }) else { return nil }
            self = k
            return
        }
        guard let k = Self(bytes: raw) else { return nil }
        self = k
    }

    init?(bytes: UnsafeRawBufferPointer) {
        guard let first = bytes.first else { return nil }
        func written(_ k: RecordKey) -> Bool {
            k.name.withUTF8Buffer { n in n.count == bytes.count && memcmp(n.baseAddress!, bytes.baseAddress!, n.count) == 0 }
        }
        let k: RecordKey
        switch (bytes.count, first) {
        case (3, UInt8(ascii: "_")): k = .id
        case (3, UInt8(ascii: "c")): k = .cdn
        case (3, UInt8(ascii: "u")): k = .uid
        case (3, UInt8(ascii: "g")): k = .gid
        case (4, UInt8(ascii: "s")): k = .size
        case (4, UInt8(ascii: "t")): k = .tags
        case (4, UInt8(ascii: "e")): k = .etag
        case (4, UInt8(ascii: "k")): k = .kind
        case (4, UInt8(ascii: "m")): k = .mode
        case (4, UInt8(ascii: "r")): k = .rdev
        case (5, UInt8(ascii: "i")): k = .inode
        case (5, UInt8(ascii: "n")): k = .nlink
        case (6, UInt8(ascii: "s")): k = .sha256
        case (6, UInt8(ascii: "p")): k = .isPublic
        case (6, UInt8(ascii: "t")): k = .target
        case (6, UInt8(ascii: "u")): k = .upload
        case (7, UInt8(ascii: "s")): k = .success
        case (8, UInt8(ascii: "m")): k = written(.mtime) ? .mtime : .metadata
        case (8, UInt8(ascii: "a")): k = .atime
        case (8, UInt8(ascii: "c")): k = .ctime
        case (8, UInt8(ascii: "b")): k = .btime
        case (9, UInt8(ascii: "f")): k = written(.fileName) ? .fileName : .filePath
        case (9, UInt8(ascii: "n")): k = .namespace
        case (9, UInt8(ascii: "o")): k = .operation
        case (10, UInt8(ascii: "c")): k = .createdOn
        case (11, UInt8(ascii: "m")): k = .modifiedOn
        case (12, UInt8(ascii: "c")): k = .contentType
        default: return nil
        }
        guard written(k) else { return nil }
        self = k
    }

    /// The key as written.
    var name: StaticString {
        switch self {
        case .id: "_id"
        case .fileName: "file_name"
        case .filePath: "file_path"
        case .contentType: "content_type"
        case .namespace: "namespace"
        case .operation: "operation"
        case .size: "size"
        case .cdn: "cdn"
        case .success: "success"
        case .tags: "tags"
        case .createdOn: "created_on"
        case .modifiedOn: "modified_on"
        case .etag: "etag"
        case .sha256: "sha256"
        case .metadata: "metadata"
        case .isPublic: "public"
        case .kind: "kind"
        case .inode: "inode"
        case .mode: "mode"
        case .uid: "uid"
        case .gid: "gid"
        case .nlink: "nlink"
        case .atime: "atime_ns"
        case .mtime: "mtime_ns"
        case .ctime: "ctime_ns"
        case .target: "target"
        case .rdev: "rdev"
        case .upload: "upload"
        case .btime: "btime_ns"
        }
    }
}

/// The keys of one object read so far: a key given twice is left to JSONDecoder (which keeps the
/// first; this reader would keep the last).
package struct SeenKeys {
    var bits: UInt64 = 0
    package init() {}
    package mutating func first(_ index: Int) throws(JSONReader.Failure) {
        let bit: UInt64 = 1 << UInt64(index)
        guard bits & bit == 0 else { throw JSONReader.Failure() }
        bits |= bit
    }
}

/// A strict reader of JSON text, over bytes it does not own. Every read checks its bounds and
/// throws `Failure` on anything unexpected; it never traps.
package struct JSONReader {
    package struct Failure: Error {
        package init() {}
    }

    package let bytes: UnsafeRawBufferPointer
    package var at = 0
    var depth = 0

    package init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// Reads one value with `body`, then nothing but white space may follow.
    mutating func whole<T>(_ body: (inout JSONReader) throws(Failure) -> T) throws(Failure) -> T {
        let value = try body(&self)
        skipSpace()
        guard at == bytes.count else { throw Failure() }
        return value
    }

    package mutating func skipSpace() {
        while at < bytes.count {
            switch bytes[at] {
            case 0x20, 0x0A, 0x0D, 0x09: at += 1
            default: return
            }
        }
    }

    /// The next byte that is not white space (not consumed).
    package mutating func peek() throws(Failure) -> UInt8 {
        skipSpace()
        guard at < bytes.count else { throw Failure() }
        return bytes[at]
    }

    package mutating func take(_ byte: UInt8) throws(Failure) {
        guard try peek() == byte else { throw Failure() }
        at += 1
    }

    package mutating func literal(_ word: StaticString) throws(Failure) {
        skipSpace()
        let n = word.utf8CodeUnitCount
        guard bytes.count - at >= n else { throw Failure() }
        let matches = word.withUTF8Buffer { w in (0..<n).allSatisfy { bytes[at + $0] == w[$0] } }
        guard matches else { throw Failure() }
        at += n
    }

    /// A key of an object. Keys without escapes are compared as the bytes they are (no String is
    /// made for each of a record's 28 keys).
    package struct Key {
        let raw: UnsafeRawBufferPointer?
        let decoded: String?

        package static func == (key: Key, name: StaticString) -> Bool {
            name.withUTF8Buffer { n in
                // memcmp: a record's keys are matched against up to 29 names each.
                if let raw = key.raw { return raw.count == n.count && (n.count == 0 || memcmp(raw.baseAddress!, n.baseAddress!, n.count) == 0) }
                return key.decoded!.utf8.elementsEqual(n)
            }
        }

        package static func ~= (name: StaticString, key: Key) -> Bool { key == name }

        package var string: String { decoded ?? String(decoding: raw!, as: UTF8.self) }
    }

    /// An object's key: its bytes when it has no escape and is valid UTF-8, else decoded.
    mutating func key() throws(Failure) -> Key {
        guard try peek() == UInt8(ascii: "\"") else { throw Failure() }
        var end = at + 1
        while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\"), bytes[end] >= 0x20 { end += 1 }
        if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
            let raw = UnsafeRawBufferPointer(rebasing: bytes[(at + 1)..<end])
            if raw.allSatisfy({ $0 < 0x80 }) || String(validating: raw, as: UTF8.self) != nil {
                at = end + 1
                return Key(raw: raw, decoded: nil)
            }
        }
        return Key(raw: nil, decoded: try string())
    }

    /// `{ "key": value, … }`: `body` reads each value (or skips it).
    package mutating func object(_ body: (inout JSONReader, Key) throws(Failure) -> Void) throws(Failure) {
        try take(UInt8(ascii: "{"))
        depth += 1
        guard depth <= 64 else { throw Failure() }
        if try peek() == UInt8(ascii: "}") {
            at += 1
        } else {
            while true {
                let key = try key()
                try take(UInt8(ascii: ":"))
                try body(&self, key)
                let next = try peek()
                at += 1
                if next == UInt8(ascii: "}") { break }
                guard next == UInt8(ascii: ",") else { throw Failure() }
            }
        }
        depth -= 1
    }

    package mutating func array(_ body: (inout JSONReader) throws(Failure) -> Void) throws(Failure) {
        try take(UInt8(ascii: "["))
        depth += 1
        guard depth <= 64 else { throw Failure() }
        if try peek() == UInt8(ascii: "]") {
            at += 1
        } else {
            while true {
                try body(&self)
                let next = try peek()
                at += 1
                if next == UInt8(ascii: "]") { break }
                guard next == UInt8(ascii: ",") else { throw Failure() }
            }
        }
        depth -= 1
    }

    /// nil for `null`, else the value `body` reads.
    mutating func optional<T>(_ body: (inout JSONReader) throws(Failure) -> T) throws(Failure) -> T? {
        if try peek() == UInt8(ascii: "n") {
            try literal("null")
            return nil
        }
        return try body(&self)
    }

    package mutating func bool() throws(Failure) -> Bool {
        if try peek() == UInt8(ascii: "t") {
            try literal("true")
            return true
        }
        try literal("false")
        return false
    }

    /// An integer: an optional minus and digits, no leading zero, no fraction or exponent.
    package mutating func int64() throws(Failure) -> Int64 {
        var negative = false
        if try peek() == UInt8(ascii: "-") {
            negative = true
            at += 1
        }
        let magnitude = try digits()
        if negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { throw Failure() }
            return magnitude == UInt64(Int64.max) + 1 ? .min : -Int64(magnitude)
        }
        guard let v = Int64(exactly: magnitude) else { throw Failure() }
        return v
    }

    package mutating func uint64() throws(Failure) -> UInt64 {
        _ = try peek()
        return try digits()
    }

    private mutating func digits() throws(Failure) -> UInt64 {
        let start = at
        var value: UInt64 = 0
        while at < bytes.count, bytes[at] >= UInt8(ascii: "0"), bytes[at] <= UInt8(ascii: "9") {
            let (times, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(UInt64(bytes[at] - UInt8(ascii: "0")))
            guard !o1, !o2 else { throw Failure() }
            value = sum
            at += 1
        }
        guard at > start, !(at - start > 1 && bytes[start] == UInt8(ascii: "0")) else { throw Failure() }
        if at < bytes.count, bytes[at] == UInt8(ascii: ".") || bytes[at] == UInt8(ascii: "e") || bytes[at] == UInt8(ascii: "E") { throw Failure() }
        return value
    }

    package mutating func string() throws(Failure) -> String {
        try take(UInt8(ascii: "\""))
        let start = at
        // Most strings have no escape: taken as they are. Most are ASCII too, which needs no
        // validation: `String(validating:)` of raw bytes looked up generic metadata on every call
        // (a twentieth of the mount's instructions reading a listing of 1,000 files).
        var high: UInt8 = 0
        while at < bytes.count {
            let c = bytes[at]
            if c == UInt8(ascii: "\"") {
                let raw = UnsafeBufferPointer(start: bytes.baseAddress!.assumingMemoryBound(to: UInt8.self) + start, count: at - start)
                at += 1
                if high < 0x80 { return String(decoding: raw, as: UTF8.self) }
                guard let s = String(validating: raw, as: UTF8.self) else { throw Failure() }
                return s
            }
            if c == UInt8(ascii: "\\") || c < 0x20 { break }
            high |= c
            at += 1
        }
        var out = [UInt8](bytes[start..<at])
        while true {
            guard at < bytes.count else { throw Failure() }
            let c = bytes[at]
            at += 1
            switch c {
            case UInt8(ascii: "\""):
                guard let s = String(validating: out, as: UTF8.self) else { throw Failure() }
                return s
            case UInt8(ascii: "\\"):
                guard at < bytes.count else { throw Failure() }
                let e = bytes[at]
                at += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800..<0xDC00).contains(scalar) {
                        // A high surrogate: its low one must follow.
                        guard bytes.count - at >= 2, bytes[at] == UInt8(ascii: "\\"), bytes[at + 1] == UInt8(ascii: "u") else { throw Failure() }
                        at += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw Failure() }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let u = Unicode.Scalar(scalar) else { throw Failure() }
                    out.append(contentsOf: Array(String(Character(u)).utf8))
                default: throw Failure()
                }
            case 0..<0x20: throw Failure()
            default: out.append(c)
            }
        }
    }

    private mutating func hex4() throws(Failure) -> UInt32 {
        guard bytes.count - at >= 4 else { throw Failure() }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[at]
            at += 1
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw Failure()
            }
            v = v << 4 | d
        }
        return v
    }

    /// `[ … ]`: each element as `element` reads it.
    mutating func list<T>(_ element: (inout JSONReader) throws(Failure) -> T) throws(Failure) -> [T] {
        var out: [T] = []
        try array { r throws(Failure) in out.append(try element(&r)) }
        return out
    }

    package mutating func strings() throws(Failure) -> [String] {
        try list { r throws(Failure) in try r.string() }
    }

    package mutating func stringMap() throws(Failure) -> [String: String] {
        var out: [String: String] = [:]
        try object { r, key throws(Failure) in
            let k = key.string
            guard out[k] == nil else { throw Failure() }
            out[k] = try r.string()
        }
        return out
    }

    /// Passes over one value of any kind.
    package mutating func skipValue() throws(Failure) {
        switch try peek() {
        case UInt8(ascii: "{"): try object { r, _ throws(Failure) in try r.skipValue() }
        case UInt8(ascii: "["): try array { r throws(Failure) in try r.skipValue() }
        case UInt8(ascii: "\""): _ = try string()
        case UInt8(ascii: "t"), UInt8(ascii: "f"): _ = try bool()
        case UInt8(ascii: "n"): try literal("null")
        default:
            try skipNumber()
        }
    }

    /// A number as JSON writes it: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    private mutating func skipNumber() throws(Failure) {
        func isDigit(_ i: Int) -> Bool { i < bytes.count && bytes[i] >= UInt8(ascii: "0") && bytes[i] <= UInt8(ascii: "9") }
        if at < bytes.count, bytes[at] == UInt8(ascii: "-") { at += 1 }
        guard isDigit(at) else { throw Failure() }
        if bytes[at] == UInt8(ascii: "0") {
            at += 1
        } else {
            while isDigit(at) { at += 1 }
        }
        if at < bytes.count, bytes[at] == UInt8(ascii: ".") {
            at += 1
            guard isDigit(at) else { throw Failure() }
            while isDigit(at) { at += 1 }
        }
        if at < bytes.count, bytes[at] == UInt8(ascii: "e") || bytes[at] == UInt8(ascii: "E") {
            at += 1
            if at < bytes.count, bytes[at] == UInt8(ascii: "+") || bytes[at] == UInt8(ascii: "-") { at += 1 }
            guard isDigit(at) else { throw Failure() }
            while isDigit(at) { at += 1 }
        }
    }
}
