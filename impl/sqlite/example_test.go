package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// Open a store on a database file, admit a request twice (the second is a
// replay of the first), claim its job and complete it.
func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "leasehold-example-")
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "jobs.db"), sqlite.Options{Config: spec.DefaultConfig()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	req := spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "order-42",
		RunID: "run-1", Payload: []byte(`{"sku":"A1","qty":2}`)}
	first, _ := store.CreateRun(ctx, req)
	req.RunID = "run-2" // a client retry proposes another id
	again, _ := store.CreateRun(ctx, req)
	fmt.Println(first.Run.ID, again.Run.ID, again.Replayed)

	leases, _ := store.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w1", LeaseMs: 30_000, Limit: 1})
	run, err := store.Complete(ctx, spec.CompleteRequest{Lease: leases[0].Ref(), Result: []byte(`{"ok":true}`)})
	fmt.Println(leases[0].Generation, run.State, run.Result, err)
	// Output:
	// run-1 run-1 true
	// 1 completed {"ok":true} <nil>
}
