# StowFS — one entry point.
#   make run    build release binaries, start a local stowd and mount the namespace `demo` at ./mnt
#   make test   install what is missing, build, run every test
SHELL := /bin/bash
SWIFT ?= swift
PREFIX ?= /usr/local
DESTDIR ?=
DATA ?= $(HOME)/.local/share/stowfs/stowd
PORT ?= 8420

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
	@echo "stowd on http://127.0.0.1:$(PORT), data in $(DATA); Ctrl-C stops it."
	.build/release/stowd --data-dir "$(DATA)" --port $(PORT)

# PUT/GET of a 1 GiB file and small-file completes through stowd, against plain copies on the same disk.
bench-server: release
	.build/release/stow-bench server --size $${SIZE:-1G} --runs $${RUNS:-3}

install: release
	install -d "$(DESTDIR)$(PREFIX)/bin"
	install -m 0755 .build/release/stowd "$(DESTDIR)$(PREFIX)/bin/stowd"

clean:
	rm -rf .build
