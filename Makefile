# StowFS — one entry point.
#   make run    build release binaries, start a local stowd and mount the namespace `demo` at ./mnt (MNT=…)
#   make stop   store what is queued and unmount it
#   make test   install what is missing, build, run every test
SHELL := /bin/bash
SWIFT ?= swift
PREFIX ?= /usr/local
DESTDIR ?=
MNT ?= $(CURDIR)/mnt

.PHONY: all deps build release test run stop install bench bench-server clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

run: release
	@scripts/run.sh "$(MNT)"

stop:
	@.build/release/stowfs unmount "$(MNT)"

# PUT/GET of a 1 GiB file and small-file completes through stowd, against plain copies on the same disk.
bench-server: release
	.build/release/stow-bench server --size $${SIZE:-1G} --runs $${RUNS:-3}

install: release
	install -d "$(DESTDIR)$(PREFIX)/bin"
	install -m 0755 .build/release/stowd "$(DESTDIR)$(PREFIX)/bin/stowd"
	install -m 0755 .build/release/stowfs "$(DESTDIR)$(PREFIX)/bin/stowfs"

clean:
	rm -rf .build
