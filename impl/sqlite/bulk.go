package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/leasehold/leasehold/spec"
)

var _ spec.BatchCreator = (*Store)(nil)

// CreateRuns implements spec.BatchCreator: one BEGIN IMMEDIATE transaction,
// one clock reading, and for each member, in order, exactly CreateRun's
// checks and writes (createIn), each seeing the members before it. A member
// refused by a contract check wrote nothing before it was refused (createIn
// refuses before its first write), so it is recorded in its outcome and the
// transaction goes on with the next member; any other error rolls the whole
// batch back.
func (s *Store) CreateRuns(ctx context.Context, reqs []spec.CreateRunRequest) (outcomes []spec.CreateOutcome, err error) {
	if len(reqs) == 0 {
		return []spec.CreateOutcome{}, nil
	}
	if len(reqs) > spec.MaxBatch {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "a batch of %d admissions is over the limit of %d", len(reqs), spec.MaxBatch)
	}
	err = s.write(ctx, spec.OpCreateRuns, func(tx *sql.Tx, now int64) error {
		// A broken clock must not write, for any member.
		if err := spec.CheckNow(now); err != nil {
			return err
		}
		// write may run fn again after a busy database: build afresh.
		outcomes = make([]spec.CreateOutcome, len(reqs))
		ptx := &preparedTx{Tx: tx, stmts: map[string]*sql.Stmt{}}
		for i, req := range reqs {
			res, err := s.createIn(ctx, ptx, req, now, true)
			var se *spec.Error
			switch {
			case err == nil:
				outcomes[i].Result = res
			case errors.As(err, &se):
				outcomes[i].Err = err
			default:
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}

// dbtx is what the statements of an operation run on: its *sql.Tx, or a
// preparedTx over it.
type dbtx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// preparedTx runs a transaction's statements as prepared statements, each
// prepared once for the transaction: a bulk admission runs the same few
// statements for every member, and parsing them again for each took half
// of its time. The statements are closed when the transaction ends.
type preparedTx struct {
	*sql.Tx
	stmts map[string]*sql.Stmt
}

func (p *preparedTx) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := p.stmts[query]; ok {
		return st, nil
	}
	st, err := p.Tx.PrepareContext(ctx, query)
	if err == nil {
		p.stmts[query] = st
	}
	return st, err
}

// ExecContext implements dbtx.
func (p *preparedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// QueryContext implements dbtx.
func (p *preparedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext implements dbtx. A statement that does not prepare runs
// unprepared, so that its error comes back through the row.
func (p *preparedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return p.Tx.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}
