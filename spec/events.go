package spec

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Event payloads are small JSON objects with sorted keys; SPEC.md fixes them
// so that every store and the model write the same bytes.

// QueuedPayload is the run_queued payload: {} for an admitted run, and for a
// replay {"actor":…,"replay_depth":…,"replay_of":…} (the audit record).
func QueuedPayload(replayOf, actor string, depth int) string {
	if replayOf == "" {
		return "{}"
	}
	return object(map[string]any{"actor": actor, "replay_depth": depth, "replay_of": replayOf})
}

// CompletedPayload is the run_completed payload. It is written by hand,
// not through object, because every completion makes one (batched ones a
// thousand at a time); TestCompletedPayloadIsObject holds it to object's bytes.
func CompletedPayload(generation int64) string {
	return `{"generation":` + strconv.FormatInt(generation, 10) + `}`
}

// FailedPayload is the run_failed payload.
func FailedPayload(code string, generation int64) string {
	return object(map[string]any{"error_code": code, "generation": generation})
}

// CancelledPayload is the run_cancelled payload; generation is the job's
// generation when it was cancelled (0 if it was never claimed).
func CancelledPayload(reason string, generation int64) string {
	return object(map[string]any{"generation": generation, "reason": reason})
}

func object(m map[string]any) string {
	b, err := json.Marshal(m) // map keys are sorted; values are ASCII names and integers
	if err != nil {
		panic(fmt.Sprintf("spec: event payload: %v", err))
	}
	return string(b)
}

// LeaseError decides the error for a guarded write whose predicate did not
// match, from the job row as it is now. The guard is: same tenant and run,
// state leased, same owner, same generation, lease_expires_at > now. The
// order of the checks fixes which code wins:
//
//  1. a different generation: CodeLostLease (another attempt's job now,
//     whatever has happened since);
//  2. the caller's generation, job cancelled: CodeCancelled;
//  3. the caller's generation, job completed or dead: CodeAlreadyTerminal;
//  4. the caller's generation, but the job was requeued (released or
//     retried), is owned by someone else, or its lease expired
//     (expiry <= now): CodeLostLease.
//
// It returns nil when the guard holds.
func LeaseError(job Job, ref LeaseRef, now int64) *Error {
	lost := func(why string) *Error {
		return Errorf(CodeLostLease, "lease %s is not current: %s; stop publishing for this generation", ref, why)
	}
	switch {
	case job.Generation != ref.Generation:
		return lost(fmt.Sprintf("the job is at generation %d", job.Generation))
	case job.State.Terminal():
		return TerminalError(RunStateFor(job.State), job.RunID)
	case job.State != JobLeased:
		return lost("the job was requeued")
	case job.LeaseOwner != ref.Owner:
		return lost(fmt.Sprintf("the lease is owned by %q", job.LeaseOwner))
	case job.LeaseExpiresAt <= now:
		return lost(fmt.Sprintf("the lease expired at %d (now %d)", job.LeaseExpiresAt, now))
	}
	return nil
}
