#!/usr/bin/env bash
# Batches on the cluster's PostgreSQL (issue 15): starts scripts/cluster.sh in a folder of its own,
# then measures
#   - rm -rf of FILES files of 1 KiB through a mount, until durable (`rm -rf`, then `stowfs sync`),
#     RUNS times, each after copying the files in and syncing;
#   - one stow_publish_inline call of 250 and of 1,000 small files into one folder, in psql, rolled
#     back (the server function a batch upload runs), RUNS times each;
# and stops the cluster. Run as root (it mounts). Binaries: $STOW_BIN_DIR (default .build/release);
# point it at another build's binaries to compare.
#
#   bench/cluster-batches.sh [--files 2000] [--runs 3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${STOW_BIN_DIR:-$root/.build/release}"
files=2000; runs=3
while [ $# -gt 0 ]; do
    case "$1" in
        --files) files="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
command -v psql >/dev/null || { echo "psql is needed (apt-get install -y postgresql-client)" >&2; exit 1; }
. "$root/bench/cluster-common.sh"
cluster_bench_init cluster-batches
ms() { echo $(( ($2 - $1) / 1000000 )); }

mkdir -p "$work/src"
for i in $(seq "$files"); do head -c 1024 /dev/urandom > "$work/src/f$i"; done
cluster_up
mount_bench --create

echo "rm -rf of $files files of 1 KiB through the cluster, until durable:"
for r in $(seq "$runs"); do
    cp -r "$work/src" "$mnt/d$r" && "$bin/stowfs" sync "$mnt" >/dev/null
    s=$(date +%s%N); rm -rf "$mnt/d$r"; m=$(date +%s%N); "$bin/stowfs" sync "$mnt" >/dev/null; e=$(date +%s%N)
    echo "  run $r: $(ms "$s" "$e") ms (the rm itself $(ms "$s" "$m") ms)"
done

# The server function alone, on the cluster's database (its schema: stow_cluster).
url="$(. "$cdir/postgres/env"; echo "$STOW_TEST_DATABASE_URL")"
echo "stow_publish_inline into one folder, in psql, rolled back:"
for n in 250 1000; do
    for r in $(seq "$runs"); do
        t="$(psql -X -q "$url" -v n="$n" 2>&1 <<'SQL' | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1
SET search_path = stow_cluster;
BEGIN;
\timing on
SELECT count(*) FROM stow_publish_inline(
    ARRAY(SELECT jsonb_build_object('namespace', 'bench', 'segments', jsonb_build_array('batch', 'f' || g), 'blob', 'bench-' || g || '-' || random(),
                                    'size', 1, 'sha256', '00', 'content_type', 'application/octet-stream') FROM generate_series(1, :n) g),
    ARRAY(SELECT '\x41'::bytea FROM generate_series(1, :n)), 0) WHERE err_code IS NULL;
\timing off
ROLLBACK;
SQL
)"
        echo "  $n files, run $r: ${t:-?} ms"
    done
done
