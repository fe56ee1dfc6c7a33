#!/bin/bash
# scripts/powercut-probe.sh BIN [FILES] — a power cut under the mount's cache folder, by hand.
#
# The cache folder lives on LazyFS (github.com/dsrhaslab/lazyfs, built by hand: it is not in
# Debian, and CI has no way to fetch it), which keeps every write that was not fsynced in its own
# memory until told to drop it. The probe:
#   1. starts stowd (on the plain disk) and a mount of BIN's stowfs whose cache folder is on LazyFS;
#   2. pauses the uploads, and writes FILES files (default 300): most of 1–8 KiB (their bytes go
#      into the journal's record), every tenth of 100 KiB (fsynced at close), each closed;
#   3. cuts the power: `kill -9` of the mount, then LazyFS drops everything not fsynced
#      (`lazyfs::clear-cache`), and LazyFS itself is restarted over what is left;
#   4. counts the local copies the cut emptied (what only the journal can bring back), mounts
#      again on the same cache folder, resumes, syncs, and compares every file with its source.
# Exit 0 when every file closed before the cut reads back whole; 1 otherwise. S1 and S2 of
# docs/SEMANTICS.md are what it checks. POWERCUT_DROP_LOG=1 removes the journal's close log after
# the cut: the probe's control, which must fail.
# POWERCUT_MOVE=1: the cut comes in the middle of `mv cut moved`, right after the server renamed
# the folder and before the journal moved the records of its files (the mount's process ends
# there: STOWFS_TEST_FAULT=exit-after-server-move, which only a debug build reads: BIN must be
# one, e.g. .build/debug); the files must come back under `moved/`, and
# `cut` must not come back on the server (docs/SEMANTICS.md, S14).
#
# Uploads stay paused until after the cut: with them running, the cache folder also sees the
# truncates and punched holes of copies reused after their upload and of the block cache's pack,
# and LazyFS a47a5ba died at the first `ftruncate` here ("Transport endpoint is not connected"), which is LazyFS's limit, not a power cut.
# Needs root, /dev/fuse and LAZYFS (default /tmp/lazyfs-src/lazyfs/build/lazyfs). Everything it
# starts it stops, by pid, also on failure; it leaves no mount behind.
set -euo pipefail
BIN=${1:?usage: $0 BIN [FILES]}
FILES=${2:-300}
LAZYFS=${LAZYFS:-/tmp/lazyfs-src/lazyfs/build/lazyfs}
[ -x "$LAZYFS" ] || { echo "no LazyFS at $LAZYFS (set LAZYFS)" >&2; exit 2; }
R=/var/tmp/stowfs-powercut
export STOWFS_TOKEN=powercut STOWD_TOKEN=powercut
SERVER= MOUNT= LZ=
lazy_up() {
    setsid "$LAZYFS" "$R/lz" --config-path "$R/lazyfs.toml" -o allow_other -o modules=subdir -o subdir="$R/lzdata" -f \
        > "$R/lazyfs.log" 2>&1 < /dev/null &
    LZ=$!
    for _ in $(seq 1 150); do
        grep -q "waiting for fault commands" "$R/lazyfs.log" 2> /dev/null && mountpoint -q "$R/lz" && return 0
        sleep 0.2
    done
    echo "LazyFS did not come up:" >&2
    cat "$R/lazyfs.log" >&2
    return 1
}
lazy_down() {
    if [ -n "$LZ" ]; then
        fusermount3 -u "$R/lz" 2> /dev/null || fusermount3 -uz "$R/lz" 2> /dev/null || true
        for _ in $(seq 1 50); do kill -0 "$LZ" 2> /dev/null || break; sleep 0.2; done
        kill -9 "$LZ" 2> /dev/null || true
        wait "$LZ" 2> /dev/null || true
        LZ=
    fi
}
mount_fs() {
    env ${FAULT:+STOWFS_TEST_FAULT=$FAULT} "$BIN/stowfs" mount pc "$R/mnt" --endpoint "$(head -1 "$R/endpoint")" --cache-dir "$R/lz/cache" --create --foreground \
        --log-level warning >> "$R/mount.log" 2>&1 &
    MOUNT=$!
    for _ in $(seq 1 150); do mountpoint -q "$R/mnt" && return 0; sleep 0.1; done
    echo "the mount did not come up:" >&2
    tail -20 "$R/mount.log" >&2
    return 1
}
cleanup() {
    if [ -n "$MOUNT" ]; then
        "$BIN/stowfs" unmount "$R/mnt" > /dev/null 2>&1 || fusermount3 -uz "$R/mnt" 2> /dev/null || true
        wait "$MOUNT" 2> /dev/null || true
    fi
    lazy_down
    if [ -n "$SERVER" ]; then kill "$SERVER" 2> /dev/null || true; wait "$SERVER" 2> /dev/null || true; fi
}
trap 'cleanup; rm -rf "$R"' EXIT
rm -rf "$R"
mkdir -p "$R/home" "$R/mnt" "$R/lz" "$R/lzdata" "$R/src"
export HOME=$R/home
cat > "$R/lazyfs.toml" << TOML
[faults]
fifo_path="$R/faults.fifo"
[cache]
apply_eviction=false
[cache.simple]
custom_size="1gb"
blocks_per_page=1
[filesystem]
log_all_operations=false
logfile=""
TOML
python3 - "$R/src" "$FILES" << 'PY'
import os, random, sys
random.seed(44)
for i in range(int(sys.argv[2])):
    size = 100 * 1024 if i % 10 == 0 else random.randint(1024, 8192)
    with open(os.path.join(sys.argv[1], f"f{i:04d}"), "wb") as f:
        f.write(os.urandom(size))
PY

"$BIN/stowd" --data-dir "$R/data" --port 0 --log-level warning > "$R/endpoint" 2> "$R/stowd.log" &
SERVER=$!
for _ in $(seq 1 100); do [ -s "$R/endpoint" ] && break; sleep 0.1; done
lazy_up
FAULT=${POWERCUT_MOVE:+exit-after-server-move}
mount_fs
FAULT=
"$BIN/stowfs" pause "$R/mnt" > /dev/null
mkdir "$R/mnt/cut"
# Each file written and closed (cp closes each before the next).
cp "$R"/src/* "$R/mnt/cut/"
echo "wrote $FILES files, each closed, uploads paused"
WANT=cut
if [ -n "${POWERCUT_MOVE:-}" ]; then
    WANT=moved
    if mv "$R/mnt/cut" "$R/mnt/moved" 2> /dev/null; then echo "mv went through: the fault did not fire" >&2; exit 1; fi
    for _ in $(seq 1 100); do kill -0 "$MOUNT" 2> /dev/null || break; sleep 0.1; done
    grep -q "the process ends now" "$R/mount.log" || { echo "the mount did not end at the fault:" >&2; tail -5 "$R/mount.log" >&2; exit 1; }
    echo "mv cut moved: the mount's process ended right after the server's rename"
fi

# The cut.
kill -9 "$MOUNT" 2> /dev/null || true
wait "$MOUNT" 2> /dev/null || true
MOUNT=
fusermount3 -uz "$R/mnt" 2> /dev/null || true
echo "lazyfs::clear-cache" > "$R/faults.fifo"
sleep 1
lazy_down
echo "power cut: the mount killed, LazyFS dropped what was not fsynced"
empty=$(find "$R/lzdata/cache/files" -type f -size -1k 2> /dev/null | wc -l)
echo "local copies under 1 KiB after the cut (emptied; only the journal has their bytes): $empty"
# The probe's own control: without the close log, what SQLite lost stays lost (exit 1).
if [ -n "${POWERCUT_DROP_LOG:-}" ]; then rm -f "$R/lzdata/cache/journal.sqlite-close.log"; echo "control: the close log removed"; fi
# What SQLite kept of the journal (read from a copy: opening it would change it).
mkdir -p "$R/peek"
cp "$R/lzdata/cache/journal.sqlite"* "$R/peek/" 2> /dev/null || true
python3 - "$R/peek/journal.sqlite" << 'PY'
import sqlite3, sys
try:
    rows = sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM uploads").fetchone()[0]
except Exception as e:
    rows = f"none ({e})"
print(f"journal rows SQLite kept on disk: {rows}; the rest are in the close log only")
PY

lazy_up
mount_fs
"$BIN/stowfs" resume "$R/mnt" > /dev/null 2>&1 || true
"$BIN/stowfs" sync "$R/mnt" > /dev/null
# Read back through a mount with a cache folder of its own (on the plain disk): what the server has.
"$BIN/stowfs" unmount "$R/mnt" > /dev/null
wait "$MOUNT" 2> /dev/null || true
MOUNT=
"$BIN/stowfs" mount pc "$R/mnt" --endpoint "$(head -1 "$R/endpoint")" --cache-dir "$R/cache2" --foreground \
    --log-level warning >> "$R/mount.log" 2>&1 &
MOUNT=$!
for _ in $(seq 1 150); do mountpoint -q "$R/mnt" && break; sleep 0.1; done
python3 - "$R/src" "$R/mnt/$WANT" "$R/mnt" << 'PY'
import os, sys
src, got, root = sys.argv[1], sys.argv[2], sys.argv[3]
print(f"folders on the server: {sorted(os.listdir(root))}")
if sorted(os.listdir(root)) != [os.path.basename(got)]:
    print("the server should hold that one folder only")
    sys.exit(1)
names = sorted(os.listdir(src))
missing = [n for n in names if not os.path.exists(os.path.join(got, n))]
wrong = [n for n in names if n not in missing
         and open(os.path.join(src, n), "rb").read() != open(os.path.join(got, n), "rb").read()]
print(f"on the server after the restart: {len(names) - len(missing) - len(wrong)} of {len(names)} files whole, "
      f"{len(missing)} missing, {len(wrong)} with other bytes")
sys.exit(1 if missing or wrong else 0)
PY
