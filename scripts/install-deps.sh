#!/usr/bin/env bash
# Installs the Debian packages StowFS needs to build, test and run, when they are missing.
# As root it runs apt-get; otherwise it prints the command to run and fails.
set -euo pipefail

# `install-deps.sh bench` adds what make bench compares against and measures with.
# `install-deps.sh hostile`: pytest and schemathesis (PyPI) for Tests/hostile, and botocore for SigV4Tests, pinned there.
if [ "${1:-}" = "hostile" ]; then
    requirements="$(dirname "$0")/../Tests/hostile/requirements.txt"
    python3 -c 'import pytest, schemathesis, botocore' 2>/dev/null && exit 0
    echo "installing pytest and schemathesis (pip) ..." >&2
    python3 -m pip install -q -r "$requirements" 2>&1 | grep -v "Running pip as the 'root' user" >&2 || true
    python3 -c 'import pytest, schemathesis, botocore' || { echo "install them with: python3 -m pip install -r Tests/hostile/requirements.txt" >&2; exit 1; }
    exit 0
fi
packages=(libfuse3-dev fuse3 libsqlite3-dev pkg-config attr rsync curl systemd openssl man-db)
if [ "${1:-}" = "bench" ]; then packages=(libfuse3-dev fuse3 pkg-config gcc python3 rclone fio); fi
# `install-deps.sh deb`: what make deb and scripts/test-deb.sh use.
if [ "${1:-}" = "deb" ]; then packages=(dpkg-dev fakeroot patchelf lintian man-db bash-completion systemd); fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "StowFS needs these Debian packages: ${missing[*]}" >&2
    echo "Install them with:  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "installing ${missing[*]} ..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }
