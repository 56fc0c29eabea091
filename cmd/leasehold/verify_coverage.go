package main

import (
	"fmt"
	"slices"
	"strings"
)

// What the verdict covers. Every package of the module (and of the modules
// verify runs checks in) is listed here with where its proof runs;
// TestCoverageListsEveryPackage holds the list to `go list`. Where is read
// from the check list: the checks whose tests are in the package, those of
// a default run and those only --full runs; a package no check's tests are
// in is proven by make test alone. Why says what exercises it and why the
// rest is left to make test: the model-based checks of one package drive
// the code of others (the runtime run drives package worker from package
// harness), which a list of test packages alone would not say.

// coverageRow is one package's line of the coverage: where its proof runs.
type coverageRow struct {
	Package string `json:"package"`
	// Verify and Full are the checks whose tests are in the package: in a
	// default run, and only with --full. Neither: make test alone.
	Verify []string `json:"verify,omitempty"`
	Full   []string `json:"full,omitempty"`
	Why    string   `json:"why"`
}

// coverageNote is a package of coverage and why its proof runs where it
// does; module is its module's directory ("" for this one).
type coverageNote struct {
	module, pkg, why string
}

var coverage = []coverageNote{
	{"", "./spec", "the contract's types and rules: fuzzed (fuzz), and run by every store check"},
	{"", "./model", "the model: explored exhaustively (explore), and the judge of every rapid, linearizability, runtime and scenario check"},
	{"", "./invariant", "the invariants the conformance suite and the doctor check: invariant-checker"},
	{"", "./impl/storetest", "the conformance suite itself: every conformance check runs it; its own helpers' tests run under make test"},
	{"", "./impl/sqlite", "the SQLite store: every test of the package (conformance), rapid, linearizability, runtime, scenarios, power loss"},
	{"", "./impl/sqlite/sqlitetest", "a test helper: no proof of its own"},
	{"", "./impl/postgres", "the PostgreSQL store: conformance, rapid, linearizability, runtime, scenarios, its runtime's faults, power loss; its own internals (concurrency, the announcer, plans, migrations, the coalesced path) with --full (postgres-store), as in make test"},
	{"", "./impl/postgres/pgtest", "a test helper (schemas, private clusters): its own tests run under make test"},
	{"", "./impl/postgres/pgcluster", "starts a private PostgreSQL server (pgtest's clusters, the probes' db-restart, bench --private-server): its own test runs under make test"},
	{"", "./impl/etcd", "the etcd store on a three-member cluster: its conformance and scenarios (etcd-suite), its property, linearizability under faults and runtime (etcd)"},
	{"", "./impl/etcd/etcdtest", "a test helper (the cluster): no proof of its own"},
	{"", "./impl/etcd/internal/member", "the etcd member process the tests start: exercised by every etcd check"},
	{"", "./impl/mutant", "the deliberately broken variants: the mutant checks (--full) show each is caught"},
	{"", "./harness", "the engine of rapid, linearizability and the runtime run; its own unit tests and the mutant checks' power run under make test and --full"},
	{"", "./harness/history", "the recorded history and its file format: every check's history is one (rapid, linearizability, runtime, scenarios); its unit tests (the clock rule) run under make test"},
	{"", "./harness/validate", "the judge of every recorded history (linearizability, runtime, scenarios, lincheck) and the races; its unit tests (the detectors) run under make test"},
	{"", "./harness/faults", "the fault plan, the RecordingStore and the barriers: driven by the runtime checks and the scenarios on every store"},
	{"", "./harness/report", "failed-history reports, timelines, kept failfiles and replay commands: written by every failing check, replayed by make replay; its unit tests run under make test"},
	{"", "./scenarios", "the race scenarios on each store (scenarios); the mutants they catch with --full"},
	{"", "./worker", "the worker runtime: driven by the runtime checks (harness) on every store, and its fault tests (runtime-faults: killed, paused, SIGSTOPped, PostgreSQL restarted); its unit tests run under make test"},
	{"", "./relay", "the outbox relay's failure paths, every test of the package (relay-faults): killed between publish and mark, NATS restarted, several relays, a publish failing for good"},
	{"", "./doctor", "a tool, not the contract: its checks on both stores run with --full, as in make test"},
	{"", "./httpadmit", "the HTTP edge: its tests (tenant isolation, bounded answers) run under make test, its mutant with --full"},
	{"", "./storeproto", "the store protocol's harness: its tests (the Go store served through it, broken children) run under make test; verify --store-cmd runs the checks on a port through it"},
	{"", "./storeproto/cmdtest", "the checks on a store command: verify --store-cmd"},
	{"", "./leaseholdtest", "the porting kit's one face: the etcd checks and make test-outside run through it"},
	{"", "./clock", "the clock and timers every check injects: make test"},
	{"", "./metrics", "the figures checks hand to verify: make test"},
	{"", "./migrations", "the SQL schema: applied by every store check"},
	{"", "./impl/postgres/pgcontainer", "a command that starts PostgreSQL in Docker for the tests, no proof of its own: lint builds and vets it"},
	{"", "./ui", "the operator UI (leasehold ui): its handlers under make test, the pages in a real browser under make test-ui (ui/browsertest)"},
	{"", "./timeline", "the lease timeline the UI and the linearizability reports draw: make test"},
	{"", "./internal/coalesce", "group commit for the PostgreSQL store's coalesced admissions: make test, and postgres-store with --full"},
	{"", "./internal/hang", "the checks' one guard against a hang: make test"},
	{"", "./internal/logwatch", "a test helper: make test"},
	{"", "./internal/doclinks", "the relative links of the repository's Markdown, held to the files and headings they name: make test"},
	{"", "./internal/protoschema", "the store protocol's published schema, held to the code: make test"},
	{"", "./internal/server", "make test"},
	{"", "./cmd/leasehold", "the command line and verify itself: make test"},
	{"", "./bench", "the benchmark, not a proof: make bench"},
	{"", "./bench/onerow", "the benchmark's one-row ceiling, not a proof: make bench"},
	{"", "./examples/httpservice", "the example service: make test"},
	{"", "./probe", "the peer probes (issue 41): make probe"},
	{"", "./probe/control", "the probes' control rows on leasehold's own stores: make probe"},
	{"", "./queueproto", "the queue-adapter protocol's wire types: make test"},
	{"powerloss", "./faultfs", "the fault-injecting filesystem: every test of the package (faultfs)"},
	{"powerloss", "./sqlite", "power losses under the SQLite store (power-loss)"},
	{"powerloss", "./postgres", "power losses under a private PostgreSQL cluster (power-loss)"},
	{"powerloss", "./jetstream", "power losses under the relay's JetStream (relay-power-loss)"},
	{"powerloss", "./ledger", "the power-loss checks' ledger of acknowledged writes: exercised by each power-loss check"},
}

// coverageRows is coverage with the checks of cs (all of leasehold's) read
// into each package's row.
func coverageRows(cs []check) []coverageRow {
	var rows []coverageRow
	for _, n := range coverage {
		row := coverageRow{Package: n.pkg, Why: n.why}
		if n.module != "" {
			row.Package = n.module + "/" + strings.TrimPrefix(n.pkg, "./")
		}
		for _, c := range cs {
			if c.Module != n.module || c.Package != n.pkg {
				continue
			}
			name := c.Name + "/" + c.Store
			switch {
			case c.Full && !slices.Contains(row.Full, name):
				row.Full = append(row.Full, name)
			case !c.Full && !slices.Contains(row.Verify, name):
				row.Verify = append(row.Verify, name)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// coverageSection is verify.md's account of what the verdict covers.
func coverageSection(rep verifyReport) string {
	if len(rep.Coverage) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## What the verdict covers\n\nPer package: the checks of a default run whose tests are in it, those only --full adds, and what exercises it. A package with neither is proven by make test alone, not by this verdict.\n\n| package | verify | --full | what proves it |\n|---|---|---|---|\n")
	for _, r := range rep.Coverage {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Package, strings.Join(r.Verify, ", "), strings.Join(r.Full, ", "), r.Why)
	}
	return b.String()
}
