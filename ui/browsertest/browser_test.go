// Package browsertest drives `leasehold ui` in a real browser (Debian's
// chromium, through chromedp): the pages load and their counts are live, a
// re-claimed run's timeline shows both generations, an action of a UI
// without an actor is refused and changes nothing, and after a cancel
// through the page the page and the store both say cancelled. It is a
// module of its own so that the library never requires chromedp.
//
// Without chromium it skips loudly, except under CI=true, where that is a
// failure. Built with -tags leasehold_mutants, TestChecksCatchBrokenUIs
// runs each check on a UI broken for it and requires it to fail.
package browsertest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/doctor"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/ui"
)

// patience guards each check against a hang; nothing waits for it to
// pass: every wait is for an element or a condition in the page.
const patience = 60 * time.Second

// chromium finds the browser: $LEASEHOLD_CHROMIUM, else chromium on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LEASEHOLD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH (install it: apt-get install -y chromium, or set LEASEHOLD_CHROMIUM)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + ": under CI the browser test must run")
	}
	t.Skip("SKIPPED, NOT RUN: " + msg)
	return ""
}

// env is one store with an injected clock behind two UIs: one read-only,
// one acting as ops-browser.
type env struct {
	t        *testing.T
	ctx      context.Context // the browser's
	store    *sqlite.Store
	clock    *clock.Manual
	target   *doctor.Target
	readOnly string // base URLs
	acting   string
}

const t0 = 1_700_000_000_000

// startBrowser starts chromium for a test's checks; each check opens a tab
// of its own (newEnv).
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	return ctx
}

func newEnv(t *testing.T, browser context.Context) *env {
	t.Helper()
	e := &env{t: t, clock: clock.NewManual(t0)}
	bg := context.Background()
	var err error
	e.store, err = sqlite.Open(bg, filepath.Join(t.TempDir(), "ui.db"), sqlite.Options{Config: spec.DefaultConfig(), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	if e.target, err = doctor.New(e.store, "browser test"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		actor string
		url   *string
	}{{"", &e.readOnly}, {"ops-browser", &e.acting}} {
		h, err := ui.New(ui.Options{Target: e.target, Actor: s.actor, Doctor: doctor.Options{Clock: e.clock}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		*s.url = srv.URL
	}
	ctx, cancel := chromedp.NewContext(browser) // a tab of its own
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // opens the tab, for the context's lifetime
		t.Fatalf("opening a tab: %v", err)
	}
	e.ctx = ctx
	return e
}

// failure is a check's verdict, told apart from a browser that did not
// answer: a broken UI must be caught by a verdict.
type failure struct{ error }

func failf(format string, args ...any) error { return failure{fmt.Errorf(format, args...)} }

// do runs browser steps under the hang guard.
func (e *env) do(what string, steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(e.ctx, patience)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		return fmt.Errorf("%s: %w (waited at most %s)", what, err, patience)
	}
	return nil
}

// value runs one browser action that reads a value, under the hang guard.
func value[T any](e *env, what string, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(e.ctx, patience)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		err = fmt.Errorf("%s: %w (waited at most %s)", what, err, patience)
	}
	return v, err
}

// text reads the text of the first element sel matches (waiting for it).
func (e *env) text(sel string) (string, error) {
	return value(e, "reading "+sel, chromedp.Text(chromedp.CSS(sel)))
}

func (e *env) create(tenant, run string) {
	e.t.Helper()
	if _, err := e.store.CreateRun(context.Background(), spec.CreateRunRequest{Tenant: tenant, Operation: "work",
		IdempotencyKey: "k-" + run, RunID: run, Payload: []byte(`{}`), MaxAttempts: 3}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) claim(tenant, worker string) {
	e.t.Helper()
	ls, err := e.store.Claim(context.Background(), spec.ClaimRequest{Tenant: tenant, Worker: worker, LeaseMs: 30_000, Limit: 1})
	if err != nil || len(ls) != 1 {
		e.t.Fatalf("claim by %s: %v, %v", worker, ls, err)
	}
}

func (e *env) state(tenant, run string) spec.RunState {
	e.t.Helper()
	r, err := e.store.GetRun(context.Background(), tenant, run)
	if err != nil {
		e.t.Fatal(err)
	}
	return r.State
}

// checkPagesLoad: from the home page to a tenant's runs (its run listed,
// another tenant's not), its count live: a run admitted after the page
// loaded shows in the queued count without a reload; the doctor's page.
func checkPagesLoad(e *env) error {
	e.create("acme", "a-1")
	e.create("beta", "b-1")
	if err := e.do("home page to acme's runs",
		chromedp.Navigate(e.readOnly+"/"),
		chromedp.SendKeys(chromedp.CSS("#tenant-input"), "acme"),
		chromedp.Submit(chromedp.CSS("#tenant-input")),
		chromedp.WaitVisible(chromedp.CSS("#runs")),
	); err != nil {
		return err
	}
	runs, err := e.text("#runs")
	if err != nil {
		return err
	}
	queued, err := e.text(`[data-count="queued"]`)
	if err != nil {
		return err
	}
	if !strings.Contains(runs, "a-1") || strings.Contains(runs, "b-1") || queued != "1" {
		return failf("acme's runs page lists %q with queued count %q; want a-1 only, count 1", runs, queued)
	}
	// A run admitted now must show at the second refresh from now (the
	// first may have been under way): wait for it, then read the count.
	seen, err := value(e, "the refreshes so far", chromedp.Evaluate[int](`Number(document.getElementById("counts").dataset.refreshed || 0)`))
	if err != nil {
		return err
	}
	e.create("acme", "a-2")
	if _, err := value(e, "two refreshes of the counts",
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`Number(document.getElementById("counts").dataset.refreshed || 0) >= %d`, seen+2),
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(patience))); err != nil {
		return err
	}
	if queued, err = e.text(`[data-count="queued"]`); err != nil {
		return err
	}
	if queued != "2" {
		return failf("two refreshes after a second run was admitted the queued count says %q, want 2: the counts are not live", queued)
	}
	if err := e.do("the doctor's page", chromedp.Navigate(e.readOnly+"/tenants/acme/doctor")); err != nil {
		return err
	}
	verdict, err := e.text("#verdict")
	if err != nil {
		return err
	}
	if verdict == "" {
		return failf("the doctor's page has no verdict")
	}
	return nil
}

// checkTimeline: a run claimed by w-one, its lease let expire on the
// injected clock, re-claimed by w-two: its page's timeline shows
// generation 1 (w-one, expired) and generation 2 (w-two, holding).
func checkTimeline(e *env) error {
	e.create("acme", "r-re")
	e.claim("acme", "w-one")
	e.clock.Advance(31_000)
	e.claim("acme", "w-two")
	if err := e.do("the re-claimed run's page",
		chromedp.Navigate(e.readOnly+"/tenants/acme/runs/r-re"),
		chromedp.WaitVisible(chromedp.CSS("#timeline svg")),
	); err != nil {
		return err
	}
	rows, err := value(e, "the timeline's generations", chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('#timeline table.generations tr[data-generation]')).map(r => r.innerText.replace(/\s+/g, ' ').trim())`))
	if err != nil {
		return err
	}
	want := []string{
		"1 w-one 1700000000000 1700000031000 expired",
		"2 w-two 1700000031000 1700000061000 (expiry) holds the lease",
	}
	if strings.Join(rows, "|") != strings.Join(want, "|") {
		return failf("the timeline's generations are %q, want %q", rows, want)
	}
	bars, err := value(e, "the timeline's bars", chromedp.Evaluate[int](`document.querySelectorAll('#timeline svg g.generation').length`))
	if err != nil {
		return err
	}
	if bars != 2 {
		return failf("the timeline draws %d generations, want 2", bars)
	}
	return nil
}

// checkReadOnlyRefuses: the cancel button of a UI started without an
// actor answers read_only, and the run is unchanged.
func checkReadOnlyRefuses(e *env) error {
	e.create("acme", "r-ro")
	if err := e.do("the run's page on the read-only UI", chromedp.Navigate(e.readOnly+"/tenants/acme/runs/r-ro")); err != nil {
		return err
	}
	mode, err := e.text("#mode")
	if err != nil {
		return err
	}
	if err := e.do("cancel through the read-only UI",
		chromedp.Click(chromedp.CSS("#cancel")),
		chromedp.WaitVisible(chromedp.CSS("#error, #flash")),
	); err != nil {
		return err
	}
	code, err := value(e, "the answer's code", chromedp.Evaluate[string](`(document.querySelector('#error') || {dataset: {}}).dataset.code || "no refusal"`))
	if err != nil {
		return err
	}
	if !strings.Contains(mode, "read-only") {
		return failf("the read-only UI says %q", mode)
	}
	if code != "read_only" {
		return failf("a cancel without an actor answered %q, want read_only", code)
	}
	if st := e.state("acme", "r-ro"); st != spec.RunQueued {
		return failf("a refused cancel left the run %s, want queued", st)
	}
	return nil
}

// checkCancelReflected: the acting UI's cancel button cancels the run
// (the store says so, the audit names the actor), and the page it lands on
// says cancelled, as does the runs page.
func checkCancelReflected(e *env) error {
	e.create("acme", "r-cx")
	if err := e.do("the run's page on the acting UI", chromedp.Navigate(e.acting+"/tenants/acme/runs/r-cx")); err != nil {
		return err
	}
	before, err := e.text("#run-state")
	if err != nil {
		return err
	}
	if err := e.do("cancel through the acting UI",
		chromedp.Click(chromedp.CSS("#cancel")),
		chromedp.WaitVisible(chromedp.CSS("#flash, #error")),
	); err != nil {
		return err
	}
	after, err := e.text("#run-state")
	if err != nil {
		return err
	}
	if err := e.do("the cancelled runs", chromedp.Navigate(e.acting+"/tenants/acme/?state=cancelled")); err != nil {
		return err
	}
	listed, err := e.text("#runs")
	if err != nil {
		return err
	}
	if st := e.state("acme", "r-cx"); st != spec.RunCancelled {
		return failf("after the cancel the store says %s", st)
	}
	if before != "queued" || after != "cancelled" || !strings.Contains(listed, "r-cx") {
		return failf("the run's page said %q before the cancel and %q after (the cancelled runs: %q); want queued, then cancelled", before, after, listed)
	}
	audit, err := doctor.ReadAudit(context.Background(), e.target)
	if err != nil {
		return err
	}
	if n := len(audit); n < 2 || audit[n-1].Actor != "ops-browser" || audit[n-1].Action != "cancel" || audit[n-1].RunID != "r-cx" || audit[n-1].Outcome != doctor.OutcomeApplied {
		return failf("the audit trail does not end with ops-browser's cancel of r-cx: %+v", audit)
	}
	return nil
}

// checks are the browser test's checks, each with the broken UI it must
// catch (impl/mutant).
var checks = []struct {
	name   string
	check  func(*env) error
	mutant string
}{
	{"PagesLoad", checkPagesLoad, "ui_counts_cached"},
	{"TimelineOfAReclaimedRun", checkTimeline, "ui_timeline_last_generation"},
	{"ReadOnlyRefusesActions", checkReadOnlyRefuses, "ui_ignores_actor"},
	{"CancelReflected", checkCancelReflected, "ui_run_page_cached"},
}

func TestBrowser(t *testing.T) {
	browser := startBrowser(t)
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, browser)
			if err := c.check(e); err != nil {
				t.Fatal(err)
			}
		})
	}
}
