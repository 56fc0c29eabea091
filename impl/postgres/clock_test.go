package postgres_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/spec"
)

// TestDatabaseClock: with no injected clock the store takes every time from
// the server, inside the operation's transaction. Each operation's time must
// lie between two readings of the server clock taken around it on another
// connection (an ordering check on one clock, not a timing assertion).
func TestDatabaseClock(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s := openOn(t, dsn, schema, postgres.Options{})
	if !s.UsesDatabaseClock() {
		t.Fatal("a store opened without Options.Clock must use the database clock")
	}
	conn := pgtest.Conn(t, dsn, schema)
	dbNow := func() int64 {
		t.Helper()
		var v int64
		if err := conn.QueryRow(ctx, postgres.ClockSQL).Scan(&v); err != nil {
			t.Fatalf("read the server clock: %v", err)
		}
		return v
	}
	within := func(what string, lo, v, hi int64) {
		t.Helper()
		if v < lo || v > hi {
			t.Fatalf("%s used time %d, outside the server clock readings [%d, %d] around it", what, v, lo, hi)
		}
	}

	t1 := dbNow()
	res, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k", RunID: "r1", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	t2 := dbNow()
	within("create", t1, res.Run.CreatedAt, t2)

	const leaseMs = 60_000
	leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: leaseMs, Limit: 1})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v, %v", runIDs(leases), err)
	}
	t3 := dbNow()
	within("claim", t2, leases[0].ExpiresAt-leaseMs, t3)

	renewed, err := s.Renew(ctx, spec.RenewRequest{Lease: leases[0].Ref(), LeaseMs: leaseMs})
	if err != nil {
		t.Fatal(err)
	}
	t4 := dbNow()
	within("renew", t3, renewed.ExpiresAt-leaseMs, t4)

	run, err := s.Complete(ctx, spec.CompleteRequest{Lease: leases[0].Ref()})
	if err != nil || run.State != spec.RunCompleted {
		t.Fatalf("complete: %+v, %v", run, err)
	}
	t5 := dbNow()
	events, err := s.Events(ctx, "acme", "r1")
	if err != nil || len(events) != 2 {
		t.Fatalf("events: %+v, %v", events, err)
	}
	within("the run_completed event", t4, events[1].At, t5)
}

// TestClockReadAfterTheLock: a guarded write that waits for its job's row
// lock reads its clock only once it holds the lock. Here the clock moves
// while the write waits; the write must use the later time.
func TestClockReadAfterTheLock(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	clk := clock.NewManual(t0)
	app := "lh-clock-" + schema[len(schema)-8:]
	s := openOn(t, dsn, schema, postgres.Options{Clock: clk, ApplicationName: app})
	createRuns(t, s, clk, 3, "r1")
	leases, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 60_000, Limit: 1})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v, %v", runIDs(leases), err)
	}

	holder, holderName := pgtest.Conn(t, dsn, schema), uniqueName("lh-holder", schema)
	nameConn(ctx, t, holder, holderName)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE tenant = 'acme' AND run_id = 'r1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		run spec.Run
		err error
	}
	done := make(chan result, 1)
	go func() {
		run, err := s.Complete(ctx, spec.CompleteRequest{Lease: leases[0].Ref()})
		done <- result{run, err}
	}()
	// Barrier: the write is waiting for the job's lock.
	awaitBlocked(ctx, t, pgtest.Conn(t, dsn, schema), app, holderName, done, "the completion returned while its job was locked elsewhere")
	later := clk.Now() + 5_000
	clk.Set(later)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatalf("complete after waiting for the lock: %v", res.err)
	}
	events, err := s.Events(ctx, "acme", "r1")
	if err != nil || len(events) != 2 {
		t.Fatalf("events: %+v, %v", events, err)
	}
	if events[1].At != later {
		t.Fatalf("the completion waited for the lock while the clock moved to %d, but recorded %d: the clock was read before the lock", later, events[1].At)
	}
}

// TestClaimStatementTimeRange: the claim statement reads its own time and
// claims only at a time in [0, @latest] (the times whose lease expiry is a
// valid time); out of range it claims nothing and still returns its time,
// which Claim then refuses as spec.CheckClaim does. Run on the statement
// itself, in a transaction rolled back: an out-of-range database clock
// cannot be made here.
func TestClaimStatementTimeRange(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	clk := clock.NewManual(t0)
	s := openOn(t, dsn, schema, postgres.Options{Clock: clk})
	createRuns(t, s, clk, 3, "r1")
	conn := pgtest.Conn(t, dsn, schema)
	const leaseMs = 30_000
	for _, c := range []struct {
		name    string
		now     int64
		latest  int64
		claimed int
	}{
		{"in range", t0, math.MaxInt64 - leaseMs, 1},
		// No job is due before 0 (available_at >= 0): this case holds the
		// time row to the time given, which Claim then refuses.
		{"before 0", -1, math.MaxInt64 - leaseMs, 0},
		{"past the latest", t0, t0 - 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			rows, err := tx.Query(ctx, postgres.ClaimSQL, pgx.NamedArgs{"tenant": "acme", "worker": "w", "now": c.now,
				"lease_ms": leaseMs, "latest": c.latest, "limit": 10})
			if err != nil {
				t.Fatal(err)
			}
			var claimed []string
			var at *int64
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				if vals[1] == nil {
					if at != nil {
						t.Fatalf("two time rows")
					}
					v := vals[8].(int64)
					at = &v
					continue
				}
				if at != nil {
					t.Fatalf("a lease row after the time row: the time row must come last")
				}
				claimed = append(claimed, vals[1].(string))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if len(claimed) != c.claimed {
				t.Fatalf("claimed %v at time %d with @latest %d, want %d leases", claimed, c.now, c.latest, c.claimed)
			}
			if at == nil || *at != c.now {
				t.Fatalf("the statement's time row is %v, want %d", at, c.now)
			}
		})
	}
}

// TestFreshAdmissionReadsTheClockAfterTheLock: the fresh admission's one
// statement (createFresh) takes its scope's admission lock before it reads
// the database clock. Another session holds the lock while the admission
// waits for it; the admission must be created at a time no earlier than a
// reading of the server clock taken just before the lock was released.
func TestFreshAdmissionReadsTheClockAfterTheLock(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s := openOn(t, dsn, schema, postgres.Options{})
	holder := pgtest.Conn(t, dsn, schema)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	scope := postgres.AdmissionScope(s, "acme", "work", "k-1")
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, scope); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res spec.CreateRunResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-1", RunID: "r1",
			Payload: []byte(`{}`)})
		done <- result{res, err}
	}()
	waitForLockWait(t, ctx, s, func() string {
		select {
		case r := <-done:
			return fmt.Sprintf("CreateRun returned while its scope's lock was held elsewhere: %+v, %v", r.res, r.err)
		default:
			return ""
		}
	})
	time.Sleep(20 * time.Millisecond) // the clock moves on while the admission waits (a reading before the lock is then strictly earlier)
	var released int64
	if err := tx.QueryRow(ctx, postgres.ClockSQL).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.res.Replayed {
		t.Fatalf("CreateRun after waiting for its scope's lock: %+v, %v; want the run created", r.res, r.err)
	}
	if got := s.AdmissionStats().Fresh; got != 1 {
		t.Fatalf("%d fresh admissions, want 1: the test must reach createFresh", got)
	}
	if r.res.Run.CreatedAt < released {
		t.Fatalf("the admission waited for its scope's lock until after %d, but was created at %d: the clock was read before the lock",
			released, r.res.Run.CreatedAt)
	}
}
