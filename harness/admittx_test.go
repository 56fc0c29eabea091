package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/harness/validate"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/impl/storetest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/spec"
)

// Admission inside the application's transaction, judged with the
// application's own rows: each store's create_run_tx is carried by an
// application that writes its order row and admits the run in one
// transaction (postgres.Store.CreateRunTx in a pgx.Tx, sqlite.Store's
// CreateRunTx in its Tx), then commits or rolls back, and that commits even
// when the admission was refused (a careless application: the refusal must
// have made that impossible). On PostgreSQL the application's connection
// also dies now and then between the admission and its commit. The model
// judges the admissions; checkAppOrders holds the order rows to them.

// appOrders is the application's table: one order row per admission, keyed
// by the run id the admission proposed.
const appOrders = `CREATE TABLE app_orders (tenant TEXT NOT NULL, run_id TEXT NOT NULL, PRIMARY KEY (tenant, run_id))`

// appMode is how the application admits; anything but appInTx is broken.
type appMode int

const (
	// appInTx: the order row and the admission in one transaction.
	appInTx appMode = iota
	// appOrderOutside: the order row committed on its own first.
	appOrderOutside
	// appAdmitOutside: the admission on its own connection and
	// transaction (CreateRun), the order row in the application's.
	appAdmitOutside
)

func (m appMode) String() string {
	return [...]string{"order row and admission in one transaction", "order row committed outside the transaction",
		"admission committed on its own connection"}[m]
}

// appKills bounds the connections the PostgreSQL application kills per
// history (each an operation of unknown outcome, which the checker carries
// to the end of the history).
const appKills = 2

// pgApp is the PostgreSQL store with AdmitInTx carried by the application.
type pgApp struct {
	*postgres.Store
	hook  spec.Hook
	mode  appMode
	rnd   *rand.Rand
	kills *atomic.Int64
}

// AdmitInTx implements spec.TxAdmitter as the application does it.
func (s pgApp) AdmitInTx(ctx context.Context, req spec.CreateRunTxRequest) (spec.CreateRunResult, error) {
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnavailable, Message: "begin", Err: err}
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	order := func(exec func(context.Context, string, ...any) (any, error)) error {
		_, err := exec(ctx, `INSERT INTO app_orders (tenant, run_id) VALUES ($1, $2)`, req.Request.Tenant, req.Request.RunID)
		return err
	}
	inTx := func(ctx context.Context, q string, a ...any) (any, error) { return tx.Exec(ctx, q, a...) }
	onPool := func(ctx context.Context, q string, a ...any) (any, error) { return s.Pool().Exec(ctx, q, a...) }
	write := inTx
	if s.mode == appOrderOutside {
		write = onPool
	}
	if err := order(write); err != nil {
		return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnavailable, Message: "the application's order row", Err: err}
	}
	var res spec.CreateRunResult
	if s.mode == appAdmitOutside {
		res, err = s.CreateRun(ctx, req.Request)
	} else {
		res, err = s.CreateRunTx(ctx, tx, req.Request)
	}
	if err != nil {
		_ = tx.Commit(ctx) // careless: the refusal left the transaction aborted
		return spec.CreateRunResult{}, err
	}
	return res, s.end(ctx, req, tx)
}

// end runs the hook points around the end of the application's
// transaction, and kills its connection first now and then.
func (s pgApp) end(ctx context.Context, req spec.CreateRunTxRequest, tx pgx.Tx) error {
	if s.hook != nil {
		if err := s.hook(ctx, spec.OpCreateRunTx, spec.BeforeCommit); err != nil {
			return &spec.Error{Code: spec.CodeUnavailable, Message: "rolled back before commit", Err: err}
		}
	}
	killed := s.rnd.IntN(10) == 0 && s.kills.Add(1) <= appKills
	if killed {
		if _, err := s.Pool().Exec(ctx, `SELECT pg_terminate_backend($1)`, tx.Conn().PgConn().PID()); err != nil {
			return &spec.Error{Code: spec.CodeUnavailable, Message: "kill the application's connection", Err: err}
		}
	}
	if req.Rollback {
		_ = tx.Rollback(ctx) // a failed rollback leaves nothing written either
	} else if err := tx.Commit(ctx); err != nil {
		// The application cannot tell whether its commit applied.
		return &spec.Error{Code: spec.CodeUnknownOutcome, Message: fmt.Sprintf("the commit failed (connection killed: %v)", killed), Err: err}
	}
	if s.hook != nil {
		if err := s.hook(ctx, spec.OpCreateRunTx, spec.AfterCommit); err != nil {
			return &spec.Error{Code: spec.CodeUnknownOutcome, Message: "the commit's answer was lost", Err: err}
		}
	}
	return nil
}

// sqliteApp is the SQLite store with AdmitInTx carried by the application.
type sqliteApp struct {
	*sqlite.Store
	hook spec.Hook
	mode appMode
}

// AdmitInTx implements spec.TxAdmitter as the application does it.
func (s sqliteApp) AdmitInTx(ctx context.Context, req spec.CreateRunTxRequest) (spec.CreateRunResult, error) {
	insert := func(exec func(context.Context, string, ...any) (sql.Result, error)) error {
		_, err := exec(ctx, `INSERT INTO app_orders (tenant, run_id) VALUES (?, ?)`, req.Request.Tenant, req.Request.RunID)
		return err
	}
	if s.mode == appOrderOutside {
		if err := insert(s.DB().ExecContext); err != nil {
			return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnavailable, Message: "the application's order row", Err: err}
		}
	}
	tx, err := s.BeginTx(ctx)
	if err != nil {
		return spec.CreateRunResult{}, err
	}
	defer tx.Rollback()
	if s.mode != appOrderOutside {
		if err := insert(tx.ExecContext); err != nil {
			return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnavailable, Message: "the application's order row", Err: err}
		}
	}
	var res spec.CreateRunResult
	if s.mode == appAdmitOutside {
		// Its own transaction must wait for the application's: commit
		// that first (the order row without its run, for a moment).
		if err := tx.Commit(); err != nil {
			return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnavailable, Message: "commit", Err: err}
		}
		if res, err = s.CreateRun(ctx, req.Request); err != nil {
			return spec.CreateRunResult{}, err
		}
		if tx, err = s.BeginTx(ctx); err != nil {
			return spec.CreateRunResult{}, err
		}
	} else if res, err = s.CreateRunTx(ctx, tx, req.Request); err != nil {
		_ = tx.Commit() // careless: the refusal rolled the transaction back
		return spec.CreateRunResult{}, err
	}
	if s.hook != nil {
		if err := s.hook(ctx, spec.OpCreateRunTx, spec.BeforeCommit); err != nil {
			return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnavailable, Message: "rolled back before commit", Err: err}
		}
	}
	if req.Rollback {
		err = tx.Rollback()
	} else {
		err = tx.Commit()
	}
	if err != nil {
		return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnavailable, Message: "end of the transaction", Err: err}
	}
	if s.hook != nil {
		if err := s.hook(ctx, spec.OpCreateRunTx, spec.AfterCommit); err != nil {
			return spec.CreateRunResult{}, &spec.Error{Code: spec.CodeUnknownOutcome, Message: "the commit's answer was lost", Err: err}
		}
	}
	return res, nil
}

// appFactory is f, whose databases hold app_orders, with every store's
// AdmitInTx carried by the application in mode m; seed decides the
// PostgreSQL application's connection kills, which it counts in kills
// (past appKills, the tries).
func appFactory(f storetest.Factory, m appMode, seed uint64, kills *atomic.Int64) storetest.Factory {
	return func(t testing.TB, opts storetest.Options) storetest.Handle {
		h := f(t, opts)
		if err := h.Exec(context.Background(), appOrders); err != nil {
			t.Fatalf("create app_orders: %v", err)
		}
		var stores atomic.Uint64
		wrap := func(s spec.Store, o storetest.Options) spec.Store {
			switch s := s.(type) {
			case *postgres.Store:
				return pgApp{Store: s, hook: o.Hook, mode: m, rnd: rand.New(rand.NewPCG(seed, stores.Add(1))), kills: kills}
			case *sqlite.Store:
				return sqliteApp{Store: s, hook: o.Hook, mode: m}
			}
			t.Fatalf("no application for a %T", s)
			return nil
		}
		h.Store = wrap(h.Store, opts)
		openWith := h.OpenWith
		h.OpenWith = func(t testing.TB, o storetest.Options) spec.Store { return wrap(openWith(t, o), o) }
		h.Reopen = func(t testing.TB) spec.Store { return wrap(openWith(t, opts), opts) }
		return h
	}
}

// readAppOrders returns the committed order rows, as "tenant/run id".
func readAppOrders(t testing.TB, s spec.Store) map[string]bool {
	var rows interface {
		Next() bool
		Scan(...any) error
		Close()
	}
	switch s := s.(type) {
	case pgApp:
		r, err := s.Pool().Query(context.Background(), `SELECT tenant || '/' || run_id FROM app_orders`)
		if err != nil {
			t.Fatalf("read app_orders: %v", err)
		}
		rows = r
	case sqliteApp:
		r, err := s.DB().QueryContext(context.Background(), `SELECT tenant || '/' || run_id FROM app_orders`)
		if err != nil {
			t.Fatalf("read app_orders: %v", err)
		}
		rows = sqlRows{r}
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatalf("read app_orders: %v", err)
		}
		out[k] = true
	}
	return out
}

// sqlRows is *sql.Rows with pgx.Rows' Close (no error).
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// TestLinearizableCreateRunTxSQLite and TestLinearizableCreateRunTxPostgres:
// concurrent histories whose admissions in transactions are the
// application's (an order row and the run, committed or rolled back, and on
// PostgreSQL a connection killed before the commit now and then), judged
// by the model, with the order rows held to the admissions
// (checkAppOrders). Each broken application — its order row committed
// outside the transaction, its admission committed on its own connection —
// is caught within brokenHistories histories.
func TestLinearizableCreateRunTxSQLite(t *testing.T) {
	testLinearizableCreateRunTx(t, sqlitetest.Factory, false)
}

func TestLinearizableCreateRunTxPostgres(t *testing.T) {
	pgtest.DSN(t)
	testLinearizableCreateRunTx(t, pgtest.Factory, true)
}

func testLinearizableCreateRunTx(t *testing.T, f storetest.Factory, kills bool) {
	const brokenHistories = 6
	timedOut := "linearizability: " + string(porcupine.Unknown)
	for _, m := range []appMode{appOrderOutside, appAdmitOutside} {
		for n := uint64(1); ; n++ {
			got, _ := recordCreateRunTx(t, f, m, 2+n)
			problems := slices.DeleteFunc(got, func(p string) bool { return p == timedOut })
			if len(problems) > 0 {
				t.Logf("the broken application (%s) is caught in history %d: %s", m, n, problems[0])
				break
			}
			if n == brokenHistories {
				t.Fatalf("the broken application (%s) went unnoticed in %d histories", m, n)
			}
		}
	}
	var killed int64
	for seed := uint64(1); seed <= 2; seed++ {
		problems, k := recordCreateRunTx(t, f, appInTx, seed)
		if len(problems) > 0 {
			t.Fatalf("seed %d: %v", seed, problems)
		}
		killed += k
	}
	if kills && killed == 0 {
		t.Fatal("vacuous: no application's connection was killed between its admission and its commit")
	}
}

// recordCreateRunTx records one history on appFactory(f, m, seed) and
// returns what the model, the accounting and checkAppOrders found, and how
// many connections the application killed.
func recordCreateRunTx(t *testing.T, f storetest.Factory, m appMode, seed uint64) ([]string, int64) {
	cfg := TestConfig()
	cfg.RunRetentionMs = 0 // every run stays, to be held to its order row
	w := Workload{Config: cfg, Seed: seed, Tenants: []string{"t1", "t2"}, Workers: 3, APIs: 2, Ops: 1500,
		MaxUnknown: 1, Aborts: 0.02}
	var orders func() map[string]bool
	kills := new(atomic.Int64)
	w.Factory = func(t testing.TB, o storetest.Options) storetest.Handle {
		h := appFactory(f, m, seed, kills)(t, o)
		orders = func() map[string]bool { return readAppOrders(t, h.Store) }
		return h
	}
	scope := &scopedTB{TB: t}
	defer scope.close()
	h, err := w.Record(t.Context(), scope)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	rows := orders()
	v := validate.Judge(model.Model{Config: w.Config}, h, validate.Judgement{Partition: true, Timeout: hang.PhasePatience(), Drained: true})
	problems := append(v.Accounting, checkAppOrders(h, rows)...)
	if v.Linearizable != porcupine.Ok {
		problems = append(problems, "linearizability: "+string(v.Linearizable))
	}
	c, killed := txAdmissions(h), min(kills.Load(), appKills)
	refused := h.Count(func(e history.Entry) bool {
		_, inTx := e.Op.Req.(spec.CreateRunTxRequest)
		return inTx && slices.Contains([]spec.Code{spec.CodeIdempotencyConflict, spec.CodeAlreadyExists, spec.CodeInvalidArgument}, e.Code())
	})
	t.Logf("seed %d (%s): %d operations, %s; %s; %d refused and committed anyway; %d connections killed before the commit; %d order rows; %d problems",
		seed, m, len(h.Entries), v.Linearizable, c, refused, killed, len(rows), len(problems))
	if m == appInTx && (c.committed == 0 || c.rolledBack == 0 || refused == 0) {
		problems = append(problems, fmt.Sprintf("vacuous: %s, %d refused", c, refused))
	}
	return problems, killed
}

// checkAppOrders holds the order rows to the admissions in transactions:
// an acknowledged committed admission left its row; a refused, rolled-back
// or failed one left none; every row belongs to an admission whose
// transaction committed (or may have); and a run an admission in a
// transaction created (its proposed id in a final scan) has its row: the
// order and its run commit together or not at all.
func checkAppOrders(h *history.History, rows map[string]bool) []string {
	var problems []string
	committedOrMaybe := map[string]bool{}
	for _, e := range h.Entries {
		tx, inTx := e.Op.Req.(spec.CreateRunTxRequest)
		if !inTx {
			continue
		}
		k := tx.Request.Tenant + "/" + tx.Request.RunID
		switch {
		case e.Out.Unknown:
			committedOrMaybe[k] = !tx.Rollback
		case e.Out.Result.Err == nil && !tx.Rollback:
			committedOrMaybe[k] = true
			if !rows[k] {
				problems = append(problems, fmt.Sprintf("admission %s committed and acknowledged, but its order row is missing", k))
			}
		case rows[k]:
			problems = append(problems, fmt.Sprintf("admission %s was %s, but its order row committed", k, outcomeOf(e, tx)))
		}
	}
	for k := range rows {
		if !committedOrMaybe[k] {
			problems = append(problems, fmt.Sprintf("order row %s belongs to no admission whose transaction committed", k))
		}
	}
	for _, s := range h.FinalScans() {
		for _, r := range s.Runs {
			k := r.Tenant + "/" + r.ID
			if _, inTx := committedOrMaybe[k]; (inTx || proposedInTx(h, k)) && !rows[k] {
				problems = append(problems, fmt.Sprintf("run %s, admitted in a transaction, committed without its order row", k))
			}
		}
	}
	return problems
}

// proposedInTx reports whether an admission in a transaction proposed run
// id k ("tenant/run id").
func proposedInTx(h *history.History, k string) bool {
	tenant, id, _ := strings.Cut(k, "/")
	for _, e := range h.Entries {
		if tx, inTx := e.Op.Req.(spec.CreateRunTxRequest); inTx && tx.Request.Tenant == tenant && tx.Request.RunID == id {
			return true
		}
	}
	return false
}

// outcomeOf names how an admission in a transaction ended.
func outcomeOf(e history.Entry, tx spec.CreateRunTxRequest) string {
	var se *spec.Error
	switch {
	case e.Out.Result.Err != nil && errors.As(error(e.Out.Result.Err), &se):
		return "refused " + string(se.Code)
	case tx.Rollback:
		return "rolled back"
	}
	return "acknowledged"
}
