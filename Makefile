# leasehold — see README.md. Every target works on a fresh clone with Go 1.26.
# PostgreSQL suites use LEASEHOLD_PG_DSN (or DATABASE_URL), else a private cluster
# from the local PostgreSQL binaries (Docker: go run ./impl/postgres/pgcontainer
# prints a DSN); `make verify` and CI=true make a missing database a failure.

SHELL     := /bin/bash
GO        ?= go
# The packages of the library and its tooling, in the modules of go.work that
# have no target of their own (docs/MODULES.md): make test, test-race, lint and
# fuzz cover them. powerloss runs under verify, bench/river under bench,
# peers/river under probe, ports/go-outside under test-outside.
PKGS      ?= ./... ./bench/... ./cmd/leasehold/... ./impl/etcd/... ./impl/postgres/pgcontainer/... ./relay/...
# Every module of go.work (absolute directories), each tidy and vet clean on its own.
MODULES    = $(shell $(GO) list -m -f '{{.Dir}}')
BUDGET    ?= 5m
FUZZTIME  ?= 10s
# Runs write to reports/latest (not committed); `make evidence` rewrites the
# committed reports/verify.{json,md}.
REPORTS   ?= reports/latest
TESTFLAGS ?=
# A guard against a hang, never a judgement of a slow machine: go test's own
# default (10m a package) failed harness and impl/postgres under load.
TESTTIMEOUT ?= 60m
# verify: MIN_DEPTH is the depth below which a run is INCOMPLETE (0: none; see
# docs/VERIFY.md), FULL=1 adds the fixed work make test also runs.
MIN_DEPTH ?= 0
FULL      ?=
VERIFYFLAGS = --budget $(BUDGET) --min-depth $(MIN_DEPTH) $(if $(filter 1,$(FULL)),--full)

.PHONY: all test test-race verify verify-oversubscribed evidence replay demo fmt lint fuzz bench clean verify-port verify-port-broken test-outside test-ui test-python test-peers-node probe probe-evidence

all: test

## test: every unit, conformance, model and property test (short budgets);
## ends with passed / failed / skipped per store (leasehold testsum)
test:
	set -o pipefail; $(GO) test -json -count=1 -timeout $(TESTTIMEOUT) $(TESTFLAGS) $(PKGS) | $(GO) run ./cmd/leasehold testsum

## test-race: the same under the race detector
test-race:
	$(GO) test -race -count=1 -timeout $(TESTTIMEOUT) $(PKGS)

## verify: the main job for CI; writes $(REPORTS)/verify.json and verify.md
## (MIN_DEPTH=x, FULL=1: see above)
verify:
	@echo "make verify: compiling cmd/leasehold (a cold build cache takes minutes; verify then shows its progress)"
	LEASEHOLD_REQUIRE_PG=1 $(GO) run ./cmd/leasehold verify $(VERIFYFLAGS) --reports $(REPORTS)

## verify-oversubscribed: a check of verify itself: make verify, then again beside CPU-burning
## processes (OVERSUBSCRIBE per core, default 4), requiring the same verdicts; the same for
## the Python port (PORT_CMD). Reports in $(REPORTS)/{quiet,oversubscribed,port-quiet,port-oversubscribed}
OVERSUBSCRIBE ?= 4
verify-oversubscribed:
	-LEASEHOLD_REQUIRE_PG=1 $(GO) run ./cmd/leasehold verify --budget $(BUDGET) --min-depth 0 --reports $(REPORTS)/quiet
	LEASEHOLD_REQUIRE_PG=1 $(GO) run ./cmd/leasehold verify --budget $(BUDGET) --min-depth 0 --reports $(REPORTS)/oversubscribed \
	  --oversubscribe $(OVERSUBSCRIBE) --same-verdicts-as $(REPORTS)/quiet/verify.json
	-$(GO) run ./cmd/leasehold verify --store-cmd '$(PORT_CMD)' --budget $(PORT_BUDGET) --reports $(REPORTS)/port-quiet
	$(GO) run ./cmd/leasehold verify --store-cmd '$(PORT_CMD)' --budget $(PORT_BUDGET) --reports $(REPORTS)/port-oversubscribed \
	  --oversubscribe $(OVERSUBSCRIBE) --same-verdicts-as $(REPORTS)/port-quiet/verify.json

## evidence: verify, writing the committed reports/verify.{json,md}
evidence:
	LEASEHOLD_REQUIRE_PG=1 $(GO) run ./cmd/leasehold verify $(VERIFYFLAGS) --reports reports

## replay: replay every kept failing seed under reports/failfiles (or FILE=path)
replay:
	$(GO) run ./cmd/leasehold replay $(FILE)

## demo: the companion example on a fresh SQLite file
demo:
	$(GO) run ./cmd/leasehold demo

## fuzz: a short run of every fuzz target (FUZZTIME each)
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; $(GO) test $$pkg -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME); \
	  done; \
	done

## fmt: format the code
fmt:
	gofmt -w $$(git ls-files '*.go')

## lint: gofmt, go vet (also with the mutant build tag), and every module of go.work on its
## own, as a user builds it (GOWORK=off: through its go.mod's replace lines): tidy and vet clean
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags leasehold_mutants $(PKGS)
	@set -e; for m in $(MODULES); do \
	  echo "lint: $${m#$(CURDIR)/}: go mod tidy -diff, go vet (GOWORK=off)"; \
	  (cd $$m && GOWORK=off $(GO) mod tidy -diff && GOWORK=off $(GO) vet ./...) || \
	    { echo "lint: module $$m is untidy or fails vet on its own: run go mod tidy there (GOWORK=off)"; exit 1; }; \
	done
	@# The browser test's broken UIs build with the mutant tag too.
	cd ui/browsertest && GOWORK=off $(GO) vet -tags leasehold_mutants ./...

## bench: leasehold against River (PostgreSQL, SQLite) and the database's ceiling ($(REPORTS)/bench.{json,md,html};
## REPORTS=reports for the committed evidence); BENCHFLAGS=--quick for the
## under-3-minutes run (PostgreSQL: LEASEHOLD_PG_DSN)
BENCHFLAGS ?=
bench:
	$(GO) run ./cmd/leasehold bench --reports $(REPORTS) $(BENCHFLAGS)

## probe: the probes (docs/ADAPTERS.md) on leasehold's control rows and every peers/*/probe.json,
## each cell 3 times: $(REPORTS)/peers.{md,json,html}; PROBEFLAGS=--system river,--probe … to narrow
## (PostgreSQL: LEASEHOLD_PG_DSN; Redis: LEASEHOLD_REDIS_URL, default redis://127.0.0.1:6379)
PROBEFLAGS ?=
LEASEHOLD_REDIS_URL ?= redis://127.0.0.1:6379
probe:
	LEASEHOLD_REDIS_URL=$(LEASEHOLD_REDIS_URL) $(GO) run ./cmd/leasehold probe --reports $(REPORTS) $(PROBEFLAGS)

## probe-evidence: make probe, writing the committed reports/peers.{md,json,html}
probe-evidence:
	LEASEHOLD_REDIS_URL=$(LEASEHOLD_REDIS_URL) $(GO) run ./cmd/leasehold probe --reports reports $(PROBEFLAGS)

## verify-port: the checks on a store command through the store protocol (docs/PROTOCOL.md);
## PORT_CMD defaults to the Python port, PORT_BUDGET to 2m; reports in $(REPORTS)/port
PORT_CMD          ?= python3 ports/python-sqlite/store.py
PORT_BUDGET       ?= 2m
PORT_BROKEN_BUDGET ?= 1m
verify-port:
	$(GO) run ./cmd/leasehold verify --store-cmd '$(PORT_CMD)' --budget $(PORT_BUDGET) --reports $(REPORTS)/port

## verify-port-broken: every deliberately broken variant of the Python port must be caught
verify-port-broken:
	ports/python-sqlite/check_broken.sh $(PORT_BROKEN_BUDGET) $(REPORTS)/port-broken

## test-outside: a module of its own runs the whole proof through leaseholdtest alone
## (GOWORK=off: as an outside user builds it, from its own go.mod)
test-outside:
	cd ports/go-outside && GOWORK=off $(GO) test -count=1 -timeout $(TESTTIMEOUT) $(TESTFLAGS) ./...

## test-ui: the operator UI (leasehold ui) in a real browser, Debian's chromium driven through
## chromedp (ui/browsertest, a module of its own): its checks, then each check on a UI broken
## for it (a leasehold_mutants build), which must fail. Without chromium it skips, loudly (CI=true: fails)
test-ui:
	cd ui/browsertest && $(GO) test -count=1 -timeout $(TESTTIMEOUT) $(TESTFLAGS) ./...
	cd ui/browsertest && $(GO) test -count=1 -timeout $(TESTTIMEOUT) -tags leasehold_mutants -run TestChecksCatchBrokenUIs $(TESTFLAGS) ./...

## test-python: the Python port's own tests (RFC 8785 vectors, fingerprint, payloads)
test-python:
	python3 -m unittest discover -s ports/python-sqlite -p 'test_*.py'

## test-peers-node: the Node.js peer adapters (peers/pg-boss, …), each installed from its
## package-lock.json and driven through docs/ADAPTERS.md against real servers
PEERS_NODE ?= pg-boss graphile-worker bullmq
test-peers-node:
	set -e; for p in $(PEERS_NODE); do \
	  echo "== peers/$$p"; \
	  (cd peers/$$p && npm ci --no-audit --no-fund --loglevel=error && node --test --test-concurrency=1 test/); \
	done

clean:
	rm -rf reports/latest reports/tmp
