package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/spec"
)

// oldLayout writes a database file at migrations 1-4 (every run's
// run_queued event a row of run_events) with the rows of stmts, and returns
// its path.
func oldLayout(t *testing.T, stmts ...string) string {
	t.Helper()
	return layoutAt(t, 4, stmts...)
}

// layoutAt writes a database file at migrations 1-version, recorded as
// the store records them, with the rows of stmts, and returns its path.
func layoutAt(t *testing.T, version int, stmts ...string) string {
	t.Helper()
	list, err := migrations.For(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old.db")
	db := rawDB(t, path)
	defer db.Close()
	all := []string{`CREATE TABLE ` + migrations.VersionTable + ` (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
		checksum TEXT NOT NULL, applied_at INTEGER NOT NULL)`}
	for _, m := range list[:version] {
		all = append(all, m.SQL, fmt.Sprintf(`INSERT INTO %s VALUES (%d, '%s', '%s', 0)`, migrations.VersionTable, m.Version, m.Name, m.Checksum))
	}
	for _, q := range append(all, stmts...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("old layout: %v\n%s", err, q)
		}
	}
	return path
}

// rawDB opens the file at path with foreign keys on, as the store does.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

// Rows of the old layout, all of tenant acme.
func oldRun(id, state string, version, lastSeq int, errorCode, result string, created int64, replayOf string, depth int) string {
	return fmt.Sprintf(`INSERT INTO runs (tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint,
		max_attempts, error_code, result, created_at, deadline_at, replay_of, replay_depth)
		VALUES ('acme', '%s', 'work', '%s', %d, %d, '{}', 'fp', 3, %s, %s, %d, 100000, %s, %d)`,
		id, state, version, lastSeq, errorCode, result, created, replayOf, depth)
}

func oldEvent(id string, seq int, kind string, at int64, payload string) string {
	return fmt.Sprintf(`INSERT INTO run_events VALUES ('acme', '%s', %d, '%s', %d, '%s')`, id, seq, kind, at, payload)
}

func oldJob(id, state string, availableAt int64, generation, attempts int, lastError string) string {
	return fmt.Sprintf(`INSERT INTO jobs (tenant, run_id, operation, state, available_at, lease_generation, attempts, max_attempts, last_error_code)
		VALUES ('acme', '%s', 'work', '%s', %d, %d, %d, 3, %s)`, id, state, availableAt, generation, attempts, lastError)
}

// wantRun, wantEvent and wantJob are the records the migration tests'
// rows of tenant acme read back as.
func wantRun(id string, state spec.RunState, version, lastSeq int64, errorCode, result, fingerprint string, created int64, replayOf string, depth int) spec.Run {
	return spec.Run{Tenant: "acme", ID: id, Operation: "work", State: state, Version: version, LastSeq: lastSeq, Payload: "{}",
		Fingerprint: fingerprint, MaxAttempts: 3, ErrorCode: errorCode, Result: result, CreatedAt: created, DeadlineAt: 100000,
		ReplayOf: replayOf, ReplayDepth: depth}
}

func wantEvent(id string, seq int64, kind spec.EventKind, at int64, payload string) spec.Event {
	return spec.Event{Tenant: "acme", RunID: id, Seq: seq, Kind: kind, At: at, Payload: payload}
}

func wantJob(id string, state spec.JobState, availableAt, gen int64, attempts int, lastError string) spec.Job {
	return spec.Job{Tenant: "acme", RunID: id, Operation: "work", State: state, AvailableAt: availableAt,
		Generation: gen, Attempts: attempts, MaxAttempts: 3, LastErrorCode: lastError}
}

// TestMigrationDerivesQueuedEvents: migration 5 moves every run's run_queued
// event onto its run row without changing what the store reads. Rows
// written in the layout of migrations 1-4 (an admitted queued run, a
// completed one, a cancelled one, a failed one replayed, and that replay
// failed and replayed in turn, each with its audit payload) read back as
// exactly the same snapshot, run_events keeps only the terminal events, and
// the store goes on from them.
func TestMigrationDerivesQueuedEvents(t *testing.T) {
	ctx := context.Background()
	f2Payload := spec.QueuedPayload("f1", "ops-ann", 1)
	f3Payload := spec.QueuedPayload("f2", "ops-bob", 2)
	path := oldLayout(t,
		// q1: admitted, queued.
		oldRun("q1", "queued", 1, 1, "NULL", "NULL", 10, "NULL", 0), oldEvent("q1", 1, "run_queued", 10, "{}"),
		oldJob("q1", "queued", 10, 0, 0, "NULL"),
		`INSERT INTO idempotency_keys VALUES ('acme', 'work', 'key-q1', 'fp', 'q1', 10, 86400010)`,
		// c1: completed.
		oldRun("c1", "completed", 3, 2, "NULL", `'{"ok":1}'`, 20, "NULL", 0), oldEvent("c1", 1, "run_queued", 20, "{}"),
		oldEvent("c1", 2, "run_completed", 900, `{"generation":1}`), oldJob("c1", "completed", 20, 1, 1, "NULL"),
		`INSERT INTO attempts VALUES ('acme', 'c1', 1, 1, 'w', 100, 100, 900, 'completed', NULL, NULL, NULL)`,
		// x1: cancelled while queued.
		oldRun("x1", "cancelled", 2, 2, "'stop'", "NULL", 30, "NULL", 0), oldEvent("x1", 1, "run_queued", 30, "{}"),
		oldEvent("x1", 2, "run_cancelled", 50, `{"generation":0,"reason":"stop"}`), oldJob("x1", "cancelled", 30, 0, 0, "NULL"),
		// f1 failed; f2 replays it and failed too; f3 replays f2.
		oldRun("f1", "failed", 3, 2, "'boom'", "NULL", 40, "NULL", 0), oldEvent("f1", 1, "run_queued", 40, "{}"),
		oldEvent("f1", 2, "run_failed", 700, `{"error_code":"boom","generation":1}`), oldJob("f1", "dead", 40, 1, 1, "'boom'"),
		oldRun("f2", "failed", 3, 2, "'boom'", "NULL", 800, "'f1'", 1), oldEvent("f2", 1, "run_queued", 800, f2Payload),
		oldEvent("f2", 2, "run_failed", 850, `{"error_code":"boom","generation":2}`), oldJob("f2", "dead", 800, 2, 1, "'boom'"),
		oldRun("f3", "queued", 1, 1, "NULL", "NULL", 900, "'f2'", 2), oldEvent("f3", 1, "run_queued", 900, f3Payload),
		oldJob("f3", "queued", 900, 2, 0, "NULL"),
	)

	r := func(id string, state spec.RunState, version, lastSeq int64, errorCode, result string, created int64, replayOf string, depth int) spec.Run {
		return wantRun(id, state, version, lastSeq, errorCode, result, "fp", created, replayOf, depth)
	}
	ev, j := wantEvent, wantJob
	want := spec.Snapshot{
		Runs: []spec.Run{
			r("c1", spec.RunCompleted, 3, 2, "", `{"ok":1}`, 20, "", 0), r("f1", spec.RunFailed, 3, 2, "boom", "", 40, "", 0),
			r("f2", spec.RunFailed, 3, 2, "boom", "", 800, "f1", 1), r("f3", spec.RunQueued, 1, 1, "", "", 900, "f2", 2),
			r("q1", spec.RunQueued, 1, 1, "", "", 10, "", 0), r("x1", spec.RunCancelled, 2, 2, "stop", "", 30, "", 0),
		},
		Events: []spec.Event{
			ev("c1", 1, spec.EventRunQueued, 20, "{}"), ev("c1", 2, spec.EventRunCompleted, 900, `{"generation":1}`),
			ev("f1", 1, spec.EventRunQueued, 40, "{}"), ev("f1", 2, spec.EventRunFailed, 700, `{"error_code":"boom","generation":1}`),
			ev("f2", 1, spec.EventRunQueued, 800, f2Payload), ev("f2", 2, spec.EventRunFailed, 850, `{"error_code":"boom","generation":2}`),
			ev("f3", 1, spec.EventRunQueued, 900, f3Payload),
			ev("q1", 1, spec.EventRunQueued, 10, "{}"),
			ev("x1", 1, spec.EventRunQueued, 30, "{}"), ev("x1", 2, spec.EventRunCancelled, 50, `{"generation":0,"reason":"stop"}`),
		},
		Jobs: []spec.Job{
			j("c1", spec.JobCompleted, 20, 1, 1, ""), j("f1", spec.JobDead, 40, 1, 1, "boom"),
			j("f2", spec.JobDead, 800, 2, 1, "boom"), j("f3", spec.JobQueued, 900, 2, 0, ""),
			j("q1", spec.JobQueued, 10, 0, 0, ""), j("x1", spec.JobCancelled, 30, 0, 0, ""),
		},
		Attempts: []spec.Attempt{{Tenant: "acme", RunID: "c1", Generation: 1, Number: 1, Worker: "w", ClaimedAt: 100, RenewedAt: 100,
			FinishedAt: 900, Outcome: spec.AttemptCompleted}},
		Idempotency: []spec.IdempotencyRecord{{Tenant: "acme", Operation: "work", Key: "key-q1", Fingerprint: "fp", RunID: "q1",
			CreatedAt: 10, ExpiresAt: 86400010}},
		Effects: []spec.Effect{},
		Outbox:  []spec.OutboxMessage{},
	}

	s, err := sqlite.Open(ctx, path, sqlite.Options{Config: spec.DefaultConfig(), Clock: clock.NewManual(1000)})
	if err != nil {
		t.Fatalf("open at migration 4: %v", err)
	}
	defer s.Close()
	got, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot after migration 5:\n got %+v\nwant %+v", got, want)
	}
	for _, id := range []string{"f2", "q1", "x1"} {
		evs, err := s.Events(ctx, "acme", id)
		var wantEvs []spec.Event
		for _, e := range want.Events {
			if e.RunID == id {
				wantEvs = append(wantEvs, e)
			}
		}
		if err != nil || !reflect.DeepEqual(evs, wantEvs) {
			t.Fatalf("events of %s after migration 5: %+v, %v; want %+v", id, evs, err, wantEvs)
		}
	}
	// What is left in the tables: run_events holds the terminal events, a
	// replay's payload is on its run row, and every foreign key holds.
	db := s.DB()
	var kinds, queued string
	if err := db.QueryRowContext(ctx, `SELECT group_concat(run_id || ':' || kind, ' ') FROM (SELECT run_id, kind FROM run_events ORDER BY run_id)`).Scan(&kinds); err != nil ||
		kinds != "c1:run_completed f1:run_failed f2:run_failed x1:run_cancelled" {
		t.Fatalf("run_events after migration 5: %q, %v; want the four terminal events only", kinds, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT group_concat(run_id || '=' || coalesce(queued_payload, 'NULL'), ' ')
		FROM (SELECT run_id, queued_payload FROM runs ORDER BY run_id)`).Scan(&queued); err != nil ||
		queued != "c1=NULL f1=NULL f2="+f2Payload+" f3="+f3Payload+" q1=NULL x1=NULL" {
		t.Fatalf("runs.queued_payload after migration 5: %q, %v", queued, err)
	}
	var broken int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_foreign_key_check`).Scan(&broken); err != nil || broken != 0 {
		t.Fatalf("foreign key check after migration 5: %d rows, %v; want none", broken, err)
	}
	// The store goes on: the replay f3 can be cancelled, and a new
	// admission reads back its derived event.
	if _, err := s.Cancel(ctx, spec.CancelRequest{Tenant: "acme", RunID: "f3", Reason: "stop"}); err != nil {
		t.Fatalf("cancel f3: %v", err)
	}
	if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "key-n1", RunID: "n1", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("admit after migration 5: %v", err)
	}
	if evs, err := s.Events(ctx, "acme", "n1"); err != nil || !reflect.DeepEqual(evs, []spec.Event{ev("n1", 1, spec.EventRunQueued, 1000, "{}")}) {
		t.Fatalf("events of a run admitted after migration 5: %+v, %v", evs, err)
	}
}

// TestMigrationRefusesUnderivableQueuedEvents: a run_queued row that the
// run row does not give back fails migration 5 with an error naming the
// run and the problem, and leaves the database as it was (at migration 4).
func TestMigrationRefusesUnderivableQueuedEvents(t *testing.T) {
	ctx := context.Background()
	// ok is a run the migration could move, so that nothing is changed
	// even where something could be.
	ok := []string{oldRun("ok", "queued", 1, 1, "NULL", "NULL", 10, "NULL", 0), oldEvent("ok", 1, "run_queued", 10, "{}"),
		oldJob("ok", "queued", 10, 0, 0, "NULL")}
	for _, c := range []struct {
		name    string
		rows    []string
		problem string
	}{
		{"event at another time", []string{oldRun("r1", "queued", 1, 1, "NULL", "NULL", 10, "NULL", 0),
			oldEvent("r1", 1, "run_queued", 11, "{}")}, "its at 11 is not the run's created_at 10"},
		{"admitted run with a payload", []string{oldRun("r1", "queued", 1, 1, "NULL", "NULL", 10, "NULL", 0),
			oldEvent("r1", 1, "run_queued", 10, `{"note":"x"}`)}, `the payload of an admitted run is {"note":"x"}, not {}`},
		{"run without its event", []string{oldRun("r1", "queued", 1, 1, "NULL", "NULL", 10, "NULL", 0)}, "the run has no run_queued event"},
		{"replay at another time", []string{oldRun("f1", "failed", 3, 2, "'boom'", "NULL", 5, "NULL", 0),
			oldEvent("f1", 1, "run_queued", 5, "{}"), oldEvent("f1", 2, "run_failed", 6, "{}"),
			oldRun("r1", "queued", 1, 1, "NULL", "NULL", 10, "'f1'", 1), oldEvent("r1", 1, "run_queued", 9, spec.QueuedPayload("f1", "ops", 1))},
			"its at 9 is not the run's created_at 10"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := oldLayout(t, append(append([]string{}, ok...), c.rows...)...)
			before := dump(t, path)
			s, err := sqlite.Open(ctx, path, sqlite.Options{Config: spec.DefaultConfig()})
			if err == nil {
				s.Close()
				t.Fatal("migration 5 accepted a run_queued event it cannot derive from its run row")
			}
			wantMsg := "migration 5 would lose the run_queued event of run acme/r1 (" + c.problem + "); nothing was changed"
			t.Log(err)
			if !strings.Contains(err.Error(), wantMsg) {
				t.Fatalf("open: %v\nwant an error saying %q", err, wantMsg)
			}
			if after := dump(t, path); after != before {
				t.Fatalf("the failed migration changed the database:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// dump is the schema and every row of the database at path, as text.
func dump(t *testing.T, path string) string {
	t.Helper()
	db := rawDB(t, path)
	defer db.Close()
	var b strings.Builder
	var tables []string
	rows, err := db.Query(`SELECT type, name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ, name, text string
		if err := rows.Scan(&typ, &name, &text); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s: %s\n", typ, name, text)
		if typ == "table" {
			tables = append(tables, name)
		}
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		rows, err := db.Query(`SELECT * FROM ` + table + ` ORDER BY 1, 2`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %v\n", table, vals)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// Rows of the layout of migrations 1-5 (a run's run_queued event is its
// run row; its idempotency record a row of idempotency_keys), all of
// tenant acme and operation work unless said otherwise.
func v5Run(id, state string, version, lastSeq int, errorCode, result, fingerprint string, created int64, replayOf, queuedPayload string, depth int) string {
	return fmt.Sprintf(`INSERT INTO runs (tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint,
		max_attempts, error_code, result, created_at, deadline_at, replay_of, replay_depth, queued_payload)
		VALUES ('acme', '%s', 'work', '%s', %d, %d, '{}', '%s', 3, %s, %s, %d, 100000, %s, %d, %s)`,
		id, state, version, lastSeq, fingerprint, errorCode, result, created, replayOf, depth, queuedPayload)
}

func v5Record(operation, key, fingerprint, runID string, created, expires int64) string {
	return fmt.Sprintf(`INSERT INTO idempotency_keys VALUES ('acme', '%s', '%s', '%s', '%s', %d, %d)`,
		operation, key, fingerprint, runID, created, expires)
}

// rowsText is every row query returns, one line each.
func rowsText(t *testing.T, db *sql.DB, query string) string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%v\n%s", err, query)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%v\n", vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// v5Tables reads what migration 6 must leave as it is: every row of every
// table but idempotency_keys, runs with the columns of migration 5.
var v5Tables = []string{
	`SELECT tenant, run_id, operation, state, version, last_event_seq, payload, fingerprint, max_attempts, error_code,
		result, created_at, deadline_at, replay_of, replay_depth, queued_payload FROM runs ORDER BY tenant, run_id`,
	`SELECT * FROM run_events ORDER BY tenant, run_id, seq`,
	`SELECT * FROM jobs ORDER BY tenant, run_id`,
	`SELECT * FROM attempts ORDER BY tenant, run_id, generation`,
	`SELECT * FROM effects ORDER BY tenant, run_id, step, effect_key`,
	`SELECT * FROM outbox ORDER BY tenant, run_id, seq`,
}

// TestMigrationMovesIdempotencyRecords: migration 6 moves every
// idempotency record onto its run row without changing what the store
// reads. Rows written in the layout of migrations 1-5 (runs with a live
// record, runs with an expired one, a replay and an admitted run holding
// none) read back as exactly the same snapshot, the records as they were
// in idempotency_keys, which is gone with its indexes; and admission,
// replay of a live key and the purge go on from them.
func TestMigrationMovesIdempotencyRecords(t *testing.T) {
	ctx := context.Background()
	cfg := spec.DefaultConfig()
	fingerprint := func(req spec.CreateRunRequest) string {
		t.Helper()
		n, err := cfg.NormalizeCreate(req, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return n.Fingerprint
	}
	admit := func(key, runID string) spec.CreateRunRequest {
		return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: key, RunID: runID, Payload: []byte(`{}`)}
	}
	// q1's record is bound to the request that replays it below.
	replayReq := admit("key-q1", "q1-again")
	fpQ1 := fingerprint(replayReq)
	f2Payload := spec.QueuedPayload("f1", "ops-ann", 1)
	path := layoutAt(t, 5,
		// q1: queued, its record live at 1000.
		v5Run("q1", "queued", 1, 1, "NULL", "NULL", fpQ1, 10, "NULL", "NULL", 0), oldJob("q1", "queued", 10, 0, 0, "NULL"),
		v5Record("work", "key-q1", fpQ1, "q1", 10, 86400010),
		// c1: completed, its record expired at 500.
		v5Run("c1", "completed", 3, 2, "NULL", `'{"ok":1}'`, "fp", 20, "NULL", "NULL", 0),
		oldEvent("c1", 2, "run_completed", 400, `{"generation":1}`), oldJob("c1", "completed", 20, 1, 1, "NULL"),
		`INSERT INTO attempts VALUES ('acme', 'c1', 1, 1, 'w', 100, 100, 400, 'completed', NULL, NULL, NULL)`,
		v5Record("work", "key-c1", "fp", "c1", 20, 500),
		// x1: cancelled, its record expired at 600.
		v5Run("x1", "cancelled", 2, 2, "'stop'", "NULL", "fp", 30, "NULL", "NULL", 0),
		oldEvent("x1", 2, "run_cancelled", 50, `{"generation":0,"reason":"stop"}`), oldJob("x1", "cancelled", 30, 0, 0, "NULL"),
		v5Record("work", "key-x1", "fp", "x1", 30, 600),
		// f1 failed, its record live; f2 replays it and holds no record.
		v5Run("f1", "failed", 3, 2, "'boom'", "NULL", "fp", 40, "NULL", "NULL", 0),
		oldEvent("f1", 2, "run_failed", 700, `{"error_code":"boom","generation":1}`), oldJob("f1", "dead", 40, 1, 1, "'boom'"),
		v5Record("work", "key-f1", "fp", "f1", 40, 86400040),
		v5Run("f2", "queued", 1, 1, "NULL", "NULL", "fp", 800, "'f1'", "'"+f2Payload+"'", 1), oldJob("f2", "queued", 800, 1, 0, "NULL"),
		// n0: queued, its record purged before the migration.
		v5Run("n0", "queued", 1, 1, "NULL", "NULL", "fp", 50, "NULL", "NULL", 0), oldJob("n0", "queued", 50, 0, 0, "NULL"),
	)
	rec := func(key, fingerprint, runID string, created, expires int64) spec.IdempotencyRecord {
		return spec.IdempotencyRecord{Tenant: "acme", Operation: "work", Key: key, Fingerprint: fingerprint, RunID: runID,
			CreatedAt: created, ExpiresAt: expires}
	}
	wantRecords := []spec.IdempotencyRecord{
		rec("key-c1", "fp", "c1", 20, 500), rec("key-f1", "fp", "f1", 40, 86400040),
		rec("key-q1", fpQ1, "q1", 10, 86400010), rec("key-x1", "fp", "x1", 30, 600),
	}
	before := map[string]string{}
	db := rawDB(t, path)
	for _, q := range v5Tables {
		before[q] = rowsText(t, db, q)
	}
	var beforeRecords []spec.IdempotencyRecord
	rows, err := db.Query(`SELECT tenant, operation, idempotency_key, fingerprint, run_id, created_at, expires_at
		FROM idempotency_keys ORDER BY tenant, operation, idempotency_key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r spec.IdempotencyRecord
		if err := rows.Scan(&r.Tenant, &r.Operation, &r.Key, &r.Fingerprint, &r.RunID, &r.CreatedAt, &r.ExpiresAt); err != nil {
			t.Fatal(err)
		}
		beforeRecords = append(beforeRecords, r)
	}
	rows.Close()
	db.Close()
	if !reflect.DeepEqual(beforeRecords, wantRecords) {
		t.Fatalf("records at migration 5:\n got %+v\nwant %+v", beforeRecords, wantRecords)
	}

	r, ev, j := wantRun, wantEvent, wantJob
	want := spec.Snapshot{
		Runs: []spec.Run{
			r("c1", spec.RunCompleted, 3, 2, "", `{"ok":1}`, "fp", 20, "", 0), r("f1", spec.RunFailed, 3, 2, "boom", "", "fp", 40, "", 0),
			r("f2", spec.RunQueued, 1, 1, "", "", "fp", 800, "f1", 1), r("n0", spec.RunQueued, 1, 1, "", "", "fp", 50, "", 0),
			r("q1", spec.RunQueued, 1, 1, "", "", fpQ1, 10, "", 0), r("x1", spec.RunCancelled, 2, 2, "stop", "", "fp", 30, "", 0),
		},
		Events: []spec.Event{
			ev("c1", 1, spec.EventRunQueued, 20, "{}"), ev("c1", 2, spec.EventRunCompleted, 400, `{"generation":1}`),
			ev("f1", 1, spec.EventRunQueued, 40, "{}"), ev("f1", 2, spec.EventRunFailed, 700, `{"error_code":"boom","generation":1}`),
			ev("f2", 1, spec.EventRunQueued, 800, f2Payload),
			ev("n0", 1, spec.EventRunQueued, 50, "{}"),
			ev("q1", 1, spec.EventRunQueued, 10, "{}"),
			ev("x1", 1, spec.EventRunQueued, 30, "{}"), ev("x1", 2, spec.EventRunCancelled, 50, `{"generation":0,"reason":"stop"}`),
		},
		Jobs: []spec.Job{
			j("c1", spec.JobCompleted, 20, 1, 1, ""), j("f1", spec.JobDead, 40, 1, 1, "boom"),
			j("f2", spec.JobQueued, 800, 1, 0, ""), j("n0", spec.JobQueued, 50, 0, 0, ""),
			j("q1", spec.JobQueued, 10, 0, 0, ""), j("x1", spec.JobCancelled, 30, 0, 0, ""),
		},
		Attempts: []spec.Attempt{{Tenant: "acme", RunID: "c1", Generation: 1, Number: 1, Worker: "w", ClaimedAt: 100, RenewedAt: 100,
			FinishedAt: 400, Outcome: spec.AttemptCompleted}},
		Idempotency: wantRecords,
		Effects:     []spec.Effect{},
		Outbox:      []spec.OutboxMessage{},
	}

	s, err := sqlite.Open(ctx, path, sqlite.Options{Config: cfg, Clock: clock.NewManual(1000)})
	if err != nil {
		t.Fatalf("open at migration 5: %v", err)
	}
	defer s.Close()
	got, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot after migration 6:\n got %+v\nwant %+v", got, want)
	}
	// What is left in the tables: every other row as it was, each record on
	// its run, idempotency_keys and its indexes gone, every foreign key
	// holding.
	db = s.DB()
	for _, q := range v5Tables {
		if after := rowsText(t, db, q); after != before[q] {
			t.Fatalf("migration 6 changed rows it must leave alone:\n%s\nbefore:\n%s\nafter:\n%s", q, before[q], after)
		}
	}
	onRuns := func() string {
		t.Helper()
		var text string
		if err := db.QueryRowContext(ctx, `SELECT group_concat(run_id || '=' || coalesce(idempotency_key || '@' || idempotency_expires_at, 'NULL'), ' ')
			FROM (SELECT run_id, idempotency_key, idempotency_expires_at FROM runs ORDER BY run_id)`).Scan(&text); err != nil {
			t.Fatal(err)
		}
		return text
	}
	if got, want := onRuns(), "c1=key-c1@500 f1=key-f1@86400040 f2=NULL n0=NULL q1=key-q1@86400010 x1=key-x1@600"; got != want {
		t.Fatalf("records on the run rows after migration 6: %q, want %q", got, want)
	}
	var schema string
	if err := db.QueryRowContext(ctx, `SELECT group_concat(type || ' ' || name, ', ') FROM (SELECT type, name FROM sqlite_schema
		WHERE name LIKE 'idempotency%' OR name LIKE 'runs_idempotency%' OR name LIKE 'migration_%' ORDER BY name)`).Scan(&schema); err != nil ||
		schema != "index runs_idempotency, index runs_idempotency_expiry" {
		t.Fatalf("idempotency schema after migration 6: %q, %v; want runs_idempotency and runs_idempotency_expiry only", schema, err)
	}
	var broken int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_foreign_key_check`).Scan(&broken); err != nil || broken != 0 {
		t.Fatalf("foreign key check after migration 6: %d rows, %v; want none", broken, err)
	}

	// The store goes on from the moved records, each step seeing the ones
	// before it.
	for _, c := range []struct {
		name         string
		req          spec.CreateRunRequest
		wantCode     spec.Code
		wantRun      string // the run returned
		wantReplayed bool
		wantOnRuns   string // every run's record after the step
	}{
		{"a live key replays its run", replayReq, "", "q1", true,
			"c1=key-c1@500 f1=key-f1@86400040 f2=NULL n0=NULL q1=key-q1@86400010 x1=key-x1@600"},
		{"a live key refuses another request", admit("key-f1", "f1-again"), spec.CodeIdempotencyConflict, "", false,
			"c1=key-c1@500 f1=key-f1@86400040 f2=NULL n0=NULL q1=key-q1@86400010 x1=key-x1@600"},
		{"an expired key with a taken run id writes nothing", admit("key-x1", "n0"), spec.CodeAlreadyExists, "", false,
			"c1=key-c1@500 f1=key-f1@86400040 f2=NULL n0=NULL q1=key-q1@86400010 x1=key-x1@600"},
		{"an expired key admits a new run, which takes the record", admit("key-c1", "c2"), "", "c2", false,
			fmt.Sprintf("c1=NULL c2=key-c1@%d f1=key-f1@86400040 f2=NULL n0=NULL q1=key-q1@86400010 x1=key-x1@600", 1000+cfg.IdempotencyRetentionMs)},
		{"a new key admits a new run", admit("key-n1", "n1"), "", "n1", false,
			fmt.Sprintf("c1=NULL c2=key-c1@%[1]d f1=key-f1@86400040 f2=NULL n0=NULL n1=key-n1@%[1]d q1=key-q1@86400010 x1=key-x1@600",
				1000+cfg.IdempotencyRetentionMs)},
	} {
		res, err := s.CreateRun(ctx, c.req)
		if code := spec.CodeOf(err); code != c.wantCode {
			t.Fatalf("%s: CreateRun: %v (code %q), want code %q", c.name, err, code, c.wantCode)
		}
		if err == nil && (res.Run.ID != c.wantRun || res.Replayed != c.wantReplayed) {
			t.Fatalf("%s: CreateRun returned run %s (replayed %v), want run %s (replayed %v)", c.name, res.Run.ID, res.Replayed, c.wantRun, c.wantReplayed)
		}
		if got := onRuns(); got != c.wantOnRuns {
			t.Fatalf("%s: records on the run rows: %q, want %q", c.name, got, c.wantOnRuns)
		}
	}
	// The purge deletes the one expired record left, x1's, from its run row.
	if n, err := s.PurgeIdempotency(ctx, spec.PurgeRequest{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("PurgeIdempotency after migration 6: %d, %v; want 1 (x1's expired record)", n, err)
	}
	after, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exp := 1000 + cfg.IdempotencyRetentionMs
	if want := []spec.IdempotencyRecord{rec("key-c1", fingerprint(admit("key-c1", "c2")), "c2", 1000, exp), rec("key-f1", "fp", "f1", 40, 86400040),
		rec("key-n1", fingerprint(admit("key-n1", "n1")), "n1", 1000, exp), rec("key-q1", fpQ1, "q1", 10, 86400010)}; !reflect.DeepEqual(after.Idempotency, want) {
		t.Fatalf("records after the admissions and the purge:\n got %+v\nwant %+v", after.Idempotency, want)
	}
}

// TestMigrationRefusesUnderivableIdempotencyRecords: an idempotency record
// that its run row cannot give back fails migration 6 with an error naming
// the record and the problem, and leaves the database as it was (at
// migration 5).
func TestMigrationRefusesUnderivableIdempotencyRecords(t *testing.T) {
	ctx := context.Background()
	// ok is a run with a record the migration could move, so that nothing
	// is changed even where something could be.
	ok := []string{v5Run("ok", "queued", 1, 1, "NULL", "NULL", "fp", 10, "NULL", "NULL", 0), oldJob("ok", "queued", 10, 0, 0, "NULL"),
		v5Record("work", "key-ok", "fp", "ok", 10, 86400010)}
	r1 := v5Run("r1", "queued", 1, 1, "NULL", "NULL", "fp", 20, "NULL", "NULL", 0)
	for _, c := range []struct {
		name    string
		rows    []string
		record  string // tenant/operation/key
		run     string
		problem string
	}{
		{"another fingerprint", []string{r1, v5Record("work", "key-r1", "fp-other", "r1", 20, 86400020)},
			"acme/work/key-r1", "r1", "its fingerprint fp-other is not the run's fingerprint fp"},
		{"another operation", []string{r1, v5Record("mail", "key-r1", "fp", "r1", 20, 86400020)},
			"acme/mail/key-r1", "r1", "its operation mail is not the run's operation work"},
		{"another creation time", []string{r1, v5Record("work", "key-r1", "fp", "r1", 21, 86400020)},
			"acme/work/key-r1", "r1", "its created_at 21 is not the run's created_at 20"},
		{"a second record of the run", []string{r1, v5Record("work", "key-r1a", "fp", "r1", 20, 86400020),
			v5Record("work", "key-r1b", "fp", "r1", 20, 86400020)},
			"acme/work/key-r1a", "r1", "its run has 2 records; a run holds at most one"},
		// Only a writer with foreign keys off can leave one.
		{"no run", []string{`PRAGMA foreign_keys = OFF`, v5Record("work", "key-r1", "fp", "r1", 20, 86400020)},
			"acme/work/key-r1", "r1", "its run does not exist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := layoutAt(t, 5, append(append([]string{}, ok...), c.rows...)...)
			before := dump(t, path)
			s, err := sqlite.Open(ctx, path, sqlite.Options{Config: spec.DefaultConfig()})
			if err == nil {
				s.Close()
				t.Fatal("migration 6 accepted an idempotency record its run row cannot give back")
			}
			wantMsg := "migration 6 would lose the idempotency record " + c.record + " of run " + c.run + " (" + c.problem + "); nothing was changed"
			t.Log(err)
			if !strings.Contains(err.Error(), wantMsg) {
				t.Fatalf("open: %v\nwant an error saying %q", err, wantMsg)
			}
			if after := dump(t, path); after != before {
				t.Fatalf("the failed migration changed the database:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}
