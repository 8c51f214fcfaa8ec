# Sluice: `make run` starts the pipeline on this machine, `make test` runs every
# test. Both install what they need first (see `deps`).

GO      ?= go
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
GOFILES := $(shell find . -name '*.go' -not -path './tools/*' -not -path './.sluice/*' 2>/dev/null)

# Tests that start real servers run packages one at a time on this 2-core
# machine; raise it on a bigger one.
TEST_P  ?= 2
TEST_TIMEOUT ?= 15m

.PHONY: all build run test deps run-deps test-deps packages sdk-deps jaeger kafka redis chromium consul modules fuzz bench bench-gate bench-relay bench-asynq bench-asynq-e2e bench-steady bench-idle bench-seed bench-seed-full bench-scaling bench-scaling-full loadtest bench-e2e chaos clean

all: build

build: bin/sluice

bin/sluice: $(GOFILES) go.mod go.sum
	$(GO) build -o $@ ./cmd/sluice

## deps: everything the tests need besides Go; run-deps: what `sluice dev`
## needs (not chromium, which only the dashboard's test drives, nor Jaeger,
## which only `sluice dev --tracing` and its test start: `make jaeger`, nor
## the Apache Kafka broker, which only the real-broker tests and
## `sluice dev --kafka apache` run: `make kafka`).
deps: test-deps jaeger
run-deps: redis consul modules

# What the tests need besides Jaeger: Debian's packages in one apt run (apt
# holds a lock, so two at once would fail), then the builds and downloads side
# by side, so a fresh machine waits on the network and the CPU at once.
test-deps: packages sdk-deps
	$(MAKE) --no-print-directory -j3 consul modules kafka

# redis-server and chromium from Debian's packages, those missing, in one apt run.
packages:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing with apt"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@redis-server --version
	@chromium --version 2>/dev/null

# redis-server from Debian's package, when missing.
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server not found: installing it with apt"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends redis-server >/dev/null; \
	}
	@redis-server --version

# chromium from Debian's package, when missing: the dashboard's test drives
# the page in it, headless (cmd/sluice/dev_dashboard_test.go).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "chromium not found: installing it with apt"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	}
	@chromium --version 2>/dev/null

# The Consul agent, built from its Go module at the version pinned in
# tools/go.mod (v1.15.4, MPL-2.0) into bin/consul.
consul: bin/consul

bin/consul: tools/go.mod tools/go.sum
	@echo "building the Consul agent (pinned in tools/go.mod) into bin/consul; the first build takes a few minutes"
	cd tools && $(GO) build -o ../bin/consul github.com/hashicorp/consul
	@./bin/consul version | head -1

# Jaeger v2, the trace backend of the tracing tests and `sluice dev --tracing`,
# built from its Go module at the version pinned in tools/jaeger/go.mod
# (v1.76.0, Apache-2.0) into bin/jaeger: a module of its own, as its
# dependency tree is the OpenTelemetry Collector's. The first build takes
# about 5 minutes on 2 cores and 2.3 GB of memory (docs/tracing.md).
jaeger: bin/jaeger

bin/jaeger: tools/jaeger/go.mod tools/jaeger/go.sum
	@echo "building Jaeger v2 (pinned in tools/jaeger/go.mod) into bin/jaeger; the first build takes a few minutes"
	cd tools/jaeger && $(GO) build -o ../../bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger
	@./bin/jaeger version 2>/dev/null | head -1 || true

# The Apache Kafka broker the real-broker tests run (internal/stack,
# docs/kafka.md): its jars at the version pinned in tools/kafka/pom.xml
# (Apache Kafka 4.1.1, Apache-2.0) and their dependencies, fetched from Maven
# Central into bin/kafka/libs, run with Java 17. Java and Maven come from
# apt when missing. The stamp makes later runs a no-op until the pom changes.
kafka: bin/kafka/.fetched

bin/kafka/.fetched: tools/kafka/pom.xml
	@command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 || { \
		echo "java or mvn not found: installing openjdk-17-jre-headless and maven with apt"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless maven >/dev/null; \
	}
	@java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])' || { \
		echo "make kafka: the Kafka 4 broker needs Java 17 or later; java -version says:"; java -version; exit 1; }
	@echo "fetching Apache Kafka (pinned in tools/kafka/pom.xml) into bin/kafka/libs with Maven"
	rm -rf bin/kafka/libs
	cd tools/kafka && mvn -q -B -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=../../bin/kafka/libs
	@ls bin/kafka/libs/kafka_2.13-*.jar
	@touch $@

modules:
	$(GO) mod download

# What the SDKs' tests need (sdk/integration runs them against sluice dev):
# Python 3.11+ with pytest, Node 20+ with npm (from apt when missing), and
# the TypeScript SDK's devDependencies as package-lock.json pins them.
sdk-deps:
	@python3 -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null || { \
		echo "python3 (3.11+) not found: installing python3 with apt"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends python3 >/dev/null; \
	}
	@python3 -c 'import pytest' 2>/dev/null || { \
		echo "pytest not found for $$(command -v python3): installing it with pip, else python3-pytest with apt"; \
		python3 -m pip install --quiet pytest 2>/dev/null || { \
			$(SUDO) apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends python3-pytest >/dev/null; }; \
	}
	@python3 -c 'import pytest' || { echo "make sdk-deps: $$(command -v python3) still has no pytest: install it for that python3"; exit 1; }
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
		echo "node or npm not found: installing nodejs and npm with apt"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; \
	}
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' || { \
		echo "make sdk-deps: the TypeScript SDK needs Node 20 or later (its fetch, Request and Response); node --version says $$(node --version): install Node 20+ (Debian 12's nodejs is 18)"; exit 1; }
	@python3 --version && node --version
	@$(MAKE) --no-print-directory sdk/typescript/node_modules/.package-lock.json

# npm ci writes node_modules/.package-lock.json: reinstalled only when the
# committed package-lock.json changes.
sdk/typescript/node_modules/.package-lock.json: sdk/typescript/package-lock.json
	cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error

## run: the whole pipeline on embedded defaults (sluice dev); DEV_FLAGS adds
## flags, e.g. make run DEV_FLAGS='--http thumb=http://127.0.0.1:8787/'.
run: run-deps build
	./bin/sluice dev $(DEV_FLAGS)

## test: vet (the asynq comparison module too: it builds against sluice's packages),
## then every test, with the race detector, against real Redis,
## Consul and Kafka (kfake, and the Apache broker where its behaviour matters).
#
# Only the tests named *InJaeger need bin/jaeger, whose first build is most of
# a fresh machine's set-up (about 15 minutes of both cores). So `make test`
# builds it in the background at the lowest CPU priority while the set-up and
# every other test run, using the cores they leave idle (waits on the network,
# on servers starting, on timers), then waits for it and runs those tests last.
# When bin/jaeger is up to date the background build returns at once.
JAEGER_TESTS := InJaeger$$
test:
	@mkdir -p .sluice
	@echo "building Jaeger in the background (log: .sluice/jaeger-build.log)"
	@nice -n 19 $(MAKE) --no-print-directory jaeger >.sluice/jaeger-build.log 2>&1 & jaeger=$$!; \
	$(MAKE) --no-print-directory test-deps && \
	$(GO) vet ./... && \
	(cd loadtest/asynqbench && $(GO) vet ./...) && \
	$(GO) test -count=1 -race -p $(TEST_P) -timeout $(TEST_TIMEOUT) -skip '$(JAEGER_TESTS)' ./...; status=$$?; \
	echo "waiting for the Jaeger build (.sluice/jaeger-build.log)"; \
	wait $$jaeger || { cat .sluice/jaeger-build.log; exit 1; }; \
	[ $$status = 0 ] || exit $$status; \
	$(GO) test -count=1 -race -timeout $(TEST_TIMEOUT) -run '$(JAEGER_TESTS)' ./cmd/sluice ./internal/testenv

## fuzz: a short run of each decoder fuzz target (FUZZTIME=10m for longer).
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./internal/job -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/job -run '^$$' -fuzz '^FuzzStream$$' -fuzztime $(FUZZTIME)
	$(GO) test ./gate -run '^$$' -fuzz '^FuzzGroupBody$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/canary -run '^$$' -fuzz '^FuzzDecoders$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/limits -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/admin -run '^$$' -fuzz '^FuzzParseTokens$$' -fuzztime $(FUZZTIME)
	$(GO) test ./coordinator -run '^$$' -fuzz '^FuzzAdminDecoders$$' -fuzztime $(FUZZTIME)

## bench: Go benchmarks (numbers go to BENCHMARKS.md with the command).
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./...

## bench-gate: the gate against kfake under wrk, beside a bare Go handler.
bench-gate: build
	@command -v wrk >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wrk >/dev/null; }
	DURATION=$${DURATION:-20s} loadtest/gate-bench.sh

## bench-relay: the relay from kfake into Redis, beside redis-benchmark.
bench-relay: deps
	loadtest/relay-bench.sh

## bench-asynq: sluice's worker beside asynq v0.26.0 on one Redis (a module
## of its own: asynq is no dependency of sluice).
bench-asynq: deps
	cd loadtest/asynqbench && $(GO) test -run '^$$' -bench '^BenchmarkNoopSluiceVsAsynq$$' -benchtime 1x

## bench-asynq-e2e: end to end beside asynq v0.26.0 on sluice dev's Redis:
## asynq's client (64 goroutines) and server against single and 100-job POSTs
## through the gate, the same jobs each (ASYNQ_E2E_FLAGS='--jobs 200000').
bench-asynq-e2e: deps build
	cd loadtest/asynqbench && $(GO) run ./e2e --sluice-bin ../../bin/sluice $(ASYNQ_E2E_FLAGS)

## bench-steady: where users live (issue 34): single-job POSTs in open loops at
## 1%, 10%, 25% and 50% of the single-POST maximum (measured first; STEADY_MAX=N
## gives it), each followed by asynq v0.26.0 at the same rate on the same Redis:
## CPU per job per part, enqueue-to-start and -done p50/p99, a table and an SVG
## plot (docs/loadtest.md, BENCHMARKS.md "Steady loads"). About 4 minutes.
STEADY_MAX ?= 0
bench-steady: deps build
	cd loadtest/asynqbench && $(GO) run ./e2e --sluice-bin ../../bin/sluice --steady --max $(STEADY_MAX) $(ASYNQ_E2E_FLAGS)

## bench-idle: sluice dev's parts and Redis over a minute with no jobs but the
## canaries (every 10 s), each process's CPU from /proc (target: under 1% of one
## core together).
bench-idle: deps build
	$(GO) run ./loadtest --start-dev --sluice-bin bin/sluice $(LOADTEST_FLAGS) idle

## bench-seed: the rate-limited seed scenario scaled down (3 x 1,000 jobs at
## 100/s per resource, ideal 10 s) against real Redis and Consul.
bench-seed: deps
	$(GO) test ./loadtest -run '^$$' -bench '^BenchmarkSeedScaled$$' -benchtime 1x -v

## bench-seed-full: the seed at full size (3 x 5,000 jobs at 10/s, ideal 500 s:
## about 8.5 minutes).
bench-seed-full: deps
	SLUICE_BENCH_SEED_FULL=1 $(GO) test ./loadtest -run '^$$' -bench '^BenchmarkSeedFull$$' -benchtime 1x -timeout 30m -v

## bench-scaling: the seed's scaling scenario scaled down (10,000 jobs of 120 ms
## over 4 partitions, base 2 workers each, up to 8x, 1 s cycles: about 25 s)
## against real Redis and Consul, with the real worker and coordinator.
bench-scaling: deps
	$(GO) test ./loadtest -run '^$$' -bench '^BenchmarkScalingScaled$$' -benchtime 1x -v

## bench-scaling-full: the same at full size (100,000 jobs, 5 s cycles: about
## 3.5 minutes); SLUICE_BENCH_SCALING_FIXED=1 runs the 8 fixed workers instead
## (25 minutes by construction).
bench-scaling-full: deps
	SLUICE_BENCH_SCALING_FULL=1 $(GO) test ./loadtest -run '^$$' -bench '^BenchmarkScalingFull$$' -benchtime 1x -timeout 40m -v

## loadtest: one scenario of the load generator (go run ./loadtest) against a
## `sluice dev` it starts on free ports and stops: SCENARIO=throughput, spike,
## ratelimit, scaling, scaling-fixed, hol or load; SIZE=scaled (default) or full;
## LOADTEST_FLAGS for more (go run ./loadtest --help). Reports (JSON, HTML) go
## to .sluice/loadtest/; see docs/loadtest.md.
SCENARIO ?= throughput
SIZE     ?= scaled
loadtest: deps build
	$(GO) run ./loadtest --start-dev --sluice-bin bin/sluice --size $(SIZE) $(LOADTEST_FLAGS) $(SCENARIO)

## bench-e2e: the end-to-end throughput (single-job and 100-job POSTs, 30 s each,
## then a tenth of the load for enqueue-to-start) with the yardsticks measured in
## the same run: the bare HTTP handler, kfake produce, redis-benchmark
## (BENCHMARKS.md, "End to end"). KAFKA=apache runs `sluice dev` on a real
## Apache Kafka broker (`sluice dev --kafka apache`, docs/kafka.md) instead of kfake.
KAFKA ?= kfake
bench-e2e: deps build
	$(GO) run ./loadtest --start-dev --sluice-bin bin/sluice --yardsticks --size full --dev-flag=--kafka=$(KAFKA) $(LOADTEST_FLAGS) throughput

## chaos: the full chaos suite (docs/chaos.md): tens of thousands of jobs through
## 2 gates, 2 relays, 2 workers and 2 coordinators as real processes while every
## fault strikes, one at a time and mixed, and the regression tests of the bugs
## it found (about 4 minutes; they fail until those are fixed); prints the verdict table. The short version runs
## in `make test`. KAFKA=apache runs it on three real Apache Kafka brokers
## (`make kafka`; RF 3, min.insync.replicas 2, acks=all) with the Kafka faults
## of docs/chaos.md: TestChaosFull's real-broker steps, then
## TestChaosUncleanElection (about 15 minutes).
chaos: deps
	SLUICE_CHAOS_FULL=1 SLUICE_TEST_KAFKA=$(KAFKA) $(GO) test ./chaos/ -count=1 -v -timeout $(if $(filter apache,$(KAFKA)),40m,30m) $(CHAOS_RUN)
CHAOS_RUN = $(if $(filter apache,$(KAFKA)),-run '^(TestChaosFull|TestChaosUncleanElection)$$')

clean:
	rm -rf bin .sluice
