package postgres

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/powerloss/faultfs"
	"github.com/leasehold/leasehold/powerloss/ledger"
)

// settings are the server's, beside synchronous_commit, in both variants.
// They keep the server from flushing the log on its own schedule during a
// round, so that what synchronous_commit = off leaves unflushed is what the
// power loss finds: the WAL writer flushes at most every 10 s and never for
// volume, the background writer writes no buffers (a buffer write flushes
// the log up to the buffer's change first), autovacuum and timed
// checkpoints do not run.
var settings = []string{
	"wal_writer_delay=10s", "wal_writer_flush_after=1GB", "bgwriter_lru_maxpages=0",
	"autovacuum=off", "checkpoint_timeout=1d", "max_wal_size=4GB",
}

// walSegments matches the names of the write-ahead log's segments
// (timeline 1: crash recovery does not change it).
const walSegments = "00000001*"

// In round r (from 1) the power goes at the cutPoints[r-1]-th operation on
// the log from the end of the round's writes, tearing the last write to
// tears[r-1] bytes. With synchronous_commit = on the in-flight admission
// writes its log page, then fdatasyncs it: both points fall inside it (the
// first before anything of it is written, the second after the write,
// before the flush, which is torn). Each round costs a crash recovery
// (several seconds), so there are two.
var (
	cutPoints = []int{1, 2}
	tears     = []int{0, 3000}
)

// perRound is how many runs each round admits.
const perRound = 20

// hang bounds every wait on the store or the server: a guard, not a measure.
const hang = 2 * time.Minute

type outcome struct {
	ledger.Tracker
	powerLosses int
	midOp       int
	dropped     int
	flushes     int64 // fsyncs and fdatasyncs of files the filesystem saw, power losses to power losses
}

func open(t *testing.T, ctx context.Context, c *pgtest.Cluster) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(ctx, c.DSN(), postgres.Options{Config: ledger.Config(), Schema: "powerloss", DisableNotify: true})
	if err != nil {
		t.Fatalf("opening the store: %v\nserver log:\n%s", err, tail(c.Log()))
	}
	return s
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// powerLoss runs the rounds on a cluster whose data directory starts as a
// copy of template, on the fault filesystem's disk.
func powerLoss(t *testing.T, template, syncCommit string) outcome {
	fsys := faultfs.MountForTestFrom(t, func(root string) error {
		if out, err := exec.Command("cp", "-a", template, filepath.Join(root, "data")).CombinedOutput(); err != nil {
			return fmt.Errorf("copying the data directory: %v\n%s", err, out)
		}
		return nil
	})
	c := pgtest.NewClusterWith(t, pgtest.ClusterOptions{Data: fsys.Path("data"), Initialized: true, Durable: true,
		Settings: append([]string{"synchronous_commit=" + syncCommit}, settings...)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*hang)
	defer cancel()

	// The schema, migrated and checkpointed: the rounds start from it, as
	// durable as the server made it.
	open(t, ctx, c).Close()
	if _, err := c.Conn(t).Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}

	var o outcome
	for r := 1; r <= len(cutPoints); r++ {
		s := open(t, ctx, c)
		if r > 1 {
			snap, err := s.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			o.Check(snap, fmt.Sprintf("power loss %d", r-1))
		}
		if err := ledger.Round(ctx, s, r, perRound, o.Ack); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		loss := faultfs.Loss{Tear: tears[r-1]}
		cut := fsys.PowerLossAt(cutPoints[r-1], walSegments, loss)
		opCtx, opCancel := context.WithTimeout(ctx, hang)
		a, err := ledger.InFlight(opCtx, s, r)
		opCancel()
		inflight := "acknowledged"
		if err != nil {
			inflight = "failed: " + err.Error()
		} else {
			o.Ack(a)
		}
		cr, fired := fsys.PowerLossAfter(cut, loss)
		if cr.Err != nil {
			t.Fatal(cr.Err)
		}
		// Unless the armed loss came during the admission, the power
		// goes now, right after it (with synchronous_commit = off a
		// commit writes nothing to the log itself).
		rep := cr.Report
		if fired && err != nil {
			o.midOp++
		}
		o.powerLosses++
		o.dropped += rep.Writes
		o.flushes += fsys.Counts().Syncs
		t.Logf("round %d: %d writes acknowledged so far; power lost at the %d-th operation on the log (in-flight admission: %s): %s",
			r, o.Acked, cutPoints[r-1], inflight, rep)
		if err := fsys.KillUsers(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if err := fsys.Restart(); err != nil {
			t.Fatal(err)
		}
		c.Start(t)
	}
	s := open(t, ctx, c)
	defer s.Close()
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o.Check(snap, fmt.Sprintf("power loss %d", len(cutPoints)))
	return o
}

// TestPowerLossPostgres: with synchronous_commit = on no acknowledged write
// is lost and every invariant holds after every power loss; with
// synchronous_commit = off the same check catches acknowledged writes gone.
func TestPowerLossPostgres(t *testing.T) {
	// One initdb, outside the fault filesystem (its cost is setup, not
	// what is under test), copied to each cluster's disk.
	template := pgtest.InitDB(t)
	var mu sync.Mutex
	results := map[string]outcome{}
	t.Run("variants", func(t *testing.T) {
		for _, sc := range []string{"on", "off"} {
			t.Run("synchronous_commit="+sc, func(t *testing.T) {
				t.Parallel()
				o := powerLoss(t, template, sc)
				mu.Lock()
				results[sc] = o
				mu.Unlock()
				t.Logf("synchronous_commit = %s: %d power losses (%d inside the in-flight admission), %d acknowledged writes checked, %d lost after %d of them, %d writes dropped by the power losses, %d flushes of files",
					sc, o.powerLosses, o.midOp, o.Acked, o.Lost, o.LostChecks, o.dropped, o.flushes)
				for _, v := range o.Violations {
					t.Errorf("%s", v)
				}
				switch {
				case sc == "on" && o.midOp == 0:
					t.Errorf("no power loss fell inside the in-flight admission: the check did not exercise a commit cut short")
				case sc == "on" && o.Lost > 0:
					t.Errorf("synchronous_commit = on lost %d acknowledged writes, e.g. %s", o.Lost, strings.Join(o.Examples, "; "))
				case sc == "off" && o.Lost == 0:
					t.Errorf("NOT EXERCISED: synchronous_commit = off lost no acknowledged write in %d power losses, so this check could not have caught a server that loses them", o.powerLosses)
				case sc == "off":
					t.Logf("caught, as it must be: synchronous_commit = off lost %d acknowledged writes, e.g. %s", o.Lost, strings.Join(o.Examples, "; "))
				}
			})
		}
	})
	on, off := results["on"], results["off"]
	metrics.Report(t, metrics.Line{Check: "power-loss", Store: "postgres", Operations: int64(on.Acked + off.Acked),
		Rounds: int64(on.powerLosses + off.powerLosses), Violations: int64(on.Lost + len(on.Violations) + len(off.Violations)),
		Faults: &metrics.Faults{Injected: int64(on.powerLosses + off.powerLosses), Lost: int64(on.Lost), CaughtLost: int64(off.Lost)}})
}
