#!/usr/bin/env bash
# The server's test suite again, with file contents in an S3 server that verifies signatures
# (SeaweedFS, started here and stopped by its pid whatever happens): the conformance run of the
# S3 backend. Arguments go to `swift test` (default: --filter StorageServerTests).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$(mktemp -d /tmp/stow-s3-XXXXXX)"
trap 'scripts/s3-test.sh stop "$dir"' EXIT
scripts/s3-test.sh start "$dir"
# shellcheck disable=SC1091
. "$dir/env"
if [ $# -eq 0 ]; then set -- --filter StorageServerTests; fi
${SWIFT:-swift} test --skip-build "$@"
