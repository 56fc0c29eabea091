package etcd

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/spec"
)

var _ spec.RunLister = (*Store)(nil)

// ListRuns implements spec.RunLister: range reads of the tenant's made
// index from just past the listing's bound, in key order (the listing's
// order: createdKey), and the runs they name, all at the revision of the
// first read. The runs are read a page and one at a time until that many
// matched, the index ends, or it reaches runs created before
// CreatedFrom.
func (s *Store) ListRuns(ctx context.Context, req spec.ListRunsRequest) (spec.RunPage, error) {
	l, err := s.cfg.CheckListRuns(req)
	if err != nil {
		return spec.RunPage{}, err
	}
	want := l.Limit + 1
	runs := make([]spec.Run, 0, want)
	err = s.read(ctx, func(w *wtx) error {
		from, to := s.createdKey(l.Tenant, l.Below.CreatedAt, l.Below.RunID)+"\x00", end(s.under(famCreated, l.Tenant))
		for len(runs) < want {
			kvs, err := w.scan(from, to, int64(want))
			if err != nil || len(kvs) == 0 {
				return err
			}
			keys := make([]string, len(kvs))
			for i, kv := range kvs {
				keys[i] = s.runKey(l.Tenant, string(kv.Value))
			}
			if err := w.prefetch(keys...); err != nil {
				return err
			}
			for _, k := range keys {
				var rec runRecord
				found, err := w.getJSON(k, &rec)
				if err != nil {
					return err
				}
				if !found {
					return fmt.Errorf("etcd: invariant violated: the listing index names run %q, which is not there", k)
				}
				if rec.CreatedAt < l.From {
					return nil // the rest were created earlier still
				}
				if l.Matches(rec.Run) && len(runs) < want {
					runs = append(runs, rec.Run)
				}
			}
			from = string(kvs[len(kvs)-1].Key) + "\x00"
		}
		return nil
	})
	if err != nil {
		return spec.RunPage{}, err
	}
	return l.Page(runs), nil
}
