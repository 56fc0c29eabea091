package sqlite

import (
	"context"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// ExplainClaim returns SQLite's EXPLAIN QUERY PLAN of the statement a Claim
// for req runs to pick its candidates (claimCandidates), at the store's
// clock's current time, one plan step per line. It is a diagnostic for
// operators (`leasehold doctor`): the plan is not executed, so it writes
// nothing and takes no lock. An invalid req is invalid_argument, as for
// Claim.
func (s *Store) ExplainClaim(ctx context.Context, req spec.ClaimRequest) (string, error) {
	var plan []string
	err := s.read(ctx, func(tx *txn) error {
		now := s.clock.Now()
		expiresAt, err := s.cfg.CheckClaim(req, now)
		if err != nil {
			return err
		}
		a := args{"tenant": req.Tenant, "worker": req.Worker, "now": now, "expires_at": expiresAt, "limit": req.Limit}
		rows, err := tx.QueryContext(ctx, "EXPLAIN QUERY PLAN "+claimCandidates, a.list()...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				return err
			}
			plan = append(plan, detail)
		}
		return rows.Err()
	})
	return strings.Join(plan, "\n"), err
}
