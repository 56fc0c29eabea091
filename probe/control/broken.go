package control

import (
	"context"

	"github.com/leasehold/leasehold/spec"
)

// The broken variants' names.
const (
	VariantNoFencing            = "no-fencing"
	VariantCompleteOnClaim      = "complete-on-claim"
	VariantAckBeforeWrite       = "ack-before-write"
	VariantClaimLiveLeases      = "claim-live-leases"
	VariantNoReaper             = "no-reaper"
	VariantBudgetOffByOne       = "budget-off-by-one"
	VariantCancelReportsSuccess = "cancel-reports-success"
	VariantKeyIgnored           = "key-ignored"
	VariantCompleteOutsideTx    = "complete-outside-tx"
	VariantEnqueueOutsideTx     = "enqueue-outside-tx"
)

// BrokenVariant is a deliberately broken control adapter: a bug of the kind
// the probes look for in other queues, put into leasehold's own row.
type BrokenVariant struct {
	Name string
	// What the variant breaks.
	What string
}

// Variants is every broken variant.
var Variants = []BrokenVariant{
	{VariantNoFencing, "every lease-guarded write (renew, complete, retry, fail, release) matches the run and its state only, not the lease's owner and generation: River's completion"},
	{VariantCompleteOnClaim, "a claim completes its job at once (at-most-once delivery): a worker that dies mid-job loses the job"},
	{VariantAckBeforeWrite, "enqueue is acknowledged before its job is written (it is written at the next enqueue or at a clean exit)"},
	{VariantClaimLiveLeases, "a claim also takes jobs whose lease is still live"},
	{VariantNoReaper, "the worker's housekeeping is off: a job whose lease expired with no attempt left is never ended"},
	{VariantBudgetOffByOne, "a job gets one attempt more than it asked for"},
	{VariantCancelReportsSuccess, "a cancel that lost to a completion reports the job cancelled"},
	{VariantKeyIgnored, "enqueue ignores the key: the same key admits a second job"},
	{VariantCompleteOutsideTx, "complete_in_tx completes outside the caller's transaction: its rollback undoes nothing"},
	{VariantEnqueueOutsideTx, "an enqueue in the caller's transaction admits outside it: its rollback undoes nothing"},
}

// Variant returns the variant named name, or nil.
func Variant(name string) *BrokenVariant {
	for i := range Variants {
		if Variants[i].Name == name {
			return &Variants[i]
		}
	}
	return nil
}

// brokenStore is the store as a broken variant sees it. It hides the
// optional interfaces (batched completion, notifications), so a broken
// worker polls.
type brokenStore struct {
	spec.Store
	q *Queue
}

// current returns ref with the job's current owner and generation when the
// job is leased (no-fencing), else ref.
func (s *brokenStore) current(ctx context.Context, ref spec.LeaseRef) spec.LeaseRef {
	if !s.q.broken(VariantNoFencing) {
		return ref
	}
	job, err := s.Store.GetJob(ctx, ref.Tenant, ref.RunID)
	if err != nil || job.State != spec.JobLeased {
		return ref
	}
	ref.Owner, ref.Generation = job.LeaseOwner, job.Generation
	return ref
}

func (s *brokenStore) Claim(ctx context.Context, req spec.ClaimRequest) ([]spec.Lease, error) {
	if s.q.broken(VariantClaimLiveLeases) {
		if err := s.q.rewind(ctx, liteExpireAll, pgExpireAll, ""); err != nil {
			return nil, err
		}
	}
	leases, err := s.Store.Claim(ctx, req)
	if err == nil && s.q.broken(VariantCompleteOnClaim) {
		for _, l := range leases {
			if _, err := s.Store.Complete(ctx, spec.CompleteRequest{Lease: l.Ref()}); err != nil {
				return nil, err
			}
		}
	}
	return leases, err
}

func (s *brokenStore) Renew(ctx context.Context, req spec.RenewRequest) (spec.Lease, error) {
	req.Lease = s.current(ctx, req.Lease)
	return s.Store.Renew(ctx, req)
}

func (s *brokenStore) Complete(ctx context.Context, req spec.CompleteRequest) (spec.Run, error) {
	req.Lease = s.current(ctx, req.Lease)
	return s.Store.Complete(ctx, req)
}

func (s *brokenStore) Retry(ctx context.Context, req spec.RetryRequest) (spec.Job, error) {
	req.Lease = s.current(ctx, req.Lease)
	return s.Store.Retry(ctx, req)
}

func (s *brokenStore) Fail(ctx context.Context, req spec.FailRequest) (spec.Run, error) {
	req.Lease = s.current(ctx, req.Lease)
	return s.Store.Fail(ctx, req)
}

func (s *brokenStore) Release(ctx context.Context, req spec.ReleaseRequest) (spec.Job, error) {
	req.Lease = s.current(ctx, req.Lease)
	return s.Store.Release(ctx, req)
}
