#!/usr/bin/env python3
"""Two builds, one large file, alternating on fresh systems: an A/B that the full bench's order
of systems cannot skew.

    sudo python3 bench/ab-big.py OLD_BIN NEW_BIN [--runs 4] [--file /var/tmp/stowfs-bench/src/big.bin]

For each run and build (the order flips every run): an embedded stowd and a mount as
`fsbench.py` makes them; `cp` of the file and `stowfs sync` (W1), a remount with an empty cache and
the page cache dropped, `cat` (W2 cold), another such remount, `echo tail >>` the file (a stored
file opened for writing: its local copy is made first) and the `stowfs sync` that sends it back.
Prints each run's seconds and, at the end, the medians. The file defaults to fsbench's 1 GiB source
(run `bench/fsbench.py` once first, or give one). Needs root and /dev/fuse.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fsbench  # noqa: E402


def one(bindir, big, work):
    s = fsbench.StowFS(work, bindir)
    s.start()
    try:
        t = time.monotonic()
        subprocess.run(["cp", big, f"{s.path}/big.bin"], check=True)
        s.durable("big.bin", None)
        w1 = time.monotonic() - t
        s.cold()
        t = time.monotonic()
        subprocess.run(["cat", f"{s.path}/big.bin"], stdout=subprocess.DEVNULL, check=True)
        w2 = time.monotonic() - t
        s.cold()
        t = time.monotonic()
        subprocess.run(["sh", "-c", f"echo tail >> {s.path}/big.bin"], check=True)
        append = time.monotonic() - t
        t = time.monotonic()
        s.durable("big.bin", None)
        sync = time.monotonic() - t
    finally:
        s.stop()
    return {"W1": w1, "W2 cold": w2, "append cold": append, "its sync": sync}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--file", default="/var/tmp/stowfs-bench/src/big.bin")
    ap.add_argument("--work", default="/var/tmp/stowfs-ab")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("ab-big: run as root (it mounts, and drops the page cache)")
    if not os.path.exists(args.file):
        sys.exit(f"ab-big: no {args.file} (run bench/fsbench.py once, or give --file)")
    results = {"old": [], "new": []}
    for i in range(args.runs):
        order = [("old", args.old), ("new", args.new)] if i % 2 == 0 else [("new", args.new), ("old", args.old)]
        for name, bindir in order:
            r = one(bindir, args.file, args.work)
            results[name].append(r)
            print(f"run {i + 1} {name}: " + ", ".join(f"{k} {v:.2f} s" for k, v in r.items()), flush=True)
    print("medians:")
    for name in ("old", "new"):
        keys = results[name][0].keys()
        print(f"  {name}: " + ", ".join(f"{k} {statistics.median(r[k] for r in results[name]):.2f} s" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
