package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/spec"
)

// Faults on a real server: a backend killed before COMMIT, a COMMIT whose
// answer is lost (through commitProxy), lock waits cut short by the caller's
// deadline or lock_timeout, and a deadlock. Each must surface as the right
// typed error (unavailable: nothing written, retry; unknown_outcome: read
// back), never as a silent success or a raw driver error.

// faultEnv is one store on a fresh schema, with a run r1 claimed (lease) and
// a run r2 queued, and an admin connection.
type faultEnv struct {
	t      *testing.T
	dsn    string
	schema string
	app    string // the store's application_name, to find its backends
	clk    *clock.Manual
	store  *postgres.Store
	admin  *pgx.Conn
	lease  spec.Lease
}

// newFaultEnv opens the store with hook (which may be nil) on dsn (which may
// be a proxy's).
func newFaultEnv(t *testing.T, dsn, schema string, hook spec.Hook) *faultEnv {
	t.Helper()
	e := &faultEnv{t: t, dsn: dsn, schema: schema, app: "lh-fault-" + schema[len(schema)-8:], clk: clock.NewManual(t0)}
	e.store = openOn(t, dsn, schema, postgres.Options{Clock: e.clk, Hook: hook, ApplicationName: e.app, MaxConns: 2,
		ResolveTimeout: 20 * time.Second})
	createRuns(t, e.store, e.clk, 3, "r1", "r2")
	leases, err := e.store.Claim(context.Background(), spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 600_000, Limit: 1})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim r1: %v, %v", runIDs(leases), err)
	}
	e.lease = leases[0]
	return e
}

func (e *faultEnv) snapshot() spec.Snapshot {
	e.t.Helper()
	snap, err := e.store.Snapshot(context.Background())
	if err != nil {
		e.t.Fatalf("snapshot: %v", err)
	}
	return snap
}

// faultOps are the writing operations the fault tests interrupt, each run
// against a faultEnv.
var faultOps = []struct {
	name string
	op   spec.Op
	run  func(e *faultEnv) error
}{
	{"create", spec.OpCreateRun, func(e *faultEnv) error {
		_, err := e.store.CreateRun(context.Background(), spec.CreateRunRequest{Tenant: "acme", Operation: "work",
			IdempotencyKey: "key-r9", RunID: "r9", Payload: []byte(`{}`)})
		return err
	}},
	{"claim", spec.OpClaim, func(e *faultEnv) error {
		_, err := e.store.Claim(context.Background(), spec.ClaimRequest{Tenant: "acme", Worker: "w2", LeaseMs: 60_000, Limit: 5})
		return err
	}},
	{"complete", spec.OpComplete, func(e *faultEnv) error {
		_, err := e.store.Complete(context.Background(), spec.CompleteRequest{Lease: e.lease.Ref(), Result: []byte(`{"ok":true}`)})
		return err
	}},
	{"retry", spec.OpRetry, func(e *faultEnv) error {
		_, err := e.store.Retry(context.Background(), spec.RetryRequest{Lease: e.lease.Ref(), ErrorCode: "flaky"})
		return err
	}},
	{"cancel", spec.OpCancel, func(e *faultEnv) error {
		_, err := e.store.Cancel(context.Background(), spec.CancelRequest{Tenant: "acme", RunID: "r1"})
		return err
	}},
	{"reserve_effect", spec.OpReserveEffect, func(e *faultEnv) error {
		_, err := e.store.ReserveEffect(context.Background(), spec.ReserveEffectRequest{Lease: e.lease.Ref(), Step: "pay", Key: "k1"})
		return err
	}},
}

// onceAt returns a hook that runs f the first time op reaches point.
func onceAt(op spec.Op, point spec.HookPoint, f func(ctx context.Context) error) spec.Hook {
	done := false
	return func(ctx context.Context, o spec.Op, p spec.HookPoint) error {
		if o != op || p != point || done {
			return nil
		}
		done = true
		return f(ctx)
	}
}

// TestBackendKilledBeforeCommit: at BeforeCommit (every write done, COMMIT
// not sent) the store's own backend is terminated from another connection,
// and the hook lets the store go on to COMMIT on the dead connection. The
// operation must fail as unavailable, nothing may be written, and the same
// call must then succeed.
func TestBackendKilledBeforeCommit(t *testing.T) {
	for _, c := range faultOps {
		t.Run(c.name, func(t *testing.T) {
			dsn, schema := pgtest.Schema(t)
			var e *faultEnv
			kill := onceAt(c.op, spec.BeforeCommit, func(ctx context.Context) error {
				// pg_terminate_backend with a timeout waits until the backend
				// has exited, so the store's COMMIT certainly meets a dead
				// connection.
				var killed []bool
				rows, err := e.admin.Query(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
					WHERE application_name = $1 AND state = 'idle in transaction'`, e.app)
				if err == nil {
					killed, err = pgx.CollectRows(rows, pgx.RowTo[bool])
				}
				if err != nil || len(killed) != 1 || !killed[0] {
					return fmt.Errorf("test: terminate the store's backend in transaction: got %v, %v; want exactly one terminated", killed, err)
				}
				return nil
			})
			armed := false
			e = newFaultEnv(t, dsn, schema, func(ctx context.Context, op spec.Op, p spec.HookPoint) error {
				if !armed {
					return nil
				}
				return kill(ctx, op, p)
			})
			e.admin = pgtest.Conn(t, dsn, schema)
			before := e.snapshot()
			armed = true
			err := c.run(e)
			if spec.CodeOf(err) != spec.CodeUnavailable || strings.Contains(err.Error(), "test: terminate") {
				t.Fatalf("%s on a backend killed before COMMIT: got %v; want unavailable", c.name, err)
			}
			t.Logf("%s: %v", c.name, err)
			if after := e.snapshot(); !reflect.DeepEqual(before, after) {
				t.Fatalf("%s was reported unavailable but the store changed:\nbefore %+v\nafter  %+v", c.name, before, after)
			}
			if err := c.run(e); err != nil {
				t.Fatalf("%s retried after unavailable: %v; want success (unavailable is retryable)", c.name, err)
			}
		})
	}
}

// TestCommitAnswerLost: the COMMIT reaches the server and commits, and the
// connection dies before the answer arrives (commitProxy). With the server
// still reachable the store asks it what became of the transaction and
// reports the truth: success. With the server unreachable it cannot know and
// must say unknown_outcome; reading back later shows the write applied.
func TestCommitAnswerLost(t *testing.T) {
	for _, c := range faultOps {
		t.Run(c.name, func(t *testing.T) {
			for _, mode := range []int32{armLoseAnswer, armLoseAnswerAndServer} {
				dsn, schema := pgtest.Schema(t)
				proxy, viaProxy := newCommitProxy(t, dsn)
				armed := false
				e := newFaultEnv(t, viaProxy, schema, func(ctx context.Context, op spec.Op, p spec.HookPoint) error {
					if armed && op == c.op && p == spec.BeforeCommit {
						armed = false
						proxy.armed.Store(mode)
					}
					return nil
				})
				direct := openOn(t, dsn, schema, postgres.Options{Clock: e.clk})
				before, err := direct.Snapshot(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				armed = true
				err = c.run(e)
				if proxy.cuts.Load() != 1 {
					t.Fatalf("%s: the proxy lost %d COMMIT answers, want 1 (the test did not do what it says)", c.name, proxy.cuts.Load())
				}
				after, serr := direct.Snapshot(context.Background())
				if serr != nil {
					t.Fatal(serr)
				}
				if reflect.DeepEqual(before, after) {
					t.Fatalf("%s: the COMMIT whose answer was lost did not apply; the test meant it to", c.name)
				}
				switch mode {
				case armLoseAnswer:
					if err != nil {
						t.Fatalf("%s with its COMMIT answer lost and the server reachable: %v; want success (the store should ask the server)", c.name, err)
					}
				case armLoseAnswerAndServer:
					if spec.CodeOf(err) != spec.CodeUnknownOutcome {
						t.Fatalf("%s with its COMMIT answer lost and the server unreachable: %v; want unknown_outcome", c.name, err)
					}
					t.Logf("%s: %v", c.name, err)
				}
			}
		})
	}
}

// TestLockWaitCutShort: a guarded write waits for its job's row lock (it
// must, to be ordered against the holder). When the wait is cut short, by
// the caller's context deadline or by the session's lock_timeout, the write
// is unavailable, nothing is written, and once the lock is gone the same call
// succeeds.
func TestLockWaitCutShort(t *testing.T) {
	cases := []struct {
		name   string
		params map[string]string
		cancel bool   // the caller's context ends once the write waits for the lock
		want   string // in the message
	}{
		{"caller's context ends", nil, true, "context ended"},
		{"lock_timeout", map[string]string{"lock_timeout": "100ms"}, false, "lock_timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dsn, schema := pgtest.Schema(t)
			clk := clock.NewManual(t0)
			app, holderName := uniqueName("lh-cut-short", schema), uniqueName("lh-holder", schema)
			s := openOn(t, dsn, schema, postgres.Options{Clock: clk, RuntimeParams: c.params, ApplicationName: app})
			createRuns(t, s, clk, 3, "r1")
			leases, err := s.Claim(context.Background(), spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 600_000, Limit: 1})
			if err != nil || len(leases) != 1 {
				t.Fatalf("claim: %v, %v", runIDs(leases), err)
			}
			holder := pgtest.Conn(t, dsn, schema)
			nameConn(context.Background(), t, holder, holderName)
			tx, err := holder.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(context.Background(), `SELECT 1 FROM jobs WHERE tenant = 'acme' AND run_id = 'r1' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			completed := make(chan error, 1)
			go func() {
				_, err := s.Complete(ctx, spec.CompleteRequest{Lease: leases[0].Ref()})
				completed <- err
			}()
			if c.cancel {
				awaitBlocked(context.Background(), t, pgtest.Conn(t, dsn, schema), app, holderName, completed,
					"the completion returned while its job was locked elsewhere")
				cancel()
			}
			err = hang.Wait(t, completed, "the completion's wait for the lock to be cut short")
			if spec.CodeOf(err) != spec.CodeUnavailable || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("complete while the job row is locked elsewhere: %v; want unavailable mentioning %q", err, c.want)
			}
			if err := tx.Rollback(context.Background()); err != nil {
				t.Fatal(err)
			}
			if run, err := s.Complete(context.Background(), spec.CompleteRequest{Lease: leases[0].Ref()}); err != nil || run.State != spec.RunCompleted {
				t.Fatalf("complete after the lock was released: %+v, %v; want completed (the failed call wrote nothing)", run, err)
			}
		})
	}
}

// TestDeadlockIsUnavailable: a foreign client that writes an attempt row of
// a job before it locks the job (the opposite of the store's order) can
// deadlock with a claim. The foreign client inserts r1's attempt of
// generation 1; the claim reclaims r1's expired lease, holds the job and, filing
// the superseded attempt of generation 1, waits for the foreign insert to
// end; the client then waits for the job. PostgreSQL breaks the cycle by
// aborting the transaction whose deadlock check finds it first: the claim
// must be unavailable, and succeed when retried.
//
// A backend looks for a deadlock once, deadlock_timeout after its wait
// began. The claim's must fire after the client's wait began, which a
// loaded machine may delay past any fixed timeout; the client's is four
// times the claim's, so that it never looks first when the claim's check
// finds the cycle (the client began to wait after the claim). A round in
// which the claim's check came first (it found no cycle, waited on, and the
// client's own check aborted the client) proves nothing either way: it is
// played again with both timeouts doubled, until the claim is the one
// aborted.
func TestDeadlockIsUnavailable(t *testing.T) {
	for timeout := time.Second; ; timeout *= 2 {
		if timeout > hang.Patience() {
			t.Fatal(hang.Message("a round in which the claim's deadlock check ran after the foreign client's wait began", hang.Patience()))
		}
		claimErr, foreignErr, retry := deadlockRound(t, timeout)
		var pe interface{ SQLState() string }
		if spec.CodeOf(claimErr) != spec.CodeUnavailable && errors.As(foreignErr, &pe) && pe.SQLState() == "40P01" {
			t.Logf("the claim's deadlock check (after %s) ran before the foreign client waited: the client was aborted instead; again", timeout)
			continue
		}
		if spec.CodeOf(claimErr) != spec.CodeUnavailable || !errors.As(claimErr, &pe) || pe.SQLState() != "40P01" {
			t.Fatalf("claim in a deadlock: %v; want unavailable caused by 40P01 (the foreign client got %v)", claimErr, foreignErr)
		}
		if foreignErr != nil {
			t.Fatalf("the foreign client, not the claim, should have survived the deadlock: %v", foreignErr)
		}
		retry()
		return
	}
}

// deadlockRound plays TestDeadlockIsUnavailable's deadlock once, on a fresh
// schema, with the claim's sessions at deadlock_timeout timeout: what the
// claim and the foreign client's lock of the job returned, and a function
// that checks the claim, retried after the client rolled back, reclaims r1.
func deadlockRound(t *testing.T, timeout time.Duration) (claimErr, foreignErr error, retry func()) {
	ctx, cancel := hang.Context(context.Background())
	t.Cleanup(cancel)
	dsn, schema := pgtest.Schema(t)
	clk := clock.NewManual(t0)
	app, foreignName := uniqueName("lh-deadlock", schema), uniqueName("lh-foreign", schema)
	storeDSN, err := withRuntimeParam(dsn, "deadlock_timeout", fmt.Sprintf("%dms", timeout.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	s := openOn(t, storeDSN, schema, postgres.Options{Clock: clk, ApplicationName: app})
	createRuns(t, s, clk, 3, "r1")
	if l, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 1_000, Limit: 1}); err != nil || len(l) != 1 {
		t.Fatalf("first claim: %v, %v; want r1", runIDs(l), err)
	}
	if _, err := clk.Advance(1_000); err != nil {
		t.Fatal(err)
	}

	foreign := pgtest.Conn(t, dsn, schema)
	nameConn(ctx, t, foreign, foreignName)
	tx, err := foreign.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT set_config('deadlock_timeout', $1, true)`, fmt.Sprintf("%dms", 4*timeout.Milliseconds())); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO attempts (tenant, run_id, generation, number, worker, claimed_at, renewed_at, outcome)
		VALUES ('acme', 'r1', 1, 1, 'foreign', 0, 0, 'running')`); err != nil {
		t.Fatal(err)
	}
	claimed := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 60_000, Limit: 1})
		claimed <- err
	}()
	// Barrier: the claim has locked r1's job and waits for the foreign insert.
	awaitBlocked(ctx, t, pgtest.Conn(t, dsn, schema), app, foreignName, claimed,
		"the claim returned while a foreign client's insert of r1's attempt was uncommitted: it must wait for it")
	_, foreignErr = tx.Exec(ctx, `SELECT 1 FROM jobs WHERE tenant = 'acme' AND run_id = 'r1' FOR UPDATE`)
	claimErr = <-claimed
	return claimErr, foreignErr, func() {
		t.Helper()
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if l, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w", LeaseMs: 60_000, Limit: 1}); err != nil || len(l) != 1 || l[0].Generation != 2 {
			t.Fatalf("claim retried after the deadlock: %v, %v; want r1 reclaimed at generation 2", runIDs(l), err)
		}
	}
}

// withRuntimeParam is dsn (a URL or key/value string) with the server
// setting name = value for every connection made from it.
func withRuntimeParam(dsn, name, value string) (string, error) {
	if !strings.Contains(dsn, "://") {
		return dsn + " " + name + "=" + value, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String(), nil
}
