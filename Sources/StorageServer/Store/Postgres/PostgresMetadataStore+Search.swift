import Foundation
import PostgresNIO
public import StorageProtocol

/// Search on PostgreSQL: GIN indexes on `tags` (all of: `@>`, any of: `?|`) and on `metadata`
/// (`@>`), a B-tree on content types and a partial one on each namespace's folders (`PostgresSchema.search`).
extension PostgresMetadataStore {
    public func search(_ ns: Namespace, _ filter: SearchFilter, after: SearchCursor?, limit: Int) async throws -> SearchPage {
        var binds = PostgresBindings()
        var n = 0
        func bind(_ v: SearchConditions.SearchValue) -> String {
            switch v {
            case .text(let s): binds.append(s)
            case .int(let i): binds.append(i)
            case .bool(let b): binds.append(b)
            }
            n += 1
            return "$\(n)"
        }
        func bindArray(_ a: [String]) -> String {
            binds.append(a)
            n += 1
            return "$\(n)"
        }
        let nsParam = bind(.text(ns.name))
        var clauses = ["i.namespace = \(nsParam)"]
        var prefix = ""
        var from = "entries e JOIN inodes i ON i.ino = e.ino"
        if let folder = filter.path, !folder.isRoot {
            let segs = bindArray(folder.segments)
            prefix = """
                WITH RECURSIVE ns_folders AS MATERIALIZED (
                    SELECT d.ino, e.parent FROM inodes d JOIN entries e ON e.ino = d.ino WHERE d.namespace = \(nsParam) AND d.kind = 'dir'),
                below(ino) AS (SELECT stow_resolve_folder(stow_root(\(nsParam)), \(segs)::text[])
                               UNION SELECT f.ino FROM ns_folders f JOIN below ON f.parent = below.ino)
                """
            if filter.tags.isEmpty && filter.anyTags.isEmpty && filter.metadata.isEmpty {
                // No GIN term: the folders' entries are the rows (then sorted), not every inode in
                // order until the page is full — which, for a folder of 1,000 among 1,000,000
                // files, read them all (1.1 s). Each folder's entries by the primary key (the
                // `OFFSET 0` keeps PostgreSQL from hashing all entries instead: 230 ms).
                prefix += """
                    ,
                    candidates AS MATERIALIZED (SELECT e.parent, e.name, e.ino FROM below b
                        CROSS JOIN LATERAL (SELECT x.parent, x.name, x.ino FROM entries x WHERE x.parent = b.ino OFFSET 0) e)

                    """
                from = "candidates e JOIN inodes i ON i.ino = e.ino"
            } else {
                prefix += "\n"
                clauses.append("e.parent IN (SELECT ino FROM below)")
            }
        }
        // The shared conditions, their `?` numbered in order.
        let common = SearchConditions.common(filter, typeColumn: "(i.content_type COLLATE \"C\")")
        var values = common.values.makeIterator()
        for clause in common.clauses {
            var out = ""
            for ch in clause {
                if ch == "?", let v = values.next() { out += bind(v) } else { out.append(ch) }
            }
            clauses.append(out)
        }
        if !filter.tags.isEmpty {
            clauses.append("i.tags @> \(bind(.text(Self.json(filter.tags))))::jsonb")
        }
        if !filter.anyTags.isEmpty {
            clauses.append("i.tags ?| \(bindArray(filter.anyTags))::text[]")
        }
        if !filter.metadata.isEmpty {
            clauses.append("i.metadata @> \(bind(.text(Self.json(filter.metadata))))::jsonb")
        }
        if let glob = filter.name { clauses.append("e.name ~ \(bind(.text(glob.postgresRegex)))") }
        if let needle = filter.nameContains {
            clauses.append("strpos(lower(e.name), lower(\(bind(.text(needle)))::text COLLATE \"C\")) > 0")
        }
        if let after {
            clauses.append("(i.ino, e.parent, e.name) > (\(bind(.int(after.ino))), \(bind(.int(after.parent))), \(bind(.text(after.name))))")
        }
        let limitParam = bind(.int(Int64(limit) + 1))
        let sql = """
            \(prefix)SELECT e.parent AS s_parent, e.name AS s_name, stow_path(e.parent) AS s_folder, \(Self.inodeColumns("i."))
            FROM \(from)
            WHERE \(clauses.joined(separator: " AND ")) ORDER BY i.ino, e.parent, e.name LIMIT \(limitParam)
            """
        let rows = try await rows(PostgresQuery(unsafeSQL: sql, binds: binds))
        if rows.isEmpty, try await namespace(ns) == nil { throw StoreError.namespaceNotFound(ns) }
        var nodes: [Node] = []
        var last: SearchCursor?
        let columns = rows.first.map(InodeColumns.init)
        for row in rows.prefix(limit) {
            let parent = try row["s_parent"].decode(Int64.self)
            let name = try row["s_name"].decode(String.self)
            // Every row read moves the cursor, one left out too (else a page of them would end the search).
            last = SearchCursor(ino: try row["ino"].decode(Int64.self), parent: parent, name: name)
            guard let segments = try row["s_folder"].decode([String]?.self) else { continue }
            let inode = try Self.decodeInode(row, columns)
            nodes.append(Node(namespace: ns, path: try StoragePath(segments: segments + [name]), inode: inode))
        }
        return SearchPage(nodes: nodes, next: rows.count > limit ? last : nil)
    }
}
