#!/usr/bin/env bash
# The Debian package, end to end (issue 19), as root on a machine where stowfs is not installed:
#   1. scripts/make-deb.sh builds it from --bin (default .build/release); lintian finds no error
#      or warning that packaging/debian/lintian-overrides does not explain;
#   2. dpkg -i installs it: the programs run, `man stowfs` works, bash completes `stowfs <TAB>`,
#      the user stowd exists;
#   3. a real systemd (this machine's, started as PID 1 of a PID and mount namespace of its own, as
#      in a container, since the machine itself does not run systemd) starts stowd.service
#      (Type=notify: active only once it listens) and stowfs@demo.service (active once mounted);
#      systemd-analyze security rates stowd.service (at most 3.0);
#   4. `mount -t stowfs` mounts the namespace, files are written, `umount` stores them;
#      stowfs@demo.service shows them, and its stop stores what it wrote;
#   5. dpkg -r leaves only the configuration files; dpkg --purge removes those too.
# Everything it starts it stops; what the package made at run time (/var/lib/stowd, the user
# stowd) it removes at the end, unless they were there before.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.build/release
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin="$2"; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "test-deb.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "test-deb.sh: needs root (dpkg -i, systemd, mount)" >&2; exit 1; }
if dpkg-query -W -f='${Status}' stowfs 2>/dev/null | grep -q "installed"; then
    echo "test-deb.sh: the package stowfs is installed here already; the test would remove it (dpkg --purge stowfs first)" >&2
    exit 1
fi

# It starts Debian's systemd as PID 1 of a namespace of its own, beside no other: on a machine that
# runs systemd, test the package there instead (or in a container).
if [ -d /run/systemd/system ]; then
    echo "test-deb.sh: this machine runs systemd; the test starts a systemd of its own and is meant for machines (and CI) that do not" >&2
    exit 1
fi

work="$(mktemp -d /tmp/stow-deb.XXXXXX)"
sd_pid=""
mnt="$work/mnt"
had_user=0; id stowd >/dev/null 2>&1 && had_user=1
had_state=0; [ -e /var/lib/stowd ] && had_state=1
failures=0
check() {  # check "what" command...: runs the command, prints ok or FAIL
    local what="$1"; shift
    if "$@" >"$work/check.log" 2>&1; then echo "  ok    $what"; else echo "  FAIL  $what (see below)"; failures=$((failures + 1)); tail -20 "$work/check.log" | sed 's/^/        /'; unit_logs; fi
}
unit_logs() {  # what the units printed (this systemd runs no journald): after a failed check
    local f
    for f in "$work"/unit-*.log; do
        [ -s "$f" ] || continue
        echo "        -- the last lines of $(basename "$f" .log):"
        tail -40 "$f" | sed 's/^/        /'
    done
}
in_sd() { nsenter -t "$sd_pid" -m -p "$@"; }
server_files() {  # "name size" of each file of the namespace demo, sorted
    curl -sf -H "Authorization: Bearer $(cat /var/lib/stowd/admin.token)" \
        "http://127.0.0.1:$port/service/application/assets/v1.0/namespaces/demo/browse?limit=100" \
        | python3 -c 'import json, sys; print("\n".join(sorted("%s %d" % (f["file_name"], f["size"]) for f in json.load(sys.stdin)["items"])))'
}
export -f server_files

cleanup() {
    set +e
    mountpoint -q "$mnt" 2>/dev/null && { umount "$mnt" || umount -l "$mnt"; }
    if [ -n "$sd_pid" ] && kill -0 "$sd_pid" 2>/dev/null; then
        in_sd systemctl poweroff >/dev/null 2>&1
        for _ in $(seq 1 100); do kill -0 "$sd_pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$sd_pid" 2>/dev/null
    fi
    # The cgroups systemd made for its units in the machine's hierarchies (empty once it has gone);
    # only those that were not there before the test.
    find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort > "$work/cgroups-after"
    [ -f "$work/cgroups-before" ] && comm -13 "$work/cgroups-before" "$work/cgroups-after" | sort -r | while read -r d; do rmdir "$d" 2>/dev/null; done
    dpkg-query -W stowfs >/dev/null 2>&1 && dpkg --purge stowfs >/dev/null 2>&1
    [ "$had_state" = 1 ] || rm -rf /var/lib/stowd /var/lib/private/stowd
    [ "$had_user" = 1 ] || { userdel stowd 2>/dev/null; groupdel stowd 2>/dev/null; }
    rmdir /mnt/stowfs/demo /mnt/stowfs 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

echo "== building the package from $bin"
# gzip, fast: the package of a debug build is large, and xz (make deb's) takes minutes on it.
deb="$(DEB_COMPRESSION=gzip scripts/make-deb.sh --bin "$bin" --out "$work/dist" | tail -1 | cut -d' ' -f1)"
version="$("$bin/stowfs" --version)"
echo "  $deb"

echo "== lintian"
lintian --tag-display-limit 0 "$deb" > "$work/lintian.txt" 2>&1 || true
grep -v "running with root privileges" "$work/lintian.txt" | sed 's/^/  /' || true
check "lintian: no error or warning left" bash -c "! grep -qE '^(E|W): ' '$work/lintian.txt'"

echo "== dpkg -i"
dpkg -i "$deb" > "$work/dpkg-i.txt" 2>&1 || { cat "$work/dpkg-i.txt"; exit 1; }
check "stowfs --version is $version" bash -c "[ \"\$(/usr/bin/stowfs --version)\" = '$version' ] && [ \"\$(/usr/bin/stowd --version)\" = '$version' ]"
check "the binaries use the bundled Swift runtime only" bash -c "! ldd /usr/bin/stowfs /usr/bin/stowd | grep -E 'not found|/opt/|swift/linux'"
check "man stowfs-mount documents --cache-size" bash -c "man -w stowfs >/dev/null && MANWIDTH=100 man stowfs-mount 2>/dev/null | grep -q -- '--cache-size'"
check "man stowd and man mount.stowfs" bash -c "man -w stowd && man -w mount.stowfs"
check "bash completes stowfs <TAB> with its commands" bash -c \
    "source /usr/share/bash-completion/completions/stowfs; COMP_WORDS=(stowfs ''); COMP_CWORD=1; COMP_LINE='stowfs '; COMP_POINT=7; _stowfs stowfs '' stowfs; printf '%s\n' \"\${COMPREPLY[@]}\" | grep -qx mount && printf '%s\n' \"\${COMPREPLY[@]}\" | grep -qx unmount"
check "the user stowd exists, /etc/stowd is root:stowd 0750" bash -c "id stowd && [ \"\$(stat -c '%U:%G %a' /etc/stowd)\" = 'root:stowd 750' ]"

echo "== systemd (PID 1 of its own PID and mount namespace)"
export port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
printf 'STOWD_ARGS="--port %s"\n' "$port" > /etc/default/stowd
mkdir -p "$work/units"
find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort > "$work/cgroups-before"
# Only what the test starts: the units' own dependencies on the boot's targets are left out.
cat > "$work/units/stowtest.target" <<'EOF'
[Unit]
Description=StowFS package test
DefaultDependencies=no
EOF
cat > "$work/boot.sh" <<EOF
#!/bin/sh
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/system/stowd.service.d /run/systemd/system/stowfs@.service.d
cp $work/units/stowtest.target /run/systemd/system/
printf '[Unit]\nDefaultDependencies=no\n[Service]\nStandardOutput=append:$work/unit-stowd.log\nStandardError=inherit\n' > /run/systemd/system/stowd.service.d/test.conf
printf '[Unit]\nDefaultDependencies=no\n[Service]\nStandardOutput=append:$work/unit-stowfs@%%i.log\nStandardError=inherit\n' > /run/systemd/system/stowfs@.service.d/test.conf
exec env container=stowtest /lib/systemd/systemd --system --unit=stowtest.target
EOF
chmod +x "$work/boot.sh"
unshare --pid --fork --mount --propagation private "$work/boot.sh" > "$work/systemd.log" 2>&1 &
for _ in $(seq 1 100); do
    sd_pid="$(pgrep -f -n "^/lib/systemd/systemd --system --unit=stowtest.target" || true)"
    [ -n "$sd_pid" ] && in_sd systemctl is-system-running >/dev/null 2>&1 && break
    state="$( [ -n "$sd_pid" ] && in_sd systemctl is-system-running 2>/dev/null || true)"
    [ "$state" = "degraded" ] && break
    sleep 0.1
done
[ -n "$sd_pid" ] || { echo "systemd did not start"; cat "$work/systemd.log"; exit 1; }
echo "  systemd $(systemctl --version | head -1 | cut -d' ' -f2) is PID $sd_pid here, $(in_sd systemctl is-system-running 2>&1 || true)"

start=$(date +%s.%N)
check "systemctl start stowd.service returns once it is active (Type=notify)" in_sd systemctl start stowd.service
echo "  started in $(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')") s; $(in_sd systemctl show -p StatusText --value stowd.service)"
check "stowd answers on port $port as soon as systemctl start returned" curl -sf "http://127.0.0.1:$port/healthz"
check "stowd runs as the user stowd" bash -c "[ \"\$(ps -o user= -C stowd)\" = stowd ]"
security="$(in_sd systemd-analyze security stowd.service 2>&1 | tail -1)"
echo "  systemd-analyze security: $security"
score="$(echo "$security" | sed -n 's/.*stowd.service: \([0-9.]*\).*/\1/p')"
check "exposure ${score:-?} is at most 3.0" python3 -c "import sys; sys.exit(0 if float('${score:-99}') <= 3.0 else 1)"
token_file=/var/lib/stowd/admin.token
check "stowd made its admin token in its state folder" test -s "$token_file"

echo "== mount -t stowfs"
mkdir -p "$mnt"
check "mount -t stowfs demo $mnt" env HOME="$work/home" mount -t stowfs demo "$mnt" -o "endpoint=http://127.0.0.1:$port,token_file=$token_file,create,cache_dir=$work/cache"
check "the mount is fuse.stowfs" bash -c "grep -q ' $mnt fuse.stowfs ' /proc/mounts"
head -c 3000000 /dev/urandom > "$work/big"
check "cp a 3 MB file and a small one in, tag it" bash -c "cp '$work/big' '$mnt/big' && echo hello > '$mnt/hello.txt' && setfattr -n user.tags -v pkg '$mnt/hello.txt'"
# umount(8) asks the helper only about mounts util-linux recorded; otherwise it unmounts at once
# and the stowfs behind the mount stores what is queued before it exits (README): wait for that.
check "umount unmounts; the stowfs behind it stores what is queued and exits" bash -c \
    "umount '$mnt' && ! mountpoint -q '$mnt' && for i in \$(seq 1 600); do pgrep -f '^/usr/bin/stowfs mount demo $mnt' >/dev/null || exit 0; sleep 0.1; done; exit 1"
check "the server has both files, whole" bash -c "got=\$(server_files); echo \"listing: \$got\"; [ \"\$got\" = \"\$(printf 'big 3000000\nhello.txt 6')\" ]"

echo "== stowfs@demo.service"
printf 'endpoint = "http://127.0.0.1:%s"\ntoken_file = "%s"\ncache_dir = "%s"\n' "$port" "$token_file" "$work/cache-unit" > /etc/stowfs/config.toml
check "systemctl start stowfs@demo returns once mounted (Type=notify)" in_sd systemctl start stowfs@demo.service
echo "  $(in_sd systemctl show -p StatusText --value stowfs@demo.service)"
check "the unit's mount shows the files" in_sd bash -c "cmp /mnt/stowfs/demo/big '$work/big' && [ \"\$(cat /mnt/stowfs/demo/hello.txt)\" = hello ] && [ \"\$(getfattr --only-values -n user.tags /mnt/stowfs/demo/hello.txt)\" = pkg ]"
check "a file written there" in_sd bash -c "echo from-unit > /mnt/stowfs/demo/unit.txt"
check "systemctl stop stowfs@demo stores it and unmounts" in_sd bash -c "systemctl stop stowfs@demo.service && ! mountpoint -q /mnt/stowfs/demo"
check "the server has it" bash -c "got=\$(server_files); echo \"listing: \$got\"; echo \"\$got\" | grep -qx 'unit.txt 10'"
check "systemctl stop stowd.service" in_sd systemctl stop stowd.service
in_sd systemctl poweroff >/dev/null 2>&1 || true
for _ in $(seq 1 300); do kill -0 "$sd_pid" 2>/dev/null || break; sleep 0.1; done
# (A stowfs that has exited may stay a zombie for a while when its parent is this machine's PID 1.)
check "systemd and everything it ran have exited" bash -c "! ps -p $sd_pid -o pid,args && [ -z \"\$(ps -o pid=,stat=,args= -C stowd,stowfs | awk '\$2 !~ /^Z/')\" ]"
sd_pid=""

echo "== dpkg -r, dpkg --purge"
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' | grep -v '/$' > "$work/files"
dpkg-deb -I "$deb" conffiles > "$work/conffiles"
check "dpkg -r stowfs" dpkg -r stowfs
check "only the configuration files are left" bash -c "left=\$(while read -r f; do [ -e \"\$f\" ] || [ -L \"\$f\" ] && echo \"\$f\"; done < '$work/files' | grep -vxFf '$work/conffiles'); [ -z \"\$left\" ] || { echo \"left: \$left\"; exit 1; }"
check "dpkg --purge stowfs removes those too" bash -c "dpkg --purge stowfs && for f in \$(cat '$work/conffiles'); do [ ! -e \"\$f\" ] || { echo \"left: \$f\"; exit 1; }; done && ! dpkg-query -W stowfs"

[ "${TEST_DEB_LOGS:-0}" = 1 ] && { echo "== what the units printed (TEST_DEB_LOGS=1)"; unit_logs; }
if [ "$failures" -gt 0 ]; then echo "== test-deb: $failures checks failed"; exit 1; fi
echo "== test-deb: all checks passed"
