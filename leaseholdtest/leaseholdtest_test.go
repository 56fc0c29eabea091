package leaseholdtest_test

import (
	"context"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/leaseholdtest"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/spec"
)

// plainStore hides every optional interface of the store it wraps: only
// spec.Store's methods are promoted.
type plainStore struct{ spec.Store }

// bare opens SQLite stores that declare no capability and hide
// spec.BatchCompleter: the checks must find out, and report what they
// cannot run as not applicable.
func bare(t testing.TB, opts storetest.Options) storetest.Handle {
	h := sqlitetest.Factory(t, opts)
	reopen, openWith := h.Reopen, h.OpenWith
	return storetest.Handle{
		Store:    plainStore{h.Store},
		Reopen:   func(t testing.TB) spec.Store { return plainStore{reopen(t)} },
		OpenWith: func(t testing.TB, o storetest.Options) spec.Store { return plainStore{openWith(t, o)} },
	}
}

// TestCapabilitiesAreDeclared: the SQLite factory declares what it offers;
// the bare one offers nothing.
func TestCapabilitiesAreDeclared(t *testing.T) {
	for _, c := range []struct {
		name string
		f    storetest.Factory
		want []storetest.Capability
	}{
		{"sqlite", sqlitetest.Factory, []storetest.Capability{storetest.CapHooks, storetest.CapSQL, storetest.CapCompleteBatch, storetest.CapCreateRuns, storetest.CapLockWaits, storetest.CapListRuns, storetest.CapCreateRunTx}},
		{"bare", bare, nil},
	} {
		if got := storetest.Declared(t, c.f); !slices.Equal(got, c.want) {
			t.Errorf("%s declares %v, want %v", c.name, got, c.want)
		}
	}
}

// TestConformanceNotApplicable: on a store that offers no capability, the
// tests that need one are not applicable (never passed), and every other
// test passes.
func TestConformanceNotApplicable(t *testing.T) {
	var sum storetest.Summary
	// RunAll calls back once bare's parallel subtests have ended, before
	// t.Run returns.
	t.Run("bare", func(t *testing.T) { storetest.RunAll(t, bare, func(s storetest.Summary) { sum = s }) })
	want := []string{"ProjectionEventAtomicity", "AfterCommitFailureIsUnknownOutcome", "CompleteBatchMembersAreIndependent",
		"CompleteBatchEqualsComplete", "CompleteBatchAtomicity", "CompleteBatchLimits", "ConcurrentOverlappingBatches",
		"MigrationRecorded", "DatabaseRejectsOrphans", "DatabaseRejectsInvalidDomain", "OutboxBatchMembers",
		"CreateRunsMembersAreIndependent", "CreateRunsEqualsCreateRun", "CreateRunsAtomicity", "CreateRunsLimits",
		"ConcurrentOverlappingBulkAdmissions", "LockWaitsCountsOwnWaiters", "HooksOnEveryAnsweredWrite",
		"ListRuns", "ListRunsTenantIsolation", "ListRunsUnderConcurrentAdmission",
		"AdmitInTxEqualsCreateRun", "AdmitInTxRollback", "AdmitInTxAtomicity", "ConcurrentAdmitInTx"}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(sum.NotApplicable))
	if !slices.Equal(got, want) {
		t.Errorf("not applicable: got %v, want %v", got, want)
	}
	if len(sum.Failed) > 0 || len(sum.Skipped) > 0 {
		t.Errorf("failed %v, skipped %v: want none", sum.Failed, sum.Skipped)
	}
	if n := len(sum.Passed) + len(sum.NotApplicable); n != len(storetest.Names()) {
		t.Errorf("%d passed and %d not applicable of %d tests", len(sum.Passed), len(sum.NotApplicable), len(storetest.Names()))
	}
	for _, name := range sum.NotApplicable {
		if slices.Contains(sum.Passed, name) {
			t.Errorf("%s is both passed and not applicable", name)
		}
	}
}

// TestChecksNotApplicable: linearizability needs hooks, and so do the
// scenarios that hold an operation at a hook point; on the bare store they
// are skipped as not applicable, and the other scenarios pass.
func TestChecksNotApplicable(t *testing.T) {
	s := leaseholdtest.Store{Name: "bare", Factory: bare}
	for _, c := range []struct {
		name  string
		check func(*testing.T, leaseholdtest.Store)
	}{{"Linearizability", leaseholdtest.Linearizability}, {"Runtime", leaseholdtest.Runtime}} {
		var skipped bool
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { skipped = t.Skipped() })
			c.check(t, s)
		})
		if !skipped {
			t.Errorf("the %s check ran on a store without hooks; want it not applicable", c.name)
		}
	}
	corpus, err := scenarios.Corpus()
	if err != nil {
		t.Fatal(err)
	}
	var sum storetest.Summary
	t.Run("Scenarios", func(t *testing.T) { sum = scenarios.RunCorpusOn(t, harness.Target{Name: "bare", Factory: bare}) })
	var want []string
	for _, sc := range corpus {
		if len(sc.Needs()) > 0 {
			want = append(want, sc.Name)
		}
	}
	if len(want) == 0 || len(want) == len(corpus) {
		t.Fatalf("%d of %d scenarios need hooks, batch completion or bulk admission: the test proves nothing unless some do and some do not", len(want), len(corpus))
	}
	if !slices.Equal(sum.NotApplicable, want) || len(sum.Failed) > 0 || len(sum.Passed)+len(want) != len(corpus) {
		t.Errorf("scenarios on a store without hooks or batch completion: not applicable %v (want %v), failed %v, passed %v",
			sum.NotApplicable, want, sum.Failed, sum.Passed)
	}
}

// everything is a store that implements every optional interface.
type everything struct{ plainStore }

func (everything) CompleteBatch(context.Context, []spec.CompleteRequest) ([]spec.BatchOutcome, error) {
	return nil, nil
}

func (everything) CreateRuns(context.Context, []spec.CreateRunRequest) ([]spec.CreateOutcome, error) {
	return nil, nil
}

func (everything) Listen(context.Context, func(spec.Notification)) error { return nil }

func (everything) LockWaits(context.Context) (int, error) { return 0, nil }

func (everything) ListRuns(context.Context, spec.ListRunsRequest) (spec.RunPage, error) {
	return spec.RunPage{}, nil
}

func (everything) AdmitInTx(context.Context, spec.CreateRunTxRequest) (spec.CreateRunResult, error) {
	return spec.CreateRunResult{}, nil
}

// TestEveryCapabilityIsFound: a handle that declares and implements
// everything offers every capability of storetest.Capabilities, one that
// declares and implements nothing offers none.
func TestEveryCapabilityIsFound(t *testing.T) {
	full := storetest.Handle{Store: everything{}, Exec: func(context.Context, string) error { return nil },
		Caps: storetest.Caps{Hooks: true, SQL: true, DatabaseClock: true}}
	if got, want := full.Offered(), storetest.Capabilities(); !slices.Equal(got, want) {
		t.Errorf("a store with everything offers %v, want %v", got, want)
	}
	if got := (storetest.Handle{Store: plainStore{}}).Offered(); len(got) != 0 {
		t.Errorf("a store with nothing offers %v", got)
	}
	// SQL needs Exec as well as the declaration.
	if (storetest.Handle{Store: plainStore{}, Caps: storetest.Caps{SQL: true}}).Has(storetest.CapSQL) {
		t.Error("a handle without Exec offers SQL")
	}
}
