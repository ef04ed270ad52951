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
HELM_VERSION        ?= v3.22.0
# v2.28.1: later releases' go.mod has exclude directives, which `go run pkg@version` refuses.
COMPOSE_VERSION     ?= v2.28.1
OAPI_CODEGEN_VERSION ?= v2.8.2
HELM          = $(GO) run helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
COMPOSE       = $(GO) run github.com/docker/compose/v2/cmd@$(COMPOSE_VERSION)
CHART         := deploy/helm/threadbox
# Generated code that must match `make generate` (checked by `make lint`).
GENERATED     := db/internal/pgsqlc db/internal/sqlitesqlc \
                 sandbox/daytona/internal/spec sandbox/daytona/internal/api sandbox/daytona/internal/toolbox
DAYTONA_GEN   := sandbox/daytona/internal
TEST_FLAGS    ?= -race -timeout 25m
BENCH_FLAGS   ?= -run '^$$' -bench . -benchmem -timeout 30m
# `make fuzz`: how long each fuzz target runs, and extra go test flags (FUZZ_FLAGS=-parallel=1).
FUZZTIME      ?= 10s
FUZZ_FLAGS    ?=
SERVICES_ENV  = eval "$$(deploy/test-services.sh --env)"

.PHONY: help
help: ## list targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
# Static (no cgo): the model gateway mounts this binary into Docker sandboxes as their forwarder.
build: ## build bin/threadbox
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/threadbox

.PHONY: run
run: ## start the bot on embedded defaults (SQLite, web chat on 127.0.0.1:8080, Docker if present; with a model key, the AI runtimes image and the gateway)
	GO=$(GO) VERSION=$(VERSION) deploy/run.sh

.PHONY: services
services: ## install (if missing) and start Docker, PostgreSQL and Redis; build the test image
	deploy/test-services.sh

.PHONY: test
test: services lint ## bring up real services, check generated code and lint, run every test with -race, check for leaks
	@snap=$$(mktemp) && trap 'rm -f "$$snap"' EXIT && deploy/test-leaks.sh snapshot "$$snap" && \
	rc=0 && { $(SERVICES_ENV) && THREADBOX_REQUIRE_SERVICES=1 $(GO) test $(TEST_FLAGS) ./...; } || rc=$$?; \
	deploy/test-leaks.sh check "$$snap" || rc=1; exit $$rc

.PHONY: bench
# The benchmarks run with the binary's collector setting (cmd/threadbox/gc.go), unless GOGC is set.
bench: services ## run the benchmarks (provider latency vs raw Docker, store loop queries, …)
	$(SERVICES_ENV) && GOGC=$${GOGC:-400} THREADBOX_REQUIRE_SERVICES=1 $(GO) test $(BENCH_FLAGS) ./...

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (default 10s), one at a time; crashers land in testdata/fuzz
	GO=$(GO) FUZZTIME=$(FUZZTIME) deploy/fuzz.sh $(FUZZ_FLAGS)

.PHONY: generate
generate: ## regenerate sqlc code from queries/ and the migrations, and the Daytona clients from their specs
	$(GO) run github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION) generate
	@# The toolbox spec is Swagger 2.0: convert it to OpenAPI 3 (committed: the fake embeds it).
	$(GO) run ./$(DAYTONA_GEN)/specconv $(DAYTONA_GEN)/spec/toolbox.swagger.json $(DAYTONA_GEN)/spec/toolbox.json
	cd $(DAYTONA_GEN)/api && $(GO) run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@$(OAPI_CODEGEN_VERSION) -config oapi-codegen.yaml ../spec/api.json
	cd $(DAYTONA_GEN)/toolbox && $(GO) run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@$(OAPI_CODEGEN_VERSION) -config oapi-codegen.yaml ../spec/toolbox.json

.PHONY: check-generate
check-generate: ## fail if generated code differs from `make generate`
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	for d in $(GENERATED); do mkdir -p "$$tmp/$$d" && cp -a "$$d/." "$$tmp/$$d/"; done && \
	$(MAKE) --no-print-directory generate >/dev/null && \
	for d in $(GENERATED); do diff -r "$$tmp/$$d" "$$d" || { echo "generated code in $$d is stale: run make generate and commit" >&2; exit 1; }; done

.PHONY: lint
lint: check-generate ## go.mod tidy, gofmt, go vet, staticcheck, generated code in sync, then lint-deploy
	$(GO) mod tidy -diff
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -version >/dev/null 2>&1; then \
	  $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...; \
	else echo "staticcheck not installable here: skipped"; fi
	$(MAKE) --no-print-directory lint-deploy

.PHONY: lint-deploy
lint-deploy: ## helm lint --strict + helm template on the chart (each provider); docker compose config -q on compose.yaml
	@for p in docker daytona deno; do \
	  echo "helm lint --strict + template: sandbox.provider=$$p"; \
	  $(HELM) lint --strict --quiet $(CHART) --set sandbox.provider=$$p && \
	  $(HELM) template threadbox $(CHART) --set sandbox.provider=$$p >/dev/null || exit 1; \
	done
	@echo "helm lint --strict + template: sandbox.providers={docker,daytona,deno}"
	@$(HELM) lint --strict --quiet $(CHART) --set 'sandbox.providers={docker,daytona,deno}' && \
	  $(HELM) template threadbox $(CHART) --set 'sandbox.providers={docker,daytona,deno}' >/dev/null
	$(COMPOSE) --env-file deploy/compose.env.example -f deploy/compose.yaml config -q

.PHONY: sandbox-image
sandbox-image: ## build the sandbox images offline (threadbox/sandbox-test, -base, and threadbox/sandbox with the agent runtimes)
	deploy/sandbox-image/build.sh full

.PHONY: bot-image
bot-image: ## build the bot image threadbox/threadbox:latest offline (deploy/Dockerfile's final stage, Go build on the host)
	deploy/bot-image/build.sh --tag threadbox/threadbox:latest --version $(VERSION)

.PHONY: clean
clean: ## remove build output and local data (not Docker images or sandboxes)
	rm -rf bin data
