#!/usr/bin/env bash
# bench/remount.sh [--folders F] [--files N] [--rounds R] BIN[,BIN2...] — a remount, and `ls -lR`
# of everything right after it: what a mount costs when the last clean unmount kept its listings
# (SEMANTICS S8a). For each build: its own embedded stowd and cache folder, F folders of N files
# of 100 bytes written through the mount and stored, `ls -lR` of the whole tree (so that the mount
# knows it), then R rounds of: clean unmount, page cache dropped, mount (timed until the folder is
# mounted), `ls -lR` of the tree (timed), stowfs's VmHWM. BIN holds release builds of stowfs and
# stowd. Needs root and /dev/fuse. Stops each stowd and mount it starts, also on failure.
set -euo pipefail
F=20 N=1000 ROUNDS=3
while [ $# -gt 1 ]; do
    case "$1" in
        --folders) F=$2; shift 2 ;;
        --files) N=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        *) break ;;
    esac
done
[ $# -eq 1 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
R=/var/tmp/stowfs-remount
export STOWFS_TOKEN=remount STOWD_TOKEN=remount
BIN= SERVER= MOUNT=
cleanup() {
    if [ -n "$MOUNT" ]; then
        # (A mount still starting has no control socket yet: then it is stopped by its pid.)
        "$BIN/stowfs" unmount "$R/mnt" > /dev/null 2>&1 || fusermount3 -u -z "$R/mnt" 2> /dev/null || kill "$MOUNT" 2> /dev/null || true
        wait "$MOUNT" 2> /dev/null || true
    fi
    if [ -n "$SERVER" ]; then kill "$SERVER" 2> /dev/null || true; wait "$SERVER" 2> /dev/null || true; fi
    MOUNT= SERVER=
}
# Never removes the work folder through a mount that would not go.
remove_work() { if mountpoint -q "$R/mnt" 2> /dev/null; then echo "left $R: $R/mnt is still mounted" >&2; return 1; fi; rm -rf "$R"; }
trap 'cleanup; remove_work' EXIT
ms() { local n; n=$(date +%s%N); echo $((n / 1000000)); }
# Sets $took (not in a subshell: $MOUNT must stay this shell's).
mount_timed() {
    local s
    s=$(ms)
    "$BIN/stowfs" mount remount "$R/mnt" --endpoint "$(head -1 "$R/endpoint")" --cache-dir "$R/cache" --create --foreground \
        --log-level info > "$R/mount.log" 2>&1 &
    MOUNT=$!
    for _ in $(seq 1 2000); do mountpoint -q "$R/mnt" && break; sleep 0.005; done
    mountpoint -q "$R/mnt" || { echo "the mount did not come up:" >&2; cat "$R/mount.log" >&2; exit 1; }
    took=$(($(ms) - s))
}
for BIN in ${1//,/ }; do
    remove_work; mkdir -p "$R/home" "$R/mnt"
    export HOME=$R/home
    "$BIN/stowd" --data-dir "$R/data" --port 0 --log-level warning > "$R/endpoint" 2> "$R/stowd.log" &
    SERVER=$!
    for _ in $(seq 1 100); do [ -s "$R/endpoint" ] && break; sleep 0.1; done
    mount_timed
    sleep 1 # the change feed followed before the tree is made (listings taken before are not held)
    python3 - "$R/mnt" "$F" "$N" << 'PY'
import os, sys
m, folders, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for d in range(folders):
    os.mkdir(f"{m}/d{d}")
    for i in range(files):
        with open(f"{m}/d{d}/f{i}", "wb") as f:
            f.write(b"x" * 100)
PY
    "$BIN/stowfs" sync "$R/mnt" > /dev/null
    ls -lR "$R/mnt" > /dev/null
    for r in $(seq 1 "$ROUNDS"); do
        "$BIN/stowfs" unmount "$R/mnt" > /dev/null
        wait "$MOUNT" || true
        MOUNT=
        sync
        echo 3 > /proc/sys/vm/drop_caches
        mount_timed
        s=$(ms)
        lines=$(ls -lR "$R/mnt" | wc -l)
        e=$(ms)
        kept=$(grep -o 'listings kept at the last unmount[^"]*' "$R/mount.log" | head -1 || true)
        echo "$BIN round $r: mount $took ms, ls -lR $((e - s)) ms ($lines lines), stowfs VmHWM $(awk '/VmHWM/ {printf "%.0f MiB", $2 / 1024}' /proc/$MOUNT/status)${kept:+; $kept}"
    done
    cleanup
done
