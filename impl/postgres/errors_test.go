package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/spec"
)

// safeToRetryErr is an error that claims, as pgconn's do, that nothing was
// sent.
type safeToRetryErr struct{}

func (safeToRetryErr) Error() string     { return "conn closed" }
func (safeToRetryErr) SafeToRetry() bool { return true }

func TestClassifyCommit(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want commitClass
	}{
		{"server answered ROLLBACK", pgx.ErrTxCommitRollback, commitNotApplied},
		{"serialization failure at commit", &pgconn.PgError{Severity: "ERROR", Code: "40001"}, commitNotApplied},
		{"deferred constraint at commit", fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: "ERROR", Code: "23503"}), commitNotApplied},
		{"administrator shutdown (FATAL)", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, commitAmbiguous},
		{"crash (PANIC)", &pgconn.PgError{Severity: "PANIC", Code: "XX000"}, commitAmbiguous},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, commitAmbiguous},
		{"EOF", io.ErrUnexpectedEOF, commitAmbiguous},
		{"caller's deadline while awaiting the answer", context.DeadlineExceeded, commitAmbiguous},
		// pgx returns a safe-to-retry "conn closed" after a sent query's
		// connection died (see classifyCommit): it proves nothing.
		{"safe-to-retry claim", safeToRetryErr{}, commitAmbiguous},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := classifyCommit(c.err); got != c.want {
				t.Fatalf("classifyCommit(%v) = %d, want %d (0 not applied, 1 ambiguous)", c.err, got, c.want)
			}
		})
	}
}

func TestTypedBeforeCommit(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	contract := spec.Errorf(spec.CodeLostLease, "stale")
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want string // in the message; "" for a contract error passed through
	}{
		{"contract error passes through", context.Background(), contract, ""},
		{"serialization failure", context.Background(), &pgconn.PgError{Severity: "ERROR", Code: "40001"}, "serialization failure"},
		{"deadlock", context.Background(), &pgconn.PgError{Severity: "ERROR", Code: "40P01"}, "deadlock"},
		{"lock timeout", context.Background(), &pgconn.PgError{Severity: "ERROR", Code: "55P03"}, "lock_timeout"},
		{"statement timeout", context.Background(), &pgconn.PgError{Severity: "ERROR", Code: "57014"}, "statement cancelled"},
		{"connection failure", context.Background(), &pgconn.PgError{Severity: "FATAL", Code: "08006"}, "connection failure"},
		{"lock table full", context.Background(), &pgconn.PgError{Severity: "ERROR", Code: "53200"}, "max_locks_per_transaction"},
		{"too many connections", context.Background(), &pgconn.PgError{Severity: "FATAL", Code: "53300"}, "out of resources"},
		{"terminated", context.Background(), &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, "terminated"},
		{"unique violation", context.Background(), &pgconn.PgError{Severity: "ERROR", Code: "23505", ConstraintName: "runs_pkey"}, "concurrent write"},
		{"caller's context ended", done, context.Canceled, "context ended"},
		{"statement cancelled because the caller's context ended", done, &pgconn.PgError{Severity: "ERROR", Code: "57014"}, "context ended"},
		{"dropped connection", context.Background(), io.ErrUnexpectedEOF, "connection failed"},
		{"reset connection", context.Background(), &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, "connection failed"},
		{"internal error", context.Background(), errors.New("postgres: invariant violated"), "invariant violated"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := typed(c.ctx, c.err)
			if c.want == "" {
				if got != c.err {
					t.Fatalf("typed(%v) = %v, want the contract error unchanged", c.err, got)
				}
				return
			}
			var e *spec.Error
			if !errors.As(got, &e) || e.Code != spec.CodeUnavailable || !e.Code.Retryable() {
				t.Fatalf("typed(%v) = %v, want a retryable unavailable *spec.Error", c.err, got)
			}
			if !strings.Contains(e.Message, c.want) || !strings.Contains(e.Message, "nothing was written") {
				t.Fatalf("typed(%v) message %q, want it to mention %q and that nothing was written", c.err, e.Message, c.want)
			}
			if !errors.Is(got, c.err) {
				t.Fatalf("typed(%v) does not wrap the cause", c.err)
			}
		})
	}
	if typed(context.Background(), nil) != nil {
		t.Fatal("typed(nil) != nil")
	}
}

// TestCommitFailedWithoutResolution covers the outcomes decided without
// asking the server; the resolution itself is tested on a live server
// (TestBackendKilledBeforeCommit, TestCommitAnswerLost).
func TestCommitFailedWithoutResolution(t *testing.T) {
	s := &Store{log: slog.New(slog.DiscardHandler)}
	cases := []struct {
		name string
		xid  string
		err  error
	}{
		{"server refused the commit", "123", &pgconn.PgError{Severity: "ERROR", Code: "40001"}},
		{"server answered ROLLBACK", "123", pgx.ErrTxCommitRollback},
		{"ambiguous, but the transaction wrote nothing", "", io.ErrUnexpectedEOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.commitFailed(context.Background(), spec.OpComplete, c.xid, c.err)
			if spec.CodeOf(err) != spec.CodeUnavailable || !errors.Is(err, c.err) {
				t.Fatalf("commitFailed(%q, %v) = %v, want unavailable wrapping the cause", c.xid, c.err, err)
			}
		})
	}
}

func TestArgsRefuseMissingParameter(t *testing.T) {
	_, _, err := args{"a": 1}.RewriteQuery(context.Background(), nil, "SELECT @a, @b", nil)
	if err == nil || !strings.Contains(err.Error(), "@b") {
		t.Fatalf("a statement naming a parameter the map lacks: err %v, want an error naming @b", err)
	}
	sql, list, err := args{"a": 1, "extra": 2}.RewriteQuery(context.Background(), nil, "SELECT @a, @a", nil)
	if err != nil || sql != "SELECT $1, $1" || len(list) != 1 {
		t.Fatalf("rewrite = %q, %v, %v; want SELECT $1, $1 with one argument", sql, list, err)
	}
}

// TestArgsRewriteAsPgx: the cached rewriting gives what pgx.NamedArgs gives
// on every call, for the package's busiest statements and for texts with
// casts, literals, comments and repeated names; a second call (from the
// cache) gives it again.
func TestArgsRewriteAsPgx(t *testing.T) {
	texts := []string{insertAdmission, insertAdmissions, claimJobs, lockAdmissions,
		`SELECT @b::text[], '@a is not a parameter', @a -- @c neither
		, @b, "@d"`,
	}
	values := args{}
	for _, text := range texts {
		for _, m := range placeholder.FindAllStringSubmatch(text, -1) {
			values[m[1]] = "value of " + m[1]
		}
	}
	for _, text := range texts {
		wantSQL, wantArgs, err := pgx.NamedArgs(values).RewriteQuery(context.Background(), nil, text, nil)
		if err != nil {
			t.Fatal(err)
		}
		for call := 1; call <= 2; call++ {
			sql, got, err := values.RewriteQuery(context.Background(), nil, text, nil)
			if err != nil || sql != wantSQL || !reflect.DeepEqual(got, wantArgs) {
				t.Fatalf("call %d: rewrite of\n%s\n= %q %v %v\nwant %q %v (pgx.NamedArgs)", call, text, sql, got, err, wantSQL, wantArgs)
			}
		}
	}
}

// TestClaimStatementShowsThePredicate: the claim carries both eligibility
// branches and SKIP LOCKED, and every guarded statement carries the one
// leaseGuard predicate.
func TestClaimStatementShowsThePredicate(t *testing.T) {
	for _, want := range []string{claimDue.pred, claimExpired.pred, "FOR NO KEY UPDATE SKIP LOCKED", "ORDER BY available_at, run_id", "ORDER BY lease_expires_at, run_id"} {
		if !strings.Contains(claimJobs, want) {
			t.Errorf("the claim statement does not contain %q", want)
		}
	}
	for _, q := range []string{renewLease, finishJob, requeueJob, releaseJob, selectGuarded} {
		if !strings.Contains(q, leaseGuard) {
			t.Errorf("guarded statement does not carry leaseGuard:\n%s", q)
		}
	}
}

func TestServerNotReady(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused, true},
		{"connection closed before the startup finished", fmt.Errorf("reading: %w", io.EOF), true},
		{"starting up (57P03)", &pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: "the database system is starting up"}, true},
		{"connection exception (08006)", &pgconn.PgError{Severity: "FATAL", Code: "08006"}, true},
		{"wrong password (28P01)", &pgconn.PgError{Severity: "FATAL", Code: "28P01"}, false},
		{"no such database (3D000)", &pgconn.PgError{Severity: "FATAL", Code: "3D000"}, false},
		{"a migration error", errors.New("syntax error"), false},
		{"wrapped in the store's unavailable", typed(context.Background(), refused), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := serverNotReady(c.err); got != c.want {
				t.Fatalf("serverNotReady(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}
