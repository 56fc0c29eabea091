package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/spec"
)

// ExplainClaim runs EXPLAIN (ANALYZE, BUFFERS) of the claim statement the
// store runs for req, with the generic plan Claim runs it with, at the
// database clock's current time (or the injected clock's), and returns the
// plan as text. It is a diagnostic for benchmarks and operators (`leasehold
// bench` prints it at depth): ANALYZE executes the claim, so it runs inside
// a transaction that is always rolled back and changes nothing.
func (s *Store) ExplainClaim(ctx context.Context, req spec.ClaimRequest) (string, error) {
	return s.explainClaim(ctx, req, "EXPLAIN (ANALYZE, BUFFERS) ")
}

// PlanClaim is ExplainClaim without ANALYZE: the plan PostgreSQL runs the
// claim statement with, without executing it, so it takes no row lock and
// writes nothing (`leasehold doctor` on a live database).
func (s *Store) PlanClaim(ctx context.Context, req spec.ClaimRequest) (string, error) {
	return s.explainClaim(ctx, req, "EXPLAIN ")
}

// explainStatement names the claim statement explainClaim prepares. EXPLAIN
// of a statement with parameters would plan it for their values; EXPLAIN
// EXECUTE of a prepared one under genericPlans shows the cached plan.
const explainStatement = "leasehold_explain_claim"

func (s *Store) explainClaim(ctx context.Context, req spec.ClaimRequest, explain string) (string, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return "", typed(ctx, err)
	}
	defer c.Release()
	var plan []string
	prepared := false
	err = func() error {
		tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if err != nil {
			return err
		}
		defer rollback(tx)
		t := &txn{Tx: tx, ctx: ctx, s: s}
		now, err := t.clock()
		if err != nil {
			return err
		}
		if _, err := s.cfg.CheckClaim(req, now); err != nil {
			return err
		}
		sql, values, err := claimArgs(req, &now).RewriteQuery(ctx, nil, claimJobs, nil)
		if err != nil {
			return err
		}
		for _, q := range []string{genericPlans, "PREPARE " + explainStatement + " AS " + sql} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		prepared = true
		marks := make([]string, len(values))
		for i := range values {
			marks[i] = fmt.Sprintf("$%d", i+1)
		}
		// The simple protocol sends the values as literals: EXECUTE's
		// arguments cannot be parameters.
		rows, err := tx.Query(ctx, explain+"EXECUTE "+explainStatement+"("+strings.Join(marks, ", ")+")",
			append([]any{pgx.QueryExecModeSimpleProtocol}, values...)...)
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}()
	// A prepared statement outlives the transaction's rollback. If it
	// cannot be dropped, neither can the connection be used again for this.
	if prepared {
		if _, derr := c.Exec(context.WithoutCancel(ctx), "DEALLOCATE "+explainStatement); derr != nil {
			c.Conn().Close(context.WithoutCancel(ctx)) // the pool drops a closed connection
		}
	}
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
