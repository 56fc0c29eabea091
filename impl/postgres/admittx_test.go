package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/spec"
)

// Admission inside the caller's transaction (CreateRunTx): the
// application's order row and the run commit together or not at all. The
// environment is intx_test.go's (a store beside app_orders).

// order is the request admitted for order id: its key is the order's.
func order(id, payload string) spec.CreateRunRequest {
	return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "order-" + id, RunID: "run-" + id,
		Payload: []byte(payload), Outbox: []spec.Message{{Subject: "orders.created", Payload: []byte(`{"order":"` + id + `"}`)}}}
}

// begin starts a transaction on the store's pool that has written order
// row id.
func (e *intxEnv) begin(id string) pgx.Tx {
	e.t.Helper()
	tx, err := e.s.Pool().Begin(e.ctx)
	if err != nil {
		e.t.Fatalf("begin: %v", err)
	}
	e.t.Cleanup(func() { tx.Rollback(context.Background()) })
	if _, err := tx.Exec(e.ctx, `INSERT INTO app_orders (id) VALUES ($1)`, id); err != nil {
		e.t.Fatalf("the application's write: %v", err)
	}
	return tx
}

// admitted says what of run id's admission committed: the run (with its
// events), its job, its idempotency record, its outbox messages.
func (e *intxEnv) admitted(tenant, id string) (run, job, record bool, events, messages int) {
	e.t.Helper()
	snap, err := e.s.Snapshot(e.ctx)
	if err != nil {
		e.t.Fatalf("snapshot: %v", err)
	}
	for _, r := range snap.Runs {
		run = run || r.Tenant == tenant && r.ID == id
	}
	for _, j := range snap.Jobs {
		job = job || j.Tenant == tenant && j.RunID == id
	}
	for _, r := range snap.Idempotency {
		record = record || r.Tenant == tenant && r.RunID == id
	}
	for _, ev := range snap.Events {
		if ev.Tenant == tenant && ev.RunID == id {
			events++
		}
	}
	for _, m := range snap.Outbox {
		if m.Tenant == tenant && m.RunID == id {
			messages++
		}
	}
	return run, job, record, events, messages
}

// expectAdmitted fails unless run id's admission committed whole (want) or
// left nothing at all (!want).
func (e *intxEnv) expectAdmitted(id string, want bool) {
	e.t.Helper()
	run, job, record, events, messages := e.admitted("acme", id)
	if want && !(run && job && record && events == 1 && messages == 1) || !want && (run || job || record || events+messages > 0) {
		e.t.Errorf("run %s: run %v, job %v, idempotency record %v, %d events, %d outbox messages; want all of it (one event, one message) %v",
			id, run, job, record, events, messages, want)
	}
}

func TestCreateRunTx(t *testing.T) {
	cases := []struct {
		name string
		// prepare runs before the caller's transaction begins.
		prepare func(e *intxEnv)
		req     spec.CreateRunRequest
		// ownConn: the transaction is on a plain connection whose
		// search_path is not the store's schema; iso is its isolation.
		ownConn  bool
		iso      pgx.TxIsoLevel
		rollback bool // the caller rolls back after a successful admission
		wantCode spec.Code
		// wantRun is the run the admission returns (its id), replayed when
		// replay; wantOrder whether the order row commits.
		wantRun   string
		replay    bool
		wantOrder bool
	}{
		{name: "new key: the order and the run commit together", req: order("o1", `{"sku":"a"}`),
			wantRun: "run-o1", wantOrder: true},
		{name: "caller's own connection and search_path: both commit", ownConn: true, req: order("o1", `{"sku":"a"}`),
			wantRun: "run-o1", wantOrder: true},
		{name: "caller rolls back after the admission: neither commits", rollback: true, req: order("o1", `{"sku":"a"}`),
			wantRun: "run-o1"},
		{name: "replay of a committed key: the original run, the transaction commits",
			prepare: func(e *intxEnv) { e.create(order("o1", `{"sku":"a"}`)) },
			req:     func() spec.CreateRunRequest { r := order("o1", `{ "sku" : "a" }`); r.RunID = "run-o1-again"; return r }(),
			wantRun: "run-o1", replay: true, wantOrder: true},
		{name: "same key, another request: idempotency_conflict, neither commits",
			prepare:  func(e *intxEnv) { e.create(order("o1", `{"sku":"a"}`)) },
			req:      func() spec.CreateRunRequest { r := order("o1", `{"sku":"b"}`); r.RunID = "run-o1-again"; return r }(),
			wantCode: spec.CodeIdempotencyConflict},
		{name: "run id taken under another key: already_exists, neither commits",
			prepare:  func(e *intxEnv) { e.create(order("o1", `{"sku":"a"}`)) },
			req:      func() spec.CreateRunRequest { r := order("o2", `{"sku":"a"}`); r.RunID = "run-o1"; return r }(),
			wantCode: spec.CodeAlreadyExists},
		{name: "invalid payload: invalid_argument, neither commits", req: order("o1", `{"sku":"a","sku":"b"}`),
			wantCode: spec.CodeInvalidArgument},
		{name: "repeatable read transaction: invalid_argument, neither commits", iso: pgx.RepeatableRead,
			req: order("o1", `{"sku":"a"}`), wantCode: spec.CodeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newIntxEnv(t)
			if c.prepare != nil {
				c.prepare(e)
			}
			var tx pgx.Tx
			var err error
			orders := "app_orders"
			if c.ownConn || c.iso != "" {
				conn := pgtest.Conn(t, e.dsn, "")
				orders = pgx.Identifier{e.schema, "app_orders"}.Sanitize()
				tx, err = conn.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: c.iso})
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
			res, err := e.s.CreateRunTx(e.ctx, tx, c.req)
			if spec.CodeOf(err) != c.wantCode {
				t.Fatalf("CreateRunTx: want code %q, got %v", c.wantCode, err)
			}
			if err == nil {
				if res.Run.ID != c.wantRun || res.Replayed != c.replay || res.Run.State != spec.RunQueued {
					t.Errorf("CreateRunTx returned %+v, want run %s queued, replayed %v", res, c.wantRun, c.replay)
				}
				var pathAfter string
				if err := tx.QueryRow(e.ctx, `SHOW search_path`).Scan(&pathAfter); err != nil {
					t.Fatal(err)
				}
				if pathAfter != pathBefore {
					t.Errorf("search_path after CreateRunTx = %q, want the caller's %q restored", pathAfter, pathBefore)
				}
			}
			var endErr error
			if c.rollback {
				endErr = tx.Rollback(e.ctx)
			} else {
				// A caller that commits despite the error must get a rollback.
				endErr = tx.Commit(e.ctx)
			}
			switch {
			case c.wantCode == "" && endErr != nil:
				t.Fatalf("commit or rollback: %v", endErr)
			case c.wantCode != "" && !errors.Is(endErr, pgx.ErrTxCommitRollback):
				t.Fatalf("commit after a refused CreateRunTx: want pgx.ErrTxCommitRollback (the transaction was aborted), got %v", endErr)
			}
			if got := e.orderExists("o1"); got != c.wantOrder {
				t.Errorf("order row committed = %v, want %v", got, c.wantOrder)
			}
			if c.prepare == nil {
				e.expectAdmitted(c.req.RunID, c.wantOrder)
			} else {
				e.expectAdmitted("run-o1", true)
				e.expectAdmitted(c.req.RunID, c.req.RunID == "run-o1")
			}
			if c.rollback {
				// The key is free: admitting it again creates the run.
				res, err := e.s.CreateRun(e.ctx, c.req)
				if err != nil || res.Replayed || res.Run.ID != c.req.RunID {
					t.Errorf("CreateRun of the rolled-back key: %+v, %v; want run %s created", res, err, c.req.RunID)
				}
			}
		})
	}
}

// create admits req outside any transaction of the caller's.
func (e *intxEnv) create(req spec.CreateRunRequest) {
	e.t.Helper()
	if res, err := e.s.CreateRun(e.ctx, req); err != nil || res.Replayed {
		e.t.Fatalf("CreateRun(%s): %+v, %v; want it created", req.RunID, res, err)
	}
}

// TestCreateRunTxConcurrent: while transaction A holds its admission of a
// key open, a second admission of the key (CreateRunTx in transaction B, or
// CreateRun) waits for A's admission lock; once A ends it gets exactly what
// CreateRun would say after A: the replay or the conflict of A's run when A
// committed, and, when A rolled back, the run created under its own id.
func TestCreateRunTxConcurrent(t *testing.T) {
	cases := []struct {
		name       string
		second     spec.CreateRunRequest
		secondInTx bool
		aRollsBack bool
		wantCode   spec.Code
		wantRun    string
		replay     bool
	}{
		{name: "A commits; B (in a transaction) replays", second: retried("o1", `{"sku":"a"}`), secondInTx: true, wantRun: "run-o1", replay: true},
		{name: "A commits; B (in a transaction) conflicts", second: retried("o1", `{"sku":"b"}`), secondInTx: true, wantCode: spec.CodeIdempotencyConflict},
		{name: "A rolls back; B (in a transaction) creates", second: retried("o1", `{"sku":"b"}`), secondInTx: true, aRollsBack: true, wantRun: "run-o1-b"},
		{name: "A commits; CreateRun replays", second: retried("o1", `{"sku":"a"}`), wantRun: "run-o1", replay: true},
		{name: "A rolls back; CreateRun creates", second: retried("o1", `{"sku":"a"}`), aRollsBack: true, wantRun: "run-o1-b"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newIntxEnv(t)
			ctx, cancel := hang.Context(e.ctx)
			defer cancel()
			a := e.begin("o1")
			if res, err := e.s.CreateRunTx(ctx, a, order("o1", `{"sku":"a"}`)); err != nil || res.Replayed {
				t.Fatalf("A's CreateRunTx: %+v, %v; want run-o1 created", res, err)
			}
			// B on a connection of its own, so that its backend can be
			// watched waiting.
			conn := pgtest.Conn(t, e.dsn, e.schema)
			pid := conn.PgConn().PID()
			type outcome struct {
				res    spec.CreateRunResult
				err    error
				endErr error
			}
			done := make(chan outcome, 1)
			go func() {
				var o outcome
				if !c.secondInTx {
					o.res, o.err = e.s.CreateRun(ctx, c.second)
					done <- o
					return
				}
				b, err := conn.Begin(ctx)
				if err != nil {
					done <- outcome{err: err}
					return
				}
				if _, err := b.Exec(ctx, `INSERT INTO app_orders (id) VALUES ('o1-b')`); err != nil {
					done <- outcome{err: err}
					return
				}
				o.res, o.err = e.s.CreateRunTx(ctx, b, c.second)
				o.endErr = b.Commit(ctx)
				done <- o
			}()
			// The second admission waits for A's admission lock.
			if c.secondInTx {
				awaitBackendLockWait(t, ctx, e, pid)
			} else {
				awaitStoreLockWait(t, ctx, e)
			}
			if c.aRollsBack {
				if err := a.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := a.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var o outcome
			select {
			case o = <-done:
			case <-ctx.Done():
				t.Fatal("the second admission never returned after A ended")
			}
			if spec.CodeOf(o.err) != c.wantCode || c.wantCode == "" && (o.res.Run.ID != c.wantRun || o.res.Replayed != c.replay) {
				t.Fatalf("second admission: %+v, %v; want code %q, run %s, replayed %v", o.res, o.err, c.wantCode, c.wantRun, c.replay)
			}
			if c.secondInTx {
				if c.wantCode != "" && !errors.Is(o.endErr, pgx.ErrTxCommitRollback) || c.wantCode == "" && o.endErr != nil {
					t.Fatalf("B's commit: %v (refused: %v)", o.endErr, c.wantCode != "")
				}
				if got, want := e.orderExists("o1-b"), c.wantCode == ""; got != want {
					t.Errorf("B's order row committed = %v, want %v", got, want)
				}
			}
			e.expectAdmitted("run-o1", !c.aRollsBack)
			e.expectAdmitted("run-o1-b", c.aRollsBack)
		})
	}
}

// retried is order(id, payload) proposing another run id, as a second
// caller would.
func retried(id, payload string) spec.CreateRunRequest {
	r := order(id, payload)
	r.RunID += "-b"
	return r
}

// awaitBackendLockWait waits until backend pid waits for a lock.
func awaitBackendLockWait(t *testing.T, ctx context.Context, e *intxEnv, pid uint32) {
	t.Helper()
	for {
		var waiting bool
		if err := e.s.Pool().QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting); err != nil {
			t.Fatalf("waiting for backend %d to wait for a lock: %v", pid, err)
		}
		if waiting {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitStoreLockWait waits until one of the store's calls waits for a lock.
func awaitStoreLockWait(t *testing.T, ctx context.Context, e *intxEnv) {
	t.Helper()
	for {
		n, err := e.s.LockWaits(ctx)
		if err != nil {
			t.Fatalf("waiting for the store's call to wait for a lock: %v", err)
		}
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCreateRunTxNotifiesOnCommit: the run_created notification of an
// admission inside a transaction is delivered when the transaction commits,
// never for one that rolled back.
func TestCreateRunTxNotifiesOnCommit(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	dsn, schema := pgtest.Schema(t)
	s := intxOpen(ctx, t, dsn, schema, false)
	got := intxListen(ctx, t, s, 16)
	for _, c := range []struct {
		id     string
		commit bool
	}{{"rolled-back", false}, {"committed", true}} {
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateRunTx(ctx, tx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: c.id, RunID: c.id, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if c.commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	expectNotes(t, got, spec.Notification{Kind: spec.NotifyRunCreated, Tenant: "acme", RunID: "committed"})
}

// TestCreateRunTxRaceUndoneToSavepoint: an admission inside a transaction
// that races a bulk admission of its key (whose first attempt takes no
// admission lock) undoes its attempt to its savepoint and decides again,
// keeping the application's write made before it: here it finds the bulk
// admission's run and replays it. Bulk admission B writes the key's record
// and is held before its commit; A, in the caller's transaction, reads no
// record, and its insert waits on B's record in the unique index; B
// commits, A's insert fails on it, A's second attempt reads it.
func TestCreateRunTxRaceUndoneToSavepoint(t *testing.T) {
	e := newIntxEnv(t)
	ctx, cancel := hang.Context(e.ctx)
	defer cancel()
	arrived, release := make(chan struct{}), make(chan struct{})
	b, err := postgres.Open(ctx, e.dsn, postgres.Options{Config: spec.DefaultConfig(), Clock: e.clk, Schema: e.schema, MaxConns: 2,
		Hook: func(_ context.Context, op spec.Op, p spec.HookPoint) error {
			if op == spec.OpCreateRuns && p == spec.BeforeCommit {
				close(arrived)
				<-release
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	bulkDone := make(chan error, 1)
	go func() {
		outs, err := b.CreateRuns(ctx, []spec.CreateRunRequest{order("o1", `{"sku":"a"}`)})
		if err == nil && (outs[0].Err != nil || outs[0].Result.Replayed) {
			err = fmt.Errorf("outcome %+v, want run-o1 created", outs[0])
		}
		bulkDone <- err
	}()
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the bulk admission never reached its commit")
	}
	conn := pgtest.Conn(t, e.dsn, e.schema)
	a, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback(e.ctx)
	if _, err := a.Exec(ctx, `INSERT INTO app_orders (id) VALUES ('o1')`); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res spec.CreateRunResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.s.CreateRunTx(ctx, a, retried("o1", `{"sku":"a"}`))
		done <- outcome{res, err}
	}()
	awaitBackendLockWait(t, ctx, e, conn.PgConn().PID())
	close(release)
	if err := <-bulkDone; err != nil {
		t.Fatalf("bulk admission: %v", err)
	}
	o := <-done
	if o.err != nil || !o.res.Replayed || o.res.Run.ID != "run-o1" {
		t.Fatalf("CreateRunTx racing the bulk admission: %+v, %v; want the replay of run-o1", o.res, o.err)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if !e.orderExists("o1") {
		t.Error("the order row written before the raced attempt did not commit")
	}
	if st := e.s.AdmissionStats(); st.Retried != 1 {
		t.Errorf("AdmissionStats().Retried = %d, want 1 (the raced attempt)", st.Retried)
	}
	e.expectAdmitted("run-o1", true)
	e.expectAdmitted("run-o1-b", false)
}
