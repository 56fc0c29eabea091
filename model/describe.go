package model

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// String renders the operation on one line for traces and linearizability
// reports (porcupine's DescribeOperation). Idempotency keys are shown as
// given: the model only ever sees test keys, never production ones.
func (o Op) String() string {
	lease := func(l spec.LeaseRef) string {
		return fmt.Sprintf("%s/%s gen %d by %s", l.Tenant, l.RunID, l.Generation, l.Owner)
	}
	switch r := o.Req.(type) {
	case spec.CreateRunRequest:
		s := fmt.Sprintf("create_run %s/%s key %s payload %s", r.Tenant, r.RunID, r.IdempotencyKey, r.Payload)
		if r.MaxAttempts != 0 || r.TimeoutMs != 0 {
			s += fmt.Sprintf(" max %d timeout %d", r.MaxAttempts, r.TimeoutMs)
		}
		return s
	case spec.ClaimRequest:
		return fmt.Sprintf("claim %s by %s lease %d limit %d", r.Tenant, r.Worker, r.LeaseMs, r.Limit)
	case spec.RenewRequest:
		return fmt.Sprintf("renew %s for %d", lease(r.Lease), r.LeaseMs)
	case spec.CompleteRequest:
		return fmt.Sprintf("complete %s result %s", lease(r.Lease), r.Result)
	case spec.RetryRequest:
		return fmt.Sprintf("retry %s code %s retry-after %d jitter %d", lease(r.Lease), r.ErrorCode, r.RetryAfterMs, o.Jitter)
	case spec.FailRequest:
		return fmt.Sprintf("fail %s code %s", lease(r.Lease), r.ErrorCode)
	case spec.CancelRequest:
		return fmt.Sprintf("cancel %s/%s reason %q", r.Tenant, r.RunID, r.Reason)
	case spec.ReleaseRequest:
		return fmt.Sprintf("release %s", lease(r.Lease))
	case spec.ReapRequest:
		return fmt.Sprintf("reap %s limit %d", r.Tenant, r.Limit)
	case spec.PurgeRequest:
		return fmt.Sprintf("purge_idempotency limit %d", r.Limit)
	case spec.ReplayRequest:
		return fmt.Sprintf("replay %s/%s as %s by %s", r.Tenant, r.RunID, r.NewRunID, r.Actor)
	case spec.ReserveEffectRequest:
		return fmt.Sprintf("reserve_effect %s/%s %s", r.Step, r.Key, lease(r.Lease))
	case spec.RecordEffectRequest:
		return fmt.Sprintf("%s %s/%s = %s %q %s", o.Kind, r.Step, r.Key, r.State, r.ProviderRef, lease(r.Lease))
	}
	return fmt.Sprintf("%s %+v", o.Kind, o.Req)
}

// String renders the result on one line.
func (r Result) String() string {
	if r.Err != nil {
		if r.Err.State != "" {
			return fmt.Sprintf("error %s (%s)", r.Err.Code, r.Err.State)
		}
		return "error " + string(r.Err.Code)
	}
	run := func(u spec.Run) string {
		return fmt.Sprintf("run %s/%s %s v%d seq %d", u.Tenant, u.ID, u.State, u.Version, u.LastSeq)
	}
	job := func(j spec.Job) string {
		return fmt.Sprintf("job %s/%s %s gen %d attempts %d/%d available %d", j.Tenant, j.RunID, j.State, j.Generation, j.Attempts, j.MaxAttempts, j.AvailableAt)
	}
	lease := func(l spec.Lease) string {
		return fmt.Sprintf("%s/%s gen %d by %s until %d (attempt %d/%d)", l.Tenant, l.RunID, l.Generation, l.Owner, l.ExpiresAt, l.Attempt, l.MaxAttempts)
	}
	switch v := r.Value.(type) {
	case spec.CreateRunResult:
		if v.Replayed {
			return "replayed " + run(v.Run)
		}
		return "created " + run(v.Run)
	case spec.Run:
		return run(v)
	case spec.Job:
		return job(v)
	case spec.Lease:
		return "lease " + lease(v)
	case []spec.Lease:
		parts := make([]string, len(v))
		for i, l := range v {
			parts[i] = lease(l)
		}
		return "leases [" + strings.Join(parts, "; ") + "]"
	case []string:
		return "runs [" + strings.Join(v, " ") + "]"
	case int:
		return fmt.Sprintf("%d", v)
	case spec.EffectReservation:
		return fmt.Sprintf("%s: effect %s gen %d", v.Decision, v.Effect.State, v.Effect.Generation)
	case spec.Effect:
		return fmt.Sprintf("effect %s gen %d ref %q", v.State, v.Generation, v.ProviderRef)
	}
	return fmt.Sprintf("%+v", r.Value)
}
