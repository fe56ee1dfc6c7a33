#!/usr/bin/env python3
"""stowd's CPU per page of a folder's listing on its embedded SQLite backend.

    python3 bench/listing-cpu.py BIN[,BIN2,...] [--files 2000] [--rounds 3] [--pages 100]

Makes a folder of --files files of 1 KiB once (a mount on the first build's stowd), then, for each
round and each build in turn, starts that build's stowd on the same data and asks it --pages times
for `GET browse?fields=posix` of the folder (a page of up to 1,000 records, as the mount asks; each
with curl), and prints stowd's CPU time (user + system, from /proc) and the wall time per page.
The wall time includes starting curl. BIN holds release builds of stowd and stowfs. Needs root
(it mounts) and curl. Cleans up its folder (/var/tmp/stow-listing-cpu) at the end, also on failure.
"""
import argparse
import os
import shutil
import subprocess
import time


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_stowd(bindir, data, env):
    server = subprocess.Popen([f"{bindir}/stowd", "--data-dir", data, "--port", "0", "--log-level", "warning"], stdout=subprocess.PIPE,
                              env=env, text=True)
    endpoint = server.stdout.readline().strip()
    if not endpoint.startswith("http"):
        server.kill()
        raise RuntimeError("stowd did not start")
    return server, endpoint


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bins", help="comma-separated folders holding stowd and stowfs")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pages", type=int, default=100)
    args = ap.parse_args()
    bins = args.bins.split(",")
    work = "/var/tmp/stow-listing-cpu"
    shutil.rmtree(work, ignore_errors=True)
    data, mnt = os.path.join(work, "data"), os.path.join(work, "mnt")
    os.makedirs(mnt)
    env = dict(os.environ, STOWFS_TOKEN="listing-cpu", STOWD_TOKEN="listing-cpu")
    server = mount = None
    try:
        server, endpoint = start_stowd(bins[0], data, env)
        mount = subprocess.Popen([f"{bins[0]}/stowfs", "mount", "bench", mnt, "--endpoint", endpoint, "--cache-dir", work + "/cache", "--foreground",
                                  "--create"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(150):
            if os.path.ismount(mnt):
                break
            time.sleep(0.2)
        folder = os.path.join(mnt, "small")
        os.mkdir(folder)
        for i in range(args.files):
            with open(os.path.join(folder, f"IMG_{i:06d}.jpg"), "wb") as f:
                f.write(b"x" * 1024)
        subprocess.run([f"{bins[0]}/stowfs", "sync", mnt], env=env, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([f"{bins[0]}/stowfs", "unmount", mnt], env=env, check=True, stdout=subprocess.DEVNULL)
        mount.wait()
        mount = None
        server.terminate()
        server.wait()
        server = None
        for r in range(args.rounds):
            for b in bins:
                server, endpoint = start_stowd(b, data, env)
                url = f"{endpoint}/service/application/assets/v1.0/namespaces/bench/browse?prefix=small/&delimiter=/&limit=1000&fields=posix"
                loop = f'for i in $(seq {{}}); do curl -fsS -o /dev/null -H "Authorization: Bearer listing-cpu" "{url}"; done'
                subprocess.run(["bash", "-c", loop.format(5)], check=True)
                c0, t0 = cpu_seconds(server.pid), time.perf_counter()
                subprocess.run(["bash", "-c", loop.format(args.pages)], check=True)
                t1, c1 = time.perf_counter(), cpu_seconds(server.pid)
                print(f"round {r + 1} {b}: stowd {(c1 - c0) * 1000 / args.pages:.2f} ms of CPU a page, {(t1 - t0) * 1000 / args.pages:.2f} ms wall a page",
                      flush=True)
                server.terminate()
                server.wait()
                server = None
    finally:
        if mount:
            subprocess.run([f"{bins[0]}/stowfs", "unmount", mnt], env=env, check=False, capture_output=True)
            mount.wait()
        if server:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
