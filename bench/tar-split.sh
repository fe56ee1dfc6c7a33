#!/bin/bash
# bench/tar-split.sh [--pause] [BIN] [RUNS] — W6 taken apart: `tar x` of the bench's tree into a
# mount with its own stowd, then `stowfs sync`, each timed on its own, so that what `tar` waits
# for is told from what the uploads need after it. With --pause, uploads are held (`stowfs pause`)
# during `tar` and resumed before the `sync`: `tar`'s time without the uploads beside it.
# WRAP="python3 bench/fuse-requests.py --" puts a command in front of `tar` (its FUSE requests).
# BIN holds release builds of stowfs and stowd (default .build/release); RUNS defaults to 3.
# The tree is the one `bench/fsbench.py` makes (run it once first); needs root and /dev/fuse.
# Each run starts its own stowd and mount and stops both, also on failure. Each run prints the CPU
# time (user + system) stowfs and stowd used from the start of `tar` to the end of the `sync`.
set -euo pipefail
PAUSE=
if [ "${1:-}" = "--pause" ]; then PAUSE=1; shift; fi
BIN=${1:-$(dirname "$0")/../.build/release}; RUNS=${2:-3}
TAR=${TAR:-/var/tmp/stowfs-bench/src/tree-2000.tar}
[ -f "$TAR" ] || { echo "no $TAR: run bench/fsbench.py once (it makes the tree)" >&2; exit 2; }
R=/var/tmp/stowfs-tar-split
export STOWFS_TOKEN=tar-split STOWD_TOKEN=tar-split
SERVER= MOUNT=
cleanup() {
    if [ -n "$MOUNT" ]; then
        "$BIN/stowfs" unmount "$R/mnt" > /dev/null 2>&1 || fusermount3 -u -z "$R/mnt" 2> /dev/null || true
        wait "$MOUNT" 2> /dev/null || true
    fi
    if [ -n "$SERVER" ]; then kill "$SERVER" 2> /dev/null || true; wait "$SERVER" 2> /dev/null || true; fi
    MOUNT= SERVER=
}
trap 'cleanup; rm -rf "$R"' EXIT
ms() { local n; n=$(date +%s%N); echo $((n / 1000000)); }
# CPU time (user + system, ms) a process has used so far, from /proc.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ print int(($14 + $15) * 1000 / hz) }' "/proc/$1/stat"; }
for run in $(seq 1 "$RUNS"); do
    rm -rf "$R"; mkdir -p "$R/home" "$R/mnt"
    export HOME=$R/home
    "$BIN/stowd" --data-dir "$R/data" --port 0 --log-level warning > "$R/endpoint" 2> "$R/stowd.log" &
    SERVER=$!
    for _ in $(seq 1 100); do [ -s "$R/endpoint" ] && break; sleep 0.1; done
    "$BIN/stowfs" mount split "$R/mnt" --endpoint "$(head -1 "$R/endpoint")" --cache-dir "$R/cache" --create --foreground \
        --log-level warning > "$R/mount.log" 2>&1 &
    MOUNT=$!
    for _ in $(seq 1 100); do mountpoint -q "$R/mnt" && break; sleep 0.1; done
    mkdir "$R/mnt/tree"
    [ -n "$PAUSE" ] && "$BIN/stowfs" pause "$R/mnt" > /dev/null
    start=$(ms); server0=$(cpu_ms "$SERVER"); mount0=$(cpu_ms "$MOUNT")
    ${WRAP:-} tar xf "$TAR" -C "$R/mnt/tree"
    middle=$(ms)
    [ -n "$PAUSE" ] && "$BIN/stowfs" resume "$R/mnt" > /dev/null
    "$BIN/stowfs" sync "$R/mnt" > /dev/null
    end=$(ms)
    echo "run $run${PAUSE:+ (paused)}: tar $((middle - start)) ms, sync after it $((end - middle)) ms, together $((end - start)) ms;" \
        "CPU of stowfs $(($(cpu_ms "$MOUNT") - mount0)) ms, of stowd $(($(cpu_ms "$SERVER") - server0)) ms"
    cleanup
done
