package harness

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/harness/faults"
	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/spec"
)

// plain hides every optional interface of the store it wraps.
type plain struct{ spec.Store }

// TestRecordingStoreOffersWhatTheStoreDoes: the store a program gets
// implements BatchCompleter and BatchCreator exactly when the recorded store
// does, and a bulk admission through it is recorded as one create_runs.
func TestRecordingStoreOffersWhatTheStoreDoes(t *testing.T) {
	cfg := TestConfig()
	hidden := func(t testing.TB, o storetest.Options) storetest.Handle {
		h := sqlitetest.Factory(t, o)
		openWith := h.OpenWith
		h.Store, h.OpenWith = plain{h.Store}, func(t testing.TB, o storetest.Options) spec.Store { return plain{openWith(t, o)} }
		return h
	}
	for _, c := range []struct {
		name string
		f    storetest.Factory
		want bool
	}{{"sqlite", sqlitetest.Factory, true}, {"sqlite without capabilities", hidden, false}} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(1_000)
			h := c.f(t, storetest.Options{Config: cfg, Clock: clk, Random: &history.ScriptedRandom{}})
			rec := history.NewRecorder(history.NewProvider())
			s := faults.NewRecordingStore(t, h, cfg, clk, rec, "api", 1, 1, nil).Store()
			_, batches := s.(spec.BatchCompleter)
			bulk, isBulk := s.(spec.BatchCreator)
			if batches != c.want || isBulk != c.want {
				t.Fatalf("the program's store: BatchCompleter %v, BatchCreator %v; want both %v", batches, isBulk, c.want)
			}
			if !isBulk {
				return
			}
			r := spec.CreateRunRequest{Tenant: "t1", Operation: "work", IdempotencyKey: "k", RunID: "r1", Payload: []byte(`{}`)}
			outs, err := bulk.CreateRuns(context.Background(), []spec.CreateRunRequest{r, r})
			if err != nil || len(outs) != 2 || outs[0].Err != nil || !outs[1].Result.Replayed {
				t.Fatalf("CreateRuns through the recording store: %+v, %v; want created, then its replay", outs, err)
			}
			if h := rec.History(); len(h.Entries) != 1 || h.Entries[0].Op.Kind() != spec.OpCreateRuns {
				t.Fatalf("recorded %d entries (%+v), want one create_runs", len(h.Entries), h.Entries)
			}
		})
	}
}
