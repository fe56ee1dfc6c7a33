#!/usr/bin/env bash
# make run: mounts the namespace `demo` of a local stowd (started beside stowfs) at $1, prints what
# to try, and stays until Ctrl-C (or `make stop`), which stores what is queued and unmounts.
set -euo pipefail
mnt="$1"
bin="$(cd "$(dirname "$0")/.." && pwd)/.build/release"
mkdir -p "$mnt"
if grep -q " $(realpath "$mnt") fuse" /proc/mounts 2>/dev/null; then
    echo "$mnt is mounted already; \`make stop\` unmounts it." >&2
    exit 1
fi
"$bin/stowfs" mount demo "$mnt" --create --foreground &
pid=$!
stop() {
    echo
    echo "storing what is queued, then unmounting …"
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" || true
    exit 0
}
trap stop INT TERM
for _ in $(seq 1 300); do
    grep -q " $(realpath "$mnt") fuse.stowfs" /proc/mounts && break
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit 1; }
    sleep 0.1
done
cat <<MSG

  StowFS: the namespace \`demo\` is mounted at $mnt
  (a local stowd keeps its data in ~/.local/share/stowfs/stowd).

  Try, in another terminal:
    cp -r /usr/share/common-licenses $mnt/licenses
    setfattr -n user.tags -v 'legal,gpl' $mnt/licenses/GPL-3
    getfattr -n user.tags $mnt/licenses/GPL-3
    getfattr -n user.stow.url $mnt/licenses/GPL-3     # a link anyone can fetch
    $bin/stowfs status $mnt
    $bin/stowfs sync $mnt        # returns when the server has everything

  Ctrl-C here (or \`make stop\`) stores what is queued and unmounts.

MSG
wait "$pid"
