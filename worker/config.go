package worker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/spec"
)

// Config configures a Worker. Store, Tenants and Handler are required;
// every other field has a working default (applied by New).
type Config struct {
	// Store is where runs live. When it also implements
	// spec.BatchCompleter, batched completion uses it; when it implements
	// spec.Notifier (PostgreSQL), the worker listens for new runs and
	// cancels unless NoNotify is set.
	Store spec.Store
	// Tenants are the tenants whose jobs this worker claims, in turn.
	Tenants []string
	// Handler runs each claimed job.
	Handler Handler

	// ID is the lease owner name; it must be unique among live workers.
	// Default: host name, process id and a random suffix.
	ID string
	// Lease is the lease duration asked for at claim and at every renewal.
	// Default 30s.
	Lease time.Duration
	// RenewEvery is the renewal interval. Default Lease/3: two renewals can
	// fail before the lease runs out.
	RenewEvery time.Duration
	// SafetyMargin is the part of the lease the worker never counts on. It
	// measures its lease on its own monotonic clock (Timers.Monotonic) from
	// the moment it SENT the last claim or renewal that succeeded — the
	// store's expiry is at least that late — and once less than SafetyMargin
	// of it is left it starts no external call (Effect.Call): it fences
	// itself, and publishes nothing more for the generation. Publications
	// that the store cannot run are retried only until then. The margin
	// must cover how much faster the store's clock may run than the
	// worker's over one lease, and the time between the check and the
	// external system's receipt of the call. It must be shorter than
	// Lease - RenewEvery, so that renewals on time never leave too little.
	// Default Lease/5, or (Lease - RenewEvery)/2 when that is shorter.
	SafetyMargin time.Duration
	// Concurrency bounds the attempts this worker holds at once (its slots).
	// Default 1.
	Concurrency int
	// ClaimBatch bounds the jobs taken by one claim (ClaimRequest.Limit).
	// Default Concurrency (and never more than the free slots).
	ClaimBatch int
	// ClaimGather is how long a claim round may wait for more free slots
	// after a round that got every job it asked for (work is waiting): it
	// takes the first free slot, then the slots that free within
	// ClaimGather (counted in whole milliseconds, at least one), up to
	// ClaimBatch and Concurrency, and claims for all of them. Attempts that
	// ended together free their slots a moment apart, and one claim of many
	// jobs costs the store less than many claims of a few. After a round
	// that got fewer jobs than it asked for, a round claims for the slots
	// free at once. Default DefaultClaimGather; negative: never wait.
	ClaimGather time.Duration
	// ClaimTimeout bounds each claim; StoreTimeout bounds every other store
	// call (renewals, publications, release). Defaults 5s and 10s.
	ClaimTimeout time.Duration
	StoreTimeout time.Duration
	// Idle is how long the worker waits after a claim that found less work
	// than it had room for, plus a jitter drawn from [0, IdleJitter] so that
	// idle workers do not poll in lockstep. Defaults 1s and Idle/2. A NOTIFY
	// about a new run (PostgreSQL) ends the wait early.
	Idle       time.Duration
	IdleJitter time.Duration
	// NoNotify stops the worker from listening to a spec.Notifier store.
	NoNotify bool
	// StoreRetry shapes how a write the store could not run (unavailable),
	// or whose outcome was unknown and read back as not applied, is sent
	// again (see StoreRetry).
	StoreRetry StoreRetry
	// Maintenance shapes the worker's housekeeping: reaping expired leases
	// with no attempts left and purging expired idempotency records (see
	// MaintenancePolicy). On by default.
	Maintenance MaintenancePolicy

	// Retry shapes retryable failures (see RetryPolicy).
	Retry RetryPolicy
	// Batch shapes batched completion (see BatchPolicy); the zero value
	// completes each run on its own.
	Batch BatchPolicy
	// ShutdownGrace is how long running handlers may go on after shutdown
	// begins. Default 10s.
	ShutdownGrace time.Duration

	// Timers is the worker's time source for renewals, idle waits, batch
	// lingering, the grace period, store retries, housekeeping and retry
	// deadlines, and its monotonic clock for what is left of a lease
	// (SafetyMargin). Default the system clock; tests pass a *clock.Manual.
	Timers clock.Timers
	// Random draws idle, store-retry and housekeeping jitter and
	// decorrelated retry delays. Default a PCG
	// seeded from the time. The worker serializes its calls.
	Random spec.Random
	// Logger receives structured logs (run id, tenant, generation, attempt;
	// never payloads, results or idempotency keys). Default: discarded.
	Logger *slog.Logger
	// Meter receives the worker's OpenTelemetry metrics (default: the global
	// MeterProvider's meter "github.com/leasehold/leasehold/worker", which
	// records nothing until the application installs a provider; the worker
	// forces no exporter). Every instrument has the attribute worker.id:
	//   leasehold.worker.claimed            counter, jobs claimed (tenant)
	//   leasehold.worker.attempts           counter, attempts ended (tenant, outcome)
	//   leasehold.worker.lost_leases        counter, leases lost before publishing (tenant)
	//   leasehold.worker.in_flight          up-down counter, attempts holding a slot
	//   leasehold.worker.renewal.duration   histogram, seconds (result: ok, refused, deadline, error)
	//   leasehold.worker.store_retries      counter, writes sent again after the store could not run them
	//   leasehold.worker.completion.batches counter, batched completions flushed (members)
	//   leasehold.worker.housekeeping       counter, rows (kind: reaped, idempotency_purged, runs_purged)
	Meter metric.Meter
	// OnResult, when set, is called once per attempt when it ends (from the
	// attempt's goroutine; it must not block for long).
	OnResult func(Result)
}

// RetryPolicy shapes what the worker asks of Store.Retry. The store always
// applies its own Config.Backoff (min(cap, base*2^(attempt-1)) plus jitter)
// and raises it to the RetryAfterMs the worker passes, up to its
// RetryAfterCapMs; the worker passes the larger of the handler's Retry-After
// and, with Decorrelated, its own decorrelated-jitter delay.
type RetryPolicy struct {
	// Backoff should equal the store's Config.Backoff. The worker uses it to
	// estimate when the next attempt could start (for the deadlines below)
	// and as the base and cap of decorrelated jitter. Default
	// spec.DefaultConfig().Backoff.
	Backoff spec.Backoff
	// Decorrelated turns on decorrelated jitter: delay = min(cap, base +
	// rand[0, 3*previous - base]), where previous is the delay the store
	// actually applied before this attempt (read from the attempt history,
	// so it survives restarts). Configure the store's JitterMs as 0 to let
	// this jitter alone spread retries.
	Decorrelated bool
	// Deadline, when positive, is the total time from the run's creation
	// after which a retryable failure fails the run (with its code) instead
	// of retrying. Independently, a retry whose next attempt could not start
	// before the run's own deadline fails the run.
	Deadline time.Duration
}

// BatchPolicy shapes batched completion (ADR-013). With Size > 1 completed
// runs are flushed in batches of up to Size through spec.BatchCompleter (or
// one by one when the store lacks it). A batch takes whatever completions are
// waiting; with Linger > 0 it also waits up to Linger for more until it is
// full. An attempt's slot is released only when its batch acknowledged the
// completion or its stale rejection.
type BatchPolicy struct {
	Size   int
	Linger time.Duration
}

// StoreRetry is the backoff between tries of a store write that did not
// get through: before try n+1 the worker waits half of min(Cap, Base*2^(n-1))
// plus a jitter up to as much again, for as long as the lease allows (its
// deadline less Config.SafetyMargin, by the worker's monotonic clock), and
// then gives up: the lease recovers by expiry.
type StoreRetry struct {
	// Base is the first delay; Cap bounds every delay. Defaults 100ms and
	// 2s.
	Base, Cap time.Duration
}

// MaintenancePolicy shapes the worker's housekeeping. A job whose lease
// expired with no attempts left can never be claimed again, and an expired
// idempotency record is never needed again; neither goes away by itself.
// Every worker, unless Off, reaps the first (Store.Reap, per tenant of
// Config.Tenants: the run fails with lease_expired; its last attempt may
// have called an external system before its worker died, and its effect
// rows then say reserved or unknown) and purges the second
// (Store.PurgeIdempotency, every tenant's), once per round. Many workers may
// do it at once: each call is bounded by Batch, the stores take only what
// they can lock (Reap skips locked rows on PostgreSQL), and the rounds are
// jittered so that workers started together drift apart. The first round
// comes at a time drawn from [0, Every] after the worker starts (Random),
// so that a fleet restarted more often than Every (a crash loop, frequent
// deploys) still reaps, and one started at once does not reap at once.
type MaintenancePolicy struct {
	// Off turns housekeeping off in this worker. Some process must still do
	// it (call Store.Reap and Store.PurgeIdempotency), or such runs stay
	// running and the records accumulate.
	Off bool
	// Every is the time between rounds, plus a jitter drawn from [0,
	// Jitter]; the first round comes within [0, Every] of the start.
	// Defaults 30s and Every/2.
	Every, Jitter time.Duration
	// Batch is the Limit of each Reap, PurgeRuns and PurgeIdempotency call.
	// A round calls again while a call comes back full, up to MaxBatches
	// calls per tenant for Reap and PurgeRuns and MaxBatches for the
	// idempotency purge; the rest waits for the next round. Defaults 100
	// and 10.
	Batch, MaxBatches int
	// PurgeRuns makes each round also delete, per tenant, the finished runs
	// past the store's retention (Store.PurgeRuns; spec.Config's
	// RunRetentionMs, 0: retention off, nothing deleted) with every row of
	// theirs. Off by default: deleting history is the operator's choice.
	PurgeRuns bool
}

// Defaults.
const (
	DefaultLease            = 30 * time.Second
	DefaultClaimGather      = time.Millisecond
	DefaultClaimTimeout     = 5 * time.Second
	DefaultStoreTimeout     = 10 * time.Second
	DefaultIdle             = time.Second
	DefaultShutdownGrace    = 10 * time.Second
	DefaultStoreRetryBase   = 100 * time.Millisecond
	DefaultStoreRetryCap    = 2 * time.Second
	DefaultMaintenanceEvery = 30 * time.Second
	DefaultMaintenanceBatch = 100
	DefaultMaintenanceMax   = 10
)

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Store == nil {
		return c, errors.New("worker: Config.Store is required")
	}
	if c.Handler == nil {
		return c, errors.New("worker: Config.Handler is required")
	}
	if len(c.Tenants) == 0 {
		return c, errors.New("worker: Config.Tenants needs at least one tenant")
	}
	if c.ID == "" {
		c.ID = defaultID()
	}
	if err := spec.CheckWorker(c.ID); err != nil {
		return c, fmt.Errorf("worker: Config.ID: %w", err)
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Lease < time.Millisecond {
		return c, fmt.Errorf("worker: Config.Lease %v is under a millisecond", c.Lease)
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.Lease / 3
	}
	if c.RenewEvery <= 0 || c.RenewEvery >= c.Lease {
		return c, fmt.Errorf("worker: Config.RenewEvery %v must be positive and shorter than the lease %v", c.RenewEvery, c.Lease)
	}
	if c.SafetyMargin == 0 {
		c.SafetyMargin = min(c.Lease/5, (c.Lease-c.RenewEvery)/2)
	}
	if c.SafetyMargin <= 0 || c.SafetyMargin >= c.Lease-c.RenewEvery {
		return c, fmt.Errorf("worker: Config.SafetyMargin %v must be positive and shorter than Lease - RenewEvery (%v)", c.SafetyMargin, c.Lease-c.RenewEvery)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = c.Concurrency
	}
	if c.Concurrency < 1 || c.ClaimBatch < 1 || c.ClaimBatch > spec.MaxBatch {
		return c, fmt.Errorf("worker: Concurrency %d and ClaimBatch %d must be >= 1 (ClaimBatch <= %d)", c.Concurrency, c.ClaimBatch, spec.MaxBatch)
	}
	if c.ClaimGather == 0 {
		c.ClaimGather = DefaultClaimGather
	}
	if c.ClaimTimeout == 0 {
		c.ClaimTimeout = DefaultClaimTimeout
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.Idle == 0 {
		c.Idle = DefaultIdle
	}
	if c.IdleJitter == 0 {
		c.IdleJitter = c.Idle / 2
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.StoreRetry.Base == 0 {
		c.StoreRetry.Base = DefaultStoreRetryBase
	}
	if c.StoreRetry.Cap == 0 {
		c.StoreRetry.Cap = max(DefaultStoreRetryCap, c.StoreRetry.Base)
	}
	if c.StoreRetry.Base < 0 || c.StoreRetry.Cap < c.StoreRetry.Base {
		return c, fmt.Errorf("worker: StoreRetry needs 0 < Base <= Cap, got %v and %v", c.StoreRetry.Base, c.StoreRetry.Cap)
	}
	m := &c.Maintenance
	if m.Every == 0 {
		m.Every = DefaultMaintenanceEvery
	}
	if m.Jitter == 0 {
		m.Jitter = m.Every / 2
	}
	if m.Batch == 0 {
		m.Batch = DefaultMaintenanceBatch
	}
	if m.MaxBatches == 0 {
		m.MaxBatches = DefaultMaintenanceMax
	}
	if m.Batch < 1 || m.Batch > spec.MaxBatch || m.MaxBatches < 1 {
		return c, fmt.Errorf("worker: Maintenance.Batch %d must be in [1, %d] and MaxBatches %d >= 1", m.Batch, spec.MaxBatch, m.MaxBatches)
	}
	if c.ClaimTimeout < 0 || c.StoreTimeout < 0 || c.Idle < 0 || c.IdleJitter < 0 || c.ShutdownGrace < 0 || c.Batch.Linger < 0 || c.Retry.Deadline < 0 ||
		m.Every < 0 || m.Jitter < 0 {
		return c, errors.New("worker: durations must not be negative")
	}
	if c.Batch.Size > spec.MaxBatch {
		return c, fmt.Errorf("worker: Batch.Size %d is over %d", c.Batch.Size, spec.MaxBatch)
	}
	if c.Retry.Backoff == (spec.Backoff{}) {
		c.Retry.Backoff = spec.DefaultConfig().Backoff
	}
	if c.Timers == nil {
		c.Timers = clock.System{}
	}
	if c.Random == nil {
		c.Random = mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 0x776f726b6572))
	}
	c.Random = &lockedRandom{r: c.Random}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// defaultID is host-pid-random: unique among live workers, and readable in
// the attempt history.
func defaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	if spec.CheckWorker(id) != nil {
		id = fmt.Sprintf("worker-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	}
	return id
}

// lockedRandom serializes draws: attempts retry concurrently.
type lockedRandom struct {
	mu sync.Mutex
	r  spec.Random
}

func (l *lockedRandom) Int64N(n int64) int64 {
	if n <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Int64N(n)
}

// ms converts a duration to whole milliseconds, at least 1 for a positive d.
func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(d.Milliseconds(), 1)
}
