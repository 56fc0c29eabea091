package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/spec"
)

// querier is what the read helpers need: a transaction of either kind.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

type scanner interface{ Scan(dest ...any) error }

// str returns *p, or "" for SQL NULL.
func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// num returns *p, or 0 for SQL NULL.
func num(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func scanRun(row scanner) (spec.Run, error) {
	var r spec.Run
	var state string
	var errorCode, result, replayOf *string
	err := row.Scan(&r.Tenant, &r.ID, &r.Operation, &state, &r.Version, &r.LastSeq, &r.Payload, &r.Fingerprint,
		&r.MaxAttempts, &errorCode, &result, &r.CreatedAt, &r.DeadlineAt, &replayOf, &r.ReplayDepth)
	r.State, r.ErrorCode, r.Result, r.ReplayOf = spec.RunState(state), str(errorCode), str(result), str(replayOf)
	return r, err
}

func scanJob(row scanner) (spec.Job, error) {
	var j spec.Job
	var state string
	var owner, lastError *string
	var expires *int64
	err := row.Scan(&j.Tenant, &j.RunID, &j.Operation, &state, &j.AvailableAt, &owner, &expires,
		&j.Generation, &j.Attempts, &j.MaxAttempts, &lastError)
	j.State, j.LeaseOwner, j.LeaseExpiresAt, j.LastErrorCode = spec.JobState(state), str(owner), num(expires), str(lastError)
	return j, err
}

func scanEvent(row scanner) (spec.Event, error) {
	var e spec.Event
	var kind string
	err := row.Scan(&e.Tenant, &e.RunID, &e.Seq, &kind, &e.At, &e.Payload)
	e.Kind = spec.EventKind(kind)
	return e, err
}

func scanAttempt(row scanner) (spec.Attempt, error) {
	var a spec.Attempt
	var outcome string
	var finished, retryAt *int64
	var code, class *string
	err := row.Scan(&a.Tenant, &a.RunID, &a.Generation, &a.Number, &a.Worker, &a.ClaimedAt, &a.RenewedAt, &finished,
		&outcome, &code, &class, &retryAt)
	a.Outcome, a.FinishedAt, a.RetryAt = spec.AttemptOutcome(outcome), num(finished), num(retryAt)
	a.ErrorCode, a.ErrorClass = str(code), spec.ErrorClass(str(class))
	return a, err
}

func scanIdempotency(row scanner) (spec.IdempotencyRecord, error) {
	var r spec.IdempotencyRecord
	err := row.Scan(&r.Tenant, &r.Operation, &r.Key, &r.Fingerprint, &r.RunID, &r.CreatedAt, &r.ExpiresAt)
	return r, err
}

func scanEffect(row scanner) (spec.Effect, error) {
	var e spec.Effect
	var state string
	err := row.Scan(&e.Tenant, &e.RunID, &e.Step, &e.Key, &state, &e.ProviderRef, &e.Generation, &e.UpdatedAt)
	e.State = spec.EffectState(state)
	return e, err
}

func scanOutbox(row scanner) (spec.OutboxMessage, error) {
	var m spec.OutboxMessage
	var state string
	var relay *string
	var expires, delivered *int64
	err := row.Scan(&m.Tenant, &m.RunID, &m.Seq, &m.ID, &m.Subject, &m.Payload, &m.Generation, &m.CreatedAt, &state,
		&relay, &expires, &m.Claims, &delivered)
	m.State, m.Relay, m.ClaimExpiresAt, m.DeliveredAt = spec.OutboxState(state), str(relay), num(expires), num(delivered)
	return m, err
}

func notFound(err error, format string, a ...any) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return spec.Errorf(spec.CodeNotFound, format, a...)
	}
	return err
}

func getRun(ctx context.Context, q querier, tenant, runID string) (spec.Run, error) {
	r, err := scanRun(q.QueryRow(ctx, selectRun, args{"tenant": tenant, "run_id": runID}))
	return r, notFound(err, "run %s not found for tenant %s", runID, tenant)
}

func getJob(ctx context.Context, q querier, tenant, runID string) (spec.Job, error) {
	j, err := scanJob(q.QueryRow(ctx, selectJob, args{"tenant": tenant, "run_id": runID}))
	return j, notFound(err, "run %s not found for tenant %s", runID, tenant)
}

func getEffect(ctx context.Context, q querier, tenant, runID, step, key string) (spec.Effect, error) {
	e, err := scanEffect(q.QueryRow(ctx, selectOneEff, args{"tenant": tenant, "run_id": runID, "step": step, "key": key}))
	return e, notFound(err, "no effect %s/#%s for run %s; reserve it first", step, spec.ShortHash(key), runID)
}

func runExists(ctx context.Context, q querier, tenant, runID string) (bool, error) {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM runs WHERE tenant = @tenant AND run_id = @run_id`, args{"tenant": tenant, "run_id": runID}).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func queryAll[T any](ctx context.Context, q querier, scan func(scanner) (T, error), query string, a args) ([]T, error) {
	rows, err := q.Query(ctx, query, a)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
	if out == nil {
		out = []T{}
	}
	return out, err
}

// GetRun implements spec.Store.
func (s *Store) GetRun(ctx context.Context, tenant, runID string) (run spec.Run, err error) {
	if err := s.cfg.CheckRunRef(tenant, runID); err != nil {
		return spec.Run{}, err
	}
	err = s.read(ctx, func(tx pgx.Tx) error {
		run, err = getRun(ctx, tx, tenant, runID)
		return err
	})
	return run, err
}

// GetJob implements spec.Store.
func (s *Store) GetJob(ctx context.Context, tenant, runID string) (job spec.Job, err error) {
	if err := s.cfg.CheckRunRef(tenant, runID); err != nil {
		return spec.Job{}, err
	}
	err = s.read(ctx, func(tx pgx.Tx) error {
		job, err = getJob(ctx, tx, tenant, runID)
		return err
	})
	return job, err
}

// listForRun reads one run's child rows, or CodeNotFound if the run does not
// exist for the tenant.
func listForRun[T any](s *Store, ctx context.Context, tenant, runID string, scan func(scanner) (T, error), query string) (out []T, err error) {
	if err := s.cfg.CheckRunRef(tenant, runID); err != nil {
		return nil, err
	}
	err = s.read(ctx, func(tx pgx.Tx) error {
		if _, err := getRun(ctx, tx, tenant, runID); err != nil {
			return err
		}
		out, err = queryAll(ctx, tx, scan, query, args{"tenant": tenant, "run_id": runID})
		return err
	})
	return out, err
}

// Events implements spec.Store.
func (s *Store) Events(ctx context.Context, tenant, runID string) ([]spec.Event, error) {
	return listForRun(s, ctx, tenant, runID, scanEvent, listEvents)
}

// Attempts implements spec.Store.
func (s *Store) Attempts(ctx context.Context, tenant, runID string) ([]spec.Attempt, error) {
	return listForRun(s, ctx, tenant, runID, scanAttempt, listAttempts)
}

// Effects implements spec.Store.
func (s *Store) Effects(ctx context.Context, tenant, runID string) ([]spec.Effect, error) {
	return listForRun(s, ctx, tenant, runID, scanEffect, listEffects)
}

// Snapshot implements spec.Store. It reads every table in one REPEATABLE READ
// snapshot, so the rows are mutually consistent even under concurrent writes.
func (s *Store) Snapshot(ctx context.Context) (snap spec.Snapshot, err error) {
	err = s.read(ctx, func(tx pgx.Tx) error {
		var err error
		if snap.Runs, err = queryAll(ctx, tx, scanRun, snapRuns, nil); err != nil {
			return err
		}
		if snap.Events, err = queryAll(ctx, tx, scanEvent, snapEvents, nil); err != nil {
			return err
		}
		if snap.Jobs, err = queryAll(ctx, tx, scanJob, snapJobs, nil); err != nil {
			return err
		}
		if snap.Attempts, err = queryAll(ctx, tx, scanAttempt, snapAttempts, nil); err != nil {
			return err
		}
		if snap.Idempotency, err = queryAll(ctx, tx, scanIdempotency, snapIdempKeys, nil); err != nil {
			return err
		}
		if snap.Effects, err = queryAll(ctx, tx, scanEffect, snapEffects, nil); err != nil {
			return err
		}
		snap.Outbox, err = queryAll(ctx, tx, scanOutbox, snapOutbox, nil)
		return err
	})
	return snap, err
}
