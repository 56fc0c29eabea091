package doctor

import (
	"fmt"
	"strings"
)

// SQL of the doctor's findings. Both stores keep the job columns these
// read under the same names (SQLite's table per record and PostgreSQL's job
// row, impl/storetest.Layout), so each statement runs unchanged on both;
// parameters are @name. They read; only the audit statements write, and
// only the doctor's own table. Each selects leased jobs or expired records
// through the partial indexes the claim, the reaper and the purge use, so
// they stay cheap on a deep queue.

// tenantFilter restricts a statement to @tenant when it is not "".
const tenantFilter = `(@tenant = '' OR tenant = @tenant)`

// expiredWithBudget is a lease that expired with attempts left: claimable,
// so a claim of its tenant takes it over. reapable is one that expired on
// its last attempt: no claim will ever take it (SPEC.md, Reap).
const (
	expiredWithBudget = `state = 'leased' AND lease_expires_at <= @now AND attempts < max_attempts AND ` + tenantFilter
	reapable          = `state = 'leased' AND lease_expires_at <= @now AND attempts >= max_attempts AND ` + tenantFilter
	lastAttemptLive   = `state = 'leased' AND lease_expires_at > @now AND attempts >= max_attempts AND ` + tenantFilter
)

// leasesPerTenant counts the jobs of a predicate per tenant, with the
// oldest expiry.
func leasesPerTenant(pred string) string {
	return `SELECT tenant, count(*), min(lease_expires_at) FROM jobs WHERE ` + pred + ` GROUP BY tenant ORDER BY tenant`
}

// leaseRows lists up to @limit jobs of a predicate, oldest expiry first.
func leaseRows(pred string) string {
	return `SELECT tenant, run_id, coalesce(lease_owner, ''), lease_generation, attempts, max_attempts, coalesce(lease_expires_at, 0)
		FROM jobs WHERE ` + pred + ` ORDER BY lease_expires_at, tenant, run_id LIMIT @limit`
}

const countLastAttemptLive = `SELECT count(*) FROM jobs WHERE ` + lastAttemptLive

// buckets are the lease-expiry distribution's ranges, by how far a lease's
// expiry is from now (ms; upper bounds, inclusive; the last is open).
var buckets = []struct {
	upTo  int64
	label string
}{
	{-3_600_000, "expired more than 1h ago"},
	{-600_000, "expired 10m-1h ago"},
	{-60_000, "expired 1-10m ago"},
	{0, "expired in the last minute"},
	{60_000, "expires within a minute"},
	{600_000, "expires in 1-10m"},
	{3_600_000, "expires in 10m-1h"},
	{86_400_000, "expires in 1h-1d"},
	{0, "expires more than a day from now"},
}

// expiryDistribution counts the leased jobs per bucket (its index).
var expiryDistribution = func() string {
	var b strings.Builder
	b.WriteString(`SELECT CASE`)
	for i, bk := range buckets[:len(buckets)-1] {
		fmt.Fprintf(&b, ` WHEN lease_expires_at - @now <= %d THEN %d`, bk.upTo, i)
	}
	fmt.Fprintf(&b, ` ELSE %d END AS bucket, count(*) FROM jobs WHERE state = 'leased' AND %s GROUP BY 1 ORDER BY 1`, len(buckets)-1, tenantFilter)
	return b.String()
}()

// leaseOwners counts leases and expired leases per owner, most first.
const leaseOwners = `SELECT coalesce(lease_owner, ''), count(*), sum(CASE WHEN lease_expires_at <= @now THEN 1 ELSE 0 END)
	FROM jobs WHERE state = 'leased' AND ` + tenantFilter + `
	GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT @limit`

// ownerLeases lists an owner's unexpired leases: what --release-owner
// releases.
const ownerLeases = `SELECT tenant, run_id, lease_owner, lease_generation, attempts, max_attempts, lease_expires_at FROM jobs
	WHERE state = 'leased' AND lease_owner = @owner AND lease_expires_at > @now AND ` + tenantFilter + `
	ORDER BY tenant, run_id LIMIT @limit`

// countOwnerExpired counts an owner's expired leases, which need no release.
const countOwnerExpired = `SELECT count(*) FROM jobs
	WHERE state = 'leased' AND lease_owner = @owner AND lease_expires_at <= @now AND ` + tenantFilter

// expiredIdempotency counts the records past their retention that no purge
// has deleted yet, with the oldest expiry. A record is its run's row
// (runs_idempotency_expiry serves it).
const expiredIdempotency = `SELECT count(*), coalesce(min(idempotency_expires_at), 0) FROM runs
	WHERE idempotency_key IS NOT NULL AND idempotency_expires_at <= @now AND ` + tenantFilter

// countRuns counts up to @limit runs: whether the snapshot stays within
// --max-runs, without counting a large table to its end.
const countRuns = `SELECT count(*) FROM (SELECT 1 FROM runs LIMIT @limit) AS r`

// firstTenant is the first tenant with jobs (by the primary key, so it
// reads one row), whose claim the plan shows when --tenant is not given.
const firstTenant = `SELECT tenant FROM jobs ORDER BY tenant LIMIT 1`

// The outbox (SPEC.md, Outbox: migrations sqlite/0004, postgres/0006): a
// message is pending while state = 'pending', since created_at (ms). A
// table of that name with other columns (a schema the doctor does not know)
// is reported as not checked, naming these, rather than guessed at.
const (
	outboxTable   = "outbox"
	outboxPending = `SELECT count(*), coalesce(min(created_at), 0) FROM outbox WHERE state = 'pending'`
)

var outboxColumns = []string{"created_at", "state"}

// runOutbox reads one run's outbox messages in seq order (RunOutbox).
const runOutbox = `SELECT tenant, run_id, seq, message_id, subject, payload, generation, created_at, state,
		coalesce(relay, ''), coalesce(claim_expires_at, 0), claims, coalesce(delivered_at, 0)
	FROM outbox WHERE tenant = @tenant AND run_id = @run_id ORDER BY seq`

const (
	sqliteColumns   = `SELECT name FROM pragma_table_info(@table)`
	postgresColumns = `SELECT column_name::text FROM information_schema.columns WHERE table_schema = @schema AND table_name = @table`
)

// jobLockHolders lists the sessions (other than the doctor's) holding a
// lock on the jobs table: every transaction that writes a job row, or
// locks one (FOR UPDATE), holds one until it ends, so a session idle in
// transaction here holds job rows that claims skip and renewals wait for.
const jobLockHolders = `SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.usename::text, ''), coalesce(a.state, ''),
		coalesce(floor(extract(epoch FROM clock_timestamp() - a.xact_start) * 1000)::bigint, 0),
		coalesce(floor(extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::bigint, 0),
		coalesce(a.wait_event_type || ':' || a.wait_event, ''), left(coalesce(a.query, ''), 200),
		cardinality(pg_blocking_pids(a.pid))
	FROM pg_stat_activity AS a
	WHERE a.pid <> pg_backend_pid() AND a.pid IN (
		SELECT l.pid FROM pg_locks AS l WHERE l.granted AND l.relation = to_regclass(@jobs::text))
	ORDER BY a.xact_start NULLS LAST, a.pid`

// horizonSessions lists the client sessions of this database (other than
// the doctor's) that hold a snapshot (backend_xmin) or a transaction id
// (backend_xid), the one held longest first: the database's MVCC horizon
// is the oldest of them.
const horizonSessions = `SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.usename::text, ''), coalesce(a.state, ''),
		greatest(coalesce(age(a.backend_xmin), 0), coalesce(age(a.backend_xid), 0))::bigint,
		coalesce(floor(extract(epoch FROM clock_timestamp() - coalesce(a.xact_start, a.query_start)) * 1000)::bigint, 0),
		left(coalesce(a.query, ''), 200)
	FROM pg_stat_activity AS a
	WHERE a.pid <> pg_backend_pid() AND a.datname = current_database() AND a.backend_type = 'client backend'
		AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
	ORDER BY 6 DESC, a.pid LIMIT @limit`

// tableTuples reads the statistics of the store's tables (the server's
// estimates, flushed by each session now and then).
const tableTuples = `SELECT relname::text, n_live_tup, n_dead_tup,
		coalesce(floor(extract(epoch FROM clock_timestamp() - greatest(last_vacuum, last_autovacuum)) * 1000)::bigint, -1)
	FROM pg_stat_user_tables WHERE schemaname = @schema ORDER BY n_dead_tup DESC, relname`

// quickCheckSQL runs SQLite's quick_check, reporting up to SampleSize
// problems ("ok" alone when there are none).
const quickCheckSQL = `PRAGMA quick_check(20)`

// The audit trail of repairs: a table of the doctor's own beside the
// store's, append-only. Nothing else reads or changes it.
const (
	auditTable        = "leasehold_doctor_audit"
	createAuditSQLite = `CREATE TABLE IF NOT EXISTS ` + auditTable + ` (id INTEGER PRIMARY KEY AUTOINCREMENT, ` + auditColumnsDDL + `)`
	createAuditPG     = `CREATE TABLE IF NOT EXISTS ` + auditTable + ` (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ` + auditColumnsDDL + `)`
	auditColumnsDDL   = `at BIGINT NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL, tenant TEXT NOT NULL, run_id TEXT NOT NULL,
		owner TEXT NOT NULL, generation BIGINT NOT NULL, outcome TEXT NOT NULL, code TEXT NOT NULL, message TEXT NOT NULL`
	insertAudit = `INSERT INTO ` + auditTable + ` (at, actor, action, tenant, run_id, owner, generation, outcome, code, message)
		VALUES (@at, @actor, @action, @tenant, @run_id, @owner, @generation, @outcome, @code, @message)`
	selectAudit = `SELECT id, at, actor, action, tenant, run_id, owner, generation, outcome, code, message FROM ` + auditTable + ` ORDER BY id`
)
