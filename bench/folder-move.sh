#!/usr/bin/env bash
# What `mv` of a folder costs while its files' uploads wait (`stowfs pause`): a mount of an embedded
# stowd, FILES files written into folder d, then `mv d e`, timed, with the mount's fsync and
# fdatasync calls counted by strace meanwhile; then the uploads resume and land in e/.
#
#   bench/folder-move.sh [--bin DIR] [--files 300]
#
# DIR holds stowd and stowfs (default .build/debug). Run as root (it mounts); needs strace.
# Stops what it started and removes its folder (/var/tmp/stow-folder-move-*) on any exit.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/.build/debug"; files=300
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin="$2"; shift 2 ;;
        --files) files="$2"; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
command -v strace >/dev/null || { echo "strace is needed (apt-get install -y strace)" >&2; exit 1; }
w="$(mktemp -d /var/tmp/stow-folder-move-XXXXXX)"; mkdir -p "$w/mnt" "$w/data"
sp=""; mp=""; st=""
cleanup() {
    [ -n "$st" ] && { kill "$st" 2>/dev/null || true; wait "$st" 2>/dev/null || true; }
    if mountpoint -q "$w/mnt"; then "$bin/stowfs" unmount "$w/mnt" >/dev/null 2>&1 || umount -l "$w/mnt" || true; fi
    [ -n "$mp" ] && { kill "$mp" 2>/dev/null || true; wait "$mp" 2>/dev/null || true; }
    [ -n "$sp" ] && { kill "$sp" 2>/dev/null || true; wait "$sp" 2>/dev/null || true; }
    mountpoint -q "$w/mnt" || rm -rf "$w"
}
trap cleanup EXIT
export STOWD_TOKEN=bench-token STOWFS_TOKEN=bench-token
"$bin/stowd" --data-dir "$w/data" --port 0 --log-level warning >"$w/endpoint" 2>"$w/stowd.log" & sp=$!
for _ in $(seq 100); do [ -s "$w/endpoint" ] && break; sleep 0.1; done
endpoint="$(head -1 "$w/endpoint")"
"$bin/stowfs" mount bench "$w/mnt" --endpoint "$endpoint" --cache-dir "$w/cache" --create --foreground --log-level warning >"$w/mount.log" 2>&1 & mp=$!
for _ in $(seq 100); do mountpoint -q "$w/mnt" && break; sleep 0.1; done
mountpoint -q "$w/mnt" || { cat "$w/mount.log" >&2; exit 1; }
mkdir "$w/mnt/d"
"$bin/stowfs" pause "$w/mnt" >/dev/null
for i in $(seq "$files"); do echo "$i" > "$w/mnt/d/f$i"; done
strace -f -c -e trace=fsync,fdatasync -p "$mp" -o "$w/strace.out" 2>/dev/null & st=$!
sleep 0.5
s=$(date +%s%N); mv "$w/mnt/d" "$w/mnt/e"; e=$(date +%s%N)
sleep 0.2; kill -INT "$st"; wait "$st" 2>/dev/null || true; st=""
syncs=$(awk '$NF ~ /^(fsync|fdatasync)$/ { n += $4 } END { print n + 0 }' "$w/strace.out")
echo "mv of a folder holding $files files whose uploads wait: $(( (e - s) / 1000000 )) ms, $syncs fsync/fdatasync calls by the mount"
"$bin/stowfs" resume "$w/mnt" >/dev/null
"$bin/stowfs" sync "$w/mnt" >/dev/null
landed=$(curl -fsS -H "Authorization: Bearer bench-token" "$endpoint/service/application/assets/v1.0/namespaces/bench/browse?prefix=e/&delimiter=/&limit=5000&fields=posix" | grep -o '"file_name"' | wc -l)
echo "after resume and sync: $landed files in e/ on the server"
[ "$landed" -eq "$files" ]
