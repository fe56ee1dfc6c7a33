#!/usr/bin/env bash
# W7's cost per request, which moves far less than its IOPS: fio's 4 KiB random reads of a 1 GiB
# file (as `make bench` runs them) through libfuse's passthrough_ll and through a StowFS mount on
# a local stowd, taking turns, RUNS times each. For each run: IOPS, the file system process's CPU
# per read (`perf stat -e task-clock -p`), its context switches per read, and fio's mean latency.
# Both serve each read from the page cache of a file on this machine's disk (the passthrough's
# backing file; the stowd blob file StowFS reads in place), so what differs is the daemon's work.
#
#   bench/read-cpu.sh [--runs 3] [--seconds 5] [--bin DIR]
#
# DIR holds stowfs and stowd (default .build/release). Run as root (it mounts; perf attaches).
#
# This VM runs DAMON's proactive reclaim (kdamond: pages not touched for ~60 s are paged out, up
# to 128 MiB/s): a file read a minute ago may come from the disk again, and IOPS fall to a fifth
# for whichever system meets it. The script reads both files through right before each run; with
# --pause-damon it also turns DAMON off for the run and back on after (only if it was on).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/.build/release"; runs=3; seconds=5; pause_damon=0
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs="$2"; shift 2 ;;
        --seconds) seconds="$2"; shift 2 ;;
        --bin) bin="$2"; shift 2 ;;
        --pause-damon) pause_damon=1; shift ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
for tool in perf fio gcc pkg-config python3; do
    command -v "$tool" >/dev/null || { echo "$tool is needed (bash scripts/install-deps.sh bench; perf: apt-get install -y linux-perf)" >&2; exit 1; }
done
[ -x "$bin/stowfs" ] && [ -x "$bin/stowd" ] || { echo "no stowfs and stowd in $bin: run swift build -c release (or pass --bin DIR)" >&2; exit 1; }

work="$(mktemp -d /var/tmp/stow-read-cpu-XXXXXX)"
pt_pid=""; sd_pid=""; fs_pid=""; damon_state=""
damon=/sys/kernel/mm/damon/admin/kdamonds/0/state
export STOWFS_TOKEN=read-cpu STOWD_TOKEN=read-cpu
cleanup() {
    if [ -n "$fs_pid" ]; then "$bin/stowfs" unmount "$work/mnt" >/dev/null 2>&1 || umount -l "$work/mnt" 2>/dev/null || true; wait "$fs_pid" 2>/dev/null || true; fi
    if [ -n "$pt_pid" ]; then fusermount3 -u "$work/pt" 2>/dev/null || umount -l "$work/pt" 2>/dev/null || true; wait "$pt_pid" 2>/dev/null || true; fi
    if [ -n "$sd_pid" ]; then kill "$sd_pid" 2>/dev/null || true; wait "$sd_pid" 2>/dev/null || true; fi
    if [ "$damon_state" = on ]; then for _ in 1 2 3 4 5 6 7 8 9 10; do echo on 2>/dev/null > "$damon" && break; sleep 0.2; done; fi
    if mountpoint -q "$work/mnt" 2>/dev/null || mountpoint -q "$work/pt" 2>/dev/null; then echo "left $work: still mounted" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
mkdir -p "$work/mnt" "$work/pt" "$work/backing"

gcc -O2 -o "$work/passthrough_ll" /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c $(pkg-config --cflags --libs fuse3)
head -c $((1 << 30)) /dev/urandom > "$work/big.bin"

"$work/passthrough_ll" -f -o "source=$work/backing" "$work/pt" >/dev/null 2>&1 &
pt_pid=$!
for _ in $(seq 100); do mountpoint -q "$work/pt" && break; sleep 0.05; done
"$bin/stowd" --data-dir "$work/data" --port 0 --log-level warning >"$work/endpoint" 2>/dev/null &
sd_pid=$!
for _ in $(seq 100); do [ -s "$work/endpoint" ] && break; sleep 0.05; done
"$bin/stowfs" mount bench "$work/mnt" --endpoint "$(head -1 "$work/endpoint")" --cache-dir "$work/cache" --create --foreground \
    --log-level warning >/dev/null 2>"$work/stowfs.log" &
fs_pid=$!
for _ in $(seq 200); do mountpoint -q "$work/mnt" && break; sleep 0.05; done
mountpoint -q "$work/mnt" || { echo "stowfs did not mount:" >&2; cat "$work/stowfs.log" >&2; exit 1; }
cp "$work/big.bin" "$work/pt/big.bin"
cp "$work/big.bin" "$work/mnt/big.bin"
"$bin/stowfs" sync "$work/mnt" >/dev/null
rm -f "$work/big.bin"

# The state file answers EBUSY now and then: asked again.
read_damon() { for _ in 1 2 3 4 5 6 7 8 9 10; do cat "$damon" 2>/dev/null && return 0; sleep 0.2; done; echo unknown; }
if [ -r "$damon" ]; then
    now="$(read_damon)"
    if [ "$pause_damon" = 1 ] && [ "$now" = on ]; then
        for _ in 1 2 3 4 5 6 7 8 9 10; do echo off 2>/dev/null > "$damon" && break; sleep 0.2; done
        if [ "$(read_damon)" = off ]; then damon_state=on; echo "(DAMON's reclaim paused for the run)"; else echo "(DAMON's reclaim could not be paused)"; fi
    elif [ "$now" = on ]; then
        echo "(DAMON's reclaim is on: see --help)"
    fi
fi

one() {  # one NAME PID PATH
    cat "$3" >/dev/null
    perf stat -e task-clock,context-switches -p "$2" -o "$work/perf.out" -- \
        fio --name=w7 --filename="$3" --rw=randread --bs=4k --ioengine=psync --time_based --runtime="$seconds" --readonly --invalidate=1 \
        --output-format=json >"$work/fio.json" 2>/dev/null
    python3 - "$1" "$work/perf.out" "$work/fio.json" <<'PY'
import json, re, sys
name, perf, fio = sys.argv[1:4]
t = open(perf).read()
d = open(fio).read()
j = json.loads(d[d.index("{"):])["jobs"][0]["read"]
ms = float(re.search(r"([\d.,]+)\s+msec task-clock", t).group(1).replace(",", ""))
cs = int(re.search(r"([\d,]+)\s+context-switches", t).group(1).replace(",", ""))
n = max(1, j["total_ios"])
print(f"  {name:12} {j['iops']:8.0f} IOPS   {ms * 1000 / n:5.1f} µs CPU per read   {cs / n:4.2f} switches per read   latency {j['clat_ns']['mean'] / 1000:5.1f} µs")
PY
}
echo "fio 4 KiB random reads of 1 GiB, ${seconds} s each, taking turns:"
for r in $(seq "$runs"); do
    echo "run $r"
    one passthrough "$pt_pid" "$work/pt/big.bin"
    one stowfs "$fs_pid" "$work/mnt/big.bin"
done
