package sqlite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/powerloss/faultfs"
	"github.com/leasehold/leasehold/powerloss/ledger"
	"github.com/leasehold/leasehold/spec"
)

// The child's environment: the database path (set: run as the child), the
// store's Sync setting, the round (0: open, report and close cleanly) and its
// admissions.
const (
	envDB    = "LEASEHOLD_POWERLOSS_SQLITE_DB"
	envSync  = "LEASEHOLD_POWERLOSS_SQLITE_SYNC"
	envRound = "LEASEHOLD_POWERLOSS_SQLITE_ROUND"
	envN     = "LEASEHOLD_POWERLOSS_SQLITE_N"
)

func TestMain(m *testing.M) {
	if db := os.Getenv(envDB); db != "" {
		os.Exit(child(db))
	}
	os.Exit(m.Run())
}

// event is one line the child writes on its standard output.
type event struct {
	Kind     string         `json:"kind"` // snapshot, ack, idle, inflight, error
	Snapshot *spec.Snapshot `json:"snapshot,omitempty"`
	Ack      *ledger.Ack    `json:"ack,omitempty"`
	Error    string         `json:"error,omitempty"`
}

var syncs = map[string]sqlite.Sync{"FULL": sqlite.SyncFull, "NORMAL": sqlite.SyncNormal}

// child is the store's process: it opens the database (recovering it),
// reports its snapshot, makes its round's writes reporting each
// acknowledged one, reports idle, and on "go" from its standard input makes
// the in-flight admission and reports its outcome. Then it waits to be
// killed: a power loss closes nothing cleanly. Round 0 only opens, reports
// and closes.
func child(db string) int {
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		out.Encode(event{Kind: "error", Error: err.Error()})
		return 1
	}
	round, _ := strconv.Atoi(os.Getenv(envRound))
	n, _ := strconv.Atoi(os.Getenv(envN))
	ctx := context.Background()
	s, err := sqlite.Open(ctx, db, sqlite.Options{Config: ledger.Config(), Sync: syncs[os.Getenv(envSync)]})
	if err != nil {
		return fail(err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		return fail(err)
	}
	out.Encode(event{Kind: "snapshot", Snapshot: &snap})
	if round == 0 {
		if err := s.Close(); err != nil {
			return fail(err)
		}
		return 0
	}
	if err := ledger.Round(ctx, s, round, n, func(a ledger.Ack) { out.Encode(event{Kind: "ack", Ack: &a}) }); err != nil {
		return fail(err)
	}
	out.Encode(event{Kind: "idle"})
	in := bufio.NewReader(os.Stdin)
	if line, _ := in.ReadString('\n'); line != "go\n" {
		return fail(fmt.Errorf("child: want go, read %q", line))
	}
	a, err := ledger.InFlight(ctx, s, round)
	if err != nil {
		out.Encode(event{Kind: "inflight", Error: err.Error()})
	} else {
		out.Encode(event{Kind: "inflight", Ack: &a})
	}
	io.Copy(io.Discard, in) // until killed
	return 0
}

// proc is a running child.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan event
	stderr strings.Builder
}

// hang bounds every wait for the child: a guard against a hang, never a
// measure of anything.
const hang = 2 * time.Minute

func start(t *testing.T, db, sync string, round, n int) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{events: make(chan event, 1024)}
	p.cmd = exec.Command(exe, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), envDB+"="+db, envSync+"="+sync, envRound+"="+strconv.Itoa(round), envN+"="+strconv.Itoa(n))
	p.cmd.Stderr = &p.stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.events)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<28)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				e = event{Kind: "error", Error: "unreadable line from the child: " + sc.Text()}
			}
			p.events <- e
		}
	}()
	return p
}

// next waits for the child's next event, which must be of kind want (or
// of kind also, when given).
func (p *proc) next(t *testing.T, want string, also ...string) event {
	t.Helper()
	select {
	case e, ok := <-p.events:
		if !ok {
			t.Fatalf("the child ended before its %s event: %v\n%s", want, p.cmd.Wait(), p.stderr.String())
		}
		if e.Kind != want && !slices.Contains(also, e.Kind) {
			t.Fatalf("the child reported %s (%s), want %s\n%s", e.Kind, e.Error, want, p.stderr.String())
		}
		return e
	case <-time.After(hang):
		t.Fatalf("no %s event from the child in %s", want, hang)
	}
	return event{}
}

func (p *proc) kill() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// cutPoints: in round r (from 1) the power goes at the cutPoints[r-1]-th
// operation on the write-ahead log during the in-flight admission, tearing
// the last write to tears[r-1] bytes (0: dropped whole). An admission makes
// a dozen or more (a frame header and a page per page it changes, then an
// fsync under SyncFull), so every point falls inside it.
var (
	cutPoints = []int{1, 2, 3, 6, 9, 13}
	tears     = []int{0, 16, 1000, 0, 16, 1000}
)

// perRound is how many runs each round admits (it claims them and completes
// every other one: 2.5 acknowledged writes per admission).
const perRound = 20

// outcome is what a variant's rounds found.
type outcome struct {
	ledger.Tracker
	powerLosses int
	midOp       int   // power losses that fell inside the in-flight admission
	dropped     int   // writes the power losses dropped
	flushes     int64 // fsyncs and fdatasyncs of files the filesystem saw, power losses to power losses
}

// powerLoss runs the rounds with the store's Sync set to sync.
func powerLoss(t *testing.T, sync string) outcome {
	fsys := faultfs.MountForTest(t)
	db := fsys.Path("leasehold.db")
	var o outcome

	// The database, created and migrated by a child that closes it cleanly:
	// the rounds start from it, as durable as the store made it.
	setup := start(t, db, sync, 0, 0)
	setup.next(t, "snapshot")
	if err := setup.cmd.Wait(); err != nil {
		t.Fatalf("setting up the database: %v\n%s", err, setup.stderr.String())
	}

	for r := 1; r <= len(cutPoints); r++ {
		p := start(t, db, sync, r, perRound)
		if r > 1 {
			o.Check(*p.next(t, "snapshot").Snapshot, fmt.Sprintf("power loss %d", r-1))
		} else {
			p.next(t, "snapshot")
		}
		for e := p.next(t, "idle", "ack"); e.Kind == "ack"; e = p.next(t, "idle", "ack") {
			o.Ack(*e.Ack)
		}
		loss := faultfs.Loss{Tear: tears[r-1]}
		cut := fsys.PowerLossAt(cutPoints[r-1], "*-wal", loss)
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		inflight := p.next(t, "inflight")
		cr, fired := fsys.PowerLossAfter(cut, loss)
		if cr.Err != nil {
			t.Fatal(cr.Err)
		}
		// Unless the armed loss came during the admission (it made fewer
		// operations on the log than the cut point), the power goes now,
		// right after it.
		rep := cr.Report
		if fired {
			o.midOp++
		}
		if inflight.Ack != nil {
			// Acknowledged: it must survive like any other.
			o.Ack(*inflight.Ack)
		}
		o.powerLosses++
		o.dropped += rep.Writes
		o.flushes += fsys.Counts().Syncs
		t.Logf("round %d: %d writes acknowledged so far; power lost at the %d-th operation on the log (in-flight admission: %s): %s",
			r, o.Acked, cutPoints[r-1], inflightOutcome(inflight), rep)
		p.kill()
		if err := fsys.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	final := start(t, db, sync, 0, 0)
	o.Check(*final.next(t, "snapshot").Snapshot, fmt.Sprintf("power loss %d", len(cutPoints)))
	if err := final.cmd.Wait(); err != nil {
		t.Fatalf("reopening the database: %v\n%s", err, final.stderr.String())
	}
	return o
}

func inflightOutcome(e event) string {
	if e.Ack != nil {
		return "acknowledged"
	}
	return "failed: " + e.Error
}

// TestPowerLossSQLite: with the default (synchronous FULL) no acknowledged
// write is lost and every invariant holds after every power loss; with
// SyncNormal the same check catches acknowledged writes gone.
func TestPowerLossSQLite(t *testing.T) {
	results := map[string]outcome{}
	for _, sync := range []string{"FULL", "NORMAL"} {
		t.Run(sync, func(t *testing.T) {
			o := powerLoss(t, sync)
			results[sync] = o
			t.Logf("synchronous %s: %d power losses (%d inside the in-flight admission), %d acknowledged writes checked, %d lost after %d of them, %d writes dropped by the power losses, %d flushes of files",
				sync, o.powerLosses, o.midOp, o.Acked, o.Lost, o.LostChecks, o.dropped, o.flushes)
			for _, v := range o.Violations {
				t.Errorf("%s", v)
			}
			if o.midOp == 0 {
				t.Errorf("no power loss fell inside the in-flight admission: the check did not exercise a write cut short")
			}
			switch {
			case sync == "FULL" && o.Lost > 0:
				t.Errorf("the durable default lost %d acknowledged writes, e.g. %s", o.Lost, strings.Join(o.Examples, "; "))
			case sync == "NORMAL" && o.Lost == 0:
				t.Errorf("NOT EXERCISED: synchronous NORMAL lost no acknowledged write in %d power losses, so this check could not have caught a store that loses them", o.powerLosses)
			case sync == "NORMAL":
				t.Logf("caught, as it must be: synchronous NORMAL lost %d acknowledged writes, e.g. %s", o.Lost, strings.Join(o.Examples, "; "))
			}
		})
	}
	full, normal := results["FULL"], results["NORMAL"]
	metrics.Report(t, metrics.Line{Check: "power-loss", Store: "sqlite", Operations: int64(full.Acked + normal.Acked),
		Rounds: int64(full.powerLosses + normal.powerLosses), Violations: int64(full.Lost + len(full.Violations) + len(normal.Violations)),
		Faults: &metrics.Faults{Injected: int64(full.powerLosses + normal.powerLosses), Lost: int64(full.Lost), CaughtLost: int64(normal.Lost)}})
}
