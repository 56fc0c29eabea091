package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/hang"
)

// Lock-wait barriers. A test that needs a call to wait for a lock another
// client holds (or to go ahead without waiting for it) watches
// pg_stat_activity for that one wait: a backend of the waiting client
// blocked by a backend of the holding client (pg_blocking_pids). A wait on
// anything else is not it: every committing transaction that notifies
// takes the server's one notification-queue lock, so under load a call
// waits a moment for another test's commit, which a check of
// wait_event_type alone took for the wait it was after. Clients are told
// apart by their application_name, which each test makes unique (parallel
// runs share the server).

// uniqueName is name made unique to the test's schema.
func uniqueName(name, schema string) string { return name + "-" + schema[len(schema)-8:] }

// nameConn sets the application_name of a plain connection, so that a
// barrier can name it as the holder of a lock.
func nameConn(ctx context.Context, t *testing.T, conn *pgx.Conn, name string) {
	t.Helper()
	if _, err := conn.Exec(ctx, "SELECT set_config('application_name', $1, false)", name); err != nil {
		t.Fatalf("name the connection %s: %v", name, err)
	}
}

// blockedBy reports whether a backend named waiter waits for a lock a
// backend named holder holds.
func blockedBy(ctx context.Context, t *testing.T, watcher *pgx.Conn, waiter, holder string) bool {
	t.Helper()
	var n int
	if err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity w
		WHERE w.application_name = $1 AND EXISTS (SELECT 1 FROM pg_stat_activity h
			WHERE h.application_name = $2 AND h.pid = ANY (pg_blocking_pids(w.pid)))`, waiter, holder).Scan(&n); err != nil {
		t.Fatalf("watch %s wait for %s: %v", waiter, holder, err)
	}
	return n > 0
}

// waitsOrReturns follows a call of the client named waiter whose result
// done delivers: it returns waited once the call waits for a lock the
// client named holder holds, or the result once done delivers it first
// (the call went ahead without waiting for holder). Neither within the
// patience is a hang, and fails t.
func waitsOrReturns[T any](ctx context.Context, t *testing.T, watcher *pgx.Conn, waiter, holder string, done <-chan T) (waited bool, result T) {
	t.Helper()
	hang.Until(t, waiter+" to wait for "+holder+"'s lock or return", func() bool {
		select {
		case result = <-done:
			return true
		default:
		}
		waited = blockedBy(ctx, t, watcher, waiter, holder)
		return waited
	})
	return waited, result
}

// awaitBlocked waits until the client named waiter waits for a lock the
// client named holder holds; a result from done first fails t with
// returned (the call did not wait, and had to).
func awaitBlocked[T any](ctx context.Context, t *testing.T, watcher *pgx.Conn, waiter, holder string, done <-chan T, returned string) {
	t.Helper()
	if waited, r := waitsOrReturns(ctx, t, watcher, waiter, holder, done); !waited {
		t.Fatalf("%s: it returned %+v", returned, r)
	}
}
