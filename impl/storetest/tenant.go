package storetest

import (
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// Tenant isolation: another tenant's rows are invisible (not_found, empty)
// and unchangeable, and names never collide across tenants.

func init() {
	register("TenantIsolation", testTenantIsolation)
}

func testTenantIsolation(t *testing.T, f Factory) {
	e := newEnv(t, f)
	rb := req("tb", "r1")
	rb.IdempotencyKey = "shared-key"
	e.create(rb)
	lb := e.claimOne("tb", "r1", "wb", 10_000)
	_, err := e.s.ReserveEffect(e.ctx, spec.ReserveEffectRequest{Lease: lb.Ref(), Step: "charge", Key: "c-1"})
	mustOK(t, "B reserves an effect", err)
	bRows := e.snap()

	// Tenant A cannot read B's run.
	_, err = e.s.GetRun(e.ctx, "ta", "r1")
	checkCode(t, "A reads B's run", err, spec.CodeNotFound)
	_, err = e.s.GetJob(e.ctx, "ta", "r1")
	checkCode(t, "A reads B's job", err, spec.CodeNotFound)
	_, err = e.s.Events(e.ctx, "ta", "r1")
	checkCode(t, "A reads B's events", err, spec.CodeNotFound)
	_, err = e.s.Attempts(e.ctx, "ta", "r1")
	checkCode(t, "A reads B's attempts", err, spec.CodeNotFound)
	_, err = e.s.Effects(e.ctx, "ta", "r1")
	checkCode(t, "A reads B's effects", err, spec.CodeNotFound)
	// Nor claim it (even once B's lease expired), cancel it, reap it, or
	// write through B's lease under A's name.
	e.set(t0 + 10_000)
	e.claimNone("ta", "wa")
	_, err = e.s.Cancel(e.ctx, spec.CancelRequest{Tenant: "ta", RunID: "r1"})
	checkCode(t, "A cancels B's run", err, spec.CodeNotFound)
	reaped, err := e.s.Reap(e.ctx, spec.ReapRequest{Tenant: "ta", Limit: 10})
	mustOK(t, "A reaps", err)
	mustEqual(t, "A's reap", len(reaped), 0)
	e.set(t0 + 1)
	forged := lb.Ref()
	forged.Tenant = "ta"
	allRefused(e, "A writes through B's lease", forged, spec.CodeNotFound, "")
	e.unchanged("tenant A's attempts on B's run", bRows)

	// Nor replay it once it failed.
	e.fail(lb, "bad")
	bRows = e.snap()
	_, err = e.s.Replay(e.ctx, spec.ReplayRequest{Tenant: "ta", RunID: "r1", NewRunID: "r1-copy", Actor: "ops"})
	checkCode(t, "A replays B's run", err, spec.CodeNotFound)
	e.unchanged("A replays B's run", bRows)

	// A's own key and run id, equal to B's, belong to A alone: a new run, not
	// a replay of B's and not an id collision.
	ra := rb
	ra.Tenant = "ta"
	res, err := e.s.CreateRun(e.ctx, ra)
	mustOK(t, "A creates with B's key and id", err)
	mustEqual(t, "A's run", res, spec.CreateRunResult{Run: e.wantRun(ra, t0+1)})
	la := e.claimOne("ta", "r1", "wa", 10_000)
	e.complete(la, `{"tenant":"a"}`)
	// B's rows are what they were; A's rows are A's.
	snap := e.snap()
	mustEqual(t, "B's run after A's run", snap.Runs[1], bRows.Runs[0])
	if snap.Runs[0].Tenant != "ta" || snap.Runs[0].State != spec.RunCompleted || len(snap.Runs) != 2 {
		t.Fatalf("runs: want A's completed run then B's failed run, got %+v", snap.Runs)
	}
	// B cannot see A's completion from B's side either.
	if got := e.getRun("tb", "r1"); got.State != spec.RunFailed {
		t.Fatalf("B's run: want failed, got %+v", got)
	}

	// With a tenant allowlist, unknown tenants are invalid, not just empty.
	ea := newEnv(t, f, func(c *spec.Config) { c.Tenants = []string{"ta"} })
	_, err = ea.s.CreateRun(ea.ctx, req("tb", "r1"))
	checkCode(t, "CreateRun for an unconfigured tenant", err, spec.CodeInvalidArgument)
	_, err = ea.s.Claim(ea.ctx, spec.ClaimRequest{Tenant: "tb", Worker: "w", LeaseMs: 1000, Limit: 1})
	checkCode(t, "Claim for an unconfigured tenant", err, spec.CodeInvalidArgument)
	_, err = ea.s.GetRun(ea.ctx, "tb", "r1")
	checkCode(t, "GetRun for an unconfigured tenant", err, spec.CodeInvalidArgument)
	ea.newRun("ta", "r1")
}
