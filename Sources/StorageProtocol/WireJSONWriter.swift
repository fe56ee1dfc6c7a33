/// The API's largest answers — listings and searches, up to a thousand records each — written by
/// hand, with exactly the bytes `WireJSON.encoder()` writes (keys sorted by their UTF-8 bytes,
/// slashes not escaped, control characters as `\n` or `\u001f`, everything else as is).
/// JSONEncoder took half of `stowd`'s time for a page of 1,000 records (`perf` of a browse loop);
/// this takes a few microseconds per record. `WireJSONTests` checks the two agree byte for
/// byte on records made to be awkward.
public protocol WireJSONWritable: Encodable {
    func writeWireJSON(to out: inout [UInt8])
}

/// Pieces of JSON, as JSONEncoder (with WireJSON's options) writes them. Public for the mount's
/// own files written the same way (its tree snapshot).
public enum JSONOut {
    public static func string(_ s: String, _ out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escape: copied whole.
        let copied: Bool? = s.utf8.withContiguousStorageIfAvailable { bytes in
            for b in bytes where b < 0x20 || b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") { return false }
            out.append(contentsOf: bytes)
            return true
        }
        if copied == true {
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "\\"))
            case 0x08: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "b"))
            case 0x0C: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "f"))
            case 0x0A: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "t"))
            case 0x00..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: Array(#"\u00"#.utf8))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// `"key":`, for keys known to need no escaping.
    public static func key(_ k: StaticString, _ out: inout [UInt8], first: Bool = false) {
        if !first { out.append(UInt8(ascii: ",")) }
        out.append(UInt8(ascii: "\""))
        k.withUTF8Buffer { out.append(contentsOf: $0) }
        out.append(UInt8(ascii: "\""))
        out.append(UInt8(ascii: ":"))
    }

    /// Its decimal digits, written straight into `out` (a String per number was a tenth of a
    /// listing's time in stowd).
    public static func number(_ n: some BinaryInteger, _ out: inout [UInt8]) {
        if n < 0 {
            out.append(UInt8(ascii: "-"))
        }
        // The magnitude, as UInt64 (Int64.min's too).
        var m: UInt64 = n < 0 ? UInt64(0) &- UInt64(truncatingIfNeeded: Int64(n)) : UInt64(n)
        if m < 10 {
            out.append(UInt8(ascii: "0") + UInt8(m))
            return
        }
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits
        withUnsafeMutableBytes(of: &digits) { buffer in
            var i = buffer.count
            while m > 0 {
                i -= 1
                buffer[i] = UInt8(ascii: "0") + UInt8(m % 10)
                m /= 10
            }
            out.append(contentsOf: buffer[i...])
        }
    }

    public static func bool(_ b: Bool, _ out: inout [UInt8]) {
        out.append(contentsOf: (b ? "true" : "false").utf8)
    }

    public static func strings(_ list: [String], _ out: inout [UInt8]) {
        out.append(UInt8(ascii: "["))
        for (i, s) in list.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            string(s, &out)
        }
        out.append(UInt8(ascii: "]"))
    }

    /// A map of strings, its keys sorted by their UTF-8 bytes (as JSONEncoder sorts them).
    public static func map(_ map: [String: String], _ out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        for (i, k) in map.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }).enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            string(k, &out)
            out.append(UInt8(ascii: ":"))
            string(map[k]!, &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    /// Anything else, through JSONEncoder (its sorted output is the same wherever it is spliced).
    static func encoded(_ value: some Encodable, _ out: inout [UInt8]) {
        out.append(contentsOf: WireJSON.encodedByFoundation(value))
    }

    static func records(_ list: [some WireJSONWritable], _ out: inout [UInt8]) {
        out.reserveCapacity(out.count + list.count * 512)
        out.append(UInt8(ascii: "["))
        for (i, r) in list.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            r.writeWireJSON(to: &out)
        }
        out.append(UInt8(ascii: "]"))
    }
}

extension JSONOut {
    /// A browse page, of either kind of record.
    static func browsePage<R: WireJSONWritable>(folders: [R], items: [R], page: PageInfo, _ out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        key("folders", &out, first: true); records(folders, &out)
        key("items", &out); records(items, &out)
        key("page", &out); page.writeWireJSON(to: &out)
        out.append(UInt8(ascii: "}"))
    }
}

extension FileRecord: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        JSONOut.key("_id", &out, first: true); JSONOut.string(id, &out)
        JSONOut.key("atime_ns", &out); JSONOut.number(atimeNs, &out)
        JSONOut.key("cdn", &out); cdn.writeWireJSON(to: &out)
        JSONOut.key("content_type", &out); JSONOut.string(contentType, &out)
        JSONOut.key("created_on", &out); JSONOut.string(createdOn, &out)
        JSONOut.key("ctime_ns", &out); JSONOut.number(ctimeNs, &out)
        JSONOut.key("etag", &out); JSONOut.string(etag, &out)
        JSONOut.key("file_name", &out); JSONOut.string(fileName, &out)
        JSONOut.key("file_path", &out); JSONOut.string(filePath, &out)
        if let gid { JSONOut.key("gid", &out); JSONOut.number(gid, &out) }
        JSONOut.key("inode", &out); JSONOut.number(inode, &out)
        JSONOut.key("kind", &out); JSONOut.string(kind.rawValue, &out)
        JSONOut.key("metadata", &out); JSONOut.map(metadata, &out)
        if let mode { JSONOut.key("mode", &out); JSONOut.number(mode, &out) }
        JSONOut.key("modified_on", &out); JSONOut.string(modifiedOn, &out)
        JSONOut.key("mtime_ns", &out); JSONOut.number(mtimeNs, &out)
        JSONOut.key("namespace", &out); JSONOut.string(namespace, &out)
        JSONOut.key("nlink", &out); JSONOut.number(nlink, &out)
        JSONOut.key("operation", &out); JSONOut.string(operation, &out)
        JSONOut.key("public", &out); JSONOut.bool(isPublic, &out)
        if let rdev { JSONOut.key("rdev", &out); JSONOut.number(rdev, &out) }
        if let sha256 { JSONOut.key("sha256", &out); JSONOut.string(sha256, &out) }
        JSONOut.key("size", &out); JSONOut.number(size, &out)
        JSONOut.key("success", &out); JSONOut.bool(success, &out)
        JSONOut.key("tags", &out); JSONOut.strings(tags, &out)
        if let target { JSONOut.key("target", &out); JSONOut.string(target, &out) }
        if let uid { JSONOut.key("uid", &out); JSONOut.number(uid, &out) }
        if let upload { JSONOut.key("upload", &out); JSONOut.encoded(upload, &out) }
        out.append(UInt8(ascii: "}"))
    }
}

extension PosixRecord: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        JSONOut.key("atime_ns", &out, first: true); JSONOut.number(atimeNs, &out)
        JSONOut.key("btime_ns", &out); JSONOut.number(btimeNs, &out)
        JSONOut.key("content_type", &out); JSONOut.string(contentType, &out)
        JSONOut.key("ctime_ns", &out); JSONOut.number(ctimeNs, &out)
        JSONOut.key("etag", &out); JSONOut.string(etag, &out)
        JSONOut.key("file_name", &out); JSONOut.string(fileName, &out)
        if let gid { JSONOut.key("gid", &out); JSONOut.number(gid, &out) }
        JSONOut.key("inode", &out); JSONOut.number(inode, &out)
        JSONOut.key("kind", &out); JSONOut.string(kind.rawValue, &out)
        JSONOut.key("metadata", &out); JSONOut.map(metadata, &out)
        if let mode { JSONOut.key("mode", &out); JSONOut.number(mode, &out) }
        JSONOut.key("mtime_ns", &out); JSONOut.number(mtimeNs, &out)
        JSONOut.key("nlink", &out); JSONOut.number(nlink, &out)
        JSONOut.key("public", &out); JSONOut.bool(isPublic, &out)
        if let rdev { JSONOut.key("rdev", &out); JSONOut.number(rdev, &out) }
        if let sha256 { JSONOut.key("sha256", &out); JSONOut.string(sha256, &out) }
        JSONOut.key("size", &out); JSONOut.number(size, &out)
        JSONOut.key("tags", &out); JSONOut.strings(tags, &out)
        if let target { JSONOut.key("target", &out); JSONOut.string(target, &out) }
        if let uid { JSONOut.key("uid", &out); JSONOut.number(uid, &out) }
        out.append(UInt8(ascii: "}"))
    }
}

extension CDNLink: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        JSONOut.key("absolute_url", &out, first: true); JSONOut.string(absoluteUrl, &out)
        JSONOut.key("relative_url", &out); JSONOut.string(relativeUrl, &out)
        JSONOut.key("url", &out); JSONOut.string(url, &out)
        out.append(UInt8(ascii: "}"))
    }
}

extension PageInfo: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        JSONOut.key("current", &out, first: true); JSONOut.number(current, &out)
        JSONOut.key("has_next", &out); JSONOut.bool(hasNext, &out)
        JSONOut.key("item_total", &out); JSONOut.number(itemTotal, &out)
        if let nextId { JSONOut.key("next_id", &out); JSONOut.string(nextId, &out) }
        JSONOut.key("size", &out); JSONOut.number(size, &out)
        if let splits {
            JSONOut.key("splits", &out)
            out.append(UInt8(ascii: "["))
            for (i, split) in splits.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                out.append(UInt8(ascii: "{"))
                JSONOut.key("name", &out, first: true); JSONOut.string(split.name, &out)
                JSONOut.key("next_id", &out); JSONOut.string(split.nextId, &out)
                out.append(UInt8(ascii: "}"))
            }
            out.append(UInt8(ascii: "]"))
        }
        JSONOut.key("type", &out); JSONOut.string(type, &out)
        out.append(UInt8(ascii: "}"))
    }
}

extension BrowseResponse: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) { JSONOut.browsePage(folders: folders, items: items, page: page, &out) }
}

extension PosixBrowseResponse: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) { JSONOut.browsePage(folders: folders, items: items, page: page, &out) }
}

extension SearchResponse: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        JSONOut.key("items", &out, first: true); JSONOut.records(items, &out)
        if let nextCursor { JSONOut.key("next_cursor", &out); JSONOut.string(nextCursor, &out) }
        out.append(UInt8(ascii: "}"))
    }
}

/// A batch's answer: a record per stored file (`perf` of `stowd` storing small files in batches:
/// JSONEncoder took 9% of its time for these).
extension BatchUpload.Response: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        out.reserveCapacity(out.count + results.count * 600)
        out.append(contentsOf: Array(#"{"results":["#.utf8))
        for (i, r) in results.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            var first = true
            if let error = r.error {
                JSONOut.key("error", &out, first: first); first = false
                JSONOut.encoded(error, &out)
            }
            if let file = r.file {
                JSONOut.key("file", &out, first: first); first = false
                file.writeWireJSON(to: &out)
            }
            if let status = r.status {
                JSONOut.key("status", &out, first: first)
                JSONOut.number(status, &out)
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: Array("]}".utf8))
    }
}

extension JSONOut {
    /// `"key":` after the keys before it, if any: for objects whose every key may be absent.
    static func key(_ k: StaticString, _ out: inout [UInt8], after first: inout Bool) {
        key(k, &out, first: first)
        first = false
    }
}

/// An upload's extras: written with every upload a mount starts and every record it journals
/// (`perf` of a mount under `tar x`: JSONEncoder was 5% of its time, most of it for these).
extension UploadParams: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        var first = true
        out.append(UInt8(ascii: "{"))
        if let atimeNs { JSONOut.key("atime_ns", &out, after: &first); JSONOut.number(atimeNs, &out) }
        if let ctimeNs { JSONOut.key("ctime_ns", &out, after: &first); JSONOut.number(ctimeNs, &out) }
        if let gid { JSONOut.key("gid", &out, after: &first); JSONOut.number(gid, &out) }
        if let ifMatch { JSONOut.key("if_match", &out, after: &first); JSONOut.string(ifMatch, &out) }
        if let ifNoneMatch { JSONOut.key("if_none_match", &out, after: &first); JSONOut.string(ifNoneMatch, &out) }
        if let metadata { JSONOut.key("metadata", &out, after: &first); JSONOut.map(metadata, &out) }
        if let mode { JSONOut.key("mode", &out, after: &first); JSONOut.number(mode, &out) }
        if let mtimeNs { JSONOut.key("mtime_ns", &out, after: &first); JSONOut.number(mtimeNs, &out) }
        if let isPublic { JSONOut.key("public", &out, after: &first); JSONOut.bool(isPublic, &out) }
        if let sha256 { JSONOut.key("sha256", &out, after: &first); JSONOut.string(sha256, &out) }
        if let uid { JSONOut.key("uid", &out, after: &first); JSONOut.number(uid, &out) }
        if let zerosFrom { JSONOut.key("zeros_from", &out, after: &first); JSONOut.number(zerosFrom, &out) }
        out.append(UInt8(ascii: "}"))
    }
}

extension StartUploadRequest: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        var first = true
        if let contentType { JSONOut.key("content_type", &out, after: &first); JSONOut.string(contentType, &out) }
        if let deferLength { JSONOut.key("defer_length", &out, after: &first); JSONOut.bool(deferLength, &out) }
        JSONOut.key("file_name", &out, after: &first); JSONOut.string(fileName, &out)
        if let params { JSONOut.key("params", &out); params.writeWireJSON(to: &out) }
        JSONOut.key("size", &out); JSONOut.number(size, &out)
        if let tags { JSONOut.key("tags", &out); JSONOut.strings(tags, &out) }
        out.append(UInt8(ascii: "}"))
    }
}

/// A batch's declaration: a mount sends one per batch of small files.
extension BatchUpload.Request: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        out.append(contentsOf: Array(#"{"files":"#.utf8))
        JSONOut.records(files, &out)
        out.append(UInt8(ascii: "}"))
    }
}

/// The change feed's answers: every mount following a namespace reads one after each change it
/// waits on (`perf` of a mount storing 2,000 files: JSONDecoder of these was 8% of its time).
extension ChangesResponse: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        JSONOut.key("changes", &out, first: true); JSONOut.records(changes, &out)
        JSONOut.key("cursor", &out); JSONOut.string(cursor, &out)
        JSONOut.key("reset", &out); JSONOut.bool(reset, &out)
        out.append(UInt8(ascii: "}"))
    }
}

extension ChangeRecord: WireJSONWritable {
    public func writeWireJSON(to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        JSONOut.key("cursor", &out, first: true); JSONOut.string(cursor, &out)
        JSONOut.key("ino", &out); JSONOut.number(ino, &out)
        JSONOut.key("kind", &out); JSONOut.string(kind.rawValue, &out)
        if let name { JSONOut.key("name", &out); JSONOut.string(name, &out) }
        if let origin { JSONOut.key("origin", &out); JSONOut.string(origin, &out) }
        if let parent { JSONOut.key("parent", &out); JSONOut.number(parent, &out) }
        JSONOut.key("removed", &out); JSONOut.bool(removed, &out)
        out.append(UInt8(ascii: "}"))
    }
}
