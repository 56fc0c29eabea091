// Package worker is the runtime that runs jobs on any leasehold store
// (spec.Store): it claims jobs under expiring leases, runs a Handler for each
// outside any transaction, keeps the lease alive while the handler runs,
// classifies the handler's outcome, and publishes exactly one guarded write
// per attempt — or nothing, once the store has said that the attempt's
// generation is no longer current.
//
// # An attempt
//
//  1. Claim. The worker claims up to its free slots (Config.Concurrency,
//     Config.ClaimBatch) from each of its tenants in turn, each claim under
//     Config.ClaimTimeout. After a round that got all it asked for, the
//     next waits up to Config.ClaimGather for more slots to free, so that a
//     backlog is claimed in large batches rather than one slot at a time.
//     When a round finds less work than it had room for, the worker waits
//     Config.Idle plus a random jitter; on a store that is a spec.Notifier
//     (PostgreSQL's LISTEN/NOTIFY) a new run ends the wait early.
//  2. Run. The handler runs in its own goroutine with a context that only
//     the worker cancels. Every Config.RenewEvery (a third of the lease by
//     default) the worker renews the lease.
//  3. Fence. When the store refuses the lease — a renewal, an effect-ledger
//     write or a publication answered lost_lease, cancelled or
//     already_terminal, or a notification announced the cancel of this
//     generation — the handler's context is cancelled (context.Cause says
//     why) and nothing more is published for the generation: whatever the
//     handler returns is discarded. The store's lease guard makes this safe
//     even when the worker learns late; the fence only saves the work.
//  4. Publish. nil completes the run (Store.Complete, or batched), with
//     the messages the handler staged with Job.Outbox written in the same
//     transaction (the transactional outbox; package relay publishes them); a
//     Retryable error retries it (Store.Retry: the store's exponential
//     backoff, raised to the handler's Retry-After and, optionally, to a
//     decorrelated-jitter delay; failing instead once the retry deadline has
//     passed); a Terminal error fails it with a safe error code (Store.Fail);
//     an Ambiguous outcome is retried only when the effect ledger holds the
//     effect (the next attempt reconciles it before anything is called
//     again), and fails the run otherwise. A publication the store could not
//     run is sent again; one whose outcome is unknown is resolved by reading
//     the job back. The loser of a cancel-vs-complete race is told: its
//     Result is OutcomeCancelled and the log says the result was discarded.
//
// Every attempt ends in exactly one Result (Config.OnResult, Stats).
//
// # Outages
//
// A publication (complete, retry, fail, release) or an effect-ledger write
// that the store could not run (unavailable: nothing was written) is sent
// again after a capped exponential backoff with jitter (Config.StoreRetry),
// for as long as the lease allows: until less than Config.SafetyMargin of
// it is left by the worker's monotonic clock (see Effects). One whose
// outcome is unknown is resolved by reading back (the job, or the ledger
// row) before it is sent again or given up. A claim that failed is tried
// again after the same backoff, at most Idle. So an outage shorter than
// the lease delays the work and loses none of it; after a longer one the
// attempt is abandoned (OutcomeAbandoned) and its lease recovers by expiry.
// On PostgreSQL, postgres.Options.WaitForServer lets a process started
// during an outage wait for the database instead of exiting.
//
// # Housekeeping: who reaps and purges
//
// Two things never go away by themselves: a job whose lease expired with no
// attempts left (no claim will take it again: its run would stay running
// forever) and an expired idempotency record. The worker runtime is
// responsible for both: every Worker, unless Config.Maintenance.Off, calls
// Store.Reap for each of its tenants (the run fails with lease_expired) and
// Store.PurgeIdempotency, every Maintenance.Every plus a jitter, in bounded
// batches, so that any number of workers can do it at once (on PostgreSQL
// Reap skips rows another reaper holds). Stats.Reaped and Stats.Purged
// count what it did. A deployment that turns it off in every worker must
// call both itself, on every tenant.
//
// # Effects
//
// Delivery is at least once: after a crash, a lost lease or a retry the
// handler runs again. Job.Effect runs an external call through the store's
// effect ledger so that it is never blindly repeated: reserve, then call and
// record; or skip (already done); or ask the external system (Effect.Status)
// and reconcile first. Every Call and Status receives an EffectRequest: the
// effect's key, the same for every generation (the external system's
// idempotency key), and the attempt's generation, a fencing token that only
// rises.
//
// The ledger is in the database, and the database's lease guard can only
// refuse writes: it cannot undo a call that a stale generation already
// made. So the worker also fences itself. It measures its lease on its
// monotonic clock (Timers.Monotonic, which counts on while the process is
// stopped) from when it SENT the last claim or renewal that succeeded, and
// before every Effect.Call it checks that at least Config.SafetyMargin of
// the lease is left; if not, it makes no call, cancels the handler
// (ErrLeaseLost with ErrLeaseExpiring) and publishes nothing more for the
// generation. A process stopped between its reservation and its call, past
// its lease, while another generation took the run over, refuses when it
// wakes.
//
// What is still possible with an external system that neither
// deduplicates by key nor fences by generation: a delay between the check
// and the system's receipt of the call (a pause of the process, a slow
// network) longer than SafetyMargin can let the lease expire with the call
// still on its way; the next generation asks Status, is told nothing
// happened, calls, and then the first call arrives too: applied twice. The
// same follows if the store's clock runs faster than the worker's by more
// than the margin over a lease. Only the external system can close that
// gap: deduplicating by EffectRequest.Key (a repeat returns the original
// outcome) or refusing a generation lower than one it has seen for the key
// (a stale call is refused). examples/httpservice's provider does both.
//
// # Shutdown
//
// Run's context ending starts a graceful shutdown: claiming stops,
// Job.Stopping is closed, handlers get Config.ShutdownGrace to finish, then
// the handlers still running are cancelled and their leases released while
// still owned (Store.Release keeps the generation; it never goes back). A
// lease that cannot be released recovers by expiry, like the lease of a
// worker that crashed.
//
// # Batched and in-transaction completion
//
// With Config.Batch.Size > 1, completions are flushed in batches through
// spec.BatchCompleter (ADR-013, docs/adr/); an attempt's slot is freed only when its
// batch acknowledged the completion or the member's stale rejection. On
// PostgreSQL a handler may instead complete the run inside its own
// transaction, together with its own writes (postgres.Store.CompleteTx with
// Job.CompleteRequest, ADR-042), and return ErrCompletedInTx.
//
// # Time
//
// The worker waits only through Config.Timers (clock.Timers), so a test with
// a clock.Manual decides when each renewal, idle wait, store retry,
// housekeeping round, batch linger and grace period ends, without
// sleeping, and also what its monotonic clock reads (a Manual's is its
// Now). Lease expiry itself is always the store's decision, by the store's
// clock; the worker's own lease deadline only ever makes it do less.
package worker
