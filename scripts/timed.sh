#!/usr/bin/env bash
# Runs a command and says how long it took: `scripts/timed.sh NAME COMMAND...` (CI prints each stage's time).
set -uo pipefail
name="$1"; shift
start=$SECONDS
"$@"
status=$?
echo "== $name: $((SECONDS - start)) s (exit $status)"
exit $status
