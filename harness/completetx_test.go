package harness

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// txCompleting is the PostgreSQL store whose Complete is the path of a
// handler that completes its run inside its own transaction, together with
// its own write (postgres.Store.CompleteTx, ADR-042): the completion and a
// row of the application's table app_writes commit together or not at all.
// The model judges it as Complete; checkAppWrites holds the application's
// rows to the completions.
type txCompleting struct {
	*postgres.Store
	hook spec.Hook
	// outsideTx is the deliberately broken handler: its write does not
	// share the completion's transaction (it commits on its own first).
	outsideTx bool
}

// Complete implements spec.Store through CompleteTx in a transaction of the
// caller's, with the store's hook points around the caller's commit.
func (s txCompleting) Complete(ctx context.Context, req spec.CompleteRequest) (spec.Run, error) {
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		return spec.Run{}, &spec.Error{Code: spec.CodeUnavailable, Message: "begin", Err: err}
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if s.outsideTx {
		s.Pool().Exec(ctx, `INSERT INTO app_writes (tenant, run_id, generation) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
			req.Lease.Tenant, req.Lease.RunID, req.Lease.Generation)
	}
	run, err := s.CompleteTx(ctx, tx, req)
	if err != nil {
		return spec.Run{}, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO app_writes (tenant, run_id, generation) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		req.Lease.Tenant, req.Lease.RunID, req.Lease.Generation); err != nil {
		return spec.Run{}, &spec.Error{Code: spec.CodeUnavailable, Message: "the application's write", Err: err}
	}
	if s.hook != nil {
		if err := s.hook(ctx, spec.OpComplete, spec.BeforeCommit); err != nil {
			return spec.Run{}, &spec.Error{Code: spec.CodeUnavailable, Message: "rolled back before commit", Err: err}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return spec.Run{}, &spec.Error{Code: spec.CodeUnknownOutcome, Message: "the commit's answer was lost", Err: err}
	}
	if s.hook != nil {
		if err := s.hook(ctx, spec.OpComplete, spec.AfterCommit); err != nil {
			return spec.Run{}, &spec.Error{Code: spec.CodeUnknownOutcome, Message: "the commit's answer was lost", Err: err}
		}
	}
	return run, nil
}

// appWrites is the application's table that txCompleting writes.
const appWrites = `CREATE TABLE app_writes (tenant text, run_id text, generation bigint, PRIMARY KEY (tenant, run_id))`

// txFactoryOf is pgtest.Factory with every store's Complete carried by
// CompleteTx (txCompleting), on a schema that also holds app_writes; with
// the broken handler when outsideTx.
func txFactoryOf(outsideTx bool) storetest.Factory {
	return txWrapped(outsideTx, func(t testing.TB, opts storetest.Options) storetest.Handle {
		h := pgtest.Factory(t, opts)
		if err := h.Exec(context.Background(), appWrites); err != nil {
			t.Fatalf("create app_writes: %v", err)
		}
		return h
	})
}

// txWrapped is f, whose schemas hold app_writes, with every store's
// Complete carried by CompleteTx (txCompleting), the broken handler when
// outsideTx.
func txWrapped(outsideTx bool, f storetest.Factory) storetest.Factory {
	return func(t testing.TB, opts storetest.Options) storetest.Handle {
		h := f(t, opts)
		wrap := func(s spec.Store, o storetest.Options) spec.Store {
			return txCompleting{Store: s.(*postgres.Store), hook: o.Hook, outsideTx: outsideTx}
		}
		h.Store = wrap(h.Store, opts)
		openWith := h.OpenWith
		h.OpenWith = func(t testing.TB, o storetest.Options) spec.Store { return wrap(openWith(t, o), o) }
		h.Reopen = func(t testing.TB) spec.Store { return wrap(openWith(t, opts), opts) }
		return h
	}
}

// TestPropertyCompleteTxPostgres: the rapid property on the PostgreSQL
// store whose completions go through CompleteTx, each sequence's store on
// a schema of a pool (app_writes included), reset between sequences.
func TestPropertyCompleteTxPostgres(t *testing.T) {
	pgtest.DSN(t)
	pool := pgtest.NewSchemaPool(t, appWrites)
	RunProperty(t, "postgres-completetx", txWrapped(false, pool.Factory(postgres.Options{MaxConns: 4})))
	t.Logf("schema pool: %+v", pool.Stats())
}

// TestLinearizableCompleteTxPostgres: concurrent histories whose
// completions go through CompleteTx, judged by the model, and the
// application's rows held to the completions: a row for every acknowledged
// completion, and none for a run that did not complete at that generation.
// A handler whose write does not share the completion's transaction is
// caught within brokenHistories histories: it shows only where a
// completion fails after its handler wrote (an injected abort, a lease
// lost meanwhile), and whether one does is the schedule's, not the seed's
// alone (a CI run's first history had none). A check that ran out of time
// (porcupine.Unknown) caught nothing.
func TestLinearizableCompleteTxPostgres(t *testing.T) {
	const brokenHistories = 10
	pgtest.DSN(t)
	timedOut := "linearizability: " + string(porcupine.Unknown)
	for n := uint64(1); ; n++ {
		problems := slices.DeleteFunc(recordCompleteTx(t, 2+n, true), func(p string) bool { return p == timedOut })
		if len(problems) > 0 {
			t.Logf("the broken handler is caught in history %d: %s", n, problems[0])
			break
		}
		if n == brokenHistories {
			t.Fatalf("a handler writing outside the completion's transaction went unnoticed in %d histories", n)
		}
	}
	for seed := uint64(1); seed <= 2; seed++ {
		if problems := recordCompleteTx(t, seed, false); len(problems) > 0 {
			t.Fatalf("seed %d: %v", seed, problems)
		}
	}
}

// recordCompleteTx records one history on txFactoryOf(outsideTx) and
// returns what the model, the accounting and checkAppWrites found.
func recordCompleteTx(t *testing.T, seed uint64, outsideTx bool) []string {
	cfg := TestConfig()
	cfg.RunRetentionMs = 0 // every completed run stays, to be held to its application row
	w := Workload{Config: cfg, Seed: seed, Tenants: []string{"t1", "t2"}, Workers: 3, APIs: 2, Ops: 1500,
		MaxUnknown: 2, Aborts: 0.02}
	var appRows func() map[string]int64
	w.Factory = func(t testing.TB, o storetest.Options) storetest.Handle {
		h := txFactoryOf(outsideTx)(t, o)
		appRows = func() map[string]int64 { return readAppWrites(t, h) }
		return h
	}
	scope := &scopedTB{TB: t}
	defer scope.close()
	h, err := w.Record(t.Context(), scope)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	rows := appRows()
	v := validate.Judge(model.Model{Config: w.Config}, h, validate.Judgement{Partition: true, Timeout: hang.PhasePatience(), Drained: true})
	problems := append(v.Accounting, checkAppWrites(h, rows)...)
	if v.Linearizable != porcupine.Ok {
		problems = append(problems, "linearizability: "+string(v.Linearizable))
	}
	t.Logf("seed %d (handler writes outside the transaction: %v): %d operations, %s; %d application rows; %d problems",
		seed, outsideTx, len(h.Entries), v.Linearizable, len(rows), len(problems))
	return problems
}

func readAppWrites(t testing.TB, h storetest.Handle) map[string]int64 {
	s := h.Store.(txCompleting)
	rows, err := s.Pool().Query(context.Background(), `SELECT tenant || '/' || run_id, generation FROM app_writes`)
	if err != nil {
		t.Fatalf("read app_writes: %v", err)
	}
	out := map[string]int64{}
	for _, r := range must(pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Run string
		Gen int64
	}])) {
		out[r.Run] = r.Gen
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// checkAppWrites: every application row belongs to a run the final scan
// shows completed at that generation (or that a purge of runs may have
// deleted since), and every acknowledged Complete left its row.
func checkAppWrites(h *history.History, rows map[string]int64) []string {
	var problems []string
	purged := map[string]bool{}      // runs a purge of runs deleted
	maybePurged := map[string]bool{} // tenants with a purge of runs of unknown outcome
	for _, e := range h.Entries {
		req, isPurge := e.Op.Req.(spec.PurgeRunsRequest)
		switch {
		case !isPurge:
		case e.Out.Unknown:
			maybePurged[req.Tenant] = true
		case e.Out.Result.Err == nil:
			for _, id := range e.Out.Result.Value.([]string) {
				purged[req.Tenant+"/"+id] = true
			}
		}
	}
	completed := map[string]int64{}
	for _, s := range h.FinalScans() {
		for _, ev := range s.Events {
			if ev.Kind == spec.EventRunCompleted {
				completed[ev.Tenant+"/"+ev.RunID] = 0
			}
		}
		for _, j := range s.Jobs {
			if _, ok := completed[j.Tenant+"/"+j.RunID]; ok {
				completed[j.Tenant+"/"+j.RunID] = j.Generation
			}
		}
	}
	for run, gen := range rows {
		tenant, _, _ := strings.Cut(run, "/")
		if g, ok := completed[run]; !ok && (purged[run] || maybePurged[tenant]) {
			continue
		} else if !ok || g != gen {
			problems = append(problems, fmt.Sprintf("app row for %s at generation %d, but the run is not completed at it", run, gen))
		}
	}
	for _, e := range h.Entries {
		req, isComplete := e.Op.Req.(spec.CompleteRequest)
		if !isComplete || e.Out.Unknown || e.Out.Result.Err != nil {
			continue
		}
		if gen, ok := rows[req.Lease.Tenant+"/"+req.Lease.RunID]; !ok || gen != req.Lease.Generation {
			problems = append(problems, fmt.Sprintf("complete of %s at generation %d was acknowledged but left no app row", req.Lease.Tenant+"/"+req.Lease.RunID, req.Lease.Generation))
		}
	}
	return problems
}
