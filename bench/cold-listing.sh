#!/usr/bin/env bash
# A cold listing through the cluster (W5 cold of issue 15), counted in instructions rather than
# timed: a 2-core VM's wall times move by a third from one minute to the next, instruction counts
# by a fraction of a percent. Starts scripts/cluster.sh in a folder of its own, stores FILES files
# of 4 KiB in one folder, then, RUNS times each:
#   - mount: a fresh mount with an empty cache, then `ls -lR` of the folder; the mount's user-space
#     instructions and page faults during the `ls` (`perf stat -p`), and the `ls`'s wall time;
#   - page: `GET browse?fields=posix` of the folder (a page of up to 1,000 records) straight to
#     replica 1, 20 times; the replica's and PostgreSQL's user-space instructions per page.
# Then it stops the cluster. Run as root (it mounts, and perf attaches to the processes).
# Binaries: $STOW_BIN_DIR (default .build/release); point it at another build's to compare.
#
#   bench/cold-listing.sh [--files 1000] [--runs 3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${STOW_BIN_DIR:-$root/.build/release}"
files=1000; runs=3
while [ $# -gt 0 ]; do
    case "$1" in
        --files) files="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
command -v perf >/dev/null || { echo "perf is needed (apt-get install -y linux-perf)" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is needed" >&2; exit 1; }
. "$root/bench/cluster-common.sh"
cluster_bench_init cold-listing
mount_fresh() {
    rm -rf "$work/cache"
    mount_bench "$@"
}
counted() { sed -n "s/^ *\([0-9.,]*\) *\(msec \)\{0,1\}$1.*/\1/p" "$2" | tr -d , | head -1; }
# Instructions where the CPU counts them; a VM without hardware counters gets CPU time instead
# (task-clock: milliseconds, as noisy as the machine).
if perf stat -e instructions:u true 2>&1 | grep -q "not supported"; then
    ev=task-clock; unit="ms of CPU"; echo "(this machine counts no instructions: CPU time instead)"
else
    ev=instructions:u; unit=instructions
fi
per20() { awk -v v="$1" 'BEGIN { if (v == "") print "?"; else printf "%.6g", v / 20 }'; }

mkdir -p "$work/src/small"
for i in $(seq "$files"); do head -c 4096 /dev/urandom > "$work/src/small/$(printf 'f%05d' "$i")"; done
cluster_up
mount_fresh --create
cp -r "$work/src/small" "$mnt/" && STOWFS_TOKEN="$token" "$bin/stowfs" sync "$mnt" >/dev/null
unmount_bench

echo "cold ls -lR of $files files through the cluster (a fresh mount, an empty cache each time):"
for r in $(seq "$runs"); do
    mount_fresh
    sleep 0.3
    s=$(date +%s%N)
    perf stat -e "$ev",page-faults -p "$pid" -o "$work/perf.out" -- ls -lR "$mnt/small" >/dev/null
    e=$(date +%s%N)
    echo "  run $r: the mount $(counted "$ev" "$work/perf.out") $unit, $(counted page-faults "$work/perf.out") page faults; ls $(( (e - s) / 1000000 )) ms (perf attached)"
    unmount_bench
done

url="$replica/service/application/assets/v1.0/namespaces/bench/browse?prefix=small/&delimiter=/&limit=1000&fields=posix"
get() { for _ in $(seq "$1"); do curl -fsS -o /dev/null -H "Authorization: Bearer $token" "$url"; done; }
get 3
# PostgreSQL's processes come and go (autovacuum workers): counted over those alive at the start,
# tried again if one went before perf attached. (Every postgres on the machine: run it where the
# cluster's is the only one.)
count_pg() {
    for _ in 1 2 3 4 5; do
        perf stat -e "$ev" -p "$(pgrep -d, -x postgres)" -o "$work/pg.out" -- bash -c "$(declare -f get); url='$url' token='$token' get 20" 2>/dev/null \
            && return 0
    done
    return 1
}
echo "GET browse of the folder (a page of up to 1,000 posix records) straight to replica 1, per page:"
for r in $(seq "$runs"); do
    perf stat -e "$ev" -p "$replica_pid" -o "$work/stowd.out" -- bash -c "$(declare -f get); url='$url' token='$token' get 20"
    count_pg
    echo "  run $r: stowd $(per20 "$(counted "$ev" "$work/stowd.out")") $unit, PostgreSQL $(per20 "$(counted "$ev" "$work/pg.out")")"
done
