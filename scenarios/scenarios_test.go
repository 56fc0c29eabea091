package scenarios

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/internal/hang"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// sqliteOpener opens the scenario's stores on a fresh SQLite file of t.
func sqliteOpener(t testing.TB) Opener { return FromFactory(t, sqlitetest.Factory) }

// postgresOpener opens the scenario's stores on a fresh schema of the test
// server (dropped when t ends). It skips loudly without PostgreSQL, and
// fails instead under CI=true or LEASEHOLD_REQUIRE_PG=1.
func postgresOpener(t testing.TB) Opener { return FromFactory(t, pgtest.Factory) }

// loadAll returns the corpus; a file that does not load fails t.
func loadAll(t testing.TB) []*Scenario {
	t.Helper()
	corpus, err := Corpus()
	if err != nil {
		t.Fatal(err)
	}
	return corpus
}

func reportOf(res *Result) string {
	var b bytes.Buffer
	res.Report(&b)
	return b.String()
}

// scenarioRaces are the races the corpus must exercise between them.
var scenarioRaces = []validate.Race{validate.RaceContended, validate.RaceCommittedNotReturned, validate.RaceStaleWriteRefused,
	validate.RaceLeaseReclaimed, validate.RaceFaultRolledBack, validate.RaceUnknownOutcome, validate.RaceCancelVsFinish,
	validate.RaceWaitedForLock}

// TestScenarioCoverage holds the corpus to what it must contain: the named
// races of the brief, each naming the races it exercises (so the vacuity
// guard has something to check), and every race kind used somewhere.
func TestScenarioCoverage(t *testing.T) {
	required := []string{
		"companion_example", "pause_expire_reclaim_resume", "cancel_vs_complete_complete_wins",
		"cancel_vs_complete_cancel_wins", "duplicate_create_same_fingerprint",
		"duplicate_create_different_fingerprint", "retry_budget_vs_reap_retry_first",
		"retry_budget_vs_reap_reap_first", "retry_budget_vs_reclaim", "renewal_racing_expiry",
		"shutdown_while_leased", "stale_worker_every_write", "same_worker_reclaims_own_lease", "unknown_outcome",
	}
	byName := map[string]*Scenario{}
	used := map[validate.Race]bool{}
	for _, sc := range loadAll(t) {
		if path.Base(sc.File) != sc.Name+".json" {
			t.Errorf("%s: the file should be named after the scenario, %s.json", sc.File, sc.Name)
		}
		byName[sc.Name] = sc
		// A kept failure (kept_*, a failing rapid seed made a scenario) is
		// the sequence rapid found, with no race of its own to name.
		if len(sc.Races) == 0 && sc.Name != "companion_example" && !strings.HasPrefix(sc.Name, "kept_") {
			t.Errorf("scenario %s names no race: every race scenario must say which races it exercises", sc.Name)
		}
		for _, r := range sc.Races {
			used[r] = true
		}
	}
	for _, name := range required {
		if byName[name] == nil {
			t.Errorf("scenario %s is missing from testdata/", name)
		}
	}
	for _, r := range scenarioRaces {
		if !used[r] {
			t.Errorf("no scenario names race %s", r)
		}
	}
}

// edit loads testdata/name.json as generic JSON, applies change and parses
// the result.
func edit(t *testing.T, name string, change func(sc map[string]any)) *Scenario {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	change(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Parse(out)
	if err != nil {
		t.Fatalf("the edited scenario does not load: %v", err)
	}
	return sc
}

// step returns step i (1-based) of a generic scenario.
func step(m map[string]any, i int) map[string]any { return m["steps"].([]any)[i-1].(map[string]any) }

// finalRun returns final.runs[id] of a generic scenario.
func finalRun(m map[string]any, id string) map[string]any {
	return m["final"].(map[string]any)["runs"].(map[string]any)[id].(map[string]any)
}

// TestRunnerReportsMismatches proves the runner can fail: each case breaks
// one expectation of a passing scenario (or names a race that does not
// happen) and must produce a mismatch that says what was expected and got.
func TestRunnerReportsMismatches(t *testing.T) {
	cases := []struct {
		name     string
		file     string
		change   func(m map[string]any)
		wantStep int
		want     []string // substrings of one mismatch
	}{
		{"sync error code", "pause_expire_reclaim_resume",
			func(m map[string]any) { step(m, 7)["expect"] = map[string]any{"ok": true} },
			7, []string{"A: complete lease=a1", "expected ok, got error lost_lease"}},
		{"sync ok field", "companion_example",
			func(m map[string]any) {
				step(m, 2)["expect"].(map[string]any)["ok"].(map[string]any)["replayed"] = false
			},
			2, []string{"replayed: expected false, got true"}},
		{"claimed lease generation", "pause_expire_reclaim_resume",
			func(m map[string]any) {
				step(m, 5)["expect"].(map[string]any)["ok"].([]any)[0].(map[string]any)["generation"] = 3
			},
			5, []string{"[0].generation: expected 3, got 2"}},
		{"claimed lease count", "retry_budget_vs_reap_retry_first",
			func(m map[string]any) {
				step(m, 5)["expect"] = map[string]any{"ok": []any{map[string]any{"run_id": "r1"}}}
			},
			5, []string{"result: expected 1 element(s)", "got []"}},
		{"awaited loser's state", "cancel_vs_complete_complete_wins",
			func(m map[string]any) { step(m, 10)["expect"].(map[string]any)["error_state"] = "cancelled" },
			10, []string{"expected error already_terminal (state cancelled), got error already_terminal (state completed)"}},
		{"result", "unknown_outcome",
			func(m map[string]any) {
				step(m, 9)["expect"].(map[string]any)["ok"].(map[string]any)["result"] = map[string]any{"v": 2}
			},
			9, []string{`result: expected {"v":2}, got {"v":1}`}},
		{"final events", "cancel_vs_complete_cancel_wins",
			func(m map[string]any) {
				finalRun(m, "r1")["events"] = []any{"run_queued", "run_cancelled", "run_completed"}
				delete(finalRun(m, "r1"), "event_payloads")
			},
			FinalStep, []string{"run r1: events: expected [run_queued run_cancelled run_completed], got [run_queued run_cancelled]"}},
		{"final generation", "shutdown_while_leased",
			func(m map[string]any) { finalRun(m, "r1")["generation"] = 4 },
			FinalStep, []string{"run r1: generation: expected 4, got 3"}},
		{"final attempt outcomes", "retry_budget_vs_reclaim",
			func(m map[string]any) { finalRun(m, "r1")["attempt_outcomes"] = []any{"retried", "dead"} },
			FinalStep, []string{"attempt_outcomes (by generation): expected [retried dead], got [expired dead]"}},
		{"final effects", "stale_worker_every_write",
			func(m map[string]any) {
				finalRun(m, "r1")["effects"].([]any)[0].(map[string]any)["provider_ref"] = "msg-A"
			},
			FinalStep, []string{`effects: expected [{email/e-1 succeeded gen 2 ref "msg-A"}`, `got [{email/e-1 succeeded gen 2 ref "msg-1"}`}},
		{"final event payload", "retry_budget_vs_reap_reap_first",
			func(m map[string]any) {
				finalRun(m, "r1")["event_payloads"].([]any)[1] = map[string]any{"error_code": "flaky_again", "generation": 2}
			},
			FinalStep, []string{`event 2 (run_failed) payload: expected {"error_code":"flaky_again","generation":2}, got {"error_code":"lease_expired","generation":2}`}},
		{"a run the final state does not list", "duplicate_create_same_fingerprint",
			func(m map[string]any) {
				step(m, 3)["idempotency_key"] = "order-8"
				step(m, 6)["expect"] = map[string]any{"ok": true}
				m["final"].(map[string]any)["absent"] = []any{}
			},
			FinalStep, []string{"the store holds run acme/r2 (state queued), which final.runs does not list"}},
		{"a run expected absent", "duplicate_create_different_fingerprint",
			func(m map[string]any) { m["final"].(map[string]any)["absent"] = []any{"r2", "r1x"} },
			0, nil}, // r1x is absent: passes (control case)
		{"vacuity: named race never happens", "companion_example",
			func(m map[string]any) { m["races"] = []any{"stale_write_refused"} },
			0, []string{`vacuity: the scenario names race "stale_write_refused" but it never happened`}},
		{"vacuity: the competitor started after the release", "cancel_vs_complete_complete_wins",
			func(m map[string]any) {
				// Move the cancel after the resume: no overlap, so "contended" is vacuous.
				s := m["steps"].([]any)
				cancel := s[6]
				s = slices.Delete(s, 6, 7)
				s = slices.Insert(s, 7, cancel)
				m["steps"] = s
			},
			0, []string{`vacuity: the scenario names race "contended" but it never happened`}},
		{"vacuity: the competitor never waited for the lock", "cancel_blocked_behind_complete",
			func(m map[string]any) {
				// Let A commit and return before the cancel starts, and
				// drop await_blocked: the cancel waits for nothing.
				s := m["steps"].([]any)
				m["steps"] = []any{s[0], s[1], s[2], s[3], s[4], s[7], s[8], s[9], s[5], s[10]}
			},
			0, []string{`vacuity: the scenario names race "waited_for_lock" but it never happened`}},
		{"pause never reached", "pause_expire_reclaim_resume",
			func(m map[string]any) {
				// A's stale complete (step 7) is refused before it writes
				// anything: it never reaches before_commit, so a scenario
				// that holds it there describes a race that cannot happen.
				s := m["steps"].([]any)
				c := step(m, 7)
				delete(c, "expect")
				c["async"], c["pause_at"] = "a-stale", "before_commit"
				s = slices.Insert(s, 7, any(map[string]any{"op": "await_arrival", "of": "a-stale"}),
					any(map[string]any{"op": "resume", "of": "a-stale"}),
					any(map[string]any{"op": "await", "of": "a-stale", "expect": map[string]any{"error": "lost_lease"}}))
				m["steps"] = s
			},
			8, []string{"expected a-stale to be held at before_commit, but it returned first (error lost_lease", "the race did not happen"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sc := edit(t, tc.file, tc.change)
			res := Run(context.Background(), sc, sqliteOpener(t))
			if tc.want == nil {
				if !res.OK() {
					t.Fatalf("control case should pass:\n%s", reportOf(res))
				}
				return
			}
			if res.OK() {
				t.Fatalf("a broken expectation passed: the runner cannot fail\n%s", reportOf(res))
			}
			for _, m := range res.Mismatches {
				if m.Step != tc.wantStep {
					continue
				}
				hit := true
				for _, w := range tc.want {
					hit = hit && strings.Contains(m.Message, w)
				}
				if hit {
					return
				}
			}
			t.Fatalf("no mismatch at step %d containing %q; got:\n%s", tc.wantStep, tc.want, reportOf(res))
		})
	}
}

// TestDeadlockGuard: awaiting an operation that waits for a held one,
// before releasing the held one, can never finish. The guard must stop the
// scenario and list what is pending, and Run must still return (the held
// operations are cancelled and drained).
func TestDeadlockGuard(t *testing.T) {
	sc := edit(t, "cancel_vs_complete_complete_wins", func(m map[string]any) {
		s := m["steps"].([]any)
		// await api-cancel (step 10) before resume a-complete (step 8).
		m["steps"] = []any{s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[9], s[7], s[8]}
	})
	// The loader accepts this order: the cancel is not held, so awaiting it
	// is legal; only running it shows that it waits for the held completion.
	// The guard fires once the runner waits at the await of step 8, from
	// which the scenario cannot go on: not after some time.
	res := runGuardedAt(sc, sqliteOpener(t), 8)
	if res.OK() || !res.Stuck {
		t.Fatalf("a deadlocked scenario was not stopped by the guard:\n%s", reportOf(res))
	}
	msg := res.Mismatches[0].String()
	for _, want := range []string{"step 8", "deadlock guard", "await api-cancel",
		`step 4 A: complete lease=a1 result={"done":true} [async a-complete pause_at=before_commit] (async a-complete): held at before_commit, not resumed`,
		"step 7 api: cancel run_id=r1 reason=user_abort [async api-cancel] (async api-cancel): running (not returned)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the deadlock report should contain %q; got:\n%s", want, msg)
		}
	}
}

// TestParseRejects: strict decoding, with errors that name the problem.
func TestParseRejects(t *testing.T) {
	base := func(steps string) string {
		return `{"name":"x","description":"d","config":"default","tenant":"acme","start":0,"steps":[` + steps +
			`],"final":{"runs":{"r1":{"state":"queued","job_state":"queued","generation":0,"attempts":0,"events":["run_queued"],"attempt_outcomes":[],"effects":[]}}}}`
	}
	create := `{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","expect":{"ok":true}}`
	asyncCreate := `{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c"}`
	awaitC := `{"op":"await","of":"c","expect":{"ok":true}}`
	claim := `{"op":"claim","client":"A","lease_ms":10,"bind":["a1"],"expect":{"ok":true}}`
	cases := []struct {
		name, body, want string
	}{
		{"unknown top-level field", strings.Replace(base(create), `"start":0`, `"start":0,"seed":1`, 1), `unknown field "seed"`},
		{"unknown step field", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","colour":1,"expect":{"ok":true}}`), `does not belong to this op`},
		{"field of another op", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","lease":"a1","expect":{"ok":true}}`), `create_run: field "lease" does not belong to this op`},
		{"unknown op", base(`{"op":"teleport"}`), `unknown op "teleport"`},
		{"missing required field", base(`{"op":"create_run","client":"api","run_id":"r1","expect":{"ok":true}}`), `create_run: field "idempotency_key" is required`},
		{"missing expect", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k"}`), "expect is required"},
		{"missing client", base(`{"op":"create_run","run_id":"r1","idempotency_key":"k","expect":{"ok":true}}`), "client"},
		{"duplicate key", base(`{"op":"create_run","op":"claim","client":"api","run_id":"r1","idempotency_key":"k","expect":{"ok":true}}`), `duplicate key "op"`},
		{"trailing data", base(create) + "{}", "trailing data"},
		{"ok false", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","expect":{"ok":false}}`), `"ok" must be true or a pattern`},
		{"ok and error", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","expect":{"ok":true,"error":"not_found"}}`), "exactly one of"},
		{"unknown error code", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","expect":{"error":"oops"}}`), `error "oops" is not a spec error code`},
		{"field on an error", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","expect":{"error":"not_found","state":"queued"}}`), `field "state": an expectation has "ok"`},
		{"field not in the result", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","expect":{"ok":{"generation":1}}}`), `field "generation" is not part of a create_run result`},
		{"wrong type", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","expect":{"ok":{"run":{"version":"1"}}}}`), `create_run result.run.version is not a string`},
		{"lease field", base(claim + `,{"op":"claim","client":"B","lease_ms":10,"expect":{"ok":[{"colour":1}]}}`), `field "colour" is not part of a claim result[0]`},
		{"async with expect", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c","expect":{"ok":true}}`), "goes on its await step"},
		{"pause without async", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","pause_at":"before_commit","expect":{"ok":true}}`), "pause_at needs async"},
		{"bad pause point", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c","pause_at":"midway"},{"op":"await","of":"c","expect":{"ok":true}}`), "must be before_commit or after_commit"},
		{"bad fault", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c","pause_at":"before_commit"},{"op":"await_arrival","of":"c"},{"op":"resume","of":"c","fault":"explode"},{"op":"await","of":"c","expect":{"ok":true}}`), `fault "explode" is unknown`},
		{"never awaited", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c"}`), `"c" (step 1) is never awaited`},
		{"await before resume", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c","pause_at":"before_commit"},{"op":"await_arrival","of":"c"},{"op":"await","of":"c","expect":{"ok":true}}`), "must be resumed before it is awaited"},
		{"resume before arrival", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c","pause_at":"before_commit"},{"op":"resume","of":"c"},{"op":"await","of":"c","expect":{"ok":true}}`), "must be awaited at its barrier"},
		{"two ops on one client", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c"},` + create + `,{"op":"await","of":"c","expect":{"ok":true}}`), "client api still has operation \"c\" in flight"},
		{"unbound lease", base(`{"op":"complete","client":"A","lease":"a9","expect":{"ok":true}}`), `lease "a9" is not bound`},
		{"lease bound by an async claim not yet awaited", base(`{"op":"claim","client":"A","lease_ms":10,"bind":["a1"],"async":"c"},{"op":"complete","client":"B","lease":"a1","expect":{"ok":true}},{"op":"await","of":"c","expect":{"ok":true}}`), `lease "a1" is not bound`},
		{"lease bound twice", base(claim + `,{"op":"claim","client":"B","lease_ms":10,"bind":["a1"],"expect":{"ok":true}}`), `lease name "a1" is bound twice`},
		{"await of an unknown op", base(`{"op":"await","of":"zz","expect":{"ok":true}}`), `no earlier async operation is named "zz"`},
		{"await expectation of another kind", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c"},{"op":"await","of":"c","expect":{"ok":[]}}`), `create_run result is not a list`},
		{"unknown race", strings.Replace(base(create), `"start":0`, `"start":0,"races":["gremlins"]`, 1), `unknown race "gremlins"`},
		{"unknown named config", strings.Replace(base(create), `"config":"default"`, `"config":"fast"`, 1), `unknown named policy "fast"`},
		{"invalid inline config", strings.Replace(base(create), `"config":"default"`, `"config":{"operations":{}}`, 1), "no operations configured"},
		{"missing start", strings.Replace(base(create), `"start":0,`, ``, 1), "start"},
		{"negative advance", base(`{"op":"advance","ms":-1}`), "ms must be >= 0"},
		{"await_blocked without of", base(asyncCreate + `,{"op":"await_blocked"},` + awaitC), `await_blocked: field "of" is required`},
		{"await_blocked with expect", base(asyncCreate + `,{"op":"await_blocked","of":"c","expect":{"ok":true}},` + awaitC), `await_blocked: field "expect" does not belong to this op`},
		{"await_blocked with a fault", base(asyncCreate + `,{"op":"await_blocked","of":"c","fault":"abort"},` + awaitC), `await_blocked: field "fault" does not belong to this op`},
		{"await_blocked of an unknown op", base(asyncCreate + `,{"op":"await_blocked","of":"zz"},` + awaitC), `step 2 (await_blocked): no earlier async operation is named "zz"`},
		{"await_blocked of a read", base(`{"op":"get_run","client":"api","run_id":"r1","async":"c"},{"op":"await_blocked","of":"c"},` + awaitC), `"c" is a read, which waits for no lock`},
		{"await_blocked after the await", base(asyncCreate + `,` + awaitC + `,{"op":"await_blocked","of":"c"}`), `"c" is already awaited; await_blocked must come before its await`},
		{"await_blocked twice", base(asyncCreate + `,{"op":"await_blocked","of":"c"},{"op":"await_blocked","of":"c"},` + awaitC), `"c" already has an await_blocked (at most one per operation)`},
		{"await_blocked after the barrier", base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c","pause_at":"before_commit"},{"op":"await_arrival","of":"c"},{"op":"await_blocked","of":"c"},{"op":"resume","of":"c"},` + awaitC), `"c" is already at its barrier before_commit, past every lock it takes; await_blocked must come before its await_arrival`},
		{"await_blocked before the operation starts", base(`{"op":"await_blocked","of":"c"},` + asyncCreate + `,` + awaitC), `step 1 (await_blocked): no earlier async operation is named "c"`},
		{"final field missing", strings.Replace(base(create), `"attempts":0,`, ``, 1), `runs.r1: field "attempts" is required`},
		{"final unknown field", strings.Replace(base(create), `"attempts":0,`, `"attempts":0,"colour":1,`, 1), `unknown field "colour"`},
		{"final payload count", strings.Replace(base(create), `"attempts":0,`, `"attempts":0,"event_payloads":[{},{}],`, 1), "event_payloads has 2 entries for 1 events"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.body))
			if err == nil {
				t.Fatalf("Parse accepted a bad scenario; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error %q should contain %q", err, tc.want)
			}
		})
	}
	for _, valid := range []string{base(create), base(asyncCreate + `,{"op":"await_blocked","of":"c"},` + awaitC),
		base(`{"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c","pause_at":"after_commit"},{"op":"await_blocked","of":"c"},{"op":"await_arrival","of":"c"},{"op":"resume","of":"c"},` + awaitC)} {
		if _, err := Parse([]byte(valid)); err != nil {
			t.Fatalf("a valid scenario does not parse: %v\n%s", err, valid)
		}
	}
}

// TestInlineConfig: a scenario may give its policy inline; the runner uses
// it (here: a two-attempt default and a small backoff, visible in the
// claimed lease and the retry's available_at).
func TestInlineConfig(t *testing.T) {
	body := `{"name":"inline","description":"inline policy","tenant":"acme","start":100,
	"config":{"operations":{"work":{"schema_version":1,"default_max_attempts":2,"max_max_attempts":5,"default_timeout_ms":1000,"max_timeout_ms":5000}},
	  "idempotency_retention_ms":1000,"max_lease_ms":500,"max_replays":1,"backoff":{"base_ms":10,"cap_ms":40,"jitter_ms":5,"retry_after_cap_ms":100}},
	"steps":[
 {"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","expect":{"ok":{"run":{"deadline_at":1100}}}},
	 {"op":"claim","client":"A","lease_ms":500,"bind":["a1"],"expect":{"ok":[{"max_attempts":2,"expires_at":600}]}},
	 {"op":"claim","client":"B","lease_ms":501,"expect":{"error":"invalid_argument"}},
	 {"op":"retry","client":"A","lease":"a1","error_code":"e","jitter":5,"expect":{"ok":{"available_at":115}}}],
	"final":{"runs":{"r1":{"state":"running","job_state":"queued","generation":1,"attempts":1,"events":["run_queued"],"attempt_outcomes":["retried"],"effects":[]}}}}`
	sc, err := Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if res := Run(context.Background(), sc, sqliteOpener(t)); !res.OK() {
		t.Fatalf("inline-policy scenario failed:\n%s", reportOf(res))
	}
}

// runGuardedAt plays sc with the deadlock guard fired as soon as the runner
// starts to wait at step (the test knows the scenario can go no further
// from there), and, as a hang guard, after the patience.
func runGuardedAt(sc *Scenario, open Opener, step int) *Result {
	var fire context.CancelFunc
	return run(context.Background(), sc, open, func(ops context.Context) (context.Context, context.CancelFunc) {
		guard, cancel := context.WithTimeout(ops, hang.Patience())
		fire = cancel
		return guard, cancel
	}, func(at int) {
		if at == step {
			fire()
		}
	})
}
