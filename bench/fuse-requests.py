#!/usr/bin/env python3
"""Where a command waits on a FUSE filesystem, request by request.

    sudo python3 bench/fuse-requests.py -- tar xf tree.tar -C /mnt/stowfs/tree

Runs the command under `perf record` of the kernel's fuse:fuse_request_send and
fuse:fuse_request_end events (every FUSE connection on the machine), then prints, per opcode,
how many requests there were and their median, p90 and total latency, sorted by total. Needs root
and perf (Debian: linux-perf). Used for the table in docs/performance.md ("Small files again").
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

LINE = re.compile(r"\s(\d+\.\d+):\s+fuse:fuse_request_(send|end): connection (\d+) req (\d+)(?: opcode \d+ \((\w+)\))?")


def main():
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        rc = subprocess.call(["perf", "record", "-q", "-o", data, "-e", "fuse:fuse_request_send", "-e", "fuse:fuse_request_end", "-a", "--"] + args)
        text = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True).stdout
    sent, waits = {}, defaultdict(list)
    first = last = None
    for line in text.splitlines():
        m = LINE.search(line)
        if not m:
            continue
        t, kind, key = float(m.group(1)), m.group(2), (m.group(3), m.group(4))
        first = t if first is None else first
        last = t
        if kind == "send":
            sent[key] = (t, m.group(5))
        elif key in sent:
            t0, op = sent.pop(key)
            waits[op].append((t - t0) * 1e6)
    print(f"{'request':22} {'count':>7} {'median':>10} {'p90':>10} {'total':>10}")
    for op, v in sorted(waits.items(), key=lambda kv: -sum(kv[1])):
        v.sort()
        print(f"{op:22} {len(v):7d} {statistics.median(v):8.0f}µs {v[int(len(v) * 0.9)]:8.0f}µs {sum(v) / 1e3:8.0f}ms")
    if first is not None:
        print(f"first to last event: {(last - first) * 1e3:.0f} ms; the command exited {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
