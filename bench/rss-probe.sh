#!/bin/bash
# bench/rss-probe.sh [BIN] [N] — the memory of a mount as a folder fills: an embedded mount (its own
# HOME under /tmp/stowfs-rss-probe), N files of 1 KiB made in one folder by a Python loop, then
# `stowfs sync`, then `ls -l` of the folder, then `rm -rf` of it until durable (`stowfs sync`),
# timed. Prints stowfs's VmRSS and VmHWM after each step.
# BIN holds release builds of stowfs and stowd (default .build/release); N defaults to 30000.
# Needs root and /dev/fuse. Unmounts and removes its folder when done, also on failure.
set -euo pipefail
BIN=${1:-$(dirname "$0")/../.build/release}; N=${2:-30000}
R=/tmp/stowfs-rss-probe
rm -rf "$R"; mkdir -p "$R/home" "$R/mnt"
export HOME=$R/home
"$BIN/stowfs" mount rss "$R/mnt" --create --foreground > "$R/mount.log" 2>&1 &
PID=$!
cleanup() {
    "$BIN/stowfs" unmount "$R/mnt" > /dev/null 2>&1 || fusermount3 -u -z "$R/mnt" 2> /dev/null || true
    wait "$PID" 2> /dev/null || true
    rm -rf "$R"
}
trap cleanup EXIT
for _ in $(seq 1 100); do mountpoint -q "$R/mnt" && break; sleep 0.3; done
mountpoint -q "$R/mnt" || { echo "the mount did not come up:"; cat "$R/mount.log"; exit 1; }
rss() { printf '%-22s %s\n' "$1" "$(grep -E 'VmRSS|VmHWM' /proc/$PID/status | tr -s ' \t' ' ' | tr '\n' ' ')"; }
rss "mounted"
start=$(date +%s.%N)
python3 - "$R/mnt" "$N" <<'PY'
import os, sys
d = os.path.join(sys.argv[1], "f"); os.mkdir(d)
p = os.urandom(1024)
for i in range(int(sys.argv[2])):
    fd = os.open(os.path.join(d, f"IMG_{i:06d}.jpg"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, p); os.close(fd)
PY
rss "$N created ($(printf '%.0f' "$(echo "$(date +%s.%N) - $start" | bc)") s)"
"$BIN/stowfs" sync "$R/mnt" > /dev/null
rss "synced"
ls -l "$R/mnt/f" | wc -l > /dev/null
rss "after ls -l"
start=$(date +%s.%N)
rm -rf "$R/mnt/f"
"$BIN/stowfs" sync "$R/mnt" > /dev/null
rss "rm -rf, synced ($(printf '%.2f' "$(echo "$(date +%s.%N) - $start" | bc)") s)"
