package spec

import (
	"math"
)

// Size limits. Inputs past them are CodeInvalidArgument.
const (
	MaxTenantBytes   = 64
	MaxRunIDBytes    = 64
	MaxKeyBytes      = 255 // idempotency keys and effect keys
	MaxWorkerBytes   = 128
	MaxCodeBytes     = 64 // error codes and cancel reasons
	MaxStepBytes     = 64
	MaxPayloadBytes  = 64 << 10 // request payloads and results, before and after canonicalization
	MaxProviderBytes = 512
	MaxBatch         = 1000 // Claim, Reap, PurgeIdempotency and PurgeRuns limits
)

// ReapErrorCode is the run error code Reap records.
const ReapErrorCode = "lease_expired"

// DefaultCancelReason is the reason recorded when CancelRequest.Reason is empty.
const DefaultCancelReason = "cancelled"

// OperationPolicy is what the store knows about one operation name.
type OperationPolicy struct {
	// SchemaVersion is part of the fingerprint: bump it when the meaning of
	// the payload changes, so old keys cannot replay into new semantics.
	SchemaVersion      int   `json:"schema_version"`
	DefaultMaxAttempts int   `json:"default_max_attempts"`
	MaxMaxAttempts     int   `json:"max_max_attempts"`
	DefaultTimeoutMs   int64 `json:"default_timeout_ms"`
	MaxTimeoutMs       int64 `json:"max_timeout_ms"`
}

// Backoff computes the delay before a retried job is available again:
// min(CapMs, BaseMs * 2^(attempt-1)) plus a jitter in [0, JitterMs], and
// at least min(RetryAfterMs, RetryAfterCapMs).
type Backoff struct {
	BaseMs          int64 `json:"base_ms"`
	CapMs           int64 `json:"cap_ms"`
	JitterMs        int64 `json:"jitter_ms"`
	RetryAfterCapMs int64 `json:"retry_after_cap_ms"`
}

// Config is the policy a store (and the model) runs under. Stores and the
// model must be given the same Config to agree.
type Config struct {
	Operations map[string]OperationPolicy `json:"operations"`
	// Tenants, when non-empty, is the allowlist of tenant names.
	Tenants                []string `json:"tenants"`
	IdempotencyRetentionMs int64    `json:"idempotency_retention_ms"`
	// RunRetentionMs is how long a terminal run is kept after it finished
	// before PurgeRuns may delete it; 0 turns retention off (PurgeRuns
	// deletes nothing). Keep it at least IdempotencyRetentionMs: a run a
	// live idempotency record names is never deleted, so a shorter
	// retention only defers those runs to the record's expiry.
	RunRetentionMs int64   `json:"run_retention_ms"`
	MaxLeaseMs     int64   `json:"max_lease_ms"`
	MaxReplays     int     `json:"max_replays"`
	Backoff        Backoff `json:"backoff"`
}

// DefaultConfig is a small, valid configuration with one operation, "work".
func DefaultConfig() Config {
	return Config{
		Operations: map[string]OperationPolicy{
			"work": {SchemaVersion: 1, DefaultMaxAttempts: 3, MaxMaxAttempts: 25, DefaultTimeoutMs: 3_600_000, MaxTimeoutMs: 86_400_000},
		},
		IdempotencyRetentionMs: 24 * 3_600_000,
		MaxLeaseMs:             3_600_000,
		MaxReplays:             3,
		Backoff:                Backoff{BaseMs: 1000, CapMs: 60_000, JitterMs: 250, RetryAfterCapMs: 300_000},
	}
}

// Validate reports a configuration that cannot be run.
func (c Config) Validate() error {
	if len(c.Operations) == 0 {
		return Errorf(CodeInvalidArgument, "config: no operations configured")
	}
	for name, p := range c.Operations {
		if err := checkName("operation", name, MaxCodeBytes, isCodeByte); err != nil {
			return err
		}
		if p.SchemaVersion < 1 || p.DefaultMaxAttempts < 1 || p.MaxMaxAttempts < p.DefaultMaxAttempts ||
			p.DefaultTimeoutMs < 1 || p.MaxTimeoutMs < p.DefaultTimeoutMs {
			return Errorf(CodeInvalidArgument, "config: operation %q: need SchemaVersion >= 1, 1 <= DefaultMaxAttempts <= MaxMaxAttempts, 1 <= DefaultTimeoutMs <= MaxTimeoutMs", name)
		}
	}
	for _, t := range c.Tenants {
		if err := checkName("tenant", t, MaxTenantBytes, isTenantByte); err != nil {
			return err
		}
	}
	b := c.Backoff
	if c.IdempotencyRetentionMs < 1 || c.MaxLeaseMs < 1 || c.MaxReplays < 0 || c.RunRetentionMs < 0 ||
		b.BaseMs < 0 || b.CapMs < b.BaseMs || b.JitterMs < 0 || b.RetryAfterCapMs < 0 {
		return Errorf(CodeInvalidArgument, "config: idempotency retention and max lease must be >= 1 ms, RunRetentionMs >= 0 (0: off), MaxReplays >= 0, 0 <= BaseMs <= CapMs, JitterMs and RetryAfterCapMs >= 0")
	}
	if b.CapMs > math.MaxInt64-b.JitterMs {
		return Errorf(CodeInvalidArgument, "config: Backoff.CapMs + JitterMs overflows")
	}
	return nil
}

// Random is the injected random source for retry jitter. *rand.Rand from
// math/rand/v2 satisfies it. Int64N must return a value in [0, n) for n > 0.
type Random interface {
	Int64N(n int64) int64
}

// JitterBound is the n a store passes to Random.Int64N for one retry: the
// jitter is drawn from [0, JitterMs], so n = JitterMs + 1.
func (b Backoff) JitterBound() int64 { return b.JitterMs + 1 }

// Delay returns the backoff delay for the attempt (1-based) that just failed,
// given the caller's Retry-After and a jitter draw in [0, JitterBound()).
func (b Backoff) Delay(attempt int, retryAfterMs, jitter int64) (int64, error) {
	if attempt < 1 || retryAfterMs < 0 || jitter < 0 || jitter > b.JitterMs {
		return 0, Errorf(CodeInvalidArgument, "backoff: attempt %d, retry-after %d ms, jitter %d ms out of range", attempt, retryAfterMs, jitter)
	}
	delay := b.CapMs
	if attempt-1 < 62 && b.BaseMs <= b.CapMs>>uint(attempt-1) {
		delay = b.BaseMs << uint(attempt-1)
	}
	delay += jitter // Validate ensured CapMs + JitterMs fits
	if floor := min(retryAfterMs, b.RetryAfterCapMs); floor > delay {
		delay = floor
	}
	return delay, nil
}

// Deadline returns now + d, or CodeInvalidArgument naming what overflowed
// (or was negative): times and durations are non-negative milliseconds, and
// their sum must fit in an int64.
func Deadline(now, d int64, what string) (int64, error) {
	if now < 0 || d < 0 || now > math.MaxInt64-d {
		return 0, Errorf(CodeInvalidArgument, "%s: now %d + %d ms is not a valid time", what, now, d)
	}
	return now + d, nil
}
