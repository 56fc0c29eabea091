package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/spec"
)

// Admission inside the application's transaction (Store.BeginTx,
// Store.CreateRunTx): the application's order row and the run commit
// together or not at all.

type txEnv struct {
	t   *testing.T
	ctx context.Context
	s   *sqlite.Store
}

// newTxEnv opens a store on a fresh file beside an application table
// app_orders.
func newTxEnv(t *testing.T) *txEnv {
	t.Helper()
	ctx, cancel := hang.Context(context.Background())
	t.Cleanup(cancel)
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasehold.db"), sqlite.Options{Config: spec.DefaultConfig(), Clock: clock.NewManual(1_000_000)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE app_orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return &txEnv{t: t, ctx: ctx, s: s}
}

// order is the request admitted for order id: its key is the order's.
func order(id, payload string) spec.CreateRunRequest {
	return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "order-" + id, RunID: "run-" + id,
		Payload: []byte(payload), Outbox: []spec.Message{{Subject: "orders.created", Payload: []byte(`{"order":"` + id + `"}`)}}}
}

// begin starts a transaction that has written order row id.
func (e *txEnv) begin(id string) *sqlite.Tx {
	e.t.Helper()
	tx, err := e.s.BeginTx(e.ctx)
	if err != nil {
		e.t.Fatalf("BeginTx: %v", err)
	}
	e.t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.ExecContext(e.ctx, `INSERT INTO app_orders (id) VALUES (?)`, id); err != nil {
		e.t.Fatalf("the application's write: %v", err)
	}
	return tx
}

func (e *txEnv) orderExists(id string) bool {
	e.t.Helper()
	var n int
	if err := e.s.DB().QueryRowContext(e.ctx, `SELECT count(*) FROM app_orders WHERE id = ?`, id).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n == 1
}

func (e *txEnv) create(req spec.CreateRunRequest) {
	e.t.Helper()
	if res, err := e.s.CreateRun(e.ctx, req); err != nil || res.Replayed {
		e.t.Fatalf("CreateRun(%s): %+v, %v; want it created", req.RunID, res, err)
	}
}

// expectAdmitted fails unless run id's admission committed whole (want:
// run, job, idempotency record, one event, one outbox message) or left
// nothing (!want).
func (e *txEnv) expectAdmitted(id string, want bool) {
	e.t.Helper()
	snap, err := e.s.Snapshot(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var run, job, record bool
	var events, messages int
	for _, r := range snap.Runs {
		run = run || r.ID == id
	}
	for _, j := range snap.Jobs {
		job = job || j.RunID == id
	}
	for _, r := range snap.Idempotency {
		record = record || r.RunID == id
	}
	for _, ev := range snap.Events {
		if ev.RunID == id {
			events++
		}
	}
	for _, m := range snap.Outbox {
		if m.RunID == id {
			messages++
		}
	}
	if want && !(run && job && record && events == 1 && messages == 1) || !want && (run || job || record || events+messages > 0) {
		e.t.Errorf("run %s: run %v, job %v, idempotency record %v, %d events, %d outbox messages; want all of it (one event, one message) %v",
			id, run, job, record, events, messages, want)
	}
}

func TestCreateRunTx(t *testing.T) {
	cases := []struct {
		name      string
		prepare   func(e *txEnv)
		req       spec.CreateRunRequest
		rollback  bool
		wantCode  spec.Code
		wantRun   string
		replay    bool
		wantOrder bool
	}{
		{name: "new key: the order and the run commit together", req: order("o1", `{"sku":"a"}`), wantRun: "run-o1", wantOrder: true},
		{name: "caller rolls back after the admission: neither commits", rollback: true, req: order("o1", `{"sku":"a"}`), wantRun: "run-o1"},
		{name: "replay of a committed key: the original run, the transaction commits",
			prepare: func(e *txEnv) { e.create(order("o1", `{"sku":"a"}`)) },
			req:     func() spec.CreateRunRequest { r := order("o1", `{ "sku" : "a" }`); r.RunID = "run-o1-again"; return r }(),
			wantRun: "run-o1", replay: true, wantOrder: true},
		{name: "same key, another request: idempotency_conflict, neither commits",
			prepare:  func(e *txEnv) { e.create(order("o1", `{"sku":"a"}`)) },
			req:      func() spec.CreateRunRequest { r := order("o1", `{"sku":"b"}`); r.RunID = "run-o1-again"; return r }(),
			wantCode: spec.CodeIdempotencyConflict},
		{name: "run id taken under another key: already_exists, neither commits",
			prepare:  func(e *txEnv) { e.create(order("o1", `{"sku":"a"}`)) },
			req:      func() spec.CreateRunRequest { r := order("o2", `{"sku":"a"}`); r.RunID = "run-o1"; return r }(),
			wantCode: spec.CodeAlreadyExists},
		{name: "invalid payload: invalid_argument, neither commits", req: order("o1", `{"sku":"a","sku":"b"}`),
			wantCode: spec.CodeInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newTxEnv(t)
			if c.prepare != nil {
				c.prepare(e)
			}
			tx := e.begin("o1")
			res, err := e.s.CreateRunTx(e.ctx, tx, c.req)
			if spec.CodeOf(err) != c.wantCode {
				t.Fatalf("CreateRunTx: want code %q, got %v", c.wantCode, err)
			}
			if err == nil && (res.Run.ID != c.wantRun || res.Replayed != c.replay || res.Run.State != spec.RunQueued) {
				t.Errorf("CreateRunTx returned %+v, want run %s queued, replayed %v", res, c.wantRun, c.replay)
			}
			if c.wantCode != "" {
				// Every later use of the transaction is refused, and a
				// caller that commits anyway gets the refusal.
				if _, err := tx.ExecContext(e.ctx, `INSERT INTO app_orders (id) VALUES ('o9')`); !errors.Is(err, sqlite.ErrTxAborted) {
					t.Errorf("a statement after the refusal: %v, want sqlite.ErrTxAborted", err)
				}
				if err := tx.Commit(); !errors.Is(err, sqlite.ErrTxAborted) {
					t.Fatalf("commit after a refused CreateRunTx: %v, want sqlite.ErrTxAborted", err)
				}
			} else if c.rollback {
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
			} else if err := tx.Commit(); err != nil {
				t.Fatalf("commit: %v", err)
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
				res, err := e.s.CreateRun(e.ctx, c.req)
				if err != nil || res.Replayed || res.Run.ID != c.req.RunID {
					t.Errorf("CreateRun of the rolled-back key: %+v, %v; want run %s created", res, err, c.req.RunID)
				}
			}
		})
	}
}

// TestCreateRunTxTwiceInOneTransaction: a second admission of a key in the
// transaction that admitted it sees the first (a replay, or a conflict that
// rolls both back).
func TestCreateRunTxTwiceInOneTransaction(t *testing.T) {
	e := newTxEnv(t)
	tx := e.begin("o1")
	if _, err := e.s.CreateRunTx(e.ctx, tx, order("o1", `{"sku":"a"}`)); err != nil {
		t.Fatal(err)
	}
	again := order("o1", `{"sku":"a"}`)
	again.RunID = "run-o1-again"
	if res, err := e.s.CreateRunTx(e.ctx, tx, again); err != nil || !res.Replayed || res.Run.ID != "run-o1" {
		t.Fatalf("second admission in the transaction: %+v, %v; want the replay of run-o1", res, err)
	}
	again.Payload = []byte(`{"sku":"b"}`)
	if _, err := e.s.CreateRunTx(e.ctx, tx, again); spec.CodeOf(err) != spec.CodeIdempotencyConflict {
		t.Fatalf("third admission, another request: %v, want idempotency_conflict", err)
	}
	if err := tx.Commit(); !errors.Is(err, sqlite.ErrTxAborted) {
		t.Fatalf("commit: %v, want sqlite.ErrTxAborted", err)
	}
	if e.orderExists("o1") {
		t.Error("the order row committed")
	}
	e.expectAdmitted("run-o1", false)
}

// TestCreateRunTxConcurrent: a second admission of a key (CreateRunTx in
// another transaction, or CreateRun) waits for the transaction holding the
// database's write lock, and then gets exactly what CreateRun says after
// it: the replay or the conflict when it committed, the run created under
// its own id when it rolled back.
func TestCreateRunTxConcurrent(t *testing.T) {
	retried := func(payload string) spec.CreateRunRequest {
		r := order("o1", payload)
		r.RunID += "-b"
		return r
	}
	cases := []struct {
		name       string
		second     spec.CreateRunRequest
		secondInTx bool
		aRollsBack bool
		wantCode   spec.Code
		wantRun    string
		replay     bool
	}{
		{name: "A commits; B (in a transaction) replays", second: retried(`{"sku":"a"}`), secondInTx: true, wantRun: "run-o1", replay: true},
		{name: "A commits; B (in a transaction) conflicts", second: retried(`{"sku":"b"}`), secondInTx: true, wantCode: spec.CodeIdempotencyConflict},
		{name: "A rolls back; B (in a transaction) creates", second: retried(`{"sku":"b"}`), secondInTx: true, aRollsBack: true, wantRun: "run-o1-b"},
		{name: "A commits; CreateRun replays", second: retried(`{"sku":"a"}`), wantRun: "run-o1", replay: true},
		{name: "A rolls back; CreateRun creates", second: retried(`{"sku":"a"}`), aRollsBack: true, wantRun: "run-o1-b"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newTxEnv(t)
			a := e.begin("o1")
			if res, err := e.s.CreateRunTx(e.ctx, a, order("o1", `{"sku":"a"}`)); err != nil || res.Replayed {
				t.Fatalf("A's CreateRunTx: %+v, %v", res, err)
			}
			type outcome struct {
				res    spec.CreateRunResult
				err    error
				endErr error
			}
			done := make(chan outcome, 1)
			go func() {
				var o outcome
				if !c.secondInTx {
					o.res, o.err = e.s.CreateRun(e.ctx, c.second)
					done <- o
					return
				}
				b, err := e.s.BeginTx(e.ctx)
				if err != nil {
					done <- outcome{err: err}
					return
				}
				if _, err := b.ExecContext(e.ctx, `INSERT INTO app_orders (id) VALUES ('o1-b')`); err != nil {
					done <- outcome{err: err}
					return
				}
				o.res, o.err = e.s.CreateRunTx(e.ctx, b, c.second)
				o.endErr = b.Commit()
				done <- o
			}()
			awaitQueued(t, e)
			if c.aRollsBack {
				if err := a.Rollback(); err != nil {
					t.Fatal(err)
				}
			} else if err := a.Commit(); err != nil {
				t.Fatal(err)
			}
			o := hang.Wait(t, done, "the second admission, after A ended")
			if spec.CodeOf(o.err) != c.wantCode || c.wantCode == "" && (o.res.Run.ID != c.wantRun || o.res.Replayed != c.replay) {
				t.Fatalf("second admission: %+v, %v; want code %q, run %s, replayed %v", o.res, o.err, c.wantCode, c.wantRun, c.replay)
			}
			if c.secondInTx {
				if c.wantCode != "" && !errors.Is(o.endErr, sqlite.ErrTxAborted) || c.wantCode == "" && o.endErr != nil {
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

// awaitQueued waits until one of the store's writers is queued behind the
// transaction holding the write lock.
func awaitQueued(t *testing.T, e *txEnv) {
	t.Helper()
	hang.Until(t, "a writer queued behind the open transaction", func() bool {
		n, err := e.s.LockWaits(e.ctx)
		if err != nil {
			t.Fatalf("waiting for a writer to queue: %v", err)
		}
		return n > 0
	})
}

// TestTxEndsWithItsContext: a transaction whose context ends is rolled back
// and gives the write lock up, so the store's writers go on; it cannot
// commit.
func TestTxEndsWithItsContext(t *testing.T) {
	e := newTxEnv(t)
	ctx, cancel := context.WithCancel(e.ctx)
	tx, err := e.s.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CreateRunTx(ctx, tx, order("o1", `{"sku":"a"}`)); err != nil {
		t.Fatal(err)
	}
	cancel()
	e.create(order("o2", `{"sku":"a"}`)) // waits for the write lock: given up
	if err := tx.Commit(); !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("commit after the context ended: %v, want sql.ErrTxDone", err)
	}
	e.expectAdmitted("run-o1", false)
	e.expectAdmitted("run-o2", true)
}
