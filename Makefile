# Threadbox. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO            ?= go
BIN           := bin/threadbox
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -X main.version=$(VERSION)
# Pinned tool versions, fetched through the Go module proxy and cached by the Go build cache.
SQLC_VERSION        ?= v1.31.1
STATICCHECK_VERSION ?= v0.8.2
# Generated code that must match `make generate` (checked by `make lint`).
GENERATED     := db/internal/pgsqlc db/internal/sqlitesqlc
TEST_FLAGS    ?= -race -timeout 25m
BENCH_FLAGS   ?= -run '^$$' -bench . -benchmem -timeout 30m
SERVICES_ENV  = eval "$$(deploy/test-services.sh --env)"

.PHONY: help
help: ## list targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
# Static (no cgo): the model gateway mounts this binary into Docker sandboxes as their forwarder.
build: ## build bin/threadbox
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/threadbox

.PHONY: run
run: ## start the bot on embedded defaults (SQLite, web chat on 127.0.0.1:8080, Docker if present)
	VERSION=$(VERSION) deploy/run.sh

.PHONY: services
services: ## install (if missing) and start Docker, PostgreSQL and Redis; build the test image
	deploy/test-services.sh

.PHONY: test
test: services lint ## bring up real services, check generated code and lint, run every test with -race
	$(SERVICES_ENV) && THREADBOX_REQUIRE_SERVICES=1 $(GO) test $(TEST_FLAGS) ./...

.PHONY: bench
bench: services ## run the benchmarks (provider latency vs raw Docker, store loop queries, …)
	$(SERVICES_ENV) && THREADBOX_REQUIRE_SERVICES=1 $(GO) test $(BENCH_FLAGS) ./...

.PHONY: generate
generate: ## regenerate sqlc code from queries/ and the migrations
	$(GO) run github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION) generate

.PHONY: check-generate
check-generate: ## fail if generated code differs from `make generate`
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	for d in $(GENERATED); do mkdir -p "$$tmp/$$d" && cp -a "$$d/." "$$tmp/$$d/"; done && \
	$(MAKE) --no-print-directory generate >/dev/null && \
	for d in $(GENERATED); do diff -r "$$tmp/$$d" "$$d" || { echo "generated code in $$d is stale: run make generate and commit" >&2; exit 1; }; done

.PHONY: lint
lint: check-generate ## gofmt, go vet, staticcheck, generated code in sync
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -version >/dev/null 2>&1; then \
	  $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...; \
	else echo "staticcheck not installable here: skipped"; fi

.PHONY: sandbox-image
sandbox-image: ## build the sandbox images offline (threadbox/sandbox-test, -base, and threadbox/sandbox with the agent runtimes)
	deploy/sandbox-image/build.sh full

.PHONY: clean
clean: ## remove build output and local data (not Docker images or sandboxes)
	rm -rf bin data
