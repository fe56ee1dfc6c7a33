#!/usr/bin/env python3
"""make bench: StowFS side by side with the limits and a peer, same machine, same run.

Systems: local disk (a plain folder), FUSE passthrough (libfuse's passthrough_ll example, built
from the sources libfuse3-dev ships), rclone mount of an rclone serve webdav on loopback
(--vfs-cache-mode writes), and StowFS against a stowd on loopback.

Workloads (W1..W7 of issue 5), each run from an empty system; medians over the runs. "Durable"
means the remote holds every byte: `stowfs sync` returned (StowFS), the served folder has every
file and byte (rclone), `sync -f` returned (local disk, passthrough).

Writes a Markdown table and JSON to bench/results/ (or --out). Needs root (mounts, drop_caches).
"""

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def wait_until(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def tree_stats(path):
    files, size = 0, 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            if os.path.isfile(p) and not os.path.islink(p):
                files += 1
                size += os.path.getsize(p)
    return files, size


def reset_peak_rss(pid):
    if pid:
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5\n")
        except OSError:
            pass


def peak_rss_mib(pid):
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class System:
    """A place to write to: mount() makes `self.path` usable, durable() waits for the remote."""

    name = ""
    pid = None
    server = None  # a serving process beside the mount, stopped with it
    cache = None  # the mount's cache folder, emptied for cold runs

    def __init__(self, work):
        self.work = os.path.join(work, self.key)
        self.mnt = os.path.join(self.work, "mnt")

    @property
    def path(self):
        return self.mnt

    def start(self):
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.mnt)
        self.mount()

    def stop(self):
        self.unmount()
        if self.server:
            self.server.terminate()
            self.server.wait(timeout=30)
            self.server = None
        shutil.rmtree(self.work, ignore_errors=True)

    def mount(self):
        pass

    def unmount(self):
        pass

    def durable(self, expected_dir, source_dir):
        raise NotImplementedError

    def cold(self):
        """Remount with empty caches and an empty page cache."""
        self.unmount()
        self.clear_cache()
        drop_caches()
        self.mount()

    def clear_cache(self):
        if self.cache:
            shutil.rmtree(self.cache, ignore_errors=True)

    def version(self):
        return ""


class Local(System):
    key = "local"
    name = "local disk"

    def durable(self, expected_dir, source_dir):
        run(["sync", "-f", self.mnt])


class Passthrough(System):
    key = "passthrough"
    name = "FUSE passthrough"

    def __init__(self, work, binary):
        super().__init__(work)
        self.binary = binary
        self.backing = os.path.join(self.work, "backing")
        self.proc = None

    def start(self):
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.mnt)
        os.makedirs(self.backing)
        self.mount()

    def mount(self):
        self.proc = subprocess.Popen([self.binary, "-f", "-o", f"source={self.backing}", self.mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: is_mounted(self.mnt), 20, "passthrough_ll to mount")
        self.pid = self.proc.pid

    def unmount(self):
        if self.proc:
            run(["fusermount3", "-u", self.mnt], check=False)
            self.proc.wait(timeout=60)
            self.proc = None

    def durable(self, expected_dir, source_dir):
        run(["sync", "-f", self.backing])

    def version(self):
        return "libfuse " + run(["pkg-config", "--modversion", "fuse3"]).stdout.strip()


class Rclone(System):
    key = "rclone"
    name = "rclone mount"

    def __init__(self, work):
        super().__init__(work)
        self.served = os.path.join(self.work, "served")
        self.cache = os.path.join(self.work, "cache")
        self.proc = None

    def start(self):
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.mnt)
        os.makedirs(self.served)
        self.port = free_port()
        self.server = subprocess.Popen(
            ["rclone", "serve", "webdav", self.served, "--addr", f"127.0.0.1:{self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return True
            except OSError:
                return False

        wait_until(up, 20, "rclone serve webdav")
        self.mount()

    def mount(self):
        self.proc = subprocess.Popen(
            ["rclone", "mount", ":webdav:", self.mnt, "--webdav-url", f"http://127.0.0.1:{self.port}", "--vfs-cache-mode", "writes",
             "--cache-dir", self.cache], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: is_mounted(self.mnt), 30, "rclone mount")
        self.pid = self.proc.pid

    def unmount(self):
        if self.proc:
            run(["fusermount3", "-u", self.mnt], check=False)
            try:
                self.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None

    def durable(self, expected_dir, source_dir):
        target = os.path.join(self.served, expected_dir)
        if os.path.isfile(source_dir):
            want = os.path.getsize(source_dir)
            done = lambda: os.path.isfile(target) and os.path.getsize(target) == want
        else:
            want = tree_stats(source_dir)
            done = lambda: tree_stats(target) == want
        wait_until(done, 3600, f"rclone to upload {expected_dir}")

    def version(self):
        return run(["rclone", "version"]).stdout.splitlines()[0]


class StowFS(System):
    key = "stowfs"
    name = "StowFS"

    def __init__(self, work, bindir):
        super().__init__(work)
        self.bindir = bindir
        self.data = os.path.join(self.work, "data")
        self.cache = os.path.join(self.work, "cache")
        self.proc = None
        self.env = dict(os.environ, STOWFS_TOKEN="bench-token", STOWD_TOKEN="bench-token")

    def start(self):
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.mnt)
        self.server = subprocess.Popen(
            [f"{self.bindir}/stowd", "--data-dir", self.data, "--port", "0", "--log-level", "warning"], stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=self.env, text=True)
        self.endpoint = self.server.stdout.readline().strip()
        if not self.endpoint.startswith("http"):
            raise RuntimeError("stowd did not start")
        self.mount(create=True)

    def mount(self, create=False):
        self.proc = subprocess.Popen(
            [f"{self.bindir}/stowfs", "mount", "bench", self.mnt, "--endpoint", self.endpoint, "--cache-dir", self.cache, "--foreground",
             "--log-level", "warning"] + (["--create"] if create else []), env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: is_mounted(self.mnt), 60, "stowfs to mount")
        self.pid = self.proc.pid

    def unmount(self):
        if self.proc:
            run([f"{self.bindir}/stowfs", "unmount", self.mnt], check=False, env=self.env)
            self.proc.wait(timeout=600)
            self.proc = None

    def durable(self, expected_dir, source_dir):
        run([f"{self.bindir}/stowfs", "sync", self.mnt], env=self.env)

    def version(self):
        return "stowfs " + run(["git", "-C", REPO, "describe", "--always", "--dirty"], check=False).stdout.strip()


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def make_sources(src, big_size, small_count, tree_files):
    """The 1 GiB random file, 1000 files of 4 KiB, and a tar of ~2000 headers from /usr/include."""
    os.makedirs(src, exist_ok=True)
    big = os.path.join(src, "big.bin")
    if not os.path.exists(big) or os.path.getsize(big) != big_size:
        log(f"writing a {big_size >> 20} MiB random file …")
        with open(big, "wb") as f:
            left = big_size
            while left:
                n = min(left, 8 << 20)
                f.write(os.urandom(n))
                left -= n
    small = os.path.join(src, "small")
    if not os.path.isdir(small) or len(os.listdir(small)) != small_count:
        shutil.rmtree(small, ignore_errors=True)
        os.makedirs(small)
        for i in range(small_count):
            with open(os.path.join(small, f"f{i:05d}.bin"), "wb") as f:
                f.write(os.urandom(4096))
    tar = os.path.join(src, f"tree-{tree_files}.tar")
    tree = os.path.join(src, "tree")
    if not os.path.exists(tar):
        picked = []
        for root, dirs, names in sorted(os.walk("/usr/include")):
            dirs.sort()
            for n in sorted(names):
                p = os.path.join(root, n)
                if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) < 24_000:
                    picked.append(p)
            if len(picked) >= tree_files:
                break
        with tarfile.open(tar, "w") as t:
            for p in picked[:tree_files]:
                t.add(p, arcname=os.path.relpath(p, "/usr"))
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    with tarfile.open(tar) as t:
        t.extractall(tree)
    return big, small, tar, tree


def fio_iops(path, seconds):
    out = run(["fio", "--name=w7", f"--filename={path}", "--rw=randread", "--bs=4k", "--ioengine=psync", "--time_based", f"--runtime={seconds}",
               "--readonly", "--invalidate=1", "--output-format=json"]).stdout
    data = json.loads(out[out.index("{"):])
    return data["jobs"][0]["read"]["iops"]


def one_run(system, src, args):
    big, small, tar, tree = src
    r = {}
    system.start()
    try:
        p = system.path
        if not args.small_only:
            reset_peak_rss(system.pid)
            r["W1"] = timed(lambda: (run(["cp", big, f"{p}/big.bin"]), system.durable("big.bin", big)))
            r["rss_W1"] = peak_rss_mib(system.pid)
        r["W4"] = timed(lambda: (run(["cp", "-r", small, f"{p}/small"]), system.durable("small", small)))
        os.makedirs(f"{p}/tree")
        r["W6"] = timed(lambda: (run(["tar", "xf", tar, "-C", f"{p}/tree"]), system.durable("tree", tree)))
        system.cold()
        r["W5 cold"] = timed(lambda: run(["ls", "-lR", f"{p}/small"]))
        r["W5 warm"] = timed(lambda: run(["ls", "-lR", f"{p}/small"]))
        if args.small_only:
            return r
        system.cold()
        r["W2"] = timed(lambda: run(["sh", "-c", f"cat {p}/big.bin > /dev/null"]))
        r["W3"] = timed(lambda: run(["sh", "-c", f"cat {p}/big.bin > /dev/null"]))
        reset_peak_rss(system.pid)
        r["W7"] = fio_iops(f"{p}/big.bin", args.fio_seconds)
        r["rss_W7"] = peak_rss_mib(system.pid)
        # What was written is what was read: the mount's copy matches the source.
        if run(["cmp", big, f"{p}/big.bin"], check=False).returncode != 0:
            raise RuntimeError(f"{system.name}: big.bin differs from the source")
    finally:
        system.stop()
    return r


WORKLOADS = [
    ("W1", "cp 1 file, until durable", "s", "≤ 1.25× passthrough"),
    ("W2", "cold cat after remount", "s", "≤ 1.5× passthrough"),
    ("W3", "warm re-read", "s", "≤ 0.5× passthrough"),
    ("W4", "cp -r small files, until durable", "s", "≤ 5× passthrough"),
    ("W5 cold", "ls -lR after remount", "s", "≤ 2.5× passthrough"),
    ("W5 warm", "ls -lR again", "s", ""),
    ("W6", "tar x source tree, until durable", "s", "≤ 3× passthrough"),
    ("W7", "fio 4 KiB random reads", "IOPS", "≥ 0.8× passthrough"),
    ("rss_W1", "peak RSS during W1", "MiB", "≤ 150 MiB"),
    ("rss_W7", "peak RSS during W7", "MiB", "≤ 150 MiB"),
]


def fmt(v, unit):
    if v is None:
        return "—"
    if unit == "s":
        return f"{v:.3f} s" if v < 10 else f"{v:.1f} s"
    if unit == "IOPS":
        return f"{v:,.0f}"
    return f"{v:.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", default="1G", help="size of the large file (W1, W2, W3, W7)")
    ap.add_argument("--small-files", type=int, default=1000)
    ap.add_argument("--tree-files", type=int, default=2000)
    ap.add_argument("--fio-seconds", type=int, default=20)
    ap.add_argument("--systems", default="local,passthrough,rclone,stowfs")
    ap.add_argument("--work", default="/var/tmp/stowfs-bench")
    ap.add_argument("--bin", default=os.path.join(REPO, ".build/release"), help="folder with stowd and stowfs")
    ap.add_argument("--out", default=os.path.join(REPO, "bench/results"))
    ap.add_argument("--smoke", action="store_true", help="a few MiB, one run: checks that the benchmark works")
    ap.add_argument("--small-only", action="store_true", help="only the small-file workloads (W4, W5, W6): a quicker check of a change to them")
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.size, args.small_files, args.tree_files, args.fio_seconds = 1, "8M", 50, 100, 2
    if os.geteuid() != 0:
        sys.exit("fsbench: run as root (it mounts, and drops the page cache between cold runs)")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    big_size = int(args.size[:-1]) * units[args.size[-1].upper()] if args.size[-1].upper() in units else int(args.size)

    os.makedirs(args.work, exist_ok=True)
    passthrough_bin = os.path.join(args.work, "passthrough_ll")
    example = "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c"
    if not os.path.exists(passthrough_bin):
        log("building passthrough_ll from libfuse3-dev's examples …")
        flags = run(["pkg-config", "--cflags", "--libs", "fuse3"]).stdout.split()
        run(["gcc", "-O2", "-o", passthrough_bin, example] + flags)
    available = {
        "local": lambda: Local(args.work),
        "passthrough": lambda: Passthrough(args.work, passthrough_bin),
        "rclone": lambda: Rclone(args.work),
        "stowfs": lambda: StowFS(args.work, args.bin),
    }
    systems = [available[k]() for k in args.systems.split(",")]
    src = make_sources(os.path.join(args.work, "src"), big_size, args.small_files, args.tree_files)
    tree_files, tree_bytes = tree_stats(src[3])

    results = {s.key: [] for s in systems}
    for i in range(args.runs):
        for s in systems:
            log(f"run {i + 1}/{args.runs}: {s.name} …")
            t = time.time()
            results[s.key].append(one_run(s, src, args))
            log(f"  {time.time() - t:.0f} s")

    medians = {k: {w: (statistics.median([r[w] for r in rs if r.get(w) is not None]) if any(r.get(w) is not None for r in rs) else None)
                   for w, *_ in WORKLOADS} for k, rs in results.items()}
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.machine())
    machine = f"{cpu}, {os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') >> 30} GiB, Linux {platform.release()}"
    versions = [s.version() for s in systems if s.version()] + [run(["fio", "--version"]).stdout.strip()]

    names = [s.name for s in systems]
    lines = [f"# StowFS benchmark — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"Machine: {machine}. Versions: {'; '.join(versions)}.",
             f"Medians of {args.runs} run(s). Large file {big_size >> 20} MiB; {args.small_files} files of 4 KiB; "
             f"tree of {tree_files} files, {tree_bytes / 1e6:.1f} MB; fio {args.fio_seconds} s.", "",
             "| workload | " + " | ".join(names) + (" | StowFS ÷ passthrough | target |" if "stowfs" in medians and "passthrough" in medians else " |"),
             "|---|" + "---|" * len(names) + ("---|---|" if "stowfs" in medians and "passthrough" in medians else "")]
    for w, what, unit, target in WORKLOADS:
        row = f"| {w} {what} ({unit}) | " + " | ".join(fmt(medians[s.key][w], unit) for s in systems) + " |"
        if "stowfs" in medians and "passthrough" in medians:
            a, b = medians["stowfs"][w], medians["passthrough"][w]
            ratio = f"{a / b:.2f}×" if a is not None and b and not w.startswith("rss") else ""
            row += f" {ratio} | {target} |"
        lines.append(row)
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(args.out, exist_ok=True)
    stem = "smoke" if args.smoke else ("small" if args.small_only else "latest")
    with open(os.path.join(args.out, f"{stem}.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, f"{stem}.json"), "w") as f:
        json.dump({"machine": machine, "versions": versions, "runs": args.runs, "size": big_size, "small_files": args.small_files,
                   "tree_files": tree_files, "tree_bytes": tree_bytes, "results": results, "medians": medians}, f, indent=2)
    log(f"wrote {args.out}/{stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
