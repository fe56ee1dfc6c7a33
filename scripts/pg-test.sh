#!/usr/bin/env bash
# Starts and stops a PostgreSQL server of its own (Debian's `postgresql` package: initdb + pg_ctl in
# a folder, on a free loopback port), for the server tests on the PostgreSQL backend and for
# scripts/cluster.sh.
#
#   scripts/pg-test.sh start DIR [--durable]   initdb in DIR/data (made if missing), start it,
#                      make the role `stow` (password auth) and the database `stow`, and write
#                      DIR/env: STOW_TEST_DATABASE_URL to source. Without --durable the server runs
#                      with fsync off (tests kill stowd, never the machine: their commits need not
#                      reach the disk); with it, PostgreSQL's defaults (for benchmarks).
#   scripts/pg-test.sh stop DIR    stops exactly the server it started (pg_ctl stop -m fast, then
#                                  SIGKILL of its postmaster after 10 s) and removes DIR.
#   scripts/pg-test.sh restart DIR  stops and starts the same server on the same port.
#   scripts/pg-test.sh halt DIR    stops the server and keeps its data; `resume DIR` starts it again on
#                                  the same port (a test's "PostgreSQL away mid-workload").
#
# PostgreSQL refuses to run as root: as root, the server runs as the `postgres` user the Debian
# package makes, and DIR is given to it.
set -euo pipefail
cmd="${1:-}"; dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|restart|halt|resume DIR [--durable]" >&2; exit 2; }

bindir=""
for v in 17 16 15 14 13; do
    if [ -x "/usr/lib/postgresql/$v/bin/pg_ctl" ]; then bindir="/usr/lib/postgresql/$v/bin"; break; fi
done

as_owner() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_start() {
    as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null || {
        echo "PostgreSQL did not start; its log:" >&2; tail -20 "$dir/postgres.log" >&2; return 1; }
    head -1 "$dir/data/postmaster.pid" > "$dir/pid"
}

case "$cmd" in
start)
    if [ -z "$bindir" ]; then
        if [ "$(id -u)" -ne 0 ]; then echo "PostgreSQL is missing: sudo apt-get install -y postgresql" >&2; exit 1; fi
        echo "installing postgresql ..." >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q postgresql >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }
        for v in 17 16 15 14 13; do
            if [ -x "/usr/lib/postgresql/$v/bin/pg_ctl" ]; then bindir="/usr/lib/postgresql/$v/bin"; break; fi
        done
        [ -n "$bindir" ] || { echo "postgresql installed, but no pg_ctl under /usr/lib/postgresql" >&2; exit 1; }
    fi
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres: "$dir"
        # The server must reach its folder: every folder above it needs x for others.
        chmod o+x "$dir" "$(dirname "$dir")" 2>/dev/null || true
    fi
    password="$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
    printf '%s\n' "$password" > "$dir/pwfile"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir/pwfile"
    chmod 600 "$dir/pwfile"
    as_owner "$bindir/initdb" -D "$dir/data" -U stow --pwfile="$dir/pwfile" --auth-local=scram-sha-256 --auth-host=scram-sha-256 \
        -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || { echo "initdb failed:" >&2; tail -20 "$dir/initdb.log" >&2; exit 1; }
    port="$(python3 -c 'import socket
s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    {
        echo "listen_addresses = '127.0.0.1'"
        echo "port = $port"
        echo "unix_socket_directories = '$dir'"
        # The server suite runs ~130 servers at once, each with a pool and a LISTEN connection.
        echo "max_connections = 600"
        echo "shared_buffers = 128MB"
        if [ "${3:-}" != "--durable" ]; then
            echo "fsync = off"
            echo "synchronous_commit = off"
            echo "full_page_writes = off"
        fi
    } >> "$dir/data/postgresql.conf"
    echo "$port" > "$dir/port"
    pg_start
    url="postgres://stow:$password@127.0.0.1:$port/stow"
    PGPASSWORD="$password" "$bindir/psql" -q -h 127.0.0.1 -p "$port" -U stow -d postgres -c "CREATE DATABASE stow" >/dev/null
    cat > "$dir/env" <<ENV
export STOW_TEST_DATABASE_URL=$url
ENV
    echo "PostgreSQL ($("$bindir/postgres" --version | awk '{print $3}')) at 127.0.0.1:$port, pid $(cat "$dir/pid"); variables in $dir/env" >&2
    ;;
restart)
    as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null
    pg_start
    ;;
halt)
    as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null
    ;;
resume)
    pg_start
    ;;
stop)
    [ -f "$dir/pid" ] || { rm -rf "$dir"; exit 0; }
    pid="$(cat "$dir/pid")"
    if kill -0 "$pid" 2>/dev/null; then
        as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 10 stop >/dev/null 2>&1 || true
        if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start|stop|restart|halt|resume DIR [--durable]" >&2; exit 2 ;;
esac
