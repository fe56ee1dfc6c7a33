/// The PostgreSQL schema of stowd, as numbered migrations.
///
/// Each migration is a list of statements applied in one transaction, under an advisory lock, and
/// recorded in `stow_migrations` (see `PostgresMetadataStore.migrate`). A migration, once released,
/// is never edited: a change is a new migration with the next number.
///
/// The model is the SQLite store's (`SQLiteMetadataStore`): `entries(parent, name → ino)` and
/// `inodes`. Every mutation is one call of a PL/pgSQL function, so it costs one round trip and is
/// one transaction (READ COMMITTED). Inside, as in JuiceFS's SQL engine:
///
/// - the inode rows a mutation changes are locked `FOR UPDATE` in ascending inode order
///   (`stow_lock`), and the names it resolved before are checked again once they are locked; a
///   name that moved in between raises `SN040`, and the store runs the call again;
/// - creating a name in a folder locks the folder's row, so `rmdir` of that folder (which locks it
///   too, then counts its children) cannot cross it;
/// - every mutation holds the namespace's *tree lock* (a transaction advisory lock) shared; what
///   changes a folder's path — moving or renaming a folder, deleting the namespace — holds it
///   exclusively (`stow_rename` finds out it moves a folder, raises `SN041`, and runs again with
///   it). So no mutation acts on a folder found by a path that a concurrent move has changed, and a
///   folder move checks, by inode, that the folder does not go below itself: two clients moving two
///   folders into each other at once cannot make a cycle.
///
/// Names are `text COLLATE "C"`: equal only when their bytes are equal, ordered by their bytes,
/// like SQLite's BINARY (and `FileName` in Swift). Refusals raise SQLSTATEs of class `SN` with the
/// path in DETAIL; `PostgresMetadataStore` turns them into `StoreError`s:
///
/// | SQLSTATE | StoreError |
/// | --- | --- |
/// | SN001 | namespaceNotFound (DETAIL: the namespace) |
/// | SN002 | notFound | SN003 exists | SN004 notEmpty | SN005 notADirectory | SN006 isADirectory (DETAIL: the path) |
/// | SN007 | invalidRename | SN008 preconditionFailed | SN009 conflict | SN010 badRequest (MESSAGE: the text) |
/// | SN040 | none: something changed between resolving and locking; the call runs again |
/// | SN041 | none: `stow_rename` moves a folder; the call runs again with the tree lock exclusive |
enum PostgresSchema {
    struct Migration: Sendable {
        var version: Int
        var name: String
        var statements: [String]
    }

    static let migrations: [Migration] = [tables, functions, stagingLedger, changeFeed, locks, lockNotifications, trimBelowHead, search, removeFiles, exchangeIf]

    static let tables = Migration(
        version: 1, name: "tables",
        statements: [
            "CREATE SEQUENCE stow_inode_numbers START WITH 16",
            """
            CREATE TABLE namespaces (
                name text COLLATE "C" PRIMARY KEY,
                root bigint NOT NULL,
                created_ns bigint NOT NULL
            )
            """,
            """
            CREATE TABLE inodes (
                ino bigint PRIMARY KEY DEFAULT nextval('stow_inode_numbers'),
                namespace text COLLATE "C" NOT NULL,
                kind text NOT NULL,
                mode bigint,
                uid bigint,
                gid bigint,
                nlink bigint NOT NULL DEFAULT 1,
                size bigint NOT NULL DEFAULT 0,
                blob text COLLATE "C",
                sha256 text,
                content_type text,
                tags jsonb NOT NULL DEFAULT '[]',
                metadata jsonb NOT NULL DEFAULT '{}',
                public boolean NOT NULL DEFAULT false,
                target text,
                rdev bigint,
                atime_ns bigint NOT NULL,
                mtime_ns bigint NOT NULL,
                ctime_ns bigint NOT NULL,
                btime_ns bigint NOT NULL
            )
            """,
            "ALTER SEQUENCE stow_inode_numbers OWNED BY inodes.ino",
            "CREATE INDEX inodes_by_namespace ON inodes(namespace)",
            "CREATE INDEX inodes_by_blob ON inodes(blob) WHERE blob IS NOT NULL",
            """
            CREATE TABLE entries (
                parent bigint NOT NULL,
                name text COLLATE "C" NOT NULL,
                ino bigint NOT NULL,
                PRIMARY KEY (parent, name)
            )
            """,
            "CREATE INDEX entries_by_ino ON entries(ino)",
            """
            CREATE TABLE uploads (
                id text COLLATE "C" PRIMARY KEY,
                namespace text COLLATE "C" NOT NULL,
                path text COLLATE "C" NOT NULL,
                size bigint NOT NULL,
                content_type text NOT NULL,
                tags text,
                params text NOT NULL,
                created_ns bigint NOT NULL,
                expires_at bigint NOT NULL,
                state text NOT NULL,
                result_ino bigint,
                auto_complete boolean NOT NULL DEFAULT false
            )
            """,
            "CREATE INDEX uploads_by_expiry ON uploads(expires_at)",
            "CREATE INDEX uploads_open_by_namespace ON uploads(namespace) WHERE state = 'open'",
            """
            CREATE TABLE dead_blobs (
                blob text COLLATE "C" PRIMARY KEY,
                delete_after bigint NOT NULL
            )
            """,
            "CREATE INDEX dead_blobs_by_due ON dead_blobs(delete_after)",
            "CREATE TABLE inline_blobs (id text COLLATE \"C\" PRIMARY KEY, data bytea NOT NULL)",
            // Shared by every replica: the URL-signing secret (made once, by the first replica).
            "CREATE TABLE settings (key text PRIMARY KEY, value bytea NOT NULL)",
        ])

    static let functions = Migration(
        version: 2, name: "tree functions",
        statements: [
            // Raises a refusal (see the table above).
            """
            CREATE FUNCTION stow_fail(p_code text, p_message text, p_detail text DEFAULT '') RETURNS void
            LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message, DETAIL = coalesce(p_detail, '');
            END $$
            """,
            """
            CREATE FUNCTION stow_retry() RETURNS void LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION USING ERRCODE = 'SN040', MESSAGE = 'changed while it was being changed; run again';
            END $$
            """,
            "CREATE FUNCTION stow_join(p_segs text[], p_n int) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT array_to_string(p_segs[1:p_n], '/') $$",
            "CREATE FUNCTION stow_len(p_segs text[]) RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(array_length(p_segs, 1), 0) $$",
            // The key of a namespace's advisory locks (the schema too: several stowds may share a database).
            "CREATE FUNCTION stow_key(p_ns text) RETURNS int LANGUAGE sql STABLE AS $$ SELECT hashtext(current_schema() || '/' || p_ns) $$",
            """
            CREATE FUNCTION stow_root(p_ns text) RETURNS bigint LANGUAGE plpgsql STABLE AS $$
            DECLARE r bigint;
            BEGIN
                SELECT n.root INTO r FROM namespaces n WHERE n.name = p_ns;
                IF NOT FOUND THEN PERFORM stow_fail('SN001', 'namespace does not exist', p_ns); END IF;
                RETURN r;
            END $$
            """,
            // The database's clock, in nanoseconds (microsecond resolution): one clock for every replica,
            // read again after each lock wait, so that a change that waited is not dated before one
            // that went first.
            "CREATE FUNCTION stow_now() RETURNS bigint LANGUAGE sql VOLATILE AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint $$",
            // Every mutation starts here: the namespace's tree lock, then its root. Shared for what
            // changes names inside folders that stay where they are; exclusive (p_exclusive) for what
            // changes the path of a folder (moving or renaming one) and for deleting the namespace,
            // so that no mutation resolves a path before such a change and acts on it after.
            """
            CREATE FUNCTION stow_enter(p_ns text, p_exclusive boolean DEFAULT false) RETURNS bigint LANGUAGE plpgsql AS $$
            BEGIN
                IF p_exclusive THEN
                    PERFORM pg_advisory_xact_lock(1, stow_key(p_ns));
                ELSE
                    PERFORM pg_advisory_xact_lock_shared(1, stow_key(p_ns));
                END IF;
                RETURN stow_root(p_ns);
            END $$
            """,
            "CREATE FUNCTION stow_lookup(p_parent bigint, p_name text) RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT e.ino FROM entries e WHERE e.parent = p_parent AND e.name = p_name $$",
            "CREATE FUNCTION stow_kind(p_ino bigint) RETURNS text LANGUAGE sql STABLE AS $$ SELECT i.kind FROM inodes i WHERE i.ino = p_ino $$",
            "CREATE FUNCTION stow_etag(i inodes) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(i.blob, 'd' || i.ino || '-' || i.mtime_ns) $$",
            // An If-Match value (possibly quoted, weak, a list, or *) against an ETag, as ETag.matches.
            """
            CREATE FUNCTION stow_etag_matches(p_header text, p_etag text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
            DECLARE v text;
            BEGIN
                FOREACH v IN ARRAY string_to_array(p_header, ',') LOOP
                    v := btrim(v, E' \\t');
                    IF left(v, 2) = 'W/' THEN v := substr(v, 3); END IF;
                    IF v = '*' THEN RETURN true; END IF;
                    IF v <> '' AND btrim(v, '"') = p_etag THEN RETURN true; END IF;
                END LOOP;
                RETURN false;
            END $$
            """,
            // The inode a path names: SN002 when missing, SN005 when a file is used as a folder.
            """
            CREATE FUNCTION stow_resolve(p_root bigint, p_segs text[]) RETURNS bigint LANGUAGE plpgsql STABLE AS $$
            DECLARE cur bigint := p_root; nxt bigint; n int := stow_len(p_segs);
            BEGIN
                FOR i IN 1..n LOOP
                    IF i > 1 AND stow_kind(cur) IS DISTINCT FROM 'dir' THEN
                        PERFORM stow_fail('SN005', 'not a folder', stow_join(p_segs, i - 1));
                    END IF;
                    nxt := stow_lookup(cur, p_segs[i]);
                    IF nxt IS NULL THEN PERFORM stow_fail('SN002', 'not found', stow_join(p_segs, n)); END IF;
                    cur := nxt;
                END LOOP;
                RETURN cur;
            END $$
            """,
            """
            CREATE FUNCTION stow_resolve_folder(p_root bigint, p_segs text[]) RETURNS bigint LANGUAGE plpgsql STABLE AS $$
            DECLARE v_ino bigint := stow_resolve(p_root, p_segs);
            BEGIN
                IF stow_kind(v_ino) IS DISTINCT FROM 'dir' THEN
                    PERFORM stow_fail('SN005', 'not a folder', stow_join(p_segs, stow_len(p_segs)));
                END IF;
                RETURN v_ino;
            END $$
            """,
            // Locks inode rows FOR UPDATE in ascending order; SN040 when one of them is gone.
            """
            CREATE FUNCTION stow_lock(p_inos bigint[]) RETURNS void LANGUAGE plpgsql AS $$
            DECLARE wanted int; got int;
            BEGIN
                SELECT count(DISTINCT x) INTO wanted FROM unnest(p_inos) x WHERE x IS NOT NULL;
                SELECT count(*) INTO got FROM (SELECT 1 FROM inodes i WHERE i.ino = ANY(p_inos) ORDER BY i.ino FOR UPDATE) l;
                IF got < wanted THEN PERFORM stow_retry(); END IF;
            END $$
            """,
            "CREATE FUNCTION stow_touch(p_inos bigint[], p_now bigint) RETURNS void LANGUAGE sql AS $$ UPDATE inodes SET mtime_ns = p_now, ctime_ns = p_now WHERE ino = ANY(p_inos) $$",
            """
            CREATE FUNCTION stow_retire(p_blob text, p_now bigint, p_grace bigint) RETURNS void LANGUAGE sql AS $$
                INSERT INTO dead_blobs(blob, delete_after) VALUES (p_blob, p_now + p_grace)
                ON CONFLICT (blob) DO UPDATE SET delete_after = EXCLUDED.delete_after
            $$
            """,
            """
            CREATE FUNCTION stow_new_inode(
                p_ns text, p_kind text, p_mode bigint, p_uid bigint, p_gid bigint, p_nlink bigint, p_now bigint,
                p_target text DEFAULT NULL, p_rdev bigint DEFAULT NULL
            ) RETURNS bigint LANGUAGE sql AS $$
                INSERT INTO inodes(namespace, kind, mode, uid, gid, nlink, size, target, rdev, atime_ns, mtime_ns, ctime_ns, btime_ns)
                VALUES (p_ns, p_kind, p_mode & 4095, p_uid, p_gid, p_nlink,
                        CASE WHEN p_kind = 'symlink' THEN coalesce(octet_length(p_target), 0) ELSE 0 END,
                        p_target, p_rdev, p_now, p_now, p_now, p_now)
                RETURNING ino
            $$
            """,
            // A new folder in a locked parent.
            """
            CREATE FUNCTION stow_insert_dir(p_ns text, p_parent bigint, p_name text, p_mode bigint, p_uid bigint, p_gid bigint, p_now bigint)
            RETURNS bigint LANGUAGE plpgsql AS $$
            DECLARE v_ino bigint;
            BEGIN
                v_ino := stow_new_inode(p_ns, 'dir', p_mode, p_uid, p_gid, 2, p_now);
                INSERT INTO entries(parent, name, ino) VALUES (p_parent, p_name, v_ino);
                UPDATE inodes SET nlink = nlink + 1, mtime_ns = p_now, ctime_ns = p_now WHERE inodes.ino = p_parent;
                RETURN v_ino;
            END $$
            """,
            // Like mkdir -p: the folder at p_segs, creating what is missing (each parent locked before a child is added).
            """
            CREATE FUNCTION stow_ensure_folders(
                p_ns text, p_root bigint, p_segs text[], p_mode bigint, p_uid bigint, p_gid bigint, p_now bigint
            ) RETURNS bigint LANGUAGE plpgsql AS $$
            DECLARE cur bigint := p_root; nxt bigint;
            BEGIN
                FOR i IN 1..stow_len(p_segs) LOOP
                    nxt := stow_lookup(cur, p_segs[i]);
                    IF nxt IS NULL THEN
                        PERFORM stow_lock(ARRAY[cur]);
                        p_now := stow_now();
                        nxt := stow_lookup(cur, p_segs[i]);
                        IF nxt IS NULL THEN nxt := stow_insert_dir(p_ns, cur, p_segs[i], p_mode, p_uid, p_gid, p_now); END IF;
                    END IF;
                    IF stow_kind(nxt) IS DISTINCT FROM 'dir' THEN
                        PERFORM stow_fail('SN005', 'not a folder', stow_join(p_segs, i));
                    END IF;
                    cur := nxt;
                END LOOP;
                RETURN cur;
            END $$
            """,
            // Removes one entry (parent and inode locked); drops the inode, and retires its blob, when no entry is left.
            """
            CREATE FUNCTION stow_remove_entry(
                p_parent bigint, p_name text, p_ino bigint, p_is_dir boolean, p_now bigint, p_grace bigint
            ) RETURNS void LANGUAGE plpgsql AS $$
            DECLARE remaining bigint; b text;
            BEGIN
                DELETE FROM entries WHERE parent = p_parent AND name = p_name;
                IF p_is_dir THEN
                    UPDATE inodes SET nlink = nlink - 1, mtime_ns = p_now, ctime_ns = p_now WHERE ino = p_parent;
                    DELETE FROM inodes WHERE ino = p_ino;
                    RETURN;
                END IF;
                PERFORM stow_touch(ARRAY[p_parent], p_now);
                SELECT count(*) INTO remaining FROM entries WHERE ino = p_ino;
                IF remaining = 0 THEN
                    SELECT i.blob INTO b FROM inodes i WHERE i.ino = p_ino;
                    IF b IS NOT NULL THEN PERFORM stow_retire(b, p_now, p_grace); END IF;
                    DELETE FROM inodes WHERE ino = p_ino;
                ELSE
                    UPDATE inodes SET nlink = remaining, ctime_ns = p_now WHERE ino = p_ino;
                END IF;
            END $$
            """,
            // Whether p_anc is p_ino or one of its folders above (folders have one entry each).
            """
            CREATE FUNCTION stow_is_ancestor(p_anc bigint, p_ino bigint) RETURNS boolean LANGUAGE sql STABLE AS $$
                WITH RECURSIVE up(ino, depth) AS (
                    SELECT p_ino, 0
                    UNION ALL
                    SELECT e.parent, up.depth + 1 FROM entries e JOIN up ON e.ino = up.ino WHERE up.depth < 100000
                )
                SELECT EXISTS (SELECT 1 FROM up WHERE up.ino = p_anc)
            $$
            """,
            // One path of an inode, as segments (the first entry by parent and name when it has several); NULL if unreachable.
            """
            CREATE FUNCTION stow_path(p_ino bigint) RETURNS text[] LANGUAGE plpgsql STABLE AS $$
            DECLARE cur bigint := p_ino; r bigint; names text[] := '{}'; nm text; par bigint; steps int := 0;
            BEGIN
                SELECT n.root INTO r FROM inodes i JOIN namespaces n ON n.name = i.namespace WHERE i.ino = p_ino;
                IF NOT FOUND THEN RETURN NULL; END IF;
                WHILE cur <> r LOOP
                    SELECT e.parent, e.name INTO par, nm FROM entries e WHERE e.ino = cur ORDER BY e.parent, e.name LIMIT 1;
                    IF NOT FOUND THEN RETURN NULL; END IF;
                    names := nm || names;
                    cur := par;
                    steps := steps + 1;
                    IF steps > 8192 THEN RETURN NULL; END IF;
                END LOOP;
                RETURN names;
            END $$
            """,
            // MARK: namespaces
            """
            CREATE FUNCTION stow_create_namespace(p_ns text)
            RETURNS TABLE(o_root bigint, o_created_ns bigint, o_created boolean) LANGUAGE plpgsql AS $$
            DECLARE r bigint; c bigint;
                p_now bigint := stow_now();
            BEGIN
                PERFORM pg_advisory_xact_lock(1, stow_key(p_ns));
                SELECT n.root, n.created_ns INTO r, c FROM namespaces n WHERE n.name = p_ns;
                IF FOUND THEN
                    o_root := r; o_created_ns := c; o_created := false; RETURN NEXT; RETURN;
                END IF;
                r := stow_new_inode(p_ns, 'dir', NULL, NULL, NULL, 2, p_now);
                INSERT INTO namespaces(name, root, created_ns) VALUES (p_ns, r, p_now);
                o_root := r; o_created_ns := p_now; o_created := true; RETURN NEXT;
            END $$
            """,
            """
            CREATE FUNCTION stow_delete_namespace(p_ns text, p_recursive boolean, p_grace bigint) RETURNS void
            LANGUAGE plpgsql AS $$
            DECLARE r bigint;
                p_now bigint := stow_now();
            BEGIN
                PERFORM pg_advisory_xact_lock(1, stow_key(p_ns));
                r := stow_root(p_ns);
                IF NOT p_recursive AND EXISTS (SELECT 1 FROM entries WHERE parent = r) THEN
                    PERFORM stow_fail('SN004', 'not empty', '');
                END IF;
                INSERT INTO dead_blobs(blob, delete_after)
                    SELECT i.blob, p_now + p_grace FROM inodes i WHERE i.namespace = p_ns AND i.blob IS NOT NULL
                    ON CONFLICT (blob) DO NOTHING;
                DELETE FROM entries WHERE ino IN (SELECT i.ino FROM inodes i WHERE i.namespace = p_ns);
                DELETE FROM inodes WHERE namespace = p_ns;
                DELETE FROM namespaces WHERE name = p_ns;
                UPDATE uploads SET expires_at = 0 WHERE namespace = p_ns AND state = 'open';
            END $$
            """,
            // MARK: reading
            """
            CREATE FUNCTION stow_list_level(
                p_ns text, p_segs text[], p_prefix text, p_search text, p_after text, p_offset bigint, p_limit bigint
            ) RETURNS TABLE(total bigint, entry_name text, node inodes) LANGUAGE plpgsql STABLE AS $$
            DECLARE folder bigint := stow_resolve_folder(stow_root(p_ns), p_segs); t bigint;
            BEGIN
                SELECT count(*) INTO t FROM entries e
                    WHERE e.parent = folder
                      AND (p_prefix = '' OR (e.name >= p_prefix AND starts_with(e.name, p_prefix)))
                      AND (p_search IS NULL OR p_search = '' OR strpos(lower(e.name), lower(p_search COLLATE "C")) > 0);
                RETURN QUERY
                    SELECT t, e.name::text, i FROM entries e JOIN inodes i ON i.ino = e.ino
                    WHERE e.parent = folder
                      AND (p_prefix = '' OR (e.name >= p_prefix AND starts_with(e.name, p_prefix)))
                      AND (p_search IS NULL OR p_search = '' OR strpos(lower(e.name), lower(p_search COLLATE "C")) > 0)
                      AND (p_after IS NULL OR e.name > p_after)
                    ORDER BY e.name
                    LIMIT p_limit OFFSET (CASE WHEN p_after IS NULL THEN p_offset ELSE 0 END);
                IF NOT FOUND THEN
                    total := t; entry_name := NULL; node := NULL; RETURN NEXT;
                END IF;
            END $$
            """,
            """
            CREATE FUNCTION stow_list_tree(
                p_ns text, p_segs text[], p_prefix text, p_search text, p_after text, p_offset bigint, p_limit bigint
            ) RETURNS TABLE(total bigint, entry_name text, node inodes) LANGUAGE plpgsql STABLE AS $$
            DECLARE folder bigint := stow_resolve_folder(stow_root(p_ns), p_segs); t bigint;
            BEGIN
                -- The walk runs twice (the count, then the page), as in the SQLite store.
                WITH RECURSIVE tree(ino, name, path, kind) AS (
                    SELECT e.ino, e.name, e.name::text COLLATE "C", i.kind FROM entries e JOIN inodes i ON i.ino = e.ino
                        WHERE e.parent = folder AND starts_with(e.name, p_prefix)
                    UNION ALL
                    SELECT e.ino, e.name, (tree.path || '/' || e.name) COLLATE "C", i.kind FROM tree
                        JOIN entries e ON e.parent = tree.ino JOIN inodes i ON i.ino = e.ino
                        WHERE tree.kind = 'dir'
                )
                SELECT count(*) INTO t FROM tree
                    WHERE tree.kind <> 'dir'
                      AND (p_search IS NULL OR p_search = '' OR strpos(lower(tree.name), lower(p_search COLLATE "C")) > 0);
                RETURN QUERY
                    WITH RECURSIVE tree(ino, name, path, kind) AS (
                        SELECT e.ino, e.name, e.name::text COLLATE "C", i.kind FROM entries e JOIN inodes i ON i.ino = e.ino
                            WHERE e.parent = folder AND starts_with(e.name, p_prefix)
                        UNION ALL
                        SELECT e.ino, e.name, (tree.path || '/' || e.name) COLLATE "C", i.kind FROM tree
                            JOIN entries e ON e.parent = tree.ino JOIN inodes i ON i.ino = e.ino
                            WHERE tree.kind = 'dir'
                    )
                    SELECT t, tree.path::text, i FROM tree JOIN inodes i ON i.ino = tree.ino
                    WHERE tree.kind <> 'dir'
                      AND (p_search IS NULL OR p_search = '' OR strpos(lower(tree.name), lower(p_search COLLATE "C")) > 0)
                      AND (p_after IS NULL OR tree.path > (p_after COLLATE "C"))
                    ORDER BY tree.path COLLATE "C"
                    LIMIT p_limit OFFSET (CASE WHEN p_after IS NULL THEN p_offset ELSE 0 END);
                IF NOT FOUND THEN
                    total := t; entry_name := NULL; node := NULL; RETURN NEXT;
                END IF;
            END $$
            """,
            // MARK: changing the tree
            """
            CREATE FUNCTION stow_make_folder(
                p_ns text, p_segs text[], p_mode bigint, p_uid bigint, p_gid bigint, p_parents boolean, p_exist_ok boolean
            ) RETURNS SETOF inodes LANGUAGE plpgsql AS $$
            DECLARE r bigint := stow_enter(p_ns); n int := stow_len(p_segs); v_parent bigint; existing bigint; made bigint;
                p_now bigint := stow_now();
            BEGIN
                IF n = 0 THEN
                    IF NOT p_exist_ok THEN PERFORM stow_fail('SN003', 'exists', ''); END IF;
                    RETURN QUERY SELECT * FROM inodes WHERE ino = r;
                    RETURN;
                END IF;
                IF p_parents THEN
                    v_parent := stow_ensure_folders(p_ns, r, p_segs[1:n-1], p_mode, p_uid, p_gid, p_now);
                ELSE
                    v_parent := stow_resolve_folder(r, p_segs[1:n-1]);
                END IF;
                PERFORM stow_lock(ARRAY[v_parent]);
                p_now := stow_now();
                existing := stow_lookup(v_parent, p_segs[n]);
                IF existing IS NOT NULL THEN
                    IF stow_kind(existing) IS DISTINCT FROM 'dir' OR NOT p_exist_ok THEN
                        PERFORM stow_fail('SN003', 'exists', stow_join(p_segs, n));
                    END IF;
                    RETURN QUERY SELECT * FROM inodes WHERE ino = existing;
                    RETURN;
                END IF;
                made := stow_insert_dir(p_ns, v_parent, p_segs[n], p_mode, p_uid, p_gid, p_now);
                RETURN QUERY SELECT * FROM inodes WHERE ino = made;
            END $$
            """,
            """
            CREATE FUNCTION stow_remove_folder(p_ns text, p_segs text[]) RETURNS void LANGUAGE plpgsql AS $$
            DECLARE r bigint := stow_enter(p_ns); n int := stow_len(p_segs); v_parent bigint; v_target bigint;
                p_now bigint := stow_now();
            BEGIN
                IF n = 0 THEN PERFORM stow_fail('SN010', 'the root folder of a namespace cannot be removed'); END IF;
                v_parent := stow_resolve_folder(r, p_segs[1:n-1]);
                v_target := stow_lookup(v_parent, p_segs[n]);
                IF v_target IS NULL THEN PERFORM stow_fail('SN002', 'not found', stow_join(p_segs, n)); END IF;
                PERFORM stow_lock(ARRAY[v_parent, v_target]);
                p_now := stow_now();
                IF stow_lookup(v_parent, p_segs[n]) IS DISTINCT FROM v_target THEN PERFORM stow_retry(); END IF;
                IF stow_kind(v_target) IS DISTINCT FROM 'dir' THEN PERFORM stow_fail('SN005', 'not a folder', stow_join(p_segs, n)); END IF;
                IF EXISTS (SELECT 1 FROM entries WHERE parent = v_target) THEN
                    PERFORM stow_fail('SN004', 'not empty', stow_join(p_segs, n));
                END IF;
                PERFORM stow_remove_entry(v_parent, p_segs[n], v_target, true, p_now, 0);
            END $$
            """,
            """
            CREATE FUNCTION stow_remove_file(p_ns text, p_segs text[], p_if_match text, p_grace bigint) RETURNS void
            LANGUAGE plpgsql AS $$
            DECLARE r bigint := stow_enter(p_ns); n int := stow_len(p_segs); v_parent bigint; v_target bigint; t inodes;
                p_now bigint := stow_now();
            BEGIN
                IF n = 0 THEN PERFORM stow_fail('SN006', 'is a folder', ''); END IF;
                v_parent := stow_resolve_folder(r, p_segs[1:n-1]);
                v_target := stow_lookup(v_parent, p_segs[n]);
                IF v_target IS NULL THEN PERFORM stow_fail('SN002', 'not found', stow_join(p_segs, n)); END IF;
                PERFORM stow_lock(ARRAY[v_parent, v_target]);
                p_now := stow_now();
                IF stow_lookup(v_parent, p_segs[n]) IS DISTINCT FROM v_target THEN PERFORM stow_retry(); END IF;
                SELECT * INTO t FROM inodes WHERE ino = v_target;
                IF t.kind = 'dir' THEN PERFORM stow_fail('SN006', 'is a folder', stow_join(p_segs, n)); END IF;
                IF p_if_match IS NOT NULL AND NOT stow_etag_matches(p_if_match, stow_etag(t)) THEN
                    PERFORM stow_fail('SN008', format('`%s` has changed (ETag %s)', stow_join(p_segs, n), stow_etag(t)));
                END IF;
                PERFORM stow_remove_entry(v_parent, p_segs[n], v_target, false, p_now, p_grace);
            END $$
            """,
            """
            CREATE FUNCTION stow_rename(
                p_ns text, p_from text[], p_to text[], p_replace boolean, p_exchange boolean,
                p_into_self boolean, p_from_within_to boolean, p_grace bigint, p_exclusive boolean
            ) RETURNS SETOF inodes LANGUAGE plpgsql AS $$
            DECLARE
                r bigint := stow_enter(p_ns, p_exclusive); nf int := stow_len(p_from); nt int := stow_len(p_to);
                from_path text := stow_join(p_from, nf); to_path text := stow_join(p_to, nt);
                from_parent bigint; to_parent bigint; source bigint; existing bigint;
                skind text; tkind text; delta int;
                p_now bigint := stow_now();
            BEGIN
                IF nf = 0 OR nt = 0 THEN PERFORM stow_fail('SN007', 'the root folder cannot be renamed'); END IF;
                from_parent := stow_resolve_folder(r, p_from[1:nf-1]);
                source := stow_lookup(from_parent, p_from[nf]);
                IF source IS NULL THEN PERFORM stow_fail('SN002', 'not found', from_path); END IF;
                to_parent := stow_resolve_folder(r, p_to[1:nt-1]);
                skind := stow_kind(source);
                IF skind IS NULL THEN PERFORM stow_retry(); END IF;
                IF skind = 'dir' AND p_into_self THEN
                    PERFORM stow_fail('SN007', format('cannot move folder `%s` into itself (`%s`)', from_path, to_path));
                END IF;
                existing := stow_lookup(to_parent, p_to[nt]);
                tkind := CASE WHEN existing IS NULL THEN NULL ELSE stow_kind(existing) END;
                -- A folder that moves, or is renamed, changes the paths below it: that takes the tree
                -- lock exclusively. Raised here, the call runs again with it (SN041), from the start.
                IF NOT p_exclusive AND (skind = 'dir' OR (p_exchange AND tkind = 'dir')) THEN
                    RAISE EXCEPTION USING ERRCODE = 'SN041', MESSAGE = 'a folder moves: run again with the tree lock';
                END IF;
                PERFORM stow_lock(ARRAY[from_parent, to_parent, source, existing]);
                p_now := stow_now();
                IF stow_lookup(from_parent, p_from[nf]) IS DISTINCT FROM source
                   OR stow_lookup(to_parent, p_to[nt]) IS DISTINCT FROM existing THEN
                    PERFORM stow_retry();
                END IF;
                -- By inode, not by path: the destination is not below the folder that moves.
                IF skind = 'dir' AND stow_is_ancestor(source, to_parent) THEN
                    PERFORM stow_fail('SN007', format('cannot move folder `%s` into itself (`%s`)', from_path, to_path));
                END IF;
                IF p_exchange AND tkind = 'dir' AND stow_is_ancestor(existing, from_parent) THEN
                    PERFORM stow_fail('SN007', format('cannot exchange `%s` with something inside it', to_path));
                END IF;
                IF p_exchange THEN
                    IF existing IS NULL THEN PERFORM stow_fail('SN002', 'not found', to_path); END IF;
                    IF tkind = 'dir' AND p_from_within_to THEN
                        PERFORM stow_fail('SN007', format('cannot exchange `%s` with something inside it', to_path));
                    END IF;
                    UPDATE entries SET ino = existing WHERE parent = from_parent AND name = p_from[nf];
                    UPDATE entries SET ino = source WHERE parent = to_parent AND name = p_to[nt];
                    IF from_parent <> to_parent THEN
                        delta := (CASE WHEN skind = 'dir' THEN 1 ELSE 0 END) - (CASE WHEN tkind = 'dir' THEN 1 ELSE 0 END);
                        IF delta <> 0 THEN
                            UPDATE inodes SET nlink = nlink - delta WHERE ino = from_parent;
                            UPDATE inodes SET nlink = nlink + delta WHERE ino = to_parent;
                        END IF;
                    END IF;
                    UPDATE inodes SET ctime_ns = p_now WHERE ino IN (source, existing);
                    PERFORM stow_touch(ARRAY[from_parent, to_parent], p_now);
                    RETURN QUERY SELECT * FROM inodes WHERE ino = source;
                    RETURN;
                END IF;
                IF existing IS NOT NULL THEN
                    IF existing = source THEN
                        -- The same inode (the same entry, or two hard links of one file): nothing to do.
                        RETURN QUERY SELECT * FROM inodes WHERE ino = source;
                        RETURN;
                    END IF;
                    IF NOT p_replace THEN PERFORM stow_fail('SN003', 'exists', to_path); END IF;
                    IF skind = 'dir' THEN
                        IF tkind IS DISTINCT FROM 'dir' THEN PERFORM stow_fail('SN005', 'not a folder', to_path); END IF;
                        IF EXISTS (SELECT 1 FROM entries WHERE parent = existing) THEN PERFORM stow_fail('SN004', 'not empty', to_path); END IF;
                    ELSIF tkind = 'dir' THEN
                        PERFORM stow_fail('SN006', 'is a folder', to_path);
                    END IF;
                    PERFORM stow_remove_entry(to_parent, p_to[nt], existing, tkind = 'dir', p_now, p_grace);
                END IF;
                DELETE FROM entries WHERE parent = from_parent AND name = p_from[nf];
                INSERT INTO entries(parent, name, ino) VALUES (to_parent, p_to[nt], source);
                IF skind = 'dir' AND from_parent <> to_parent THEN
                    UPDATE inodes SET nlink = nlink - 1 WHERE ino = from_parent;
                    UPDATE inodes SET nlink = nlink + 1 WHERE ino = to_parent;
                END IF;
                UPDATE inodes SET ctime_ns = p_now WHERE ino = source;
                PERFORM stow_touch(ARRAY[from_parent, to_parent], p_now);
                RETURN QUERY SELECT * FROM inodes WHERE ino = source;
            END $$
            """,
            """
            CREATE FUNCTION stow_make_node(
                p_ns text, p_segs text[], p_kind text, p_mode bigint, p_uid bigint, p_gid bigint, p_target text, p_rdev bigint
            ) RETURNS SETOF inodes LANGUAGE plpgsql AS $$
            DECLARE r bigint := stow_enter(p_ns); n int := stow_len(p_segs); v_parent bigint; made bigint;
                p_now bigint := stow_now();
            BEGIN
                IF n = 0 THEN PERFORM stow_fail('SN003', 'exists', ''); END IF;
                v_parent := stow_resolve_folder(r, p_segs[1:n-1]);
                PERFORM stow_lock(ARRAY[v_parent]);
                p_now := stow_now();
                IF stow_lookup(v_parent, p_segs[n]) IS NOT NULL THEN PERFORM stow_fail('SN003', 'exists', stow_join(p_segs, n)); END IF;
                made := stow_new_inode(p_ns, p_kind, p_mode, p_uid, p_gid, 1, p_now, p_target, p_rdev);
                INSERT INTO entries(parent, name, ino) VALUES (v_parent, p_segs[n], made);
                PERFORM stow_touch(ARRAY[v_parent], p_now);
                RETURN QUERY SELECT * FROM inodes WHERE ino = made;
            END $$
            """,
            """
            CREATE FUNCTION stow_link(p_ns text, p_from text[], p_to text[]) RETURNS SETOF inodes LANGUAGE plpgsql AS $$
            DECLARE r bigint := stow_enter(p_ns); nf int := stow_len(p_from); nt int := stow_len(p_to); source bigint; v_parent bigint;
                p_now bigint := stow_now();
            BEGIN
                IF nf = 0 OR nt = 0 THEN PERFORM stow_fail('SN010', 'the root folder cannot be linked'); END IF;
                source := stow_resolve(r, p_from);
                IF stow_kind(source) = 'dir' THEN PERFORM stow_fail('SN006', 'is a folder', stow_join(p_from, nf)); END IF;
                v_parent := stow_resolve_folder(r, p_to[1:nt-1]);
                PERFORM stow_lock(ARRAY[v_parent, source]);
                p_now := stow_now();
                IF stow_lookup(v_parent, p_to[nt]) IS NOT NULL THEN PERFORM stow_fail('SN003', 'exists', stow_join(p_to, nt)); END IF;
                INSERT INTO entries(parent, name, ino) VALUES (v_parent, p_to[nt], source);
                PERFORM stow_touch(ARRAY[v_parent], p_now);
                UPDATE inodes SET nlink = nlink + 1, ctime_ns = p_now WHERE ino = source;
                RETURN QUERY SELECT * FROM inodes WHERE ino = source;
            END $$
            """,
            // p_patch: the keys of FilePatch that are set (absent: unchanged).
            """
            CREATE FUNCTION stow_patch(p_ns text, p_segs text[], p_patch jsonb, p_if_match text) RETURNS SETOF inodes
            LANGUAGE plpgsql AS $$
            DECLARE r bigint := stow_enter(p_ns); v_target bigint := stow_resolve(r, p_segs); t inodes;
                p_now bigint := stow_now();
            BEGIN
                PERFORM stow_lock(ARRAY[v_target]);
                p_now := stow_now();
                SELECT * INTO t FROM inodes WHERE ino = v_target;
                IF p_if_match IS NOT NULL AND NOT stow_etag_matches(p_if_match, stow_etag(t)) THEN
                    PERFORM stow_fail('SN008', format('`%s` has changed (ETag %s)', stow_join(p_segs, stow_len(p_segs)), stow_etag(t)));
                END IF;
                UPDATE inodes SET
                    tags = CASE WHEN p_patch ? 'tags' THEN p_patch->'tags' ELSE tags END,
                    metadata = ((CASE WHEN p_patch ? 'metadata' THEN p_patch->'metadata' ELSE metadata END)
                                || coalesce(p_patch->'metadata_set', '{}'::jsonb))
                               - coalesce(ARRAY(SELECT jsonb_array_elements_text(p_patch->'metadata_remove')), '{}'::text[]),
                    content_type = CASE WHEN p_patch ? 'content_type' THEN p_patch->>'content_type' ELSE content_type END,
                    public = coalesce((p_patch->>'public')::boolean, public),
                    mode = coalesce((p_patch->>'mode')::bigint & 4095, mode),
                    uid = coalesce((p_patch->>'uid')::bigint, uid),
                    gid = coalesce((p_patch->>'gid')::bigint, gid),
                    atime_ns = coalesce((p_patch->>'atime_ns')::bigint, atime_ns),
                    mtime_ns = coalesce((p_patch->>'mtime_ns')::bigint, mtime_ns),
                    ctime_ns = least(coalesce((p_patch->>'ctime_ns')::bigint, p_now), p_now)
                WHERE ino = v_target;
                RETURN QUERY SELECT * FROM inodes WHERE ino = v_target;
            END $$
            """,
            """
            CREATE FUNCTION stow_swap_blob(
                p_ns text, p_segs text[], p_expected text, p_blob text, p_size bigint, p_sha256 text, p_inline bytea,
                p_mtime bigint, p_grace bigint
            ) RETURNS SETOF inodes LANGUAGE plpgsql AS $$
            DECLARE r bigint := stow_enter(p_ns); v_target bigint := stow_resolve(r, p_segs); current_blob text;
                p_now bigint := stow_now();
            BEGIN
                PERFORM stow_lock(ARRAY[v_target]);
                p_now := stow_now();
                SELECT i.blob INTO current_blob FROM inodes i WHERE i.ino = v_target;
                IF current_blob IS DISTINCT FROM p_expected THEN
                    PERFORM stow_fail('SN008', format('`%s` changed while it was being truncated', stow_join(p_segs, stow_len(p_segs))));
                END IF;
                IF p_inline IS NOT NULL THEN INSERT INTO inline_blobs(id, data) VALUES (p_blob, p_inline); END IF;
                UPDATE inodes SET blob = p_blob, size = p_size, sha256 = p_sha256, mtime_ns = coalesce(p_mtime, p_now), ctime_ns = p_now
                    WHERE ino = v_target;
                PERFORM stow_retire(p_expected, p_now, p_grace);
                RETURN QUERY SELECT * FROM inodes WHERE ino = v_target;
            END $$
            """,
            // MARK: publishing files
            // Creates the file a declaration names, or points the existing one at the new blob. d holds
            // content_type, and when set: tags, metadata, public, mode, uid, gid, mtime_ns, atime_ns,
            // ctime_ns, if_match, if_none_match.
            """
            CREATE FUNCTION stow_place_file(
                p_ns text, p_segs text[], d jsonb, p_blob text, p_size bigint, p_sha256 text, p_now bigint, p_grace bigint
            ) RETURNS bigint LANGUAGE plpgsql AS $$
            DECLARE
                r bigint := stow_enter(p_ns); n int := stow_len(p_segs); v_path text := stow_join(p_segs, n);
                v_parent bigint; existing bigint; t inodes; made bigint; touch_parent boolean; folder_ctime bigint;
            BEGIN
                IF n = 0 THEN PERFORM stow_fail('SN006', 'is a folder', ''); END IF;
                v_parent := stow_ensure_folders(p_ns, r, p_segs[1:n-1], NULL, (d->>'uid')::bigint, (d->>'gid')::bigint, p_now);
                existing := stow_lookup(v_parent, p_segs[n]);
                PERFORM stow_lock(ARRAY[v_parent, existing]);
                p_now := stow_now();
                IF stow_lookup(v_parent, p_segs[n]) IS DISTINCT FROM existing THEN PERFORM stow_retry(); END IF;
                IF existing IS NOT NULL THEN
                    SELECT * INTO t FROM inodes WHERE ino = existing;
                    IF d->>'if_none_match' = '*' THEN PERFORM stow_fail('SN008', format('`%s` exists already', v_path)); END IF;
                    IF d ? 'if_match' AND NOT stow_etag_matches(d->>'if_match', stow_etag(t)) THEN
                        PERFORM stow_fail('SN008', format('`%s` has changed (ETag %s)', v_path, stow_etag(t)));
                    END IF;
                    IF t.kind = 'dir' THEN PERFORM stow_fail('SN006', 'is a folder', v_path); END IF;
                    IF t.kind = 'file' THEN
                        -- Overwrite: the same inode (hard links see the new content), a new blob.
                        UPDATE inodes SET
                            blob = p_blob, size = p_size, sha256 = p_sha256, content_type = d->>'content_type',
                            tags = CASE WHEN d ? 'tags' THEN d->'tags' ELSE tags END,
                            metadata = CASE WHEN d ? 'metadata' THEN d->'metadata' ELSE metadata END,
                            public = coalesce((d->>'public')::boolean, public),
                            mode = coalesce((d->>'mode')::bigint & 4095, mode),
                            uid = coalesce((d->>'uid')::bigint, uid),
                            gid = coalesce((d->>'gid')::bigint, gid),
                            mtime_ns = coalesce((d->>'mtime_ns')::bigint, p_now),
                            atime_ns = coalesce((d->>'atime_ns')::bigint, atime_ns),
                            ctime_ns = least(coalesce((d->>'ctime_ns')::bigint, p_now), p_now)
                        WHERE ino = existing;
                        IF t.blob IS NOT NULL AND t.blob <> p_blob THEN PERFORM stow_retire(t.blob, p_now, p_grace); END IF;
                        RETURN existing;
                    END IF;
                    PERFORM stow_remove_entry(v_parent, p_segs[n], existing, false, p_now, p_grace);
                    touch_parent := true;
                ELSE
                    IF d ? 'if_match' AND d->>'if_match' <> '*' THEN
                        PERFORM stow_fail('SN008', format('`%s` does not exist (If-Match %s)', v_path, d->>'if_match'));
                    END IF;
                    -- Not when the folder's attributes were set after the file last changed (rsync -a
                    -- sets a folder's times after its files; a mount sends the files later).
                    IF d ? 'ctime_ns' THEN
                        SELECT i.ctime_ns INTO folder_ctime FROM inodes i WHERE i.ino = v_parent;
                        touch_parent := coalesce(folder_ctime, 0) <= (d->>'ctime_ns')::bigint;
                    ELSE
                        touch_parent := true;
                    END IF;
                END IF;
                INSERT INTO inodes(namespace, kind, mode, uid, gid, nlink, size, blob, sha256, content_type, tags, metadata, public,
                                   atime_ns, mtime_ns, ctime_ns, btime_ns)
                VALUES (p_ns, 'file', (d->>'mode')::bigint & 4095, (d->>'uid')::bigint, (d->>'gid')::bigint, 1, p_size, p_blob, p_sha256,
                        d->>'content_type', coalesce(d->'tags', '[]'::jsonb), coalesce(d->'metadata', '{}'::jsonb),
                        coalesce((d->>'public')::boolean, false),
                        coalesce((d->>'atime_ns')::bigint, p_now), coalesce((d->>'mtime_ns')::bigint, p_now),
                        least(coalesce((d->>'ctime_ns')::bigint, p_now), p_now), p_now)
                RETURNING ino INTO made;
                INSERT INTO entries(parent, name, ino) VALUES (v_parent, p_segs[n], made);
                IF touch_parent THEN PERFORM stow_touch(ARRAY[v_parent], p_now); END IF;
                RETURN made;
            END $$
            """,
            """
            CREATE FUNCTION stow_publish(
                p_id text, p_ns text, p_segs text[], d jsonb, p_blob text, p_size bigint, p_sha256 text, p_grace bigint
            ) RETURNS SETOF inodes LANGUAGE plpgsql AS $$
            DECLARE r bigint; st text; res bigint; made bigint;
                p_now bigint := stow_now();
            BEGIN
                -- The tree lock before the upload's row, as every other function takes it first.
                r := stow_enter(p_ns);
                SELECT u.state, u.result_ino INTO st, res FROM uploads u WHERE u.id = p_id FOR UPDATE;
                IF NOT FOUND THEN PERFORM stow_fail('SN002', 'not found', stow_join(p_segs, stow_len(p_segs))); END IF;
                IF st = 'completed' AND res IS NOT NULL THEN
                    RETURN QUERY SELECT * FROM inodes WHERE ino = res;
                    RETURN;
                END IF;
                made := stow_place_file(p_ns, p_segs, d, p_blob, p_size, p_sha256, p_now, p_grace);
                -- The size too: a deferred-length upload learns it at complete.
                UPDATE uploads SET state = 'completed', result_ino = made, size = p_size WHERE id = p_id;
                RETURN QUERY SELECT * FROM inodes WHERE ino = made;
            END $$
            """,
            // Small files with their bytes, each stored or refused on its own (a subtransaction each).
            // d also holds namespace, segments, blob, size and sha256.
            """
            CREATE FUNCTION stow_publish_inline(p_decls jsonb[], p_bytes bytea[], p_grace bigint)
            RETURNS TABLE(idx int, err_code text, err_message text, err_detail text, node inodes) LANGUAGE plpgsql AS $$
            DECLARE d jsonb; made bigint; attempt int; code text; msg text; det text;
                p_now bigint := stow_now();
            BEGIN
                FOR i IN 1..coalesce(array_length(p_decls, 1), 0) LOOP
                    d := p_decls[i];
                    attempt := 0;
                    LOOP
                        attempt := attempt + 1;
                        BEGIN
                            INSERT INTO inline_blobs(id, data) VALUES (d->>'blob', p_bytes[i]);
                            made := stow_place_file(d->>'namespace', ARRAY(SELECT jsonb_array_elements_text(d->'segments')), d,
                                                    d->>'blob', (d->>'size')::bigint, d->>'sha256', p_now, p_grace);
                            idx := i; err_code := NULL; err_message := NULL; err_detail := NULL;
                            SELECT * INTO node FROM inodes WHERE ino = made;
                            RETURN NEXT;
                            EXIT;
                        EXCEPTION
                            WHEN unique_violation OR SQLSTATE 'SN040' THEN
                                -- Another transaction made the same name meanwhile: look again.
                                IF attempt >= 5 THEN
                                    idx := i; err_code := 'SN009'; err_message := 'the file changed while it was being stored; try again';
                                    err_detail := ''; node := NULL; RETURN NEXT; EXIT;
                                END IF;
                            WHEN OTHERS THEN
                                GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
                                -- The file's own refusals and bad data are its own; anything else (a deadlock, a
                                -- shutdown) is the whole call's, and the store runs it again or fails it.
                                IF code LIKE 'SN%' OR code LIKE '22%' THEN
                                    idx := i; err_code := code; err_message := msg; err_detail := det; node := NULL;
                                    RETURN NEXT; EXIT;
                                END IF;
                                RAISE;
                        END;
                    END LOOP;
                END LOOP;
            END $$
            """,
        ])

    /// Uploads staged in an object store's multipart uploads (`StagingLedger`, `S3BlobStore`).
    static let stagingLedger = Migration(
        version: 3, name: "staging ledger",
        statements: [
            """
            CREATE TABLE upload_staging (
                upload_id text COLLATE "C" PRIMARY KEY,
                s3_upload_id text NOT NULL,
                part_size bigint NOT NULL,
                tail_key text,
                tail_size bigint NOT NULL DEFAULT 0,
                version bigint NOT NULL DEFAULT 0,
                begun_ns bigint NOT NULL DEFAULT stow_now()
            )
            """,
            """
            CREATE TABLE upload_parts (
                upload_id text COLLATE "C" NOT NULL,
                number int NOT NULL,
                size bigint NOT NULL,
                etag text NOT NULL,
                PRIMARY KEY (upload_id, number)
            )
            """,
            // One commit of a request's parts: only if no other request committed since it read the staging.
            """
            CREATE FUNCTION stow_commit_staging(
                p_id text, p_version bigint, p_keep int, p_numbers int[], p_sizes bigint[], p_etags text[], p_tail_key text, p_tail_size bigint
            ) RETURNS boolean LANGUAGE plpgsql AS $$
            BEGIN
                UPDATE upload_staging SET version = version + 1, tail_key = p_tail_key, tail_size = p_tail_size
                    WHERE upload_id = p_id AND version = p_version;
                IF NOT FOUND THEN RETURN false; END IF;
                DELETE FROM upload_parts WHERE upload_id = p_id AND number > p_keep;
                INSERT INTO upload_parts(upload_id, number, size, etag)
                    SELECT p_id, t.n, t.s, t.e FROM unnest(p_numbers, p_sizes, p_etags) AS t(n, s, e)
                    ON CONFLICT (upload_id, number) DO UPDATE SET size = EXCLUDED.size, etag = EXCLUDED.etag;
                RETURN true;
            END $$
            """,
        ])

    /// The change feed (`ChangeFeed`): triggers on `entries`, `inodes` and `namespaces` record every
    /// change in the transaction that makes it, with its transaction id; `stow_o` sets the origin
    /// of the request for the transaction, as an argument of the mutation's own call (so it costs
    /// no round trip, and runs before the function's body). kind: 0 an entry, 1 an inode, 2 the
    /// namespace was deleted.
    static let changeFeed = Migration(
        version: 4, name: "change feed",
        statements: [
            """
            CREATE TABLE changes (
                id bigserial PRIMARY KEY,
                xid bigint NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
                namespace text COLLATE "C" NOT NULL,
                kind smallint NOT NULL,
                parent bigint,
                name text COLLATE "C",
                ino bigint NOT NULL,
                removed boolean NOT NULL,
                origin text,
                at_ns bigint NOT NULL DEFAULT stow_now()
            )
            """,
            "CREATE INDEX changes_by_namespace ON changes(namespace, xid, id)",
            "CREATE INDEX changes_by_time ON changes(at_ns)",
            "CREATE TABLE change_trim (id int PRIMARY KEY CHECK (id = 1), upto_xid bigint NOT NULL, upto_id bigint NOT NULL)",
            """
            CREATE FUNCTION stow_o(p_value anyelement, p_origin text) RETURNS anyelement LANGUAGE plpgsql VOLATILE AS $$
            BEGIN
                PERFORM set_config('stow.origin', coalesce(p_origin, ''), true);
                RETURN p_value;
            END $$
            """,
            """
            CREATE FUNCTION stow_change_entry() RETURNS trigger LANGUAGE plpgsql AS $$
            DECLARE r entries;
            BEGIN
                IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
                INSERT INTO changes(namespace, kind, parent, name, ino, removed, origin)
                    SELECT i.namespace, 0, r.parent, r.name, r.ino, TG_OP = 'DELETE', nullif(current_setting('stow.origin', true), '')
                    FROM inodes i WHERE i.ino = r.parent;
                RETURN NULL;
            END $$
            """,
            """
            CREATE FUNCTION stow_change_inode() RETURNS trigger LANGUAGE plpgsql AS $$
            DECLARE r inodes;
            BEGIN
                IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
                INSERT INTO changes(namespace, kind, ino, removed, origin)
                    VALUES (r.namespace, 1, r.ino, TG_OP = 'DELETE', nullif(current_setting('stow.origin', true), ''));
                RETURN NULL;
            END $$
            """,
            """
            CREATE FUNCTION stow_change_namespace() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                DELETE FROM changes WHERE namespace = OLD.name;
                INSERT INTO changes(namespace, kind, ino, removed, origin)
                    VALUES (OLD.name, 2, 0, true, nullif(current_setting('stow.origin', true), ''));
                RETURN NULL;
            END $$
            """,
            "CREATE TRIGGER changes_entries AFTER INSERT OR UPDATE OR DELETE ON entries FOR EACH ROW EXECUTE FUNCTION stow_change_entry()",
            "CREATE TRIGGER changes_inodes AFTER UPDATE OR DELETE ON inodes FOR EACH ROW EXECUTE FUNCTION stow_change_inode()",
            "CREATE TRIGGER changes_namespaces AFTER DELETE ON namespaces FOR EACH ROW EXECUTE FUNCTION stow_change_namespace()",
            // Trims the changes recorded before p_before; the cursor below which readers are reset
            // only moves up (several replicas may trim at once).
            """
            CREATE FUNCTION stow_trim_changes(p_before bigint) RETURNS bigint LANGUAGE plpgsql AS $$
            DECLARE last_xid bigint; last_id bigint; n bigint;
            BEGIN
                WITH gone AS (DELETE FROM changes WHERE at_ns < p_before RETURNING xid, id)
                    SELECT count(*), max(xid) INTO n, last_xid FROM gone;
                IF n = 0 THEN RETURN 0; END IF;
                last_id := 9223372036854775807;
                INSERT INTO change_trim(id, upto_xid, upto_id) VALUES (1, last_xid, last_id)
                    ON CONFLICT (id) DO UPDATE SET upto_xid = greatest(change_trim.upto_xid, EXCLUDED.upto_xid), upto_id = EXCLUDED.upto_id
                    WHERE change_trim.upto_xid <= EXCLUDED.upto_xid;
                RETURN n;
            END $$
            """,
        ])

    /// Advisory locks shared by mounts (`LockLedger`): a record per lock set, its locks as JSON,
    /// changed by compare-and-swap on a random version; sessions with leases on the database's clock.
    static let locks = Migration(
        version: 5, name: "locks",
        statements: [
            """
            CREATE TABLE lock_sets (
                namespace text COLLATE "C" NOT NULL,
                ino bigint NOT NULL,
                kind text NOT NULL,
                version bigint NOT NULL,
                locks text NOT NULL,
                PRIMARY KEY (namespace, ino, kind)
            )
            """,
            """
            CREATE TABLE lock_sessions (
                namespace text COLLATE "C" NOT NULL,
                id text COLLATE "C" NOT NULL,
                expires_ns bigint NOT NULL,
                PRIMARY KEY (namespace, id)
            )
            """,
        ])

    /// A lock set changed or a lock session ended: a `NOTIFY` on `lockChannel` when the
    /// transaction commits, so that requests waiting for a lock on other replicas look again at
    /// once (`PostgresMetadataStore.followOtherServers`) instead of at their next poll. Not for
    /// the change feed: a transaction that notifies takes a database-wide lock at commit, held
    /// through its WAL flush, so every mutation notifying would serialize all commits; lock
    /// changes are few.
    static let lockNotifications = Migration(
        version: 6, name: "lock notifications",
        statements: [
            """
            CREATE FUNCTION stow_notify_locks() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('stowd_locks_' || md5(TG_TABLE_SCHEMA), '');
                RETURN NULL;
            END $$
            """,
            "CREATE TRIGGER lock_sets_notify AFTER UPDATE OR DELETE ON lock_sets FOR EACH ROW EXECUTE FUNCTION stow_notify_locks()",
            "CREATE TRIGGER lock_sessions_notify AFTER DELETE ON lock_sessions FOR EACH ROW EXECUTE FUNCTION stow_notify_locks()",
        ])

    /// The trim keeps the changes of transactions at or above the oldest one still running (the
    /// feed's head). It trimmed by age alone before: with an older transaction still running
    /// anywhere in the database, the trim mark passed the head, so the head a reset reader was given
    /// was itself below the mark, and every read was answered reset again until that transaction
    /// ended (a server test saw it when run beside others).
    static let trimBelowHead = Migration(
        version: 7, name: "trim below the head",
        statements: [
            """
            CREATE OR REPLACE FUNCTION stow_trim_changes(p_before bigint) RETURNS bigint LANGUAGE plpgsql AS $$
            DECLARE last_xid bigint; last_id bigint; n bigint;
                    head bigint := pg_snapshot_xmin(pg_current_snapshot())::text::bigint;
            BEGIN
                WITH gone AS (DELETE FROM changes WHERE at_ns < p_before AND xid < head RETURNING xid, id)
                    SELECT count(*), max(xid) INTO n, last_xid FROM gone;
                IF n = 0 THEN RETURN 0; END IF;
                last_id := 9223372036854775807;
                INSERT INTO change_trim(id, upto_xid, upto_id) VALUES (1, last_xid, last_id)
                    ON CONFLICT (id) DO UPDATE SET upto_xid = greatest(change_trim.upto_xid, EXCLUDED.upto_xid), upto_id = EXCLUDED.upto_id
                    WHERE change_trim.upto_xid <= EXCLUDED.upto_xid;
                RETURN n;
            END $$
            """,
        ])

    /// Indexes for `search`: GIN on tags (`@>` for all of, `?|` for any of) and on metadata
    /// (`jsonb_path_ops`: `@>` only, smaller), a B-tree on content types per namespace, and each
    /// namespace's folders (to find the folders below a path without reading the files).
    static let search = Migration(
        version: 8, name: "search",
        statements: [
            "CREATE INDEX inodes_tags ON inodes USING gin (tags)",
            "CREATE INDEX inodes_metadata ON inodes USING gin (metadata jsonb_path_ops)",
            // By bytes, as the search compares (`type/*` is a range from `type/` to `type0`).
            "CREATE INDEX inodes_by_type ON inodes(namespace, (content_type COLLATE \"C\"))",
            "CREATE INDEX inodes_folders ON inodes(namespace) WHERE kind = 'dir'",
        ])

    /// Batches that change many names in one transaction touch each folder once, at the end.
    /// Touched once per file, a folder's row had a new version per file in the one transaction,
    /// none of them prunable before it ends, and each later read of the row (the lock, the lookup,
    /// the change trigger) walked them all: a batch of 1,000 small files in one folder took 2.8 s,
    /// now 0.7 s (`bench/cluster-batches.sh`; `pg_stat_user_functions`: `stow_touch`, `stow_lock`
    /// and `stow_kind` of the folder grew with the batch).
    ///
    /// Deletes of a batch (`POST …/delete/batch`) become one call and one transaction
    /// (`stow_remove_files`), each file deleted or refused on its own (a subtransaction each), as
    /// `stow_remove_file` would answer it. Before, each file was a lookup and a `stow_remove_file`,
    /// two round trips and a commit per file. `p_paths` are `/`-joined (a name holds no `/`);
    /// `p_match[i]` says whether `p_if_match[i]` is given; `p_inodes[i]` is the inode the deleter
    /// saw there, 0 for none (inodes start at 16).
    static let removeFiles = Migration(
        version: 9, name: "batches: deletes in one call, each folder touched once",
        statements: [
            // `stow_place_file` without touching the folder: it says which folder to touch, and a
            // batch (`stow_publish_inline`) touches each once at its end (see below).
            """
            CREATE FUNCTION stow_place_file_untouched(
                p_ns text, p_segs text[], d jsonb, p_blob text, p_size bigint, p_sha256 text, p_now bigint, p_grace bigint,
                OUT made bigint, OUT touch bigint
            ) LANGUAGE plpgsql AS $$
            DECLARE
                r bigint := stow_enter(p_ns); n int := stow_len(p_segs); v_path text := stow_join(p_segs, n);
                v_parent bigint; existing bigint; t inodes; touch_parent boolean; folder_ctime bigint;
            BEGIN
                IF n = 0 THEN PERFORM stow_fail('SN006', 'is a folder', ''); END IF;
                v_parent := stow_ensure_folders(p_ns, r, p_segs[1:n-1], NULL, (d->>'uid')::bigint, (d->>'gid')::bigint, p_now);
                existing := stow_lookup(v_parent, p_segs[n]);
                PERFORM stow_lock(ARRAY[v_parent, existing]);
                p_now := stow_now();
                IF stow_lookup(v_parent, p_segs[n]) IS DISTINCT FROM existing THEN PERFORM stow_retry(); END IF;
                IF existing IS NOT NULL THEN
                    SELECT * INTO t FROM inodes WHERE ino = existing;
                    IF d->>'if_none_match' = '*' THEN PERFORM stow_fail('SN008', format('`%s` exists already', v_path)); END IF;
                    IF d ? 'if_match' AND NOT stow_etag_matches(d->>'if_match', stow_etag(t)) THEN
                        PERFORM stow_fail('SN008', format('`%s` has changed (ETag %s)', v_path, stow_etag(t)));
                    END IF;
                    IF t.kind = 'dir' THEN PERFORM stow_fail('SN006', 'is a folder', v_path); END IF;
                    IF t.kind = 'file' THEN
                        -- Overwrite: the same inode (hard links see the new content), a new blob.
                        UPDATE inodes SET
                            blob = p_blob, size = p_size, sha256 = p_sha256, content_type = d->>'content_type',
                            tags = CASE WHEN d ? 'tags' THEN d->'tags' ELSE tags END,
                            metadata = CASE WHEN d ? 'metadata' THEN d->'metadata' ELSE metadata END,
                            public = coalesce((d->>'public')::boolean, public),
                            mode = coalesce((d->>'mode')::bigint & 4095, mode),
                            uid = coalesce((d->>'uid')::bigint, uid),
                            gid = coalesce((d->>'gid')::bigint, gid),
                            mtime_ns = coalesce((d->>'mtime_ns')::bigint, p_now),
                            atime_ns = coalesce((d->>'atime_ns')::bigint, atime_ns),
                            ctime_ns = least(coalesce((d->>'ctime_ns')::bigint, p_now), p_now)
                        WHERE ino = existing;
                        IF t.blob IS NOT NULL AND t.blob <> p_blob THEN PERFORM stow_retire(t.blob, p_now, p_grace); END IF;
                        made := existing;
                        RETURN;
                    END IF;
                    PERFORM stow_remove_entry(v_parent, p_segs[n], existing, false, p_now, p_grace);
                    touch_parent := true;
                ELSE
                    IF d ? 'if_match' AND d->>'if_match' <> '*' THEN
                        PERFORM stow_fail('SN008', format('`%s` does not exist (If-Match %s)', v_path, d->>'if_match'));
                    END IF;
                    -- Not when the folder's attributes were set after the file last changed (rsync -a
                    -- sets a folder's times after its files; a mount sends the files later).
                    IF d ? 'ctime_ns' THEN
                        SELECT i.ctime_ns INTO folder_ctime FROM inodes i WHERE i.ino = v_parent;
                        touch_parent := coalesce(folder_ctime, 0) <= (d->>'ctime_ns')::bigint;
                    ELSE
                        touch_parent := true;
                    END IF;
                END IF;
                INSERT INTO inodes(namespace, kind, mode, uid, gid, nlink, size, blob, sha256, content_type, tags, metadata, public,
                                   atime_ns, mtime_ns, ctime_ns, btime_ns)
                VALUES (p_ns, 'file', (d->>'mode')::bigint & 4095, (d->>'uid')::bigint, (d->>'gid')::bigint, 1, p_size, p_blob, p_sha256,
                        d->>'content_type', coalesce(d->'tags', '[]'::jsonb), coalesce(d->'metadata', '{}'::jsonb),
                        coalesce((d->>'public')::boolean, false),
                        coalesce((d->>'atime_ns')::bigint, p_now), coalesce((d->>'mtime_ns')::bigint, p_now),
                        least(coalesce((d->>'ctime_ns')::bigint, p_now), p_now), p_now)
                RETURNING ino INTO made;
                INSERT INTO entries(parent, name, ino) VALUES (v_parent, p_segs[n], made);
                IF touch_parent THEN touch := v_parent; END IF;
            END $$
            """,
            """
            CREATE OR REPLACE FUNCTION stow_place_file(
                p_ns text, p_segs text[], d jsonb, p_blob text, p_size bigint, p_sha256 text, p_now bigint, p_grace bigint
            ) RETURNS bigint LANGUAGE plpgsql AS $$
            DECLARE placed record;
            BEGIN
                SELECT * INTO placed FROM stow_place_file_untouched(p_ns, p_segs, d, p_blob, p_size, p_sha256, p_now, p_grace);
                IF placed.touch IS NOT NULL THEN PERFORM stow_touch(ARRAY[placed.touch], stow_now()); END IF;
                RETURN placed.made;
            END $$
            """,
            // Small files with their bytes, as before; each folder touched once, at the end.
            """
            CREATE OR REPLACE FUNCTION stow_publish_inline(p_decls jsonb[], p_bytes bytea[], p_grace bigint)
            RETURNS TABLE(idx int, err_code text, err_message text, err_detail text, node inodes) LANGUAGE plpgsql AS $$
            DECLARE d jsonb; made bigint; touch bigint; attempt int; code text; msg text; det text; touched bigint[] := '{}';
                p_now bigint := stow_now();
            BEGIN
                FOR i IN 1..coalesce(array_length(p_decls, 1), 0) LOOP
                    d := p_decls[i];
                    attempt := 0;
                    LOOP
                        attempt := attempt + 1;
                        BEGIN
                            INSERT INTO inline_blobs(id, data) VALUES (d->>'blob', p_bytes[i]);
                            SELECT p.made, p.touch INTO made, touch FROM stow_place_file_untouched(
                                d->>'namespace', ARRAY(SELECT jsonb_array_elements_text(d->'segments')), d,
                                d->>'blob', (d->>'size')::bigint, d->>'sha256', p_now, p_grace) p;
                            IF touch IS NOT NULL AND NOT touch = ANY(touched) THEN touched := touched || touch; END IF;
                            idx := i; err_code := NULL; err_message := NULL; err_detail := NULL;
                            SELECT * INTO node FROM inodes WHERE ino = made;
                            RETURN NEXT;
                            EXIT;
                        EXCEPTION
                            WHEN unique_violation OR SQLSTATE 'SN040' THEN
                                -- Another transaction made the same name meanwhile: look again.
                                IF attempt >= 5 THEN
                                    idx := i; err_code := 'SN009'; err_message := 'the file changed while it was being stored; try again';
                                    err_detail := ''; node := NULL; RETURN NEXT; EXIT;
                                END IF;
                            WHEN OTHERS THEN
                                GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
                                -- The file's own refusals and bad data are its own; anything else (a deadlock, a
                                -- shutdown) is the whole call's, and the store runs it again or fails it.
                                IF code LIKE 'SN%' OR code LIKE '22%' THEN
                                    idx := i; err_code := code; err_message := msg; err_detail := det; node := NULL;
                                    RETURN NEXT; EXIT;
                                END IF;
                                RAISE;
                        END;
                    END LOOP;
                END LOOP;
                PERFORM stow_touch(touched, stow_now());
            END $$
            """,
            // `stow_remove_entry` for a file, without touching its folder.
            """
            CREATE FUNCTION stow_drop_file_entry(p_parent bigint, p_name text, p_ino bigint, p_now bigint, p_grace bigint) RETURNS void
            LANGUAGE plpgsql AS $$
            DECLARE remaining bigint; b text;
            BEGIN
                DELETE FROM entries WHERE parent = p_parent AND name = p_name;
                SELECT count(*) INTO remaining FROM entries WHERE ino = p_ino;
                IF remaining = 0 THEN
                    SELECT i.blob INTO b FROM inodes i WHERE i.ino = p_ino;
                    IF b IS NOT NULL THEN PERFORM stow_retire(b, p_now, p_grace); END IF;
                    DELETE FROM inodes WHERE ino = p_ino;
                ELSE
                    UPDATE inodes SET nlink = remaining, ctime_ns = p_now WHERE ino = p_ino;
                END IF;
            END $$
            """,
            """
            CREATE FUNCTION stow_remove_files(p_ns text, p_paths text[], p_if_match text[], p_match boolean[], p_inodes bigint[], p_grace bigint)
            RETURNS TABLE(idx int, err_code text, err_message text, err_detail text) LANGUAGE plpgsql AS $$
            DECLARE r bigint := stow_enter(p_ns); segs text[]; n int; v_parent bigint; v_target bigint; t inodes;
                attempt int; code text; msg text; det text; touched bigint[] := '{}';
            BEGIN
                FOR i IN 1..coalesce(array_length(p_paths, 1), 0) LOOP
                    segs := CASE WHEN p_paths[i] = '' THEN '{}'::text[] ELSE string_to_array(p_paths[i], '/') END;
                    n := stow_len(segs);
                    attempt := 0;
                    LOOP
                        attempt := attempt + 1;
                        BEGIN
                            IF n = 0 THEN PERFORM stow_fail('SN006', 'is a folder', ''); END IF;
                            v_parent := stow_resolve_folder(r, segs[1:n-1]);
                            v_target := stow_lookup(v_parent, segs[n]);
                            IF v_target IS NULL THEN PERFORM stow_fail('SN002', 'not found', p_paths[i]); END IF;
                            PERFORM stow_lock(ARRAY[v_parent, v_target]);
                            IF stow_lookup(v_parent, segs[n]) IS DISTINCT FROM v_target THEN PERFORM stow_retry(); END IF;
                            IF p_inodes[i] <> 0 AND p_inodes[i] <> v_target THEN
                                PERFORM stow_fail('SN008', format('`%s` is another file now (inode %s)', p_paths[i], v_target));
                            END IF;
                            SELECT * INTO t FROM inodes WHERE ino = v_target;
                            IF t.kind = 'dir' THEN PERFORM stow_fail('SN006', 'is a folder', p_paths[i]); END IF;
                            IF p_match[i] AND NOT stow_etag_matches(p_if_match[i], stow_etag(t)) THEN
                                PERFORM stow_fail('SN008', format('`%s` has changed (ETag %s)', p_paths[i], stow_etag(t)));
                            END IF;
                            PERFORM stow_drop_file_entry(v_parent, segs[n], v_target, stow_now(), p_grace);
                            IF NOT v_parent = ANY(touched) THEN touched := touched || v_parent; END IF;
                            idx := i; err_code := NULL; err_message := NULL; err_detail := NULL;
                            RETURN NEXT;
                            EXIT;
                        EXCEPTION
                            WHEN SQLSTATE 'SN040' THEN
                                -- Moved or deleted meanwhile: look again.
                                IF attempt >= 5 THEN
                                    idx := i; err_code := 'SN009'; err_message := 'the file changed while it was being deleted; try again';
                                    err_detail := ''; RETURN NEXT; EXIT;
                                END IF;
                            WHEN OTHERS THEN
                                GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
                                -- The file's own refusals are its own; anything else (a deadlock, a shutdown)
                                -- is the whole call's, and the store runs it again or fails it.
                                IF code LIKE 'SN%' OR code LIKE '22%' THEN
                                    idx := i; err_code := code; err_message := msg; err_detail := det;
                                    RETURN NEXT; EXIT;
                                END IF;
                                RAISE;
                        END;
                    END LOOP;
                END LOOP;
                PERFORM stow_touch(touched, stow_now());
            END $$
            """,
        ])

    /// An exchange only if its two names still hold the inodes the client saw (`RenameRequest`'s
    /// `if_from_inode`, `if_to_inode`): sent again after its answer was lost, an exchange would
    /// swap back. Both names' entries are locked as `stow_rename` locks them (their parents and
    /// inodes, in inode order: it takes the same locks again, held already), then compared.
    static let exchangeIf = Migration(
        version: 10, name: "exchange on condition",
        statements: [
            """
            CREATE FUNCTION stow_exchange_if(
                p_ns text, p_from text[], p_to text[], p_from_ino bigint, p_to_ino bigint,
                p_from_within_to boolean, p_grace bigint, p_exclusive boolean
            ) RETURNS SETOF inodes LANGUAGE plpgsql AS $$
            DECLARE
                r bigint := stow_enter(p_ns, p_exclusive); nf int := stow_len(p_from); nt int := stow_len(p_to);
                from_parent bigint; to_parent bigint;
            BEGIN
                IF nf = 0 OR nt = 0 THEN PERFORM stow_fail('SN007', 'the root folder cannot be renamed'); END IF;
                from_parent := stow_resolve_folder(r, p_from[1:nf-1]);
                to_parent := stow_resolve_folder(r, p_to[1:nt-1]);
                PERFORM stow_lock(ARRAY[from_parent, to_parent, stow_lookup(from_parent, p_from[nf]), stow_lookup(to_parent, p_to[nt])]);
                -- A name gone is a 404, as `stow_rename` (and SQLite) say it, not a 412.
                IF stow_lookup(from_parent, p_from[nf]) IS NULL THEN PERFORM stow_fail('SN002', 'not found', stow_join(p_from, nf)); END IF;
                IF stow_lookup(to_parent, p_to[nt]) IS NULL THEN PERFORM stow_fail('SN002', 'not found', stow_join(p_to, nt)); END IF;
                IF stow_lookup(from_parent, p_from[nf]) IS DISTINCT FROM p_from_ino
                   OR stow_lookup(to_parent, p_to[nt]) IS DISTINCT FROM p_to_ino THEN
                    PERFORM stow_fail('SN008', format('`%s` and `%s` are not the files the exchange expected',
                        stow_join(p_from, nf), stow_join(p_to, nt)));
                END IF;
                RETURN QUERY SELECT * FROM stow_rename(p_ns, p_from, p_to, false, true, false, p_from_within_to, p_grace, p_exclusive);
            END $$
            """
        ])
}
