package spec

import (
	"math"
	"testing"
)

// TestSchedule: a created run's available time, every way of asking for one,
// and every way of asking wrongly.
func TestSchedule(t *testing.T) {
	cfg := DefaultConfig() // timeout 3,600,000 ms by default, at most 86,400,000
	const now = 1_000_000
	base := CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k", RunID: "r", Payload: []byte(`{}`)}
	for _, tc := range []struct {
		name         string
		at, delay    int64
		timeout, clk int64 // timeout_ms (0: default) and the clock (0: now)
		want         int64 // the job's available_at; -1 for invalid_argument
	}{
		{name: "not scheduled", want: now},
		{name: "an absolute time", at: now + 5000, want: now + 5000},
		{name: "a time in the past means now", at: 1, want: now},
		{name: "now itself", at: now, want: now},
		{name: "a delay", delay: 5000, want: now + 5000},
		{name: "both", at: now + 5000, delay: 5000, want: -1},
		{name: "a negative time", at: -1, want: -1},
		{name: "a negative delay", delay: -1, want: -1},
		{name: "a delay that overflows", delay: math.MaxInt64, want: -1},
		{name: "a delay that overflows near the end of time", delay: 10, timeout: 1, clk: math.MaxInt64 - 20, want: -1},
		{name: "available just before the deadline", delay: 3_599_999, want: now + 3_599_999},
		{name: "available at the deadline", delay: 3_600_000, want: -1},
		{name: "an absolute time at the deadline", at: now + 3_600_000, want: -1},
		{name: "a longer timeout allows a later time", at: now + 3_600_000, timeout: 3_600_001, want: now + 3_600_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := base
			req.AvailableAt, req.DelayMs, req.TimeoutMs = tc.at, tc.delay, tc.timeout
			clk := int64(now)
			if tc.clk != 0 {
				clk = tc.clk
			}
			n, err := cfg.NormalizeCreate(req, clk)
			if tc.want < 0 {
				if CodeOf(err) != CodeInvalidArgument {
					t.Fatalf("NormalizeCreate(available_at %d, delay_ms %d) = %+v, %v; want invalid_argument", tc.at, tc.delay, n, err)
				}
				return
			}
			if err != nil || n.AvailableAt != tc.want {
				t.Fatalf("NormalizeCreate(available_at %d, delay_ms %d): available %d, %v; want %d", tc.at, tc.delay, n.AvailableAt, err, tc.want)
			}
			unscheduled := req
			unscheduled.AvailableAt, unscheduled.DelayMs = 0, 0
			u, _ := cfg.NormalizeCreate(unscheduled, clk)
			if scheduled := tc.at != 0 || tc.delay != 0; scheduled == (n.Fingerprint == u.Fingerprint) {
				t.Errorf("scheduled %v, but the fingerprint %s vs unscheduled %s", scheduled, n.Fingerprint, u.Fingerprint)
			}
		})
	}
	// A delay is fingerprinted as given: the same request at another time is
	// the same request, though its job becomes available at another time.
	req := base
	req.DelayMs = 5000
	a, _ := cfg.NormalizeCreate(req, now)
	b, _ := cfg.NormalizeCreate(req, now+10)
	if a.Fingerprint != b.Fingerprint || b.AvailableAt != now+10+5000 {
		t.Errorf("a delay at two times: fingerprints %s, %s (want equal), available %d", a.Fingerprint, b.Fingerprint, b.AvailableAt)
	}
}

// TestRetention: RetiredBy and CheckPurgeRuns.
func TestRetention(t *testing.T) {
	cfg := DefaultConfig()
	if _, on := cfg.RetiredBy(1000); on {
		t.Fatalf("DefaultConfig has RunRetentionMs %d: retention must be off unless configured", cfg.RunRetentionMs)
	}
	cfg.RunRetentionMs = 100
	if by, on := cfg.RetiredBy(1000); !on || by != 900 {
		t.Fatalf("RetiredBy(1000) with retention 100 = %d, %v; want 900, true", by, on)
	}
	if by, _ := cfg.RetiredBy(50); by >= 0 {
		t.Fatalf("RetiredBy(50) = %d: before the retention has passed once, nothing may be retired", by)
	}
	for _, tc := range []struct {
		req PurgeRunsRequest
		now int64
		ok  bool
	}{
		{PurgeRunsRequest{Tenant: "acme", Limit: 1}, 0, true},
		{PurgeRunsRequest{Tenant: "acme", Limit: MaxBatch}, 0, true},
		{PurgeRunsRequest{Tenant: "acme", Limit: 0}, 0, false},
		{PurgeRunsRequest{Tenant: "acme", Limit: MaxBatch + 1}, 0, false},
		{PurgeRunsRequest{Tenant: "", Limit: 1}, 0, false},
		{PurgeRunsRequest{Tenant: "Acme", Limit: 1}, 0, false},
		{PurgeRunsRequest{Tenant: "acme", Limit: 1}, -1, false},
	} {
		if err := cfg.CheckPurgeRuns(tc.req, tc.now); (err == nil) != tc.ok || err != nil && CodeOf(err) != CodeInvalidArgument {
			t.Errorf("CheckPurgeRuns(%+v, %d) = %v, want ok %v", tc.req, tc.now, err, tc.ok)
		}
	}
	bad := DefaultConfig()
	bad.RunRetentionMs = -1
	if CodeOf(bad.Validate()) != CodeInvalidArgument {
		t.Errorf("a negative RunRetentionMs was accepted")
	}
}
