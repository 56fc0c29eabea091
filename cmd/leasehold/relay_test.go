package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// watchedBuffer is a command's output: it signals seen once a line
// containing want was written.
type watchedBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newWatched(want string) *watchedBuffer {
	return &watchedBuffer{want: want, seen: make(chan struct{})}
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if strings.Contains(w.b.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// natsOutage is a loopback port with no NATS server behind it yet, and the
// way to start one there.
type natsOutage struct {
	t    *testing.T
	bin  string
	port int
	URL  string
}

// newOutage finds nats-server and a free port, or skips loudly (fails
// under CI=true).
func newOutage(t *testing.T) *natsOutage {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		msg := "nats-server is not installed (apt-get install nats-server): the relay's start during an outage needs a private server"
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
	return &natsOutage{t: t, bin: bin, port: port, URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}
}

// end starts nats-server -js on the outage's port; it is killed when the
// test ends.
func (o *natsOutage) end() {
	cmd := exec.Command(o.bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(o.port), "-sd", o.t.TempDir())
	if err := cmd.Start(); err != nil {
		o.t.Fatalf("start nats-server: %v", err)
	}
	o.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}

// TestRelayRidesOutNATSDownAtStart: `leasehold relay`, started while NATS
// is down, says on stderr that it cannot reach it and tries again, and
// exits only on a signal; with --once, once a server starts on that port,
// it creates the stream, publishes every pending message exactly once,
// marks them delivered and exits 0. Each step waits on an event: a line on
// stderr, the command's return.
func TestRelayRidesOutNATSDownAtStart(t *testing.T) {
	const unreachable = "relay: NATS is not reachable at "
	t.Run("a signal during the outage", func(t *testing.T) {
		o := newOutage(t)
		db := outboxDB(t, 1)
		stderr := newWatched(unreachable + o.URL)
		ctx, signal := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"relay", "--sqlite", db, "--nats", o.URL}, &bytes.Buffer{}, stderr)
		}()
		waitFor(t, stderr, done)
		signal()
		select {
		case status := <-done:
			if status != 0 {
				t.Fatalf("the relay stopped by a signal during the outage: exit status %d, want 0\n%s", status, stderr)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the relay did not stop within a minute of the signal (guard against a hang)\n%s", stderr)
		}
	})
	t.Run("NATS starts later", func(t *testing.T) {
		o := newOutage(t)
		const runs = 12
		db := outboxDB(t, runs)
		stderr := newWatched(unreachable + o.URL)
		stdout := newWatched(fmt.Sprintf("relay: %d published", runs))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"relay", "--sqlite", db, "--nats", o.URL, "--stream", "LHTEST", "--subject-prefix", "lhtest", "--once"}, stdout, stderr)
		}()
		waitFor(t, stderr, done)
		o.end()
		if status := <-done; status != 0 || !strings.Contains(stdout.String(), fmt.Sprintf("relay: %d published", runs)) {
			t.Fatalf("leasehold relay --once after the outage: exit status %d\nstdout: %s\nstderr: %s", status, stdout.String(), stderr)
		}
		t.Logf("stderr during the outage:\n%s", firstLinesOf(stderr.String(), 3))

		// The stream holds each message once, and the store has none pending.
		s, err := sqlite.Open(context.Background(), db, sqlite.Options{Config: spec.DefaultConfig()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		snap, err := s.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for _, m := range snap.Outbox {
			want[m.ID] = true
			if m.State != spec.OutboxDelivered {
				t.Errorf("message %s is %s after the relay exited", m.ID, m.State)
			}
		}
		nc, err := nats.Connect(o.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		st, err := js.Stream(context.Background(), "LHTEST")
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo()
		seen := map[string]int{}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(context.Background(), seq)
			if err != nil {
				t.Fatal(err)
			}
			seen[m.Header.Get(jetstream.MsgIDHeader)]++
		}
		for id := range want {
			if seen[id] != 1 {
				t.Errorf("message %s is in the stream %d times, want once", id, seen[id])
			}
		}
		if len(seen) != len(want) || len(want) != runs {
			t.Errorf("the stream holds %d messages, the store wrote %d, want %d", len(seen), len(want), runs)
		}
	})
}

// outboxDB is a SQLite store file holding n runs, each with one outbox
// message pending.
func outboxDB(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{Config: spec.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		id := fmt.Sprintf("r%02d", i)
		if _, err := s.CreateRun(context.Background(), spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id,
			RunID: id, Payload: []byte(`{}`), Outbox: []spec.Message{{Subject: "orders.created", Payload: []byte(fmt.Sprintf(`{"run":%q}`, id))}}}); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// waitFor waits until the relay says on stderr that NATS is unreachable;
// it fails if the command returned first.
func waitFor(t *testing.T, stderr *watchedBuffer, done <-chan int) {
	t.Helper()
	select {
	case <-stderr.seen:
	case status := <-done:
		t.Fatalf("the relay exited (status %d) during the outage instead of trying again:\n%s", status, stderr)
	case <-time.After(time.Minute):
		t.Fatalf("the relay said nothing of the outage within a minute (guard against a hang):\n%s", stderr)
	}
}

func firstLinesOf(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
