#!/usr/bin/env python3
"""A cold read of one large file through the cluster, beside the S3 server's own ceiling, with CPU.

    python3 bench/cluster-cold-read.py BIN[,BIN2,...] [--runs 3]

Starts one scripts/cluster.sh cluster (with the first build's stowd), then for each run: the S3
ceiling (boto3 moving a 1 GiB file down in 8 MiB ranges, 8 at a time, as `fsbench.py` measures it),
and for each build in turn a mount through the cluster's nginx: the file copied in and stored, a
remount with an empty cache and the page cache dropped, then `cat` of it timed. Prints the wall
time, the mount's CPU and SeaweedFS's CPU (user + system, from /proc) during the read. BIN holds
release builds of stowfs and stowd. Needs root, and what `make bench BENCH_ARGS="--backend
cluster"` needs (PostgreSQL, nginx, SeaweedFS, boto3). Stops the cluster at the end.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fsbench  # noqa: E402


cpu_seconds, weed_cpu = fsbench.cpu_seconds, fsbench.weed_cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bins", help="comma-separated folders holding stowfs and stowd")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="/var/tmp/stow-cluster-cold-read")
    args = ap.parse_args()
    bins = args.bins.split(",")
    os.makedirs(args.work, exist_ok=True)
    big = os.path.join(args.work, "big.bin")
    if not os.path.exists(big) or os.path.getsize(big) != 1 << 30:
        subprocess.run(["dd", "if=/dev/urandom", f"of={big}", "bs=8M", "count=128", "status=none"], check=True)
    cluster = fsbench.Cluster(args.work, bins[0])
    cluster.start()
    try:
        for r in range(args.runs):
            s3 = fsbench.S3Ceiling(args.work, cluster)
            s3.start()
            try:
                s3.upload(big)
                fsbench.drop_caches()
                w0 = weed_cpu()
                t = fsbench.timed(s3.download)
                print(f"run {r + 1} S3 ceiling: {t:.3f} s, SeaweedFS {weed_cpu() - w0:.2f} s of CPU", flush=True)
            finally:
                s3.stop()
            for b in bins:
                m = fsbench.StowFSCluster(args.work, b, cluster)
                m.start()
                try:
                    subprocess.run(["cp", big, f"{m.path}/big.bin"], check=True)
                    m.durable(None, None)
                    m.cold()
                    c0, w0 = cpu_seconds(m.pid), weed_cpu()
                    t = fsbench.timed(lambda: subprocess.run(["cat", f"{m.path}/big.bin"], stdout=subprocess.DEVNULL, check=True))
                    print(f"run {r + 1} {b}: {t:.3f} s, the mount {cpu_seconds(m.pid) - c0:.2f} s of CPU, SeaweedFS {weed_cpu() - w0:.2f} s",
                          flush=True)
                finally:
                    m.stop()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
