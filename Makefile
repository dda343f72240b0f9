GO      ?= go
# One version for the three binaries and the .deb (packaging/version: git
# describe in a checkout, the VERSION file in a release tarball); computed
# once. `make VERSION=1.2.3 deb` sets it.
VERSION ?= $(shell $(GO) run ./packaging/version)
VERSION := $(VERSION)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin
# The package's timestamps: the last commit's, or the VERSION file's without git.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || stat -c %Y VERSION)

# The architectures fleets run, as Debian names them, and their Go targets
# (`make deb ARCHS=amd64` builds one).
ARCHS        ?= amd64 arm64 armhf
GOENV_amd64  := GOARCH=amd64
GOENV_arm64  := GOARCH=arm64
GOENV_armhf  := GOARCH=arm GOARM=7

.PHONY: all build build-all $(ARCHS:%=build-%) deb deps test test-short bench bench-delta demo e2e fuzz vet clean bench-fleet version version-set crash bench-rollout

all: build

build: version-set
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/otad ./cmd/otad
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/otactl ./cmd/otactl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/otasim ./cmd/otasim

# Static binaries for every architecture in ARCHS: bin/ARCH/otad, otactl, otasim.
build-all: $(ARCHS:%=build-%)

$(ARCHS:%=build-%): build-%: version-set
	CGO_ENABLED=0 GOOS=linux $(GOENV_$*) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$*/otad ./cmd/otad
	CGO_ENABLED=0 GOOS=linux $(GOENV_$*) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$*/otactl ./cmd/otactl
	CGO_ENABLED=0 GOOS=linux $(GOENV_$*) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$*/otasim ./cmd/otasim

# dist/otad_VERSION_ARCH.deb (the device's: the daemon, its unit and config)
# and dist/otactl_VERSION_ARCH.deb (the workstation's: otactl, otasim) for
# every architecture (docs/contract/packaging.md), with nfpm as a library in
# packaging/mkdeb, a module of its own. The man pages and completions are
# made here from the programs' command tables (packaging/gendocs), so they
# cannot lag the commands. Timestamps are the last commit's, so the same
# commit builds the same bytes.
deb: build-all
	$(GO) run ./packaging/gendocs -out $(BIN)/docs -version '$(VERSION)'
	@for a in $(ARCHS); do for p in otad otactl; do \
	  SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) -C packaging/mkdeb run . -root $(CURDIR) -config packaging/$$p.yaml -docs $(BIN)/docs -arch $$a -version '$(VERSION)' || exit 1; \
	done; done

# The version the binaries and the package get.
version: version-set
	@echo '$(VERSION)'

version-set:
	@test -n '$(VERSION)' || { echo 'make: no version: not a git checkout and no VERSION file; set VERSION='; exit 1; }

# What the tests need on a fresh Debian machine (CI runs the same script).
deps:
	./scripts/install-deps

# The whole suite: vet, formatting, race detector, and a short run of every fuzz target;
# what tests keep (the dashboard's browser screenshots) goes under artifacts/.
# It ends by naming the tests skipped, and the apt-get command for the missing
# tools they need (make deps installs them all; under CI a missing tool fails).
test: vet
	@mkdir -p artifacts
	@bash -o pipefail -c '{ rc=0; $(GO) test -race -count=1 -timeout 40m -json -artifacts -outputdir=$(CURDIR)/artifacts ./... || rc=1; \
	  $(GO) -C packaging/mkdeb test -count=1 -json ./... || rc=1; exit $$rc; } | $(GO) run ./internal/testkit/testreport'
	./scripts/fuzz-smoke 10000x

test-short:
	$(GO) test -short ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1)
	$(GO) vet ./...
	$(GO) -C packaging/mkdeb vet ./...

# bin/otad's installs of stream (raw, zstd, xz) and chunked payloads (nothing to
# reuse, 1% changed, killed at 50% and resumed), read-back off and on, on every
# core and pinned to one, against the ideal pipeline of each measured in the same
# run: wall time, user and system CPU per GiB, peak RSS (1 GiB; BENCH_SIZE=256MiB
# for a quick look; BENCH_FLAGS='-rounds 5 -before OLD_OTAD' and so on).
bench: build
	$(GO) run ./bench/install -otad $(BIN)/otad -size $${BENCH_SIZE:-1GiB} $(BENCH_FLAGS)

# Bytes of a real update (issue 19): a Debian root file system debootstrapped
# from the machine's mirror, and the same after apt-get upgrade from the
# -security and -updates suites, as a 1 GiB ext4 and a squashfs; otad full,
# chunked and with deltas (real installs, bytes the server sent) against
# xdelta3, bsdiff (where it fits in memory), casync and zstd --patch-from;
# the installs' wall time, CPU and peak RSS on one core (taskset -c 0)
# against the stream install's and xdelta3's and bspatch's own decodes; the
# chunked payload with nothing to reuse against the stream. Needs root and scripts/deps/apt.txt's
# bench-delta packages; the trees and images are cached in
# ~/.cache/otad-bench-delta (-cache DIR, -rebuild). BENCH_DELTA_FLAGS='-size
# 256MiB -rounds 1', '-ro erofs', '-readback', '-keep' and so on. Two pairs:
# the monthly update, then the release upgrade to BENCH_DELTA_TO (trixie; empty: none).
BENCH_DELTA_TO ?= trixie
bench-delta: build
	$(GO) run ./bench/delta -otad $(BIN)/otad -otactl $(BIN)/otactl $(BENCH_DELTA_FLAGS)
	$(if $(BENCH_DELTA_TO),$(GO) run ./bench/delta -otad $(BIN)/otad -otactl $(BIN)/otactl -to $(BENCH_DELTA_TO) $(BENCH_DELTA_FLAGS))

# Offer-to-downloading latency of one agent, then group rollouts to N agents in
# one process, all against one real mosquitto on 127.0.0.1 (issue 3; needs the
# mosquitto package). FLEET_FLAGS='-agents 100,1000 -latency-n 50' and so on.
bench-fleet:
	$(GO) run ./bench/fleet $(FLEET_FLAGS)

# The rollout controller (otactl rollout start, built from this tree) against
# fake fleets of 10,000, 100,000 and 1,000,000 devices on one mosquitto (issue
# 20): the retained state's size, the controller's peak RSS, offers out paced
# and unpaced, a restart after kill -9 rebuilt. ROLLOUT_FLAGS='-devices 10000' and so on.
bench-rollout:
	$(GO) run ./bench/rollout $(ROLLOUT_FLAGS)

# The whole flow on this machine, nothing but Go: broker, image server, five simulated devices (docs/operating.md).
# DEMO_FLAGS=--keep keeps the devices, the broker and the dashboard up afterwards (Ctrl-C ends).
demo:
	$(GO) run ./cmd/otasim demo $(DEMO_FLAGS)

# QEMU image tests under TCG: OVMF + GRUB + Debian's amd64 kernel (TestQEMU, about
# 5 minutes), a real U-Boot on arm64 virt + Debian's arm64 kernel (TestUBoot,
# about 2 minutes; scripts/e2e-arm64-deps fetches the arm64 parts), otad in both;
# and a Debian guest with systemd as PID 1 and the shipped .deb (TestSystemd,
# about 6 minutes, plus 2 for a first debootstrap, cached in ~/.cache/otad-e2e/systemd).
e2e:
	$(GO) test -tags e2e -v -count=1 -timeout 35m ./e2e/

# The crash-state explorer (issue 21, docs/design.md "The journal and crash
# safety"): every state at every point of a whole update, and a seeded sample
# of those at every point of each recovery (a second power cut), 12,000
# states a scenario, in every scenario; each state checked. make test
# explores a smaller sample (TestCrashStates). CRASH_FLAGS='-scenarios
# stream/grub -depth 1 -sample 0' and so on.
crash:
	$(GO) run ./internal/testkit/crashstate/explore $(CRASH_FLAGS)

fuzz:
	./scripts/fuzz-smoke $${FUZZTIME:-60s}

clean:
	rm -rf $(BIN) dist
