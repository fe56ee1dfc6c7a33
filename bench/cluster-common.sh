# Sourced by the cluster benches (bench/cluster-batches.sh, bench/cold-listing.sh): a work folder,
# a cluster of its own in it, a mount of namespace `bench` on it, and a trap that stops all of
# them on any exit. Expects $root and $bin set, and `set -euo pipefail`.

# cluster_bench_init NAME: checks the binaries, makes the work folder, sets the trap.
cluster_bench_init() {
    [ -x "$bin/stowfs" ] && [ -x "$bin/stowd" ] || { echo "no stowfs and stowd in $bin: run swift build -c release (or set STOW_BIN_DIR)" >&2; exit 1; }
    work="$(mktemp -d "/var/tmp/stow-$1-XXXXXX")"
    chmod 711 "$work"
    cdir="$work/cluster"; mnt="$work/mnt"; pid=""
    mkdir -p "$mnt"
    trap cluster_bench_cleanup EXIT
}

cluster_bench_cleanup() {
    if mountpoint -q "$mnt" 2>/dev/null; then "$bin/stowfs" unmount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null || true; fi
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    if [ -f "$cdir/state" ]; then "$root/scripts/cluster.sh" down --dir "$cdir" >/dev/null 2>&1 || true; fi
    # Never through a mount that would not go.
    if mountpoint -q "$mnt" 2>/dev/null; then echo "left $work: $mnt is still mounted" >&2; else rm -rf "$work"; fi
}

# cluster_up: starts the cluster; sets $endpoint, $token, $replica (replica 1's URL), $replica_pid.
cluster_up() {
    STOW_BIN_DIR="$bin" "$root/scripts/cluster.sh" up --dir "$cdir" >/dev/null
    endpoint="$(. "$cdir/state"; echo "$endpoint")"
    replica="$(. "$cdir/state"; echo "$replica_1_url")"
    replica_pid="$(. "$cdir/state"; echo "$replica_1_pid")"
    token="$(cat "$cdir/token")"
}

# mount_bench [stowfs mount options]: namespace `bench` at $mnt, cache $work/cache; sets $pid.
mount_bench() {
    STOWFS_TOKEN="$token" "$bin/stowfs" mount bench "$mnt" --endpoint "$endpoint" --cache-dir "$work/cache" "$@" \
        --foreground --log-level warning >"$work/mount.log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do mountpoint -q "$mnt" && break; sleep 0.05; done
    mountpoint -q "$mnt" || { echo "the mount did not come up:" >&2; cat "$work/mount.log" >&2; exit 1; }
}

unmount_bench() {
    STOWFS_TOKEN="$token" "$bin/stowfs" unmount "$mnt" >/dev/null
    wait "$pid" 2>/dev/null || true
    pid=""
}
