package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// Timeline records, for each job of a steady-rate run (its warm-up jobs
// first, then the measured ones), when it was
// admitted (just before its admission call was made), when that call
// returned, when its handler started and when its completion was
// acknowledged (committed), in nanoseconds since the timeline was made
// (monotonic clock). Marks may be set from any goroutine; a mark of zero
// means it never happened.
type Timeline struct {
	base                             time.Time
	Admit, Admitted, Start, Complete []int64
	// Warmup is the number of leading jobs that warm the system up: they
	// are admitted and worked like the rest, and must be marked like the
	// rest, but the latencies are those of the jobs after them.
	Warmup int
}

// NewTimeline makes a timeline for warmup jobs and n measured jobs after
// them.
func NewTimeline(warmup, n int) *Timeline {
	m := warmup + n
	return &Timeline{base: time.Now(), Admit: make([]int64, m), Admitted: make([]int64, m), Start: make([]int64, m),
		Complete: make([]int64, m), Warmup: warmup}
}

// latencyWarmup is how long, at the run's arrival rate, a latency run's
// warm-up jobs last. A freshly opened client's connections are cold: each
// one's first statements are prepared, and the server loads the schema's
// catalog entries and compiles its functions for each new backend, so the
// slowest admission calls of a run were its first ones (bench/findings.md
// §27).
const latencyWarmup = time.Second

// Mark sets marks[i] to now; an index out of range is ignored (a job that
// is not part of the run).
func (t *Timeline) Mark(marks []int64, i int) {
	if i >= 0 && i < len(marks) {
		atomic.StoreInt64(&marks[i], max(1, int64(time.Since(t.base))))
	}
}

// Pace admits jobs 0..n-1 at rate per second: job i is due rate⁻¹·i after
// the start, and one of workers goroutines calls admit(i) once it is due
// (or at once, if admission has fallen behind: the backlog then shows in
// the latencies, it is not hidden). The admit mark is set just before the
// call, the admitted mark when it returned without an error. The first
// error stops the run.
func Pace(ctx context.Context, n int, rate float64, workers int, tl *Timeline, admit func(ctx context.Context, i int) error) error {
	if rate <= 0 {
		return fmt.Errorf("bench: arrival rate %v is not positive", rate)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return
					}
				}
				tl.Mark(tl.Admit, i)
				if err := admit(ctx, i); err != nil {
					once.Do(func() { first = fmt.Errorf("admit job %d: %w", i, err); cancel() })
					return
				}
				tl.Mark(tl.Admitted, i)
			}
		})
	}
	wg.Wait()
	return first
}

// LatencyQuantiles are the quantiles a latency distribution is kept at (for
// the report's picture).
var LatencyQuantiles = []float64{0.01, 0.05, 0.10, 0.20, 0.30, 0.40, 0.50, 0.60, 0.70, 0.80, 0.90, 0.95, 0.99, 0.999}

// LatencyResult is one steady-rate run: jobs admitted one per call at a
// fixed arrival rate while the system's workers (notifications on) work
// them with a no-op handler.
type LatencyResult struct {
	System        string  `json:"system"`
	Store         string  `json:"store"`
	Round         int     `json:"round"`
	Jobs          int     `json:"jobs"` // measured, after WarmupJobs
	WarmupJobs    int     `json:"warmup_jobs,omitempty"`
	RatePerSec    float64 `json:"arrival_rate_per_sec"`
	AchievedRate  float64 `json:"achieved_admission_rate_per_sec"`
	StartP50Ms    float64 `json:"admit_to_start_p50_ms"`
	StartP99Ms    float64 `json:"admit_to_start_p99_ms"`
	CompleteP50Ms float64 `json:"admit_to_complete_p50_ms"`
	CompleteP99Ms float64 `json:"admit_to_complete_p99_ms"`
	// CallP50Ms and CallP99Ms are the admission call's own duration (admit
	// to admitted): the part of the latencies that is the admission's, and
	// its backlog when the arrival rate is more than admission sustains.
	CallP50Ms float64 `json:"admission_call_p50_ms,omitempty"`
	CallP99Ms float64 `json:"admission_call_p99_ms,omitempty"`
	// StartQ and CompleteQ are the distributions at LatencyQuantiles, ms.
	StartQ      []float64 `json:"admit_to_start_quantiles_ms"`
	CompleteQ   []float64 `json:"admit_to_complete_quantiles_ms"`
	NotMeasured string    `json:"not_measured,omitempty"`
}

// summarizeTimeline turns a timeline into a LatencyResult of the jobs
// after its warm-up; every job, warm-up included, must have all four
// marks.
func summarizeTimeline(tl *Timeline) (LatencyResult, error) {
	n := len(tl.Admit) - tl.Warmup
	if n < 1 || tl.Warmup < 0 {
		return LatencyResult{}, fmt.Errorf("a timeline of %d jobs with %d of warm-up measures none", len(tl.Admit), tl.Warmup)
	}
	call := make([]time.Duration, 0, n)
	start := make([]time.Duration, 0, n)
	done := make([]time.Duration, 0, n)
	var first, last int64
	for i := range tl.Admit {
		a, ad, s, c := tl.Admit[i], tl.Admitted[i], tl.Start[i], tl.Complete[i]
		if a == 0 || ad == 0 || s == 0 || c == 0 {
			return LatencyResult{}, fmt.Errorf("job %d lacks a mark (admit %d, admitted %d, start %d, complete %d)", i, a, ad, s, c)
		}
		if i < tl.Warmup {
			continue
		}
		call = append(call, time.Duration(ad-a))
		start = append(start, time.Duration(s-a))
		done = append(done, time.Duration(c-a))
		if first == 0 || a < first {
			first = a
		}
		last = max(last, a)
	}
	slices.Sort(call)
	slices.Sort(start)
	slices.Sort(done)
	r := LatencyResult{Jobs: n, WarmupJobs: tl.Warmup}
	for _, q := range LatencyQuantiles {
		r.StartQ = append(r.StartQ, quantile(start, q))
		r.CompleteQ = append(r.CompleteQ, quantile(done, q))
	}
	r.StartP50Ms, r.StartP99Ms = quantile(start, 0.50), quantile(start, 0.99)
	r.CompleteP50Ms, r.CompleteP99Ms = quantile(done, 0.50), quantile(done, 0.99)
	r.CallP50Ms, r.CallP99Ms = quantile(call, 0.50), quantile(call, 0.99)
	if last > first {
		r.AchievedRate = float64(n-1) / time.Duration(last-first).Seconds()
	}
	return r, nil
}

// steadyLeasehold runs a leasehold worker (package worker: W slots, batch
// claims, batched completion, notifications on since the store is a
// spec.Notifier) against store, admits the timeline's runs with CreateRun
// at rate per second, marking them in tl, and returns when every one has
// completed.
func steadyLeasehold(ctx context.Context, store spec.Store, tl *Timeline, rate float64, o Options) error {
	n := len(tl.Admit)
	var completed atomic.Int64
	allDone := make(chan struct{})
	index := func(runID string) int {
		i, err := strconv.Atoi(strings.TrimPrefix(runID, "job-"))
		if err != nil {
			return -1
		}
		return i - 1
	}
	var failed atomic.Value
	w, err := worker.New(worker.Config{
		Store: store, Tenants: []string{tenant}, ID: "bench-steady",
		Handler: worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
			tl.Mark(tl.Start, index(j.RunID))
			return nil, nil
		}),
		Lease: leaseMs * time.Millisecond, Concurrency: o.Workers, ClaimBatch: o.ClaimBatch, ClaimGather: o.ClaimGather,
		Batch: worker.BatchPolicy{Size: o.CompleteBatch}, Maintenance: worker.MaintenancePolicy{Off: true},
		OnResult: func(r worker.Result) {
			if r.Outcome != worker.OutcomeCompleted {
				failed.CompareAndSwap(nil, fmt.Errorf("run %s ended %s: %v", r.RunID, r.Outcome, r.Err))
			}
			tl.Mark(tl.Complete, index(r.RunID))
			if completed.Add(1) == int64(n) {
				close(allDone)
			}
		},
	})
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	// The worker starts idle; give its listener a moment to subscribe, as a
	// long-running worker would have long since.
	time.Sleep(200 * time.Millisecond)
	err = Pace(ctx, n, rate, o.Workers, tl, func(ctx context.Context, i int) error {
		id := int64(i + 1)
		st := &drainStats{}
		_, err := retry(ctx, st, func() (spec.CreateRunResult, error) {
			return store.CreateRun(ctx, spec.CreateRunRequest{Tenant: tenant, Operation: operation, IdempotencyKey: keyOf(id),
				RunID: runIDOf(id), Payload: []byte(`{"n":` + strconv.FormatInt(id, 10) + `}`)})
		})
		return err
	})
	if err == nil {
		select {
		case <-allDone:
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(time.Duration(float64(n)/rate*float64(time.Second)) + 60*time.Second):
			err = fmt.Errorf("%d of %d runs completed a minute after the last admission", completed.Load(), n)
		}
	}
	stop()
	if werr := <-ran; werr != nil && err == nil && wctx.Err() == nil {
		err = werr
	}
	if f, _ := failed.Load().(error); f != nil && err == nil {
		err = f
	}
	return err
}

// latencyCapacity is what one system sustained in this run's throughput
// phases: the lower of its median drain rate and its median admission rate
// one per call (0 when its drain was not measured).
func latencyCapacity(drains, inserts []float64) float64 {
	d, a := summarize(drains).Median, summarize(inserts).Median
	if d == 0 {
		return 0
	}
	if a > 0 {
		return min(d, a)
	}
	return d
}

// latencyRate is the one arrival rate of every latency run, leasehold's
// and the peer's: load times the lowest capacity above zero of those
// given (0 when none is). One rate for both, so that their latencies are
// measured under the same offered load. A fraction well below one, because
// during a latency run the admission shares the machine with the workers,
// and the host slows down: at half of what admission alone sustained, a
// slower round measured the admission's backlog instead of the queue
// (bench/findings.md §27).
func latencyRate(load float64, capacities ...float64) float64 {
	lowest := 0.0
	for _, c := range capacities {
		if c > 0 && (lowest == 0 || c < lowest) {
			lowest = c
		}
	}
	return load * lowest
}

// latencyRates are leasehold's and the peer's arrival rates: latencyRate
// of both capacities for each system that has one, 0 (not run) for one
// that has none.
func latencyRates(load, lhCap, peerCap float64) (lh, peer float64) {
	rate := latencyRate(load, lhCap, peerCap)
	if lhCap > 0 {
		lh = rate
	}
	if peerCap > 0 {
		peer = rate
	}
	return lh, peer
}

// runLatency measures admit-to-start and admit-to-complete at a steady
// arrival rate, leasehold then the peer, o.Rounds times.
func runLatency(ctx context.Context, pg *server, dsn string, peer *peerPG, o Options, r *Report, logf func(string, ...any)) error {
	lhCap := latencyCapacity(r.drainRates("leasehold", "postgres", bestPG), r.insertRates("leasehold", "postgres", methodOne))
	peerCap := 0.0
	if peer != nil {
		peerCap = latencyCapacity(r.drainRates(r.PeerName, "postgres", "peer"), r.insertRates(r.PeerName, "postgres", methodOne))
	}
	lhRate, peerRate := latencyRates(o.LatencyLoad, lhCap, peerCap)
	jobs := func(rate float64) int { return max(100, int(rate*o.LatencySeconds)) }
	warmup := func(rate float64) int { return max(100, int(rate*latencyWarmup.Seconds())) }
	for round := 1; round <= o.Rounds; round++ {
		if lhRate > 0 {
			s, err := openPG(ctx, dsn, "bench_latency", o)
			if err != nil {
				return err
			}
			tl := NewTimeline(warmup(lhRate), jobs(lhRate))
			err = steadyLeasehold(ctx, s, tl, lhRate, o)
			closePG(ctx, dsn, s)
			if err != nil {
				return fmt.Errorf("leasehold: %w", err)
			}
			res, err := summarizeTimeline(tl)
			if err != nil {
				return fmt.Errorf("leasehold: %w", err)
			}
			res.System, res.Store, res.Round, res.RatePerSec = "leasehold", "postgres", round, lhRate
			r.Latency = append(r.Latency, res)
			logf("round %d: leasehold latency at %.0f/s: start p50 %.2f p99 %.2f ms, complete p50 %.2f p99 %.2f ms", round, lhRate,
				res.StartP50Ms, res.StartP99Ms, res.CompleteP50Ms, res.CompleteP99Ms)
		}
		if peer == nil || !(peerRate > 0) {
			continue
		}
		sp, ok := peer.p.(SteadyPeer)
		if !ok {
			continue
		}
		if err := sp.Open(ctx, peer.dsn, o.Conns); err != nil {
			return err
		}
		tl := NewTimeline(warmup(peerRate), jobs(peerRate))
		n := len(tl.Admit)
		err := sp.Reset(ctx)
		if err == nil {
			err = sp.Steady(ctx, n, o.Workers, peerRate, tl)
		}
		sp.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", r.PeerName, err)
		}
		res, err := summarizeTimeline(tl)
		if err != nil {
			return fmt.Errorf("%s: %w", r.PeerName, err)
		}
		res.System, res.Store, res.Round, res.RatePerSec = r.PeerName, "postgres", round, peerRate
		r.Latency = append(r.Latency, res)
		logf("round %d: %s latency at %.0f/s: start p50 %.2f p99 %.2f ms, complete p50 %.2f p99 %.2f ms", round, r.PeerName, peerRate,
			res.StartP50Ms, res.StartP99Ms, res.CompleteP50Ms, res.CompleteP99Ms)
	}
	return nil
}
