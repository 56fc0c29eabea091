package postgres_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/spec"
)

// TestMigrateConcurrentlyAndAgain: several stores opened at the same moment
// on one fresh schema all succeed (the advisory lock serializes them, and
// only the first applies anything); opening once more changes nothing; the
// ledger records each embedded migration once with its checksum.
func TestMigrateConcurrentlyAndAgain(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	const n = 6
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 1})
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d of %d concurrent ones: %v", i, n, err)
		}
	}
	openOn(t, dsn, schema, postgres.Options{}) // and once more

	want, err := migrations.For(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Conn(t, dsn, schema)
	rows, err := conn.Query(ctx, `SELECT version, name, checksum FROM `+migrations.VersionTable+` ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var v int
		var name, sum string
		if err := rows.Scan(&v, &name, &sum); err != nil {
			t.Fatal(err)
		}
		if i >= len(want) || v != want[i].Version || name != want[i].Name || sum != want[i].Checksum {
			t.Fatalf("ledger row %d = (%d, %s, %.12s), want the embedded migrations %+v", i, v, name, sum, want)
		}
		i++
	}
	if rows.Err() != nil || i != len(want) {
		t.Fatalf("ledger has %d rows (%v), want %d", i, rows.Err(), len(want))
	}
}

// TestMigrateRefusesAnEditedMigration: a recorded checksum that differs from
// the embedded file means an applied migration was edited; Open refuses.
func TestMigrateRefusesAnEditedMigration(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	openOn(t, dsn, schema, postgres.Options{})
	conn := pgtest.Conn(t, dsn, schema)
	if _, err := conn.Exec(ctx, `UPDATE `+migrations.VersionTable+` SET checksum = 'deadbeef' WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema})
	if err == nil {
		s.Close()
		t.Fatal("Open accepted a schema whose recorded migration checksum differs from the embedded file")
	}
	if spec.CodeOf(err) != spec.CodeFailedPrecondition || !strings.Contains(err.Error(), "edited") {
		t.Fatalf("Open on an edited migration: %v; want failed_precondition saying the migration was edited", err)
	}
}

// TestSchemasAreIsolated: two stores on two schemas of one database share
// nothing, not even run ids.
func TestSchemasAreIsolated(t *testing.T) {
	ctx := context.Background()
	dsnA, schemaA := pgtest.Schema(t)
	dsnB, schemaB := pgtest.Schema(t)
	a := openOn(t, dsnA, schemaA, postgres.Options{})
	b := openOn(t, dsnB, schemaB, postgres.Options{})
	for i, s := range []*postgres.Store{a, b} {
		payload := []byte(`{"store":` + string(rune('0'+i)) + `}`)
		if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k", RunID: "r1", Payload: payload}); err != nil {
			t.Fatalf("create r1 in schema %s: %v", s.Schema(), err)
		}
	}
	for i, s := range []*postgres.Store{a, b} {
		run, err := s.GetRun(ctx, "acme", "r1")
		if want := `{"store":` + string(rune('0'+i)) + `}`; err != nil || run.Payload != want {
			t.Fatalf("r1 in schema %s: %q, %v; want its own payload %s", s.Schema(), run.Payload, err, want)
		}
	}
}

// TestOpenRejectsBadOptions: Open validates its options before it touches
// the database.
func TestOpenRejectsBadOptions(t *testing.T) {
	ctx := context.Background()
	good := spec.DefaultConfig()
	cases := []struct {
		name string
		dsn  string
		opts postgres.Options
	}{
		{"upper-case schema", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: good, Schema: "Leasehold"}},
		{"schema with a hyphen", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: good, Schema: "lease-hold"}},
		{"schema starting with a digit", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: good, Schema: "1lease"}},
		{"schema too long", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: good, Schema: strings.Repeat("s", 64)}},
		{"quote in schema", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: good, Schema: `a"b`}},
		{"invalid config", "postgres://x@127.0.0.1:1/x", postgres.Options{Config: spec.Config{}}},
		{"malformed DSN", "postgres://x@127.0.0.1:notaport/x", postgres.Options{Config: good}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := postgres.Open(ctx, c.dsn, c.opts)
			if err == nil {
				s.Close()
				t.Fatal("Open accepted it")
			}
			if spec.CodeOf(err) != spec.CodeInvalidArgument {
				t.Fatalf("Open: %v; want invalid_argument", err)
			}
		})
	}
}

// TestMigrationMovesRunStateToJobRows: migration 4 moves a schema in use from
// one table per record (migrations 1-3) to the job-row layout without
// changing what the store reads. Rows written in the old layout, covering
// every place a run's state, terminal event and latest attempt can be in,
// read back as exactly the same records after the migration, and the store
// goes on from them: a lease taken before the migration completes, and a
// claim of a retried job files its earlier attempt.
func TestMigrationMovesRunStateToJobRows(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	conn := pgtest.Conn(t, dsn, schema)
	list, err := migrations.For(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	old := []string{`CREATE SCHEMA ` + schema, `CREATE TABLE ` + migrations.VersionTable + ` (version BIGINT PRIMARY KEY, name TEXT NOT NULL,
		checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)`}
	for _, m := range list[:3] {
		old = append(old, m.SQL, fmt.Sprintf(`INSERT INTO %s VALUES (%d, '%s', '%s', 0)`, migrations.VersionTable, m.Version, m.Name, m.Checksum))
	}
	run := func(id, state string, version, lastSeq int, errorCode, result, replayOf string, depth int) string {
		return fmt.Sprintf(`INSERT INTO runs (tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint,
			max_attempts, error_code, result, created_at, deadline_at, replay_of, replay_depth)
			VALUES ('acme', '%s', 'work', '%s', %d, %d, '{}', 'fp', 3, %s, %s, 10, 100000, %s, %d)`,
			id, state, version, lastSeq, errorCode, result, replayOf, depth)
	}
	job := func(id, state string, availableAt int64, owner, expires string, generation, attempts int, lastError string) string {
		return fmt.Sprintf(`INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_owner, lease_expires_at,
			lease_generation, attempts, max_attempts, last_error_code)
			VALUES ('acme', '%s', 'work', '%s', %d, %s, %s, %d, %d, 3, %s)`, id, state, availableAt, owner, expires, generation, attempts, lastError)
	}
	event := func(id string, seq int, kind string, at int64, payload string) string {
		return fmt.Sprintf(`INSERT INTO run_events VALUES ('acme', '%s', %d, '%s', %d, '%s')`, id, seq, kind, at, payload)
	}
	attempt := func(id string, gen int, claimed, renewed int64, finished, outcome, code, class, retryAt string) string {
		return fmt.Sprintf(`INSERT INTO attempts VALUES ('acme', '%s', %d, %d, 'w', %d, %d, %s, '%s', %s, %s, %s)`,
			id, gen, gen, claimed, renewed, finished, outcome, code, class, retryAt)
	}
	old = append(old,
		// q1: queued, never claimed.
		run("q1", "queued", 1, 1, "NULL", "NULL", "NULL", 0), event("q1", 1, "run_queued", 10, "{}"),
		job("q1", "queued", 10, "NULL", "NULL", 0, 0, "NULL"),
		`INSERT INTO idempotency_keys VALUES ('acme', 'work', 'key-q1', 'fp', 'q1', 10, 86400010)`,
		// l1: leased, its attempt running.
		run("l1", "running", 2, 1, "NULL", "NULL", "NULL", 0), event("l1", 1, "run_queued", 10, "{}"),
		job("l1", "leased", 10, "'w'", "5000", 1, 1, "NULL"), attempt("l1", 1, 100, 150, "NULL", "running", "NULL", "NULL", "NULL"),
		// c1: reclaimed, then completed, with an effect of its second attempt.
		run("c1", "completed", 3, 2, "NULL", `'{"ok":1}'`, "NULL", 0), event("c1", 1, "run_queued", 10, "{}"),
		event("c1", 2, "run_completed", 900, `{"generation":2}`), job("c1", "completed", 10, "NULL", "NULL", 2, 2, "NULL"),
		attempt("c1", 1, 100, 100, "400", "expired", "NULL", "NULL", "NULL"),
		attempt("c1", 2, 400, 400, "900", "completed", "NULL", "NULL", "NULL"),
		`INSERT INTO effects VALUES ('acme', 'c1', 'charge', 'k', 'succeeded', 'ref-1', 2, 800)`,
		// r1: retried, queued again.
		run("r1", "running", 2, 1, "NULL", "NULL", "NULL", 0), event("r1", 1, "run_queued", 10, "{}"),
		job("r1", "queued", 2000, "NULL", "NULL", 1, 1, "'boom'"),
		attempt("r1", 1, 100, 100, "300", "retried", "'boom'", "'retryable'", "2000"),
		// x1: cancelled while queued.
		run("x1", "cancelled", 2, 2, "'stop'", "NULL", "NULL", 0), event("x1", 1, "run_queued", 10, "{}"),
		event("x1", 2, "run_cancelled", 50, `{"reason":"stop"}`), job("x1", "cancelled", 10, "NULL", "NULL", 0, 0, "NULL"),
		// f1: reaped on its last attempt; f2 replays it.
		run("f1", "failed", 3, 2, "'lease_expired'", "NULL", "NULL", 0), event("f1", 1, "run_queued", 10, "{}"),
		event("f1", 2, "run_failed", 700, `{"code":"lease_expired"}`), job("f1", "dead", 10, "NULL", "NULL", 1, 1, "'lease_expired'"),
		attempt("f1", 1, 100, 100, "700", "dead", "'lease_expired'", "'expired'", "NULL"),
		run("f2", "queued", 1, 1, "NULL", "NULL", "'f1'", 1), event("f2", 1, "run_queued", 10, `{"replay_of":"f1"}`),
		job("f2", "queued", 3000, "NULL", "NULL", 1, 0, "NULL"),
	)
	for _, q := range old {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("old layout: %v\n%s", err, q)
		}
	}

	r := func(id string, state spec.RunState, version, lastSeq int64, errorCode, result, replayOf string, depth int) spec.Run {
		return spec.Run{Tenant: "acme", ID: id, Operation: "work", State: state, Version: version, LastSeq: lastSeq, Payload: "{}",
			Fingerprint: "fp", MaxAttempts: 3, ErrorCode: errorCode, Result: result, CreatedAt: 10, DeadlineAt: 100000,
			ReplayOf: replayOf, ReplayDepth: depth}
	}
	ev := func(id string, seq int64, kind spec.EventKind, at int64, payload string) spec.Event {
		return spec.Event{Tenant: "acme", RunID: id, Seq: seq, Kind: kind, At: at, Payload: payload}
	}
	j := func(id string, state spec.JobState, availableAt int64, owner string, expires, gen int64, attempts int, lastError string) spec.Job {
		return spec.Job{Tenant: "acme", RunID: id, Operation: "work", State: state, AvailableAt: availableAt, LeaseOwner: owner,
			LeaseExpiresAt: expires, Generation: gen, Attempts: attempts, MaxAttempts: 3, LastErrorCode: lastError}
	}
	a := func(id string, gen int64, claimed, renewed, finished int64, outcome spec.AttemptOutcome, code string, class spec.ErrorClass, retryAt int64) spec.Attempt {
		return spec.Attempt{Tenant: "acme", RunID: id, Generation: gen, Number: int(gen), Worker: "w", ClaimedAt: claimed,
			RenewedAt: renewed, FinishedAt: finished, Outcome: outcome, ErrorCode: code, ErrorClass: class, RetryAt: retryAt}
	}
	want := spec.Snapshot{
		Runs: []spec.Run{
			r("c1", spec.RunCompleted, 3, 2, "", `{"ok":1}`, "", 0), r("f1", spec.RunFailed, 3, 2, "lease_expired", "", "", 0),
			r("f2", spec.RunQueued, 1, 1, "", "", "f1", 1), r("l1", spec.RunRunning, 2, 1, "", "", "", 0),
			r("q1", spec.RunQueued, 1, 1, "", "", "", 0), r("r1", spec.RunRunning, 2, 1, "", "", "", 0),
			r("x1", spec.RunCancelled, 2, 2, "stop", "", "", 0),
		},
		Events: []spec.Event{
			ev("c1", 1, spec.EventRunQueued, 10, "{}"), ev("c1", 2, spec.EventRunCompleted, 900, `{"generation":2}`),
			ev("f1", 1, spec.EventRunQueued, 10, "{}"), ev("f1", 2, spec.EventRunFailed, 700, `{"code":"lease_expired"}`),
			ev("f2", 1, spec.EventRunQueued, 10, `{"replay_of":"f1"}`), ev("l1", 1, spec.EventRunQueued, 10, "{}"),
			ev("q1", 1, spec.EventRunQueued, 10, "{}"), ev("r1", 1, spec.EventRunQueued, 10, "{}"),
			ev("x1", 1, spec.EventRunQueued, 10, "{}"), ev("x1", 2, spec.EventRunCancelled, 50, `{"reason":"stop"}`),
		},
		Jobs: []spec.Job{
			j("c1", spec.JobCompleted, 10, "", 0, 2, 2, ""), j("f1", spec.JobDead, 10, "", 0, 1, 1, "lease_expired"),
			j("f2", spec.JobQueued, 3000, "", 0, 1, 0, ""), j("l1", spec.JobLeased, 10, "w", 5000, 1, 1, ""),
			j("q1", spec.JobQueued, 10, "", 0, 0, 0, ""), j("r1", spec.JobQueued, 2000, "", 0, 1, 1, "boom"),
			j("x1", spec.JobCancelled, 10, "", 0, 0, 0, ""),
		},
		Attempts: []spec.Attempt{
			a("c1", 1, 100, 100, 400, spec.AttemptExpired, "", "", 0), a("c1", 2, 400, 400, 900, spec.AttemptCompleted, "", "", 0),
			a("f1", 1, 100, 100, 700, spec.AttemptDead, "lease_expired", spec.ClassExpired, 0),
			a("l1", 1, 100, 150, 0, spec.AttemptRunning, "", "", 0),
			a("r1", 1, 100, 100, 300, spec.AttemptRetried, "boom", spec.ClassRetryable, 2000),
		},
		Idempotency: []spec.IdempotencyRecord{{Tenant: "acme", Operation: "work", Key: "key-q1", Fingerprint: "fp", RunID: "q1",
			CreatedAt: 10, ExpiresAt: 86400010}},
		Effects: []spec.Effect{{Tenant: "acme", RunID: "c1", Step: "charge", Key: "k", State: spec.EffectSucceeded,
			ProviderRef: "ref-1", Generation: 2, UpdatedAt: 800}},
		Outbox: []spec.OutboxMessage{}, // migration 6 adds the table, empty
	}

	clk := clock.NewManual(1000)
	s := openOn(t, dsn, schema, postgres.Options{Clock: clk})
	got, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot after migrations 4-7:\n got %+v\nwant %+v", got, want)
	}

	done, err := s.Complete(ctx, spec.CompleteRequest{Lease: spec.LeaseRef{Tenant: "acme", RunID: "l1", Owner: "w", Generation: 1}})
	if err != nil || done.State != spec.RunCompleted || done.Version != 3 {
		t.Fatalf("complete l1's lease from before the migration: %+v, %v; want completed at version 3", done, err)
	}
	if _, err := clk.Advance(1500); err != nil { // r1 is due at 2000
		t.Fatal(err)
	}
	leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w2", LeaseMs: 60_000, Limit: 10})
	if got := runIDs(leases); err != nil || !reflect.DeepEqual(got, []string{"q1", "r1"}) || leases[1].Generation != 2 {
		t.Fatalf("claim after the migration: %v, %v; want q1 and r1 (r1 at generation 2)", got, err)
	}
	atts, err := s.Attempts(ctx, "acme", "r1")
	wantAtts := []spec.Attempt{a("r1", 1, 100, 100, 300, spec.AttemptRetried, "boom", spec.ClassRetryable, 2000),
		{Tenant: "acme", RunID: "r1", Generation: 2, Number: 2, Worker: "w2", ClaimedAt: 2500, RenewedAt: 2500, Outcome: spec.AttemptRunning}}
	if err != nil || !reflect.DeepEqual(atts, wantAtts) {
		t.Fatalf("r1's attempts after its claim: %+v, %v; want %+v", atts, err, wantAtts)
	}
}

// TestMigrationDerivesQueuedEvents: migration 7 drops run_events, whose
// rows the runs rows then give back. Rows written through migration 6 (an
// admitted run, a finished one, a replay with its audit record) read back
// as the same records, and the store goes on: a second replay is refused
// by the replay link's partial unique index, a new admission and a replay
// write their run_queued events on their runs rows. A run_queued row the
// run cannot give back stops the migration, naming the run, and leaves the
// schema as it was.
func TestMigrationDerivesQueuedEvents(t *testing.T) {
	ctx := context.Background()
	list, err := migrations.For(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	// throughSix is the schema of migrations 1-6 with rows: d1 and d2
	// failed, q1 queued, p1 replaying d1 (its audit record from Replay);
	// extra is run before the migration.
	throughSix := func(t *testing.T, extra ...string) (string, string) {
		dsn, schema := pgtest.Schema(t)
		conn := pgtest.Conn(t, dsn, schema)
		stmts := []string{`CREATE SCHEMA ` + schema, `CREATE TABLE ` + migrations.VersionTable + ` (version BIGINT PRIMARY KEY,
			name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)`}
		for _, m := range list[:6] {
			stmts = append(stmts, m.SQL, fmt.Sprintf(`INSERT INTO %s VALUES (%d, '%s', '%s', 0)`, migrations.VersionTable, m.Version, m.Name, m.Checksum))
		}
		run := func(id string, created int64, replayOf string, depth int) string {
			return fmt.Sprintf(`INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at,
				deadline_at, replay_of, replay_depth) VALUES ('acme', '%s', 'work', '{}', 'fp', 3, %d, 100000, %s, %d)`, id, created, replayOf, depth)
		}
		job := func(id, state, runState string, version, lastSeq int, errorCode, finished, payload string) string {
			return fmt.Sprintf(`INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_generation, attempts,
				max_attempts, run_state, run_version, run_last_seq, run_error_code, run_finished_at, run_event_payload)
				VALUES ('acme', '%s', 'work', '%s', 10, 0, 0, 3, '%s', %d, %d, %s, %s, %s)`, id, state, runState, version, lastSeq,
				errorCode, finished, payload)
		}
		failed := func(id string) string {
			return job(id, "dead", "failed", 2, 2, "'boom'", "50", `'{"error_code":"boom","generation":0}'`)
		}
		event := func(id string, at int64, payload string) string {
			return fmt.Sprintf(`INSERT INTO run_events VALUES ('acme', '%s', 1, 'run_queued', %d, '%s')`, id, at, payload)
		}
		stmts = append(stmts,
			run("d1", 10, "NULL", 0), event("d1", 10, "{}"), failed("d1"),
			run("d2", 15, "NULL", 0), event("d2", 15, "{}"), failed("d2"),
			run("q1", 20, "NULL", 0), event("q1", 20, "{}"), job("q1", "queued", "queued", 1, 1, "NULL", "NULL", "NULL"),
			run("p1", 60, "'d1'", 1), event("p1", 60, spec.QueuedPayload("d1", "ops@example.com", 1)),
			job("p1", "queued", "queued", 1, 1, "NULL", "NULL", "NULL"))
		for _, q := range append(stmts, extra...) {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("schema of migration 6: %v\n%s", err, q)
			}
		}
		return dsn, schema
	}

	t.Run("derivable", func(t *testing.T) {
		dsn, schema := throughSix(t)
		clk := clock.NewManual(1000)
		s := openOn(t, dsn, schema, postgres.Options{Clock: clk})
		ev := func(id string, seq int64, kind spec.EventKind, at int64, payload string) spec.Event {
			return spec.Event{Tenant: "acme", RunID: id, Seq: seq, Kind: kind, At: at, Payload: payload}
		}
		want := []spec.Event{
			ev("d1", 1, spec.EventRunQueued, 10, "{}"), ev("d1", 2, spec.EventRunFailed, 50, `{"error_code":"boom","generation":0}`),
			ev("d2", 1, spec.EventRunQueued, 15, "{}"), ev("d2", 2, spec.EventRunFailed, 50, `{"error_code":"boom","generation":0}`),
			ev("p1", 1, spec.EventRunQueued, 60, spec.QueuedPayload("d1", "ops@example.com", 1)),
			ev("q1", 1, spec.EventRunQueued, 20, "{}"),
		}
		snap, err := s.Snapshot(ctx)
		if err != nil || !reflect.DeepEqual(snap.Events, want) {
			t.Fatalf("events after migration 7: %+v, %v\nwant %+v", snap.Events, err, want)
		}
		if _, err := s.Replay(ctx, spec.ReplayRequest{Tenant: "acme", RunID: "d1", NewRunID: "p2", Actor: "ops"}); spec.CodeOf(err) != spec.CodeAlreadyExists {
			t.Fatalf("a second replay of d1 after the migration: %v; want %s", err, spec.CodeAlreadyExists)
		}
		if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-n1", RunID: "n1", Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Replay(ctx, spec.ReplayRequest{Tenant: "acme", RunID: "d2", NewRunID: "p2", Actor: "ops"}); err != nil {
			t.Fatal(err)
		}
		for id, wantEvent := range map[string]spec.Event{
			"n1": ev("n1", 1, spec.EventRunQueued, 1000, "{}"),
			"p2": ev("p2", 1, spec.EventRunQueued, 1000, spec.QueuedPayload("d2", "ops", 1)),
		} {
			if got, err := s.Events(ctx, "acme", id); err != nil || !reflect.DeepEqual(got, []spec.Event{wantEvent}) {
				t.Errorf("events of %s: %+v, %v; want %+v", id, got, err, wantEvent)
			}
		}
	})

	for _, c := range []struct {
		name, extra string
		events      int // run_events rows it leaves
	}{
		{"another time", `UPDATE run_events SET at = 11 WHERE run_id = 'q1'`, 4},
		{"an admitted run's audit", `UPDATE run_events SET payload = '{"note":1}' WHERE run_id = 'q1'`, 4},
		{"a run without its event", `DELETE FROM run_events WHERE run_id = 'q1'`, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn, schema := throughSix(t, c.extra)
			s, err := postgres.Open(ctx, dsn, postgres.Options{Schema: schema, Config: spec.DefaultConfig()})
			if err == nil {
				s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "run acme/q1 has no run_queued event the run row can give back") {
				t.Fatalf("open over %s: %v; want the migration to stop, naming run acme/q1", c.name, err)
			}
			conn := pgtest.Conn(t, dsn, schema)
			var version, events int
			if err := conn.QueryRow(ctx, `SELECT (SELECT max(version) FROM `+migrations.VersionTable+`), (SELECT count(*) FROM run_events)`).Scan(&version, &events); err != nil {
				t.Fatalf("the schema after the refused migration: %v", err)
			}
			if version != 6 || events != c.events {
				t.Fatalf("after the refused migration: the ledger's latest version %d, %d run_events rows; want 6 and %d", version, events, c.events)
			}
		})
	}
}

// TestMigrationMovesIdempotencyRecords: migration 8 drops idempotency_keys,
// whose rows move onto their runs. Rows written through migration 7 (a live
// record, an expired one, a replay without one) read back as the same
// records, and the store goes on from them: the live key replays its run,
// the expired key admits a new run (and the old run loses its record), a
// purge of records and a purge of runs see the moved expiries. A record its
// run cannot hold stops the migration, naming it, and leaves the schema as
// it was.
func TestMigrationMovesIdempotencyRecords(t *testing.T) {
	ctx := context.Background()
	list, err := migrations.For(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	// throughSeven is the schema of migrations 1-7 with rows: q1 queued
	// with a live record, d1 failed with an expired one, p1 replaying d1
	// (no record), f1 and f2 failed with an expired and a live record;
	// extra is run before the migration.
	throughSeven := func(t *testing.T, extra ...string) (string, string) {
		dsn, schema := pgtest.Schema(t)
		conn := pgtest.Conn(t, dsn, schema)
		stmts := []string{`CREATE SCHEMA ` + schema, `CREATE TABLE ` + migrations.VersionTable + ` (version BIGINT PRIMARY KEY,
			name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)`}
		for _, m := range list[:7] {
			stmts = append(stmts, m.SQL, fmt.Sprintf(`INSERT INTO %s VALUES (%d, '%s', '%s', 0)`, migrations.VersionTable, m.Version, m.Name, m.Checksum))
		}
		run := func(id string, created int64, replayOf, queued string, depth int) string {
			return fmt.Sprintf(`INSERT INTO runs (tenant, run_id, operation, payload, fingerprint, max_attempts, created_at,
				deadline_at, replay_of, replay_depth, queued_payload) VALUES ('acme', '%s', 'work', '{}', 'fp-%s', 3, %d, 100000, %s, %d, %s)`,
				id, id, created, replayOf, depth, queued)
		}
		job := func(id, state, runState string, version, lastSeq int, errorCode, finished, payload string) string {
			return fmt.Sprintf(`INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_generation, attempts,
				max_attempts, run_state, run_version, run_last_seq, run_error_code, run_finished_at, run_event_payload)
				VALUES ('acme', '%s', 'work', '%s', 10, 0, 0, 3, '%s', %d, %d, %s, %s, %s)`, id, state, runState, version, lastSeq,
				errorCode, finished, payload)
		}
		record := func(key, id string, created, expires int64) string {
			return fmt.Sprintf(`INSERT INTO idempotency_keys VALUES ('acme', 'work', '%s', 'fp-%s', '%s', %d, %d)`, key, id, id, created, expires)
		}
		failed := func(id string) string {
			return job(id, "dead", "failed", 2, 2, "'boom'", "50", `'{"error_code":"boom","generation":0}'`)
		}
		stmts = append(stmts,
			run("q1", 20, "NULL", "NULL", 0), job("q1", "queued", "queued", 1, 1, "NULL", "NULL", "NULL"), record("k-q1", "q1", 20, 5000),
			run("d1", 10, "NULL", "NULL", 0), failed("d1"), record("k-d1", "d1", 10, 500),
			run("f1", 10, "NULL", "NULL", 0), failed("f1"), record("k-f1", "f1", 10, 500),
			run("f2", 10, "NULL", "NULL", 0), failed("f2"), record("k-f2", "f2", 10, 100000),
			run("p1", 60, "'d1'", "'"+spec.QueuedPayload("d1", "ops", 1)+"'", 1), job("p1", "queued", "queued", 1, 1, "NULL", "NULL", "NULL"))
		for _, q := range append(stmts, extra...) {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("schema of migration 7: %v\n%s", err, q)
			}
		}
		return dsn, schema
	}

	t.Run("derivable", func(t *testing.T) {
		dsn, schema := throughSeven(t)
		clk := clock.NewManual(1000)
		cfg := spec.DefaultConfig()
		cfg.RunRetentionMs = 1000
		s := openOn(t, dsn, schema, postgres.Options{Clock: clk, Config: cfg})
		rec := func(key, id string, created, expires int64) spec.IdempotencyRecord {
			return spec.IdempotencyRecord{Tenant: "acme", Operation: "work", Key: key, Fingerprint: "fp-" + id, RunID: id,
				CreatedAt: created, ExpiresAt: expires}
		}
		snap, err := s.Snapshot(ctx)
		if want := []spec.IdempotencyRecord{rec("k-d1", "d1", 10, 500), rec("k-f1", "f1", 10, 500), rec("k-f2", "f2", 10, 100000),
			rec("k-q1", "q1", 20, 5000)}; err != nil || !reflect.DeepEqual(snap.Idempotency, want) {
			t.Fatalf("records after migration 8: %+v, %v\nwant %+v", snap.Idempotency, err, want)
		}
		// The live key is bound to q1's fingerprint: another request under it
		// is a conflict (the fingerprint moved with the record).
		if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-q1", RunID: "x1", Payload: []byte("{}")}); spec.CodeOf(err) != spec.CodeIdempotencyConflict {
			t.Fatalf("a new request under q1's live key: %v; want %s", err, spec.CodeIdempotencyConflict)
		}
		// The expired key admits a new run, which takes the record over.
		if res, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-d1", RunID: "n1", Payload: []byte("{}")}); err != nil || res.Replayed {
			t.Fatalf("a request under d1's expired key: %+v, %v; want a new run", res, err)
		}
		clk.Set(6000)
		// At 6000 the runs finished at 50 are retired: f1 goes with its
		// expired record, f2 stays for its live one, d1 for its replay p1
		// (queued).
		purged, err := s.PurgeRuns(ctx, spec.PurgeRunsRequest{Tenant: "acme", Limit: 10})
		if err != nil || !reflect.DeepEqual(purged, []string{"f1"}) {
			t.Fatalf("purge of runs at 6000: %v, %v; want [f1]", purged, err)
		}
		if n, err := s.PurgeIdempotency(ctx, spec.PurgeRequest{Limit: 10}); err != nil || n != 1 {
			t.Fatalf("purge of expired records at 6000: %d, %v; want 1 (k-q1)", n, err)
		}
		snap, err = s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, r := range snap.Idempotency {
			keys = append(keys, r.Key+"→"+r.RunID)
		}
		if want := []string{"k-d1→n1", "k-f2→f2"}; !reflect.DeepEqual(keys, want) {
			t.Fatalf("records at the end: %v; want %v", keys, want)
		}
	})

	for _, c := range []struct{ name, extra string }{
		{"another fingerprint", `UPDATE idempotency_keys SET fingerprint = 'fp-other' WHERE run_id = 'q1'`},
		{"another creation time", `UPDATE idempotency_keys SET created_at = 21 WHERE run_id = 'q1'`},
		{"a second record of the run", `INSERT INTO idempotency_keys VALUES ('acme', 'work', 'k-q1b', 'fp-q1', 'q1', 20, 5000)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn, schema := throughSeven(t, c.extra)
			s, err := postgres.Open(ctx, dsn, postgres.Options{Schema: schema, Config: spec.DefaultConfig()})
			if err == nil {
				s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "leasehold migration 8: the idempotency record of tenant acme, operation work, key k-q1") ||
				!strings.Contains(err.Error(), "is not what its run q1 can hold") {
				t.Fatalf("open over %s: %v; want the migration to stop, naming q1's record", c.name, err)
			}
			conn := pgtest.Conn(t, dsn, schema)
			var version, records int
			if err := conn.QueryRow(ctx, `SELECT (SELECT max(version) FROM `+migrations.VersionTable+`), (SELECT count(*) FROM idempotency_keys)`).Scan(&version, &records); err != nil {
				t.Fatalf("the schema after the refused migration: %v", err)
			}
			if version != 7 || records < 2 {
				t.Fatalf("after the refused migration: the ledger's latest version %d, %d records; want 7 and every record kept", version, records)
			}
		})
	}
}
