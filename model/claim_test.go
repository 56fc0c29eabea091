package model_test

import (
	"testing"

	"github.com/leasehold/leasehold/spec"
)

func TestClaimLeasesTheJob(t *testing.T) {
	w := newWorld(t)
	r := w.at(5).create("t1", "k1", "r1", `{"a":1}`)
	leases := w.at(8).claim("t1", "w1", 1)
	want := spec.Lease{Tenant: "t1", RunID: "r1", Operation: "work", Owner: "w1", Generation: 1, ExpiresAt: 18,
		Attempt: 1, MaxAttempts: 2, Payload: `{"a":1}`, DeadlineAt: r.DeadlineAt}
	if len(leases) != 1 {
		t.Fatalf("want one lease, got %+v", leases)
	}
	equal(t, "lease", leases[0], want)
	equal(t, "job", w.job("t1", "r1"), spec.Job{Tenant: "t1", RunID: "r1", Operation: "work", State: spec.JobLeased,
		AvailableAt: 5, LeaseOwner: "w1", LeaseExpiresAt: 18, Generation: 1, Attempts: 1, MaxAttempts: 2})
	run := w.run("t1", "r1")
	equal(t, "run state", run.State, spec.RunRunning)
	equal(t, "run version", run.Version, int64(2))
	equal(t, "attempt", w.attempt("t1", "r1", 1), spec.Attempt{Tenant: "t1", RunID: "r1", Generation: 1, Number: 1,
		Worker: "w1", ClaimedAt: 8, RenewedAt: 8, Outcome: spec.AttemptRunning})
}

func TestClaimValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		now  int64
		req  spec.ClaimRequest
	}{
		{"negative clock", -1, spec.ClaimRequest{Tenant: "t1", Worker: "w1", LeaseMs: 10, Limit: 1}},
		{"unknown tenant", 0, spec.ClaimRequest{Tenant: "t3", Worker: "w1", LeaseMs: 10, Limit: 1}},
		{"empty worker", 0, spec.ClaimRequest{Tenant: "t1", Worker: "", LeaseMs: 10, Limit: 1}},
		{"zero lease", 0, spec.ClaimRequest{Tenant: "t1", Worker: "w1", LeaseMs: 0, Limit: 1}},
		{"lease past the maximum", 0, spec.ClaimRequest{Tenant: "t1", Worker: "w1", LeaseMs: 101, Limit: 1}},
		{"zero limit", 0, spec.ClaimRequest{Tenant: "t1", Worker: "w1", LeaseMs: 10, Limit: 0}},
		{"limit past MaxBatch", 0, spec.ClaimRequest{Tenant: "t1", Worker: "w1", LeaseMs: 10, Limit: spec.MaxBatch + 1}},
		{"expiry overflows", 1<<63 - 5, spec.ClaimRequest{Tenant: "t1", Worker: "w1", LeaseMs: 10, Limit: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.create("t1", "k1", "r1", `{}`)
			w.at(tc.now).fails(tc.req, spec.CodeInvalidArgument, "")
		})
	}
}

// TestClaimEligibility: which jobs a sequential claim takes, and in which
// order: (eligible at, run id), queued or expired, with budget left, of the
// claiming tenant only.
func TestClaimEligibility(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(w *world)
		now   int64
		limit int
		want  []string // run ids, in order
	}{
		{"nothing to claim", func(w *world) {}, 0, 1, nil},
		{"run id breaks a tie of available_at", func(w *world) {
			w.create("t1", "k2", "r2", `{}`)
			w.create("t1", "k1", "r1", `{}`)
		}, 0, 2, []string{"r1", "r2"}},
		{"limit takes the first", func(w *world) {
			w.create("t1", "k2", "r2", `{}`)
			w.create("t1", "k1", "r1", `{}`)
		}, 0, 1, []string{"r1"}},
		{"earlier available_at first", func(w *world) {
			w.create("t1", "k1", "r1", `{}`)
			w.at(1).create("t1", "k0", "r0", `{}`)
			w.at(2).claimOne("t1", "w1")                                                         // takes r1 (available 0)
			w.doJitter(spec.RetryRequest{Lease: ref("t1", "r1", "w1", 1), ErrorCode: "busy"}, 0) // r1 available at 12
		}, 12, 2, []string{"r0", "r1"}},
		{"an expired lease comes in the order of its expiry, not of its availability", func(w *world) {
			w.create("t1", "k1", "r1", `{}`)        // available 0
			w.claimOne("t1", "w1")                  // r1 leased until 10
			w.at(5).create("t1", "k2", "r2", `{}`)  // available 5
			w.at(12).create("t1", "k3", "r3", `{}`) // available 12
		}, 12, 3, []string{"r2", "r1", "r3"}},
		{"a backed-off job is not available yet", func(w *world) {
			w.create("t1", "k1", "r1", `{}`)
			w.claimOne("t1", "w1")
			w.doJitter(spec.RetryRequest{Lease: ref("t1", "r1", "w1", 1), ErrorCode: "busy"}, 0) // available at 10
		}, 9, 1, nil},
		{"a live lease is not claimable", func(w *world) {
			w.create("t1", "k1", "r1", `{}`)
			w.claimOne("t1", "w1") // expires 10
		}, 9, 1, nil},
		{"an expired lease is claimable at its expiry", func(w *world) {
			w.create("t1", "k1", "r1", `{}`)
			w.claimOne("t1", "w1")
		}, 10, 1, []string{"r1"}},
		{"no budget left", func(w *world) {
			w.create("t1", "k1", "r1", `{}`)
			w.claimOne("t1", "w1")
			w.at(10).claimOne("t1", "w2") // attempt 2 of 2
		}, 20, 1, nil},
		{"another tenant's jobs are not seen", func(w *world) {
			w.create("t2", "k1", "r1", `{}`)
		}, 0, 1, nil},
		{"terminal jobs are not claimable", func(w *world) {
			w.create("t1", "k1", "r1", `{}`)
			w.must(spec.CancelRequest{Tenant: "t1", RunID: "r1"})
		}, 0, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			tc.setup(w)
			leases := w.at(tc.now).claim("t1", "w9", tc.limit)
			var got []string
			for _, l := range leases {
				got = append(got, l.RunID)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("claimed %v, want %v", got, tc.want)
			}
			for i := range got {
				equal(t, "claim order", got[i], tc.want[i])
			}
		})
	}
}

func TestReclaimClosesTheExpiredAttempt(t *testing.T) {
	w := newWorld(t)
	w.create("t1", "k1", "r1", `{}`)
	w.claimOne("t1", "w1")
	l := w.at(10).claimOne("t1", "w2")
	equal(t, "generation", l.Generation, int64(2))
	old := w.attempt("t1", "r1", 1)
	equal(t, "old attempt outcome", old.Outcome, spec.AttemptExpired)
	equal(t, "old attempt finished", old.FinishedAt, int64(10))
	equal(t, "new attempt", w.attempt("t1", "r1", 2).Number, 2)
	equal(t, "run version (running stays running)", w.run("t1", "r1").Version, int64(2))
}

func ref(tenant, run, worker string, gen int64) spec.LeaseRef {
	return spec.LeaseRef{Tenant: tenant, RunID: run, Owner: worker, Generation: gen}
}
