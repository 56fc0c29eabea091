package doctor

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/spec"
)

// TestMain stops pgtest's private PostgreSQL cluster, if one was
// started (see pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

// kit is one store under test.
type kit struct {
	name    string
	factory storetest.Factory
	layout  storetest.Layout
}

var (
	sqliteKit   = kit{"sqlite", sqlitetest.Factory, storetest.LayoutTablePerRecord}
	postgresKit = kit{"postgres", pgtest.Factory, storetest.LayoutJobRow}
)

// themes are the doctor's tests, each run on both stores.
var themes = []struct {
	name string
	run  func(t *testing.T, k kit)
}{
	{"Healthy", testHealthy},
	{"BrokenInvariants", testBrokenInvariants},
	{"NoRepairInABrokenDatabase", testNoRepairInABrokenDatabase},
	{"StuckRunsReaped", testStuckRunsReaped},
	{"DeadOwnerReleased", testDeadOwnerReleased},
	{"FailedRepair", testFailedRepair},
	{"RefusedRelease", testRefusedRelease},
	{"IdempotencyPastRetention", testIdempotencyPastRetention},
	{"Outbox", testOutbox},
	{"ClaimPlanWithoutIndex", testClaimPlanWithoutIndex},
	{"LeaseExpiryInAnotherUnit", testLeaseExpiryInAnotherUnit},
	{"SnapshotLimit", testSnapshotLimit},
	{"Clock", testClock},
	{"Blockers", testBlockers},
	{"Corrupt", testCorrupt},
	{"HorizonAndDeadTuples", testHorizonAndDeadTuples},
	{"OpenRefusesWhatItWouldWrite", testOpenRefuses},
	{"OperatorActionsAudited", testOperatorActions},
}

// TestDoctorSQLite runs every theme on a SQLite store.
func TestDoctorSQLite(t *testing.T) { runThemes(t, sqliteKit) }

// TestDoctorPostgres runs every theme on a PostgreSQL store (pgtest: it
// skips loudly without a server, and fails under CI=true).
func TestDoctorPostgres(t *testing.T) {
	pgtest.DSN(t)
	runThemes(t, postgresKit)
}

func runThemes(t *testing.T, k kit) {
	for _, th := range themes {
		t.Run(th.name, func(t *testing.T) { th.run(t, k) })
	}
}

// t0 is where every test's manual clock starts.
const t0 = 1_000_000

// fx is one test's store, its clock and the doctor's target.
type fx struct {
	t      *testing.T
	ctx    context.Context
	k      kit
	h      storetest.Handle
	s      spec.Store
	clock  *clock.Manual
	target *Target
}

func newFx(t *testing.T, k kit, opts ...func(*storetest.Options)) *fx {
	t.Helper()
	f := &fx{t: t, ctx: context.Background(), k: k, clock: clock.NewManual(t0)}
	o := storetest.Options{Config: spec.DefaultConfig(), Clock: f.clock}
	for _, m := range opts {
		m(&o)
	}
	f.h = k.factory(t, o)
	f.s = f.h.Store
	var err error
	if f.target, err = New(f.s, k.name+" test store"); err != nil {
		t.Fatal(err)
	}
	return f
}

// create admits a run of tenant with the budget.
func (f *fx) create(tenant, run string, maxAttempts int) {
	f.t.Helper()
	_, err := f.s.CreateRun(f.ctx, spec.CreateRunRequest{Tenant: tenant, Operation: "work", IdempotencyKey: "k-" + run,
		RunID: run, Payload: []byte(`{}`), MaxAttempts: maxAttempts})
	if err != nil {
		f.t.Fatalf("CreateRun %s/%s: %v", tenant, run, err)
	}
}

// claimNew admits a run and claims it (the tenant's only queued job).
func (f *fx) claimNew(tenant, run string, maxAttempts int, worker string, leaseMs int64) spec.Lease {
	f.t.Helper()
	f.create(tenant, run, maxAttempts)
	leases, err := f.s.Claim(f.ctx, spec.ClaimRequest{Tenant: tenant, Worker: worker, LeaseMs: leaseMs, Limit: 1})
	if err != nil || len(leases) != 1 || leases[0].RunID != run {
		f.t.Fatalf("claim of %s/%s: want it leased, got %v, %v", tenant, run, leases, err)
	}
	return leases[0]
}

// healthyRows makes a completed, a leased and a queued run in acme and a
// queued one in beta.
func (f *fx) healthyRows() {
	f.t.Helper()
	l := f.claimNew("acme", "r-done", 3, "w1", 60_000)
	if _, err := f.s.Complete(f.ctx, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(`{}`)}); err != nil {
		f.t.Fatal(err)
	}
	f.claimNew("acme", "r-run", 3, "w1", 60_000)
	f.create("acme", "r-q", 3)
	f.create("beta", "b-q", 3)
}

// diagnose runs Diagnose at the fixture's clock.
func (f *fx) diagnose(o Options) *Report {
	f.t.Helper()
	o.Clock = f.clock
	r, err := Diagnose(f.ctx, f.target, o)
	if err != nil {
		f.t.Fatalf("Diagnose: %v", err)
	}
	return r
}

func (f *fx) repair(o Options, actor string) *Report {
	f.t.Helper()
	o.Clock = f.clock
	r, err := Repair(f.ctx, f.target, o, actor)
	if err != nil {
		f.t.Fatalf("Repair: %v", err)
	}
	return r
}

// breakRows runs statements past the contract. unchecked also turns the
// database's own constraints off first (SQLite: on the statements'
// connection; PostgreSQL: every CHECK and FOREIGN KEY of the test schema is
// dropped), for breaks the schema would refuse: a database whose
// constraints were dropped, or written by an older or foreign writer.
func (f *fx) breakRows(unchecked bool, stmts ...string) {
	f.t.Helper()
	if f.k.name == "sqlite" {
		conn, err := f.s.(*sqlite.Store).DB().Conn(f.ctx)
		if err != nil {
			f.t.Fatal(err)
		}
		defer conn.Close()
		if unchecked {
			mustExec(f.t, conn.ExecContext, "PRAGMA ignore_check_constraints = ON", "PRAGMA foreign_keys = OFF")
			defer mustExec(f.t, conn.ExecContext, "PRAGMA ignore_check_constraints = OFF", "PRAGMA foreign_keys = ON")
		}
		mustExec(f.t, conn.ExecContext, stmts...)
		return
	}
	if unchecked {
		stmts = append([]string{`DO $$ DECLARE c record; BEGIN
			FOR c IN SELECT conrelid::regclass AS t, conname FROM pg_constraint
				WHERE connamespace = current_schema()::regnamespace AND contype IN ('c', 'f') LOOP
				EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.t, c.conname);
			END LOOP; END $$`}, stmts...)
	}
	for _, q := range stmts {
		if err := f.h.Exec(f.ctx, q); err != nil {
			f.t.Fatalf("%s: %v", q, err)
		}
	}
}

func mustExec[R any](t *testing.T, exec func(context.Context, string, ...any) (R, error), stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// statuses is every check's status, by name.
func statuses(r *Report) map[string]Status {
	out := map[string]Status{}
	for _, c := range r.checks() {
		out[c.name] = c.c.Status
	}
	return out
}

// wantStatuses fails unless the checks have exactly these statuses: the
// healthy ones of the kit, changed by diff.
func wantStatuses(t *testing.T, k kit, r *Report, diff map[string]Status) {
	t.Helper()
	want := map[string]Status{"invariants": StatusOK, "expired_leases": StatusOK, "reapable": StatusOK, "lease_expiry": StatusOK,
		"clock": StatusOK, "idempotency": StatusOK, "outbox": StatusOK, "claim_plan": StatusOK, "blockers": StatusOK,
		"integrity": StatusOK, "horizon": StatusOK, "dead_tuples": StatusOK}
	if k.name == "sqlite" {
		want["clock"], want["blockers"], want["horizon"], want["dead_tuples"] = StatusNotApplicable, StatusNotApplicable, StatusNotApplicable, StatusNotApplicable
	} else {
		want["integrity"] = StatusNotApplicable
	}
	for n, s := range diff {
		want[n] = s
	}
	if got := statuses(r); !reflect.DeepEqual(got, want) {
		var b strings.Builder
		r.WriteMarkdown(&b)
		t.Fatalf("check statuses:\n got %v\nwant %v\nreport:\n%s", got, want, b.String())
	}
}

func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func violations(r *Report) []string {
	var out []string
	for _, v := range r.Invariants.Violations {
		out = append(out, v.String())
	}
	return out
}

func testHealthy(t *testing.T, k kit) {
	f := newFx(t, k)
	f.healthyRows()
	before, err := f.s.Snapshot(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := f.diagnose(Options{})
	wantStatuses(t, k, r, nil)
	equal(t, "verdict", r.Verdict, VerdictHealthy)
	equal(t, "violations", violations(r), []string(nil))
	equal(t, "runs checked", r.Invariants.Runs, 4)
	equal(t, "lease expiry", r.LeaseExpiry.Buckets[4], Bucket{Range: "expires within a minute", Leases: 1})
	equal(t, "owners", r.LeaseExpiry.Owners, []OwnerLeases{{Owner: "w1", Leases: 1}})
	equal(t, "planned repairs", r.Repairs, Repairs{Mode: "dry_run", Actions: []Action{}})
	// The diagnosis wrote nothing: the rows are the same, and no audit
	// table was made.
	after, err := f.s.Snapshot(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "snapshot after Diagnose", after, before)
	if audit, err := ReadAudit(f.ctx, f.target); err != nil || len(audit) != 0 {
		t.Fatalf("audit after a diagnosis: %v, %v; want none", audit, err)
	}
	// Both renderings say it.
	var md, js bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil || !strings.HasPrefix(md.String(), "# leasehold doctor: HEALTHY\n") ||
		!strings.Contains(md.String(), "| invariants | ok | no violations in 4 runs") || !strings.Contains(md.String(), "Nothing to repair.") {
		t.Fatalf("Markdown (%v):\n%s", err, md.String())
	}
	var back map[string]any
	if err := r.WriteJSON(&js); err != nil || json.Unmarshal(js.Bytes(), &back) != nil || back["verdict"] != "healthy" ||
		back["thresholds"].(map[string]any)["leases_ms"] != float64(300_000) {
		t.Fatalf("JSON (%v):\n%s", err, js.String())
	}
}

func testBrokenInvariants(t *testing.T, k kit) {
	expiry := t0 + 60_000
	for _, tc := range []struct {
		name      string
		unchecked bool
		stmts     map[storetest.Layout][]string
		want      map[storetest.Layout][]string
	}{
		{"event sequence gap", false,
			map[storetest.Layout][]string{
				storetest.LayoutTablePerRecord: {`UPDATE run_events SET seq = 3 WHERE tenant = 'acme' AND run_id = 'r-done' AND seq = 2`},
				// The terminal event's seq is the job row's run_last_seq.
				storetest.LayoutJobRow: {`UPDATE jobs SET run_last_seq = 3 WHERE tenant = 'acme' AND run_id = 'r-done'`}},
			map[storetest.Layout][]string{
				storetest.LayoutTablePerRecord: {"1: run acme/r-done event 2 has seq 3"},
				storetest.LayoutJobRow:         {"1: run acme/r-done has last seq 3 but 2 events", "1: run acme/r-done event 2 has seq 3"}}},
		{"leased job without an owner", true,
			both(`UPDATE jobs SET lease_owner = NULL WHERE tenant = 'acme' AND run_id = 'r-run'`),
			both(fmt.Sprintf(`8: job acme/r-run is leased with owner "" and expiry %d`, expiry))},
		{"generation behind its attempts", false,
			both(`UPDATE jobs SET lease_generation = 0 WHERE tenant = 'acme' AND run_id = 'r-done'`),
			both("11: run acme/r-done attempt generation 1 > job generation 0")},
		{"orphan attempt", true,
			both(`INSERT INTO attempts (tenant, run_id, generation, number, worker, claimed_at, renewed_at, finished_at, outcome)
				VALUES ('acme', 'ghost', 1, 1, 'w', 0, 0, 5, 'expired')`),
			both("7: attempt acme/ghost@1 has no job")},
		{"run and job states disagree", false,
			both(`UPDATE jobs SET state = 'cancelled' WHERE tenant = 'acme' AND run_id = 'r-q'`),
			both("4: run acme/r-q is queued but its job is cancelled", "4: run acme/r-q is queued but its job is cancelled with 0 attempts")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFx(t, k)
			f.healthyRows()
			f.breakRows(tc.unchecked, tc.stmts[k.layout]...)
			r := f.diagnose(Options{})
			equal(t, "violations", violations(r), tc.want[k.layout])
			// A row past a CHECK constraint: SQLite's quick_check sees it
			// too, in the whole file whatever the tenant, and says it is a
			// constraint, not damage.
			wholeFile := map[string]Status{}
			if k.name == "sqlite" && tc.unchecked && strings.Contains(tc.name, "owner") {
				wholeFile["integrity"] = StatusFail
				if !strings.HasPrefix(r.Integrity.Summary, "rows break the schema's CHECK or NOT NULL constraints") {
					t.Fatalf("integrity: %q", r.Integrity.Summary)
				}
			}
			failed := map[string]Status{"invariants": StatusFail}
			maps.Copy(failed, wholeFile)
			wantStatuses(t, k, r, failed)
			equal(t, "verdict", r.Verdict, VerdictUnhealthy)
			var md bytes.Buffer
			r.WriteMarkdown(&md)
			if !strings.Contains(md.String(), "- "+tc.want[k.layout][0]+" (") {
				t.Fatalf("the Markdown report does not list %q:\n%s", tc.want[k.layout][0], md.String())
			}
			// A broken database is not repaired.
			if r, err := Repair(f.ctx, f.target, Options{Clock: f.clock}, "ops-eve"); spec.CodeOf(err) != spec.CodeFailedPrecondition ||
				r == nil || r.Repairs.Mode != "dry_run" {
				t.Fatalf("Repair of a database with broken invariants: %v, want failed_precondition and the diagnosis", err)
			}
			equal(t, "audit", len(f.audit()), 0)
			// Another tenant's report does not see acme's break.
			beta := f.diagnose(Options{Tenant: "beta"})
			wantStatuses(t, k, beta, wholeFile)
			equal(t, "beta's runs", beta.Invariants.Runs, 1)
		})
	}
}

// testNoRepairInABrokenDatabase: whatever its scope, Repair changes nothing
// in a database whose invariants fail (acme's rows here), though each
// scope has a run to reap. The mutant doctor_scoped_repair_skips_invariants
// (TestMutantScopedRepair) is caught by this check.
func testNoRepairInABrokenDatabase(t *testing.T, k kit) {
	for _, p := range repairsInABrokenDatabase(t, k) {
		t.Error(p)
	}
}

// repairsInABrokenDatabase breaks acme's rows, leaves a reapable run in
// acme and in beta, tries Repair on the whole database and scoped to each
// tenant, and returns what went wrong: a repair that was not refused with
// failed_precondition, or that changed a row or wrote the audit trail.
func repairsInABrokenDatabase(t *testing.T, k kit) (problems []string) {
	f := newFx(t, k)
	f.claimNew("acme", "r-stuck", 1, "w-dead", 10_000)
	f.claimNew("beta", "b-stuck", 1, "w-dead", 10_000)
	f.healthyRows()
	f.clock.Set(t0 + 600_000)
	f.breakRows(false, `UPDATE jobs SET lease_generation = 0 WHERE tenant = 'acme' AND run_id = 'r-done'`)
	before, err := f.s.Snapshot(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"", "acme", "beta"} {
		o := Options{Clock: f.clock, Tenant: scope}
		if planned := f.diagnose(o).Repairs.Actions; len(planned) == 0 {
			t.Fatalf("scope %q: nothing planned to repair; the check needs a run to reap in every scope", scope)
		}
		r, err := Repair(f.ctx, f.target, o, "ops-eve")
		if spec.CodeOf(err) != spec.CodeFailedPrecondition || r == nil || r.Repairs.Mode != "dry_run" {
			problems = append(problems, fmt.Sprintf("scope %q: Repair of a database with broken invariants returned %v; want failed_precondition and the diagnosis", scope, err))
		}
		if r != nil && r.Invariants.DatabaseViolations == 0 {
			problems = append(problems, fmt.Sprintf("scope %q: the report counts no violation in the database", scope))
		}
		after, err := f.s.Snapshot(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(after, before) {
			problems = append(problems, fmt.Sprintf("scope %q: the repair changed rows of the broken database", scope))
			before = after
		}
		if a := f.audit(); len(a) != 0 {
			problems = append(problems, fmt.Sprintf("scope %q: the audit trail has %d rows: %v", scope, len(a), outcomes(a)))
		}
	}
	return problems
}

func both(s ...string) map[storetest.Layout][]string {
	return map[storetest.Layout][]string{storetest.LayoutTablePerRecord: s, storetest.LayoutJobRow: s}
}

// testStuckRunsReaped: a run with one attempt whose worker died stays
// leased forever unless reaped. The doctor finds it, a dry run changes
// nothing, --repair reaps it through Store.Reap with an audit row, and a
// second repair finds nothing.
func testStuckRunsReaped(t *testing.T, k kit) {
	f := newFx(t, k)
	f.claimNew("acme", "r-stuck", 1, "w-dead", 10_000)
	f.claimNew("acme", "r-retry", 3, "w-dead", 10_000)
	f.claimNew("acme", "r-live", 3, "w-live", 3_600_000)

	// Shortly after expiry: reapable, but younger than the threshold.
	f.clock.Set(t0 + 70_000)
	r := f.diagnose(Options{})
	wantStatuses(t, k, r, nil)
	equal(t, "reapable", r.Reapable.Tenants, []TenantLeases{{Tenant: "acme", Count: 1, OldestAgeMs: 60_000}})

	f.clock.Set(t0 + 600_000)
	r = f.diagnose(Options{})
	wantStatuses(t, k, r, map[string]Status{"reapable": StatusFail, "expired_leases": StatusFail})
	equal(t, "failed", r.Failed(), []string{"expired_leases", "reapable"})
	equal(t, "reapable", r.Reapable.Oldest, []LeaseRow{{Tenant: "acme", RunID: "r-stuck", Owner: "w-dead", Generation: 1,
		Attempts: 1, MaxAttempts: 1, ExpiresAt: t0 + 10_000, AgeMs: 590_000}})
	equal(t, "expired", r.ExpiredLeases.Tenants, []TenantLeases{{Tenant: "acme", Count: 1, OldestAgeMs: 590_000}})
	equal(t, "expired 1-10m ago", r.LeaseExpiry.Buckets[2].Leases, int64(2))
	equal(t, "expires in 10m-1h", r.LeaseExpiry.Buckets[6].Leases, int64(1))
	equal(t, "owners", r.LeaseExpiry.Owners, []OwnerLeases{{Owner: "w-dead", Leases: 2, Expired: 2}, {Owner: "w-live", Leases: 1}})
	planned := []Action{{Action: "reap", Tenant: "acme", RunID: "r-stuck", Owner: "w-dead", Generation: 1, Outcome: OutcomePlanned}}
	equal(t, "planned", r.Repairs.Actions, planned)
	if _, err := Repair(f.ctx, f.target, Options{Clock: f.clock}, ""); spec.CodeOf(err) != spec.CodeInvalidArgument {
		t.Fatalf("Repair without an actor: %v, want invalid_argument", err)
	}
	if job, _ := f.s.GetJob(f.ctx, "acme", "r-stuck"); job.State != spec.JobLeased {
		t.Fatalf("the dry run and the refused repair changed the job: %+v", job)
	}

	after := f.repair(Options{}, "ops-alice")
	equal(t, "applied", after.Repairs.Actions, []Action{{Action: "reap", Tenant: "acme", RunID: "r-stuck", Owner: "w-dead",
		Generation: 1, Outcome: OutcomeApplied}})
	equal(t, "before", *after.Repairs.Before, Before{Verdict: VerdictUnhealthy, Failed: []string{"expired_leases", "reapable"}})
	// The reap is the contract's: run failed with lease_expired, its
	// event appended, the other runs untouched; every invariant holds.
	wantStatuses(t, k, after, map[string]Status{"expired_leases": StatusFail})
	run, err := f.s.GetRun(f.ctx, "acme", "r-stuck")
	if err != nil || run.State != spec.RunFailed || run.ErrorCode != "lease_expired" {
		t.Fatalf("reaped run: %+v, %v", run, err)
	}
	if ev, _ := f.s.Events(f.ctx, "acme", "r-stuck"); len(ev) != 2 || ev[1].Kind != spec.EventRunFailed {
		t.Fatalf("reaped run's events: %+v", ev)
	}
	if job, _ := f.s.GetJob(f.ctx, "acme", "r-retry"); job.State != spec.JobLeased || job.LeaseOwner != "w-dead" {
		t.Fatalf("a reap changed a job with attempts left: %+v", job)
	}
	audit := f.audit()
	equal(t, "audit", audit, []AuditEntry{
		{ID: audit[0].ID, At: t0 + 600_000, Actor: "ops-alice", Action: "reap", Tenant: "acme", Outcome: "started",
			Message: "reaping the 1 jobs of tenant acme leased with no attempts left and expired (the store re-checks each)"},
		{ID: audit[1].ID, At: t0 + 600_000, Actor: "ops-alice", Action: "reap", Tenant: "acme", RunID: "r-stuck", Owner: "w-dead",
			Generation: 1, Outcome: "applied"}})

	again := f.repair(Options{}, "ops-alice")
	equal(t, "second repair", again.Repairs.Actions, []Action{})
	equal(t, "second repair's note", again.Repairs.Notes, []string{"Nothing needed repair; nothing was changed."})
	equal(t, "audit after the second repair", len(f.audit()), 2)
}

func (f *fx) audit() []AuditEntry {
	f.t.Helper()
	a, err := ReadAudit(f.ctx, f.target)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// testDeadOwnerReleased: a worker the operator names as dead holds an
// unexpired lease; the doctor releases it with the lease's own generation.
func testDeadOwnerReleased(t *testing.T, k kit) {
	f := newFx(t, k)
	f.claimNew("acme", "r-held", 3, "w-gone", 3_600_000)
	f.claimNew("acme", "r-other", 3, "w-live", 3_600_000)
	f.claimNew("beta", "b-held", 3, "w-gone", 1_000)
	f.clock.Set(t0 + 2_000) // b-held's lease expired: claimable, nothing to release
	o := Options{ReleaseOwners: []string{"w-gone", "w-nobody"}}
	r := f.diagnose(o)
	equal(t, "planned", r.Repairs.Actions, []Action{{Action: "release", Tenant: "acme", RunID: "r-held", Owner: "w-gone",
		Generation: 1, Outcome: OutcomePlanned}})
	equal(t, "notes", r.Repairs.Notes[:2], []string{
		"1 lease of w-gone expired: no release needed (a claim takes it over, or the reap above when no attempts are left).",
		"w-nobody holds no lease."})
	after := f.repair(o, "ops-bob")
	equal(t, "applied", after.Repairs.Actions, []Action{{Action: "release", Tenant: "acme", RunID: "r-held", Owner: "w-gone",
		Generation: 1, Outcome: OutcomeApplied}})
	job, err := f.s.GetJob(f.ctx, "acme", "r-held")
	if err != nil || job.State != spec.JobQueued || job.Attempts != 0 || job.Generation != 1 || job.AvailableAt != t0+2_000 {
		t.Fatalf("released job: %+v, %v; want queued now, attempt refunded, generation kept", job, err)
	}
	if job, _ := f.s.GetJob(f.ctx, "acme", "r-other"); job.State != spec.JobLeased {
		t.Fatalf("another owner's lease was released: %+v", job)
	}
	wantStatuses(t, k, after, nil)
	equal(t, "audit outcomes", outcomes(f.audit()), []string{"release acme/r-held started", "release acme/r-held applied"})
	equal(t, "nothing left to release", f.diagnose(o).Repairs.Actions, []Action{})
}

func outcomes(a []AuditEntry) []string {
	var out []string
	for _, e := range a {
		out = append(out, fmt.Sprintf("%s %s/%s %s", e.Action, e.Tenant, e.RunID, e.Outcome))
	}
	return out
}

// testFailedRepair: a release the store cannot run is reported and
// audited as failed, and changes nothing.
func testFailedRepair(t *testing.T, k kit) {
	refuse := errors.New("injected: the release's transaction is rolled back")
	f := newFx(t, k, func(o *storetest.Options) {
		o.Hook = func(_ context.Context, op spec.Op, p spec.HookPoint) error {
			if op == spec.OpRelease && p == spec.BeforeCommit {
				return refuse
			}
			return nil
		}
	})
	f.claimNew("acme", "r-held", 3, "w-gone", 3_600_000)
	after := f.repair(Options{ReleaseOwners: []string{"w-gone"}}, "ops-carol")
	if !after.RepairFailed() || len(after.Repairs.Actions) != 1 || after.Repairs.Actions[0].Outcome != OutcomeFailed ||
		!strings.Contains(after.Repairs.Actions[0].Message, refuse.Error()) {
		t.Fatalf("want one failed release naming the injected error, got %+v", after.Repairs.Actions)
	}
	if job, _ := f.s.GetJob(f.ctx, "acme", "r-held"); job.State != spec.JobLeased || job.Attempts != 1 {
		t.Fatalf("a failed release changed the job: %+v", job)
	}
	equal(t, "audit outcomes", outcomes(f.audit()), []string{"release acme/r-held started", "release acme/r-held failed"})
}

// testRefusedRelease: a lease that changed between the plan and the
// release (the owner was alive and renewed, finished, or lost it) is
// refused by the store's guard and changes nothing.
func testRefusedRelease(t *testing.T, k kit) {
	f := newFx(t, k)
	l := f.claimNew("acme", "r-held", 3, "w-gone", 3_600_000)
	a := &auditor{t: f.target, actor: "ops-dan", o: Options{Clock: f.clock}}
	stale := Action{Action: "release", Tenant: "acme", RunID: "r-held", Owner: "w-gone", Generation: l.Generation + 1, Outcome: OutcomePlanned}
	done, err := a.apply(f.ctx, []Action{stale})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || done[0].Outcome != OutcomeRefused || done[0].Code != string(spec.CodeLostLease) {
		t.Fatalf("a release of a generation that is not the lease's: %+v, want refused with lost_lease", done)
	}
	if job, _ := f.s.GetJob(f.ctx, "acme", "r-held"); job.State != spec.JobLeased {
		t.Fatalf("a refused release changed the job: %+v", job)
	}
}

func testIdempotencyPastRetention(t *testing.T, k kit) {
	f := newFx(t, k, func(o *storetest.Options) { o.Config.IdempotencyRetentionMs = 60_000 })
	f.create("acme", "r1", 3)
	f.clock.Set(t0 + 61_000)
	r := f.diagnose(Options{})
	wantStatuses(t, k, r, nil)
	equal(t, "expired records", r.Idempotency.Expired, int64(1))
	f.clock.Set(t0 + 600_000)
	r = f.diagnose(Options{})
	wantStatuses(t, k, r, map[string]Status{"idempotency": StatusFail})
	equal(t, "oldest", r.Idempotency.OldestAgeMs, int64(540_000))
	if n, err := f.s.PurgeIdempotency(f.ctx, spec.PurgeRequest{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	wantStatuses(t, k, f.diagnose(Options{}), nil)
}

func testOutbox(t *testing.T, k kit) {
	f := newFx(t, k)
	res, err := f.s.CreateRun(f.ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-r1", RunID: "r1",
		Payload: []byte(`{}`), Outbox: []spec.Message{{Subject: "orders.created", Payload: []byte(`{"n":1}`)},
			{Subject: "orders.audit", Payload: []byte(`{"n":2}`)}}})
	if err != nil {
		t.Fatalf("CreateRun with outbox messages: %v", err)
	}
	wantStatuses(t, k, f.diagnose(Options{}), nil)
	f.clock.Set(t0 + 600_000)
	r := f.diagnose(Options{})
	wantStatuses(t, k, r, map[string]Status{"outbox": StatusFail})
	equal(t, "pending", [2]int64{r.Outbox.Pending, r.Outbox.OldestAgeMs}, [2]int64{2, 600_000})
	// Once a relay marks one delivered, one is left pending.
	if n, err := f.s.MarkDelivered(f.ctx, spec.MarkDeliveredRequest{Messages: []spec.OutboxKey{{Tenant: "acme", RunID: res.Run.ID, Seq: 1}}}); err != nil || n != 1 {
		t.Fatalf("MarkDelivered: %d, %v", n, err)
	}
	equal(t, "pending after a mark", f.diagnose(Options{}).Outbox.Pending, int64(1))

	// A table of that name in a shape the doctor does not know is not
	// checked, and says so: never a silent pass. (Nor are the invariants:
	// the store's snapshot cannot read the outbox either.)
	f.breakRows(false, `DROP TABLE outbox`, `CREATE TABLE outbox (id INTEGER PRIMARY KEY, body TEXT)`)
	r = f.diagnose(Options{})
	wantStatuses(t, k, r, map[string]Status{"outbox": StatusNotChecked, "invariants": StatusNotChecked})
	equal(t, "verdict", r.Verdict, VerdictIncomplete)
	equal(t, "columns", r.Outbox.Columns, []string{"id", "body"})
	// Without the table (a schema from before the outbox), not applicable.
	f.breakRows(false, `DROP TABLE outbox`)
	wantStatuses(t, k, f.diagnose(Options{}), map[string]Status{"outbox": StatusNotApplicable, "invariants": StatusNotChecked})
}

func testClaimPlanWithoutIndex(t *testing.T, k kit) {
	f := newFx(t, k)
	f.healthyRows()
	equal(t, "plan tenant", f.diagnose(Options{}).ClaimPlan.Tenant, "acme")
	f.breakRows(false, `DROP INDEX jobs_due`)
	r := f.diagnose(Options{Tenant: "beta"})
	wantStatuses(t, k, r, map[string]Status{"claim_plan": StatusWarn})
	equal(t, "verdict (a warning is not a failure)", r.Verdict, VerdictHealthy)
	if !strings.Contains(r.ClaimPlan.Summary, "missing [jobs_due]") || r.ClaimPlan.Tenant != "beta" {
		t.Fatalf("claim plan: %+v", r.ClaimPlan)
	}
}

// testLeaseExpiryInAnotherUnit: a lease expiry written in microseconds
// lies decades ahead; the contract allows it (no invariant breaks), the
// distribution warns.
func testLeaseExpiryInAnotherUnit(t *testing.T, k kit) {
	f := newFx(t, k)
	f.healthyRows()
	f.breakRows(false, `UPDATE jobs SET lease_expires_at = lease_expires_at * 1000 WHERE tenant = 'acme' AND run_id = 'r-run'`)
	r := f.diagnose(Options{})
	wantStatuses(t, k, r, map[string]Status{"lease_expiry": StatusWarn})
	equal(t, "far ahead", r.LeaseExpiry.Buckets[len(buckets)-1], Bucket{Range: "expires more than a day from now", Leases: 1})
}

func testSnapshotLimit(t *testing.T, k kit) {
	f := newFx(t, k)
	f.healthyRows()
	r := f.diagnose(Options{MaxRuns: 3})
	wantStatuses(t, k, r, map[string]Status{"invariants": StatusNotChecked})
	equal(t, "verdict", r.Verdict, VerdictIncomplete)
	wantStatuses(t, k, f.diagnose(Options{MaxRuns: 4}), nil)
}

// offset is the system clock moved by d ms.
type offset int64

func (o offset) Now() int64 { return time.Now().UnixMilli() + int64(o) }

func testClock(t *testing.T, k kit) {
	f := newFx(t, k)
	r := f.diagnose(Options{HostClock: offset(-600_000)})
	if k.name == "sqlite" {
		wantStatuses(t, k, r, nil) // not applicable either way
		return
	}
	wantStatuses(t, k, r, map[string]Status{"clock": StatusFail})
	if s := r.Clock.SkewMs; s < 599_000 || s > 601_000 {
		t.Fatalf("skew %d ms, want about 600000 (the host clock set 10 minutes behind)", s)
	}
}

func testBlockers(t *testing.T, k kit) {
	f := newFx(t, k)
	f.healthyRows()
	if k.name == "sqlite" {
		wantStatuses(t, k, f.diagnose(Options{}), nil)
		return
	}
	idle := DefaultThresholds()
	idle.Idle = 0
	conn := pgtest.Conn(t, pgtest.DSN(t), f.s.(*postgres.Store).Schema())
	mustExec(t, conn.Exec, "BEGIN", "SELECT run_id FROM jobs WHERE tenant = 'acme' AND run_id = 'r-q' FOR UPDATE")
	r := f.diagnose(Options{Thresholds: &idle})
	wantStatuses(t, k, r, map[string]Status{"blockers": StatusFail})
	if len(r.Blockers.Sessions) != 1 || r.Blockers.Sessions[0].Application != "leasehold-pgtest" ||
		r.Blockers.Sessions[0].State != "idle in transaction" {
		t.Fatalf("blockers: %+v", r.Blockers.Sessions)
	}
	wantStatuses(t, k, f.diagnose(Options{}), nil) // younger than the default threshold
	mustExec(t, conn.Exec, "ROLLBACK")
	r = f.diagnose(Options{Thresholds: &idle})
	wantStatuses(t, k, r, nil)
	equal(t, "sessions", r.Blockers.Sessions, []Session{})
}

// testOpenRefuses: the doctor opens only a database that exists at this
// leasehold's schema version, and creates or migrates nothing.
func testOpenRefuses(t *testing.T, k kit) {
	ctx := context.Background()
	if k.name == "sqlite" {
		dir := t.TempDir()
		missing := filepath.Join(dir, "typo.db")
		if _, err := OpenSQLite(ctx, missing); spec.CodeOf(err) != spec.CodeFailedPrecondition {
			t.Fatalf("OpenSQLite of a missing file: %v", err)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Fatalf("OpenSQLite created %s", missing)
		}
		path := filepath.Join(dir, "old.db")
		s, err := sqlite.Open(ctx, path, sqlite.Options{Config: spec.DefaultConfig()})
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, s.DB().ExecContext, `DELETE FROM leasehold_schema_migrations WHERE version = (SELECT max(version) FROM leasehold_schema_migrations)`)
		s.Close()
		if _, err := OpenSQLite(ctx, path); spec.CodeOf(err) != spec.CodeFailedPrecondition || !strings.Contains(err.Error(), "does not migrate") {
			t.Fatalf("OpenSQLite of an older schema: %v", err)
		}
		mustExec(t, rawSQLite(t, path).ExecContext, `INSERT INTO leasehold_schema_migrations VALUES (99, 'future', 'x', 0)`)
		if _, err := OpenSQLite(ctx, path); spec.CodeOf(err) != spec.CodeFailedPrecondition {
			t.Fatalf("OpenSQLite of a schema with a gap and a newer version: %v", err)
		}
		fresh := filepath.Join(dir, "ok.db")
		s, err = sqlite.Open(ctx, fresh, sqlite.Options{Config: spec.DefaultConfig()})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		tg, err := OpenSQLite(ctx, fresh)
		if err != nil {
			t.Fatal(err)
		}
		defer tg.Close()
		r, err := Diagnose(ctx, tg, Options{})
		if err != nil || r.Verdict != VerdictHealthy || r.NowSource != "this host's clock, which the SQLite store reads too" {
			t.Fatalf("Diagnose of a fresh file: %v, %+v", err, r)
		}
		return
	}
	dsn, schema := pgtest.Schema(t)
	if _, err := OpenPostgres(ctx, dsn, schema); spec.CodeOf(err) != spec.CodeFailedPrecondition || !strings.Contains(err.Error(), "wrong --schema?") {
		t.Fatalf("OpenPostgres of a missing schema: %v", err)
	}
	conn := pgtest.Conn(t, dsn, "")
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("OpenPostgres created schema %s (%d, %v)", schema, n, err)
	}
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	tg, err := OpenPostgres(ctx, dsn, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	r, err := Diagnose(ctx, tg, Options{})
	if err != nil || r.Verdict != VerdictHealthy || r.NowSource != "database clock" || strings.Contains(r.Database, "password") {
		t.Fatalf("Diagnose of a fresh schema: %v, %+v", err, r)
	}
	if !slices.Contains(strings.Fields(r.Database), "schema") {
		t.Fatalf("target name %q does not name the schema", r.Database)
	}
}

// rawSQLite opens the file at path with database/sql, past any store.
func rawSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// testCorrupt: a SQLite file whose pages are torn on purpose (the first
// half of a page overwritten, as a write cut short leaves it) is called
// corrupt, never "not a leasehold database" nor merely incomplete: a torn
// data page fails the integrity check (unhealthy); a torn schema page or
// header makes the open fail saying so.
func testCorrupt(t *testing.T, k kit) {
	if k.name != "sqlite" {
		wantStatuses(t, k, newFx(t, k).diagnose(Options{}), nil) // integrity: not applicable
		return
	}
	ctx := context.Background()
	good := filepath.Join(t.TempDir(), "good.db")
	s, err := sqlite.Open(ctx, good, sqlite.Options{Config: spec.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		id := fmt.Sprintf("r%03d", i)
		if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id, RunID: id,
			Payload: []byte(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 200)))}); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, s.DB().ExecContext, "PRAGMA wal_checkpoint(TRUNCATE)")
	var pageSize, pages int64
	if err := s.DB().QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	s.Close()
	body, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(body)) != pageSize*pages || pages < 20 {
		t.Fatalf("the file is %d bytes, want %d pages of %d (and at least 20)", len(body), pages, pageSize)
	}
	// torn writes garbage over [from, to) of page n (1-based) of a copy.
	torn := func(name string, n, from, to int64) string {
		b := append([]byte(nil), body...)
		for i := (n-1)*pageSize + from; i < (n-1)*pageSize+to; i++ {
			b[i] = byte(0xA5 ^ i)
		}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	tg, err := OpenSQLite(ctx, torn("data.db", pages/2, 0, pageSize/2))
	if err != nil {
		t.Fatalf("OpenSQLite of a file with a torn data page: %v; want it opened and diagnosed", err)
	}
	defer tg.Close()
	r, err := Diagnose(ctx, tg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	if r.Integrity.Status != StatusFail || !strings.Contains(r.Integrity.Summary, "corrupt") || len(r.Integrity.Problems) == 0 ||
		r.Verdict != VerdictUnhealthy || !strings.Contains(md.String(), "| integrity | fail | the database file is corrupt") {
		t.Fatalf("a torn data page: integrity %s %q, verdict %s; want integrity failed saying corrupt, unhealthy\n%s",
			r.Integrity.Status, r.Integrity.Summary, r.Verdict, md.String())
	}
	t.Logf("a torn data page: %s", firstLine(r.Integrity.Summary))

	for _, c := range []struct {
		name     string
		from, to int64
	}{
		{"schema page", 100, pageSize / 2}, // the b-tree of sqlite_schema, after the file header
		{"header", 0, 100},
	} {
		_, err := OpenSQLite(ctx, torn(c.name+".db", 1, c.from, c.to))
		if spec.CodeOf(err) != spec.CodeFailedPrecondition || !strings.Contains(err.Error(), "is corrupt") || strings.Contains(err.Error(), "not a leasehold database") {
			t.Fatalf("OpenSQLite of a file with a torn %s: %v; want failed_precondition saying corrupt", c.name, err)
		}
		t.Logf("a torn %s: %v", c.name, err)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// testHorizonAndDeadTuples: on PostgreSQL, a REPEATABLE READ transaction
// held open in the test's own schema pins the MVCC horizon (listed, and a
// failure past the threshold), and rows updated behind it pile up dead (a
// failure past the threshold); both are ok at the default thresholds and
// once it ends.
func testHorizonAndDeadTuples(t *testing.T, k kit) {
	f := newFx(t, k)
	f.healthyRows()
	if k.name == "sqlite" {
		wantStatuses(t, k, f.diagnose(Options{}), nil) // both not applicable
		return
	}
	schema := f.s.(*postgres.Store).Schema()
	holder := pgtest.Conn(t, pgtest.DSN(t), schema)
	var pid int64
	if err := holder.QueryRow(f.ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	mustExec(t, holder.Exec, "BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT count(*) FROM jobs")

	// 600 row versions behind the held snapshot: VACUUM may remove none.
	writer := pgtest.Conn(t, pgtest.DSN(t), schema)
	mustExec(t, writer.Exec, `DO $$ BEGIN FOR i IN 1..600 LOOP
			UPDATE jobs SET attempts = attempts WHERE tenant = 'acme' AND run_id = 'r-q';
		END LOOP; END $$`, "SELECT pg_stat_force_next_flush()")

	strict := DefaultThresholds()
	strict.Horizon, strict.DeadTuples = 0, 100
	r := f.diagnose(Options{Thresholds: &strict})
	wantStatuses(t, k, r, map[string]Status{"horizon": StatusFail, "dead_tuples": StatusFail})
	i := slices.IndexFunc(r.Horizon.Sessions, func(s HorizonSession) bool { return s.PID == pid })
	if i < 0 || r.Horizon.Sessions[i].Application != "leasehold-pgtest" || r.Horizon.Sessions[i].State != "idle in transaction" ||
		!strings.Contains(r.Horizon.Summary, fmt.Sprintf("pid %d (leasehold-pgtest", pid)) {
		t.Fatalf("horizon: the held transaction (pid %d) is not reported: %+v\n%s", pid, r.Horizon.Sessions, r.Horizon.Summary)
	}
	j := slices.IndexFunc(r.DeadTuples.Tables, func(tt TableTuples) bool { return tt.Table == "jobs" })
	if j < 0 || r.DeadTuples.Tables[j].Dead < 600 || !strings.Contains(r.DeadTuples.Summary, "dead rows pile up in jobs (") {
		t.Fatalf("dead tuples: %+v\n%s", r.DeadTuples.Tables, r.DeadTuples.Summary)
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	if !strings.Contains(md.String(), fmt.Sprintf("| %d | leasehold-pgtest |", pid)) || !strings.Contains(md.String(), "| jobs |") {
		t.Fatalf("the Markdown report does not list the session and the table:\n%s", md.String())
	}
	t.Logf("horizon: %s", r.Horizon.Summary)
	t.Logf("dead tuples: %s", r.DeadTuples.Summary)

	// The defaults: the session is younger than 5 minutes, 600 rows are
	// far below 10,000.
	wantStatuses(t, k, f.diagnose(Options{}), nil)
	mustExec(t, holder.Exec, "ROLLBACK")
	r = f.diagnose(Options{Thresholds: &strict})
	if slices.ContainsFunc(r.Horizon.Sessions, func(s HorizonSession) bool { return s.PID == pid }) {
		t.Fatalf("the ended transaction (pid %d) is still listed: %+v", pid, r.Horizon.Sessions)
	}
}
