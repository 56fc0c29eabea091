package worker

import (
	"context"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/spec"
)

// maintainLoop runs a housekeeping round soon after the worker starts, at
// a time drawn from [0, Maintenance.Every], and then every Every plus a
// jitter, until ctx ends (shutdown begins). See MaintenancePolicy.
func (w *Worker) maintainLoop(ctx context.Context) {
	m := w.cfg.Maintenance
	wait := w.cfg.Random.Int64N(ms(m.Every) + 1)
	if mutant.On(mutant.FirstHousekeepingAfterInterval) {
		wait = ms(m.Every) + w.cfg.Random.Int64N(ms(m.Jitter)+1)
	}
	for {
		t := w.cfg.Timers.NewTimer(wait)
		wait = ms(m.Every) + w.cfg.Random.Int64N(ms(m.Jitter)+1)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return
		}
		w.maintain(ctx)
	}
}

// maintain is one housekeeping round: Reap for each tenant, PurgeRuns for
// each tenant when configured, then PurgeIdempotency, each repeated while a
// call comes back full, up to MaxBatches calls. A failed call ends that part
// of the round; the next round tries again.
func (w *Worker) maintain(ctx context.Context) {
	m := w.cfg.Maintenance
	for _, tenant := range w.cfg.Tenants {
		n := w.repeat(ctx, "reap", func(cctx context.Context) (int, error) {
			ids, err := w.cfg.Store.Reap(cctx, spec.ReapRequest{Tenant: tenant, Limit: m.Batch})
			if len(ids) > 0 {
				w.log.Debug("housekeeping: reaped", "tenant", tenant, "run_ids", ids)
			}
			return len(ids), err
		})
		if n > 0 {
			w.stats.reaped.Add(uint64(n))
			w.tel.housekept("reaped", n)
			w.log.Info("housekeeping: runs whose lease expired with no attempts left failed (lease_expired)", "tenant", tenant, "runs", n)
		}
		if m.PurgeRuns {
			n := w.repeat(ctx, "purging finished runs", func(cctx context.Context) (int, error) {
				ids, err := w.cfg.Store.PurgeRuns(cctx, spec.PurgeRunsRequest{Tenant: tenant, Limit: m.Batch})
				return len(ids), err
			})
			if n > 0 {
				w.stats.purgedRuns.Add(uint64(n))
				w.tel.housekept("runs_purged", n)
				w.log.Debug("housekeeping: finished runs past retention deleted", "tenant", tenant, "runs", n)
			}
		}
	}
	n := w.repeat(ctx, "purging expired idempotency records", func(cctx context.Context) (int, error) {
		return w.cfg.Store.PurgeIdempotency(cctx, spec.PurgeRequest{Limit: m.Batch})
	})
	if n > 0 {
		w.stats.purged.Add(uint64(n))
		w.tel.housekept("idempotency_purged", n)
		w.log.Debug("housekeeping: expired idempotency records purged", "records", n)
	}
}

// repeat calls call (each under StoreTimeout) while it comes back full (n
// == Batch), up to MaxBatches times, and returns the sum. A failure ends it;
// the next round tries again.
func (w *Worker) repeat(ctx context.Context, what string, call func(context.Context) (int, error)) int {
	m := w.cfg.Maintenance
	total := 0
	for range m.MaxBatches {
		if ctx.Err() != nil {
			return total
		}
		cctx, cancel := context.WithTimeout(w.bg, w.cfg.StoreTimeout)
		n, err := call(cctx)
		cancel()
		total += n
		if err != nil {
			w.log.Warn("housekeeping: "+what+" failed; the next round tries again", "code", spec.CodeOf(err), "err", err)
			return total
		}
		if n < m.Batch {
			return total
		}
	}
	return total
}
