package worker

import "sync/atomic"

// Outcome is how one attempt (one claimed generation) ended for this worker.
type Outcome string

const (
	// OutcomeCompleted: the run completed under this generation (by the
	// worker, alone or in a batch, or by the handler's own transaction).
	OutcomeCompleted Outcome = "completed"
	// OutcomeRetried: the job was requeued after a retryable failure;
	// Result.RetryAt says when it is available again.
	OutcomeRetried Outcome = "retried"
	// OutcomeFailed: the run failed: a terminal error, a retry at the
	// exhausted budget, or a retry past the retry deadline.
	OutcomeFailed Outcome = "failed"
	// OutcomeReleased: shutdown gave the lease back (the job is queued, the
	// attempt refunded, the generation kept).
	OutcomeReleased Outcome = "released"
	// OutcomeLost: the store said lost_lease (to a renewal or to a write):
	// another generation owns the run; nothing more was published.
	OutcomeLost Outcome = "lost"
	// OutcomeCancelled: the run was cancelled while this generation held it;
	// if the handler had finished, its result lost the cancel-vs-complete
	// race and was discarded (Result.Err says which write lost).
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeAlreadyTerminal: the run had already ended some other way.
	OutcomeAlreadyTerminal Outcome = "already_terminal"
	// OutcomeAbandoned: the worker could not publish (the store stayed
	// unavailable, or an outcome stayed unknown) or could not release at
	// shutdown; the lease recovers by expiry and the run is attempted again.
	OutcomeAbandoned Outcome = "abandoned"
)

// Result reports the end of one attempt to Config.OnResult. It carries no
// payload, result or idempotency key.
type Result struct {
	Tenant     string
	RunID      string
	Operation  string
	Generation int64
	Attempt    int
	Outcome    Outcome
	// ErrorCode is the code recorded by a retry or failure, else "".
	ErrorCode string
	// RetryAt is when a retried job is available again (store time).
	RetryAt int64
	// Err explains every outcome but completed: the handler's error for
	// retried and failed, the store's refusal (a *spec.Error inside one of
	// ErrLeaseLost, ErrRunCancelled, ErrRunTerminal) for lost, cancelled and
	// already terminal, the store failure for abandoned.
	Err error
}

// Stats are the worker's counters since New. Every claimed attempt ends in
// exactly one outcome counter; InFlight are the attempts holding a slot now
// (running, or waiting for their publication to be acknowledged).
type Stats struct {
	Claimed         uint64
	Completed       uint64
	Retried         uint64
	Failed          uint64
	Released        uint64
	Lost            uint64
	Cancelled       uint64
	AlreadyTerminal uint64
	Abandoned       uint64
	// Batches and Batched count batched completion flushes and their members.
	Batches uint64
	Batched uint64
	// Reaped counts the runs this worker's housekeeping failed because their
	// lease expired with no attempts left; Purged the expired idempotency
	// records it deleted; PurgedRuns the finished runs past retention it
	// deleted (MaintenancePolicy.PurgeRuns).
	Reaped     uint64
	Purged     uint64
	PurgedRuns uint64
	InFlight   int
}

// counters is the atomic form of Stats.
type counters struct {
	claimed, completed, retried, failed, released, lost, cancelled, terminal, abandoned, batches, batched, reaped, purged, purgedRuns atomic.Uint64
	inFlight                                                                                                                          atomic.Int64
}

func (c *counters) count(o Outcome) {
	switch o {
	case OutcomeCompleted:
		c.completed.Add(1)
	case OutcomeRetried:
		c.retried.Add(1)
	case OutcomeFailed:
		c.failed.Add(1)
	case OutcomeReleased:
		c.released.Add(1)
	case OutcomeLost:
		c.lost.Add(1)
	case OutcomeCancelled:
		c.cancelled.Add(1)
	case OutcomeAlreadyTerminal:
		c.terminal.Add(1)
	case OutcomeAbandoned:
		c.abandoned.Add(1)
	}
}

func (c *counters) snapshot() Stats {
	return Stats{
		Claimed: c.claimed.Load(), Completed: c.completed.Load(), Retried: c.retried.Load(), Failed: c.failed.Load(),
		Released: c.released.Load(), Lost: c.lost.Load(), Cancelled: c.cancelled.Load(), AlreadyTerminal: c.terminal.Load(),
		Abandoned: c.abandoned.Load(), Batches: c.batches.Load(), Batched: c.batched.Load(), Reaped: c.reaped.Load(), Purged: c.purged.Load(), PurgedRuns: c.purgedRuns.Load(),
		InFlight: int(c.inFlight.Load()),
	}
}
