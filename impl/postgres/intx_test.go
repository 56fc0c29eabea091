package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/spec"
)

// Completion inside the caller's transaction (ADR-042): the application's
// write and the job's completion commit together or not at all. Helpers here
// carry an "intx" prefix so that this file depends on no other test file.

const intxT0 = int64(1_800_000_000_000)

// intxEnv is a store on a fresh schema with an application table
// "app_orders" next to leasehold's tables.
type intxEnv struct {
	t      *testing.T
	ctx    context.Context
	dsn    string
	schema string
	clk    *clock.Manual
	s      *postgres.Store
}

func newIntxEnv(t *testing.T) *intxEnv {
	t.Helper()
	dsn, schema := pgtest.Schema(t)
	clk := clock.NewManual(intxT0)
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{Config: spec.DefaultConfig(), Clock: clk, Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatalf("open store in schema %s: %v", schema, err)
	}
	t.Cleanup(func() { s.Close() })
	e := &intxEnv{t: t, ctx: context.Background(), dsn: dsn, schema: schema, clk: clk, s: s}
	if _, err := s.Pool().Exec(e.ctx, `CREATE TABLE app_orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatalf("create the application table: %v", err)
	}
	return e
}

// leased creates run id and claims it for worker with a lease of leaseMs.
func (e *intxEnv) leased(id, worker string, leaseMs int64) spec.Lease {
	e.t.Helper()
	if _, err := e.s.CreateRun(e.ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id,
		RunID: id, Payload: []byte(`{}`)}); err != nil {
		e.t.Fatalf("create %s: %v", id, err)
	}
	ls, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: worker, LeaseMs: leaseMs, Limit: 1})
	if err != nil || len(ls) != 1 || ls[0].RunID != id {
		e.t.Fatalf("claim %s: want its lease, got %+v, %v", id, ls, err)
	}
	return ls[0]
}

// orderExists reports whether the application row id committed.
func (e *intxEnv) orderExists(id string) bool {
	e.t.Helper()
	var n int
	if err := e.s.Pool().QueryRow(e.ctx, `SELECT count(*) FROM app_orders WHERE id = $1`, id).Scan(&n); err != nil {
		e.t.Fatalf("count app_orders: %v", err)
	}
	return n == 1
}

func (e *intxEnv) job(id string) spec.Job {
	e.t.Helper()
	j, err := e.s.GetJob(e.ctx, "acme", id)
	if err != nil {
		e.t.Fatalf("GetJob(%s): %v", id, err)
	}
	return j
}

func TestCompleteTx(t *testing.T) {
	cases := []struct {
		name string
		// prepare returns the lease to complete with, after making it
		// current or stale.
		prepare func(e *intxEnv) spec.Lease
		// ownConn: begin the transaction on a plain connection whose
		// search_path is not the store's schema.
		ownConn    bool
		rollback   bool // the caller rolls back after a successful CompleteTx
		wantCode   spec.Code
		wantCommit bool // both the order and the completion are visible afterwards
	}{
		{name: "current lease: both commit", prepare: func(e *intxEnv) spec.Lease { return e.leased("r1", "w1", 10_000) },
			wantCommit: true},
		{name: "current lease, caller's own connection and search_path: both commit", ownConn: true,
			prepare: func(e *intxEnv) spec.Lease { return e.leased("r1", "w1", 10_000) }, wantCommit: true},
		{name: "caller rolls back: neither commits", rollback: true,
			prepare: func(e *intxEnv) spec.Lease { return e.leased("r1", "w1", 10_000) }},
		{name: "lease reclaimed by generation 2: lost_lease, neither commits", wantCode: spec.CodeLostLease,
			prepare: func(e *intxEnv) spec.Lease {
				l := e.leased("r1", "w1", 100)
				e.clk.Advance(200)
				if ls, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w2", LeaseMs: 10_000, Limit: 1}); err != nil || len(ls) != 1 {
					e.t.Fatalf("reclaim r1 by w2: %+v, %v", ls, err)
				}
				return l
			}},
		{name: "lease expired, not reclaimed: lost_lease, neither commits", wantCode: spec.CodeLostLease,
			prepare: func(e *intxEnv) spec.Lease {
				l := e.leased("r1", "w1", 100)
				e.clk.Advance(100)
				return l
			}},
		{name: "run cancelled under the lease: cancelled, neither commits", wantCode: spec.CodeCancelled,
			prepare: func(e *intxEnv) spec.Lease {
				l := e.leased("r1", "w1", 10_000)
				if _, err := e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "acme", RunID: "r1"}); err != nil {
					e.t.Fatalf("cancel r1: %v", err)
				}
				return l
			}},
		{name: "malformed lease reference: invalid_argument, neither commits", wantCode: spec.CodeInvalidArgument,
			prepare: func(e *intxEnv) spec.Lease {
				l := e.leased("r1", "w1", 10_000)
				l.Generation = 0
				return l
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newIntxEnv(t)
			l := c.prepare(e)
			jobBefore := e.job("r1")
			var tx pgx.Tx
			var err error
			orders := "app_orders"
			if c.ownConn {
				conn := pgtest.Conn(t, e.dsn, "")
				orders = pgx.Identifier{e.schema, "app_orders"}.Sanitize()
				tx, err = conn.Begin(e.ctx)
			} else {
				tx, err = e.s.Pool().Begin(e.ctx)
			}
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			defer tx.Rollback(e.ctx)
			var pathBefore string
			if err := tx.QueryRow(e.ctx, `SHOW search_path`).Scan(&pathBefore); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(e.ctx, `INSERT INTO `+orders+` (id) VALUES ('o1')`); err != nil {
				t.Fatalf("the application's write: %v", err)
			}
			run, err := e.s.CompleteTx(e.ctx, tx, spec.CompleteRequest{Lease: l.Ref(), Result: []byte(`{"order":"o1"}`)})
			if spec.CodeOf(err) != c.wantCode {
				t.Fatalf("CompleteTx: want code %q, got %v", c.wantCode, err)
			}
			if err == nil {
				if run.State != spec.RunCompleted || run.Result != `{"order":"o1"}` {
					t.Errorf("CompleteTx returned run %+v, want it completed with the result", run)
				}
				var pathAfter string
				if err := tx.QueryRow(e.ctx, `SHOW search_path`).Scan(&pathAfter); err != nil {
					t.Fatal(err)
				}
				if pathAfter != pathBefore {
					t.Errorf("search_path after CompleteTx = %q, want the caller's %q restored", pathAfter, pathBefore)
				}
			}
			var commitErr error
			if c.rollback {
				commitErr = tx.Rollback(e.ctx)
			} else {
				// A caller that commits despite the error must get a rollback.
				commitErr = tx.Commit(e.ctx)
			}
			switch {
			case c.wantCommit && commitErr != nil:
				t.Fatalf("commit: %v", commitErr)
			case c.wantCode != "" && !errors.Is(commitErr, pgx.ErrTxCommitRollback):
				t.Fatalf("commit after a refused CompleteTx: want pgx.ErrTxCommitRollback (the transaction was aborted), got %v", commitErr)
			}
			if got := e.orderExists("o1"); got != c.wantCommit {
				t.Errorf("application row committed = %v, want %v", got, c.wantCommit)
			}
			job := e.job("r1")
			if c.wantCommit {
				if job.State != spec.JobCompleted {
					t.Errorf("job after commit: %+v, want completed", job)
				}
				ev, err := e.s.Events(e.ctx, "acme", "r1")
				if err != nil || len(ev) != 2 || ev[1].Kind != spec.EventRunCompleted || ev[1].Payload != spec.CompletedPayload(l.Generation) {
					t.Errorf("events after commit: %+v, %v; want run_queued then run_completed by generation %d", ev, err, l.Generation)
				}
			} else if job != jobBefore {
				t.Errorf("job changed although nothing committed:\n got %+v\nwant %+v", job, jobBefore)
			}
		})
	}
}

func TestListenDeliversCommittedChanges(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema := pgtest.Schema(t)
	fail := false
	hook := func(_ context.Context, op spec.Op, p spec.HookPoint) error {
		if fail && op == spec.OpCreateRun && p == spec.BeforeCommit {
			return errors.New("injected rollback")
		}
		return nil
	}
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 4, Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	got := make(chan spec.Notification, 16)
	listenCtx, stopListening := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Listen(listenCtx, func(n spec.Notification) { got <- n }) }()
	next := func(what string) spec.Notification {
		t.Helper()
		select {
		case n := <-got:
			return n
		case <-ctx.Done():
			t.Fatalf("waiting for %s: no notification", what)
			return spec.Notification{}
		}
	}
	if n := next("the first resync"); n.Kind != spec.NotifyResync {
		t.Fatalf("first notification: %+v, want a resync once LISTEN is in place", n)
	}
	create := func(id string) error {
		_, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id, RunID: id, Payload: []byte(`{}`)})
		return err
	}
	// A rolled-back admission notifies nothing: the next notification is
	// the committed one after it.
	fail = true
	if err := create("rolled-back"); err == nil {
		t.Fatalf("create with a failing BeforeCommit hook succeeded")
	}
	fail = false
	if err := create("r1"); err != nil {
		t.Fatal(err)
	}
	want := []spec.Notification{{Kind: spec.NotifyRunCreated, Tenant: "acme", RunID: "r1"}}
	if n := next("r1 created"); n != want[0] {
		t.Fatalf("notification after the rolled-back and the committed create: %+v, want %+v", n, want[0])
	}
	ls, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 60_000, Limit: 1})
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim: %+v, %v", ls, err)
	}
	if _, err := s.Cancel(ctx, spec.CancelRequest{Tenant: "acme", RunID: "r1"}); err != nil {
		t.Fatal(err)
	}
	if n, w := next("r1 cancelled"), (spec.Notification{Kind: spec.NotifyRunCancelled, Tenant: "acme", RunID: "r1", Generation: 1}); n != w {
		t.Fatalf("notification of the cancel: %+v, want %+v (the generation it cut short)", n, w)
	}
	stopListening()
	if err := <-done; err != nil {
		t.Fatalf("Listen after its context ended: %v, want nil", err)
	}
}

func TestChannelNames(t *testing.T) {
	long := "s_abcdefghijklmnopqrstuvwxyz_abcdefghijklmnopqrstuvwxyz_0123456" // 63 bytes
	cases := []struct {
		schema, want string
	}{
		{"leasehold", "leasehold_leasehold"},
		{"lh_test_0011223344556677", "leasehold_lh_test_0011223344556677"},
	}
	for _, c := range cases {
		if got := postgres.Channel(c.schema); got != c.want {
			t.Errorf("Channel(%q) = %q, want %q", c.schema, got, c.want)
		}
	}
	if got := postgres.Channel(long); len(got) > 63 || got == postgres.Channel(long+"x") {
		t.Errorf("Channel of a %d-byte schema = %q: want at most 63 bytes and distinct from a longer name's", len(long), got)
	}
}

// TestDisableNotify: with notifications off, admissions and cancels commit
// without pg_notify; a second store on the same schema with them on shows
// the listener still works, and that only its create was announced.
func TestDisableNotify(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema := pgtest.Schema(t)
	quiet := intxOpen(ctx, t, dsn, schema, true)
	loud := intxOpen(ctx, t, dsn, schema, false)
	got := intxListen(ctx, t, loud, 16)
	for _, c := range []struct {
		s  *postgres.Store
		id string
	}{{quiet, "silent"}, {loud, "announced"}} {
		if _, err := c.s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: c.id, RunID: c.id, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := quiet.Cancel(ctx, spec.CancelRequest{Tenant: "acme", RunID: "silent"}); err != nil {
		t.Fatal(err)
	}
	if _, err := loud.Cancel(ctx, spec.CancelRequest{Tenant: "acme", RunID: "announced"}); err != nil {
		t.Fatal(err)
	}
	// Notifications arrive in commit order: had the quiet store notified,
	// its create and its cancel would come before the loud ones.
	for _, want := range []spec.Notification{
		{Kind: spec.NotifyRunCreated, Tenant: "acme", RunID: "announced"},
		{Kind: spec.NotifyRunCancelled, Tenant: "acme", RunID: "announced"},
	} {
		select {
		case n := <-got:
			if n != want {
				t.Fatalf("got %+v, want %+v (the quiet store must not notify)", n, want)
			}
		case <-ctx.Done():
			t.Fatalf("never received %+v", want)
		}
	}
}

// TestAnnouncementsInCommitOrder: the announcer sends every committed
// change's notification, in the order the changes committed, however many
// wait at once: a bulk admission of many more runs than one announcement
// holds (shrunk to 7 here), then creations and a cancel from one caller.
// Close sends what is still waiting: the store closed right after its last
// admission has announced it.
func TestAnnouncementsInCommitOrder(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema := pgtest.Schema(t)
	got := intxListen(ctx, t, intxOpen(ctx, t, dsn, schema, false), 4096)
	s := intxOpen(ctx, t, dsn, schema, false)
	var want []spec.Notification
	req := func(id string) spec.CreateRunRequest {
		want = append(want, spec.Notification{Kind: spec.NotifyRunCreated, Tenant: "acme", RunID: id})
		return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id, RunID: id, Payload: []byte(`{}`)}
	}
	var bulk []spec.CreateRunRequest
	defer postgres.SetMaxAnnounceBatch(7)()
	for i := range 1000 {
		bulk = append(bulk, req(fmt.Sprintf("b%04d", i)))
	}
	if _, err := s.CreateRuns(ctx, bulk); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRun(ctx, req("one")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, spec.CancelRequest{Tenant: "acme", RunID: "one"}); err != nil {
		t.Fatal(err)
	}
	want = append(want, spec.Notification{Kind: spec.NotifyRunCancelled, Tenant: "acme", RunID: "one"})
	if _, err := s.CreateRun(ctx, req("last")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	expectNotes(t, got, want...)
}

// intxOpen opens a store on schema, closed at the test's end.
func intxOpen(ctx context.Context, t *testing.T, dsn, schema string, disableNotify bool) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 4, DisableNotify: disableNotify})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// intxListen listens on s until ctx ends (or the test does) and returns the
// notifications after the first resync, which it waits for.
func intxListen(ctx context.Context, t *testing.T, s *postgres.Store, buffer int) <-chan spec.Notification {
	t.Helper()
	got := make(chan spec.Notification, buffer)
	listenCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go s.Listen(listenCtx, func(n spec.Notification) { got <- n })
	select {
	case n := <-got:
		if n.Kind != spec.NotifyResync {
			t.Fatalf("first notification %+v, want the resync", n)
		}
	case <-ctx.Done():
		t.Fatal("no resync: the listener never started listening")
	}
	return got
}
