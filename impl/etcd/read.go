package etcd

import (
	"context"
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/spec"
)

// decodeAll decodes every value of kvs.
func decodeAll[T any](kvs []*mvccpb.KeyValue) ([]T, error) {
	out := make([]T, 0, len(kvs))
	for _, kv := range kvs {
		var v T
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return nil, fmt.Errorf("etcd: decode %q: %w", kv.Key, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// GetRun implements spec.Store.
func (s *Store) GetRun(ctx context.Context, tenant, runID string) (run spec.Run, err error) {
	if err := s.cfg.CheckRunRef(tenant, runID); err != nil {
		return spec.Run{}, err
	}
	err = s.read(ctx, func(w *wtx) error {
		rec, ok, err := w.getRunRec(tenant, runID)
		if err == nil && !ok {
			err = notFound(tenant, runID)
		}
		run = rec.Run
		return err
	})
	return run, err
}

// GetJob implements spec.Store.
func (s *Store) GetJob(ctx context.Context, tenant, runID string) (job spec.Job, err error) {
	if err := s.cfg.CheckRunRef(tenant, runID); err != nil {
		return spec.Job{}, err
	}
	err = s.read(ctx, func(w *wtx) error {
		var ok bool
		job, ok, err = w.getJob(tenant, runID)
		if err == nil && !ok {
			err = notFound(tenant, runID)
		}
		return err
	})
	return job, err
}

// listForRun reads one run's records of a family, at the revision its run
// was read at, or CodeNotFound if the tenant has no such run.
func listForRun[T any](s *Store, ctx context.Context, tenant, runID, family string) (out []T, err error) {
	if err := s.cfg.CheckRunRef(tenant, runID); err != nil {
		return nil, err
	}
	err = s.read(ctx, func(w *wtx) error {
		if _, ok, err := w.getRunRec(tenant, runID); err != nil || !ok {
			if err == nil {
				err = notFound(tenant, runID)
			}
			return err
		}
		p := s.under(family, tenant, runID)
		kvs, err := w.scan(p, end(p), 0)
		if err != nil {
			return err
		}
		out, err = decodeAll[T](kvs)
		return err
	})
	return out, err
}

// Events implements spec.Store.
func (s *Store) Events(ctx context.Context, tenant, runID string) ([]spec.Event, error) {
	return listForRun[spec.Event](s, ctx, tenant, runID, famEvent)
}

// Attempts implements spec.Store.
func (s *Store) Attempts(ctx context.Context, tenant, runID string) ([]spec.Attempt, error) {
	return listForRun[spec.Attempt](s, ctx, tenant, runID, famAttempt)
}

// Effects implements spec.Store.
func (s *Store) Effects(ctx context.Context, tenant, runID string) ([]spec.Effect, error) {
	return listForRun[spec.Effect](s, ctx, tenant, runID, famEffect)
}

// Snapshot implements spec.Store: one read-only Txn, so every family is
// read at one revision; key order is the snapshot's canonical order.
func (s *Store) Snapshot(ctx context.Context) (snap spec.Snapshot, err error) {
	fams := []string{famRun, famEvent, famJob, famAttempt, famIdem, famEffect, famOutbox}
	ops := make([]clientv3.Op, len(fams))
	for i, f := range fams {
		p := s.under(f)
		ops[i] = clientv3.OpGet(p, clientv3.WithRange(end(p)))
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return snap, typed(ctx, err, false)
	}
	kvs := func(i int) []*mvccpb.KeyValue { return resp.Responses[i].GetResponseRange().Kvs }
	recs, err := decodeAll[runRecord](kvs(0))
	if err != nil {
		return snap, err
	}
	snap.Runs = make([]spec.Run, len(recs))
	for i, r := range recs {
		snap.Runs[i] = r.Run
	}
	if snap.Events, err = decodeAll[spec.Event](kvs(1)); err != nil {
		return snap, err
	}
	if snap.Jobs, err = decodeAll[spec.Job](kvs(2)); err != nil {
		return snap, err
	}
	if snap.Attempts, err = decodeAll[spec.Attempt](kvs(3)); err != nil {
		return snap, err
	}
	if snap.Idempotency, err = decodeAll[spec.IdempotencyRecord](kvs(4)); err != nil {
		return snap, err
	}
	if snap.Effects, err = decodeAll[spec.Effect](kvs(5)); err != nil {
		return snap, err
	}
	snap.Outbox, err = decodeAll[spec.OutboxMessage](kvs(6))
	return snap, err
}

// PurgeRuns implements spec.Store. It reads the tenant's finished index in
// (finished_at, run id) order up to the retention bound, takes each leaf
// (a run nobody replayed) whose whole lineage is retired, and deletes the
// lineages in one Txn. It is exact under concurrency: the scanned part of
// the index is compared as a range (no run finished into it meanwhile),
// every record it decided on (runs, replay links, idempotency records) is
// compared as read, and each lineage run's outbox as a range (no message
// written or delivered meanwhile). In this process it waits for writers
// holding the runs it picked, then picks again.
func (s *Store) PurgeRuns(ctx context.Context, req spec.PurgeRunsRequest) (deleted []string, err error) {
	var locked []string
	for round := 0; ; round++ {
		var picked []string
		err = s.write(ctx, spec.OpPurgeRuns, locked, func(w *wtx, now int64) error {
			if err := s.cfg.CheckPurgeRuns(req, now); err != nil {
				return err
			}
			deleted, picked = []string{}, nil
			by, on := s.cfg.RetiredBy(now)
			if !on || by < 0 {
				return nil
			}
			lineages, err := w.retiredLineages(req.Tenant, by, now, req.Limit)
			if err != nil {
				return err
			}
			for _, l := range lineages {
				for _, r := range l {
					picked = append(picked, runLock(req.Tenant, r))
				}
			}
			if !subset(picked, locked) && round < 4 {
				return errRepick
			}
			for _, l := range lineages {
				for i, r := range l {
					w.deleteRun(req.Tenant, r, i > 0)
					deleted = append(deleted, r)
				}
			}
			return nil
		})
		if err != errRepick {
			return deleted, err
		}
		locked = picked
	}
}

// errRepick: PurgeRuns picked runs whose in-process locks it does not hold;
// it takes them and picks again.
var errRepick = &spec.Error{Code: spec.CodeUnavailable, Message: "purge_runs: picked runs it does not hold yet"}

func subset(a, b []string) bool {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	for _, x := range a {
		if !in[x] {
			return false
		}
	}
	return true
}

// retiredLineages returns up to limit lineages of the tenant every run of
// which is retired at now, each leaf first, in (leaf finished, leaf run id)
// order.
func (w *wtx) retiredLineages(tenant string, by, now int64, limit int) ([][]string, error) {
	s := w.s
	from, to := s.under(famFinished, tenant), s.under(famFinished, tenant, num(by+1))
	var out [][]string
	cursor := from
	for len(out) < limit {
		page := int64(limit - len(out) + 16)
		kvs, err := w.scan(cursor, to, page)
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			if len(out) == limit {
				w.compareRange(from, string(kv.Key)+"\x00")
				return out, nil
			}
			leaf := lastPart(string(kv.Key))
			if _, replayed, err := w.raw(s.replayedByKey(tenant, leaf)); err != nil || replayed {
				if err != nil {
					return nil, err
				}
				continue
			}
			lineage, up := []string{}, leaf
			for up != "" {
				rec, ok, err := w.retired(tenant, up, by, now)
				if err != nil {
					return nil, err
				}
				if !ok {
					lineage = nil // a run of it is not retired: the lineage stays whole
					break
				}
				lineage, up = append(lineage, up), rec.ReplayOf
			}
			if lineage != nil {
				out = append(out, lineage)
			}
		}
		if int64(len(kvs)) < page {
			break
		}
		cursor = string(kvs[len(kvs)-1].Key) + "\x00"
	}
	w.compareRange(from, to)
	return out, nil
}

// retired reads run r and reports whether it is retired at now: terminal,
// finished by by, named by no live idempotency record, and no outbox
// message of it pending.
func (w *wtx) retired(tenant, r string, by, now int64) (runRecord, bool, error) {
	s := w.s
	rec, ok, err := w.getRunRec(tenant, r)
	if err != nil || !ok || !rec.State.Terminal() || rec.FinishedAt > by {
		return rec, false, err
	}
	if rec.IdemKey != "" {
		var idem spec.IdempotencyRecord
		found, err := w.getJSON(s.idemKey(tenant, rec.IdemOperation, rec.IdemKey), &idem)
		if err != nil {
			return rec, false, err
		}
		if found && idem.RunID == r && idem.ExpiresAt > now {
			return rec, false, nil
		}
	}
	p := s.under(famOutbox, tenant, r)
	kvs, err := w.scan(p, end(p), 0)
	if err != nil {
		return rec, false, err
	}
	w.compareRange(p, end(p))
	msgs, err := decodeAll[spec.OutboxMessage](kvs)
	if err != nil {
		return rec, false, err
	}
	for _, m := range msgs {
		if m.State == spec.OutboxPending {
			return rec, false, nil
		}
	}
	return rec, true, nil
}

// deleteRun stages the deletion of a retired run and every record that
// belongs to it; hasReplay says its replay link is deleted too.
func (w *wtx) deleteRun(tenant, r string, hasReplay bool) {
	s := w.s
	rec, _, _ := w.getRunRec(tenant, r) // read (and compared) by retired
	if rec.IdemKey != "" {
		ik := s.idemKey(tenant, rec.IdemOperation, rec.IdemKey)
		var idem spec.IdempotencyRecord
		if found, _ := w.getJSON(ik, &idem); found && idem.RunID == r {
			w.del(ik)
			w.del(s.idemExpiryKey(idem))
		}
	}
	for _, f := range []string{famEvent, famAttempt, famEffect, famOutbox} {
		w.delRange(s.under(f, tenant, r))
	}
	w.del(s.jobKey(tenant, r))
	w.del(s.finishedKey(tenant, rec.FinishedAt, r))
	w.del(s.createdKey(tenant, rec.CreatedAt, r))
	if hasReplay {
		w.del(s.replayedByKey(tenant, r))
	}
	w.del(s.runKey(tenant, r))
}
