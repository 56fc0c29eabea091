package postgres_test

import (
	"context"
	"fmt"
	"os"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/spec"
)

// Open a store on a PostgreSQL server: the first Open creates and migrates
// its schema. With no Clock the store reads the database's clock, so no
// worker's wall clock decides when a lease expires.
func ExampleOpen() {
	ctx := context.Background()
	store, err := postgres.Open(ctx, os.Getenv("LEASEHOLD_PG_DSN"), postgres.Options{
		Config: spec.DefaultConfig(),
		Schema: "jobs", // one schema per deployment; its tables are the store's
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	res, err := store.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work",
		IdempotencyKey: "order-42", RunID: "run-1", Payload: []byte(`{"sku":"A1"}`)})
	fmt.Println(res.Run.State, err)
}
