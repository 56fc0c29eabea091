package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// Run a worker on the SQLite store: it claims the admitted run, charges an
// external provider once through the effect ledger (the provider is given
// the effect's key, the same on every attempt, and the attempt's
// generation), and completes the run with the handler's result.
func ExampleWorker() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "leasehold-worker-example-")
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "jobs.db"), sqlite.Options{Config: spec.DefaultConfig()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	if _, err := store.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "order-42",
		RunID: "run-1", Payload: []byte(`{"sku":"A1","qty":2}`)}); err != nil {
		fmt.Println(err)
		return
	}

	results := make(chan worker.Result, 1)
	w, err := worker.New(worker.Config{
		Store:   store,
		Tenants: []string{"acme"},
		Lease:   30 * time.Second,
		Handler: worker.HandlerFunc(func(ctx context.Context, job *worker.Job) ([]byte, error) {
			ref, err := job.Effect(ctx, worker.Effect{Step: "charge", Key: "charge-" + job.RunID,
				Call: func(ctx context.Context, req worker.EffectRequest) (string, error) {
					fmt.Printf("charging with idempotency key %s, fencing token %d\n", req.Key, req.Generation)
					return "ch_1", nil
				},
				Status: func(ctx context.Context, req worker.EffectRequest) (worker.EffectStatus, error) {
					return worker.EffectStatus{}, fmt.Errorf("not reached: the charge is recorded")
				},
			})
			if err != nil {
				return nil, err
			}
			return []byte(fmt.Sprintf(`{"charge":%q}`, ref)), nil
		}),
		OnResult: func(r worker.Result) { results <- r },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	r := <-results
	stop() // graceful shutdown: Run returns once nothing is in flight
	if err := <-done; err != nil {
		fmt.Println(err)
	}

	run, _ := store.GetRun(ctx, "acme", "run-1")
	fmt.Println(r.RunID, r.Outcome, run.State, string(run.Result))
	// Output:
	// charging with idempotency key charge-run-1, fencing token 1
	// run-1 completed completed {"charge":"ch_1"}
}
