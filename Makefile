# StowFS — one entry point.
#   make run    build release binaries, start a local stowd and mount the namespace `demo` at ./mnt (MNT=…)
#   make stop   store what is queued and unmount it
#   make run-cluster   PostgreSQL, S3, 3 stowd replicas and nginx in front, on this machine (scripts/cluster.sh up)
#   make stop-cluster  stop exactly what run-cluster started (scripts/cluster.sh down)
#   make test   install what is missing, build, run every test (Swift's — the mount tests in a process of their own: they block threads
#               on shell commands, which starved the in-process servers of the other suites; the server's and the hostile-input suite again
#               on PostgreSQL + S3; then the hostile-input suite and schemathesis against stowd; then the cluster drills of scripts/cluster-smoke.sh)
SHELL := /bin/bash
SWIFT ?= swift
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
# mount(8) looks for mount helpers in /sbin only.
SBINDIR ?= /sbin
UNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/stowfs
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
# What scripts/test-deb.sh packages (CI: the debug build that make test made).
DEB_BIN ?= .build/release
# Where the binaries to install are (install-files alone does not build).
BUILD_DIR ?= .build/release
MNT ?= $(CURDIR)/mnt

.PHONY: all deps build release test test-scaleout test-deb deb run stop run-cluster stop-cluster cluster-smoke install install-files bench bench-smoke bench-scale bench-scale-smoke bench-server bench-coherence bench-coherence-smoke clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

test: deps
	@scripts/timed.sh "swift build --build-tests" $(SWIFT) build --build-tests
	@scripts/install-deps.sh hostile
	@scripts/timed.sh "swift test (all but the mount tests)" $(SWIFT) test --skip-build --skip MountTests
	@scripts/timed.sh "swift test (the mount tests, in a process of their own)" $(SWIFT) test --skip-build --filter MountTests
	@scripts/timed.sh "server suite, hostile input and schemathesis on PostgreSQL + S3" env STOW_ST_MAX_EXAMPLES=50 scripts/test-scaleout.sh
	@scripts/timed.sh "hostile input and schemathesis" env STOW_ST_MAX_EXAMPLES=$${STOW_ST_MAX_EXAMPLES:-100} python3 -m pytest Tests/hostile -q
	@scripts/timed.sh "cluster drills: a replica killed, PostgreSQL away, S3 away, under a mount" env STOW_BIN_DIR="$(CURDIR)/.build/debug" scripts/cluster-smoke.sh

# The server's suites on the scale-out backend (PostgreSQL + S3, started and stopped here), after a
# build with --build-tests. TEST_ARGS="--filter StorageServerTests.PostgresTests" runs only those.
test-scaleout:
	@scripts/test-scaleout.sh $(TEST_ARGS)

run: release
	@scripts/run.sh "$(MNT)"

stop:
	@.build/release/stowfs unmount "$(MNT)"

# A cluster on this machine: PostgreSQL and an S3 server (SeaweedFS) on free loopback ports, stowd
# replicas sharing them, nginx in front; prints the endpoint, the token and the mount command.
# Uses .build/release (or STOW_BIN_DIR), built when missing. CLUSTER_ARGS="--replicas 5 --dir DIR".
run-cluster: deps
	@scripts/cluster.sh up $(CLUSTER_ARGS)

stop-cluster:
	@scripts/cluster.sh down $(CLUSTER_ARGS)

# Mount through the cluster, copy trees, kill a replica, stop PostgreSQL then S3 while writing, remount, diff, stop, check nothing is left.
cluster-smoke: deps
	@scripts/cluster-smoke.sh

# StowFS beside local disk, FUSE passthrough and rclone mount: W1-W7 of issue 5, three runs, medians.
# Writes bench/results/latest.md and .json. Needs root. RUNS=, SIZE= to change; BENCH_ARGS= for
# more (e.g. BENCH_ARGS="--systems passthrough,stowfs --small-only": W4–W6 only, into small.md).
bench: release
	@scripts/install-deps.sh bench
	python3 bench/fsbench.py --runs $${RUNS:-3} --size $${SIZE:-1G} $(BENCH_ARGS)

# One small run (a few MiB) with the debug build: keeps the benchmark working (CI runs it).
bench-smoke: build
	@scripts/install-deps.sh bench
	python3 bench/fsbench.py --smoke --bin .build/debug

# Several mounts (issue 16): how soon each kind of change stored through mount A shows in mount B,
# and the lock wake-up, on the embedded stowd and on a cluster (A and B on two replicas). Needs root.
# Writes bench/results/coherence.md and .json. BENCH_ARGS="--rounds 50" for more.
bench-coherence: release
	python3 bench/coherence.py --cluster $(BENCH_ARGS)

# A few changes of each kind with the debug build: keeps the coherence benchmark working (CI runs it).
bench-coherence-smoke: build
	python3 bench/coherence.py --smoke --bin .build/debug

# How costs grow (issue 17): a folder of 1,000 / 10,000 / 100,000 files, one 10 GiB file, 4 writers
# at once, beside the passthrough or local disk; BENCH_ARGS="--million" adds a namespace of
# 1,000,000 files. Needs root, about 40 minutes. Writes bench/results/scale.md and .json.
bench-scale: release
	@scripts/install-deps.sh bench
	python3 bench/scale.py $(BENCH_ARGS)

# Tiny sizes with the debug build: keeps the scale benchmark working (CI runs it).
bench-scale-smoke: build
	@scripts/install-deps.sh bench
	python3 bench/scale.py --smoke --bin .build/debug

# PUT/GET of a 1 GiB file and small-file completes through stowd, against plain copies on the same disk.
bench-server: release
	.build/release/stow-bench server --size $${SIZE:-1G} --runs $${RUNS:-3}

# stowd and stowfs, the mount helpers (mount -t stowfs, /etc/fstab, umount), the systemd units, man
# pages and shell completions; then the system user stowd.service runs as (systemd-sysusers).
install: release install-files
	@if [ -z "$(DESTDIR)" ] && command -v systemd-sysusers >/dev/null; then systemd-sysusers "$(SYSUSERSDIR)/stowd.conf"; fi

# The Debian package, dist/stowfs_<version>_amd64.deb: both programs, the Swift runtime bundled,
# units, helpers, man pages, completions (docs/packaging.md).
deb: release
	@scripts/install-deps.sh deb
	@scripts/make-deb.sh --bin .build/release --out dist

# Builds the package from DEB_BIN, runs lintian, installs it with dpkg -i, runs stowd.service and
# stowfs@.service under a real systemd (in a PID and mount namespace of their own), mounts with
# mount -t stowfs, removes and purges it; checks nothing is left. Needs root.
test-deb:
	@scripts/install-deps.sh deb
	@scripts/test-deb.sh --bin "$(DEB_BIN)"

install-files:
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(SBINDIR)" "$(DESTDIR)$(UNITDIR)" "$(DESTDIR)$(DOCDIR)"
	install -m 0755 $(BUILD_DIR)/stowd "$(DESTDIR)$(BINDIR)/stowd"
	install -m 0755 $(BUILD_DIR)/stowfs "$(DESTDIR)$(BINDIR)/stowfs"
	for f in mount.fuse.stowfs umount.fuse.stowfs; do \
		sed -e 's|@BINDIR@|$(BINDIR)|g' mount-helpers/$$f > "$(DESTDIR)$(SBINDIR)/$$f" && chmod 0755 "$(DESTDIR)$(SBINDIR)/$$f"; done
	ln -sf mount.fuse.stowfs "$(DESTDIR)$(SBINDIR)/mount.stowfs"
	install -d "$(DESTDIR)$(SYSUSERSDIR)"
	install -m 0644 mount-helpers/sysusers/stowd.conf "$(DESTDIR)$(SYSUSERSDIR)/stowd.conf"
	python3 scripts/gen-man.py --bin $(BUILD_DIR) --out "$(DESTDIR)$(MANDIR)" > /dev/null
	for f in stowd.service stowfs@.service; do \
		sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' mount-helpers/systemd/$$f > "$(DESTDIR)$(UNITDIR)/$$f" && chmod 0644 "$(DESTDIR)$(UNITDIR)/$$f"; done
	install -m 0644 README.md docs/SEMANTICS.md "$(DESTDIR)$(DOCDIR)/"
	install -d "$(DESTDIR)$(DATADIR)/bash-completion/completions" "$(DESTDIR)$(DATADIR)/zsh/site-functions" "$(DESTDIR)$(DATADIR)/fish/vendor_completions.d"
	for p in stowd stowfs; do \
		$(BUILD_DIR)/$$p --generate-completion-script bash > "$(DESTDIR)$(DATADIR)/bash-completion/completions/$$p" && \
		$(BUILD_DIR)/$$p --generate-completion-script zsh > "$(DESTDIR)$(DATADIR)/zsh/site-functions/_$$p" && \
		$(BUILD_DIR)/$$p --generate-completion-script fish > "$(DESTDIR)$(DATADIR)/fish/vendor_completions.d/$$p.fish" || exit 1; done
	@echo "installed stowd and stowfs in $(BINDIR), the mount helpers in $(SBINDIR), the systemd units in $(UNITDIR), man pages in $(MANDIR), shell completions in $(DATADIR)"

clean:
	rm -rf .build dist
