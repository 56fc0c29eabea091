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
//     Config.ClaimTimeout. When a round finds less work than it had room for,
//     the worker waits Config.Idle plus a random jitter; on a store that is
//     a spec.Notifier (PostgreSQL's LISTEN/NOTIFY) a new run ends the wait
//     early.
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
//  4. Publish. nil completes the run (Store.Complete, or batched); a
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
// # Effects
//
// Delivery is at least once: after a crash, a lost lease or a retry the
// handler runs again. Job.Effect runs an external call through the store's
// effect ledger so that it is never blindly repeated: reserve, then call and
// record; or skip (already done); or ask the external system (Effect.Status)
// and reconcile first.
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
// spec.BatchCompleter (ADR-013); an attempt's slot is freed only when its
// batch acknowledged the completion or the member's stale rejection. On
// PostgreSQL a handler may instead complete the run inside its own
// transaction, together with its own writes (postgres.Store.CompleteTx with
// Job.CompleteRequest, ADR-042), and return ErrCompletedInTx.
//
// # Time
//
// The worker waits only through Config.Timers (clock.Timers), so a test with
// a clock.Manual decides when each renewal, idle wait, batch linger and
// grace period ends, without sleeping. Lease expiry itself is always the
// store's decision, by the store's clock.
package worker
