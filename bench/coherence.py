#!/usr/bin/env python3
"""make bench-coherence: how soon a change stored through mount A shows in mount B (issue 16).

Two mounts of one namespace, each with its own cache folder, their attribute TTL set to 60 s (so
that only a push can make B see a change sooner). For each kind of change — a file made, new
content (read by a fresh open: close-to-open), a chmod seen by `stat` alone, a rename, a delete,
a tag (an xattr), a folder made — A makes it and runs `stowfs sync`; the clock starts when the
sync returns (the change is stored) and stops when B, polling every millisecond, shows it. B has
looked at everything before (its kernel and engine cache the old state). Then the lock wake-up:
A holds an exclusive flock, B waits for it in flock; A lets go; the time from A's unlock returning
to B's flock returning.

Set-ups: both mounts on one embedded stowd ("embedded"); and, with --cluster, each mount on its own
stowd replica of one scripts/cluster.sh cluster (PostgreSQL + SeaweedFS): A's changes go through
replica 1, B follows the feed of replica 2.

Writes a Markdown table (median, p99, max per kind) and JSON to bench/results/coherence.{md,json}.
Needs root (FUSE mounts).
"""

import argparse
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsbench import REPO, Cluster, free_port, is_mounted, log, run, wait_until  # noqa: E402

KINDS = ["create", "content", "chmod", "rename", "delete", "tag", "mkdir"]


class Pair:
    """Mounts A and B of namespace `ns`, on endpoints `ea` and `eb`."""

    def __init__(self, work, bindir, ns, ea, eb, token):
        self.bindir, self.ns, self.token = bindir, ns, token
        self.a, self.b = os.path.join(work, "a"), os.path.join(work, "b")
        self.ends = {self.a: ea, self.b: eb}
        self.caches = {self.a: os.path.join(work, "cache-a"), self.b: os.path.join(work, "cache-b")}

    def env(self):
        return dict(os.environ, STOWFS_TOKEN=self.token)

    def mount(self):
        for m in (self.a, self.b):
            os.makedirs(m, exist_ok=True)
            run([os.path.join(self.bindir, "stowfs"), "mount", self.ns, m, "--endpoint", self.ends[m], "--cache-dir", self.caches[m],
                 "--create", "--attr-ttl", "60", "--log-level", "warning"], env=self.env())
            wait_until(lambda: is_mounted(m), 30, f"the mount at {m}")
        # The feeds connect at mount; give them a moment to stand at the head.
        time.sleep(1)

    def unmount(self):
        for m in (self.a, self.b):
            if is_mounted(m):
                r = run([os.path.join(self.bindir, "stowfs"), "unmount", m], check=False, env=self.env())
                if r.returncode != 0 and is_mounted(m):
                    run(["fusermount3", "-u", "-z", m], check=False)

    def sync(self, m):
        run([os.path.join(self.bindir, "stowfs"), "sync", m], env=self.env())


def poll(check, timeout=10.0):
    """Seconds until check() holds (polled every millisecond), or None after `timeout`."""
    start = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - start
        except OSError:
            pass
        if time.monotonic() - start > timeout:
            return None
        time.sleep(0.001)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def change(pair, kind, i):
    """Makes change `i` of `kind` through A (after B looked at the old state); returns B's check."""
    a, b = pair.a, pair.b
    name = f"{kind}-{i}"
    if kind == "create":
        os.listdir(os.path.join(b, "d"))
        with open(os.path.join(a, "d", name), "w") as f:
            f.write("x")
        return lambda: name in os.listdir(os.path.join(b, "d"))
    if kind == "content":
        path = os.path.join(a, "d", "content")
        with open(path, "w") as f:
            f.write(f"version {i}\n")
        want = f"version {i}\n".encode()
        return lambda: read(os.path.join(b, "d", "content")) == want
    if kind == "chmod":
        mode = 0o600 if i % 2 else 0o640
        os.stat(os.path.join(b, "d", "mode"))
        os.chmod(os.path.join(a, "d", "mode"), mode)
        return lambda: os.stat(os.path.join(b, "d", "mode")).st_mode & 0o777 == mode
    if kind == "rename":
        old, new = os.path.join(a, "d", f"r{i}"), os.path.join(a, "d", f"r{i + 1}")
        os.stat(os.path.join(b, "d", f"r{i}"))
        os.rename(old, new)
        return lambda: os.path.exists(os.path.join(b, "d", f"r{i + 1}")) and not os.path.exists(os.path.join(b, "d", f"r{i}"))
    if kind == "delete":
        target = os.path.join(b, "d", f"del{i}")
        os.stat(target)
        os.unlink(os.path.join(a, "d", f"del{i}"))
        return lambda: not os.path.exists(target)
    if kind == "tag":
        try:
            os.getxattr(os.path.join(b, "d", "tagged"), "user.tags")
        except OSError:
            pass  # no tags yet
        value = f"t{i}".encode()
        os.setxattr(os.path.join(a, "d", "tagged"), "user.tags", value)
        return lambda: os.getxattr(os.path.join(b, "d", "tagged"), "user.tags") == value
    if kind == "mkdir":
        os.listdir(os.path.join(b, "d"))
        os.mkdir(os.path.join(a, "d", name))
        return lambda: os.path.isdir(os.path.join(b, "d", name))
    raise ValueError(kind)


def prepare(pair, rounds):
    a = pair.a
    os.makedirs(os.path.join(a, "d"), exist_ok=True)
    for n in ("content", "mode", "tagged"):
        with open(os.path.join(a, "d", n), "w") as f:
            f.write("0\n")
    with open(os.path.join(a, "d", "r0"), "w") as f:
        f.write("r")
    for i in range(rounds):
        with open(os.path.join(a, "d", f"del{i}"), "w") as f:
            f.write("d")
    pair.sync(a)
    # B looks at all of it (its caches hold the old state from now on).
    wait_until(lambda: os.path.exists(os.path.join(pair.b, "d", f"del{rounds - 1}")), 30, "B seeing A's files")
    for n in os.listdir(os.path.join(pair.b, "d")):
        os.stat(os.path.join(pair.b, "d", n))
    read(os.path.join(pair.b, "d", "content"))


def lock_wakeups(pair, rounds):
    """A holds an exclusive flock, B waits; seconds from A's unlock returning to B getting it."""
    path_a, path_b = os.path.join(pair.a, "d", "lock"), os.path.join(pair.b, "d", "lock")
    with open(path_a, "w") as f:
        f.write("l")
    pair.sync(pair.a)
    wait_until(lambda: os.path.exists(path_b), 30, "B seeing the lock file")
    out = []
    for _ in range(rounds):
        fa = os.open(path_a, os.O_RDWR)
        fcntl.flock(fa, fcntl.LOCK_EX)
        got = {}

        def waiter():
            fb = os.open(path_b, os.O_RDWR)
            fcntl.flock(fb, fcntl.LOCK_EX)
            got["t"] = time.monotonic()
            fcntl.flock(fb, fcntl.LOCK_UN)
            os.close(fb)

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.2)  # B is waiting by now
        fcntl.flock(fa, fcntl.LOCK_UN)
        released = time.monotonic()
        t.join(30)
        os.close(fa)
        if "t" in got:
            out.append(got["t"] - released)
    return out


def measure(pair, rounds, lock_rounds):
    if rounds == 0:
        os.makedirs(os.path.join(pair.a, "d"), exist_ok=True)
        return {"lock wake-up": lock_wakeups(pair, lock_rounds)}, {"lock wake-up": 0}
    prepare(pair, rounds)
    results = {k: [] for k in KINDS}
    missed = {k: 0 for k in KINDS}
    for i in range(rounds):
        for kind in KINDS:
            check = change(pair, kind, i)
            pair.sync(pair.a)
            took = poll(check)
            if took is None:
                missed[kind] += 1
            else:
                results[kind].append(took)
    results["lock wake-up"] = lock_wakeups(pair, lock_rounds)
    return results, missed


def summary(values):
    if not values:
        return None
    v = sorted(values)
    return {"n": len(v), "median": statistics.median(v), "p99": v[min(len(v) - 1, int(round(0.99 * (len(v) - 1))))], "max": v[-1]}


def table(all_results):
    lines = ["| set-up | change | n | median | p99 | max | not seen in 10 s |", "|---|---|---|---|---|---|---|"]
    for setup, (results, missed) in all_results.items():
        for kind, values in results.items():
            s = summary(values)
            if s is None:
                lines.append(f"| {setup} | {kind} | 0 | — | — | — | {missed.get(kind, 0)} |")
                continue
            ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
            lines.append(f"| {setup} | {kind} | {s['n']} | {ms(s['median'])} | {ms(s['p99'])} | {ms(s['max'])} | {missed.get(kind, 0)} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(REPO, ".build/release"), help="where stowd and stowfs are (default .build/release)")
    p.add_argument("--rounds", type=int, default=30, help="changes of each kind (default 30: 210 in all; 0: only the lock wake-ups)")
    p.add_argument("--lock-rounds", type=int, default=50)
    p.add_argument("--cluster", action="store_true", help="also on a cluster, A and B on two replicas")
    p.add_argument("--smoke", action="store_true", help="3 rounds, 5 lock rounds: checks that the benchmark works")
    p.add_argument("--out", default=os.path.join(REPO, "bench/results"))
    args = p.parse_args()
    if args.smoke:
        args.rounds, args.lock_rounds = 3, 5
    if os.geteuid() != 0:
        sys.exit("make bench-coherence mounts FUSE filesystems: run it as root")
    bindir = os.path.abspath(args.bin)
    work = tempfile.mkdtemp(prefix="stow-coherence-")
    # PostgreSQL runs as the postgres user under it (the cluster): it must be able to pass through.
    os.chmod(work, 0o711)
    all_results = {}
    token = "bench-coherence-token-0001"
    stowd = None
    cluster = None
    try:
        # Embedded: one stowd on loopback.
        data = os.path.join(work, "stowd")
        os.makedirs(data)
        port = free_port()
        stowd = subprocess.Popen([os.path.join(bindir, "stowd"), "--data-dir", data, "--port", str(port), "--log-level", "warning"],
                                 env=dict(os.environ, STOWD_TOKEN=token), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        endpoint = f"http://127.0.0.1:{port}"
        wait_until(lambda: os.path.exists(os.path.join(data, "stowd.url")), 30, "stowd")
        pair = Pair(os.path.join(work, "embedded"), bindir, "coherence", endpoint, endpoint, token)
        try:
            pair.mount()
            log("embedded: measuring …")
            all_results["embedded"] = measure(pair, args.rounds, args.lock_rounds)
        finally:
            pair.unmount()
        if args.cluster:
            cluster = Cluster(work, bindir, replicas=2)
            cluster.start()
            state = dict(line.rstrip("\n").split("=", 1) for line in open(os.path.join(cluster.dir, "state")) if "=" in line)
            ea = f"http://127.0.0.1:{state['replica_1_port'].strip(chr(39))}"
            eb = f"http://127.0.0.1:{state['replica_2_port'].strip(chr(39))}"
            pair = Pair(os.path.join(work, "cluster"), bindir, "coherence", ea, eb, cluster.token)
            try:
                pair.mount()
                log("cluster: measuring …")
                all_results["cluster (A and B on two replicas)"] = measure(pair, args.rounds, args.lock_rounds)
            finally:
                pair.unmount()
    finally:
        if cluster:
            cluster.stop()
        if stowd:
            stowd.terminate()
            try:
                stowd.wait(20)
            except subprocess.TimeoutExpired:
                stowd.kill()
                stowd.wait()
        shutil.rmtree(work, ignore_errors=True)
    text = table(all_results)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    name = "coherence-smoke" if args.smoke else "coherence"
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write(f"# make bench-coherence ({time.strftime('%Y-%m-%d %H:%M')}, {run(['git', '-C', REPO, 'describe', '--always', '--dirty'], check=False).stdout.strip()})\n\n{text}\n")
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump({k: {"values": r, "missed": m} for k, (r, m) in all_results.items()}, f, indent=1)
    bad = [k for _, (r, m) in all_results.items() for k, n in m.items() if n]
    if bad:
        sys.exit(f"changes never seen in B: {bad}")


if __name__ == "__main__":
    main()
