package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/spec"
)

// The relay's fault tests, against a real NATS server with JetStream: the
// shared one (LEASEHOLD_NATS_URL, default nats://127.0.0.1:4222) or, for a
// restart, a private nats-server of the test's own on a free loopback port.
// Each test writes an outbox through a SQLite store (committed writes, and
// writes that are refused or rolled back), relays it under a fault, and
// accounts for the stream by Nats-Msg-Id: every committed message is in it
// exactly once with its payload, and nothing else is.

const claimMs = 5_000

// sharedNATS connects to the shared server, or skips loudly (fails under
// CI=true, where .ci/run starts it).
func sharedNATS(t *testing.T) *nats.Conn {
	t.Helper()
	url := os.Getenv("LEASEHOLD_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		msg := fmt.Sprintf("NATS with JetStream is not reachable at %s (%v): start it (nats-server -js) or set LEASEHOLD_NATS_URL", url, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING: " + msg)
	}
	t.Cleanup(nc.Close)
	return nc
}

// privateServer is a nats-server process of the test's own.
type privateServer struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
	URL  string
}

// startPrivate starts nats-server -js on a free loopback port with its own
// store directory, or skips loudly (fails under CI=true) without the binary.
func startPrivate(t *testing.T) *privateServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		msg := "nats-server is not installed (apt-get install nats-server): the restart test needs a private server"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING: " + msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &privateServer{t: t, port: port, dir: t.TempDir(), URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	s.start(bin)
	t.Cleanup(s.kill)
	return s
}

func (s *privateServer) start(bin string) {
	s.t.Helper()
	s.cmd = exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-sd", s.dir)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	// Ready when it accepts a JetStream request (bounded, generous).
	for i := 0; ; i++ {
		nc, err := nats.Connect(s.URL, nats.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			_, err = js.AccountInfo(context.Background())
			nc.Close()
			if err == nil {
				return
			}
		}
		if i == 300 {
			s.t.Fatalf("the private nats-server on port %d did not answer in 30 s: %v", s.port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill SIGKILLs the server and waits for it to exit.
func (s *privateServer) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// restart kills the server and starts it again on the same port and store.
func (s *privateServer) restart() {
	s.kill()
	bin, _ := exec.LookPath("nats-server")
	s.start(bin)
}

// fixture is one test's store file, stream and expected messages.
type fixture struct {
	t      *testing.T
	path   string
	cfg    spec.Config
	stream string
	prefix string
	js     jetstream.JetStream
	// want maps each committed message's id to its payload and
	// generation; refused lists the writes that must leave nothing.
	want    map[string]spec.OutboxMessage
	refused int
}

func newFixture(t *testing.T, nc *nats.Conn) *fixture {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("lhtest%d", time.Now().UnixNano())
	f := &fixture{t: t, path: filepath.Join(t.TempDir(), "outbox.db"), cfg: spec.DefaultConfig(), stream: name, prefix: name, js: js,
		want: map[string]spec.OutboxMessage{}}
	if _, err := EnsureStream(context.Background(), js, StreamSettings{Name: name, Subjects: []string{name + ".>"}}); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), name) })
	return f
}

// open opens a store on the fixture's file with the clock clk (nil: the
// system clock) and hook.
func (f *fixture) open(clk clock.Clock, hook spec.Hook) *sqlite.Store {
	f.t.Helper()
	s, err := sqlite.Open(context.Background(), f.path, sqlite.Options{Config: f.cfg, Clock: clk, Hook: hook})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { s.Close() })
	return s
}

// write makes runs whose admission writes a message and whose completion
// writes two; every fifth completion is first tried by a stale generation
// (refused: lost_lease), every seventh is rolled back once by a fault
// before its commit. It records the messages of the committed writes.
func (f *fixture) write(runs int) {
	f.t.Helper()
	ctx := context.Background()
	var fail atomicBool
	s := f.open(nil, func(_ context.Context, op spec.Op, p spec.HookPoint) error {
		if op == spec.OpComplete && p == spec.BeforeCommit && fail.get() {
			return errors.New("injected rollback")
		}
		return nil
	})
	record := func(ms []spec.OutboxMessage) {
		for _, m := range ms {
			f.want[m.ID] = m
		}
	}
	before := 0
	for i := range runs {
		id := fmt.Sprintf("r%03d", i)
		res, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id, RunID: id,
			Payload: []byte(`{}`), Outbox: []spec.Message{{Subject: "orders.created", Payload: []byte(fmt.Sprintf(`{"run":%q}`, id))}}})
		if err != nil {
			f.t.Fatal(err)
		}
		lease := claimOne(f.t, s, "w1", 60_000)
		if i%5 == 0 {
			// A stale generation: the first lease's worker, after a release
			// and a reclaim by another.
			if _, err := s.Release(ctx, spec.ReleaseRequest{Lease: lease.Ref()}); err != nil {
				f.t.Fatal(err)
			}
			stale := lease
			lease = claimOne(f.t, s, "w2", 60_000)
			_, err := s.Complete(ctx, spec.CompleteRequest{Lease: stale.Ref(), Outbox: done(stale)})
			if spec.CodeOf(err) != spec.CodeLostLease {
				f.t.Fatalf("stale completion of %s: %v, want lost_lease", id, err)
			}
			f.refused++
		}
		if i%7 == 0 {
			fail.set(true)
			_, err := s.Complete(ctx, spec.CompleteRequest{Lease: lease.Ref(), Outbox: []spec.Message{{Subject: "orders.rolled_back", Payload: []byte(`{}`)}}})
			fail.set(false)
			if err == nil {
				f.t.Fatalf("the rolled-back completion of %s succeeded", id)
			}
			f.refused++
		}
		if _, err := s.Complete(ctx, spec.CompleteRequest{Lease: lease.Ref(), Outbox: done(lease)}); err != nil {
			f.t.Fatal(err)
		}
		_ = res
		snap, err := s.Snapshot(ctx)
		if err != nil {
			f.t.Fatal(err)
		}
		record(snap.Outbox[before:])
		before = len(snap.Outbox)
	}
	if len(f.want) != 3*runs {
		f.t.Fatalf("%d messages committed, want %d", len(f.want), 3*runs)
	}
}

// done is a completion's two messages, naming its generation.
func done(l spec.Lease) []spec.Message {
	return []spec.Message{
		{Subject: "orders.done", Payload: []byte(fmt.Sprintf(`{"generation":%d,"run":%q}`, l.Generation, l.RunID))},
		{Subject: "orders.audit", Payload: []byte(fmt.Sprintf(`{"generation":%d}`, l.Generation))},
	}
}

func claimOne(t *testing.T, s spec.Store, worker string, leaseMs int64) spec.Lease {
	t.Helper()
	ls, err := s.Claim(context.Background(), spec.ClaimRequest{Tenant: "acme", Worker: worker, LeaseMs: leaseMs, Limit: 1})
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim: %v, %v", ls, err)
	}
	return ls[0]
}

type atomicBool struct {
	mu sync.Mutex
	v  bool
}

func (b *atomicBool) set(v bool) { b.mu.Lock(); b.v = v; b.mu.Unlock() }
func (b *atomicBool) get() bool  { b.mu.Lock(); defer b.mu.Unlock(); return b.v }

// account reads the whole stream and the store and returns the figures:
// committed messages not in the stream once (lost), messages in it more
// than once (duplicated; a message is named by its Leasehold headers, so a
// copy without its Nats-Msg-Id counts too), messages no committed write
// made or with another id or payload (unexpected: a refused, stale or
// rolled-back write's), and store messages still pending.
func (f *fixture) account(js jetstream.JetStream) (lost, duplicated, unexpected, pending int64, problems []string) {
	f.t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, f.stream)
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	byKey := map[string]spec.OutboxMessage{}
	for _, w := range f.want {
		byKey[w.Tenant+"/"+w.RunID+"#"+strconv.FormatInt(w.Seq, 10)] = w
	}
	seen := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			f.t.Fatalf("stream message %d: %v", seq, err)
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		w, ok := byKey[m.Header.Get(HeaderTenant)+"/"+m.Header.Get(HeaderRun)+"#"+m.Header.Get(HeaderSeq)]
		seen[w.ID]++
		gen := m.Header.Get(HeaderGeneration)
		if !ok || id != w.ID || string(m.Data) != w.Payload || gen != strconv.FormatInt(w.Generation, 10) || m.Subject != f.prefix+"."+w.Subject {
			unexpected++
			problems = append(problems, fmt.Sprintf("unexpected: stream message %d (id %q, subject %s, generation %s) %s: no committed write made it", seq, id, m.Subject, gen, m.Data))
		}
	}
	for id := range f.want {
		switch n := seen[id]; {
		case n == 0:
			lost++
			problems = append(problems, "lost: committed message "+id+" is not in the stream")
		case n > 1:
			duplicated++
			problems = append(problems, fmt.Sprintf("duplicated: message %s is in the stream %d times", id, n))
		}
	}
	snap, err := f.open(nil, nil).Snapshot(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, m := range snap.Outbox {
		if m.State != spec.OutboxDelivered {
			pending++
		}
	}
	if pending > 0 {
		problems = append(problems, fmt.Sprintf("%d messages still pending in the store", pending))
	}
	return lost, duplicated, unexpected, pending, problems
}

// report checks the accounting and reports it to verify (package metrics).
func (f *fixture) report(t *testing.T, js jetstream.JetStream, injected int64, published uint64) {
	t.Helper()
	lost, dup, unexpected, pending, problems := f.account(js)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d committed messages, %d refused or rolled-back writes, %d faults: lost %d, duplicated %d, unexpected %d, pending %d",
		len(f.want), f.refused, injected, lost, dup, unexpected, pending)
	metrics.Report(t, metrics.Line{Check: "relay-faults", Store: "sqlite", Operations: int64(published),
		Violations: lost + dup + unexpected + pending,
		Faults:     &metrics.Faults{Injected: injected, Lost: lost + pending, Duplicated: dup, StaleAccepted: unexpected}})
}

// drain runs r's batches until the store has nothing left to publish.
func drain(t *testing.T, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		n, err := r.Once(ctx)
		if err != nil {
			t.Logf("relay batch: %v", err)
			continue
		}
		if n == 0 {
			return
		}
	}
	t.Fatalf("the relay did not drain the outbox in 2 minutes")
}

// TestRelayKilledBetweenPublishAndMark: a relay process publishes a batch
// (acknowledged) and is SIGKILLed before it marks it; once its claim has
// expired a new relay takes the batch and publishes it again, JetStream
// drops the repeats, and the stream holds every committed message once.
func TestRelayKilledBetweenPublishAndMark(t *testing.T) {
	nc := sharedNATS(t)
	f := newFixture(t, nc)
	f.write(20)
	killed := f.killMidBatch(t, nc.ConnectedUrl(), "")
	// The new relay's store reads a clock past the killed relay's claims.
	r := f.relay(t, f.open(clock.NewManual(time.Now().UnixMilli()+2*claimMs), nil), "relay-new", brokenNone)
	drain(t, r)
	if st := r.Stats(); st.Duplicates != uint64(killed) {
		t.Errorf("the new relay's publishes: %+v; want %d duplicates (the killed relay's batch, republished and dropped)", st, killed)
	}
	f.report(t, f.js, 1, r.Stats().Published+r.Stats().Duplicates)
}

// killMidBatch runs a relay process (this test binary) that stops after
// its first batch's publishes were acknowledged and before its mark, kills
// it with SIGKILL, and returns how many it had published.
func (f *fixture) killMidBatch(t *testing.T, url, variant string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LEASEHOLD_RELAY_HELPER=1", "HELPER_DB="+f.path, "HELPER_NATS="+url,
		"HELPER_STREAM="+f.stream, "HELPER_PREFIX="+f.prefix, "HELPER_BROKEN="+variant)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	n := -1
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "relay-helper: between publish and mark: "); ok {
			n, _ = strconv.Atoi(rest)
			break
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if n <= 0 {
		t.Fatalf("the relay process never reached the point between its publish and its mark")
	}
	t.Logf("relay process SIGKILLed after publishing %d messages, before marking them", n)
	return n
}

// TestMain runs the relay process of the kill tests when the test binary is
// started as one (LEASEHOLD_RELAY_HELPER=1), else the tests.
func TestMain(m *testing.M) {
	if os.Getenv("LEASEHOLD_RELAY_HELPER") == "1" {
		if err := helperProcess(); err != nil {
			fmt.Fprintln(os.Stderr, "relay-helper:", err)
		}
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// helperProcess is the relay process of the kill tests: it publishes one
// batch and stops between its publish and its mark until it is killed.
func helperProcess() error {
	nc, err := nats.Connect(os.Getenv("HELPER_NATS"))
	if err != nil {
		return err
	}
	js, _ := jetstream.New(nc)
	s, err := sqlite.Open(context.Background(), os.Getenv("HELPER_DB"), sqlite.Options{Config: spec.DefaultConfig()})
	if err != nil {
		return err
	}
	variant := map[string]broken{"": brokenNone, "no_msg_id": brokenNoMsgID, "mark_first": brokenMarkFirst}[os.Getenv("HELPER_BROKEN")]
	r, err := New(Config{Store: s, JetStream: js, Stream: os.Getenv("HELPER_STREAM"), SubjectPrefix: os.Getenv("HELPER_PREFIX"),
		Name: "relay-killed", Batch: 25, ClaimMs: claimMs, broken: variant,
		afterPublish: func(ms []spec.OutboxMessage) {
			fmt.Printf("relay-helper: between publish and mark: %d\n", len(ms))
			os.Stdout.Sync()
			select {} // until SIGKILL
		}})
	if err != nil {
		return err
	}
	_, err = r.Once(context.Background())
	return fmt.Errorf("the relay's first batch returned (%v); it should have stopped between its publish and its mark", err)
}

func (f *fixture) relay(t *testing.T, s spec.Store, name string, b broken) *Relay {
	t.Helper()
	r, err := New(Config{Store: s, JetStream: f.js, Stream: f.stream, SubjectPrefix: f.prefix, Name: name, Batch: 7, ClaimMs: claimMs,
		RetryBase: 50 * time.Millisecond, RetryCap: time.Second, broken: b})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRelayRidesOutNATSRestart: a private NATS server is killed (SIGKILL)
// and started again, on its own store, twice while a relay publishes; the
// relay's publishes fail until it reconnects and are sent again within its
// claim; the stream, which survived on file storage, holds every committed
// message once.
func TestRelayRidesOutNATSRestart(t *testing.T) {
	srv := startPrivate(t)
	// No reconnect buffer: a publish while the server is down fails at
	// once instead of waiting in the client.
	nc, err := nats.Connect(srv.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	f := newFixture(t, nc)
	f.write(15)
	r := f.relay(t, f.open(nil, nil), "relay-restart", brokenNone)
	r.cfg.ClaimMs = 120_000 // publishes retry for as long as the restart takes
	r.cfg.AckWait = time.Second
	batches := 0
	var restarted sync.WaitGroup
	r.cfg.afterPublish = func([]spec.OutboxMessage) {
		if batches++; batches != 2 && batches != 4 {
			return
		}
		// Killed between this batch's publish and its mark; started again
		// once the next batch's publish has failed.
		srv.kill()
		failed := r.Stats().Errors
		restarted.Add(1)
		go func() {
			defer restarted.Done()
			for i := 0; r.Stats().Errors == failed && i < 6000; i++ {
				time.Sleep(10 * time.Millisecond)
			}
			srv.restart()
			t.Logf("nats-server killed after batch %d and started again after %d failed publishes", batches, r.Stats().Errors-failed)
		}()
	}
	drain(t, r)
	restarted.Wait()
	if batches < 4 {
		t.Fatalf("the relay published %d batches; the restarts need 4", batches)
	}
	if r.Stats().Errors == 0 {
		t.Errorf("no publish failed while the server was down: the restarts were not in the relay's way (%+v)", r.Stats())
	}
	f.report(t, f.js, 2, r.Stats().Published+r.Stats().Duplicates)
}

// TestSeveralRelaysAtOnce: four relays, each with its own store on the
// file, drain one outbox together; claims keep them off each other's
// batches, so nothing is even published twice.
func TestSeveralRelaysAtOnce(t *testing.T) {
	nc := sharedNATS(t)
	f := newFixture(t, nc)
	f.write(30)
	var wg sync.WaitGroup
	relays := make([]*Relay, 4)
	for i := range relays {
		relays[i] = f.relay(t, f.open(nil, nil), fmt.Sprintf("relay-%d", i), brokenNone)
		wg.Add(1)
		go func() { defer wg.Done(); drain(t, relays[i]) }()
	}
	wg.Wait()
	var published, dups uint64
	for _, r := range relays {
		published, dups = published+r.Stats().Published, dups+r.Stats().Duplicates
	}
	if dups != 0 || published != uint64(len(f.want)) {
		t.Errorf("the relays published %d messages (%d duplicates); want each of the %d exactly once", published, dups, len(f.want))
	}
	f.report(t, f.js, 0, published)
}

// TestFaultTestCatchesBrokenRelays: the kill test's accounting fails a
// relay that publishes without Nats-Msg-Id (the republish is a second copy)
// and one that marks before it publishes (the killed relay's batch is
// lost).
func TestFaultTestCatchesBrokenRelays(t *testing.T) {
	for _, tc := range []struct {
		variant string
		b       broken
		want    func(lost, dup int64) bool
	}{
		{"no_msg_id", brokenNoMsgID, func(lost, dup int64) bool { return dup > 0 }},
		{"mark_first", brokenMarkFirst, func(lost, dup int64) bool { return lost > 0 }},
	} {
		t.Run(tc.variant, func(t *testing.T) {
			nc := sharedNATS(t)
			f := newFixture(t, nc)
			f.write(10)
			f.killMidBatch(t, nc.ConnectedUrl(), tc.variant)
			r := f.relay(t, f.open(clock.NewManual(time.Now().UnixMilli()+2*claimMs), nil), "relay-new", tc.b)
			drain(t, r)
			lost, dup, _, _, problems := f.account(f.js)
			if !tc.want(lost, dup) {
				t.Fatalf("broken relay %s passed the accounting (lost %d, duplicated %d): %v", tc.variant, lost, dup, problems)
			}
			t.Logf("broken relay %s caught: lost %d, duplicated %d (%d findings, first: %s)", tc.variant, lost, dup, len(problems), problems[0])
		})
	}
}
