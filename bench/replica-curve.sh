#!/usr/bin/env bash
# Small-file creates per second through a cluster of 1, 2 and 3 stowd replicas (issue 15): for each
# size, scripts/cluster.sh up in a folder of its own, `stow-bench creates` (8 writers, each a client
# of its own, through nginx; 3 runs, median), scripts/cluster.sh down. Prints a table and writes it
# to bench/results/replica-curve.md. Binaries: $STOW_BIN_DIR (default .build/release).
#
#   bench/replica-curve.sh [--replicas "1 2 3"] [--writers 8] [--files 2000] [--runs 3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${STOW_BIN_DIR:-$root/.build/release}"
sizes="1 2 3"; writers=8; files=2000; runs=3
while [ $# -gt 0 ]; do
    case "$1" in
        --replicas) sizes="$2"; shift 2 ;;
        --writers) writers="$2"; shift 2 ;;
        --files) files="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -x "$bin/stow-bench" ] || { echo "no stow-bench in $bin: run swift build -c release (or set STOW_BIN_DIR)" >&2; exit 1; }
work="$(mktemp -d /var/tmp/stow-replica-curve-XXXXXX)"
chmod 711 "$work"
cdir="$work/cluster"
trap '[ -f "$cdir/state" ] && "$root/scripts/cluster.sh" down --dir "$cdir" >/dev/null 2>&1; rm -rf "$work"' EXIT
out="$root/bench/results/replica-curve.md"
mkdir -p "$(dirname "$out")"
{
    echo "# Small-file creates per second by cluster size — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "$(nproc) cores; $writers writers (a client each) through nginx; $files files of 4 KiB a run; median of $runs runs (min – max)."
    echo
    echo "| replicas | creates/s (median) | min – max |"
    echo "|---|---|---|"
} > "$out.tmp"
for n in $sizes; do
    echo "== $n replica(s)" >&2
    STOW_BIN_DIR="$bin" "$root/scripts/cluster.sh" up --dir "$cdir" --replicas "$n" >/dev/null
    endpoint="$(. "$cdir/state"; echo "$endpoint")"
    line="$("$bin/stow-bench" creates --endpoint "$endpoint" --token-file "$cdir/token" --writers "$writers" --files "$files" --runs "$runs" \
        --json "$work/r$n.json")"
    echo "   $line" >&2
    python3 - "$work/r$n.json" "$n" >> "$out.tmp" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rates = sorted(r["rates"])
print(f"| {sys.argv[2]} | {r['median']:.0f} | {rates[0]:.0f} – {rates[-1]:.0f} |")
PY
    "$root/scripts/cluster.sh" down --dir "$cdir" >/dev/null
done
mv "$out.tmp" "$out"
cat "$out"
