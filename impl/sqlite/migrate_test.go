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
	list, err := migrations.For(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old.db")
	db := rawDB(t, path)
	defer db.Close()
	all := []string{`CREATE TABLE ` + migrations.VersionTable + ` (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
		checksum TEXT NOT NULL, applied_at INTEGER NOT NULL)`}
	for _, m := range list[:4] {
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
		return spec.Run{Tenant: "acme", ID: id, Operation: "work", State: state, Version: version, LastSeq: lastSeq, Payload: "{}",
			Fingerprint: "fp", MaxAttempts: 3, ErrorCode: errorCode, Result: result, CreatedAt: created, DeadlineAt: 100000,
			ReplayOf: replayOf, ReplayDepth: depth}
	}
	ev := func(id string, seq int64, kind spec.EventKind, at int64, payload string) spec.Event {
		return spec.Event{Tenant: "acme", RunID: id, Seq: seq, Kind: kind, At: at, Payload: payload}
	}
	j := func(id string, state spec.JobState, availableAt, gen int64, attempts int, lastError string) spec.Job {
		return spec.Job{Tenant: "acme", RunID: id, Operation: "work", State: state, AvailableAt: availableAt,
			Generation: gen, Attempts: attempts, MaxAttempts: 3, LastErrorCode: lastError}
	}
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
