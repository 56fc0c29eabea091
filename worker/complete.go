package worker

import (
	"context"

	"github.com/leasehold/leasehold/spec"
)

// completer flushes completions in batches (ADR-013). Attempts submit their
// completion and wait: the attempt, and with it its slot, is released only
// when the batch that carried it has acknowledged either the guarded
// transition or the member's stale rejection. One goroutine flushes, so at
// most one batch is in flight per worker; while it is, the next batch
// gathers.
type completer struct {
	w    *Worker
	in   chan *completion
	quit chan struct{}
	done chan struct{}
}

// completion is one attempt's completion waiting for its batch.
type completion struct {
	a   *attempt
	req spec.CompleteRequest
	ack chan writeResult
}

// writeResult is what attempt.write returns, delivered to the waiting attempt.
type writeResult struct {
	job *spec.Job
	err error
}

func newCompleter(w *Worker) *completer {
	return &completer{w: w, in: make(chan *completion), quit: make(chan struct{}), done: make(chan struct{})}
}

// submit hands a completion to the completer and waits for its batch's
// acknowledgment. The completer runs until every attempt has ended, so the
// wait always ends.
func (c *completer) submit(a *attempt, req spec.CompleteRequest) (*spec.Job, error) {
	m := &completion{a: a, req: req, ack: make(chan writeResult, 1)}
	c.in <- m
	r := <-m.ack
	return r.job, r.err
}

// stop ends the completer once no attempt can submit any more.
func (c *completer) stop() {
	close(c.quit)
	<-c.done
}

func (c *completer) run() {
	defer close(c.done)
	for {
		var first *completion
		select {
		case first = <-c.in:
		case <-c.quit:
			return
		}
		c.flush(c.gather(first))
	}
}

// gather takes first, every completion already waiting, and, with a
// Linger, those that arrive before it ends, up to Batch.Size.
func (c *completer) gather(first *completion) []*completion {
	size := c.w.cfg.Batch.Size
	batch := []*completion{first}
	for len(batch) < size {
		select {
		case m := <-c.in:
			batch = append(batch, m)
			continue
		default:
		}
		break
	}
	if len(batch) == size || c.w.cfg.Batch.Linger <= 0 {
		return batch
	}
	t := c.w.cfg.Timers.NewTimer(ms(c.w.cfg.Batch.Linger))
	defer t.Stop()
	for len(batch) < size {
		select {
		case m := <-c.in:
			batch = append(batch, m)
		case <-t.C():
			return batch
		}
	}
	return batch
}

// flush completes the batch: through CompleteBatch when the store has it
// and the batch has more than one member, else one Complete per member.
// A batch the store could not run at all (unavailable) is sent again with
// backoff while the lease of every member allows (the earliest deadline
// decides); when its commit's answer was lost, each member is resolved on
// its own, by reading its job back (and completing it alone if it is still
// leased to its generation).
func (c *completer) flush(batch []*completion) {
	w := c.w
	if len(batch) == 1 || w.batcher == nil {
		for _, m := range batch {
			job, err := m.a.write("complete", func(ctx context.Context) error {
				_, err := w.cfg.Store.Complete(ctx, m.req)
				return err
			})
			m.ack <- writeResult{job, err}
		}
		return
	}
	w.stats.batches.Add(1)
	w.stats.batched.Add(uint64(len(batch)))
	w.tel.flushed(len(batch))
	reqs := make([]spec.CompleteRequest, len(batch))
	for i, m := range batch {
		reqs[i] = m.req
	}
	deadline := batch[0].a.deadline.Load()
	for _, m := range batch[1:] {
		deadline = min(deadline, m.a.deadline.Load())
	}
	var outs []spec.BatchOutcome
	var err error
	for try := 0; try == 0 || w.retryWait(try, deadline); try++ {
		ctx, cancel := context.WithTimeout(w.bg, w.cfg.StoreTimeout)
		outs, err = w.batcher.CompleteBatch(ctx, reqs)
		cancel()
		if spec.CodeOf(err) != spec.CodeUnavailable {
			break
		}
		w.log.Warn("batched completion failed; nothing was written, sending it again", "members", len(batch), "err", err)
	}
	switch {
	case err == nil:
		w.log.Debug("batch of completions flushed", "members", len(batch))
		for i, m := range batch {
			m.ack <- writeResult{err: outs[i].Err}
		}
	case spec.CodeOf(err) == spec.CodeUnknownOutcome:
		w.log.Warn("batched completion: outcome unknown; resolving each member by reading it back", "members", len(batch), "err", err)
		for _, m := range batch {
			try := 0
			job, rerr := m.a.readBackRetrying(&try)
			switch {
			case rerr != nil:
				m.ack <- writeResult{err: err}
			case job.State == spec.JobLeased && job.Generation == m.a.lease.Generation && job.LeaseOwner == m.a.lease.Owner:
				job, werr := m.a.write("complete", func(ctx context.Context) error {
					_, err := w.cfg.Store.Complete(ctx, m.req)
					return err
				})
				m.ack <- writeResult{job, werr}
			default:
				m.ack <- writeResult{job: &job}
			}
		}
	default:
		for _, m := range batch {
			m.ack <- writeResult{err: err}
		}
	}
}
