# Run: python3 -m pytest Tests/hostile -q   (needs `pip install -r Tests/hostile/requirements.txt`: schemathesis 4.32.5)
"""Schemathesis against a running stowd, from docs/openapi.yaml.

Property-based requests to every operation of the document (examples, coverage and fuzzing
phases, a fixed seed, a bounded number of examples per operation), authenticated with the admin
token, checking `not_a_server_error` (no 5xx); afterwards the process must still be alive and
answer /healthz.

The server is its own (not the hostile suite's): schemathesis changes and deletes what it finds.
It runs with `--max-upload-size 8M`, because `PATCH files/{path}` with `{"size": N}` writes N
real bytes of zeros (up to the maximum upload size, 1 TiB by default) and a fuzzer asks for that.

Nothing is excluded: `uploads/copy` refuses every URL before fetching anything (the copy
allowlist is empty by default), so it sends no traffic anywhere; `deleteNamespace` may wipe the
namespace mid-run, which only makes later operations answer 404.

Hooks (st_hooks.py): `application/offset+octet-stream` is sent as octet-stream; schemathesis
has no serializer for it and reported "Serialization not possible" for PATCH /storage/uploads/{id}.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from stowlib import Stowd

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
OPENAPI = os.path.join(REPO, "docs", "openapi.yaml")
SCHEMATHESIS_VERSION = "4.32.5"
SEED = 20261124
# Per operation and phase. 200 took 426 s on 2 cores (2026-11-27); `make test` runs 100 here and 50
# on PostgreSQL + S3, to keep CI under 45 minutes. The seed is fixed, so more examples are a
# deeper run, not a different one: STOW_ST_MAX_EXAMPLES=200 (or more) by hand.
MAX_EXAMPLES = int(os.environ.get("STOW_ST_MAX_EXAMPLES", "200"))
RUN_TIMEOUT = 600


@pytest.fixture(scope="module")
def st_server():
    server = Stowd(extra_args=["--max-upload-size", "8M"])
    try:
        server.start()
        yield server
    finally:
        server.stop()


def _failures_from_junit(path: str) -> list[str]:
    out = []
    try:
        root = ET.parse(path).getroot()
    except Exception as e:  # noqa: BLE001
        return [f"(no JUnit report: {e})"]
    for case in root.iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            text = (bad.get("message") or "") + "\n" + (bad.text or "")
            out.append(f"{case.get('name')}: {text.strip()[:1500]}")
    return out


def test_schemathesis_no_server_errors(st_server: Stowd, tmp_path) -> None:
    try:
        import schemathesis  # noqa: F401
        from importlib.metadata import version
    except ImportError:
        pytest.fail("schemathesis is not installed: pip install -r Tests/hostile/requirements.txt")
    assert version("schemathesis") == SCHEMATHESIS_VERSION, (
        f"schemathesis {version('schemathesis')} is installed; this test is pinned to {SCHEMATHESIS_VERSION}")
    junit = str(tmp_path / "junit.xml")
    cmd = [
        sys.executable, "-m", "schemathesis.cli", "--no-color", "--config-file", os.path.join(HERE, "schemathesis.toml"),
        "run", OPENAPI, "--url", st_server.url,
        "-H", f"Authorization: Bearer {st_server.token}",
        "--checks", "not_a_server_error",
        "--phases", "examples,coverage,fuzzing",
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", str(SEED),
        # One worker: with two, schemathesis 4.32.5 / hypothesis 6.155.2 failed with an internal KeyError
        # (hypothesis/internal/lambda_sources.py, AST_LAMBDAS_CACHE) in the coverage phase.
        "--workers", "1",
        "--request-timeout", "30",
        "--suppress-health-check", "all",
        "--report", "junit", "--report-junit-path", junit,
    ]
    env = dict(os.environ, SCHEMATHESIS_HOOKS="st_hooks", PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    took = time.monotonic() - t0
    output = proc.stdout + proc.stderr
    summary = output[output.rfind("SUMMARY"):] if "SUMMARY" in output else output[-3000:]
    print(f"schemathesis took {took:.0f} s\n{summary}")
    problems = []
    if not st_server.alive():
        problems.append(st_server.death_report())
    else:
        r = st_server.request("GET", "/healthz", auth=False, timeout=30)
        if r.status != 200:
            problems.append(f"after the run, /healthz answered {r.short()}")
    if proc.returncode != 0:
        problems.append(f"schemathesis exited {proc.returncode} after {took:.0f} s")
        problems += _failures_from_junit(junit)
        problems.append("output tail:\n" + "\n".join(output.splitlines()[-80:]))
    if "Serialization not possible" in output:
        problems.append("schemathesis could not serialize a request body (see the output)")
    assert not problems, "\n\n".join(problems)
