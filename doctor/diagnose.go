package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/invariant"
	"github.com/leasehold/leasehold/spec"
)

// Options says what Diagnose looks at and how it judges it. The zero value
// diagnoses every tenant with the default thresholds.
type Options struct {
	// Tenant restricts the findings to one tenant ("" all): the
	// invariants (read from a snapshot of every row, then filtered: see
	// MaxRuns), leases, idempotency records and repairs. The clock, the
	// outbox and the blockers are the database's.
	Tenant string
	// Clock is "now" for every finding. nil: the database clock on
	// PostgreSQL (what the store decides expiry by) and this host's clock
	// on SQLite (the store reads its process's clock). Tests inject the
	// clock their store runs on.
	Clock clock.Clock
	// HostClock is this host's clock, which the database clock is compared
	// with. nil: the system clock.
	HostClock clock.Clock
	// Thresholds are the ages past which a finding fails (0: any age).
	// nil: DefaultThresholds().
	Thresholds *Thresholds
	// MaxRuns bounds the invariant check: it reads every row of the
	// database in one snapshot (one REPEATABLE READ transaction on
	// PostgreSQL), so with more runs than this it is not run and the report
	// says so (an incomplete verdict). 0 means DefaultMaxRuns.
	MaxRuns int
	// ReleaseOwners names lease owners (workers) the operator knows are
	// dead: their unexpired leases are planned for release (Repair releases
	// them).
	ReleaseOwners []string
}

// DefaultMaxRuns is Options.MaxRuns' default.
const DefaultMaxRuns = 100_000

// SampleSize bounds the lease rows and owners a report lists.
const SampleSize = 20

// planLimit bounds the repairs a dry run lists.
const planLimit = 1000

// DefaultThresholds are the thresholds when Options.Thresholds is nil.
// Workers reclaim expired leases on their next claim and reap and purge
// every 30 s (worker.Config.Maintenance), so anything older than five
// minutes means nobody is doing it.
func DefaultThresholds() Thresholds {
	return Thresholds{Leases: 5 * time.Minute, Idempotency: 5 * time.Minute, Outbox: 5 * time.Minute,
		Idle: time.Minute, Skew: time.Second, Horizon: 5 * time.Minute, DeadTuples: 10_000}
}

func (o Options) validate() error {
	if o.Tenant != "" {
		if err := spec.DefaultConfig().CheckTenant(o.Tenant); err != nil {
			return err
		}
	}
	for _, w := range o.ReleaseOwners {
		if err := spec.CheckWorker(w); err != nil {
			return spec.Errorf(spec.CodeInvalidArgument, "doctor: release owner %q: %v", w, err)
		}
	}
	if o.MaxRuns < 0 {
		return spec.Errorf(spec.CodeInvalidArgument, "doctor: MaxRuns %d: want >= 0 (0: %d)", o.MaxRuns, DefaultMaxRuns)
	}
	return nil
}

// diag is one diagnosis in progress.
type diag struct {
	t    *Target
	o    Options
	th   Thresholds
	host clock.Clock
	r    *Report
}

// hostClock is o.HostClock, or the system clock.
func hostClock(o Options) clock.Clock {
	if o.HostClock != nil {
		return o.HostClock
	}
	return clock.System{}
}

// clockNow returns the time findings are measured against and its source.
func (t *Target) clockNow(ctx context.Context, o Options, host clock.Clock) (int64, string, error) {
	switch {
	case o.Clock != nil:
		return o.Clock.Now(), "injected clock", nil
	case t.pg != nil:
		now, err := t.pg.DatabaseTime(ctx)
		return now, "database clock", err
	}
	return host.Now(), "this host's clock, which the SQLite store reads too", nil
}

// Diagnose reads the target and returns its report: every contract
// invariant that fails on a snapshot of its rows, leases expired and not
// reclaimed, jobs leased with no attempts left, the lease-expiry
// distribution, the database clock against this host's, idempotency
// records past retention, the outbox (when it has a table), the claim's
// plan, sessions holding job locks (PostgreSQL), and the repairs Repair
// would make (Repairs.Mode "dry_run"). It writes nothing.
//
// A check that cannot run says so (StatusNotChecked, with the error): it
// is never reported as a pass. Diagnose itself fails only on invalid
// options (invalid_argument) or when it cannot read the database clock.
func Diagnose(ctx context.Context, t *Target, o Options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	th := DefaultThresholds()
	if o.Thresholds != nil {
		th = *o.Thresholds
	}
	if o.MaxRuns == 0 {
		o.MaxRuns = DefaultMaxRuns
	}
	d := &diag{t: t, o: o, th: th, host: hostClock(o)}
	now, source, err := t.clockNow(ctx, o, d.host)
	if err != nil {
		return nil, err
	}
	d.r = &Report{Store: t.kind, Database: t.name, Tenant: o.Tenant, NowMs: now, NowSource: source, Thresholds: th}
	for _, step := range []func(context.Context) error{d.invariants, d.expiredLeases, d.reapable, d.leaseExpiry, d.clock,
		d.idempotency, d.outbox, d.claimPlan, d.blockers, d.integrity, d.horizon, d.deadTuples} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		_ = step(ctx) // each step records its own failure in its check
	}
	d.plan(ctx)
	d.r.Verdict = d.r.verdict()
	return d.r, nil
}

// args are the parameters every finding's query takes.
func (d *diag) args(more args) args {
	a := args{"now": d.r.NowMs, "tenant": d.o.Tenant}
	for k, v := range more {
		a[k] = v
	}
	return a
}

// notChecked marks c as not run because of err, and returns err.
func notChecked(c *Check, what string, err error) error {
	c.Status, c.Summary = StatusNotChecked, fmt.Sprintf("not checked: %s: %v", what, err)
	return err
}

func (d *diag) invariants(ctx context.Context) error {
	c := &d.r.Invariants
	c.MaxRuns, c.Violations = d.o.MaxRuns, []invariant.Violation{}
	var n int64
	if err := one(ctx, d.t.db, countRuns, args{"limit": d.o.MaxRuns + 1}, &n); err != nil {
		return notChecked(&c.Check, "counting runs", err)
	}
	if n > int64(d.o.MaxRuns) {
		c.Status = StatusNotChecked
		c.Summary = fmt.Sprintf("not checked: the database has more than %d runs, and the check reads every row in one snapshot; raise --max-runs to check them all (the findings below are bounded queries and ran)", d.o.MaxRuns)
		return nil
	}
	snap, err := d.t.store.Snapshot(ctx)
	if err != nil {
		return notChecked(&c.Check, "Snapshot", err)
	}
	// The whole database's violations are counted whatever the scope: a
	// repair of one tenant is refused while any rows are broken.
	all := invariant.Check(snap)
	c.DatabaseViolations = len(all)
	if d.o.Tenant != "" {
		snap = snap.Of(d.o.Tenant)
		all = invariant.Check(snap)
	}
	c.Violations = append(c.Violations, all...)
	c.Runs = len(snap.Runs)
	c.Rows = len(snap.Runs) + len(snap.Events) + len(snap.Jobs) + len(snap.Attempts) + len(snap.Idempotency) + len(snap.Effects)
	scope := fmt.Sprintf("%s, %s, one snapshot of every row (limit %d runs)", plural(c.Runs, "run"), plural(c.Rows, "row"), d.o.MaxRuns)
	if len(c.Violations) == 0 {
		c.Status, c.Summary = StatusOK, "no violations in "+scope
		if c.DatabaseViolations > 0 {
			c.Summary += fmt.Sprintf("; the database has %s in other tenants' rows, so --repair is refused", plural(c.DatabaseViolations, "violation"))
		}
		return nil
	}
	c.Status, c.Summary = StatusFail, fmt.Sprintf("%s in %s", plural(len(c.Violations), "violation"), scope)
	return nil
}

// leases fills a LeaseCheck with the jobs of pred.
func (d *diag) leases(ctx context.Context, c *LeaseCheck, pred string) error {
	c.Tenants, c.Oldest = []TenantLeases{}, []LeaseRow{}
	err := d.t.db.query(ctx, leasesPerTenant(pred), d.args(nil), func(scan func(...any) error) error {
		var tl TenantLeases
		var oldest int64
		if err := scan(&tl.Tenant, &tl.Count, &oldest); err != nil {
			return err
		}
		tl.OldestAgeMs = d.r.NowMs - oldest
		c.Tenants = append(c.Tenants, tl)
		c.Total += tl.Count
		return nil
	})
	if err != nil {
		return err
	}
	c.Oldest, err = d.leaseRows(ctx, leaseRows(pred), d.args(args{"limit": SampleSize}))
	return err
}

func (d *diag) leaseRows(ctx context.Context, q string, a args) ([]LeaseRow, error) {
	out := []LeaseRow{}
	err := d.t.db.query(ctx, q, a, func(scan func(...any) error) error {
		var l LeaseRow
		if err := scan(&l.Tenant, &l.RunID, &l.Owner, &l.Generation, &l.Attempts, &l.MaxAttempts, &l.ExpiresAt); err != nil {
			return err
		}
		l.AgeMs = d.r.NowMs - l.ExpiresAt
		out = append(out, l)
		return nil
	})
	return out, err
}

// plural is "1 lease", "2 leases": a count and its noun.
func plural[I int | int64](count I, noun string) string {
	if count == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", count, noun)
}

// oldest is the largest age among the tenants' (0 with none).
func oldest(ts []TenantLeases) int64 {
	var m int64
	for _, t := range ts {
		m = max(m, t.OldestAgeMs)
	}
	return m
}

func tenantsOf(ts []TenantLeases) string {
	var n []string
	for _, t := range ts {
		n = append(n, t.Tenant)
	}
	return strings.Join(n, ", ")
}

func (d *diag) expiredLeases(ctx context.Context) error {
	c := &d.r.ExpiredLeases
	if err := d.leases(ctx, c, expiredWithBudget); err != nil {
		return notChecked(&c.Check, "reading expired leases", err)
	}
	limit := d.th.Leases
	switch old := oldest(c.Tenants); {
	case c.Total == 0:
		c.Status, c.Summary = StatusOK, "none"
	case old >= limit.Milliseconds():
		c.Status = StatusFail
		c.Summary = fmt.Sprintf("%s expired with attempts left, not taken over by any claim, the oldest %s ago (threshold %s): is any worker claiming for %s?",
			plural(c.Total, "lease"), age(old), limit, tenantsOf(c.Tenants))
	default:
		c.Status = StatusOK
		c.Summary = fmt.Sprintf("%s expired less than %s ago; the next claim of their tenant takes them over", plural(c.Total, "lease"), limit)
	}
	return nil
}

func (d *diag) reapable(ctx context.Context) error {
	c := &d.r.Reapable
	if err := d.leases(ctx, c, reapable); err != nil {
		return notChecked(&c.Check, "reading reapable jobs", err)
	}
	if err := one(ctx, d.t.db, countLastAttemptLive, d.args(nil), &c.LastAttemptUnexpired); err != nil {
		return notChecked(&c.Check, "counting last attempts", err)
	}
	live := ""
	if c.LastAttemptUnexpired > 0 {
		live = fmt.Sprintf("; %d more on their last attempt and unexpired (their owners may still finish them)", c.LastAttemptUnexpired)
	}
	limit := d.th.Leases
	switch old := oldest(c.Tenants); {
	case c.Total == 0:
		c.Status, c.Summary = StatusOK, "none"+live
	case old >= limit.Milliseconds():
		c.Status = StatusFail
		c.Summary = fmt.Sprintf("%s whose last attempt expired, which no claim can ever take, the oldest %s ago (threshold %s): is the workers' housekeeping (Store.Reap) off everywhere? --repair reaps them%s",
			plural(c.Total, "job"), age(old), limit, live)
	default:
		c.Status = StatusOK
		c.Summary = fmt.Sprintf("%s whose last attempt expired less than %s ago; the workers' housekeeping reaps them every 30 s%s", plural(c.Total, "job"), limit, live)
	}
	return nil
}

func (d *diag) leaseExpiry(ctx context.Context) error {
	c := &d.r.LeaseExpiry
	c.Buckets, c.Owners = make([]Bucket, len(buckets)), []OwnerLeases{}
	for i, b := range buckets {
		c.Buckets[i].Range = b.label
	}
	err := d.t.db.query(ctx, expiryDistribution, d.args(nil), func(scan func(...any) error) error {
		var i, n int64
		if err := scan(&i, &n); err != nil {
			return err
		}
		c.Buckets[i].Leases = n
		c.Leased += n
		return nil
	})
	if err == nil {
		err = d.t.db.query(ctx, leaseOwners, d.args(args{"limit": SampleSize}), func(scan func(...any) error) error {
			var o OwnerLeases
			if err := scan(&o.Owner, &o.Leases, &o.Expired); err != nil {
				return err
			}
			c.Owners = append(c.Owners, o)
			return nil
		})
	}
	if err != nil {
		return notChecked(&c.Check, "reading lease expiries", err)
	}
	var expired int64
	for i, b := range buckets {
		if b.upTo <= 0 && i < len(buckets)-1 {
			expired += c.Buckets[i].Leases
		}
	}
	far := c.Buckets[len(buckets)-1].Leases
	switch {
	case c.Leased == 0:
		c.Status, c.Summary = StatusOK, "no leased jobs"
	case far > 0:
		c.Status = StatusWarn
		c.Summary = fmt.Sprintf("%d of %d leases expire more than a day from now, beyond the longest lease the default config allows (1h): a writer's clock ahead of this one, or times stored in another unit than milliseconds?",
			far, c.Leased)
	default:
		c.Status, c.Summary = StatusOK, fmt.Sprintf("%s: %d expired, %d live", plural(c.Leased, "leased job"), expired, c.Leased-expired)
	}
	return nil
}

func (d *diag) clock(ctx context.Context) error {
	c := &d.r.Clock
	if d.t.pg == nil {
		c.Status = StatusNotApplicable
		c.Summary = "not applicable: SQLite has no clock of its own; its store reads the clock of the process that writes, so keep the clocks of the hosts that run it in step (NTP)"
		return nil
	}
	before := d.host.Now()
	db, err := d.t.pg.DatabaseTime(ctx)
	after := d.host.Now()
	if err != nil {
		return notChecked(&c.Check, "reading the database clock", err)
	}
	c.DatabaseMs, c.HostMs = db, before+(after-before)/2
	c.SkewMs, c.UncertaintyMs = db-c.HostMs, (after-before+1)/2
	limit := d.th.Skew
	dir := "ahead of"
	if c.SkewMs < 0 {
		dir = "behind"
	}
	skew := max(c.SkewMs, -c.SkewMs)
	if skew-c.UncertaintyMs > limit.Milliseconds() {
		c.Status = StatusFail
		c.Summary = fmt.Sprintf("the database clock is %s %s this host's (±%s; threshold %s): the store decides expiry by the database clock, so anything that reasons about leases by this host's clock is off by that much",
			age(skew), dir, age(c.UncertaintyMs), limit)
		return nil
	}
	c.Status = StatusOK
	c.Summary = fmt.Sprintf("the database clock is %s %s this host's (±%s; threshold %s)", age(skew), dir, age(c.UncertaintyMs), limit)
	return nil
}

func (d *diag) idempotency(ctx context.Context) error {
	c := &d.r.Idempotency
	var oldestExpiry int64
	if err := one(ctx, d.t.db, expiredIdempotency, d.args(nil), &c.Expired, &oldestExpiry); err != nil {
		return notChecked(&c.Check, "reading idempotency records", err)
	}
	if c.Expired > 0 {
		c.OldestAgeMs = d.r.NowMs - oldestExpiry
	}
	limit := d.th.Idempotency
	switch {
	case c.Expired == 0:
		c.Status, c.Summary = StatusOK, "none"
	case c.OldestAgeMs >= limit.Milliseconds():
		c.Status = StatusFail
		c.Summary = fmt.Sprintf("%s expired and not purged, the oldest %s ago (threshold %s): is the workers' housekeeping (Store.PurgeIdempotency) off everywhere?",
			plural(c.Expired, "record"), age(c.OldestAgeMs), limit)
	default:
		c.Status = StatusOK
		c.Summary = fmt.Sprintf("%s expired less than %s ago; the workers' housekeeping purges them every 30 s", plural(c.Expired, "record"), limit)
	}
	return nil
}

func (d *diag) outbox(ctx context.Context) error {
	c := &d.r.Outbox
	c.Table = outboxTable
	q, a := sqliteColumns, args{"table": outboxTable}
	if d.t.pg != nil {
		q, a["schema"] = postgresColumns, d.t.pg.Schema()
	}
	var cols []string
	err := d.t.db.query(ctx, q, a, func(scan func(...any) error) error {
		var name string
		err := scan(&name)
		cols = append(cols, name)
		return err
	})
	if err != nil {
		return notChecked(&c.Check, "looking for the outbox table", err)
	}
	if len(cols) == 0 {
		c.Status, c.Summary = StatusNotApplicable, "not applicable: this database has no "+outboxTable+" table"
		return nil
	}
	for _, want := range outboxColumns {
		if !slices.Contains(cols, want) {
			c.Columns = cols
			c.Status = StatusNotChecked
			c.Summary = fmt.Sprintf("not checked: the %s table has columns %s, and the doctor knows an outbox by %s (pending while state = 'pending', since created_at in ms): teach doctor/queries.go its shape",
				outboxTable, strings.Join(cols, ", "), strings.Join(outboxColumns, " and "))
			return nil
		}
	}
	var oldestCreated int64
	if err := one(ctx, d.t.db, outboxPending, nil, &c.Pending, &oldestCreated); err != nil {
		return notChecked(&c.Check, "reading the outbox", err)
	}
	if c.Pending > 0 {
		c.OldestAgeMs = d.r.NowMs - oldestCreated
	}
	limit := d.th.Outbox
	switch {
	case c.Pending == 0:
		c.Status, c.Summary = StatusOK, "no message pending (every tenant's: the outbox is not filtered by --tenant)"
	case c.OldestAgeMs >= limit.Milliseconds():
		c.Status = StatusFail
		c.Summary = fmt.Sprintf("%s pending, the oldest for %s (threshold %s): is the relay running?", plural(c.Pending, "message"), age(c.OldestAgeMs), limit)
	default:
		c.Status = StatusOK
		c.Summary = fmt.Sprintf("%s pending, none for %s", plural(c.Pending, "message"), limit)
	}
	return nil
}

// claimIndexes are the indexes each store's claim must read (its
// migrations say why; its plan tests hold it to them at depth).
var claimIndexes = map[string][]string{
	"sqlite":   {"jobs_due", "jobs_reap"},
	"postgres": {"jobs_due", "jobs_expired"},
}

func (d *diag) claimPlan(ctx context.Context) error {
	c := &d.r.ClaimPlan
	c.Tenant, c.WantIndexes = d.o.Tenant, claimIndexes[d.t.kind]
	if c.Tenant == "" {
		err := d.t.db.query(ctx, firstTenant, nil, func(scan func(...any) error) error { return scan(&c.Tenant) })
		if err != nil {
			return notChecked(&c.Check, "finding a tenant", err)
		}
		if c.Tenant == "" {
			c.Tenant = "doctor" // no jobs at all: the plan's shape is the same
		}
	}
	req := spec.ClaimRequest{Tenant: c.Tenant, Worker: "leasehold-doctor", LeaseMs: 1000, Limit: 1}
	var err error
	note := "(EXPLAIN QUERY PLAN: not executed)"
	if d.t.pg != nil {
		c.Plan, err = d.t.pg.PlanClaim(ctx, req)
		note = "(EXPLAIN: not executed)"
	} else {
		c.Plan, err = d.t.sq.ExplainClaim(ctx, req)
	}
	if err != nil {
		return notChecked(&c.Check, "explaining the claim", err)
	}
	var missing []string
	for _, ix := range c.WantIndexes {
		if !strings.Contains(c.Plan, ix) {
			missing = append(missing, ix)
		}
	}
	scans := fullScans(d.t.kind, c.Plan)
	switch {
	case len(missing) > 0 || len(scans) > 0:
		c.Status = StatusWarn
		c.Summary = fmt.Sprintf("the claim of tenant %s does not read its indexes: missing %v, full scans %v %s: a claim then costs more the deeper the queue; check the migrations' indexes exist (and ANALYZE on PostgreSQL)",
			c.Tenant, missing, scans, note)
	default:
		c.Status = StatusOK
		c.Summary = fmt.Sprintf("the claim of tenant %s reads %s, no full scan %s", c.Tenant, strings.Join(c.WantIndexes, " and "), note)
	}
	return nil
}

// fullScans returns the plan lines that read a whole table.
func fullScans(kind, plan string) []string {
	var out []string
	for _, l := range strings.Split(plan, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case kind == "postgres" && strings.Contains(l, "Seq Scan"):
			out = append(out, l)
		case kind == "sqlite" && strings.HasPrefix(l, "SCAN ") && !strings.Contains(l, " USING ") && !strings.HasPrefix(l, "SCAN ("):
			out = append(out, l)
		}
	}
	return out
}

func (d *diag) blockers(ctx context.Context) error {
	c := &d.r.Blockers
	c.Sessions = []Session{}
	if d.t.pg == nil {
		c.Status = StatusNotApplicable
		c.Summary = "not applicable: SQLite has one writer at a time and no row locks; a writer that holds the database too long shows as unavailable errors (the database stayed locked)"
		return nil
	}
	jobs := pgx.Identifier{d.t.pg.Schema(), "jobs"}.Sanitize()
	err := d.t.db.query(ctx, jobLockHolders, args{"jobs": jobs}, func(scan func(...any) error) error {
		var s Session
		if err := scan(&s.PID, &s.Application, &s.User, &s.State, &s.XactAgeMs, &s.StateAgeMs, &s.WaitEvent, &s.Query, &s.BlockedBy); err != nil {
			return err
		}
		c.Sessions = append(c.Sessions, s)
		return nil
	})
	if err != nil {
		return notChecked(&c.Check, "reading pg_stat_activity and pg_locks", err)
	}
	limit := d.th.Idle.Milliseconds()
	var long []string
	waiting := 0
	for _, s := range c.Sessions {
		idle := strings.HasPrefix(s.State, "idle in transaction")
		if (idle && s.StateAgeMs >= limit) || s.XactAgeMs >= limit {
			long = append(long, fmt.Sprintf("pid %d (%s, %s for %s)", s.PID, s.Application, s.State, age(s.StateAgeMs)))
		}
		if s.BlockedBy > 0 {
			waiting++
		}
	}
	switch {
	case len(c.Sessions) == 0:
		c.Status, c.Summary = StatusOK, "no session holds a lock on the jobs table"
	case len(long) > 0:
		c.Status = StatusFail
		c.Summary = fmt.Sprintf("%s hold job locks in a transaction open %s or longer (or idle in it): %s; claims skip the rows they hold and writes of those runs wait (%d waiting)",
			plural(len(long), "session"), d.th.Idle, strings.Join(long, ", "), waiting)
	default:
		c.Status = StatusOK
		c.Summary = fmt.Sprintf("%s hold job locks, none for %s (%d waiting)", plural(len(c.Sessions), "session"), d.th.Idle, waiting)
	}
	return nil
}

// integrity runs SQLite's quick_check: every page's b-tree structure, the
// records' format, NOT NULL and CHECK constraints (not the indexes against
// their tables: PRAGMA integrity_check does that too, at a higher cost).
func (d *diag) integrity(ctx context.Context) error {
	c := &d.r.Integrity
	c.Problems = []string{}
	if d.t.pg != nil {
		c.Status = StatusNotApplicable
		c.Summary = "not applicable: PostgreSQL checks its pages as it reads them (with data checksums, if the cluster was initialized with them); the amcheck extension verifies indexes"
		return nil
	}
	problems, err := quickCheck(ctx, d.t.db)
	if err != nil && !isCorrupt(err) {
		return notChecked(&c.Check, "PRAGMA quick_check", err)
	}
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) == 0 {
		c.Status, c.Summary = StatusOK, "PRAGMA quick_check: ok"
		return nil
	}
	c.Problems = problems
	c.Status = StatusFail
	damage := slices.DeleteFunc(slices.Clone(problems), constraintProblem)
	if len(damage) == 0 {
		c.Summary = fmt.Sprintf("rows break the schema's CHECK or NOT NULL constraints (written with the constraints off, or by another writer): PRAGMA quick_check found %s, the first: %s",
			plural(len(problems), "problem"), problems[0])
		return nil
	}
	c.Summary = fmt.Sprintf("the database file is corrupt: PRAGMA quick_check found %s (the first: %s). Stop writing to it; restore it from a backup, or salvage what is left with the sqlite3 shell's .recover",
		plural(len(damage), "problem"), damage[0])
	return nil
}

// constraintProblem reports whether a quick_check line is a row breaking
// a CHECK or NOT NULL constraint rather than damage to the file.
func constraintProblem(line string) bool {
	return strings.HasPrefix(line, "CHECK constraint failed") || strings.HasPrefix(line, "NULL value in ")
}

// horizon lists the sessions of the database that hold a snapshot or a
// transaction id: VACUUM can remove no row that died after the oldest of
// them began, on any table of the database, so a queue's churned rows pile
// up behind it.
func (d *diag) horizon(ctx context.Context) error {
	c := &d.r.Horizon
	c.Sessions = []HorizonSession{}
	if d.t.pg == nil {
		c.Status = StatusNotApplicable
		c.Summary = "not applicable: SQLite has no MVCC horizon (a long reader holds back WAL checkpoints instead)"
		return nil
	}
	err := d.t.db.query(ctx, horizonSessions, args{"limit": SampleSize}, func(scan func(...any) error) error {
		var s HorizonSession
		if err := scan(&s.PID, &s.Application, &s.User, &s.State, &s.XIDAge, &s.SnapshotAgeMs, &s.Query); err != nil {
			return err
		}
		c.Sessions = append(c.Sessions, s)
		return nil
	})
	if err != nil {
		return notChecked(&c.Check, "reading pg_stat_activity", err)
	}
	var long []string
	for _, s := range c.Sessions {
		if s.SnapshotAgeMs >= d.th.Horizon.Milliseconds() {
			long = append(long, fmt.Sprintf("pid %d (%s, %s, for %s, %d transactions back)", s.PID, s.Application, s.State, age(s.SnapshotAgeMs), s.XIDAge))
		}
	}
	switch {
	case len(long) > 0:
		c.Status = StatusFail
		c.Summary = fmt.Sprintf("%s of this database pin the MVCC horizon, holding a snapshot %s or longer: %s; until they end, VACUUM removes none of the rows the queue churns through since, and claims read past them",
			plural(len(long), "session"), d.th.Horizon, strings.Join(long, ", "))
	case len(c.Sessions) == 0:
		c.Status, c.Summary = StatusOK, "no session of this database holds a snapshot"
	default:
		c.Status = StatusOK
		c.Summary = fmt.Sprintf("%s hold a snapshot, none for %s", plural(len(c.Sessions), "session"), d.th.Horizon)
	}
	return nil
}

// deadTuples reads the statistics of the store's tables: dead rows piling
// up mean that vacuum does not run (autovacuum off, or far behind) or that
// a pinned horizon keeps it from removing them.
func (d *diag) deadTuples(ctx context.Context) error {
	c := &d.r.DeadTuples
	c.Tables = []TableTuples{}
	if d.t.pg == nil {
		c.Status = StatusNotApplicable
		c.Summary = "not applicable: SQLite reuses a deleted row's space in place (the file does not shrink without VACUUM, which costs no correctness)"
		return nil
	}
	err := d.t.db.query(ctx, tableTuples, args{"schema": d.t.pg.Schema()}, func(scan func(...any) error) error {
		var t TableTuples
		if err := scan(&t.Table, &t.Live, &t.Dead, &t.LastVacuumAgeMs); err != nil {
			return err
		}
		c.Tables = append(c.Tables, t)
		return nil
	})
	if err != nil {
		return notChecked(&c.Check, "reading pg_stat_user_tables", err)
	}
	var piling []string
	var dead int64
	for _, t := range c.Tables {
		dead += t.Dead
		if t.Dead > d.th.DeadTuples+t.Live/5 {
			piling = append(piling, fmt.Sprintf("%s (%d dead, %d live)", t.Table, t.Dead, t.Live))
		}
	}
	if len(piling) > 0 {
		c.Status = StatusFail
		c.Summary = fmt.Sprintf("dead rows pile up in %s: more than %d plus a fifth of the live ones. Is autovacuum off or behind, or does a session pin the horizon (above)?",
			strings.Join(piling, ", "), d.th.DeadTuples)
		return nil
	}
	c.Status = StatusOK
	c.Summary = fmt.Sprintf("%d dead rows in %s, none past %d plus a fifth of its live ones", dead, plural(len(c.Tables), "table"), d.th.DeadTuples)
	return nil
}

// plan lists the repairs Repair would make now.
func (d *diag) plan(ctx context.Context) {
	rp := &d.r.Repairs
	rp.Mode, rp.Actions = "dry_run", []Action{}
	reaps, err := d.leaseRows(ctx, leaseRows(reapable), d.args(args{"limit": planLimit}))
	if err != nil {
		rp.Notes = append(rp.Notes, fmt.Sprintf("Could not plan the reaps: %v", err))
	}
	for _, l := range reaps {
		rp.Actions = append(rp.Actions, Action{Action: "reap", Tenant: l.Tenant, RunID: l.RunID, Owner: l.Owner, Generation: l.Generation, Outcome: OutcomePlanned})
	}
	rp.More = max(0, d.r.Reapable.Total-int64(len(reaps)))
	for _, owner := range d.o.ReleaseOwners {
		leases, err := d.leaseRows(ctx, ownerLeases, d.args(args{"owner": owner, "limit": planLimit}))
		var expired int64
		if err == nil {
			err = one(ctx, d.t.db, countOwnerExpired, d.args(args{"owner": owner}), &expired)
		}
		if err != nil {
			rp.Notes = append(rp.Notes, fmt.Sprintf("Could not plan the releases of %s: %v", owner, err))
			continue
		}
		for _, l := range leases {
			rp.Actions = append(rp.Actions, Action{Action: "release", Tenant: l.Tenant, RunID: l.RunID, Owner: l.Owner, Generation: l.Generation, Outcome: OutcomePlanned})
		}
		if expired > 0 {
			rp.Notes = append(rp.Notes, fmt.Sprintf("%s of %s expired: no release needed (a claim takes it over, or the reap above when no attempts are left).", plural(expired, "lease"), owner))
		}
		if len(leases) == 0 && expired == 0 {
			rp.Notes = append(rp.Notes, fmt.Sprintf("%s holds no lease.", owner))
		}
	}
	if len(rp.Actions) > 0 {
		rp.Notes = append(rp.Notes, repairHelp)
	}
}

// repairHelp is what a dry run says about applying its plan.
const repairHelp = "Dry run: nothing was changed. `leasehold doctor --repair --actor NAME` applies these through the store's own guarded operations " +
	"(Reap: the run fails with lease_expired; Release: the job is queued again now, its attempt refunded, its generation kept) and records each in " +
	auditTable + ". Name a worker with --release-owner only when you know its process is gone: a live one would be fenced " +
	"(lost_lease on its next write) but may already have called external systems."
