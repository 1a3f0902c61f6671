# Sluice — run `make help` for the targets.
GO        ?= go
FUZZTIME  ?= 30s
CRASH_ITERATIONS ?= 200
FAULTS_BUDGET ?= 5m
CLUSTER_FAULTS_DURATION ?= 5m
SOAK_DURATION ?= 10m
SOAK_MESSAGES ?= 2000000
# Go modules in this repository: the broker (root), the HTTP API's wire
# types (api, no dependencies; shared by the broker and the worker SDK), the
# worker SDK (its own module, so SDK users do not inherit the broker's
# dependencies) and the examples (built against ../worker through a
# replace). `go test ./...` stops at a nested module, so every target that
# walks packages loops.
MODULES   := . api worker examples

.PHONY: help build run test test-race race errcheck lint bench bench-vs-rabbitmq bench-quorum bench-repair priority-vs-rabbitmq fuzz crash faults cluster-faults cluster-mutation soak perf perf-fifo perf-many release-check

help: ## show this help
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# Version stamping (sluice version, the startup log, sluice_build_info).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE      ?= $(shell git log -1 --format=%cI 2>/dev/null)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)

build: ## build ./bin/sluice, stamped with version, commit and date
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice

run: ## run the broker on its embedded default store (./sluice-data)
	$(GO) run ./cmd/sluice server

test: ## run the whole test suite (what CI runs), every module; the engine suite once more on pebble
	@for m in $(MODULES); do echo "== go test $$m"; (cd $$m && $(GO) test -count=1 -timeout 30m ./...) || exit 1; done
	@echo "== go test ./internal/engine/ on the pebble store"; SLUICE_ENGINE_STORE=pebble $(GO) test -count=1 -timeout 10m ./internal/engine/

test-race: ## the test suite under the race detector, every module
	@for m in $(MODULES); do echo "== go test -race $$m"; (cd $$m && $(GO) test -count=1 -race -timeout 45m ./...) || exit 1; done

# The packages where concurrency lives (engine, stores, the SQS, AMQP and
# admin front-ends, the server's wiring, listeners and watchers, the cluster
# node and its replicated store, the shared
# body budget, alerts, dashboard sampler, metrics, the worker SDK's core),
# under the race detector: what CI runs. `make test-race` is the whole
# suite and takes far longer. -short is passed for tests that honour it;
# none of these packages is narrowed further today (each took between 2 s
# and 90 s of wall time on the project's 2-core machine, with the race
# build cached; pebblestore is the slowest).
RACE_PKGS        := ./internal/engine/ ./internal/store/... ./internal/amqp/ ./internal/sqs/ ./internal/admin/ \
                    ./internal/server/ ./internal/httpbody/ ./internal/alerts/ ./internal/dashboard/ ./internal/metrics/ \
                    ./internal/cluster/...
RACE_WORKER_PKGS := . ./dlq/ ./dedup/
RACE_TIMEOUT     ?= 15m

race: ## the race detector over the concurrent packages (bounded by RACE_TIMEOUT per module)
	$(GO) test -count=1 -race -short -timeout $(RACE_TIMEOUT) $(RACE_PKGS)
	cd worker && $(GO) test -count=1 -race -short -timeout $(RACE_TIMEOUT) $(RACE_WORKER_PKGS)

# errcheck, pinned (v1.30.0 was @latest when it was added). Test files are
# not checked (-ignoretests: about 320 dropped errors there, nearly all
# deferred closes of test connections and bodies; a test fails on what it
# asserts). scripts/errcheck-excludes.txt lists the few functions whose
# errors are never checked (terminal and HTTP response writes). Every
# package of the broker module is checked; an error dropped on purpose is
# written `_ = f() // why`.
ERRCHECK         ?= github.com/kisielk/errcheck@v1.30.0

errcheck: ## unchecked errors in the broker module's non-test code (errcheck)
	$(GO) run $(ERRCHECK) -ignoretests -exclude scripts/errcheck-excludes.txt ./...

lint: ## gofmt, go vet, staticcheck, errcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do echo "== vet+staticcheck $$m"; (cd $$m && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...) || exit 1; done
	@echo "== vet+staticcheck -tags faultclock ./cmd/sluice (the cluster fault harness's build)"; $(GO) vet -tags faultclock ./cmd/sluice && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags faultclock ./cmd/sluice
	@echo "== errcheck ."; $(MAKE) --no-print-directory errcheck

# goreleaser v2.14.3: @latest needs Go 1.27, and v2.15–v2.17 pull a module
# the Go proxy refuses (go.digitalxero.dev/go-msix). The first run builds
# it (about 160 s of CPU); later runs take about a second. The release
# target is named in .goreleaser.yaml, so no git remote is needed.
GORELEASER ?= github.com/goreleaser/goreleaser/v2@v2.14.3

release-check: ## validate .goreleaser.yaml with goreleaser check
	$(GO) run $(GORELEASER) check

bench: ## Go benchmarks (engine, store)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

bench-vs-rabbitmq: ## sluice bench amqp against RabbitMQ and Sluice in one run, as ratios (quiet machine; DURATION, REPEAT, SCENARIOS)
	scripts/bench-vs-rabbitmq.sh

bench-quorum: ## issue 14's comparison: sluice bench amqp against a RabbitMQ quorum queue, a 3-node Sluice cluster's leader and one Sluice node (quiet machine; DURATION, RATE_DURATION, REPEAT, SCENARIOS, BROKERS; SLUICE_BASE for an A/B of two builds)
	scripts/bench-quorum.sh

bench-repair: ## how long a node added to a 3-node cluster takes to catch up a large backlog by snapshot, and the cost to a steady load meanwhile (quiet machine; MESSAGES, SIZE, SHARDS, RATE; builds ./sluice)
	$(GO) build -o sluice ./cmd/sluice && scripts/bench-repair.sh

priority-vs-rabbitmq: ## the order of N messages of random priorities on a priority queue, Sluice against RabbitMQ (N, MAXP, SEED)
	scripts/priority-vs-rabbitmq.sh

fuzz: ## run every fuzz target for FUZZTIME each (scripts/fuzz-all.sh: targets read from the test files, one instrumented build per package)
	@for m in $(MODULES); do (cd $$m && GO=$(GO) $(CURDIR)/scripts/fuzz-all.sh $(FUZZTIME)) || exit 1; done

crash: ## long SIGKILL crash test (CRASH_ITERATIONS kills)
	SLUICE_CRASH_ITERATIONS=$(CRASH_ITERATIONS) $(GO) test -count=1 -timeout 2h -run . -v ./test/crash/

faults: ## fault-injection tests (SIGKILL, SIGSTOP, power loss, EIO/ENOSPC, WAL bit flips) for FAULTS_BUDGET of load
	SLUICE_FAULTS_BUDGET=$(FAULTS_BUDGET) $(GO) test -count=1 -timeout 60m -run . -v ./test/faults/

cluster-faults: ## cluster fault harness (partitions, one-way, delay, cut forwards, kill -9 of one, a majority or all, SIGSTOP, graceful handover; one node's clock 20 s ahead): 3 nodes, 3 nodes FIFO, 5 nodes, 5 nodes with 3 shards, 5 nodes with 5 shards placed on subsets, CLUSTER_FAULTS_DURATION each (SLUICE_FAULT_SEED reproduces); then 100 rounds of whole-group power cuts under load
	SLUICE_CLUSTER_FAULTS_DURATION=$(CLUSTER_FAULTS_DURATION) SLUICE_CLUSTER_FAULTS_NODES=3 $(GO) test -count=1 -timeout 60m -run TestClusterFaults -v ./test/clusterfaults/
	SLUICE_CLUSTER_FAULTS_DURATION=$(CLUSTER_FAULTS_DURATION) SLUICE_CLUSTER_FAULTS_NODES=3 SLUICE_CLUSTER_FAULTS_FIFO=1 $(GO) test -count=1 -timeout 60m -run TestClusterFaults -v ./test/clusterfaults/
	SLUICE_CLUSTER_FAULTS_DURATION=$(CLUSTER_FAULTS_DURATION) SLUICE_CLUSTER_FAULTS_NODES=5 $(GO) test -count=1 -timeout 60m -run TestClusterFaults -v ./test/clusterfaults/
	SLUICE_CLUSTER_FAULTS_DURATION=$(CLUSTER_FAULTS_DURATION) SLUICE_CLUSTER_FAULTS_NODES=5 SLUICE_CLUSTER_FAULTS_SHARDS=3 $(GO) test -count=1 -timeout 60m -run TestClusterFaults -v ./test/clusterfaults/
	SLUICE_CLUSTER_FAULTS_DURATION=$(CLUSTER_FAULTS_DURATION) SLUICE_CLUSTER_FAULTS_NODES=5 SLUICE_CLUSTER_FAULTS_SHARDS=5 SLUICE_CLUSTER_FAULTS_PLACEMENT=subset $(GO) test -count=1 -timeout 60m -run TestClusterFaults -v ./test/clusterfaults/
	SLUICE_RAFT_POWERCUT_ROUNDS=100 $(GO) test -count=1 -timeout 30m -run TestPowerCutsUnderLoad -v ./internal/cluster/raftstore/

cluster-mutation: ## the cluster fault harness must fail on broken builds: ack before commit, own-clock leaders, transfers ended unimported, routed dead letters dropped (CI runs the first three)
	./test/clusterfaults/mutation-check.sh

soak: ## soak: deep backlog, 2,000 parked long polls, SQS+AMQP load for SOAK_DURATION, drain, disk reclamation (writes ~2 GB; SLUICE_SOAK_DIR)
	SLUICE_SOAK=1 SLUICE_SOAK_DURATION=$(SOAK_DURATION) SLUICE_SOAK_MESSAGES=$(SOAK_MESSAGES) $(GO) test -count=1 -run TestSoak -v -timeout 120m ./test/soak/

perf: ## restart time and memory with 1M queued messages, then the deep backlog (2M over AMQP, kill -9, restart, drain; writes ~5 GB; SLUICE_PERF_DIR, SLUICE_PERF_MESSAGES)
	SLUICE_PERF=1 $(GO) test -count=1 -run 'TestRestart|TestDeepBacklog' -v -timeout 90m ./test/perf/

perf-many: ## a backlog over many queues at once (400 queues × 2,100 messages of 200 B over SQS, kill -9, restart, drain): memory bounded by the ready and body budgets; SLUICE_PERF_QUEUES, SLUICE_PERF_QUEUE_DEPTH, SLUICE_PERF_BODY, SLUICE_PERF_CONFIG
	SLUICE_PERF=1 SLUICE_PERF_MANY=1 $(GO) test -count=1 -run TestManyQueues -v -timeout 60m ./test/perf/

perf-fifo: ## the deep backlog on a FIFO queue over SQS (2M in 64 groups, kill -9, restart, drain; SLUICE_PERF_DIR, SLUICE_PERF_MESSAGES, SLUICE_PERF_FIFO_GROUPS)
	SLUICE_PERF=1 SLUICE_PERF_FIFO=1 $(GO) test -count=1 -run 'TestDeepBacklogFIFO$$' -v -timeout 90m ./test/perf/
