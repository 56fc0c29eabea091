package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/spec"
)

// The benchmark's tenant, operation and lease. The lease is long enough that
// no drain ever sees one expire.
const (
	tenant    = "bench"
	operation = "work"
	leaseMs   = 300_000
)

// config is the store configuration of every leasehold store in the
// benchmark: the default policy (3 attempts, 1h timeout, 24h idempotency
// retention), which the bulk loader mirrors row for row.
func config() spec.Config { return spec.DefaultConfig() }

// drainMode is one way of working the queue.
type drainMode struct {
	key  string // stable id: JSON, profile file names
	name string // for the report
	// batchClaim: Producers goroutines each claim up to min(ClaimBatch,
	// free slots) jobs per Claim, after a full claim also the slots that
	// free within ClaimGather (worker.Config's claim loop), and hand them to
	// Workers handler goroutines (River's producer shape; River runs one
	// producer per queue). Otherwise each of the Workers goroutines claims
	// one job at a time (Limit 1) and handles it itself.
	batchClaim bool
	// batchComplete: handlers hand completions to Completers goroutines
	// that send them with CompleteBatch, as many per call as have queued up
	// (up to CompleteBatch) while the previous call ran: group commit
	// without a timer. Otherwise each handler calls Complete.
	batchComplete bool
}

// pgVariants are the PostgreSQL drains: single and batch claim, batched
// completion off and on.
var pgVariants = []drainMode{
	{key: "single", name: "single claim, Complete per job", batchClaim: false, batchComplete: false},
	{key: "single_batchcomplete", name: "single claim, CompleteBatch", batchClaim: false, batchComplete: true},
	{key: "batch", name: "batch claim, Complete per job", batchClaim: true, batchComplete: false},
	{key: "batch_batchcomplete", name: "batch claim, CompleteBatch", batchClaim: true, batchComplete: true},
}

// errNoBatchCompleter marks a store without spec.BatchCompleter: the
// variant is reported as not measured.
var errNoBatchCompleter = errors.New("the store does not implement spec.BatchCompleter")

// drainStats counts what a drain did, for the report.
type drainStats struct {
	claims, claimed         atomic.Int64
	completeCalls, complete atomic.Int64
	retries                 atomic.Int64
	// Wall time spent inside Claim and inside Complete/CompleteBatch
	// calls, summed over the goroutines making them.
	claimNanos, completeNanos atomic.Int64
	// progress, when set, is told the number of jobs completed so far
	// after each completion call (from the goroutine that made it).
	progress func(done int)
}

// report tells progress, if set, that done jobs are completed.
func (st *drainStats) report(done int64) {
	if st.progress != nil {
		st.progress(int(done))
	}
}

// maxRetries bounds the retries of one call refused with CodeUnavailable
// (nothing written, the contract says retry).
const maxRetries = 50

// retry calls fn until it succeeds, fails with an error other than
// CodeUnavailable, or has been refused maxRetries times.
func retry[T any](ctx context.Context, st *drainStats, fn func() (T, error)) (T, error) {
	for i := 0; ; i++ {
		v, err := fn()
		if err == nil || spec.CodeOf(err) != spec.CodeUnavailable || i >= maxRetries || ctx.Err() != nil {
			return v, err
		}
		st.retries.Add(1)
		time.Sleep(time.Millisecond)
	}
}

// noop is the handler: it touches the payload and does nothing.
func noop(l spec.Lease) int { return len(l.Payload) }

// drain works n queued jobs of store to completion with the mode's shape and
// returns when every one of them is completed (committed). Any refused
// completion is an error: in a drain nobody else touches the jobs, so a
// lost lease would be a bug.
func drain(ctx context.Context, store spec.Store, n int, o Options, m drainMode, st *drainStats) error {
	var bc spec.BatchCompleter
	if m.batchComplete {
		var ok bool
		if bc, ok = store.(spec.BatchCompleter); !ok {
			return errNoBatchCompleter
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		errOnce  sync.Once
		firstErr error
		done     atomic.Int64
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}

	// Completion.
	var (
		complete   func(spec.Lease)
		completers sync.WaitGroup
		queue      chan spec.CompleteRequest
	)
	if bc != nil {
		queue = make(chan spec.CompleteRequest, o.Workers+o.CompleteBatch)
		for range o.Completers {
			completers.Go(func() {
				batch := make([]spec.CompleteRequest, 0, o.CompleteBatch)
				for req := range queue {
					batch = append(batch[:0], req)
				fill:
					for len(batch) < o.CompleteBatch {
						select {
						case r, ok := <-queue:
							if !ok {
								break fill
							}
							batch = append(batch, r)
						default:
							break fill
						}
					}
					if ctx.Err() != nil {
						continue // failing: empty the queue so no sender blocks
					}
					t0 := time.Now()
					outs, err := retry(ctx, st, func() ([]spec.BatchOutcome, error) { return bc.CompleteBatch(ctx, batch) })
					st.completeNanos.Add(int64(time.Since(t0)))
					if err != nil {
						fail(fmt.Errorf("CompleteBatch of %d: %w", len(batch), err))
						continue
					}
					for _, out := range outs {
						if out.Err != nil {
							fail(fmt.Errorf("CompleteBatch member: %w", out.Err))
						}
					}
					st.completeCalls.Add(1)
					st.complete.Add(int64(len(batch)))
					st.report(done.Add(int64(len(batch))))
				}
			})
		}
		complete = func(l spec.Lease) {
			select {
			case queue <- spec.CompleteRequest{Lease: l.Ref()}:
			case <-ctx.Done():
			}
		}
	} else {
		complete = func(l spec.Lease) {
			t0 := time.Now()
			_, err := retry(ctx, st, func() (spec.Run, error) { return store.Complete(ctx, spec.CompleteRequest{Lease: l.Ref()}) })
			st.completeNanos.Add(int64(time.Since(t0)))
			if err != nil {
				fail(fmt.Errorf("Complete: %w", err))
				return
			}
			st.completeCalls.Add(1)
			st.complete.Add(1)
			st.report(done.Add(1))
		}
	}

	claim := func(worker string, limit int) []spec.Lease {
		t0 := time.Now()
		ls, err := retry(ctx, st, func() ([]spec.Lease, error) {
			return store.Claim(ctx, spec.ClaimRequest{Tenant: tenant, Worker: worker, LeaseMs: leaseMs, Limit: limit})
		})
		st.claimNanos.Add(int64(time.Since(t0)))
		if err != nil {
			fail(fmt.Errorf("Claim: %w", err))
			return nil
		}
		st.claims.Add(1)
		st.claimed.Add(int64(len(ls)))
		return ls
	}
	// An empty claim while jobs remain means every remaining job was locked
	// by a concurrent claim (SKIP LOCKED): wait a moment and look again.
	emptyWait := func() { time.Sleep(200 * time.Microsecond) }

	var workers sync.WaitGroup
	var claimed atomic.Int64
	if !m.batchClaim {
		for w := range o.Workers {
			name := "bench-w" + strconv.Itoa(w)
			workers.Go(func() {
				for claimed.Load() < int64(n) && ctx.Err() == nil {
					ls := claim(name, 1)
					if len(ls) == 0 {
						emptyWait()
						continue
					}
					claimed.Add(int64(len(ls)))
					for _, l := range ls {
						noop(l)
						complete(l)
					}
				}
			})
		}
	} else {
		// slots holds one token per job in flight (claimed, not yet handed
		// to completion): the producer claims only for free slots.
		slots := make(chan struct{}, o.Workers)
		work := make(chan spec.Lease, o.Workers)
		for range o.Workers {
			workers.Go(func() {
				for l := range work {
					noop(l)
					complete(l)
					<-slots
				}
			})
		}
		var producers sync.WaitGroup
		for p := range o.Producers {
			name := "bench-producer" + strconv.Itoa(p)
			producers.Go(func() {
				full := false // the last claim got every job it asked for
				for claimed.Load() < int64(n) && ctx.Err() == nil {
					select {
					case slots <- struct{}{}:
					case <-ctx.Done():
						return
					}
					free := 1
					if most := min(o.ClaimBatch, o.Workers); full && o.ClaimGather > 0 && free < most {
						t := time.NewTimer(o.ClaimGather)
					gather:
						for free < most {
							select {
							case slots <- struct{}{}:
								free++
							case <-t.C:
								break gather
							case <-ctx.Done():
								break gather
							}
						}
						t.Stop()
					}
				more:
					for free < o.ClaimBatch {
						select {
						case slots <- struct{}{}:
							free++
						default:
							break more
						}
					}
					ls := claim(name, free)
					full = len(ls) == free
					for range free - len(ls) {
						<-slots
					}
					if len(ls) == 0 {
						emptyWait()
						continue
					}
					claimed.Add(int64(len(ls)))
					for _, l := range ls {
						work <- l
					}
				}
			})
		}
		workers.Go(func() {
			producers.Wait()
			close(work)
		})
	}
	workers.Wait()
	if queue != nil {
		close(queue)
		completers.Wait()
	}
	if firstErr != nil {
		return firstErr
	}
	if got := done.Load(); got != int64(n) {
		return fmt.Errorf("drain completed %d jobs, want %d", got, n)
	}
	return nil
}

// profiled runs fn under the CPU profiler when dir is set, writing
// dir/profile-<name>.pprof.
func profiled(dir, name string, fn func() error) error {
	if dir == "" {
		return fn()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "profile-"+name+".pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	return fn()
}

// insertAPI admits n runs through the store's CreateRun from workers
// goroutines, ids and keys numbered from 1.
func insertAPI(ctx context.Context, store spec.Store, n, workers int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			st := &drainStats{}
			for {
				i := next.Add(1)
				if i > int64(n) || ctx.Err() != nil {
					return
				}
				req := spec.CreateRunRequest{Tenant: tenant, Operation: operation, IdempotencyKey: keyOf(i), RunID: runIDOf(i),
					Payload: []byte(`{"n":` + strconv.FormatInt(i, 10) + `}`)}
				res, err := retry(ctx, st, func() (spec.CreateRunResult, error) { return store.CreateRun(ctx, req) })
				if err == nil && res.Replayed {
					err = fmt.Errorf("CreateRun %s replayed an earlier run", req.RunID)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// runIDOf and keyOf name job i; the bulk loader uses the same forms.
func runIDOf(i int64) string { return fmt.Sprintf("job-%010d", i) }
func keyOf(i int64) string   { return "key-" + strconv.FormatInt(i, 10) }

// errNoBatchCreator marks a store without spec.BatchCreator: bulk
// admission is reported as not measured, never estimated.
var errNoBatchCreator = errors.New("the store does not implement spec.BatchCreator")

// notMeasuredCreateRuns is what the report says for such a store.
const notMeasuredCreateRuns = "store lacks CreateRuns"

// insertBulkAPI admits n runs through the store's CreateRuns in batches of
// batch, one call after another, ids and keys numbered from 1; every member
// must be created (a replay or a refusal is an error).
func insertBulkAPI(ctx context.Context, store spec.Store, n, batch int) error {
	bc, ok := store.(spec.BatchCreator)
	if !ok {
		return errNoBatchCreator
	}
	st := &drainStats{}
	reqs := make([]spec.CreateRunRequest, 0, batch)
	for i := int64(1); i <= int64(n); i++ {
		reqs = append(reqs, spec.CreateRunRequest{Tenant: tenant, Operation: operation, IdempotencyKey: keyOf(i), RunID: runIDOf(i),
			Payload: []byte(`{"n":` + strconv.FormatInt(i, 10) + `}`)})
		if len(reqs) < batch && i < int64(n) {
			continue
		}
		outs, err := retry(ctx, st, func() ([]spec.CreateOutcome, error) { return bc.CreateRuns(ctx, reqs) })
		if err != nil {
			return fmt.Errorf("CreateRuns of %d: %w", len(reqs), err)
		}
		if len(outs) != len(reqs) {
			return fmt.Errorf("CreateRuns of %d returned %d outcomes", len(reqs), len(outs))
		}
		for k, out := range outs {
			if out.Err != nil {
				return fmt.Errorf("CreateRuns member %s: %w", reqs[k].RunID, out.Err)
			}
			if out.Result.Replayed {
				return fmt.Errorf("CreateRuns member %s replayed an earlier run", reqs[k].RunID)
			}
		}
		reqs = reqs[:0]
	}
	return nil
}
