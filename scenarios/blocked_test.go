package scenarios

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/spec"
)

// wrapOpener opens the stores of inner and hands each to wrap.
func wrapOpener(inner Opener, wrap func(spec.Store) spec.Store) Opener {
	return func(ctx context.Context, o Options) (spec.Store, error) {
		s, err := inner(ctx, o)
		if err != nil {
			return nil, err
		}
		return wrap(s), nil
	}
}

// hideLockWaits offers what the SQLite store s offers but lock-wait reports:
// a store that cannot report lock waits (as etcd's, whose transactions are
// optimistic).
func hideLockWaits(s spec.Store) spec.Store {
	return struct {
		spec.Store
		spec.BatchCompleter
		spec.BatchCreator
	}{s, s.(spec.BatchCompleter), s.(spec.BatchCreator)}
}

// fakeLockWaits is a store whose LockWaits is replaced: a deliberately
// broken capability.
type fakeLockWaits struct {
	spec.Store
	waits func(ctx context.Context) (int, error)
}

func (f fakeLockWaits) LockWaits(ctx context.Context) (int, error) { return f.waits(ctx) }

// notBlocked is an asynchronous admission that nothing holds back, seen by
// await_blocked: it can only return without ever waiting on a lock.
const notBlocked = `{"name":"not_blocked","description":"an admission nothing holds back","config":"default","tenant":"acme","start":0,
"steps":[
 {"op":"create_run","client":"api","run_id":"r1","idempotency_key":"k","async":"c"},
 {"op":"await_blocked","of":"c"},
 {"op":"await","of":"c","expect":{"ok":{"replayed":false}}}],
"final":{"runs":{"r1":{"state":"queued","job_state":"queued","generation":0,"attempts":0,"events":["run_queued"],"attempt_outcomes":[],"effects":[]}}}}`

// TestAwaitBlockedReturnedWithoutBlocking: await_blocked of an operation
// that never waits on a lock is a mismatch at that step ("the race did not
// happen"), on every store that can report lock waits; the operation's own
// outcome is still checked at its await.
func TestAwaitBlockedReturnedWithoutBlocking(t *testing.T) {
	sc, err := Parse([]byte(notBlocked))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		store string
		open  func(testing.TB) Opener
	}{{"sqlite", sqliteOpener}, {"postgres", postgresOpener}} {
		t.Run(c.store, func(t *testing.T) {
			res := Run(context.Background(), sc, c.open(t))
			if res.OK() || res.Stuck || res.NotApplicable != "" || len(res.Mismatches) != 1 {
				t.Fatalf("want exactly one mismatch, at await_blocked:\n%s", reportOf(res))
			}
			m := res.Mismatches[0]
			for _, want := range []string{"await_blocked c", "expected c to be seen blocked on a lock, but it returned first (ok created run acme/r1",
				"its store never reported it waiting: the race did not happen"} {
				if m.Step != 2 || !strings.Contains(m.Message, want) {
					t.Errorf("the mismatch %q should be at step 2 and contain %q", m, want)
				}
			}
			if got := res.Steps[2]; got.Mismatch || !strings.HasPrefix(got.Outcome, "ok created") {
				t.Errorf("the await after a missed await_blocked should still check the outcome: %+v", got)
			}
		})
	}
}

// TestAwaitBlockedNotApplicable: on a store that cannot report lock waits,
// a scenario with await_blocked is not played and not passed: Run reports
// it not applicable (and OK is false), and the corpus runner lists exactly
// the corpus's await_blocked scenarios as not applicable and passes the rest.
func TestAwaitBlockedNotApplicable(t *testing.T) {
	corpus := loadAll(t)
	var blocking []string
	for _, sc := range corpus {
		if slices.Contains(sc.Needs(), storetest.CapLockWaits) {
			blocking = append(blocking, sc.Name)
		}
	}
	if len(blocking) < 2 {
		t.Fatalf("the corpus should have at least two await_blocked scenarios, has %v", blocking)
	}
	sc := byName(t, "cancel_blocked_behind_complete")
	res := Run(context.Background(), sc, wrapOpener(sqliteOpener(t), hideLockWaits))
	out := reportOf(res)
	switch {
	case res.OK():
		t.Fatalf("a scenario that did not apply counts as OK:\n%s", out)
	case len(res.Mismatches) > 0 || len(res.Steps) > 0:
		t.Fatalf("a scenario that does not apply should not be played, nor fail:\n%s", out)
	case !strings.Contains(res.NotApplicable, "step 7 (await_blocked api-cancel) needs client api's store to report lock waits (spec.LockWaitReporter)"):
		t.Fatalf("the reason %q should name the step, the client and the capability", res.NotApplicable)
	case !strings.HasPrefix(out, "NOT APPLICABLE cancel_blocked_behind_complete: "):
		t.Fatalf("the report should say NOT APPLICABLE, got:\n%s", out)
	}
	// Declared absent (found before playing), or declared but absent from
	// the stores the opener returns (found by Run).
	base := []storetest.Capability{storetest.CapHooks, storetest.CapCompleteBatch, storetest.CapCreateRuns}
	for _, c := range []struct {
		name    string
		offered []storetest.Capability
	}{{"declared-absent", base}, {"declared-but-absent", append(slices.Clone(base), storetest.CapLockWaits)}} {
		var sum storetest.Summary
		t.Run(c.name, func(t *testing.T) {
			sum = runCorpus(t, harness.Target{Name: "sqlite-without-lock-waits"}, func(t testing.TB) Opener { return wrapOpener(sqliteOpener(t), hideLockWaits) },
				c.offered)
		})
		if !slices.Equal(sum.NotApplicable, blocking) || len(sum.Failed) > 0 || len(sum.Passed)+len(blocking) != len(corpus) {
			t.Errorf("%s: corpus without lock waits: not applicable %v (want %v), failed %v, passed %d of %d",
				c.name, sum.NotApplicable, blocking, sum.Failed, len(sum.Passed), len(corpus))
		}
	}
}

// TestAwaitBlockedBrokenCapability: a store whose lock-wait report is
// wrong makes the scenario fail with a message that says so. One that
// always says "not blocked" leaves the runner waiting for a wait it never
// sees, while the holder keeps the lock: the deadlock guard stops it, and
// the await_blocked step says the store never reported the wait. One whose
// report fails is a mismatch at once.
func TestAwaitBlockedBrokenCapability(t *testing.T) {
	sc := byName(t, "cancel_blocked_behind_complete")
	cases := []struct {
		name  string
		waits func(context.Context) (int, error)
		stuck bool
		want  []string
	}{
		{"always not blocked", func(context.Context) (int, error) { return 0, nil }, true,
			[]string{"step 7: await_blocked api-cancel: the store never reported api-cancel (api: cancel run_id=r1 reason=user_abort [async api-cancel]) waiting on a lock before the deadlock guard fired"}},
		{"report fails", func(context.Context) (int, error) { return 0, errors.New("pg_stat_activity: permission denied") }, false,
			[]string{"step 7: await_blocked api-cancel: the store could not say whether api-cancel waits on a lock: pg_stat_activity: permission denied"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			open := wrapOpener(sqliteOpener(t), func(s spec.Store) spec.Store { return fakeLockWaits{Store: s, waits: tc.waits} })
			var res *Result
			if tc.stuck {
				// The guard fires once the runner waits at await_blocked
				// (step 7), which a store that never reports the wait
				// cannot pass.
				res = runGuardedAt(sc, open, 7)
			} else {
				res = Run(context.Background(), sc, open)
			}
			if res.OK() || res.Stuck != tc.stuck {
				t.Fatalf("a broken lock-wait report should fail the scenario (stuck %v):\n%s", tc.stuck, reportOf(res))
			}
			for _, want := range tc.want {
				if !slices.ContainsFunc(res.Mismatches, func(m Mismatch) bool { return strings.Contains(m.String(), want) }) {
					t.Errorf("no mismatch contains %q:\n%s", want, reportOf(res))
				}
			}
		})
	}
}

// byName returns the corpus scenario called name.
func byName(t *testing.T, name string) *Scenario {
	t.Helper()
	for _, sc := range loadAll(t) {
		if sc.Name == name {
			return sc
		}
	}
	t.Fatalf("no corpus scenario %s", name)
	return nil
}
