package spec

import (
	"testing"
	"unicode/utf8"
)

// FuzzCanonicalize: no input panics; an accepted input's canonical form is
// valid UTF-8, within the size limit, and a fixed point (canonicalizing it
// again changes nothing); a rejected input is always invalid_argument.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2.50,"x"]}`, `{"a":1,"a":2}`, "\"\xff\"", `1e400`, `[[[[]]]]`,
		`{"\u20ac":"\ud83d\ude02"}`, `-0`, `1E+2`, `"\u0000"`, `{"a":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonicalize(in)
		if err != nil {
			if CodeOf(err) != CodeInvalidArgument {
				t.Fatalf("Canonicalize(%q) error %v has code %s, want invalid_argument", in, err, CodeOf(err))
			}
			return
		}
		if !utf8.ValidString(out) || len(out) > MaxPayloadBytes {
			t.Fatalf("Canonicalize(%q) = %q: invalid UTF-8 or too large", in, out)
		}
		again, err := Canonicalize([]byte(out))
		if err != nil || again != out {
			t.Fatalf("canonical form is not a fixed point: %q -> %q (%v)", out, again, err)
		}
	})
}

// FuzzNormalizeCreate: argument validation never panics, returns only
// invalid_argument errors, and whatever it accepts satisfies the limits.
func FuzzNormalizeCreate(f *testing.F) {
	f.Add("acme", "work", "key-1", "run-1", []byte(`{}`), 0, int64(0), int64(0), int64(0), int64(0))
	f.Add("", "nope", "k", "r", []byte(`{"a":1,"a":1}`), -1, int64(-5), int64(-1), int64(-1), int64(-1))
	f.Add("t", "work", "k\x00", "run/1", []byte(`null`), 99, int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<62))
	f.Add("acme", "work", "key-1", "run-1", []byte(`{}`), 0, int64(0), int64(5000), int64(0), int64(1000))
	cfg := DefaultConfig()
	f.Fuzz(func(t *testing.T, tenant, op, key, runID string, payload []byte, maxAttempts int, timeoutMs, availableAt, delayMs, now int64) {
		n, err := cfg.NormalizeCreate(CreateRunRequest{Tenant: tenant, Operation: op, IdempotencyKey: key, RunID: runID,
			Payload: payload, MaxAttempts: maxAttempts, TimeoutMs: timeoutMs, AvailableAt: availableAt, DelayMs: delayMs}, now)
		if err != nil {
			if CodeOf(err) != CodeInvalidArgument {
				t.Fatalf("error %v has code %s, want invalid_argument", err, CodeOf(err))
			}
			return
		}
		policy := cfg.Operations[n.Operation]
		switch {
		case now < 0, len(n.Key) == 0, len(n.Key) > MaxKeyBytes, len(n.RunID) > MaxRunIDBytes, len(n.Tenant) > MaxTenantBytes:
			t.Fatalf("accepted an out-of-range input: %+v at %d", n, now)
		case n.MaxAttempts < 1 || n.MaxAttempts > policy.MaxMaxAttempts:
			t.Fatalf("accepted max attempts %d", n.MaxAttempts)
		case n.DeadlineAt != now+n.TimeoutMs || n.DeadlineAt < now:
			t.Fatalf("deadline %d for now %d + timeout %d", n.DeadlineAt, now, n.TimeoutMs)
		case n.ExpiresAt <= now:
			t.Fatalf("idempotency expiry %d not after now %d", n.ExpiresAt, now)
		case availableAt != 0 && delayMs != 0, availableAt < 0, delayMs < 0:
			t.Fatalf("accepted the schedule available_at %d, delay_ms %d", availableAt, delayMs)
		case n.AvailableAt != max(now+delayMs, availableAt) || n.AvailableAt < now || n.AvailableAt >= n.DeadlineAt:
			t.Fatalf("available at %d for now %d, available_at %d, delay_ms %d, deadline %d", n.AvailableAt, now, availableAt, delayMs, n.DeadlineAt)
		}
	})
}

// FuzzLeaseChecks: the guarded-write validators never panic and accept only
// well-formed lease references.
func FuzzLeaseChecks(f *testing.F) {
	f.Add("acme", "run-1", "w1", int64(1), int64(1000), int64(0), "boom")
	f.Add("ACME", "", "", int64(0), int64(-1), int64(-1), "Bad Code")
	cfg := DefaultConfig()
	f.Fuzz(func(t *testing.T, tenant, runID, owner string, gen, leaseMs, now int64, code string) {
		ref := LeaseRef{Tenant: tenant, RunID: runID, Owner: owner, Generation: gen}
		expires, err := cfg.CheckRenew(RenewRequest{Lease: ref, LeaseMs: leaseMs}, now)
		if err == nil && (gen < 1 || now < 0 || leaseMs < 1 || leaseMs > cfg.MaxLeaseMs || expires != now+leaseMs) {
			t.Fatalf("CheckRenew accepted %+v lease %d at %d (expiry %d)", ref, leaseMs, now, expires)
		}
		if err != nil && CodeOf(err) != CodeInvalidArgument {
			t.Fatalf("CheckRenew: %v", err)
		}
		if err := cfg.CheckRetry(RetryRequest{Lease: ref, ErrorCode: code}, now); err != nil && CodeOf(err) != CodeInvalidArgument {
			t.Fatalf("CheckRetry: %v", err)
		}
	})
}
