package sqlite

import (
	"context"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
)

var _ spec.RunLister = (*Store)(nil)

// ListRuns implements spec.RunLister: one read transaction, one statement
// (listRuns) reading the page and the run after it, if any.
func (s *Store) ListRuns(ctx context.Context, req spec.ListRunsRequest) (page spec.RunPage, err error) {
	l, err := s.cfg.CheckListRuns(req)
	if err != nil {
		return spec.RunPage{}, err
	}
	query, offset := listRuns, 0
	switch {
	case mutant.On(mutant.ListIgnoresTenant):
		query = mutantListIgnoresTenant
	case mutant.On(mutant.ListCursorSkipsTies):
		query = mutantListSkipsTies
	case mutant.On(mutant.ListByOffset):
		query, offset, l.Below = mutantListByOffset, mutant.OffsetOf(req.Cursor), mutant.OffsetBound(req)
	}
	err = s.read(ctx, func(tx *txn) error {
		runs, err := queryAll(ctx, tx, scanRun, query, args{"tenant": l.Tenant, "below_at": l.Below.CreatedAt,
			"below_id": l.Below.RunID, "from": l.From, "state": string(l.State), "operation": l.Operation,
			"limit": l.Limit + 1, "offset": offset}.list()...)
		page = l.Page(runs)
		if page.Next != "" && mutant.On(mutant.ListByOffset) {
			page.Next = mutant.OffsetCursor(offset + l.Limit)
		}
		return err
	})
	return page, err
}
