package worker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// PostgreSQL only: completion inside the handler's own transaction
// (ADR-042), and LISTEN/NOTIFY waking an idle worker.

var pgBackend = backend{"postgres", pgtest.Factory}

// TestCompleteTxInHandler: the handler writes its own row and completes the
// run in one transaction (postgres.Store.CompleteTx), then returns
// ErrCompletedInTx. When the lease went stale meanwhile, CompleteTx refuses
// it, the transaction rolls back, and neither the row nor the completion
// exists; the worker publishes nothing.
func TestCompleteTxInHandler(t *testing.T) {
	cases := []struct {
		name  string
		stale bool
		want  worker.Outcome
	}{
		{"current lease: the row and the completion commit together", false, worker.OutcomeCompleted},
		{"stale lease: both roll back", true, worker.OutcomeLost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, pgBackend, separateClocks)
			if err := e.h.Exec(e.ctx, `CREATE TABLE app_orders (run_id TEXT PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			e.create("r1")
			pg := e.storeFor(nil).(*postgres.Store)
			store, log := recorded(pg)
			started := make(chan struct{}, 1)
			proceed := make(chan struct{})
			e.start(e.config("w1", store, func(ctx context.Context, job *worker.Job) ([]byte, error) {
				started <- struct{}{}
				<-proceed
				tx, err := pg.Pool().Begin(ctx)
				if err != nil {
					return nil, err
				}
				defer tx.Rollback(ctx)
				if _, err := tx.Exec(ctx, `INSERT INTO app_orders (run_id) VALUES ($1)`, job.RunID); err != nil {
					return nil, err
				}
				if _, err := pg.CompleteTx(ctx, tx, job.CompleteRequest([]byte(`{"order":"saved"}`))); err != nil {
					return nil, err // rolled back by the deferred Rollback
				}
				if err := tx.Commit(ctx); err != nil {
					return nil, err
				}
				return nil, worker.ErrCompletedInTx
			}))
			recv(e, "the handler to start", started)
			if c.stale {
				e.sc.Advance(30_000)
				if ls, err := e.s.Claim(e.ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w2", LeaseMs: 30_000, Limit: 1}); err != nil || len(ls) != 1 {
					t.Fatalf("reclaim: %+v, %v", ls, err)
				}
			}
			close(proceed)
			r := e.result()
			if r.Outcome != c.want {
				t.Fatalf("result %+v (err %v), want %s", r, r.Err, c.want)
			}
			if n := log.count(publications...); n != 0 {
				t.Fatalf("%d publication calls by the worker, want none (the handler completed, or the lease was refused)", n)
			}
			var rows int
			if err := pg.Pool().QueryRow(e.ctx, `SELECT count(*) FROM app_orders`).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			run := e.run("r1")
			if c.stale {
				if rows != 0 || run.State != spec.RunRunning || !errors.Is(r.Err, worker.ErrLeaseLost) {
					t.Fatalf("after a stale CompleteTx: %d application rows, run %s, result error %v; want 0, running, ErrLeaseLost", rows, run.State, r.Err)
				}
				return
			}
			if rows != 1 || run.State != spec.RunCompleted || run.Result != `{"order":"saved"}` {
				t.Fatalf("after CompleteTx: %d application rows, run %+v; want 1 row and the run completed with the result", rows, run)
			}
			e.wantOneTerminal("r1", spec.EventRunCompleted, 1)
		})
	}
}

// TestNotifyWakesIdleWorker: a worker waiting idle claims a new run as soon
// as its creation is announced, without its idle timer firing.
func TestNotifyWakesIdleWorker(t *testing.T) {
	e := newEnv(t, pgBackend)
	started := make(chan string, 1)
	cfg := e.config("w1", e.storeFor(nil), func(_ context.Context, job *worker.Job) ([]byte, error) {
		started <- job.RunID
		return nil, nil
	})
	cfg.NoNotify = false
	e.start(cfg)
	e.due(t0+1_000, "the idle wait")
	e.create("r1")
	// No clock moves: only the notification (or the listener's resync,
	// if it connected after the create) can end the idle wait.
	if id := recv(e, "the handler to start", started); id != "r1" {
		t.Fatalf("handler started for %s, want r1", id)
	}
	if r := e.result(); r.Outcome != worker.OutcomeCompleted {
		t.Fatalf("result %+v, want completed", r)
	}
	if now := e.wc.Now(); now != t0 {
		t.Fatalf("the worker clock moved to %d; the test never moves it", now)
	}
}
