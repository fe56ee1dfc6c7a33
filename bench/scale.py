#!/usr/bin/env python3
"""make bench-scale: how StowFS's costs grow with the number and the size of files (issue 17).

Parts (each beside a baseline measured in the same run):

  folder    one folder of N files, for each N in --sizes (default 1,000, 10,000, 100,000): create
            N files of 1 KiB until durable; `ls -f` and `ls -l` warm; `ls -l` and `ls -f` cold
            (remounted, caches emptied, page cache dropped); `find -size` (a stat of each file);
            `rm -rf` until durable. Baseline: the FUSE passthrough up to --passthrough-max files
            (passthrough_ll keeps a descriptor per file, and this machine allows 20,000), local
            disk beyond. Printed per size, with the cost per file, so the curve shows whether it
            grows linearly.
  big       one file of --big-size (default 10 GiB) written with cat until durable, then read
            back cold; peak RSS of stowfs and stowd and the largest the mount's cache folder got,
            sampled every 0.5 s. Baseline: the passthrough.
  writers   --writers processes (default 4) at once on one mount: each copies a 256 MiB file,
            then each copies 250 files of 4 KiB; until durable. Baseline: the passthrough.
  million   with --million: a namespace of 1,000,000 empty files in 1,000 folders (made by
            `stow-bench search`, kept in --million-dir and used again), mounted cold: `ls -l` of
            20 folders of 1,000 files, `stat` of 2,000 files in random folders; stowd's RSS and
            database size. No baseline: rates.

Needs root. Writes bench/results/scale.md and scale.json.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsbench import REPO, Local, Passthrough, StowFS, is_mounted, log, peak_rss_mib, run, timed, wait_until  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20


def sh(cmd):
    """Runs a shell command; returns its stdout (raises if it fails)."""
    return subprocess.run(["bash", "-c", cmd], check=True, capture_output=True, text=True).stdout


def count_lines(cmd):
    return int(sh(cmd + " | wc -l").strip())


def dir_bytes(path):
    total = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            try:
                total += os.lstat(os.path.join(root, n)).st_blocks * 512
            except OSError:
                pass
    return total


class Sampler:
    """Samples the RSS of some processes and the size of a folder every 0.5 s; keeps the largest."""

    def __init__(self, pids, folder=None):
        self.pids, self.folder = [p for p in pids if p], folder
        self.rss = {p: 0 for p in self.pids}
        self.folder_max = 0
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while True:
            self.sample()
            if self.stop_flag.wait(0.5):
                return

    def sample(self):
        for p in self.pids:
            try:
                with open(f"/proc/{p}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            self.rss[p] = max(self.rss[p], int(line.split()[1]) * 1024)
            except OSError:
                pass
        if self.folder:
            self.folder_max = max(self.folder_max, dir_bytes(self.folder))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        self.thread.join()
        self.sample()


def server_pid(system):
    return system.server.pid if getattr(system, "server", None) else None


# ---------------------------------------------------------------------------------------------
# folder


def folder_run(system, n, payload):
    """The steps of one folder of n files on `system`; returns ({step: seconds}, the peak RSS in MiB of each of
    its three mounts: the creates and warm listings, the cold `ls -l`, the cold `ls -f`, `find` and `rm -rf`)."""
    d = os.path.join(system.path, f"folder-{n}")
    out = {}
    peaks = []

    def cold():
        # Each mount is a new process: its peak is taken before it goes.
        peaks.append(peak_rss_mib(system.pid) or 0)
        system.cold()

    def create():
        os.mkdir(d)
        for i in range(n):
            fd = os.open(os.path.join(d, f"IMG_{i:06d}.jpg"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, payload)
            os.close(fd)

    out["create"] = timed(create)
    out["create until durable"] = out["create"] + timed(lambda: system.durable(None, None))
    expect = n + 2  # with . and ..

    def ls(flags):
        got = count_lines(f"ls {flags} {d}")
        want = expect if "f" in flags else n + 1  # ls -l prints a "total" line
        if got != want:
            raise RuntimeError(f"ls {flags} in {system.name}: {got} lines, expected {want}")

    out["ls -f, warm"] = timed(lambda: ls("-f"))
    out["ls -l, warm"] = timed(lambda: ls("-l"))
    cold()
    out["ls -l, cold"] = timed(lambda: ls("-l"))
    cold()
    out["ls -f, cold"] = timed(lambda: ls("-f"))

    def find():
        got = count_lines(f"find {d} -type f -size -2k")
        if got != n:
            raise RuntimeError(f"find in {system.name}: {got}, expected {n}")

    out["find -size"] = timed(find)
    out["rm -rf until durable"] = timed(lambda: (shutil.rmtree(d), system.durable(None, None)))
    peaks.append(peak_rss_mib(system.pid) or 0)
    return out, peaks


FOLDER_STEPS = ["create until durable", "create", "ls -f, warm", "ls -l, warm", "ls -l, cold", "ls -f, cold", "find -size", "rm -rf until durable"]


def folder_part(systems, sizes, passthrough_max, runs):
    payload = bytes(random.getrandbits(8) for _ in range(1024))
    results = {}  # (system key, n) -> [ {step: s} ]
    rss = {}
    for n in sizes:
        for s in systems:
            if s.key == "passthrough" and n > passthrough_max:
                continue
            for r in range(runs):
                log(f"folder of {n}: {s.name}, run {r + 1}/{runs} …")
                s.start()
                try:
                    t0 = time.time()
                    steps, peaks = folder_run(s, n, payload)
                    results.setdefault((s.key, n), []).append(steps)
                    # The largest over the runs, with its run's peak by mount.
                    if max(peaks) >= rss.get((s.key, n), (0,))[0]:
                        rss[(s.key, n)] = (max(peaks), peak_rss_mib(server_pid(s)), peaks)
                    log(f"  {time.time() - t0:.0f} s")
                except Exception:
                    if hasattr(s, "log_tail"):
                        log(f"{s.name} failed; the mount's last warnings:\n{s.log_tail()}")
                    raise
                finally:
                    s.stop()
    return results, rss


def folder_table(systems, sizes, results, rss):
    names = {s.key: s.name for s in systems}
    keys = [s.key for s in systems]
    lines = ["| step | files | " + " | ".join(names[k] for k in keys) + " | StowFS ÷ baseline | StowFS µs per file |",
             "|---|---|" + "---|" * len(keys) + "---|---|"]
    med = {}
    for (k, n), runs in results.items():
        for step in FOLDER_STEPS:
            vals = [r[step] for r in runs]
            med[(k, n, step)] = (statistics.median(vals), min(vals), max(vals))
    for step in FOLDER_STEPS:
        for n in sizes:
            cells = []
            for k in keys:
                m = med.get((k, n, step))
                cells.append("—" if m is None else (f"{m[0]:.3f} s" if m[1] == m[2] else f"{m[0]:.3f} s ({m[1]:.3f}–{m[2]:.3f})"))
            base_key = "passthrough" if (("passthrough", n, step) in med) else "local"
            st, base = med.get(("stowfs", n, step)), med.get((base_key, n, step))
            ratio = f"{st[0] / base[0]:.2f}× {'passthrough' if base_key == 'passthrough' else 'local disk'}" if st and base and base[0] > 0 else "—"
            per = f"{st[0] / n * 1e6:.0f}" if st else "—"
            lines.append(f"| {step} | {n:,} | " + " | ".join(cells) + f" | {ratio} | {per} |")
    # Growth: the cost per file at the largest size against the smallest.
    lines += ["", "Growth of StowFS's cost per file, largest size ÷ smallest (1.0 = linear):", ""]
    lo, hi = min(sizes), max(sizes)
    for step in FOLDER_STEPS:
        a, b = med.get(("stowfs", lo, step)), med.get(("stowfs", hi, step))
        if a and b and a[0] > 0:
            lines.append(f"- {step}: {(b[0] / hi) / (a[0] / lo):.2f} ({lo:,} → {hi:,} files)")
    def by_mount(peaks):
        return " by mount " + " / ".join(f"{p:.0f}" for p in peaks) if len(peaks) > 1 and max(peaks) > 0 else ""

    lines += ["", "Peak RSS in the folder runs (MiB; by mount: the creates and warm listings / cold `ls -l` / cold `ls -f`, `find`, "
              "`rm -rf`): " + "; ".join(
                  f"{names[k]} {n:,}: {v[0]:.0f}" + (f" ({by_mount(v[2]).strip()}; stowd {v[1]:.0f})" if v[1] else (f" ({by_mount(v[2]).strip()})" if by_mount(v[2]) else ""))
                  for (k, n), v in sorted(rss.items()) if v[0])]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# big file


def big_part(systems, src, size):
    reps = max(1, size // GIB)
    chunk = os.path.getsize(src)
    expected = reps * chunk
    out = {}
    for s in systems:
        log(f"one file of {expected / GIB:.1f} GiB: {s.name} …")
        s.start()
        try:
            target = os.path.join(s.path, "big")
            writer_pid, server = s.pid, server_pid(s)
            with Sampler([writer_pid, server], getattr(s, "cache", None)) as w:
                t_write = timed(lambda: sh(f"for i in $(seq {reps}); do cat {src}; done > {target}"))
                t_durable = timed(lambda: s.durable(None, None))
            s.cold()
            with Sampler([s.pid, server], getattr(s, "cache", None)) as r:
                t_read = timed(lambda: sh(f"cat {target} > /dev/null"))
            if os.path.getsize(target) != expected:
                raise RuntimeError(f"{s.name}: the file has {os.path.getsize(target)} bytes, expected {expected}")
            out[s.key] = {
                "write": t_write, "write until durable": t_write + t_durable, "read, cold": t_read,
                "rss write": w.rss.get(writer_pid, 0), "rss read": r.rss.get(s.pid, 0),
                "stowd rss": max(w.rss.get(server, 0), r.rss.get(server, 0)) if server else 0,
                "cache max": max(w.folder_max, r.folder_max) if getattr(s, "cache", None) else 0,
            }
        finally:
            s.stop()
    return out, expected


def big_table(systems, out, expected):
    keys = [s.key for s in systems if s.key in out]
    names = {s.key: s.name for s in systems}
    lines = [f"One file of {expected / GIB:.1f} GiB:" if expected >= GIB else f"One file of {expected >> 20} MiB:", "", "| | " + " | ".join(names[k] for k in keys) + " | StowFS ÷ passthrough |",
             "|---|" + "---|" * len(keys) + "---|"]
    for step in ["write", "write until durable", "read, cold"]:
        row = f"| {step} | " + " | ".join(f"{out[k][step]:.2f} s" for k in keys)
        ratio = out["stowfs"][step] / out["passthrough"][step] if "stowfs" in out and "passthrough" in out else None
        lines.append(row + (f" | {ratio:.2f}× |" if ratio else " | — |"))
    if "stowfs" in out:
        o = out["stowfs"]
        lines += ["", f"StowFS: peak RSS of stowfs {o['rss write'] / MIB:.0f} MiB writing, {o['rss read'] / MIB:.0f} MiB reading; "
                  f"stowd {o['stowd rss'] / MIB:.0f} MiB; the cache folder at most {o['cache max'] / GIB:.2f} GiB."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# parallel writers


def writers_part(systems, src_big, src_small, writers):
    out = {}
    for s in systems:
        log(f"{writers} writers at once: {s.name} …")
        s.start()
        try:
            for i in range(writers):
                os.mkdir(os.path.join(s.path, f"w{i}"))
            big = " ".join(f"cp {src_big} {s.path}/w{i}/big &" for i in range(writers)) + " wait"
            small = " ".join(f"cp -r {src_small} {s.path}/w{i}/small &" for i in range(writers)) + " wait"
            out[s.key] = {
                "large files until durable": timed(lambda: (sh(big), s.durable(None, None))),
                "small files until durable": timed(lambda: (sh(small), s.durable(None, None))),
            }
            for i in range(writers):
                if os.path.getsize(f"{s.path}/w{i}/big") != os.path.getsize(src_big) or len(os.listdir(f"{s.path}/w{i}/small")) != len(os.listdir(src_small)):
                    raise RuntimeError(f"{s.name}: writer {i}'s copy is not whole")
        finally:
            s.stop()
    return out


def writers_table(systems, out, writers, big_bytes, small_count):
    keys = [s.key for s in systems if s.key in out]
    names = {s.key: s.name for s in systems}
    lines = [f"{writers} writers at once on one mount (each: one file of {big_bytes >> 20} MiB, then {small_count} files of 4 KiB):", "",
             "| | " + " | ".join(names[k] for k in keys) + " | StowFS ÷ passthrough |", "|---|" + "---|" * len(keys) + "---|"]
    for step in ["large files until durable", "small files until durable"]:
        ratio = out["stowfs"][step] / out["passthrough"][step] if "stowfs" in out and "passthrough" in out else None
        lines.append(f"| {step} | " + " | ".join(f"{out[k][step]:.2f} s" for k in keys) + (f" | {ratio:.2f}× |" if ratio else " | — |"))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# a million files


def million_part(bindir, folder, work):
    os.makedirs(folder, exist_ok=True)
    log("a namespace of 1,000,000 files in 1,000 folders (stow-bench search; made once, kept in --million-dir) …")
    run([os.path.join(bindir, "stow-bench"), "search", "--files", "1000000", "--folders", "1000", "--dir", folder, "--queries", "10",
         "--stowd", os.path.join(bindir, "stowd")])
    s = MillionStowFS(work, bindir, os.path.join(folder, "data"))
    rng = random.Random(7)
    out = {}
    # StowFS.start() empties its work folder; the data folder is elsewhere and kept.
    s.start()
    try:
        s.cold()
        folders = rng.sample(range(1000), 20)
        times = []
        for f in folders:
            t = timed(lambda: count_lines(f"ls -l {s.path}/d{f}"))
            times.append(t)
        out["ls -l of a folder of 1,000, cold (median of 20)"] = statistics.median(times)
        s.cold()
        paths = [f"{s.path}/d{i % 1000}/f{i}.{['jpg', 'png', 'txt', 'pdf'][i % 4]}" for i in rng.sample(range(1_000_000), 2000)]
        each = []

        def stats():
            for p in paths:
                t = time.perf_counter()
                os.stat(p)
                each.append(time.perf_counter() - t)

        out["stat of 2,000 files in random folders, cold"] = timed(stats)
        each.sort()
        out["one stat of those: median (ms)"] = statistics.median(each) * 1000
        out["one stat of those: 90th percentile (ms)"] = each[int(len(each) * 0.9)] * 1000
        out["stowd peak RSS (MiB)"] = peak_rss_mib(server_pid(s))
        out["stowfs peak RSS (MiB)"] = peak_rss_mib(s.pid)
        out["metadata database (MiB)"] = sum(os.path.getsize(os.path.join(s.data, n)) for n in os.listdir(s.data) if n.startswith("stowd.sqlite")) / MIB
    finally:
        s.stop()
    return out


def million_table(out):
    lines = ["A namespace of 1,000,000 files in 1,000 folders (SQLite), mounted cold:", "", "| | |", "|---|---|"]
    for k, v in out.items():
        if k.startswith("ls"):
            lines.append(f"| {k} | {v:.3f} s ({1000 / v:,.0f} entries/s) |")
        elif k.startswith("stat"):
            lines.append(f"| {k} | {v:.2f} s ({2000 / v:,.0f} stats/s) |")
        elif k.startswith("one stat"):
            lines.append(f"| {k} | {v:.1f} |")
        else:
            lines.append(f"| {k} | {v:.0f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


class MillionStowFS(StowFS):
    """A mount of `stow-bench search`'s namespace, on a stowd whose data folder is kept elsewhere."""

    key = "stowfs-million"

    def __init__(self, work, bindir, data):
        super().__init__(work, bindir)
        self.data = data

    def mount(self, create=False):
        self.proc = subprocess.Popen(
            [f"{self.bindir}/stowfs", "mount", "bench-search", self.mnt, "--endpoint", self.endpoint, "--cache-dir", self.cache,
             "--foreground", "--log-level", "warning"], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: is_mounted(self.mnt), 60, "stowfs to mount")
        self.pid = self.proc.pid


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="folder,big,writers", help="of folder, big, writers, million (default: folder,big,writers)")
    ap.add_argument("--sizes", default="1000,10000,100000", help="folder sizes (default 1000,10000,100000)")
    ap.add_argument("--runs", type=int, default=1, help="runs of each folder size (default 1)")
    ap.add_argument("--passthrough-max", type=int, default=19000, help="largest folder the passthrough is run on (default 19000)")
    ap.add_argument("--big-size", default="10G", help="the big file, in whole GiB (default 10G)")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--million", action="store_true", help="also the million-file namespace (about 12 minutes to make, once)")
    ap.add_argument("--million-dir", default="/var/tmp/stow-scale-1m")
    ap.add_argument("--work", default="/var/tmp/stowfs-scale")
    ap.add_argument("--bin", default=os.path.join(REPO, ".build/release"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench/results"))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks that the benchmark works")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/scale.py: run as root (it mounts, and drops the page cache between cold runs)")
    parts = args.parts.split(",") + (["million"] if args.million and "million" not in args.parts else [])
    sizes = [int(x) for x in args.sizes.split(",")]
    big_size = int(args.big_size.rstrip("Gg")) * GIB
    big_chunk = GIB
    if args.smoke:
        sizes, big_size, big_chunk = [100, 300], 64 * MIB, 32 * MIB
    bindir = os.path.abspath(args.bin)
    os.makedirs(args.work, exist_ok=True)
    passthrough_bin = os.path.join(args.work, "passthrough_ll")
    if not os.path.exists(passthrough_bin):
        log("building passthrough_ll from libfuse3-dev's examples …")
        flags = run(["pkg-config", "--cflags", "--libs", "fuse3"]).stdout.split()
        run(["gcc", "-O2", "-o", passthrough_bin, "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c"] + flags)
    src = os.path.join(args.work, "src")
    os.makedirs(src, exist_ok=True)
    src_big = os.path.join(src, f"random-{big_chunk >> 20}M")
    if not os.path.exists(src_big):
        log(f"making {big_chunk >> 20} MiB of random bytes …")
        with open(src_big + ".part", "wb") as f:
            for _ in range(big_chunk // MIB):
                f.write(os.urandom(MIB))
        os.rename(src_big + ".part", src_big)
    src_256 = os.path.join(src, "random-256M" if not args.smoke else "random-8M")
    if not os.path.exists(src_256):
        with open(src_256, "wb") as f:
            f.write(os.urandom(256 * MIB if not args.smoke else 8 * MIB))
    src_small = os.path.join(src, "small-250")
    if not os.path.exists(src_small):
        os.makedirs(src_small + ".part")
        for i in range(250):
            with open(os.path.join(src_small + ".part", f"f{i:03d}"), "wb") as f:
                f.write(os.urandom(4096))
        os.rename(src_small + ".part", src_small)

    systems = [Local(args.work), Passthrough(args.work, passthrough_bin), StowFS(args.work, bindir)]
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    version = run(["git", "-C", REPO, "describe", "--always", "--dirty"], check=False).stdout.strip()
    sections = [f"# make bench-scale — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
                f"{cpu}, {os.cpu_count()} cores; StowFS {version} (embedded stowd, SQLite); {args.runs} run(s) per folder size.", ""]
    data = {}
    started = time.time()
    if "folder" in parts:
        results, rss = folder_part(systems, sizes, args.passthrough_max, args.runs)
        sections += [folder_table(systems, sizes, results, rss), ""]
        data["folder"] = {f"{k} {n}": v for (k, n), v in results.items()}
    if "big" in parts:
        out, expected = big_part([s for s in systems if s.key != "local"], src_big, big_size)
        sections += [big_table(systems, out, expected), ""]
        data["big"] = out
    if "writers" in parts:
        out = writers_part([s for s in systems if s.key != "local"], src_256, src_small, args.writers)
        sections += [writers_table(systems, out, args.writers, os.path.getsize(src_256), 250), ""]
        data["writers"] = out
    if "million" in parts and not args.smoke:
        out = million_part(bindir, args.million_dir, args.work)
        sections += [million_table(out), ""]
        data["million"] = out
    sections.append(f"Took {time.time() - started:.0f} s.")
    text = "\n".join(sections) + "\n"
    print(text)
    os.makedirs(args.out, exist_ok=True)
    stem = "scale-smoke" if args.smoke else "scale"
    with open(os.path.join(args.out, stem + ".md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, stem + ".json"), "w") as f:
        json.dump(data, f, indent=2, default=str)
    log(f"wrote {args.out}/{stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
