package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/leasehold/leasehold/spec"
)

type scanner interface{ Scan(dest ...any) error }

func scanRun(row scanner) (spec.Run, error) {
	var r spec.Run
	var errorCode, result, replayOf sql.NullString
	err := row.Scan(&r.Tenant, &r.ID, &r.Operation, &r.State, &r.Version, &r.LastSeq, &r.Payload, &r.Fingerprint,
		&r.MaxAttempts, &errorCode, &result, &r.CreatedAt, &r.DeadlineAt, &replayOf, &r.ReplayDepth)
	r.ErrorCode, r.Result, r.ReplayOf = errorCode.String, result.String, replayOf.String
	return r, err
}

func scanJob(row scanner) (spec.Job, error) {
	var j spec.Job
	var owner, lastError sql.NullString
	var expires sql.NullInt64
	err := row.Scan(&j.Tenant, &j.RunID, &j.Operation, &j.State, &j.AvailableAt, &owner, &expires,
		&j.Generation, &j.Attempts, &j.MaxAttempts, &lastError)
	j.LeaseOwner, j.LeaseExpiresAt, j.LastErrorCode = owner.String, expires.Int64, lastError.String
	return j, err
}

func scanEvent(row scanner) (spec.Event, error) {
	var e spec.Event
	err := row.Scan(&e.Tenant, &e.RunID, &e.Seq, &e.Kind, &e.At, &e.Payload)
	return e, err
}

func scanAttempt(row scanner) (spec.Attempt, error) {
	var a spec.Attempt
	var finished, retryAt sql.NullInt64
	var code, class sql.NullString
	err := row.Scan(&a.Tenant, &a.RunID, &a.Generation, &a.Number, &a.Worker, &a.ClaimedAt, &a.RenewedAt, &finished,
		&a.Outcome, &code, &class, &retryAt)
	a.FinishedAt, a.RetryAt, a.ErrorCode, a.ErrorClass = finished.Int64, retryAt.Int64, code.String, spec.ErrorClass(class.String)
	return a, err
}

func scanIdempotency(row scanner) (spec.IdempotencyRecord, error) {
	var r spec.IdempotencyRecord
	err := row.Scan(&r.Tenant, &r.Operation, &r.Key, &r.Fingerprint, &r.RunID, &r.CreatedAt, &r.ExpiresAt)
	return r, err
}

func scanEffect(row scanner) (spec.Effect, error) {
	var e spec.Effect
	err := row.Scan(&e.Tenant, &e.RunID, &e.Step, &e.Key, &e.State, &e.ProviderRef, &e.Generation, &e.UpdatedAt)
	return e, err
}

func scanOutbox(row scanner) (spec.OutboxMessage, error) {
	var m spec.OutboxMessage
	var relay sql.NullString
	var expires, delivered sql.NullInt64
	err := row.Scan(&m.Tenant, &m.RunID, &m.Seq, &m.ID, &m.Subject, &m.Payload, &m.Generation, &m.CreatedAt, &m.State,
		&relay, &expires, &m.Claims, &delivered)
	m.Relay, m.ClaimExpiresAt, m.DeliveredAt = relay.String, expires.Int64, delivered.Int64
	return m, err
}

func notFound(err error, format string, a ...any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return spec.Errorf(spec.CodeNotFound, format, a...)
	}
	return err
}

func getRun(ctx context.Context, tx *txn, tenant, runID string) (spec.Run, error) {
	r, err := scanRun(tx.QueryRowContext(ctx, `SELECT `+runColumns+` FROM runs WHERE tenant = ? AND run_id = ?`, tenant, runID))
	return r, notFound(err, "run %s not found for tenant %s", runID, tenant)
}

func getJob(ctx context.Context, tx *txn, tenant, runID string) (spec.Job, error) {
	j, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE tenant = ? AND run_id = ?`, tenant, runID))
	return j, notFound(err, "run %s not found for tenant %s", runID, tenant)
}

func getEffect(ctx context.Context, tx *txn, tenant, runID, step, key string) (spec.Effect, error) {
	e, err := scanEffect(tx.QueryRowContext(ctx, `SELECT `+effectColumns+` FROM effects
		WHERE tenant = ? AND run_id = ? AND step = ? AND effect_key = ?`, tenant, runID, step, key))
	return e, notFound(err, "no effect %s/#%s for run %s; reserve it first", step, spec.ShortHash(key), runID)
}

func runExists(ctx context.Context, tx *txn, tenant, runID string) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE tenant = ? AND run_id = ?`, tenant, runID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func queryAll[T any](ctx context.Context, tx *txn, scan func(scanner) (T, error), query string, a ...any) ([]T, error) {
	rows, err := tx.QueryContext(ctx, query, a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// GetRun implements spec.Store.
func (s *Store) GetRun(ctx context.Context, tenant, runID string) (run spec.Run, err error) {
	if err := s.cfg.CheckRunRef(tenant, runID); err != nil {
		return spec.Run{}, err
	}
	err = s.read(ctx, func(tx *txn) error {
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
	err = s.read(ctx, func(tx *txn) error {
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
	err = s.read(ctx, func(tx *txn) error {
		if _, err := getRun(ctx, tx, tenant, runID); err != nil {
			return err
		}
		out, err = queryAll(ctx, tx, scan, query, tenant, runID)
		return err
	})
	return out, err
}

// Events implements spec.Store.
func (s *Store) Events(ctx context.Context, tenant, runID string) ([]spec.Event, error) {
	return listForRun(s, ctx, tenant, runID, scanEvent, selectRunEvents)
}

// Attempts implements spec.Store.
func (s *Store) Attempts(ctx context.Context, tenant, runID string) ([]spec.Attempt, error) {
	return listForRun(s, ctx, tenant, runID, scanAttempt,
		`SELECT `+attemptColumns+` FROM attempts WHERE tenant = ? AND run_id = ? ORDER BY generation`)
}

// Effects implements spec.Store.
func (s *Store) Effects(ctx context.Context, tenant, runID string) ([]spec.Effect, error) {
	return listForRun(s, ctx, tenant, runID, scanEffect,
		`SELECT `+effectColumns+` FROM effects WHERE tenant = ? AND run_id = ? ORDER BY step, effect_key`)
}

// Snapshot implements spec.Store.
func (s *Store) Snapshot(ctx context.Context) (snap spec.Snapshot, err error) {
	err = s.read(ctx, func(tx *txn) error {
		var err error
		if snap.Runs, err = queryAll(ctx, tx, scanRun, `SELECT `+runColumns+` FROM runs ORDER BY tenant, run_id`); err != nil {
			return err
		}
		if snap.Events, err = queryAll(ctx, tx, scanEvent, selectAllEvents); err != nil {
			return err
		}
		if snap.Jobs, err = queryAll(ctx, tx, scanJob, `SELECT `+jobColumns+` FROM jobs ORDER BY tenant, run_id`); err != nil {
			return err
		}
		if snap.Attempts, err = queryAll(ctx, tx, scanAttempt, `SELECT `+attemptColumns+` FROM attempts ORDER BY tenant, run_id, generation`); err != nil {
			return err
		}
		if snap.Idempotency, err = queryAll(ctx, tx, scanIdempotency, selectAllIdempotency); err != nil {
			return err
		}
		if snap.Effects, err = queryAll(ctx, tx, scanEffect, `SELECT `+effectColumns+` FROM effects ORDER BY tenant, run_id, step, effect_key`); err != nil {
			return err
		}
		snap.Outbox, err = queryAll(ctx, tx, scanOutbox, `SELECT `+outboxColumns+` FROM outbox ORDER BY tenant, run_id, seq`)
		return err
	})
	return snap, err
}
