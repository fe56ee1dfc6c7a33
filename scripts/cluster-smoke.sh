#!/usr/bin/env bash
# Smoke check of the local cluster (issue 15): scripts/cluster.sh up in a folder of its own, mount a
# namespace through nginx with the release stowfs (--create), copy a tree of 300 small files,
# sync, kill -9 one replica, copy a second tree of 300 and a third of 30 files of 64 KiB to 1 MiB
# and sync; then stop PostgreSQL, write more (close returns: the files wait in the mount's queue),
# check that sync waits, start it again and sync; the same with the S3 server stopped; unmount,
# mount again with an empty cache (so every byte comes from the cluster),
# diff -r the trees against their sources, unmount,
# scripts/cluster.sh down, and check that no process it started (stowd, nginx, postgres, weed,
# stowfs) and no mount is left. Whatever fails, the traps unmount and bring the cluster down; the
# work folder (logs) is kept on failure. Binaries: $STOW_BIN_DIR, default .build/release (which
# scripts/cluster.sh builds when it has none).
# shellcheck disable=SC1090,SC1091,SC2154  # it reads the cluster's state file and the S3 env file
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${STOW_BIN_DIR:-$root/.build/release}"
cluster="$root/scripts/cluster.sh"
work="$(mktemp -d /tmp/stow-cluster-smoke-XXXXXX)"
chmod 711 "$work"   # PostgreSQL runs as `postgres` when this runs as root: it must pass through
cdir="$work/cluster"; mnt="$work/mnt"; src="$work/src"
mkdir -p "$mnt" "$src/a" "$src/b" "$src/c" "$src/e" "$src/f"
t0=$SECONDS; tstep=$SECONDS

step() { echo "== [$((SECONDS - t0)) s, previous step $((SECONDS - tstep)) s] $*"; tstep=$SECONDS; }
mounted() { grep -qF " $mnt fuse" /proc/mounts; }
fail() { echo "SMOKE FAILED: $*" >&2; exit 1; }

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if mounted; then
        echo "cleanup: unmounting $mnt" >&2
        timeout 60 "$bin/stowfs" unmount "$mnt" --no-wait >&2 || fusermount3 -uz "$mnt" || true
    fi
    if [ -f "$cdir/state" ]; then
        echo "cleanup: stopping the cluster" >&2
        "$cluster" down --dir "$cdir" >&2 || true
    fi
    if [ "$status" -eq 0 ]; then
        rm -rf "$work"
    else
        echo "SMOKE FAILED (exit $status) after $((SECONDS - t0)) s; logs kept in $cdir/logs, stowfs's in ~/.cache/stowfs/logs" >&2
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Two trees of 300 small files (< 64 KiB) from /usr/share/doc, copied to a local folder first: fixed
# sources to compare with. stowfs sends files this small in batches and stowd keeps their bytes in
# PostgreSQL; the third tree, of files between 64 KiB and 1 MiB, goes as direct uploads (one request
# each) whose bytes stowd puts in S3.
step "preparing trees of small files from /usr/share/doc"
(cd /usr/share/doc && find . -type f -size -64k -readable | LC_ALL=C sort) > "$work/files"
[ "$(wc -l < "$work/files")" -ge 600 ] || fail "fewer than 600 files under 64 KiB in /usr/share/doc"
(cd /usr/share/doc && head -300 "$work/files" | tar -cf - -T - | tar -xf - -C "$src/a")
(cd /usr/share/doc && sed -n 301,600p "$work/files" | tar -cf - -T - | tar -xf - -C "$src/b")
(cd /usr/share/doc && find . -type f -size +64k -size -1024k -readable | LC_ALL=C sort) > "$work/files-c"
(cd /usr/share/doc && head -30 "$work/files-c" | tar -cf - -T - | tar -xf - -C "$src/c")
# A fourth tree of large files: one copied with cp (written from empty by appends: streamed while
# it is written, straight to S3 in parts), and one changed
# in place after it was stored (sent again from its local copy, straight to the store in parts).
head -c $((40 << 20)) /dev/urandom > "$src/d.stream"
head -c $((27 << 20)) /dev/urandom > "$src/d.edited"
mkdir -p "$src/d"
cp "$src/d.stream" "$src/d/stream.bin"
# Written while PostgreSQL is away (e: small files and one of 3 MiB) and while the S3 server is (f).
(cd /usr/share/doc && sed -n 601,650p "$work/files" | tar -cf - -T - | tar -xf - -C "$src/e")
head -c $((3 << 20)) /dev/urandom > "$src/e/three.bin"
(cd /usr/share/doc && sed -n 651,700p "$work/files" | tar -cf - -T - | tar -xf - -C "$src/f")
for i in 1 2 3; do head -c $((2 << 20)) /dev/urandom > "$src/f/two-$i.bin"; done
for t in a b c e f; do
    echo "   $t: $(find "$src/$t" -type f | wc -l) files, $(du -sk --apparent-size "$src/$t" | cut -f1) KiB"
done

# Copies tree $1 while part $2 of the cluster is away: every close returns (the files wait in the
# mount's queue), a sync started then is still waiting 5 s later, and once the part is back the
# sync returns 0 within 180 s.
while_away() {
    local t="$1" part="$2" sync_pid status
    # The folders first: making one is a change of the tree, which needs the server (S12).
    (cd "$src/$t" && find . -type d) | (cd "$mnt" && mkdir -p "$t" && cd "$t" && xargs mkdir -p)
    ls -R "$mnt/$t" > /dev/null
    step "halt-$part; cp -r tree $t (into its folders) while it is away"
    "$cluster" "halt-$part" --dir "$cdir"
    cp -r "$src/$t/." "$mnt/$t/" || fail "cp -r of tree $t while the $part is away (a close should return: the files are queued)"
    "$bin/stowfs" sync "$mnt" > "$work/sync-$t.log" 2>&1 &
    sync_pid=$!
    sleep 5
    kill -0 "$sync_pid" 2>/dev/null || { cat "$work/sync-$t.log" >&2; fail "stowfs sync returned while the $part was away"; }
    "$bin/stowfs" status "$mnt" | sed 's/^/     /' | head -8
    step "resume-$part; the sync started while it was away returns"
    "$cluster" "resume-$part" --dir "$cdir"
    for _ in $(seq 180); do kill -0 "$sync_pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$sync_pid" 2>/dev/null && { kill "$sync_pid"; "$bin/stowfs" status "$mnt" >&2 || true; fail "stowfs sync still waiting 180 s after the $part came back"; }
    wait "$sync_pid" && status=0 || status=$?
    [ "$status" -eq 0 ] || { cat "$work/sync-$t.log" >&2; fail "stowfs sync failed (exit $status) after the $part came back"; }
}

step "scripts/cluster.sh up"
"$cluster" up --dir "$cdir"
endpoint="$(. "$cdir/state"; echo "$endpoint")"
bin="$(. "$cdir/state"; echo "$bin_dir")"

step "mount the namespace smoke at $mnt through $endpoint (--create)"
"$bin/stowfs" mount smoke "$mnt" --endpoint "$endpoint" --token-file "$cdir/token" --create --cache-dir "$work/cache1"

step "cp -r tree a"
cp -r "$src/a" "$mnt/a"
step "stowfs sync"
"$bin/stowfs" sync "$mnt" || { "$bin/stowfs" status "$mnt" >&2 || true; fail "stowfs sync after tree a"; }

step "kill -9 of replica 2"
"$cluster" kill-replica 2 --dir "$cdir"

# Bytes of file content the live replicas (1 and 3) have received, from their /metrics.
received() {
    local total=0 i port v
    for i in 1 3; do
        port="$(. "$cdir/state"; eval "echo \${replica_${i}_port}")"
        v="$(curl -sf "http://127.0.0.1:$port/metrics" | awk '$1 == "stowd_bytes_received_total" { printf "%d", $2 }')"
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

step "cp -r trees b and c, and large files (replica 2 is dead)"
cp -r "$src/b" "$mnt/b"
cp -r "$src/c" "$mnt/c"
mkdir "$mnt/d"
# The small files first (their bytes do go through the replicas), so that they are not counted below.
"$bin/stowfs" sync "$mnt" || fail "stowfs sync after trees b and c"
before="$(received)"
cp "$src/d.stream" "$mnt/d/stream.bin"
# Streamed while written, straight to S3 in parts: not a byte of it through a replica.
through=$(($(received) - before))
echo "   the 40 MiB streamed through the replicas: $through bytes (before it, they had received $before)"
[ "$before" -gt 0 ] || fail "the replicas report no bytes received at all: is /metrics read right?"
[ "$through" -lt $((1 << 20)) ] || fail "the streamed file's bytes went through the replicas ($through bytes), not straight to S3"
cp "$src/d.edited" "$mnt/d/edited.bin"
"$bin/stowfs" sync "$mnt" || fail "stowfs sync after the large files"
# Overwrite 1 MiB in the middle, in place: the file is sent again whole, in parts, straight to S3.
dd if=/dev/urandom of="$src/d.edited" bs=1M seek=13 count=1 conv=notrunc status=none
dd if="$src/d.edited" of="$mnt/d/edited.bin" bs=1M skip=13 seek=13 count=1 conv=notrunc status=none
cp "$src/d.edited" "$src/d/edited.bin"
step "stowfs sync"
"$bin/stowfs" sync "$mnt" || { "$bin/stowfs" status "$mnt" >&2 || true; fail "stowfs sync after tree b"; }

while_away e database
while_away f store

step "stowfs unmount"
"$bin/stowfs" unmount "$mnt"
mounted && fail "$mnt is still mounted after stowfs unmount"

step "mount again with an empty cache"
"$bin/stowfs" mount smoke "$mnt" --endpoint "$endpoint" --token-file "$cdir/token" --cache-dir "$work/cache2"
step "diff -r of the six trees"
for t in a b c d e f; do diff -r "$src/$t" "$mnt/$t" || fail "tree $t differs"; done
echo "   the six trees are identical to their sources"
step "stowfs unmount"
"$bin/stowfs" unmount "$mnt"

# Where requests went, by replica, from nginx's access log (the dead one appears beside a live one
# when nginx moved a request on).
echo "   requests by upstream (nginx-access.log):"
sed -n 's/.*upstream=\(.*\) (\(.*\))$/\1 -> \2/p' "$cdir/logs/nginx-access.log" | sort | uniq -c | sort -rn | head -12 | sed 's/^/     /'
echo "   objects in the bucket: $(. "$cdir/s3/env"; python3 - "$STOW_TEST_S3_ENDPOINT" "$STOW_TEST_S3_ACCESS_KEY" "$STOW_TEST_S3_SECRET_KEY" <<'PY'
import sys, botocore.session, botocore.config
c = botocore.session.get_session().create_client("s3", endpoint_url=sys.argv[1], aws_access_key_id=sys.argv[2],
    aws_secret_access_key=sys.argv[3], region_name="us-east-1", config=botocore.config.Config(s3={"addressing_style": "path"}))
print(sum(p.get("KeyCount", 0) for p in c.get_paginator("list_objects_v2").paginate(Bucket="stow-test", Prefix="cluster/blobs/")))
PY
)"
echo "   answers by status:$(sed -n 's/^[^"]*"[^"]*" \([0-9]*\) .*/\1/p' "$cdir/logs/nginx-access.log" | sort | uniq -c | awk '{printf " %s × %s", $2, $1}')"

# Every process the cluster runs, with its children (postgres's backends, nginx's workers).
. "$cdir/state"
pids=()
for p in "${nginx_pid:-}" "${pg_pid:-}" "${s3_pid:-}" $(for ((i = 1; i <= replicas; i++)); do eval echo "\${replica_${i}_pid:-}"; done); do
    [ -n "$p" ] || continue
    pids+=("$p")
    while read -r child; do pids+=("$child"); done < <(ps -o pid= --ppid "$p" 2>/dev/null || true)
done

step "scripts/cluster.sh down"
"$cluster" down --dir "$cdir"

step "checking that nothing is left"
left=()
for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || continue
    # A zombie has stopped; only its parent's wait is missing.
    [ "$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -c1)" = Z ] && continue
    left+=("$p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)")
done
[ ${#left[@]} -eq 0 ] || { printf '   left running: %s\n' "${left[@]}" >&2; fail "processes left"; }
stray="$(pgrep -af -- "$work" || true)"
[ -z "$stray" ] || { echo "$stray" >&2; fail "processes naming $work left"; }
grep -F " $work" /proc/mounts && fail "a mount under $work is left"
[ -f "$cdir/state" ] && fail "the state file is left"
echo "   none of the ${#pids[@]} processes it ran is left (stowd, nginx, postgres, weed); no mount, no state"
step "smoke check passed in $((SECONDS - t0)) s"
