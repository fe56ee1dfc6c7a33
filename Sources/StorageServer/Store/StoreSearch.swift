import Foundation
import StorageProtocol

/// Where a page of search results ends. Results come in the order (inode, folder inode, name), so
/// a page continues after the last one it gave, whatever changed meanwhile.
public struct SearchCursor: Sendable, Equatable {
    public var ino: Int64
    public var parent: Int64
    public var name: String

    public init(ino: Int64, parent: Int64, name: String) {
        self.ino = ino
        self.parent = parent
        self.name = name
    }

    /// As given to clients: opaque (base64url of `ino.parent.name`).
    public var encoded: String { Base64URL.encode(Data("\(ino).\(parent).\(name)".utf8)) }

    public init?(encoded: String) {
        guard encoded.utf8.count <= 8192, let data = Base64URL.decode(encoded), let text = String(data: data, encoding: .utf8) else { return nil }
        let parts = text.split(separator: ".", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, let ino = Int64(parts[0]), let parent = Int64(parts[1]), !parts[2].isEmpty, !parts[2].utf8.contains(0) else { return nil }
        self.init(ino: ino, parent: parent, name: String(parts[2]))
    }
}

public struct SearchPage: Sendable, Equatable {
    public var nodes: [Node]
    public var next: SearchCursor?
}

/// The SQL both stores share for a search's conditions on one result row (`e`: its entry, `i`: its
/// inode). Each store adds its own for tags and metadata (a table on SQLite, GIN indexes on
/// PostgreSQL) and for the folder (the folders below it).
struct SearchConditions {
    /// SQL conditions with `?` for each value, in order.
    var clauses: [String] = []
    var values: [SearchValue] = []

    enum SearchValue: Sendable {
        case text(String)
        case int(Int64)
        case bool(Bool)
    }

    mutating func add(_ clause: String, _ values: SearchValue...) {
        clauses.append(clause)
        self.values += values
    }

    /// The conditions of everything but tags, metadata, the name glob and the folder.
    /// `typeColumn`: how the store names the content type so that it compares by bytes
    /// (PostgreSQL: `COLLATE "C"`, whatever the database's collation).
    static func common(_ f: SearchFilter, typeColumn: String = "i.content_type") -> SearchConditions {
        var c = SearchConditions()
        switch f.kind {
        case .files: c.add("i.kind <> 'dir'")
        case .folders: c.add("i.kind = 'dir'")
        case .all: break
        }
        let ct = f.contentTypeMatch
        if let exact = ct.exact { c.add("\(typeColumn) = ?", .text(exact)) }
        // `type/` … `type0`: '0' is the character after '/', so the range is every `type/…`, and
        // an index on content_type serves it.
        if let prefix = ct.prefix { c.add("\(typeColumn) >= ? AND \(typeColumn) < ?", .text(prefix), .text(String(prefix.dropLast()) + "0")) }
        if let p = f.isPublic { c.add("i.public = ?", .bool(p)) }
        if let m = f.minSize { c.add("i.size >= ?", .int(m)) }
        if let m = f.maxSize { c.add("i.size <= ?", .int(m)) }
        if let t = f.modifiedAfterNs { c.add("i.mtime_ns >= ?", .int(t)) }
        if let t = f.modifiedBeforeNs { c.add("i.mtime_ns < ?", .int(t)) }
        return c
    }
}
