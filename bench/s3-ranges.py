#!/usr/bin/env python3
"""What a ranged GET costs the S3 server by its alignment with the object's parts.

    python3 bench/s3-ranges.py BIN [--rounds 3]

Starts one scripts/cluster.sh cluster (BIN holds release builds of stowd and stowfs), stores a
1 GiB random file with boto3 (8 MiB parts, as `fsbench.py`'s S3 ceiling does), then reads it
back whole, 8 GETs at a time, in ranges of 8 or 16 MiB that start on the parts' boundaries or
3 MiB off them, and prints each read's wall time and the CPU SeaweedFS took (all its processes,
from /proc). The mount's read-ahead asks for runs of up to 16 blocks of 1 MiB, each within an
aligned group of 16 (`StowFileSystem.runs(of:)`), because of what this shows. Needs root and
what `make bench BENCH_ARGS="--backend cluster"` needs. Stops the cluster at the end.
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fsbench  # noqa: E402


cpu_seconds, weed_cpu = fsbench.cpu_seconds, fsbench.weed_cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin", help="a folder holding stowd and stowfs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/var/tmp/stow-s3-ranges")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    size = 1 << 30
    big = os.path.join(args.work, "big.bin")
    if not os.path.exists(big) or os.path.getsize(big) != size:
        subprocess.run(["dd", "if=/dev/urandom", f"of={big}", "bs=8M", "count=128", "status=none"], check=True)
    cluster = fsbench.Cluster(args.work, args.bin)
    cluster.start()
    try:
        s3 = fsbench.S3Ceiling(args.work, cluster)
        s3.start()
        try:
            s3.upload(big)

            def get(r):
                body = s3.client.get_object(Bucket=s3.bucket, Key=s3.key_name, Range=f"bytes={r[0]}-{r[1] - 1}")["Body"]
                n = 0
                while True:
                    b = body.read(1 << 20)
                    if not b:
                        return n
                    n += len(b)

            for rnd in range(args.rounds):
                for name, step, off in [("8 MiB on the parts", 8 << 20, 0), ("16 MiB on the parts", 16 << 20, 0),
                                        ("16 MiB, 3 MiB off", 16 << 20, 3 << 20), ("8 MiB, 3 MiB off", 8 << 20, 3 << 20)]:
                    ranges = [(0, off)] if off else []
                    p = off
                    while p < size:
                        ranges.append((p, min(size, p + step)))
                        p += step
                    fsbench.drop_caches()
                    w0, t = weed_cpu(), time.monotonic()
                    with concurrent.futures.ThreadPoolExecutor(8) as ex:
                        total = sum(ex.map(get, ranges))
                    assert total == size, total
                    print(f"round {rnd + 1}, {name}: {time.monotonic() - t:.3f} s, SeaweedFS {weed_cpu() - w0:.2f} s of CPU", flush=True)
        finally:
            s3.stop()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
