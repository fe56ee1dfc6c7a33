#!/usr/bin/env bash
# The server's test suite again on the scale-out backend: metadata in PostgreSQL (Debian's server,
# initdb'd in a folder of its own) and file contents in an S3 server that verifies signatures
# (SeaweedFS). Both are started here on free loopback ports and stopped by their pids whatever
# happens. Every test server gets a schema and a bucket prefix of its own. Then the hostile-input
# suite and schemathesis against the stowd executable on the same backend. Arguments go to
# `swift test` (then only that runs; default: --filter StorageServerTests, and the hostile suite).
set -euo pipefail
cd "$(dirname "$0")/.."
s3="$(mktemp -d /tmp/stow-s3-XXXXXX)"
pg="$(mktemp -d /tmp/stow-pg-XXXXXX)"
trap 'scripts/s3-test.sh stop "$s3"; scripts/pg-test.sh stop "$pg"' EXIT
scripts/pg-test.sh start "$pg"
scripts/s3-test.sh start "$s3"
# shellcheck disable=SC1091
. "$s3/env"
# shellcheck disable=SC1091
. "$pg/env"
if [ $# -gt 0 ]; then
    ${SWIFT:-swift} test --skip-build "$@"
    exit $?
fi
scripts/timed.sh "  server suite on PostgreSQL + S3" ${SWIFT:-swift} test --skip-build --filter StorageServerTests
scripts/timed.sh "  hostile input and schemathesis on PostgreSQL + S3" python3 -m pytest Tests/hostile -q
