package etcd

import (
	"context"

	"github.com/leasehold/leasehold/spec"
)

// CreateRuns implements spec.BatchCreator: one Txn, one clock reading per
// attempt, and for each member, in order, exactly CreateRun's checks and
// writes (admit) on the attempt's overlay, so that a member sees the
// members before it (a repeated key replays or conflicts, a repeated run id
// is already_exists). A refused member staged nothing and is reported in
// its outcome. Every key a member's decision read is compared at the
// commit, as for CreateRun: a concurrent change to any of them fails the
// Txn and the whole batch is tried again, up to Options.MaxConflicts
// times, then CodeUnavailable. A batch whose Txn is past the cluster's
// --max-txn-ops or --max-request-bytes is refused by etcd before it is
// proposed: CodeUnavailable, nothing written (see Limits in the package
// doc).
func (s *Store) CreateRuns(ctx context.Context, reqs []spec.CreateRunRequest) (outcomes []spec.CreateOutcome, err error) {
	if len(reqs) == 0 {
		return []spec.CreateOutcome{}, nil
	}
	if len(reqs) > spec.MaxBatch {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "a batch of %d admissions is over the limit of %d", len(reqs), spec.MaxBatch)
	}
	var locks []string
	for _, r := range reqs {
		locks = append(locks, admissionLocks(r)...)
	}
	err = s.write(ctx, spec.OpCreateRuns, locks, func(w *wtx, now int64) error {
		// A broken clock must not write, for any member.
		if err := spec.CheckNow(now); err != nil {
			return err
		}
		outcomes = make([]spec.CreateOutcome, len(reqs))
		norm := make([]spec.NormalizedCreate, len(reqs))
		keys := make([]string, 0, 2*len(reqs))
		for i, req := range reqs {
			n, err := s.cfg.NormalizeCreate(req, now)
			if err != nil {
				if _, ok := err.(*spec.Error); !ok {
					return err
				}
				outcomes[i].Err = err
				continue
			}
			norm[i] = n
			keys = append(keys, s.idemKey(n.Tenant, n.Operation, n.Key), s.runKey(n.Tenant, n.RunID))
		}
		// What the members decide on, in a few round trips at the attempt's
		// one revision rather than two per member.
		for len(keys) > 0 {
			k := min(len(keys), prefetchOps)
			if err := w.prefetch(keys[:k]...); err != nil {
				return err
			}
			keys = keys[k:]
		}
		for i := range reqs {
			if outcomes[i].Err != nil {
				continue
			}
			res, err := w.admit(norm[i], now, true)
			if err != nil {
				if _, ok := err.(*spec.Error); !ok {
					return err
				}
				outcomes[i].Err = err
				continue
			}
			outcomes[i].Result = res
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}

// prefetchOps is how many keys one prefetch reads: etcd's default
// --max-txn-ops, so that the reads of a batch never meet the limit
// themselves.
const prefetchOps = 128
