package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/spec"
)

// typed turns an error met before COMMIT was sent into a *spec.Error. A
// *spec.Error (a contract outcome) passes through. Everything else is
// CodeUnavailable: the transaction did not commit (it was rolled back, or its
// connection is gone and the server rolls it back), so nothing was written
// and the caller may retry. The message says what kind of failure it was.
func typed(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var e *spec.Error
	if errors.As(err, &e) {
		return err
	}
	return &spec.Error{Code: spec.CodeUnavailable, Message: unavailableReason(ctx, err) + "; nothing was written, retry", Err: err}
}

// unavailableReason names the failure for CodeUnavailable's message. The
// caller's context comes first: when it ended, whatever the driver reports
// (a cancelled statement, a closed connection) is a consequence.
func unavailableReason(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return "the caller's context ended before the operation finished"
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "40001":
			return "serialization failure"
		case pe.Code == "40P01":
			return "deadlock detected"
		case pe.Code == "55P03":
			return "lock not available (lock_timeout)"
		case pe.Code == "57014":
			return "statement cancelled (statement_timeout or a cancel request)"
		case pe.Code == "25P03":
			return "idle-in-transaction timeout"
		case len(pe.Code) == 5 && pe.Code[:2] == "08":
			return "connection failure reported by the server"
		case pe.Code == "53200":
			// Most often the shared lock table: a bulk admission that raced
			// a concurrent one runs again holding one advisory lock per
			// idempotency scope until it commits (admitAll).
			return "the server is out of shared memory (53200), most likely its lock table: a bulk admission that raced concurrent ones of its keys runs again holding one lock per member until it commits; send smaller or fewer concurrent batches of overlapping keys, or raise max_locks_per_transaction"
		case len(pe.Code) == 5 && pe.Code[:2] == "53":
			return "the server is out of resources (" + pe.Code + ")"
		case len(pe.Code) == 5 && pe.Code[:3] == "57P":
			return "the server is shutting down or terminated the connection (" + pe.Code + ")"
		case len(pe.Code) == 5 && pe.Code[:2] == "23":
			return "a concurrent write conflicted (" + pe.Code + " " + pe.ConstraintName + ")"
		}
		return "the database failed the statement (" + pe.Code + ")"
	}
	if pgconn.Timeout(err) {
		return "the database did not answer in time"
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	if errors.As(err, &netErr) || errors.As(err, &connectErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) {
		return "the database connection failed"
	}
	return "the operation failed (" + err.Error() + ")"
}

// serverNotReady reports whether err says that the server cannot be
// reached or does not accept connections yet, as while it starts, restarts
// or recovers: a connection refused, reset or closed before it was
// established, or a server error of class 08 (connection exception) or
// 57P03 (cannot_connect_now). A server that answered with any other error
// (a wrong password, a missing database) is ready, and the error is not
// worth waiting out.
func serverNotReady(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "57P03" || strings.HasPrefix(pe.Code, "08")
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// commitClass is what a failed COMMIT tells the client.
type commitClass int

const (
	// commitNotApplied: the transaction certainly did not commit.
	commitNotApplied commitClass = iota
	// commitAmbiguous: COMMIT may have reached the server and succeeded.
	commitAmbiguous
)

// classifyCommit decides what an error returned by COMMIT proves.
//
//   - pgx.ErrTxCommitRollback: the server answered ROLLBACK (the transaction
//     had already failed): not applied.
//   - A server error of severity ERROR (a serialization failure, a deferred
//     constraint): the server refused the commit and rolled back: not
//     applied.
//   - Anything else is ambiguous: a FATAL or PANIC server error
//     (administrator shutdown, crash) may come after the commit was recorded;
//     a connection reset, a timeout or the caller's context ending while the
//     answer was awaited says nothing about the server.
//
// pgconn.SafeToRetry is deliberately not consulted. It is meant to say "no
// byte was sent", but pgx v5.12 returns a safe-to-retry "conn closed" error
// when the connection dies while a sent query's answer is being read
// (MultiResultReader.NextResult ignores the read error and then finds the
// connection closed). TestCommitAnswerLost reproduced it: a COMMIT that had
// applied was reported as safe to retry. The server is asked instead (see
// resolveCommit).
func classifyCommit(err error) commitClass {
	if errors.Is(err, pgx.ErrTxCommitRollback) {
		return commitNotApplied
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Severity != "FATAL" && pe.Severity != "PANIC" {
		return commitNotApplied
	}
	return commitAmbiguous
}

// markCommit is run just before COMMIT. If the transaction wrote anything
// (it has a transaction id), it returns that id and takes a
// transaction-scoped advisory lock derived from it. The lock is released only
// when the transaction ends, after its commit or abort is recorded; a
// resolver that waits for it, then asks pg_xact_status, gets the final
// answer even when the failed connection's backend is still finishing. A
// transaction with no id wrote nothing, and its COMMIT cannot change
// anything. The key (markLockClass, low 32 bits of the id) is unique among
// running transactions; pg_try_ never waits, and false only means that
// resolution will not wait.
const markCommitQuery = `SELECT x::text, pg_try_advisory_xact_lock(` + markLockClass + `, ` + markLockKey + `)
	FROM (SELECT pg_current_xact_id_if_assigned() AS x) AS current
	WHERE x IS NOT NULL`

const (
	// markLockClass is the first key of the commit-marker advisory lock
	// (ASCII "lhcm"). The two-int4 form never collides with the one-bigint
	// locks this package takes (migration, admission): PostgreSQL keeps the
	// two forms apart.
	markLockClass = `1819833197`
	// markLockKey maps an xid8 (in x) to the second int4 key.
	markLockKey = `((x::text::bigint % 4294967296) - 2147483648)::int4`
)

func markCommit(ctx context.Context, tx pgx.Tx) (xid string, err error) {
	var locked bool
	err = tx.QueryRow(ctx, markCommitQuery).Scan(&xid, &locked)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return xid, err
}

// resolveQueries wait for the transaction to end (its marker lock), then read
// its status: committed, aborted, in progress, or NULL when it is too old to
// know.
const (
	resolveWait   = `SELECT pg_advisory_xact_lock_shared(` + markLockClass + `, ` + markLockKeyParam + `)`
	resolveStatus = `SELECT pg_xact_status(@xid::text::xid8)`
	// markLockKeyParam is markLockKey for the parameter @xid.
	markLockKeyParam = `((@xid::text::bigint % 4294967296) - 2147483648)::int4`
)

// commitFailed decides the outcome of an operation whose COMMIT returned err.
func (s *Store) commitFailed(ctx context.Context, op spec.Op, xid string, err error) error {
	if classifyCommit(err) == commitNotApplied {
		return &spec.Error{Code: spec.CodeUnavailable, Message: fmt.Sprintf("%s: the commit failed and the transaction was rolled back; nothing was written, retry", op), Err: err}
	}
	if xid == "" {
		return &spec.Error{Code: spec.CodeUnavailable, Message: fmt.Sprintf("%s: the connection failed during a commit that had nothing to write; nothing was written, retry", op), Err: err}
	}
	status, rerr := s.resolveCommit(ctx, xid)
	switch status {
	case "committed":
		s.log.WarnContext(ctx, "commit answer lost; the server reports the transaction committed", "op", op, "xid", xid, "err", err)
		return nil
	case "aborted":
		s.log.WarnContext(ctx, "commit answer lost; the server reports the transaction aborted", "op", op, "xid", xid, "err", err)
		return &spec.Error{Code: spec.CodeUnavailable, Message: fmt.Sprintf("%s: the connection failed during commit and the server reports transaction %s aborted; nothing was written, retry", op, xid), Err: err}
	}
	why := fmt.Sprintf("the server reports it %q", status)
	if rerr != nil {
		why = "asking the server failed: " + rerr.Error()
	}
	s.log.WarnContext(ctx, "commit outcome unknown", "op", op, "xid", xid, "err", err, "why", why)
	return &spec.Error{Code: spec.CodeUnknownOutcome,
		Message: fmt.Sprintf("%s: the connection failed after COMMIT was sent and the outcome of transaction %s could not be established (%s); it may or may not have been applied: read back before acting", op, xid, why),
		Err:     err}
}

// resolveCommit asks the server, on a fresh connection, what became of
// transaction xid. It waits (at most ResolveTimeout, even if the caller's
// context is done) until the transaction has ended.
func (s *Store) resolveCommit(ctx context.Context, xid string) (status string, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.resolveTimeout)
	defer cancel()
	var st *string
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, resolveWait, args{"xid": xid}); err != nil {
			return err
		}
		return tx.QueryRow(ctx, resolveStatus, args{"xid": xid}).Scan(&st)
	})
	if err != nil {
		return "", err
	}
	if st == nil {
		return "too old to know", nil
	}
	return *st, nil
}

// errRaced marks an admission that found a row it decided from gone by the
// time it wrote (see raced).
var errRaced = errors.New("postgres: a concurrent admission or purge changed what this one read")

// raced reports whether err is an admission's abort, before its commit
// (nothing written), on a concurrent admission of one of its scopes or run
// ids that did not wait for its admission locks (admitAll), or a purge of
// runs (which takes none): an expired record already deleted, a replayed
// run gone or holding the record no more, a run decided from found changed
// by the lock of lockDecidedRuns (errRaced), the unique violation of a run's key,
// a scope's record or a job's key, or the deadlock of two batches that each
// took a key of the other's.
func raced(err error) bool {
	if errors.Is(err, errRaced) {
		return true
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch {
	case pe.Code == "40P01":
		return true
	case pe.Code == "23505":
		return pe.ConstraintName == "runs_pkey" || pe.ConstraintName == "runs_idempotency" || pe.ConstraintName == "jobs_pkey"
	}
	return false
}
