package jetstream

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/powerloss/faultfs"
	"github.com/leasehold/leasehold/powerloss/ledger"
	"github.com/leasehold/leasehold/relay"
	"github.com/leasehold/leasehold/spec"
)

const (
	stream  = "POWERLOSS"
	subject = "powerloss"
)

// hang bounds every wait on the server: a guard, not a measure.
const hang = time.Minute

// In round r (from 1) the power goes at the cutPoints[r-1]-th operation on
// the stream's message blocks during the in-flight publish, tearing the last
// write to tears[r-1] bytes. A publish writes its record to the last block
// (and, under sync_interval: always, fsyncs it), so both points fall inside
// it.
var (
	cutPoints = []int{1, 2, 2}
	tears     = []int{0, 0, 40}
)

// perRound is how many messages each round publishes.
const perRound = 30

// claimMs is the round's relay's claim: the store's clock moves past it
// before each round.
const claimMs = 30_000

// srv is a running embedded server and a client of it.
type srv struct {
	s  *server.Server
	nc *nats.Conn
	js jetstream.JetStream
}

// start starts a server with JetStream's store in dir: its default lazy
// fsync, or sync_interval: always.
func start(t *testing.T, dir string, always bool) *srv {
	t.Helper()
	opts := &server.Options{ServerName: "powerloss", Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: dir, SyncAlways: always}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(hang) {
		t.Fatalf("nats-server not ready in %s", hang)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &srv{s: s, nc: nc, js: js}
}

func (s *srv) stop() {
	s.nc.Close()
	s.s.Shutdown()
	s.s.WaitForShutdown()
}

// inStream returns the Nats-Msg-Id of every message the stream holds.
func inStream(t *testing.T, ctx context.Context, js jetstream.JetStream) map[string]bool {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("the stream after the power loss: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // a gap: deleted, or lost
		}
		out[m.Header.Get(jetstream.MsgIDHeader)] = true
	}
	return out
}

type outcome struct {
	powerLosses int
	delivered   int   // messages the relay marked delivered, each checked after every later power loss
	lost        int   // of those, missing from the stream after a power loss
	midOp       int   // power losses inside the in-flight publish
	dropped     int   // writes the power losses dropped
	flushes     int64 // fsyncs and fdatasyncs of files the filesystem saw, power losses to power losses
	examples    []string
}

func powerLoss(t *testing.T, always bool) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 10*hang)
	defer cancel()
	fsys := faultfs.MountForTest(t)
	storeDir := fsys.Path("jetstream")
	// The store's clock moves only when the test says: each round first
	// lets every earlier claim expire, so that its relay publishes what an
	// earlier round left pending (a publish the power cut short).
	clk := clock.NewManual(time.Now().UnixMilli())
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "relay.db"), sqlite.Options{Config: ledger.Config(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s := start(t, storeDir, always)
	if _, err := relay.EnsureStream(ctx, s.js, relay.StreamSettings{Name: stream, Subjects: []string{subject + ".>"}}); err != nil {
		t.Fatal(err)
	}
	// The stream, created and made durable by the filesystem (under the
	// default lazy fsync its creation would be lost too, and with it the
	// stream this check reads): the rounds start from it.
	if err := fsys.Sync(); err != nil {
		t.Fatal(err)
	}

	var o outcome
	delivered := map[string]bool{} // marked delivered, not found missing yet
	admit := func(id string) {
		t.Helper()
		_, err := store.CreateRun(ctx, spec.CreateRunRequest{Tenant: ledger.Tenant, Operation: ledger.Operation, IdempotencyKey: id, RunID: id,
			Payload: []byte(`{}`), Outbox: []spec.Message{{Subject: subject + "." + id, Payload: []byte(`{"run":"` + id + `"}`)}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	// outbox returns the ids of the messages marked delivered and how many
	// are pending.
	outbox := func() (delivered []string, pending int) {
		snap, err := store.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range snap.Outbox {
			if m.State == spec.OutboxDelivered {
				delivered = append(delivered, m.ID)
			} else {
				pending++
			}
		}
		return delivered, pending
	}
	record := func() {
		ids, _ := outbox()
		for _, id := range ids {
			if _, seen := delivered[id]; !seen {
				delivered[id] = true
				o.delivered++
			}
		}
	}
	for r := 1; r <= len(cutPoints); r++ {
		rl, err := relay.New(relay.Config{Store: store, JetStream: s.js, Stream: stream, Name: fmt.Sprintf("relay-%d", r),
			Batch: 10, ClaimMs: claimMs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := clk.Advance(claimMs); err != nil {
			t.Fatal(err)
		}
		for i := range perRound {
			admit(fmt.Sprintf("r%d-%d", r, i))
		}
		for _, pending := outbox(); pending > 0; _, pending = outbox() {
			if _, err := rl.Once(ctx); err != nil {
				t.Fatalf("round %d: the relay failed with the power on: %v", r, err)
			}
		}
		record()

		// The in-flight publish, and the power going during it. The
		// server never answers a publish whose write failed: this relay
		// waits for an acknowledgement only briefly (a publish that was
		// not cut and is merely slow stays unacknowledged, and pending,
		// which is no loss).
		inflightRelay, err := relay.New(relay.Config{Store: store, JetStream: s.js, Stream: stream, Name: fmt.Sprintf("inflight-%d", r),
			AckWait: 500 * time.Millisecond, ClaimMs: 1000})
		if err != nil {
			t.Fatal(err)
		}
		admit(fmt.Sprintf("r%d-inflight", r))
		loss := faultfs.Loss{Tear: tears[r-1]}
		cut := fsys.PowerLossAt(cutPoints[r-1], "*.blk", loss)
		n, pubErr := inflightRelay.Once(ctx)
		cr, fired := fsys.PowerLossAfter(cut, loss)
		if cr.Err != nil {
			t.Fatal(cr.Err)
		}
		if fired && n == 0 {
			o.midOp++
		}
		if n > 0 {
			record() // the stream acknowledged it: it must survive like any other
		}
		o.powerLosses++
		o.dropped += cr.Report.Writes
		o.flushes += fsys.Counts().Syncs
		inflight := "acknowledged"
		if n == 0 {
			inflight = fmt.Sprintf("not acknowledged (%v)", pubErr)
		}
		t.Logf("round %d: %d messages marked delivered so far; power lost at the %d-th operation on the message blocks (in-flight publish: %s): %s",
			r, o.delivered, cutPoints[r-1], inflight, cr.Report)
		s.stop()
		if err := fsys.Restart(); err != nil {
			t.Fatal(err)
		}
		s = start(t, storeDir, always)
		have := inStream(t, ctx, s.js)
		for id, live := range delivered {
			if live && !have[id] {
				o.lost++
				delivered[id] = false // counted once
				if len(o.examples) < 5 {
					o.examples = append(o.examples, fmt.Sprintf("power loss %d: message %s", r, id))
				}
			}
		}
	}
	s.stop()
	return o
}

// TestPowerLossJetStream: with sync_interval: always every message the
// relay marked delivered is in the stream after every power loss; with the
// server's default lazy fsync the same check catches delivered messages
// gone.
func TestPowerLossJetStream(t *testing.T) {
	var mu sync.Mutex
	results := map[string]outcome{}
	t.Run("variants", func(t *testing.T) {
		for _, setting := range []string{"always", "default"} {
			t.Run("sync_interval="+setting, func(t *testing.T) {
				t.Parallel()
				o := powerLoss(t, setting == "always")
				mu.Lock()
				results[setting] = o
				mu.Unlock()
				t.Logf("sync_interval %s: %d power losses (%d inside the in-flight publish), %d messages marked delivered, %d of them lost, %d writes dropped by the power losses, %d flushes of files",
					setting, o.powerLosses, o.midOp, o.delivered, o.lost, o.dropped, o.flushes)
				switch {
				case setting == "always" && o.midOp == 0:
					t.Errorf("no power loss fell inside the in-flight publish: the check did not exercise a write cut short")
				case setting == "always" && o.lost > 0:
					t.Errorf("sync_interval: always lost %d messages the relay marked delivered, e.g. %s", o.lost, strings.Join(o.examples, "; "))
				case setting == "default" && o.lost == 0:
					t.Errorf("NOT EXERCISED: the default lazy fsync lost no delivered message in %d power losses, so this check could not have caught a server that loses them", o.powerLosses)
				case setting == "default":
					t.Logf("caught, as it must be (Jepsen's finding on NATS 2.12.1): the default lazy fsync lost %d of %d messages the relay marked delivered, e.g. %s",
						o.lost, o.delivered, strings.Join(o.examples, "; "))
				}
			})
		}
	})
	always, lazy := results["always"], results["default"]
	metrics.Report(t, metrics.Line{Check: "power-loss", Store: "jetstream", Operations: int64(always.delivered + lazy.delivered),
		Rounds: int64(always.powerLosses + lazy.powerLosses), Violations: int64(always.lost),
		Faults: &metrics.Faults{Injected: int64(always.powerLosses + lazy.powerLosses), Lost: int64(always.lost), CaughtLost: int64(lazy.lost)}})
}

// TestReadServerSync: the relay reads the server's setting from its
// monitoring endpoint, as it is.
func TestReadServerSync(t *testing.T) {
	for _, always := range []bool{false, true} {
		opts := &server.Options{ServerName: "sync", Host: "127.0.0.1", Port: -1, HTTPHost: "127.0.0.1", HTTPPort: -1, NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: t.TempDir(), SyncAlways: always}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		if !s.ReadyForConnections(hang) {
			t.Fatalf("nats-server not ready in %s", hang)
		}
		got, err := relay.ReadServerSync(context.Background(), "http://"+s.MonitorAddr().String())
		s.Shutdown()
		if err != nil {
			t.Fatal(err)
		}
		want := relay.ServerSync{Version: server.VERSION, JetStream: true, Always: always, Interval: 2 * time.Minute}
		if got != want || got.Durable() != always {
			t.Errorf("sync_always %v: read %+v (durable %v), want %+v", always, got, got.Durable(), want)
		}
		t.Logf("%s", got)
	}
	old := relay.ServerSync{Version: "2.9.25", JetStream: true}
	if old.Durable() || !strings.Contains(old.String(), "has no sync_interval setting") {
		t.Errorf("a server before 2.10: %s (durable %v)", old, old.Durable())
	}
}
