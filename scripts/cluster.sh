#!/usr/bin/env bash
# A StowFS cluster on this machine, in one command (issue 15): PostgreSQL for the metadata
# (scripts/pg-test.sh, --durable), an S3 server for the file contents (scripts/s3-test.sh,
# SeaweedFS), N stowd replicas sharing both and one token file, and nginx in front of them.
# Everything it starts is recorded (pids, ports, folders) in DIR/state, and `down` stops exactly
# that, by pid. Run `scripts/cluster.sh --help` for the commands.
# shellcheck disable=SC1090,SC1091  # it sources the env files pg-test.sh and s3-test.sh write, and its state
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
scripts="$root/scripts"

usage() {
    cat <<'EOF'
Usage: scripts/cluster.sh COMMAND [--dir DIR] [OPTIONS]

A StowFS cluster on this machine: PostgreSQL (metadata), an S3 server (SeaweedFS, file
contents), N stowd replicas on free loopback ports, and nginx in front of them. Everything
it starts is recorded in DIR/state and stopped by pid.

Commands:
  up [--replicas N]     start it all (default 3 replicas) and print the endpoint, the token
                        and the mount command; `up` when it is up already says so.
                        If a step fails, what was started is stopped again.
  down                  stop exactly what `up` started (stowd: SIGTERM, then SIGKILL after
                        STOW_CLUSTER_GRACE seconds, default 10), remove the state and data,
                        keep the logs in DIR/logs
  status                what runs: pids, ports, and each replica's /healthz
  kill-replica I        kill -9 replica I (a failure drill; nginx sends requests elsewhere)
  restart-replica I     stop replica I if it runs, and start it again on the same port
  halt-database         stop PostgreSQL, keeping its data (a drill: requests get 503)
  resume-database       start it again on the same port
  halt-store            stop the S3 server, keeping its data (a drill: uploads wait)
  resume-store          start it again on the same ports

Options:
  --dir DIR             where state, data and logs live (default ./.cluster)
  --replicas N          number of stowd replicas for `up` (default 3)
  -h, --help            this text

Environment:
  STOW_BIN_DIR          where stowd and stowfs are (default .build/release of this checkout;
                        when that has none, `up` builds them with `swift build -c release`)
  STOW_CLUSTER_GRACE    seconds between SIGTERM and SIGKILL when stopping a replica (10)

nginx comes from Debian (installed with apt-get when missing, as root); it runs as a process
of its own (-p DIR/nginx -c DIR/nginx/nginx.conf), never as the system service.
EOF
}

# ---- arguments ---------------------------------------------------------------------------------

cmd=""; dir=".cluster"; replicas=3; index=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help|help) usage; exit 0 ;;
        --dir) dir="${2:?--dir needs a folder}"; shift 2 ;;
        --dir=*) dir="${1#--dir=}"; shift ;;
        --replicas) replicas="${2:?--replicas needs a number}"; shift 2 ;;
        --replicas=*) replicas="${1#--replicas=}"; shift ;;
        -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
        *)
            if [ -z "$cmd" ]; then cmd="$1"
            elif [ -z "$index" ]; then index="$1"
            else echo "unexpected argument $1 (see --help)" >&2; exit 2; fi
            shift ;;
    esac
done
[ -n "$cmd" ] || { usage >&2; exit 2; }
[[ "$replicas" =~ ^[1-9][0-9]?$ ]] || { echo "--replicas: give a number from 1 to 99" >&2; exit 2; }
grace="${STOW_CLUSTER_GRACE:-10}"

case "$cmd" in
    up|down|status|kill-replica|restart-replica|halt-database|resume-database|halt-store|resume-store) ;;
    *) echo "unknown command $cmd (see --help)" >&2; exit 2 ;;
esac
if [ ! -d "$dir" ]; then
    [ "$cmd" = up ] || { echo "no cluster in $dir"; [ "$cmd" = down ] && exit 0; exit 1; }
    # Others may pass through (PostgreSQL runs as `postgres` when this runs as root) but not list it.
    mkdir -p "$dir"; chmod 711 "$dir"
fi
dir="$(cd "$dir" && pwd)"
state="$dir/state"
logs="$dir/logs"

# ---- helpers -----------------------------------------------------------------------------------

say() { echo "$*" >&2; }

# The state file: one `key=value` a line, values shell-quoted, rewritten whole on every change.
state_set() {
    local tmp="$state.tmp"
    {
        if [ -f "$state" ]; then grep -v "^$1=" "$state" || true; fi
        printf '%s=%q\n' "$1" "$2"
    } > "$tmp"
    mv "$tmp" "$state"
}
state_get() { if [ -f "$state" ]; then (. "$state"; eval "printf '%s' \"\${$1:-}\""); fi; }

# What the command line of replica $1 holds (the space after it: replica-1 is not replica-10).
replica_marker() { echo "--data-dir $dir/replica-$1 "; }

# Whether pid $1 runs (a zombie waiting for its parent to reap it does not).
alive() {
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
    [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]
}

# Whether pid $1 is alive and its command line holds $2 (so a recycled pid is never signalled).
ours() {
    alive "$1" && [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' < "/proc/$1/cmdline" | grep -qF -- "$2"
}

free_port() {
    python3 -c 'import socket
s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Stops pids (each with its command-line marker, "pid:marker") with SIGTERM, then SIGKILL for
# those still alive after $grace seconds. Prints one line per pid: how it ended.
stop_pids() {
    local entry pid marker t
    local -a live=()
    for entry in "$@"; do
        pid="${entry%%:*}"; marker="${entry#*:}"
        if ours "$pid" "$marker"; then kill -TERM "$pid" 2>/dev/null || true; live+=("$pid"); fi
    done
    for ((t = 0; t < grace * 10; t++)); do
        local any=0
        for pid in "${live[@]}"; do alive "$pid" && any=1; done
        [ "$any" = 0 ] && break
        sleep 0.1
    done
    for pid in "${live[@]}"; do
        if alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null || true
            for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
            echo "$pid SIGKILL"
        else
            echo "$pid SIGTERM"
        fi
    done
}

bin_dir() {
    local bin="${STOW_BIN_DIR:-$root/.build/release}"
    if [ ! -x "$bin/stowd" ] || [ ! -x "$bin/stowfs" ]; then
        if [ -n "${STOW_BIN_DIR:-}" ]; then
            say "STOW_BIN_DIR=$STOW_BIN_DIR holds no stowd and stowfs"; return 1
        fi
        say "no release build in $bin: building it now (swift build -c release; a cold build takes ~10 minutes) ..."
        (cd "$root" && ${SWIFT:-swift} build -c release >&2)
    fi
    (cd "$bin" && pwd)
}

nginx_bin() {
    local n
    n="$(command -v nginx || true)"
    [ -n "$n" ] || { [ -x /usr/sbin/nginx ] && n=/usr/sbin/nginx; }
    if [ -z "$n" ]; then
        if [ "$(id -u)" -ne 0 ]; then say "nginx is missing: sudo apt-get install -y nginx"; return 1; fi
        say "installing nginx (apt-get) ..."
        # Debian starts a package's service on install unless policy-rc.d says no: ours runs alone.
        local policy=/usr/sbin/policy-rc.d made=0
        if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; made=1; fi
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q nginx >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q nginx >/dev/null; } || {
            [ "$made" = 1 ] && rm -f "$policy"; say "apt-get install nginx failed"; return 1; }
        [ "$made" = 1 ] && rm -f "$policy"
        n=/usr/sbin/nginx
    fi
    echo "$n"
}

# Starts replica $1 on port $2 (0: a free one), records its pid, and waits for its URL.
start_replica() {
    local i="$1" port="$2" bin data
    bin="$(state_get bin_dir)"
    data="$dir/replica-$i"
    mkdir -p "$data" "$logs"
    # Secrets go through the environment, never the command line.
    ( . "$dir/postgres/env"; . "$dir/s3/env"
      exec env -u STOWD_TOKEN STOWD_DATABASE="$STOW_TEST_DATABASE_URL?schema=stow_cluster" \
        AWS_ACCESS_KEY_ID="$STOW_TEST_S3_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$STOW_TEST_S3_SECRET_KEY" \
        setsid "$bin/stowd" --data-dir "$data" --host 127.0.0.1 --port "$port" --token-file "$dir/tokens" \
            --object-store "s3://$STOW_TEST_S3_BUCKET/cluster" --s3-endpoint "$STOW_TEST_S3_ENDPOINT" \
            > "$logs/replica-$i.out" 2>> "$logs/replica-$i.log" < /dev/null ) 9>&- &
    state_set "replica_${i}_pid" "$!"
}

wait_replica() {
    local i="$1" pid url="" t
    pid="$(state_get "replica_${i}_pid")"
    for ((t = 0; t < 600; t++)); do
        if [ "$(wc -l < "$logs/replica-$i.out")" -ge 1 ]; then url="$(head -1 "$logs/replica-$i.out")"; break; fi
        alive "$pid" || { say "replica $i (pid $pid) stopped at start; the end of $logs/replica-$i.log:"; tail -15 "$logs/replica-$i.log" >&2; return 1; }
        sleep 0.1
    done
    [ -n "$url" ] || { say "replica $i (pid $pid) printed no URL in 60 s; see $logs/replica-$i.log"; return 1; }
    state_set "replica_${i}_port" "${url##*:}"
    state_set "replica_${i}_url" "$url"
}

write_nginx_conf() {
    local prefix="$dir/nginx" port="$1" n i
    n="$(state_get replicas)"
    mkdir -p "$prefix/tmp" "$logs"
    {
        cat <<CONF
# Written by scripts/cluster.sh: nginx in front of the stowd replicas of $dir.
worker_processes 2;
pid $prefix/nginx.pid;
error_log $logs/nginx-error.log warn;
events { worker_connections 1024; }
http {
    log_format upstream '\$remote_addr [\$time_local] "\$request" \$status \$body_bytes_sent \$request_time '
                        'upstream=\$upstream_addr (\$upstream_status)';
    access_log $logs/nginx-access.log upstream;
    # Its own temporary folders (the package's are under /var/lib/nginx).
    client_body_temp_path $prefix/tmp/body;
    proxy_temp_path $prefix/tmp/proxy;
    fastcgi_temp_path $prefix/tmp/fastcgi;
    uwsgi_temp_path $prefix/tmp/uwsgi;
    scgi_temp_path $prefix/tmp/scgi;

    upstream stowd {
CONF
        for ((i = 1; i <= n; i++)); do
            echo "        server 127.0.0.1:$(state_get "replica_${i}_port") max_fails=1 fail_timeout=5s;"
        done
        cat <<CONF
        keepalive 32;               # reuse connections to the replicas
    }
    server {
        listen 127.0.0.1:$port;
        client_max_body_size 0;     # no limit: stowd enforces --max-upload-size
        client_body_timeout 1h;
        send_timeout 1h;
        location / {
            proxy_pass http://stowd;
            proxy_http_version 1.1;             # keepalive and chunked bodies to the replicas
            proxy_set_header Connection "";
            proxy_set_header Host \$http_host;   # stowd builds links from Host: they must name nginx
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_request_buffering off;        # stream uploads as they come, no temp file
            proxy_buffering off;                # stream downloads at the client's pace
            proxy_connect_timeout 3s;
            proxy_send_timeout 1h;              # big uploads and downloads
            proxy_read_timeout 1h;
            proxy_next_upstream error timeout;  # a replica that refuses the connection: the next one
        }
    }
}
CONF
    } > "$prefix/nginx.conf"
}

print_summary() {
    local n i endpoint token
    n="$(state_get replicas)"; endpoint="$(state_get endpoint)"; token="$(cat "$dir/token")"
    cat <<EOF

  StowFS cluster: $n stowd replicas behind nginx, metadata in PostgreSQL, contents in S3.

  endpoint   $endpoint
  token      $token   (file: $dir/token)
  mount      $(state_get bin_dir)/stowfs mount demo ~/stow --endpoint $endpoint --token-file $dir/token --create
  replicas
EOF
    for ((i = 1; i <= n; i++)); do
        echo "    $i  $(state_get "replica_${i}_url")  pid $(state_get "replica_${i}_pid")  data $dir/replica-$i"
    done
    cat <<EOF
  nginx      127.0.0.1:$(state_get nginx_port)  pid $(state_get nginx_pid)  conf $dir/nginx/nginx.conf
  PostgreSQL 127.0.0.1:$(cat "$dir/postgres/port")  pid $(state_get pg_pid)  (scripts/pg-test.sh, --durable)
  S3         $(. "$dir/s3/env"; echo "$STOW_TEST_S3_ENDPOINT")  pid $(state_get s3_pid)  bucket stow-test, prefix cluster/
  logs       $logs/ (replica-N.log, nginx-access.log, nginx-error.log),
             $dir/postgres/postgres.log, $dir/s3/weed.log (copied into $logs/ at down)
  state      $state
  drills     scripts/cluster.sh kill-replica 2 --dir $dir ; scripts/cluster.sh restart-replica 2 --dir $dir
  stop       scripts/cluster.sh down --dir $dir

EOF
}

# Whether anything recorded in the state still runs.
anything_alive() {
    local n i
    n="$(state_get replicas)"
    alive "$(state_get nginx_pid)" && return 0
    for ((i = 1; i <= ${n:-0}; i++)); do alive "$(state_get "replica_${i}_pid")" && return 0; done
    alive "$(state_get pg_pid)" && return 0
    alive "$(state_get s3_pid)" && return 0
    return 1
}

# ---- commands ----------------------------------------------------------------------------------

do_down() {
    [ -f "$state" ] || { say "nothing is up in $dir"; return 0; }
    local n i pid how
    n="$(state_get replicas)"
    mkdir -p "$logs"
    pid="$(state_get nginx_pid)"
    if ours "$pid" "$dir/nginx/nginx.conf"; then
        kill -QUIT "$pid" 2>/dev/null || true    # nginx's graceful stop
        for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && { kill -KILL "$pid" 2>/dev/null || true; pkill -KILL -P "$pid" 2>/dev/null || true; }
        echo "stopped nginx (pid $pid)"
    elif [ -n "$pid" ]; then
        echo "nginx (pid $pid) was not running"
    fi
    local -a entries=()
    for ((i = 1; i <= ${n:-0}; i++)); do
        pid="$(state_get "replica_${i}_pid")"
        [ -n "$pid" ] || continue
        if ours "$pid" "$(replica_marker "$i")"; then entries+=("$pid:$(replica_marker "$i")")
        else echo "replica $i (pid $pid) was not running"; fi
    done
    if [ ${#entries[@]} -gt 0 ]; then
        while read -r pid how; do
            for ((i = 1; i <= n; i++)); do
                [ "$(state_get "replica_${i}_pid")" = "$pid" ] && echo "stopped replica $i (pid $pid, $how)"
            done
        done < <(stop_pids "${entries[@]}")
    fi
    local t
    if [ -n "$(state_get s3_dir)" ]; then
        cp "$dir/s3/weed.log" "$logs/weed.log" 2>/dev/null || true
        pid="$(state_get s3_pid)"; t=$SECONDS
        "$scripts/s3-test.sh" stop "$dir/s3"
        echo "stopped the S3 server${pid:+ (pid $pid)} in $((SECONDS - t)) s"
    fi
    if [ -n "$(state_get pg_dir)" ]; then
        cp "$dir/postgres/postgres.log" "$logs/postgres.log" 2>/dev/null || true
        pid="$(state_get pg_pid)"; t=$SECONDS
        "$scripts/pg-test.sh" stop "$dir/postgres"
        echo "stopped PostgreSQL${pid:+ (pid $pid)} in $((SECONDS - t)) s"
    fi
    for ((i = 1; i <= ${n:-0}; i++)); do rm -rf "$dir/replica-$i"; done
    rm -rf "$dir/nginx" "$dir/tokens" "$dir/token" "$state"
    echo "removed the state and data in $dir; logs kept in $logs"
}

do_up() {
    if [ -f "$state" ]; then
        if anything_alive; then
            say "the cluster in $dir is already up (scripts/cluster.sh status --dir $dir; down to stop it)"
            print_summary
            return 0
        fi
        say "a cluster recorded in $dir no longer runs: clearing its state first"
        do_down >&2
    fi
    local bin nginx started=$SECONDS
    bin="$(bin_dir)"
    nginx="$(nginx_bin)"
    rm -rf "$logs"; mkdir -p "$logs"
    state_set replicas "$replicas"
    state_set bin_dir "$bin"
    state_set started "$(date -Is)"
    up_done=0
    trap 'if [ "$up_done" = 0 ]; then say "up failed: stopping what it started"; do_down >&2; fi' EXIT

    say "starting PostgreSQL ..."
    state_set pg_dir "$dir/postgres"
    "$scripts/pg-test.sh" start "$dir/postgres" --durable 9>&-
    state_set pg_pid "$(cat "$dir/postgres/pid")"

    say "starting the S3 server ..."
    state_set s3_dir "$dir/s3"
    "$scripts/s3-test.sh" start "$dir/s3" 9>&-
    state_set s3_pid "$(cat "$dir/s3/pid")"

    local token i
    token="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
    ( umask 077; printf '%s  *  admin\n' "$token" > "$dir/tokens"; printf '%s\n' "$token" > "$dir/token" )

    say "starting $replicas stowd replicas ($bin/stowd) ..."
    for ((i = 1; i <= replicas; i++)); do start_replica "$i" 0; done
    for ((i = 1; i <= replicas; i++)); do wait_replica "$i"; done

    say "starting nginx ..."
    local port prefix="$dir/nginx"
    port="$(free_port)"
    state_set nginx_port "$port"
    write_nginx_conf "$port"
    "$nginx" -t -q -p "$prefix" -e "$logs/nginx-error.log" -c "$prefix/nginx.conf"
    "$nginx" -p "$prefix" -e "$logs/nginx-error.log" -c "$prefix/nginx.conf" 9>&-
    for _ in $(seq 50); do [ -s "$prefix/nginx.pid" ] && break; sleep 0.1; done
    state_set nginx_pid "$(cat "$prefix/nginx.pid")"
    state_set endpoint "http://127.0.0.1:$port"

    # Every replica answers through nginx (round robin: 2 N requests reach each at least once).
    for ((i = 1; i <= 2 * replicas; i++)); do
        local code
        code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$port/healthz" || true)"
        [ "$code" = 200 ] || { say "GET /healthz through nginx answered ${code:-nothing}; see $logs/nginx-error.log"; return 1; }
    done
    up_done=1
    trap - EXIT
    say "up in $((SECONDS - started)) s"
    print_summary
}

do_status() {
    [ -f "$state" ] || { echo "no cluster in $dir"; return 1; }
    local n i pid code ok=0 url
    n="$(state_get replicas)"
    echo "cluster in $dir, started $(state_get started)"
    echo "  endpoint $(state_get endpoint)"
    pid="$(state_get pg_pid)"
    if alive "$pid"; then echo "  PostgreSQL  pid $pid  port $(cat "$dir/postgres/port" 2>/dev/null)  running"
    else echo "  PostgreSQL  pid ${pid:--}  NOT RUNNING"; ok=1; fi
    pid="$(state_get s3_pid)"
    if alive "$pid"; then echo "  S3          pid $pid  $(. "$dir/s3/env"; echo "$STOW_TEST_S3_ENDPOINT")  running"
    else echo "  S3          pid ${pid:--}  NOT RUNNING"; ok=1; fi
    for ((i = 1; i <= ${n:-0}; i++)); do
        pid="$(state_get "replica_${i}_pid")"; url="$(state_get "replica_${i}_url")"
        if ours "$pid" "$(replica_marker "$i")"; then
            code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$url/healthz" || true)"
            echo "  replica $i   pid $pid  $url  running, /healthz $code"
            [ "$code" = 200 ] || ok=1
        else
            echo "  replica $i   pid ${pid:--}  ${url:-}  NOT RUNNING"; ok=1
        fi
    done
    pid="$(state_get nginx_pid)"
    if ours "$pid" "$dir/nginx/nginx.conf"; then
        code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$(state_get endpoint)/healthz" || true)"
        echo "  nginx       pid $pid  $(state_get endpoint)  running, /healthz $code"
        [ "$code" = 200 ] || ok=1
    else
        echo "  nginx       pid ${pid:--}  NOT RUNNING"; ok=1
    fi
    return $ok
}

replica_index() {
    [ -f "$state" ] || { say "no cluster in $dir"; exit 1; }
    local n
    n="$(state_get replicas)"
    if ! [[ "$index" =~ ^[0-9]+$ ]] || [ "$index" -lt 1 ] || [ "$index" -gt "$n" ]; then
        say "give a replica number from 1 to $n"; exit 2
    fi
}

do_kill_replica() {
    replica_index
    local pid
    pid="$(state_get "replica_${index}_pid")"
    ours "$pid" "$(replica_marker "$index")" || { say "replica $index (pid ${pid:--}) is not running"; return 1; }
    kill -KILL "$pid"
    for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
    echo "killed replica $index (pid $pid, SIGKILL)"
}

do_restart_replica() {
    replica_index
    local pid port how
    pid="$(state_get "replica_${index}_pid")"
    port="$(state_get "replica_${index}_port")"
    if ours "$pid" "$(replica_marker "$index")"; then
        how="$(stop_pids "$pid:$(replica_marker "$index")" | awk '{print $2}')"
        echo "stopped replica $index (pid $pid, $how)"
    fi
    start_replica "$index" "$port"
    wait_replica "$index"
    echo "started replica $index: $(state_get "replica_${index}_url"), pid $(state_get "replica_${index}_pid")"
}

do_halt_resume() {
    [ -f "$state" ] || { say "no cluster in $dir"; return 1; }
    case "$cmd" in
        halt-database) "$scripts/pg-test.sh" halt "$(state_get pg_dir)"; echo "PostgreSQL stopped (its data kept; resume-database starts it)" ;;
        resume-database)
            "$scripts/pg-test.sh" resume "$(state_get pg_dir)" 9>&-
            state_set pg_pid "$(cat "$(state_get pg_dir)/pid")"
            echo "PostgreSQL started again, pid $(state_get pg_pid)" ;;
        halt-store) "$scripts/s3-test.sh" halt "$(state_get s3_dir)"; echo "the S3 server stopped (its data kept; resume-store starts it)" ;;
        resume-store)
            "$scripts/s3-test.sh" resume "$(state_get s3_dir)" 9>&-
            state_set s3_pid "$(cat "$(state_get s3_dir)/pid")"
            echo "the S3 server started again, pid $(state_get s3_pid)" ;;
    esac
}

# One command at a time per cluster folder (status only reads). What it starts runs with fd 9
# closed (9>&-), or the lock would live as long as they do.
if [ "$cmd" != status ]; then
    exec 9> "$dir/.lock"
    flock -n 9 || { say "another scripts/cluster.sh is working on $dir"; exit 1; }
fi

case "$cmd" in
    up) do_up ;;
    down) do_down ;;
    status) do_status ;;
    kill-replica) do_kill_replica ;;
    restart-replica) do_restart_replica ;;
    halt-database|resume-database|halt-store|resume-store) do_halt_resume ;;
esac
