package bench

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/spec"
)

// Depth phases: what the queue holds while the claims are timed.
const (
	phaseClaim   = "claim"       // D queued jobs, no expired lease
	phaseReclaim = "reclaim"     // D queued + reclaimExpired expired leases, older in claim order
	phaseMass    = "mass_expiry" // D queued + D/10 expired leases (a fleet of workers died)
)

// reclaimExpired is the number of expired leases of the reclaim phase: a
// few crashed workers' worth among many queued jobs.
const reclaimExpired = 1_000

// warmup claims are made before each phase's timed claims and not counted.
const warmup = 20

// measureDepth loads depth queued jobs with the bulk loader and times single
// claims (Limit 1, each its own transaction and commit, as a worker makes
// them) one after another on one connection, in three phases: plain claims,
// reclaims of expired leases among the queued jobs, and reclaims after a
// mass expiry of depth/10 leases. Each phase also records the claim's
// EXPLAIN (ANALYZE, BUFFERS).
func measureDepth(ctx context.Context, pg *server, dsn string, o Options, depth int, logf func(string, ...any)) (DepthResult, error) {
	res := DepthResult{Depth: depth}
	s, err := openPG(ctx, dsn, "bench_depth", o)
	if err != nil {
		return res, err
	}
	defer closePG(ctx, dsn, s)
	start := time.Now()
	if err := loadQueued(ctx, s.Pool(), 1, int64(depth)); err != nil {
		return res, err
	}
	res.LoadSeconds = time.Since(start).Seconds()
	if err := checkLoaderFingerprint(ctx, s.Pool(), int64(depth)); err != nil {
		return res, err
	}
	_, _ = s.Pool().Exec(ctx, `CHECKPOINT`)
	logf("depth %d: loaded in %.1fs", depth, res.LoadSeconds)

	samples := o.DepthSamples
	if o.Quick && depth >= 1_000_000 {
		samples = min(samples, 100) // the quick mode's smaller sample at 1M
	}
	phases := []struct {
		name    string
		expire  int // leases to expire before the phase
		samples int
	}{
		{phaseClaim, 0, samples},
		{phaseReclaim, reclaimExpired, min(samples, reclaimExpired-warmup-1)},
		{phaseMass, depth / 10, min(samples, 200)},
	}
	// remaining is the number of claimable jobs left: every phase leaves at
	// least half of them, and the expired leases of a phase are converted
	// from them, so no phase can run the queue dry.
	remaining := depth
	for _, ph := range phases {
		if ph.expire > 0 {
			ph.expire = min(ph.expire, remaining)
			if err := expireLeases(ctx, s.Pool(), ph.expire); err != nil {
				return res, fmt.Errorf("expire %d leases: %w", ph.expire, err)
			}
			// Every timed claim of the phase must find an expired lease first.
			ph.samples = min(ph.samples, ph.expire-warmup-1)
		}
		ph.samples = max(1, min(ph.samples, remaining/2-warmup))
		remaining -= warmup + ph.samples
		p, err := timeClaims(ctx, s, ph.samples)
		if err != nil {
			return res, fmt.Errorf("%s: %w", ph.name, err)
		}
		p.Phase, p.Expired = ph.name, ph.expire
		plan, err := s.ExplainClaim(ctx, spec.ClaimRequest{Tenant: tenant, Worker: "bench-explain", LeaseMs: leaseMs, Limit: 1})
		if err != nil {
			return res, fmt.Errorf("explain: %w", err)
		}
		p.Plan = plan
		p.PlanBuffers, p.PlanMs = planFigures(plan)
		res.Phases = append(res.Phases, p)
		logf("depth %d %s: p50 %.2f ms, p99 %.2f ms (%d claims; plan %d buffers, %.3f ms)", depth, ph.name, p.P50Ms, p.P99Ms, p.Samples, p.PlanBuffers, p.PlanMs)
	}
	return res, nil
}

// timeClaims makes warmup and then n timed claims of one job each, one after
// another, and checks that each returned a job.
func timeClaims(ctx context.Context, s *postgres.Store, n int) (PhaseResult, error) {
	lat := make([]time.Duration, 0, n)
	for i := range warmup + n {
		t0 := time.Now()
		ls, err := s.Claim(ctx, spec.ClaimRequest{Tenant: tenant, Worker: "bench-depth", LeaseMs: leaseMs, Limit: 1})
		d := time.Since(t0)
		if err != nil {
			return PhaseResult{}, err
		}
		if len(ls) != 1 {
			return PhaseResult{}, fmt.Errorf("claim %d returned %d jobs, want 1", i, len(ls))
		}
		if i >= warmup {
			lat = append(lat, d)
		}
	}
	return latencies(lat), nil
}

// latencies summarizes timed calls.
func latencies(lat []time.Duration) PhaseResult {
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := int(p*float64(len(lat))+0.5) - 1
		return ms(lat[max(0, min(i, len(lat)-1))])
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	r := PhaseResult{Samples: len(lat), P50Ms: q(0.50), P99Ms: q(0.99)}
	if len(lat) > 0 {
		r.MeanMs = ms(sum / time.Duration(len(lat)))
		r.MaxMs = ms(lat[len(lat)-1])
	}
	return r
}

var (
	buffersLine = regexp.MustCompile(`Buffers: shared((?: \w+=\d+)+)`)
	bufferCount = regexp.MustCompile(`(?:hit|read)=(\d+)`)
	execTime    = regexp.MustCompile(`Execution Time: ([0-9.]+) ms`)
)

// planFigures reads the top node's shared buffers (hit + read, from the
// first Buffers line EXPLAIN prints) and the
// execution time from an EXPLAIN (ANALYZE, BUFFERS) text.
func planFigures(plan string) (buffers int, ms float64) {
	if m := buffersLine.FindStringSubmatch(plan); m != nil {
		for _, c := range bufferCount.FindAllStringSubmatch(m[1], -1) {
			n, _ := strconv.Atoi(c[1])
			buffers += n
		}
	}
	if m := execTime.FindStringSubmatch(plan); m != nil {
		ms, _ = strconv.ParseFloat(m[1], 64)
	}
	return buffers, ms
}
