package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/spec"
)

// poisonTx makes the caller's transaction unable to commit: it raises an
// error inside it, after which PostgreSQL refuses every statement and turns
// COMMIT into ROLLBACK (pgx reports pgx.ErrTxCommitRollback).
const poisonTx = `DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'P0001',
	MESSAGE = 'leasehold: the job completion in this transaction was refused; the transaction must roll back'; END $$`

// CompleteTx completes req's run inside the caller's transaction (ADR-042):
// the application's own writes in tx and the job's completion commit
// together, when the caller commits tx, or not at all.
//
// It makes exactly Complete's checks and writes: the job row is locked, the
// store's clock read once (the database clock, inside tx, unless an injected
// clock was configured), and the guarded transition applied. When the lease
// is not current it returns the lease error (lost_lease, cancelled,
// already_terminal, as Complete would) — and on every error it leaves tx
// aborted, so that a caller who ignores the error and commits anyway gets a
// rollback: a refused completion and the application's writes can never
// commit one without the other. Roll tx back on any error.
//
// tx may come from any connection to the store's database, whatever its
// search_path: the store's statements run with the store's schema on the
// path and the caller's setting is restored before CompleteTx returns. The
// store's hooks do not run (the caller commits), and a commit whose answer
// is lost is the caller's to resolve: read the run back before acting. Call
// it at most once per transaction and do not use tx concurrently.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, req spec.CompleteRequest) (run spec.Run, err error) {
	defer func() {
		if err != nil {
			poison(ctx, tx)
		}
	}()
	if err := s.precheck(func(now int64) error { _, err := s.cfg.CheckComplete(req, now); return err }); err != nil {
		return run, err
	}
	var saved string
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.current_setting('search_path')`).Scan(&saved); err != nil {
		return run, typed(ctx, err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('search_path', $1, true)`, pgx.Identifier{s.schema}.Sanitize()); err != nil {
		return run, typed(ctx, err)
	}
	t := &txn{Tx: tx, ctx: ctx, s: s}
	now, err := t.lockedNow(req.Lease.Tenant, req.Lease.RunID)
	if err != nil {
		return run, typed(ctx, err)
	}
	if run, err = s.completeIn(t, req, now); err != nil {
		return spec.Run{}, typed(ctx, err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('search_path', $1, true)`, saved); err != nil {
		return spec.Run{}, typed(ctx, err)
	}
	return run, nil
}

// poison leaves tx aborted (see poisonTx). It runs even when ctx is done; if
// the statement cannot be sent the connection is gone and the server rolls
// the transaction back anyway.
func poison(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = tx.Exec(ctx, poisonTx)
}
