package worker

import (
	"context"

	"github.com/leasehold/leasehold/spec"
)

// maintainLoop runs a housekeeping round every Maintenance.Every plus a
// jitter, until ctx ends (shutdown begins). See MaintenancePolicy.
func (w *Worker) maintainLoop(ctx context.Context) {
	m := w.cfg.Maintenance
	for {
		t := w.cfg.Timers.NewTimer(ms(m.Every) + w.cfg.Random.Int64N(ms(m.Jitter)+1))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return
		}
		w.maintain(ctx)
	}
}

// maintain is one housekeeping round: Reap for each tenant, then
// PurgeIdempotency, each repeated while a call comes back full, up to
// MaxBatches calls. A failed call ends that part of the round; the next
// round tries again.
func (w *Worker) maintain(ctx context.Context) {
	m := w.cfg.Maintenance
	for _, tenant := range w.cfg.Tenants {
		for range m.MaxBatches {
			if ctx.Err() != nil {
				return
			}
			cctx, cancel := context.WithTimeout(w.bg, w.cfg.StoreTimeout)
			ids, err := w.cfg.Store.Reap(cctx, spec.ReapRequest{Tenant: tenant, Limit: m.Batch})
			cancel()
			if err != nil {
				w.log.Warn("housekeeping: reap failed; the next round tries again", "tenant", tenant, "code", spec.CodeOf(err), "err", err)
				break
			}
			if len(ids) > 0 {
				w.stats.reaped.Add(uint64(len(ids)))
				w.log.Info("housekeeping: runs whose lease expired with no attempts left failed (lease_expired)", "tenant", tenant, "runs", len(ids))
				w.log.Debug("housekeeping: reaped", "tenant", tenant, "run_ids", ids)
			}
			if len(ids) < m.Batch {
				break
			}
		}
	}
	for range m.MaxBatches {
		if ctx.Err() != nil {
			return
		}
		cctx, cancel := context.WithTimeout(w.bg, w.cfg.StoreTimeout)
		n, err := w.cfg.Store.PurgeIdempotency(cctx, spec.PurgeRequest{Limit: m.Batch})
		cancel()
		if err != nil {
			w.log.Warn("housekeeping: purging expired idempotency records failed; the next round tries again", "code", spec.CodeOf(err), "err", err)
			return
		}
		if n > 0 {
			w.stats.purged.Add(uint64(n))
			w.log.Debug("housekeeping: expired idempotency records purged", "records", n)
		}
		if n < m.Batch {
			return
		}
	}
}
