# Funnel's build. `make test` is the whole test suite; `make bench` the
# side-by-side benchmarks.
GO ?= go
SHELL := bash

.PHONY: test vet staticcheck fmt-check deps fuzz bench chaos
test: deps fmt-check vet staticcheck
	$(GO) test -race -count=1 ./...
	# Allocations are counted without the race detector (alloc_test.go).
	$(GO) test -count=1 -run 'Alloc' .

vet:
	$(GO) vet ./...

# staticcheck is installed by scripts/deps.sh into $(go env GOPATH)/bin.
staticcheck:
	"$$($(GO) env GOPATH)/bin/staticcheck" ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# module builds Funnel's Redis module, module/funnel.so, for Redis's
# --loadmodule (see the README's "Funnel's Redis module"). CC picks the C
# compiler.
CC ?= cc
.PHONY: module
module: module/funnel.so
module/funnel.so: module/funnel.c
	$(CC) -O2 -Wall -Wextra -fPIC -shared -ffp-contract=off -o $@ $<

# deps installs what the tests need and the machine lacks.
deps:
	@bash scripts/deps.sh

# fuzz runs each fuzz target for FUZZTIME (their seed corpora run in `make test`).
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "$$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg || exit 1; \
		done; \
	done

# bench runs the side-by-side benchmarks of bench/ (a module of its own, so
# that the limiters it compares never enter go.mod) and prints them as
# markdown tables; the raw output stays in bench/bench.txt. About 2 to 3
# minutes: BenchmarkRedis starts its own redis-server (see scripts/deps.sh).
bench: deps
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 -count 1 | tee bench.txt
	cd bench && $(GO) run ./cmd/benchtable < bench.txt

# bench-server runs the same redis-benchmark (50 clients, 100,000 random keys,
# -P 1 and -P 16) against `funnel serve`, built from this tree, and a stock
# redis-server, both on free ports, and prints Funnel's CL.THROTTLE against
# Redis's GET: rps, p50, p99 and the ratio. About a minute. PERF=file also
# profiles funnel under -P 1 with perf and prints the hottest symbols.
.PHONY: bench-server
bench-server: deps
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(GO) build -o "$$tmp/funnel" ./cmd/funnel && \
	cd bench && $(GO) run ./cmd/benchserver -funnel "$$tmp/funnel" $(if $(PERF),-perf $(abspath $(PERF)))

# bench-redis-cpu measures Redis's CPU per CL.THROTTLE decision behind
# `funnel serve --store redis://` (redis-benchmark -c 50 -P 16, 100,000
# keys), through the script and through Funnel's module (both encodings),
# 4 alternating rounds, and prints the medians. CELL=path/libredis_cell.so
# adds redis-cell's own CL.THROTTLE, and the ratios to it. About 2 minutes.
.PHONY: bench-redis-cpu
bench-redis-cpu: deps module
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(GO) build -o "$$tmp/funnel" ./cmd/funnel && \
	cd bench && $(GO) run ./cmd/benchserver -redis-cpu -funnel "$$tmp/funnel" -module $(abspath module/funnel.so) $(if $(CELL),-cell $(abspath $(CELL)))

# bench-snapshot measures CL.THROTTLE under redis-benchmark -P 16 on
# `funnel serve` restored from a snapshot of 1,000,000 keys, with no snapshot
# under way and with snapshots written back to back, and prints p50, p99 and
# the ratio of the p99s. About a minute. (BenchmarkSnapshot in `make bench`
# measures the write and restore times and the bytes per key.)
.PHONY: bench-snapshot
bench-snapshot: deps
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(GO) build -o "$$tmp/funnel" ./cmd/funnel && \
	cd bench && $(GO) run ./cmd/benchserver -funnel "$$tmp/funnel" -snapshot -r 1000000 $(BENCH_SNAPSHOT_FLAGS)

# chaos runs the fault drills against real servers and prints what each
# held, lost and recovered: Redis stopped, frozen (SIGSTOP: no decision
# answered as not made is made when it resumes) and restarted
# under load, a Sentinel failover, shutdown (as on SIGTERM) under pipelined
# load in both RESP modes, clients that never read, slow and cut request
# bodies, and RESP with the store gone; idle connections opened on every
# listener, over their bounds, while connected clients measure their
# latency (TestDrillIdleConnections; IDLE_CONNS sets how many per
# listener). About a minute.
CHAOS_REDIS = TestFallbackWhenDown|TestTimeoutWhenPaused|TestNotDecidedWhenLate|TestRestartUnderLoad|TestSentinelFailover
CHAOS_RESP = TestServerShutdownDrainsPipelines|TestServerClientsThatNeverRead|TestServerFallbacks
CHAOS_HTTP = TestSlowBody|TestShortBody|TestStoreFallback
CHAOS_DAEMON = TestDaemonRESPFallbacks|TestDrillIdleConnections
IDLE_CONNS ?= 1200
chaos: deps
	@set -o pipefail; for run in "./redisstore $(CHAOS_REDIS)" "./respserver $(CHAOS_RESP)" "./httpapi $(CHAOS_HTTP)" "./internal/daemon $(CHAOS_DAEMON)"; do \
		set -- $$run; \
		IDLE_CONNS=$(IDLE_CONNS) $(GO) test -race -count=1 -v -run "^($$2)$$" $$1 2>&1 | grep -E -- '^\s*--- (PASS|FAIL)|^\s+[a-z_]+_test\.go:[0-9]+: |^(ok|FAIL)\s' || exit 1; \
	done
