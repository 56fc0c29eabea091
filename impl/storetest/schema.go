package storetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Tests of the schema itself: the migration, the first transaction, and the
// constraints that make the invariants hold in the database even for a writer
// that bypasses the store. Raw statements are plain SQL that SQLite and
// PostgreSQL both run unchanged; every statement the database must reject has
// a twin, differing only in the value under test, that it must accept, so a
// rejection can only come from the constraint under test. The tests that run
// raw SQL need CapSQL (Handle.Exec, written for Handle.Layout).

func init() {
	register("AtomicFirstEvent", testAtomicFirstEvent)
	register("MigrationRecorded", testMigrationRecorded)
	register("ReopenKeepsSchemaAndRows", testReopenKeepsSchemaAndRows)
	register("DatabaseRejectsOrphans", testDatabaseRejectsOrphans)
	register("DatabaseRejectsInvalidDomain", testDatabaseRejectsInvalidDomain)
}

func testMigrationRecorded(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.need(CapSQL)
	// Every table of the schema exists.
	tables := []string{"runs", "jobs", "attempts", "effects", "outbox", "leasehold_schema_migrations"}
	if e.h.Layout == LayoutTablePerRecord {
		tables = append(tables, "run_events")
	}
	for _, table := range tables {
		mustOK(t, "select from "+table, e.h.Exec(e.ctx, "SELECT count(*) FROM "+table))
	}
	// Version 1 is recorded: the version table refuses a second row for it.
	if err := e.h.Exec(e.ctx, `INSERT INTO leasehold_schema_migrations (version, name, checksum, applied_at) VALUES (1, 'x', 'x', 0)`); err == nil {
		t.Fatalf("migration version 1 is not recorded in leasehold_schema_migrations (a second row for it was accepted)")
	}
}

func testAtomicFirstEvent(t *testing.T, f Factory) {
	e := newEnv(t, f)
	empty := e.snap()
	mustEqual(t, "fresh store snapshot", empty, spec.Snapshot{})

	e.set(t0 + 5)
	r := req("acme", "run-1")
	got := e.create(r)
	want := e.wantRun(r, t0+5)
	mustEqual(t, "created run", got, want)
	// The run, its seq-1 event, its job and its idempotency record: nothing more.
	mustEqual(t, "snapshot after CreateRun", e.snap(), spec.Snapshot{
		Runs:   []spec.Run{want},
		Events: []spec.Event{{Tenant: "acme", RunID: "run-1", Seq: 1, Kind: spec.EventRunQueued, At: t0 + 5, Payload: "{}"}},
		Jobs: []spec.Job{{Tenant: "acme", RunID: "run-1", Operation: "work", State: spec.JobQueued, AvailableAt: t0 + 5,
			MaxAttempts: 3}},
		Idempotency: []spec.IdempotencyRecord{{Tenant: "acme", Operation: "work", Key: "k-run-1", Fingerprint: want.Fingerprint,
			RunID: "run-1", CreatedAt: t0 + 5, ExpiresAt: t0 + 5 + e.cfg.IdempotencyRetentionMs}},
	})
	// Defaults come from the operation's policy; explicit values are kept.
	r2 := req("acme", "run-2")
	r2.MaxAttempts, r2.TimeoutMs = 7, 1234
	got2 := e.create(r2)
	if got2.MaxAttempts != 7 || got2.DeadlineAt != t0+5+1234 {
		t.Fatalf("run-2: want max attempts 7 and deadline %d, got %+v", t0+5+1234, got2)
	}
	mustEqual(t, "run-2", got2, e.wantRun(r2, t0+5))
	mustEqual(t, "run-2 job", e.getJob("acme", "run-2").MaxAttempts, 7)
}

func testReopenKeepsSchemaAndRows(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.newRun("acme", "r1")
	before := e.snap()
	// A second store on the same database must not re-apply the migration
	// (it would fail on existing tables) and must see the same rows.
	s2 := e.h.Reopen(t)
	snap2, err := s2.Snapshot(e.ctx)
	mustOK(t, "Snapshot on the reopened store", err)
	mustEqual(t, "reopened store's snapshot", snap2, before)
	// Writes through either store are seen by the other.
	res, err := s2.CreateRun(e.ctx, req("acme", "r2"))
	mustOK(t, "CreateRun on the reopened store", err)
	mustEqual(t, "run created through the second store", e.getRun("acme", "r2"), res.Run)
}

// rawRun is a queued run without a job, inserted past the contract.
func rawRun(l Layout, tenant, id string) string {
	if l == LayoutJobRow {
		return fmt.Sprintf(`INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at, deadline_at)
		VALUES ('%s', '%s', 'work', '{}', 'fp', 3, 0, 10)`, tenant, id)
	}
	return fmt.Sprintf(`INSERT INTO runs (tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint, max_attempts, created_at, deadline_at)
		VALUES ('%s', '%s', 'work', 'queued', 1, 1, '{}', 'fp', 3, 0, 10)`, tenant, id)
}

// rawRunState inserts a run in the given state (with its job, in
// LayoutJobRow, where the run's state lives on the job row; a terminal run's
// terminal event comes with it there).
func rawRunState(l Layout, id, state string, version, lastSeq, maxAttempts int, created, deadline int64, errorCode, result string) string {
	if l == LayoutJobRow {
		jobState, finished, payload := "queued", "NULL", "NULL"
		switch state {
		case "completed", "failed", "cancelled":
			jobState = map[string]string{"completed": "completed", "failed": "dead", "cancelled": "cancelled"}[state]
			finished, payload = "0", "'{}'"
		}
		return fmt.Sprintf(`WITH r AS (INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at, deadline_at)
			VALUES ('t', '%s', 'work', '{}', 'fp', %d, %d, %d) RETURNING tenant, run_id, max_attempts)
			INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_generation, attempts, max_attempts,
				run_state, run_version, run_last_seq, run_error_code, run_result, run_finished_at, run_event_payload)
			SELECT tenant, run_id, 'work', '%s', 0, 0, 0, max_attempts, '%s', %d, %d, %s, %s, %s, %s FROM r`,
			id, maxAttempts, created, deadline, jobState, state, version, lastSeq, errorCode, result, finished, payload)
	}
	return fmt.Sprintf(`INSERT INTO runs (tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint, max_attempts, error_code, result, created_at, deadline_at)
			VALUES ('t', '%s', 'work', '%s', %d, %d, '{}', 'fp', %d, %s, %s, %d, %d)`, id, state, version, lastSeq, maxAttempts, errorCode, result, created, deadline)
}

func rawEvent(tenant, run string, seq int, kind string, at int64) string {
	return fmt.Sprintf(`INSERT INTO run_events (tenant, run_id, seq, kind, at, payload) VALUES ('%s', '%s', %d, '%s', %d, '{}')`,
		tenant, run, seq, kind, at)
}

// rawReplay is a queued run replaying run orig, without a job, inserted
// past the contract (LayoutJobRow): payload is the SQL of its run_queued
// payload (queued_payload).
func rawReplay(tenant, id, orig, payload string) string {
	return fmt.Sprintf(`INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at, deadline_at,
		replay_of, replay_depth, queued_payload) VALUES ('%s', '%s', 'work', '{}', 'fp', 3, 0, 10, '%s', 1, %s)`, tenant, id, orig, payload)
}

// rawJob inserts the job of a run made by rawRun. In LayoutJobRow the job
// row also carries its run's state (queued) and, when leased, its running
// attempt at the lease's generation.
func rawJob(l Layout, tenant, run, state, owner string, expires any, generation, attempts, maxAttempts int, availableAt int64) string {
	o := "NULL"
	if owner != "" {
		o = "'" + owner + "'"
	}
	cols, vals := "", ""
	if l == LayoutJobRow {
		cols, vals = ", run_state, run_version, run_last_seq", ", 'queued', 1, 1"
		if state == "leased" {
			cols += ", attempt_generation, attempt_number, attempt_worker, attempt_claimed_at, attempt_renewed_at, attempt_outcome"
			vals += fmt.Sprintf(", %d, %d, 'w', 0, 0, 'running'", generation, attempts)
		}
	}
	return fmt.Sprintf(`INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_owner, lease_expires_at, lease_generation, attempts, max_attempts%s)
		VALUES ('%s', '%s', 'work', '%s', %d, %s, %v, %d, %d, %d%s)`, cols, tenant, run, state, availableAt, o, expires, generation, attempts, maxAttempts, vals)
}

// rawIdem gives run its idempotency record: a record is its run's row
// (idempotency_key and idempotency_expires_at, with the run's operation,
// fingerprint and creation time).
func rawIdem(tenant, run, key string, expires int64) string {
	return fmt.Sprintf(`UPDATE runs SET idempotency_key = '%s', idempotency_expires_at = %d
		WHERE tenant = '%s' AND run_id = '%s'`, key, expires, tenant, run)
}

func rawAttempt(tenant, run string, generation int, outcome string, claimed int64, finished, retryAt any, class string) string {
	c := "NULL"
	if class != "" {
		c = "'" + class + "'"
	}
	return fmt.Sprintf(`INSERT INTO attempts (tenant, run_id, generation, number, worker, claimed_at, renewed_at, finished_at, outcome, error_class, retry_at)
		VALUES ('%s', '%s', %d, 1, 'w', %d, %d, %v, '%s', %s, %v)`, tenant, run, generation, claimed, claimed, finished, outcome, c, retryAt)
}

func rawOutbox(tenant, run string, seq int, state, relay string, expires, delivered any) string {
	r := "NULL"
	if relay != "" {
		r = "'" + relay + "'"
	}
	return fmt.Sprintf(`INSERT INTO outbox (tenant, run_id, seq, message_id, subject, payload, generation, created_at, state, relay, claim_expires_at, claims, delivered_at)
		VALUES ('%s', '%s', %d, 'id', 'orders.x', '{}', 0, 0, '%s', %s, %v, 1, %v)`, tenant, run, seq, state, r, expires, delivered)
}

func rawEffect(tenant, run, step, key, state string, generation int, updated int64) string {
	return fmt.Sprintf(`INSERT INTO effects (tenant, run_id, step, effect_key, state, provider_ref, generation, updated_at)
		VALUES ('%s', '%s', '%s', '%s', '%s', '', %d, %d)`, tenant, run, step, key, state, generation, updated)
}

// execCase is one raw statement and whether the database must accept it.
type execCase struct {
	name   string
	query  string
	accept bool
}

func runExecCases(t *testing.T, e *env, cases []execCase) {
	t.Helper()
	for _, c := range cases {
		err := e.h.Exec(e.ctx, c.query)
		switch {
		case c.accept && err != nil:
			t.Errorf("%s: the database must accept this row (it is the valid twin of a rejected one), got %v\n%s", c.name, err, c.query)
		case !c.accept && err == nil:
			t.Errorf("%s: the database accepted a row its constraints must reject\n%s", c.name, c.query)
		}
	}
}

func testDatabaseRejectsOrphans(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.need(CapSQL)
	l := e.h.Layout
	// A contract-made run with a claimed lease, so child rows have real parents.
	e.newRun("ta", "r1")
	e.claimOne("ta", "r1", "w", 10_000)
	e.newRun("tb", "r1b")
	contract := e.snap()
	if v := invariantViolations(contract); len(v) != 0 {
		t.Fatalf("snapshot of contract-made rows has orphans or violations: %v", v)
	}
	e.rawWrites = true
	cases := []execCase{
		// A raw run without a job or events is the parent for the twins below.
		{"raw run", rawRun(l, "ta", "raw1"), true},
	}
	if l == LayoutTablePerRecord {
		// Events (run_events holds the terminal ones: a run's run_queued
		// event is its run row): the run must exist for the same tenant.
		cases = append(cases,
			execCase{"event of a missing run", rawEvent("ta", "ghost", 2, "run_completed", 5), false},
			execCase{"event of another tenant's run", rawEvent("tb", "raw1", 2, "run_completed", 5), false},
			execCase{"event of an existing run", rawEvent("ta", "raw1", 2, "run_completed", 5), true})
	} else {
		// Every event is on the run's rows; a replay's original must exist
		// for the same tenant.
		cases = append(cases,
			execCase{"replay of a missing run", rawReplay("ta", "rp1", "ghost", "'{}'"), false},
			execCase{"replay of another tenant's run", rawReplay("tb", "rp1", "raw1", "'{}'"), false},
			execCase{"replay of an existing run", rawReplay("ta", "rp1", "raw1", "'{}'"), true})
	}
	cases = append(cases, []execCase{
		// Jobs.
		{"job of a missing run", rawJob(l, "ta", "ghost", "queued", "", "NULL", 0, 0, 3, 0), false},
		{"job of another tenant's run", rawJob(l, "tb", "raw1", "queued", "", "NULL", 0, 0, 3, 0), false},
		{"job of an existing run", rawJob(l, "ta", "raw1", "queued", "", "NULL", 0, 0, 3, 0), true},
		// (An idempotency record is its run's row: it cannot name a run
		// that is not there.)
		// Attempts: the job must exist.
		{"attempt of a missing run", rawAttempt("ta", "ghost", 1, "running", 0, "NULL", "NULL", ""), false},
		{"attempt of another tenant's run", rawAttempt("tb", "raw1", 1, "running", 0, "NULL", "NULL", ""), false},
		{"attempt of an existing job", rawAttempt("ta", "raw1", 1, "running", 0, "NULL", "NULL", ""), true},
		// Effects: the run's job must exist.
		{"effect of a missing run", rawEffect("ta", "ghost", "s", "k", "reserved", 1, 0), false},
		{"effect of another tenant's run", rawEffect("tb", "r1", "s", "k", "reserved", 1, 0), false},
	}...)
	if l == LayoutTablePerRecord {
		// Here an effect references its attempt row. (In LayoutJobRow the
		// attempt it was reserved under may still be on the job row, so an
		// effect references the job; the lease guard of every effect write
		// pins the generation.)
		cases = append(cases, execCase{"effect of a generation with no attempt", rawEffect("ta", "r1", "s", "k", "reserved", 2, 0), false})
	}
	cases = append(cases,
		execCase{"outbox message of a missing run", rawOutbox("ta", "ghost", 1, "pending", "", "NULL", "NULL"), false},
		execCase{"outbox message of another tenant's run", rawOutbox("tb", "r1", 1, "pending", "", "NULL", "NULL"), false},
		execCase{"outbox message of an existing run", rawOutbox("ta", "r1", 1, "pending", "", "NULL", "NULL"), true},
		execCase{"outbox: duplicate seq", rawOutbox("ta", "r1", 1, "pending", "", "NULL", "NULL"), false},
		execCase{"outbox: seq 0", rawOutbox("ta", "r1", 0, "pending", "", "NULL", "NULL"), false},
		execCase{"outbox: unknown state", rawOutbox("ta", "r1", 2, "sent", "", "NULL", "NULL"), false},
		execCase{"outbox: a claim without an expiry", rawOutbox("ta", "r1", 2, "pending", "relay", "NULL", "NULL"), false},
		execCase{"outbox: delivered without a time", rawOutbox("ta", "r1", 2, "delivered", "", "NULL", "NULL"), false},
		execCase{"outbox: delivered with a claim", rawOutbox("ta", "r1", 2, "delivered", "relay", 5, 5), false},
		execCase{"outbox: pending with a delivery time", rawOutbox("ta", "r1", 2, "pending", "", "NULL", 5), false},
		execCase{"outbox: claimed", rawOutbox("ta", "r1", 2, "pending", "relay", 5, "NULL"), true},
		execCase{"outbox: delivered", rawOutbox("ta", "r1", 3, "delivered", "", "NULL", 5), true},
	)
	runExecCases(t, e, append(cases, execCase{"effect of an existing attempt", rawEffect("ta", "r1", "s", "k", "reserved", 1, 0), true}))
	// A run with children cannot be deleted out from under them.
	if err := e.h.Exec(e.ctx, `DELETE FROM runs WHERE tenant = 'ta' AND run_id = 'r1'`); err == nil {
		t.Errorf("the database deleted a run that still has events, a job and an idempotency record")
	}
}

func testDatabaseRejectsInvalidDomain(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.need(CapSQL)
	e.rawWrites = true
	l := e.h.Layout
	long := func(n int) string { return strings.Repeat("k", n) }
	run := func(id, state string, version, lastSeq, maxAttempts int, created, deadline int64, errorCode, result string) string {
		return rawRunState(l, id, state, version, lastSeq, maxAttempts, created, deadline, errorCode, result)
	}
	runExecCases(t, e, []execCase{
		{"run: valid", run("ok1", "queued", 1, 1, 3, 0, 10, "NULL", "NULL"), true},
		{"run: unknown state", run("b1", "paused", 1, 1, 3, 0, 10, "NULL", "NULL"), false},
		{"run: version 0", run("b2", "queued", 0, 1, 3, 0, 10, "NULL", "NULL"), false},
		{"run: last seq 0", run("b3", "queued", 1, 0, 3, 0, 10, "NULL", "NULL"), false},
		{"run: max attempts 0", run("b4", "queued", 1, 1, 0, 0, 10, "NULL", "NULL"), false},
		{"run: negative created_at", run("b5", "queued", 1, 1, 3, -1, 10, "NULL", "NULL"), false},
		{"run: deadline not after creation", run("b6", "queued", 1, 1, 3, 10, 10, "NULL", "NULL"), false},
		{"run: failed with an error code", run("ok2", "failed", 2, 2, 3, 0, 10, "'boom'", "NULL"), true},
		{"run: failed without an error code", run("b7", "failed", 2, 2, 3, 0, 10, "NULL", "NULL"), false},
		{"run: running with an error code", run("b8", "running", 2, 1, 3, 0, 10, "'boom'", "NULL"), false},
		{"run: completed with a result", run("ok3", "completed", 2, 2, 3, 0, 10, "NULL", "'{}'"), true},
		{"run: running with a result", run("b9", "running", 2, 1, 3, 0, 10, "NULL", "'{}'"), false},
		{"run: 65537-byte result", run("b14", "completed", 2, 2, 3, 0, 10, "NULL", "'"+long(65537)+"'"), false},
		{"run: 65536-byte result", run("ok6", "completed", 2, 2, 3, 0, 10, "NULL", "'"+long(65536)+"'"), true},
		{"run: empty tenant", strings.Replace(rawRun(l, "t", "b10"), "'t'", "''", 1), false},
		{"run: 65-byte run id", rawRun(l, "t", long(65)), false},
		{"run: 64-byte run id", rawRun(l, "t", long(64)), true},
		{"run: duplicate id", rawRun(l, "t", "ok1"), false},
		{"run: empty operation", strings.Replace(rawRun(l, "t", "b11"), "'work'", "''", 1), false},
		{"run: 65-byte operation", strings.Replace(rawRun(l, "t", "b11"), "'work'", "'"+long(65)+"'", 1), false},
		{"run: 64-byte operation", strings.Replace(rawRun(l, "t", "ok4"), "'work'", "'"+long(64)+"'", 1), true},
		{"run: 65537-byte payload", strings.Replace(rawRun(l, "t", "b12"), "'{}'", "'"+long(65537)+"'", 1), false},
		{"run: 65536-byte payload", strings.Replace(rawRun(l, "t", "ok5"), "'{}'", "'"+long(65536)+"'", 1), true},
		{"run: no attempts at all", strings.Replace(rawRun(l, "t", "b13"), "'fp', 3,", "'fp', 0,", 1), false},
	})
	if l == LayoutTablePerRecord {
		// A run's run_queued event is its run row (migration 0005): a
		// replay's audit payload is queued_payload, an admitted run has
		// none, and run_events holds the terminal events only.
		replay := func(id, of string, depth int, queuedPayload string) string {
			return fmt.Sprintf(`INSERT INTO runs (tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint,
				max_attempts, created_at, deadline_at, replay_of, replay_depth, queued_payload)
				VALUES ('t', '%s', 'work', 'queued', 1, 1, '{}', 'fp', 3, 0, 10, %s, %d, %s)`, id, of, depth, queuedPayload)
		}
		runExecCases(t, e, []execCase{
			{"run: replay without its queued payload", replay("rp1", "'ok2'", 1, "NULL"), false},
			{"run: admitted run with a queued payload", replay("rp2", "NULL", 0, "'{}'"), false},
			{"run: replay with its queued payload", replay("rp1", "'ok2'", 1, `'{"replay_of":"ok2"}'`), true},
			{"run: replay at depth 0", replay("rp4", "'ok1'", 0, `'{"replay_of":"ok1"}'`), false},
			{"run: admitted run at depth 1", replay("rp4", "NULL", 1, "NULL"), false},
			{"run: replay at a negative depth", replay("rp4", "'ok1'", -1, `'{"replay_of":"ok1"}'`), false},
			{"run: replay at depth 1", replay("rp4", "'ok1'", 1, `'{"replay_of":"ok1"}'`), true},
			{"run: oversized queued payload", replay("rp3", "'ok3'", 1, "'"+long(4097)+"'"), false},
			{"run: queued payload at the limit", replay("rp3", "'ok3'", 1, "'"+long(4096)+"'"), true},
			{"event: run_queued in run_events", rawEvent("t", "ok1", 2, "run_queued", 0), false},
			{"event: run_queued at seq 1 in run_events", rawEvent("t", "ok1", 1, "run_queued", 0), false},
			{"event: terminal event at seq 1", rawEvent("t", "ok1", 1, "run_completed", 0), false},
			{"event: unknown kind", rawEvent("t", "ok1", 2, "run_paused", 0), false},
			{"event: seq 0", rawEvent("t", "ok1", 0, "run_completed", 0), false},
			{"event: negative time", rawEvent("t", "ok1", 2, "run_completed", -1), false},
			{"event: first terminal event", rawEvent("t", "ok1", 2, "run_completed", 0), true},
			{"event: second terminal event", rawEvent("t", "ok1", 3, "run_failed", 0), false},
			{"event: oversized payload", fmt.Sprintf(`INSERT INTO run_events (tenant, run_id, seq, kind, at, payload) VALUES ('t', 'ok2', 2, 'run_failed', 0, '%s')`, long(4097)), false},
			{"event: payload at the limit", fmt.Sprintf(`INSERT INTO run_events (tenant, run_id, seq, kind, at, payload) VALUES ('t', 'ok2', 2, 'run_failed', 0, '%s')`, long(4096)), true},
		})
	} else {
		// A run's run_queued event is its runs row (created_at, and a
		// replay's audit payload in queued_payload); its one terminal event
		// is its job row's run_finished_at and run_event_payload.
		terminalEvent := func(run, state, finished, payload string) string {
			return fmt.Sprintf(`UPDATE jobs SET run_state = '%s', run_finished_at = %s, run_event_payload = %s
				WHERE tenant = 't' AND run_id = '%s'`, state, finished, payload, run)
		}
		runExecCases(t, e, []execCase{
			{"event: a replay without its audit payload", rawReplay("t", "rp1", "ok1", "NULL"), false},
			{"event: an admitted run with an audit payload", strings.Replace(rawReplay("t", "rp1", "ok1", "'{}'"), "'ok1', 1,", "NULL, 0,", 1), false},
			{"event: oversized audit payload", rawReplay("t", "rp1", "ok1", "'"+long(4097)+"'"), false},
			{"event: audit payload at the limit", rawReplay("t", "rp1", "ok1", "'"+long(4096)+"'"), true},
			{"run: a second replay of a run", rawReplay("t", "rp2", "ok1", "'{}'"), false},
			{"run: a replay of another run", rawReplay("t", "rp2", "ok2", "'{}'"), true},
			{"run: a replay at depth 0", strings.Replace(rawReplay("t", "rp3", "ok3", "'{}'"), "'ok3', 1,", "'ok3', 0,", 1), false},
			{"run: an admitted run at depth 1", strings.Replace(rawReplay("t", "rp3", "ok3", "NULL"), "'ok3', 1,", "NULL, 1,", 1), false},
			{"run: a replay at a negative depth", strings.Replace(rawReplay("t", "rp3", "ok3", "'{}'"), "'ok3', 1,", "'ok3', -1,", 1), false},
			{"run: a replay at depth 1", rawReplay("t", "rp3", "ok3", "'{}'"), true},
			{"event: terminal run without its event", terminalEvent("ok1", "completed", "NULL", "NULL"), false},
			{"event: event of a run not terminal", terminalEvent("ok1", "queued", "0", "'{}'"), false},
			{"event: terminal event without a payload", terminalEvent("ok1", "completed", "0", "NULL"), false},
			{"event: oversized payload", terminalEvent("ok2", "failed", "0", "'"+long(4097)+"'"), false},
			{"event: payload at the limit", terminalEvent("ok2", "failed", "0", "'"+long(4096)+"'"), true},
		})
	}
	runExecCases(t, e, []execCase{
		{"job parent run a", rawRun(l, "t", "ja"), true},
		{"job parent run b", rawRun(l, "t", "jb"), true},
		{"job: unknown state", rawJob(l, "t", "ja", "sleeping", "", "NULL", 0, 0, 3, 0), false},
		{"job: negative available_at", rawJob(l, "t", "ja", "queued", "", "NULL", 0, 0, 3, -1), false},
		{"job: negative generation", rawJob(l, "t", "ja", "queued", "", "NULL", -1, 0, 3, 0), false},
		{"job: negative attempts", rawJob(l, "t", "ja", "queued", "", "NULL", 0, -1, 3, 0), false},
		{"job: attempts over the budget", rawJob(l, "t", "ja", "queued", "", "NULL", 4, 4, 3, 0), false},
		{"job: max attempts 0", rawJob(l, "t", "ja", "queued", "", "NULL", 0, 0, 0, 0), false},
		{"job: queued with an owner", rawJob(l, "t", "ja", "queued", "w", "NULL", 0, 0, 3, 0), false},
		{"job: queued with an expiry", rawJob(l, "t", "ja", "queued", "", 5, 0, 0, 3, 0), false},
		{"job: leased without an owner", rawJob(l, "t", "ja", "leased", "", 5, 1, 1, 3, 0), false},
		{"job: leased without an expiry", rawJob(l, "t", "ja", "leased", "w", "NULL", 1, 1, 3, 0), false},
		{"job: leased at generation 0", rawJob(l, "t", "ja", "leased", "w", 5, 0, 1, 3, 0), false},
		{"job: negative expiry", rawJob(l, "t", "ja", "leased", "w", -1, 1, 1, 3, 0), false},
		{"job: valid leased", rawJob(l, "t", "ja", "leased", "w", 5, 1, 1, 3, 0), true},
		{"job: valid dead", rawJob(l, "t", "jb", "dead", "", "NULL", 3, 3, 3, 0), true},
	})
	if l == LayoutJobRow {
		// The latest attempt on the job row: whole or absent, and a leased
		// job's is its lease's and running.
		attempt := func(set string) string {
			return `UPDATE jobs SET ` + set + ` WHERE tenant = 't' AND run_id = 'ja'`
		}
		// ja queued again after a finished attempt: with ("retried", "1",
		// "9", "") the twin the last case accepts.
		finished := func(outcome, finishedAt, retryAt, set string) string {
			return attempt(`state = 'queued', lease_owner = NULL, lease_expires_at = NULL, attempt_outcome = '` + outcome + `',
				attempt_finished_at = ` + finishedAt + `, attempt_retry_at = ` + retryAt + `, attempt_error_class = 'retryable'` + set)
		}
		retried := func(set string) string { return finished("retried", "1", "9", ", "+set) }
		noAttempt := func(errorClass string) string {
			return attempt(`state = 'queued', lease_owner = NULL, lease_expires_at = NULL, attempt_outcome = NULL,
				attempt_generation = NULL, attempt_number = NULL, attempt_worker = NULL, attempt_claimed_at = NULL,
				attempt_renewed_at = NULL, attempt_finished_at = NULL, attempt_retry_at = NULL, attempt_error_code = NULL,
				attempt_error_class = ` + errorClass)
		}
		runExecCases(t, e, []execCase{
			{"job: leased with no attempt counted", attempt(`attempts = 0`), false},
			{"job: attempt without its generation", retried(`attempt_generation = NULL`), false},
			{"job: attempt without its number", retried(`attempt_number = NULL`), false},
			{"job: attempt without its claim time", retried(`attempt_claimed_at = NULL`), false},
			{"job: attempt without its renewal time", retried(`attempt_renewed_at = NULL`), false},
			{"job: attempt at generation 0", retried(`attempt_generation = 0`), false},
			{"job: attempt number 0", retried(`attempt_number = 0`), false},
			{"job: attempt claimed before time 0", retried(`attempt_claimed_at = -1`), false},
			{"job: attempt renewed before it was claimed", retried(`attempt_renewed_at = -1`), false},
			{"job: attempt of an unknown outcome", finished("paused", "1", "NULL", ""), false},
			{"job: running attempt with a finish time", finished("running", "1", "NULL", ""), false},
			{"job: finished attempt without a finish time", finished("completed", "NULL", "NULL", ""), false},
			{"job: leased with its attempt finished", attempt(`attempt_outcome = 'completed', attempt_finished_at = 1`), false},
			{"job: leased with another generation's attempt", attempt(`attempt_generation = 2`), false},
			{"job: half an attempt", attempt(`attempt_worker = NULL`), false},
			{"job: attempt finished before it was claimed", attempt(`state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
				attempt_outcome = 'released', attempt_finished_at = -1`), false},
			{"job: retried attempt without retry_at", attempt(`state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
				attempt_outcome = 'retried', attempt_finished_at = 1, attempt_error_class = 'retryable'`), false},
			{"job: attempt of an unknown error class", attempt(`state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
				attempt_outcome = 'retried', attempt_finished_at = 1, attempt_retry_at = 9, attempt_error_class = 'transient'`), false},
			{"job: queued after a retried attempt", attempt(`state = 'queued', lease_owner = NULL, lease_expires_at = NULL,
				attempt_outcome = 'retried', attempt_finished_at = 1, attempt_retry_at = 9, attempt_error_class = 'retryable'`), true},
			{"job: no attempt, with an error class", noAttempt("'retryable'"), false},
			{"job: no attempt", noAttempt("NULL"), true},
		})
	}
	runExecCases(t, e, []execCase{
		{"idempotency: expiry not after the run's creation", rawIdem("t", "ja", "k1", 0), false},
		{"idempotency: key without an expiry", `UPDATE runs SET idempotency_key = 'k1' WHERE tenant = 't' AND run_id = 'ja'`, false},
		{"idempotency: expiry without a key", `UPDATE runs SET idempotency_expires_at = 10 WHERE tenant = 't' AND run_id = 'ja'`, false},
		{"idempotency: 256-byte key", rawIdem("t", "ja", long(256), 10), false},
		{"idempotency: 255-byte key", rawIdem("t", "ja", long(255), 10), true},
		{"idempotency: empty key", rawIdem("t", "jb", "", 10), false},
		{"idempotency: duplicate scope and key", rawIdem("t", "jb", long(255), 10), false},
		{"idempotency: the same key in another operation", `UPDATE runs SET operation = 'other', idempotency_key = '` + long(255) + `',
			idempotency_expires_at = 10 WHERE tenant = 't' AND run_id = 'jb'`, true},

		{"attempt: unknown outcome", rawAttempt("t", "ja", 1, "paused", 0, 5, "NULL", ""), false},
		{"attempt: generation 0", rawAttempt("t", "ja", 0, "running", 0, "NULL", "NULL", ""), false},
		{"attempt: negative claim time", rawAttempt("t", "ja", 1, "running", -1, "NULL", "NULL", ""), false},
		{"attempt: running but finished", rawAttempt("t", "ja", 1, "running", 0, 5, "NULL", ""), false},
		{"attempt: completed but not finished", rawAttempt("t", "ja", 1, "completed", 0, "NULL", "NULL", ""), false},
		{"attempt: finished before claimed", rawAttempt("t", "ja", 1, "completed", 10, 5, "NULL", ""), false},
		{"attempt: retried without retry_at", rawAttempt("t", "ja", 1, "retried", 0, 5, "NULL", "retryable"), false},
		{"attempt: retry_at on a completed attempt", rawAttempt("t", "ja", 1, "completed", 0, 5, 9, ""), false},
		{"attempt: unknown error class", rawAttempt("t", "ja", 1, "dead", 0, 5, "NULL", "transient"), false},
		{"attempt: valid retried", rawAttempt("t", "ja", 1, "retried", 0, 5, 9, "retryable"), true},
		{"attempt: duplicate generation", rawAttempt("t", "ja", 1, "running", 0, "NULL", "NULL", ""), false},

		{"effect: unknown state", rawEffect("t", "ja", "s", "k", "pending", 1, 0), false},
		{"effect: generation 0", rawEffect("t", "ja", "s", "k", "reserved", 0, 0), false},
		{"effect: negative time", rawEffect("t", "ja", "s", "k", "reserved", 1, -1), false},
		{"effect: 256-byte key", rawEffect("t", "ja", "s", long(256), "reserved", 1, 0), false},
		{"effect: 65-byte step", rawEffect("t", "ja", long(65), "k", "reserved", 1, 0), false},
		{"effect: valid", rawEffect("t", "ja", long(64), long(255), "unknown", 1, 0), true},
		{"effect: duplicate key", rawEffect("t", "ja", long(64), long(255), "reserved", 1, 0), false},
	})
}
