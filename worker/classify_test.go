package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/spec"
)

func TestClassify(t *testing.T) {
	boom := errors.New("boom")
	lost := spec.Errorf(spec.CodeLostLease, "lease gone")
	cases := []struct {
		name       string
		err        error
		cause      error
		want       decisionKind
		wantCode   string
		wantAfter  time.Duration
		wantFenced error
	}{
		{name: "success", err: nil, want: decideComplete},
		{name: "plain error is retried", err: boom, want: decideRetry, wantCode: CodeHandlerError},
		{name: "retryable", err: Retryable(boom, 0), want: decideRetry, wantCode: CodeRetryable},
		{name: "retryable with code and Retry-After", err: Retryable(boom, 3*time.Second).WithCode("rate_limited"),
			want: decideRetry, wantCode: "rate_limited", wantAfter: 3 * time.Second},
		{name: "retryable with a bad code", err: Retryable(boom, 0).WithCode("Bad Code"), want: decideRetry, wantCode: CodeRetryable},
		{name: "negative Retry-After is none", err: Retryable(boom, -time.Second), want: decideRetry, wantCode: CodeRetryable},
		{name: "wrapped retryable", err: fmt.Errorf("calling the provider: %w", Retryable(boom, 0).WithCode("provider_5xx")),
			want: decideRetry, wantCode: "provider_5xx"},
		{name: "terminal", err: Terminal("invalid_input", boom), want: decideFail, wantCode: "invalid_input"},
		{name: "terminal with a bad code", err: Terminal("no spaces allowed", boom), want: decideFail, wantCode: CodeTerminal},
		{name: "outermost classification wins", err: Terminal("gave_up", Retryable(boom, 0)), want: decideFail, wantCode: "gave_up"},
		{name: "ambiguous held by the ledger is retried", err: &AmbiguousError{Err: boom, Step: "charge", Key: "k"},
			want: decideRetry, wantCode: CodeEffectUnknown},
		{name: "ambiguous unknown to the ledger fails", err: Ambiguous(boom), want: decideFail, wantCode: CodeAmbiguous},
		{name: "lease refusal inside the handler publishes nothing", err: fmt.Errorf("record: %w", lost),
			want: decideNothing, wantFenced: ErrLeaseLost},
		{name: "lease refusal wrapped as retryable still publishes nothing", err: Retryable(lost, 0),
			want: decideNothing, wantFenced: ErrLeaseLost},
		{name: "cancel refusal", err: spec.TerminalError(spec.RunCancelled, "r"), want: decideNothing, wantFenced: ErrRunCancelled},
		{name: "already terminal", err: spec.TerminalError(spec.RunCompleted, "r"), want: decideNothing, wantFenced: ErrRunTerminal},
		{name: "store unavailable inside the handler", err: spec.Errorf(spec.CodeUnavailable, "down"), want: decideRetry,
			wantCode: string(spec.CodeUnavailable)},
		{name: "store conflict inside the handler", err: spec.Errorf(spec.CodeEffectConflict, "x"), want: decideFail,
			wantCode: string(spec.CodeEffectConflict)},
		{name: "shutdown requested by the handler", err: fmt.Errorf("stopping: %w", ErrShutdown), want: decideRelease},
		{name: "completed in the handler's transaction", err: ErrCompletedInTx, want: decideCompleted},
		{name: "stopped at the run's deadline", err: context.Canceled, cause: fmt.Errorf("%w: x", ErrRunDeadline),
			want: decideFail, wantCode: CodeDeadlineExceeded},
		{name: "context error without a deadline cause is retried", err: context.Canceled, want: decideRetry, wantCode: CodeHandlerError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := classify(c.err, c.cause)
			if d.kind != c.want || d.code != c.wantCode || d.retryAfter != c.wantAfter {
				t.Fatalf("classify(%v) = %s code %q retry-after %v; want %s code %q retry-after %v",
					c.err, d.kind, d.code, d.retryAfter, c.want, c.wantCode, c.wantAfter)
			}
			if c.wantFenced != nil && !errors.Is(d.fence, c.wantFenced) {
				t.Fatalf("classify(%v): fence %v, want one wrapping %v", c.err, d.fence, c.wantFenced)
			}
		})
	}
}

// fixedRandom returns v reduced into [0, n) and records the bounds asked.
type fixedRandom struct {
	v      int64
	bounds []int64
}

func (r *fixedRandom) Int64N(n int64) int64 {
	r.bounds = append(r.bounds, n)
	return r.v % n
}

func TestDecorrelatedDelay(t *testing.T) {
	b := spec.Backoff{BaseMs: 100, CapMs: 10_000}
	cases := []struct {
		name      string
		b         spec.Backoff
		prev, r   int64
		want      int64
		wantBound int64
	}{
		{"first retry draws from [base, 3*base]", b, 0, 50, 150, 201},
		{"grows from the previous delay", b, 1000, 0, 100, 2901},
		{"the top of the range", b, 1000, 2900, 3000, 2901},
		{"capped", b, 9000, 26_900, 10_000, 26_901},
		{"previous above the cap is taken as the cap", b, 1 << 60, 0, 100, 29_901},
		{"zero base is taken as 1 ms", spec.Backoff{CapMs: 100}, 0, 2, 3, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &fixedRandom{v: c.r}
			got := decorrelatedDelay(c.b, c.prev, r)
			if got != c.want {
				t.Fatalf("decorrelatedDelay(%+v, prev %d, draw %d) = %d, want %d", c.b, c.prev, c.r, got, c.want)
			}
			if len(r.bounds) != 1 || r.bounds[0] != c.wantBound {
				t.Fatalf("random source asked for bounds %v, want [%d]", r.bounds, c.wantBound)
			}
		})
	}
}

func TestConfigDefaultsAndErrors(t *testing.T) {
	h := HandlerFunc(func(context.Context, *Job) ([]byte, error) { return nil, nil })
	var store spec.Store = struct{ spec.Store }{}
	ok := Config{Store: store, Tenants: []string{"acme"}, Handler: h}
	c, err := ok.withDefaults()
	if err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	if c.Lease != DefaultLease || c.RenewEvery != DefaultLease/3 || c.Concurrency != 1 || c.ClaimBatch != 1 ||
		c.Idle != DefaultIdle || c.IdleJitter != DefaultIdle/2 || c.ShutdownGrace != DefaultShutdownGrace || c.ID == "" ||
		c.SafetyMargin != DefaultLease/5 || c.StoreRetry != (StoreRetry{DefaultStoreRetryBase, DefaultStoreRetryCap}) ||
		c.Maintenance != (MaintenancePolicy{Every: DefaultMaintenanceEvery, Jitter: DefaultMaintenanceEvery / 2, Batch: DefaultMaintenanceBatch, MaxBatches: DefaultMaintenanceMax}) {
		t.Fatalf("defaults not applied: %+v", c)
	}
	// A renewal interval close to the lease leaves room for a smaller margin only.
	short := ok
	short.Lease, short.RenewEvery = time.Second, 900*time.Millisecond
	if c, err := short.withDefaults(); err != nil || c.SafetyMargin != 50*time.Millisecond {
		t.Fatalf("margin for a 1s lease renewed every 900ms: %v, %v; want 50ms", c.SafetyMargin, err)
	}
	bad := []struct {
		name string
		mod  func(*Config)
	}{
		{"no store", func(c *Config) { c.Store = nil }},
		{"no handler", func(c *Config) { c.Handler = nil }},
		{"no tenant", func(c *Config) { c.Tenants = nil }},
		{"bad worker id", func(c *Config) { c.ID = "has space" }},
		{"renewal not shorter than the lease", func(c *Config) { c.Lease, c.RenewEvery = time.Second, time.Second }},
		{"sub-millisecond lease", func(c *Config) { c.Lease = time.Microsecond }},
		{"negative grace", func(c *Config) { c.ShutdownGrace = -1 }},
		{"claim batch over the limit", func(c *Config) { c.ClaimBatch = spec.MaxBatch + 1 }},
		{"negative safety margin", func(c *Config) { c.SafetyMargin = -1 }},
		{"safety margin leaving nothing between renewals", func(c *Config) { c.Lease, c.RenewEvery, c.SafetyMargin = 3*time.Second, time.Second, 2*time.Second }},
		{"store retry cap under its base", func(c *Config) { c.StoreRetry = StoreRetry{Base: time.Second, Cap: time.Millisecond} }},
		{"housekeeping batch over the limit", func(c *Config) { c.Maintenance.Batch = spec.MaxBatch + 1 }},
		{"negative housekeeping interval", func(c *Config) { c.Maintenance.Every = -time.Second }},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			c := ok
			b.mod(&c)
			if _, err := c.withDefaults(); err == nil {
				t.Fatalf("config with %s accepted, want an error", b.name)
			}
		})
	}
}
