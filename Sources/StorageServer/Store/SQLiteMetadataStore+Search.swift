import Foundation
import GRDB
import Synchronization
public import StorageProtocol

/// Search on SQLite: tags and metadata copied by triggers into indexed tables (`inode_tags`,
/// `inode_meta`, one row per tag or key of an inode), an index on content types and one on the
/// folders of each namespace (for `path`).
extension SQLiteMetadataStore {
    static func searchMigration(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE inode_tags (
                    namespace TEXT NOT NULL,
                    tag TEXT NOT NULL,
                    ino INTEGER NOT NULL,
                    PRIMARY KEY (namespace, tag, ino)
                ) WITHOUT ROWID;
                CREATE INDEX inode_tags_by_ino ON inode_tags(ino);
                CREATE TABLE inode_meta (
                    namespace TEXT NOT NULL,
                    key TEXT NOT NULL,
                    value TEXT NOT NULL,
                    ino INTEGER NOT NULL,
                    PRIMARY KEY (namespace, key, value, ino)
                ) WITHOUT ROWID;
                CREATE INDEX inode_meta_by_ino ON inode_meta(ino);
                CREATE INDEX inodes_by_type ON inodes(namespace, content_type);
                CREATE INDEX inodes_folders ON inodes(namespace) WHERE kind = 'dir';

                CREATE TRIGGER search_inode_made AFTER INSERT ON inodes WHEN NEW.tags <> '[]' OR NEW.metadata <> '{}' BEGIN
                    INSERT OR IGNORE INTO inode_tags(namespace, tag, ino)
                        SELECT NEW.namespace, value, NEW.ino FROM json_each(NEW.tags) WHERE type = 'text';
                    INSERT OR IGNORE INTO inode_meta(namespace, key, value, ino)
                        SELECT NEW.namespace, key, value, NEW.ino FROM json_each(NEW.metadata) WHERE type = 'text';
                END;
                CREATE TRIGGER search_tags_changed AFTER UPDATE OF tags ON inodes WHEN NEW.tags IS NOT OLD.tags BEGIN
                    DELETE FROM inode_tags WHERE ino = OLD.ino;
                    INSERT OR IGNORE INTO inode_tags(namespace, tag, ino)
                        SELECT NEW.namespace, value, NEW.ino FROM json_each(NEW.tags) WHERE type = 'text';
                END;
                CREATE TRIGGER search_metadata_changed AFTER UPDATE OF metadata ON inodes WHEN NEW.metadata IS NOT OLD.metadata BEGIN
                    DELETE FROM inode_meta WHERE ino = OLD.ino;
                    INSERT OR IGNORE INTO inode_meta(namespace, key, value, ino)
                        SELECT NEW.namespace, key, value, NEW.ino FROM json_each(NEW.metadata) WHERE type = 'text';
                END;
                CREATE TRIGGER search_inode_removed AFTER DELETE ON inodes BEGIN
                    DELETE FROM inode_tags WHERE ino = OLD.ino;
                    DELETE FROM inode_meta WHERE ino = OLD.ino;
                END;

                INSERT OR IGNORE INTO inode_tags(namespace, tag, ino)
                    SELECT i.namespace, j.value, i.ino FROM inodes i, json_each(i.tags) j WHERE i.tags <> '[]' AND j.type = 'text';
                INSERT OR IGNORE INTO inode_meta(namespace, key, value, ino)
                    SELECT i.namespace, j.key, j.value, i.ino FROM inodes i, json_each(i.metadata) j WHERE i.metadata <> '{}' AND j.type = 'text';
                """)
    }

    /// `stow_glob(pattern, name)`: `NameGlob.matches`, for the patterns SQLite's GLOB reads otherwise.
    /// Each pattern is parsed once per connection (not once per row), a few kept.
    static func addSearchFunctions(_ db: Database) {
        let parsed = GlobCache()
        db.add(function: DatabaseFunction("stow_glob", argumentCount: 2, pure: true) { values in
            guard let pattern = String.fromDatabaseValue(values[0].databaseValue), let name = String.fromDatabaseValue(values[1].databaseValue),
                let glob = parsed.glob(pattern)
            else { return false }
            return glob.matches(name)
        })
    }

    public func search(_ ns: Namespace, _ filter: SearchFilter, after: SearchCursor?, limit: Int) async throws -> SearchPage {
        try await pool.read { db in
            guard try Self.namespaceInfo(db, ns) != nil else { throw StoreError.namespaceNotFound(ns) }
            var c = SearchConditions.common(filter)
            var prefix = ""
            var prefixValues: [SearchConditions.SearchValue] = []
            if let folder = filter.path, !folder.isRoot {
                let ino = try Self.resolveFolder(db, ns, folder)
                // The folders below it, from the namespace's folders alone (an index holds them): a
                // walk of every entry below would read every file.
                prefix = """
                    WITH RECURSIVE ns_folders(ino, parent) AS MATERIALIZED (
                        SELECT d.ino, e.parent FROM inodes d JOIN entries e ON e.ino = d.ino WHERE d.namespace = ? AND d.kind = 'dir'),
                    below(ino) AS (SELECT ? UNION SELECT f.ino FROM ns_folders f JOIN below ON f.parent = below.ino)

                    """
                prefixValues = [.text(ns.name), .int(ino)]
                c.add("e.parent IN (SELECT ino FROM below)")
            }
            // What drives the query, so that a page costs what it returns (measured on 1,000,000
            // files, docs/performance.md): the first tag's or metadata term's index, read in inode
            // order and left as soon as the page is full; else the folders below `path`, whose
            // entries are sorted; else SQLite's choice. `CROSS JOIN` fixes the order of the loops,
            // `+i.namespace` keeps SQLite from reading every inode of the namespace instead.
            var from = "entries e JOIN inodes i ON i.ino = e.ino"
            var order = "i.ino"
            var driven = false
            var tags = filter.tags
            var metadata = filter.metadata.sorted(by: { $0.key < $1.key })
            if let first = tags.first {
                tags.removeFirst()
                from = "inode_tags d CROSS JOIN inodes i ON i.ino = d.ino CROSS JOIN entries e ON e.ino = i.ino"
                c.add("d.namespace = ? AND d.tag = ?", .text(ns.name), .text(first))
                order = "d.ino"
                driven = true
            } else if let (key, value) = metadata.first {
                metadata.removeFirst()
                from = "inode_meta d CROSS JOIN inodes i ON i.ino = d.ino CROSS JOIN entries e ON e.ino = i.ino"
                c.add("d.namespace = ? AND d.key = ? AND d.value = ?", .text(ns.name), .text(key), .text(value))
                order = "d.ino"
                driven = true
            } else if !prefix.isEmpty && filter.anyTags.isEmpty {
                from = "below b CROSS JOIN entries e ON e.parent = b.ino CROSS JOIN inodes i ON i.ino = e.ino"
                c.clauses.removeAll { $0 == "e.parent IN (SELECT ino FROM below)" }
                driven = true
            }
            c.add(driven || !filter.anyTags.isEmpty ? "+i.namespace = ?" : "i.namespace = ?", .text(ns.name))
            for tag in tags {
                c.add("i.ino IN (SELECT ino FROM inode_tags WHERE namespace = ? AND tag = ?)", .text(ns.name), .text(tag))
            }
            if !filter.anyTags.isEmpty {
                let marks = Array(repeating: "?", count: filter.anyTags.count).joined(separator: ", ")
                c.clauses.append("i.ino IN (SELECT ino FROM inode_tags WHERE namespace = ? AND tag IN (\(marks)))")
                c.values += [.text(ns.name)] + filter.anyTags.map { .text($0) }
            }
            for (key, value) in metadata {
                c.add("i.ino IN (SELECT ino FROM inode_meta WHERE namespace = ? AND key = ? AND value = ?)", .text(ns.name), .text(key), .text(value))
            }
            if let glob = filter.name {
                if glob.sqliteGlobIsExact {
                    c.add("e.name GLOB ?", .text(glob.sqliteGlob))
                } else {
                    c.add("stow_glob(?, e.name)", .text(glob.pattern))
                }
            }
            if let needle = filter.nameContains { c.add("instr(lower(e.name), lower(?)) > 0", .text(needle)) }
            if let after {
                c.add("\(order) >= ? AND (\(order), e.parent, e.name) > (?, ?, ?)", .int(after.ino), .int(after.ino), .int(after.parent), .text(after.name))
            }
            let sql = """
                \(prefix)SELECT e.parent AS s_parent, e.name AS s_name, i.* FROM \(from)
                WHERE \(c.clauses.joined(separator: " AND ")) ORDER BY \(order), e.parent, e.name LIMIT ?
                """
            let values: [(any DatabaseValueConvertible)?] = (prefixValues + c.values).map { v in
                switch v {
                case .text(let s): s
                case .int(let n): n
                case .bool(let b): b
                }
            } + [limit + 1]
            let rows = try Row.fetchAll(db, sql: sql, arguments: StatementArguments(values))
            var folders: [Int64: StoragePath] = [:]
            var nodes: [Node] = []
            var last: SearchCursor?
            let columns = try rows.first.map(InodeColumns.init)
            for row in rows.prefix(limit) {
                let parent: Int64 = row["s_parent"]
                let name: String = row["s_name"]
                let ino: Int64 = row["ino"]
                // Every row read moves the cursor, one left out too (else a page of them would end the search).
                last = SearchCursor(ino: ino, parent: parent, name: name)
                let folderPath: StoragePath
                if let known = folders[parent] {
                    folderPath = known
                } else {
                    guard let p = try Self.path(db, of: parent, in: ns) else { continue }
                    folders[parent] = p
                    folderPath = p
                }
                let inode = try Self.decodeInode(row, columns!)
                nodes.append(Node(namespace: ns, path: try folderPath.appending(name), inode: inode))
            }
            return SearchPage(nodes: nodes, next: rows.count > limit ? last : nil)
        }
    }
}

/// Parsed globs of one connection's `stow_glob`, by pattern (at most 16).
final class GlobCache: Sendable {
    private let globs = Mutex<[String: NameGlob]>([:])

    func glob(_ pattern: String) -> NameGlob? {
        if let known = globs.withLock({ $0[pattern] }) { return known }
        guard let glob = try? NameGlob(pattern) else { return nil }
        globs.withLock { map in
            if map.count >= 16 { map.removeAll() }
            map[pattern] = glob
        }
        return glob
    }
}
