# Run: python3 -m pytest Tests/hostile -q   (from the repository root; needs a built .build/debug/stowd or STOW_BIN_DIR)
"""Fixtures of the hostile-input suite.

`stowd_server` (one per test module) starts the binary — `$STOW_BIN_DIR/stowd`, by default
`<repo>/.build/debug/stowd` — on port 0 with a fresh temporary data directory and a known admin
token (STOWD_TOKEN), reads its URL from the first line of its standard output, creates the
namespace `test` and stores the files every case checks afterwards (`keep.txt`, public, and
`keepdir/private.bin`). It always stops the process it started, by that process's pid
(SIGTERM, then SIGKILL after 10 s), and removes the data directory, whatever the tests did.

`srv` (per test) hands out that server, replaced by a fresh one first when the previous case
killed it or changed what it stores, so that one crash does not fail every case after it.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from stowlib import Stowd, default_binary  # noqa: E402


@pytest.fixture(scope="module")
def stowd_server():
    binary = default_binary()
    if not os.path.exists(binary):
        pytest.fail(f"no stowd binary at {binary}: build it first, or set STOW_BIN_DIR")
    server = Stowd(binary)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def srv(stowd_server):
    stowd_server.ensure_fresh()
    yield stowd_server
