package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/invariant"
)

// Status is the outcome of one check of a Report.
type Status string

const (
	StatusOK            Status = "ok"             // nothing wrong found
	StatusWarn          Status = "warn"           // worth a look; not a failure (the claim plan, odd expiries)
	StatusFail          Status = "fail"           // a violation, or a finding past its threshold
	StatusNotApplicable Status = "not_applicable" // the check has no meaning here (SQLite has no clock; no outbox table)
	StatusNotChecked    Status = "not_checked"    // the check could not run: never a pass
)

// Verdict is the whole report's outcome.
type Verdict string

const (
	VerdictHealthy    Verdict = "healthy"    // every check ok, warn or not applicable
	VerdictUnhealthy  Verdict = "unhealthy"  // a check failed
	VerdictIncomplete Verdict = "incomplete" // nothing failed, but a check did not run
)

// Check is what every check of a Report says.
type Check struct {
	Status  Status `json:"status"`
	Summary string `json:"summary"`
}

// Report is what Diagnose found, in the order it renders. Times are
// integer milliseconds (Unix epoch), ages are milliseconds before NowMs.
type Report struct {
	Store    string `json:"store"`    // "sqlite" or "postgres"
	Database string `json:"database"` // the target's name (never a password)
	Tenant   string `json:"tenant,omitempty"`
	// NowMs is the one time every finding is measured against, read from
	// NowSource: the database clock (PostgreSQL, as the store decides
	// expiry), this host's clock (SQLite, whose store reads its process's
	// clock), or an injected clock.
	NowMs      int64      `json:"now_ms"`
	NowSource  string     `json:"now_source"`
	Verdict    Verdict    `json:"verdict"`
	Thresholds Thresholds `json:"thresholds"`

	Invariants    InvariantsCheck  `json:"invariants"`
	ExpiredLeases LeaseCheck       `json:"expired_leases"`
	Reapable      LeaseCheck       `json:"reapable"`
	LeaseExpiry   ExpiryCheck      `json:"lease_expiry"`
	Clock         ClockCheck       `json:"clock"`
	Idempotency   IdempotencyCheck `json:"idempotency"`
	Outbox        OutboxCheck      `json:"outbox"`
	ClaimPlan     PlanCheck        `json:"claim_plan"`
	Blockers      BlockersCheck    `json:"blockers"`
	Integrity     IntegrityCheck   `json:"integrity"`
	Horizon       HorizonCheck     `json:"horizon"`
	DeadTuples    DeadTuplesCheck  `json:"dead_tuples"`

	Repairs Repairs `json:"repairs"`
}

// Thresholds are the ages past which a finding fails its check.
type Thresholds struct {
	// Leases: a lease expired that long ago and not reclaimed (budget
	// left), or not reaped (none left).
	Leases time.Duration
	// Idempotency: a record expired that long ago and not purged.
	Idempotency time.Duration
	// Outbox: a message pending that long.
	Outbox time.Duration
	// Idle: a session holding job locks, idle in transaction (or in a
	// transaction) that long.
	Idle time.Duration
	// Skew: the database clock that far from this host's.
	Skew time.Duration
	// Horizon: a session's snapshot (or transaction id) held that long,
	// which keeps VACUUM from removing any row that died since (PostgreSQL).
	Horizon time.Duration
	// DeadTuples: a table with more dead rows than this plus a fifth of
	// its live ones (autovacuum's own default trigger is 50 plus a fifth)
	// is not being vacuumed, or a pinned horizon keeps vacuum from removing
	// them (PostgreSQL). A count, not an age.
	DeadTuples int64
}

// MarshalJSON writes the thresholds in milliseconds, like every other time.
func (t Thresholds) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]int64{"leases_ms": t.Leases.Milliseconds(), "idempotency_ms": t.Idempotency.Milliseconds(),
		"outbox_ms": t.Outbox.Milliseconds(), "idle_ms": t.Idle.Milliseconds(), "skew_ms": t.Skew.Milliseconds(),
		"horizon_ms": t.Horizon.Milliseconds(), "dead_tuples": t.DeadTuples})
}

// InvariantsCheck is the contract's invariants (package invariant) on a
// snapshot of every row.
type InvariantsCheck struct {
	Check
	Runs       int                   `json:"runs"` // runs checked (the tenant's, with --tenant)
	Rows       int                   `json:"rows"` // rows checked, of every kind
	MaxRuns    int                   `json:"max_runs"`
	Violations []invariant.Violation `json:"violations"`
	// DatabaseViolations counts the violations in the whole database,
	// every tenant's rows (Violations lists only the tenant's, with
	// --tenant). Repair refuses while it is not 0, whatever its scope.
	DatabaseViolations int `json:"database_violations"`
}

// TenantLeases is one tenant's count of a kind of lease.
type TenantLeases struct {
	Tenant      string `json:"tenant"`
	Count       int64  `json:"count"`
	OldestAgeMs int64  `json:"oldest_age_ms"` // since the oldest expiry
}

// LeaseRow is one leased job.
type LeaseRow struct {
	Tenant      string `json:"tenant"`
	RunID       string `json:"run_id"`
	Owner       string `json:"owner"`
	Generation  int64  `json:"generation"`
	Attempts    int64  `json:"attempts"`
	MaxAttempts int64  `json:"max_attempts"`
	ExpiresAt   int64  `json:"expires_at"`
	// AgeMs is how long ago the lease expired (negative: it expires in
	// that long).
	AgeMs int64 `json:"age_ms"`
}

// LeaseCheck is a kind of expired lease, per tenant, with the oldest.
type LeaseCheck struct {
	Check
	Total   int64          `json:"total"`
	Tenants []TenantLeases `json:"tenants"`
	Oldest  []LeaseRow     `json:"oldest"` // up to SampleSize, oldest first
	// LastAttemptUnexpired (reapable only): leases on their last attempt
	// that have not expired: their owner may still finish; reapable once
	// they expire.
	LastAttemptUnexpired int64 `json:"last_attempt_unexpired,omitempty"`
}

// Bucket is one range of the lease-expiry distribution.
type Bucket struct {
	Range  string `json:"range"`
	Leases int64  `json:"leases"`
}

// OwnerLeases is one lease owner's leases.
type OwnerLeases struct {
	Owner   string `json:"owner"`
	Leases  int64  `json:"leases"`
	Expired int64  `json:"expired"`
}

// ExpiryCheck is where the leased jobs' expiries fall relative to now, and
// who holds them.
type ExpiryCheck struct {
	Check
	Leased  int64         `json:"leased"`
	Buckets []Bucket      `json:"buckets"` // every range, in order, zeros included
	Owners  []OwnerLeases `json:"owners"`  // up to SampleSize, most leases first
}

// ClockCheck compares the database clock with this host's.
type ClockCheck struct {
	Check
	DatabaseMs int64 `json:"database_ms,omitempty"`
	HostMs     int64 `json:"host_ms,omitempty"`
	// SkewMs is database minus host (positive: the database is ahead),
	// measured to within UncertaintyMs (half the round trip).
	SkewMs        int64
	UncertaintyMs int64 `json:"uncertainty_ms"`
}

// IdempotencyCheck is the idempotency records past their retention.
type IdempotencyCheck struct {
	Check
	Expired     int64 `json:"expired"`
	OldestAgeMs int64 `json:"oldest_age_ms"`
}

// OutboxCheck is the outbox's pending messages, when it has a table.
type OutboxCheck struct {
	Check
	Table       string   `json:"table"`
	Columns     []string `json:"columns,omitempty"` // the table's, when they are not the ones the doctor knows
	Pending     int64    `json:"pending"`
	OldestAgeMs int64    `json:"oldest_age_ms"`
}

// PlanCheck is the plan of the claim statement.
type PlanCheck struct {
	Check
	Tenant      string   `json:"tenant"`
	Plan        string   `json:"plan"`
	WantIndexes []string `json:"want_indexes"`
}

// Session is a database session holding a lock on the jobs table.
type Session struct {
	PID         int64  `json:"pid"`
	Application string `json:"application"`
	User        string `json:"user"`
	State       string `json:"state"`
	XactAgeMs   int64  `json:"xact_age_ms"`
	StateAgeMs  int64  `json:"state_age_ms"`
	WaitEvent   string `json:"wait_event"`
	BlockedBy   int64  `json:"blocked_by"` // sessions this one waits for
	Query       string `json:"query"`
}

// BlockersCheck is the sessions holding job locks (PostgreSQL).
type BlockersCheck struct {
	Check
	Sessions []Session `json:"sessions"`
}

// IntegrityCheck is the database file's own integrity check (SQLite's
// PRAGMA quick_check): a database it finds problems in is corrupt.
type IntegrityCheck struct {
	Check
	Problems []string `json:"problems"` // quick_check's lines, up to SampleSize
}

// HorizonSession is a session holding a snapshot or a transaction id, which
// keeps VACUUM from removing rows that died after it began.
type HorizonSession struct {
	PID         int64  `json:"pid"`
	Application string `json:"application"`
	User        string `json:"user"`
	State       string `json:"state"`
	// XIDAge is how many transactions ago its snapshot's horizon
	// (backend_xmin, or its own backend_xid) is: how far it holds the
	// database's horizon back.
	XIDAge int64 `json:"xid_age"`
	// SnapshotAgeMs is how long it has held it: since its transaction
	// began (or its statement, outside one).
	SnapshotAgeMs int64  `json:"snapshot_age_ms"`
	Query         string `json:"query"`
}

// HorizonCheck is the sessions of the database pinning the MVCC horizon
// (PostgreSQL), the oldest first.
type HorizonCheck struct {
	Check
	Sessions []HorizonSession `json:"sessions"`
}

// TableTuples is one of the store's tables as PostgreSQL's statistics see
// it.
type TableTuples struct {
	Table string `json:"table"`
	Live  int64  `json:"live"`
	Dead  int64  `json:"dead"`
	// LastVacuumAgeMs is since the table was last vacuumed (by hand or
	// by autovacuum); -1: never.
	LastVacuumAgeMs int64 `json:"last_vacuum_age_ms"`
}

// DeadTuplesCheck is the dead rows of the store's tables (PostgreSQL).
type DeadTuplesCheck struct {
	Check
	Tables []TableTuples `json:"tables"`
}

// Repairs is what a repair would do (Mode "dry_run": Diagnose's plan) or
// did (Mode "applied": Repair's results).
type Repairs struct {
	Mode    string   `json:"mode"`
	Actor   string   `json:"actor,omitempty"`
	Actions []Action `json:"actions"`
	// More is how many more planned reaps there are than Actions lists.
	More  int64    `json:"more,omitempty"`
	Notes []string `json:"notes,omitempty"`
	// Before is the verdict and failing checks before an applied repair.
	Before *Before `json:"before,omitempty"`
}

// Before summarizes the diagnosis an applied repair started from.
type Before struct {
	Verdict Verdict  `json:"verdict"`
	Failed  []string `json:"failed"`
}

// Action is one repair: a reap or a release of one run's job, through the
// store's own guarded operation.
type Action struct {
	Action     string `json:"action"` // "reap" or "release"; an operator's "cancel" or "replay" (Cancel, Replay)
	Tenant     string `json:"tenant"`
	RunID      string `json:"run_id,omitempty"`
	Owner      string `json:"owner,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// Outcome: planned (dry run), applied, refused (the store's guard
	// said no: Code says why; nothing changed) or failed (the operation
	// did not run: Code and Message say why).
	Outcome string `json:"outcome"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Action outcomes.
const (
	OutcomePlanned = "planned"
	OutcomeApplied = "applied"
	OutcomeRefused = "refused"
	OutcomeFailed  = "failed"
)

// named is a check with its name in the report.
type named struct {
	name, title string
	c           *Check
}

// checks lists every check in report order: the verdict, the summary
// table and the sections are all made from this one list.
func (r *Report) checks() []named {
	return []named{
		{"invariants", "Contract invariants", &r.Invariants.Check},
		{"expired_leases", "Leases expired and not reclaimed", &r.ExpiredLeases.Check},
		{"reapable", "Leased with no attempts left", &r.Reapable.Check},
		{"lease_expiry", "Lease expiry distribution", &r.LeaseExpiry.Check},
		{"clock", "Database clock", &r.Clock.Check},
		{"idempotency", "Idempotency records past retention", &r.Idempotency.Check},
		{"outbox", "Outbox", &r.Outbox.Check},
		{"claim_plan", "Claim plan", &r.ClaimPlan.Check},
		{"blockers", "Blockers", &r.Blockers.Check},
		{"integrity", "Integrity", &r.Integrity.Check},
		{"horizon", "MVCC horizon", &r.Horizon.Check},
		{"dead_tuples", "Dead tuples", &r.DeadTuples.Check},
	}
}

// Failed names the checks that failed, in report order.
func (r *Report) Failed() []string { return r.withStatus(StatusFail) }

// NotChecked names the checks that could not run.
func (r *Report) NotChecked() []string { return r.withStatus(StatusNotChecked) }

func (r *Report) withStatus(s Status) []string {
	var out []string
	for _, c := range r.checks() {
		if c.c.Status == s {
			out = append(out, c.name)
		}
	}
	return out
}

// verdict computes Verdict from the checks.
func (r *Report) verdict() Verdict {
	switch {
	case len(r.Failed()) > 0:
		return VerdictUnhealthy
	case len(r.NotChecked()) > 0:
		return VerdictIncomplete
	}
	return VerdictHealthy
}

// RepairFailed reports whether an applied repair was refused or failed.
func (r *Report) RepairFailed() bool {
	return slices.ContainsFunc(r.Repairs.Actions, func(a Action) bool {
		return a.Outcome == OutcomeRefused || a.Outcome == OutcomeFailed
	})
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// age renders milliseconds as a duration to the millisecond ("9m50s").
func age(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

func at(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }

// cell makes a value safe in a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// maxListed bounds the repairs the Markdown lists one by one (JSON has all).
const maxListed = 50

// WriteMarkdown writes the report as Markdown: the verdict, a table of the
// checks, then one section per check and the repairs.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	scope := "all tenants"
	if r.Tenant != "" {
		scope = "tenant " + r.Tenant
	}
	p("# leasehold doctor: %s\n\n", strings.ToUpper(string(r.Verdict)))
	p("%s; %s; at %s (%s).\n", r.Database, scope, at(r.NowMs), r.NowSource)
	switch r.Verdict {
	case VerdictUnhealthy:
		p("Failed: %s.\n", strings.Join(r.Failed(), ", "))
	case VerdictIncomplete:
		p("Not checked: %s (a check that did not run is not a pass).\n", strings.Join(r.NotChecked(), ", "))
	}
	p("\n| check | status | finding |\n|---|---|---|\n")
	for _, c := range r.checks() {
		p("| %s | %s | %s |\n", c.name, c.c.Status, cell(c.c.Summary))
	}
	section := func(n named) { p("\n## %s: %s\n\n%s\n", n.title, n.c.Status, n.c.Summary) }
	cs := r.checks()

	section(cs[0])
	for _, v := range r.Invariants.Violations {
		p("- %s (%s)\n", cell(v.String()), invariant.Titles[v.Invariant])
	}
	for i, lc := range []*LeaseCheck{&r.ExpiredLeases, &r.Reapable} {
		section(cs[1+i])
		if len(lc.Tenants) > 0 {
			p("\n| tenant | leases | oldest expired |\n|---|---:|---:|\n")
			for _, t := range lc.Tenants {
				p("| %s | %d | %s ago |\n", cell(t.Tenant), t.Count, age(t.OldestAgeMs))
			}
			p("\n| tenant | run | owner | generation | attempts | expired |\n|---|---|---|---:|---:|---:|\n")
			for _, l := range lc.Oldest {
				p("| %s | %s | %s | %d | %d/%d | %s ago |\n", cell(l.Tenant), cell(l.RunID), cell(l.Owner), l.Generation, l.Attempts, l.MaxAttempts, age(l.AgeMs))
			}
		}
	}
	section(cs[3])
	if r.LeaseExpiry.Leased > 0 {
		p("\n| lease expiry | leases |\n|---|---:|\n")
		for _, bk := range r.LeaseExpiry.Buckets {
			p("| %s | %d |\n", bk.Range, bk.Leases)
		}
		p("\n| owner | leases | expired |\n|---|---:|---:|\n")
		for _, o := range r.LeaseExpiry.Owners {
			p("| %s | %d | %d |\n", cell(o.Owner), o.Leases, o.Expired)
		}
	}
	for _, n := range cs[4:7] {
		section(n)
	}
	section(cs[7])
	if r.ClaimPlan.Plan != "" {
		p("\n```text\n%s\n```\n", r.ClaimPlan.Plan)
	}
	section(cs[8])
	if len(r.Blockers.Sessions) > 0 {
		p("\n| pid | application | user | state | transaction | in state | waits for | query |\n|---:|---|---|---|---:|---:|---:|---|\n")
		for _, s := range r.Blockers.Sessions {
			p("| %d | %s | %s | %s | %s | %s | %d | `%s` |\n", s.PID, cell(s.Application), cell(s.User), cell(s.State),
				age(s.XactAgeMs), age(s.StateAgeMs), s.BlockedBy, cell(s.Query))
		}
	}
	section(cs[9])
	for _, pr := range r.Integrity.Problems {
		p("- %s\n", cell(pr))
	}
	section(cs[10])
	if len(r.Horizon.Sessions) > 0 {
		p("\n| pid | application | user | state | holds back | for | query |\n|---:|---|---|---|---:|---:|---|\n")
		for _, s := range r.Horizon.Sessions {
			p("| %d | %s | %s | %s | %d transactions | %s | `%s` |\n", s.PID, cell(s.Application), cell(s.User), cell(s.State),
				s.XIDAge, age(s.SnapshotAgeMs), cell(s.Query))
		}
	}
	section(cs[11])
	if len(r.DeadTuples.Tables) > 0 {
		p("\n| table | live | dead | last vacuumed |\n|---|---:|---:|---:|\n")
		for _, t := range r.DeadTuples.Tables {
			last := "never"
			if t.LastVacuumAgeMs >= 0 {
				last = age(t.LastVacuumAgeMs) + " ago"
			}
			p("| %s | %d | %d | %s |\n", cell(t.Table), t.Live, t.Dead, last)
		}
	}

	rp := r.Repairs
	switch rp.Mode {
	case "applied":
		p("\n## Repairs applied by %s\n\n", rp.Actor)
		if rp.Before != nil {
			p("Before: %s", rp.Before.Verdict)
			if len(rp.Before.Failed) > 0 {
				p(" (failed: %s)", strings.Join(rp.Before.Failed, ", "))
			}
			p("; the checks above are after the repairs. Each repair is in the %s table.\n\n", auditTable)
		}
	default:
		p("\n## Repairs (dry run)\n\n")
	}
	if len(rp.Actions) == 0 {
		p("Nothing to repair.\n")
	}
	for i, a := range rp.Actions {
		if i == maxListed {
			p("- … and %d more (the JSON report lists them all)\n", len(rp.Actions)-maxListed)
			break
		}
		p("- %s %s/%s (generation %d, owner %s): %s", a.Action, cell(a.Tenant), cell(a.RunID), a.Generation, cell(a.Owner), a.Outcome)
		if a.Code != "" {
			p(" (%s: %s)", a.Code, cell(a.Message))
		}
		p("\n")
	}
	if rp.More > 0 {
		p("- … and %d more reapable jobs\n", rp.More)
	}
	for _, n := range rp.Notes {
		p("\n%s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
