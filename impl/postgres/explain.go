package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/spec"
)

// ExplainClaim runs EXPLAIN (ANALYZE, BUFFERS) of the claim statement the
// store runs for req, at the database clock's current time (or the injected
// clock's), and returns the plan as text. It is a diagnostic for benchmarks
// and operators (`leasehold bench` prints it at depth): ANALYZE executes the
// claim, so it runs inside a transaction that is always rolled back and
// changes nothing.
func (s *Store) ExplainClaim(ctx context.Context, req spec.ClaimRequest) (string, error) {
	return s.explainClaim(ctx, req, "EXPLAIN (ANALYZE, BUFFERS) ")
}

// PlanClaim is ExplainClaim without ANALYZE: the plan PostgreSQL chooses
// for the claim statement with req's values, without executing it, so it
// takes no row lock and writes nothing (`leasehold doctor` on a live
// database).
func (s *Store) PlanClaim(ctx context.Context, req spec.ClaimRequest) (string, error) {
	return s.explainClaim(ctx, req, "EXPLAIN ")
}

func (s *Store) explainClaim(ctx context.Context, req spec.ClaimRequest, explain string) (string, error) {
	var plan []string
	err := func() error {
		tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if err != nil {
			return err
		}
		defer rollback(tx)
		t := &txn{Tx: tx, ctx: ctx, s: s}
		now, err := t.clock()
		if err != nil {
			return err
		}
		expiresAt, err := s.cfg.CheckClaim(req, now)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, explain+claimJobs,
			args{"tenant": req.Tenant, "worker": req.Worker, "now": now, "expires_at": expiresAt, "limit": req.Limit})
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}()
	if err != nil {
		return "", typed(ctx, err)
	}
	return strings.Join(plan, "\n"), nil
}

// DatabaseTime reads the database clock (clock_timestamp(), in integer
// milliseconds): the time the store decides expiry by when it was opened
// without Options.Clock. It is a diagnostic (`leasehold doctor` compares it
// with the host's clock); it writes nothing.
func (s *Store) DatabaseTime(ctx context.Context) (int64, error) {
	var now int64
	if err := s.pool.QueryRow(ctx, clockQuery).Scan(&now); err != nil {
		return 0, typed(ctx, err)
	}
	return now, nil
}
