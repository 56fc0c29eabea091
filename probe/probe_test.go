package probe

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/impl/postgres/pgcluster"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/probe/control"
	"github.com/leasehold/leasehold/queueproto"
)

// envControl, set to "store" or "store:variant", makes the test binary the
// control adapter, so the probes run against leasehold across real process
// boundaries without building the leasehold command.
const envControl = "LEASEHOLD_PROBE_CONTROL"

func TestMain(m *testing.M) {
	if spec := os.Getenv(envControl); spec != "" {
		store, broken, _ := strings.Cut(spec, ":")
		q, err := control.New(control.Options{Store: store, Broken: broken})
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(2)
		}
		if err := queueproto.Serve(context.Background(), os.Stdin, os.Stdout, q); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	pgtest.Main(m)
}

func controlSystem(t *testing.T, store, broken string) System {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	q, err := control.New(control.Options{Store: store, Broken: broken})
	if err != nil {
		t.Fatal(err)
	}
	spec := store
	if broken != "" {
		spec += ":" + broken
	}
	return System{Name: q.System(), Run: envControl + "=" + spec + " '" + exe + "'", Flag: "--system leasehold-" + store}
}

// env returns the environment for a store's row: PostgreSQL from pgtest
// (skipping, or failing under CI, without one).
func env(t *testing.T, store string) Env {
	e := Env{TmpDir: t.TempDir()}
	if store == control.Postgres {
		e.PostgresDSN = pgtest.DSN(t)
	}
	return e
}

// needsPrivateServer skips a probe that restarts a private PostgreSQL
// server when its binaries are missing (fails under CI).
func needsPrivateServer(t *testing.T, store string, probes []string) {
	if store != control.Postgres || !slices.Contains(probes, "db-restart") {
		return
	}
	if _, err := pgcluster.BinDir(); err != nil {
		if pgtest.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// TestControlRowsHold: leasehold's own stores hold every probe that applies
// to them, once each (leasehold probe runs each three times).
func TestControlRowsHold(t *testing.T) {
	for _, store := range []string{control.SQLite, control.Postgres} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			e := env(t, store)
			needsPrivateServer(t, store, ProbeNames())
			rep, err := ProbeAll(context.Background(), Config{Systems: []System{controlSystem(t, store, "")}, Runs: 1, Env: e})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range rep.Systems[0].Cells {
				switch {
				case c.Outcome == Holds:
				case c.Outcome == NotApplicable && applicableLater(store, c.Probe):
					t.Logf("%s: not applicable: %s", c.Probe, c.Why)
				default:
					t.Errorf("%s: %s: %s\n%s", c.Probe, c.Outcome, c.Why, steps(c))
				}
			}
		})
	}
}

// applicableLater lists the cells a control row may leave not applicable,
// with the reason in its hello: the SQLite store has no completion in the
// caller's transaction (ADR-042).
func applicableLater(store, probe string) bool {
	return store == control.SQLite && probe == "tx-complete-rollback"
}

func steps(c Cell) string {
	if len(c.Runs) == 0 {
		return ""
	}
	var b strings.Builder
	for _, s := range c.Runs[c.Example].Steps {
		b.WriteString("  " + s.Process + " " + s.What + "\n")
	}
	return b.String()
}

// bites is, for every probe, the broken control variant it must catch and
// the store it runs on.
var bites = []struct {
	probe, variant, store string
}{
	{"kill-worker", control.VariantCompleteOnClaim, control.SQLite},
	{"db-restart", control.VariantAckBeforeWrite, control.SQLite},
	{"stale-completion", control.VariantNoFencing, control.SQLite},
	{"stale-completion", control.VariantNoFencing, control.Postgres},
	{"double-start", control.VariantClaimLiveLeases, control.SQLite},
	{"dead-worker", control.VariantNoReaper, control.SQLite},
	{"retry-budget", control.VariantBudgetOffByOne, control.SQLite},
	{"cancel-vs-complete", control.VariantCancelReportsSuccess, control.SQLite},
	{"key-dedupe", control.VariantKeyIgnored, control.SQLite},
	{"tx-complete-rollback", control.VariantCompleteOutsideTx, control.Postgres},
	{"tx-enqueue-rollback", control.VariantEnqueueOutsideTx, control.Postgres},
	{"tx-enqueue-rollback", control.VariantEnqueueOutsideTx, control.SQLite},
}

// TestProbesBite: every probe fails on a deliberately broken variant of the
// control row, with a violation (not an adapter error, not a pass).
func TestProbesBite(t *testing.T) {
	for _, b := range bites {
		t.Run(b.probe+"/"+b.variant+"/"+b.store, func(t *testing.T) {
			t.Parallel()
			e := env(t, b.store)
			needsPrivateServer(t, b.store, []string{b.probe})
			rep, err := ProbeAll(context.Background(), Config{Systems: []System{controlSystem(t, b.store, b.variant)}, Probes: []string{b.probe}, Runs: 1, Env: e})
			if err != nil {
				t.Fatal(err)
			}
			c := rep.Systems[0].Cells[0]
			if c.Outcome != Unconfirmed || c.Violations != 1 || c.Exercised != 1 {
				t.Fatalf("%s on %s: %s (%s), want a violation\n%s", b.probe, b.variant, c.Outcome, c.Why, steps(c))
			}
			if len(c.Runs[0].Rows) == 0 {
				t.Errorf("the violation carries no rows")
			}
			t.Logf("caught: %s", c.Why)
		})
	}
}

// TestEveryProbeBites holds bites to Probes and to control.Variants: each
// probe has a variant, and each variant bites.
func TestEveryProbeBites(t *testing.T) {
	for _, p := range ProbeNames() {
		if !slices.ContainsFunc(bites, func(b struct{ probe, variant, store string }) bool { return b.probe == p }) {
			t.Errorf("probe %s has no broken variant in bites", p)
		}
	}
	for _, v := range control.Variants {
		if !slices.ContainsFunc(bites, func(b struct{ probe, variant, store string }) bool { return b.variant == v.Name }) {
			t.Errorf("variant %s bites no probe", v.Name)
		}
	}
}

// TestBadAdapterIsAFinding: an adapter that crashes, or answers garbage,
// fills its row with adapter errors that show its stderr; none holds.
func TestBadAdapterIsAFinding(t *testing.T) {
	good := controlSystem(t, control.SQLite, "")
	cases := []struct{ name, run, want string }{
		{"crash at hello", `echo 'panic: cannot connect' >&2; exit 2`, "panic: cannot connect"},
		{"garbage", `read l; echo 'hello world'; sleep 30`, "not a message"},
		{"crash mid-probe", `n=0; while read l; do n=$((n+1)); if [ $n -gt 3 ]; then echo 'segfault' >&2; exit 139; fi; echo "$l" >/dev/null; done`, "exit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sys := System{Name: good.Name, Run: c.run, Flag: "--adapter x"}
			if c.name == "crash mid-probe" {
				// The control adapter, killed after its third request.
				sys.Run = `n=0; ` + good.Run + ` | (while IFS= read -r l; do n=$((n+1)); printf '%s\n' "$l"; if [ $n -ge 4 ]; then echo 'segfault in the adapter' >&2; kill 0; fi; done)`
				c.want = "segfault in the adapter"
			}
			rep, err := ProbeAll(context.Background(), Config{Systems: []System{sys}, Probes: []string{"key-dedupe"}, Runs: 1, Env: Env{TmpDir: t.TempDir()}})
			if err != nil {
				t.Fatal(err)
			}
			cell := rep.Systems[0].Cells[0]
			if cell.Outcome != AdapterError {
				t.Fatalf("%s: %s, want an adapter error", c.name, cell.Outcome)
			}
			if !strings.Contains(cell.Why, c.want) {
				t.Errorf("the finding does not say %q:\n%s", c.want, cell.Why)
			}
		})
	}
}

// TestVerdict: a violation needs every exercised run and at least MinRuns;
// runs that did not exercise the race count for nothing.
func TestVerdict(t *testing.T) {
	V, H, N, A := Violated, Holds, NotExercised, AdapterError
	for _, tc := range []struct {
		runs []Outcome
		want Outcome
		rate string
	}{
		{[]Outcome{V, V, V}, Violated, "(3/3)"},
		{[]Outcome{V, N, V, V}, Violated, "(3/3)"},
		{[]Outcome{V, H, V}, Intermittent, "(2/3)"},
		{[]Outcome{V, V}, Unconfirmed, "(2/2)"},
		{[]Outcome{N, N, N}, NotExercised, ""},
		{[]Outcome{H, N, H, H}, Holds, ""},
		{[]Outcome{V, V, A}, AdapterError, ""},
	} {
		c := Cell{}
		for _, o := range tc.runs {
			c.Runs = append(c.Runs, Result{Outcome: o, Why: string(o)})
		}
		verdict(&c)
		if c.Outcome != tc.want || !strings.Contains(c.label(), tc.rate) {
			t.Errorf("runs %v: %s %q, want %s %s", tc.runs, c.Outcome, c.label(), tc.want, tc.rate)
		}
		if c.Outcome == Holds && !strings.Contains(c.Why, "1 more runs did not exercise") {
			t.Errorf("runs %v: the why %q does not count the runs that did not exercise the race", tc.runs, c.Why)
		}
	}
}

// TestReportRenders: a violated cell's section carries its steps, rows,
// replay command and references, in Markdown and HTML; JSON round-trips.
func TestReportRenders(t *testing.T) {
	p := Probes[0]
	c := Cell{System: "q", Probe: p.Name, Replay: "go run ./cmd/leasehold probe --system q --probe " + p.Name + " --runs 3",
		References: []queueproto.Reference{{Probe: p.Name, URL: "https://example.org/issue/1", Title: "the known issue"}}}
	for range 3 {
		c.Runs = append(c.Runs, Result{Outcome: Violated, Why: "lost <job>", Steps: []Step{{Seq: 1, Process: "C", What: "enqueue {\"n\":1}"}},
			Rows: map[string][]json.RawMessage{"J1 [7]": {json.RawMessage(`{"state":"gone"}`)}}})
	}
	verdict(&c)
	q, _ := control.New(control.Options{Store: control.SQLite})
	h := q.Hello()
	rep := &Report{Runs: 3, Probes: []Probe{p}, Outcomes: legend, Systems: []SystemRow{{System: System{Name: "q", Run: "x"}, Hello: &h, Cells: []Cell{c}}}}
	dir := t.TempDir()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(dir + "/peers.md")
	html, _ := os.ReadFile(dir + "/peers.html")
	for _, want := range []string{"violated (3/3), known", "#q-" + p.Name, c.Replay, `"state": "gone"`, "the known issue", "enqueue {\"n\":1}"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("peers.md lacks %q", want)
		}
	}
	for _, want := range []string{`class="violated"`, "lost &lt;job&gt;", "the known issue", "&#34;state&#34;: &#34;gone&#34;"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("peers.html lacks %q", want)
		}
	}
	var back Report
	raw, _ := os.ReadFile(dir + "/peers.json")
	if err := json.Unmarshal(raw, &back); err != nil || back.Systems[0].Cells[0].Outcome != Violated {
		t.Errorf("peers.json: %v, %+v", err, back.Systems)
	}
}
