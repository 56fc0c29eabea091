package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/spec"
)

// The announcer's tests. Each store under test gets an application_name of
// its own (its schema's name), so that its announcer's connection is
// "<schema>-announce" in pg_stat_activity and to the proxy. The listener is
// another store on the same schema, connected directly.

// announcerOpen opens a store on schema through dsn, with the schema's name
// as its application_name; it is closed at the test's end.
func announcerOpen(ctx context.Context, t *testing.T, dsn, schema string, opts postgres.Options) *postgres.Store {
	t.Helper()
	opts.Config, opts.Schema, opts.ApplicationName = spec.DefaultConfig(), schema, schema
	if opts.MaxConns == 0 {
		opts.MaxConns = 4
	}
	s, err := postgres.Open(ctx, dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func createReq(id string) spec.CreateRunRequest {
	return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + id, RunID: id, Payload: []byte(`{}`)}
}

func created(id string) spec.Notification {
	return spec.Notification{Kind: spec.NotifyRunCreated, Tenant: "acme", RunID: id}
}

// expectNotes receives want from got, in order.
func expectNotes(t *testing.T, got <-chan spec.Notification, want ...spec.Notification) {
	t.Helper()
	for i, w := range want {
		n := hang.Wait(t, got, fmt.Sprintf("notification %d of %d, %+v", i+1, len(want), w))
		if n != w {
			t.Fatalf("notification %d of %d: %+v, want %+v", i+1, len(want), n, w)
		}
	}
}

// expectNoneYet checks that no notification has arrived.
func expectNoneYet(t *testing.T, got <-chan spec.Notification) {
	t.Helper()
	select {
	case n := <-got:
		t.Fatalf("unexpected notification %+v: want none yet", n)
	default:
	}
}

// expectNoneBefore admits run id on s and requires its notification to be
// the next to arrive: nothing else was sent before it (a store announces
// in commit order, so anything left over from before, a batch sent twice,
// arrives first).
func expectNoneBefore(ctx context.Context, t *testing.T, s *postgres.Store, got <-chan spec.Notification, id string) {
	t.Helper()
	if _, err := s.CreateRun(ctx, createReq(id)); err != nil {
		t.Fatal(err)
	}
	if n := hang.Wait(t, got, "the notification of "+id); n != created(id) {
		t.Fatalf("unexpected notification %+v: want no more before %+v", n, created(id))
	}
}

// closeOnManualClock registers, for when the test ends (before the store's
// own Close), a Close of s that moves the announcer's manual clock on until
// it returns: a failed test leaves its announcer waiting on that clock, and
// only moving it lets Close give up.
func closeOnManualClock(t *testing.T, s *postgres.Store, clk *clock.Manual) {
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { s.Close(); close(closed) }()
		for {
			select {
			case <-closed:
				return
			case <-time.After(time.Millisecond):
				clk.Advance(1_000)
			}
		}
	})
}

// waitStats waits until ok accepts s's NotifyStats.
func waitStats(t *testing.T, s *postgres.Store, what string, ok func(postgres.NotifyStats) bool) postgres.NotifyStats {
	t.Helper()
	var st postgres.NotifyStats
	hang.Until(t, "NotifyStats: "+what, func() bool { st = s.NotifyStats(); return ok(st) })
	return st
}

// expectStats waits for s's NotifyStats to be want (a listener may receive
// a batch before the announcer has counted it sent), and fails t with
// what they are when they stay otherwise.
func expectStats(t *testing.T, s *postgres.Store, want postgres.NotifyStats, why string) {
	t.Helper()
	waitStats(t, s, fmt.Sprintf("%+v (%s)", want, why), func(st postgres.NotifyStats) bool { return st == want })
}

// announcerBackends returns the pids of the backends whose application_name
// is app's announcer's.
func announcerBackends(ctx context.Context, t *testing.T, pool *pgxpool.Pool, app string) []int32 {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid`, app+"-announce")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int32
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return pids
}

// TestAnnouncerOwnConnection: the announcer never takes a pool connection.
// With the pool idle, announcing a CreateRun adds no acquire to the one of
// the CreateRun's own transaction. With the pool exhausted at the moment of
// the announcement (from the CreateRun's BeforeCommit hook the test takes
// the other connection, and queues for the CreateRun's own, which the
// commit releases to it), the notification still arrives, while the test
// holds every pool connection. The announcement waits on a manual clock
// (the spacing after a first announcement) until the test holds them. It
// is sent by one backend named "<application_name>-announce".
func TestAnnouncerOwnConnection(t *testing.T) {
	cases := []struct {
		name         string
		exhaust      bool
		wantAcquires int64 // the pool's acquires during the CreateRun and its announcement
	}{
		{"idle pool", false, 1},         // the CreateRun's transaction
		{"exhausted pool", true, 1 + 2}, // and the test's two
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := hang.Context(context.Background())
			defer cancel()
			clk := clock.NewManual(0)
			t.Cleanup(postgres.SetAnnounceTimers(clk))
			dsn, schema := pgtest.Schema(t)
			listener := intxOpen(ctx, t, dsn, schema, false)
			got := intxListen(ctx, t, listener, 16)
			var s *postgres.Store
			held := make(chan *pgxpool.Conn, 2)
			var armed atomic.Bool // for the CreateRun of r
			var hook spec.Hook
			if c.exhaust {
				hook = func(hctx context.Context, op spec.Op, p spec.HookPoint) error {
					if op != spec.OpCreateRun || p != spec.BeforeCommit || !armed.CompareAndSwap(true, false) {
						return nil
					}
					other, err := s.Pool().Acquire(hctx)
					if err != nil {
						return err
					}
					held <- other
					go func() {
						// Served when the commit releases the CreateRun's
						// connection.
						if last, err := s.Pool().Acquire(ctx); err == nil {
							held <- last
						}
					}()
					return nil
				}
			}
			s = announcerOpen(ctx, t, dsn, schema, postgres.Options{MaxConns: 2, Hook: hook})
			closeOnManualClock(t, s, clk)
			defer func() {
				for range len(held) {
					(<-held).Release()
				}
			}()
			// A first announcement, so that the next waits its spacing.
			if _, err := s.CreateRun(ctx, createReq("first")); err != nil {
				t.Fatal(err)
			}
			expectNotes(t, got, created("first"))
			waitStats(t, s, "the first announcement counted", func(st postgres.NotifyStats) bool { return st.Announcements == 1 })
			before := s.Pool().Stat().AcquireCount()
			armed.Store(true)
			if _, err := s.CreateRun(ctx, createReq("r")); err != nil {
				t.Fatal(err)
			}
			if c.exhaust {
				hang.Until(t, "the test to hold both pool connections", func() bool { return s.Pool().Stat().AcquiredConns() == 2 })
			}
			if err := clk.BlockUntilDue(ctx, clk.Now()+1_000); err != nil {
				t.Fatal(hang.Message("the announcement of r to wait for its spacing", hang.Patience()))
			}
			expectNoneYet(t, got)
			clk.Advance(1_000)
			// An announcer that waited for a pool connection would wait
			// while the test holds them all.
			expectNotes(t, got, created("r"))
			if c.exhaust {
				if n := s.Pool().Stat().AcquiredConns(); n != 2 {
					t.Errorf("when the notification arrived the test held %d pool connections, want 2 of 2", n)
				}
			}
			if n := s.Pool().Stat().AcquireCount() - before; n != c.wantAcquires {
				t.Errorf("pool acquires during the CreateRun and its announcement: %d, want %d (the announcer must not use the pool)", n, c.wantAcquires)
			}
			if pids := announcerBackends(ctx, t, listener.Pool(), schema); len(pids) != 1 {
				t.Errorf("backends named %s-announce: %v, want exactly one", schema, pids)
			}
			expectStats(t, s, postgres.NotifyStats{Queued: 0, Peak: 1, Sent: 2, Connections: 1, Announcements: 2}, "two sent on one connection")
		})
	}
}

// TestAnnouncerReconnects: after its connection is terminated
// (pg_terminate_backend, the server keeps running), the announcer's next
// send fails, and it sends that batch again on a new connection: every
// notification arrives, and it opened exactly one connection per kill more
// than the first (no reconnection loop).
func TestAnnouncerReconnects(t *testing.T) {
	for _, kills := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d kills", kills), func(t *testing.T) {
			ctx, cancel := hang.Context(context.Background())
			defer cancel()
			dsn, schema := pgtest.Schema(t)
			listener := intxOpen(ctx, t, dsn, schema, false)
			got := intxListen(ctx, t, listener, 16)
			s := announcerOpen(ctx, t, dsn, schema, postgres.Options{})
			if _, err := s.CreateRun(ctx, createReq("r0")); err != nil {
				t.Fatal(err)
			}
			expectNotes(t, got, created("r0"))
			for k := 1; k <= kills; k++ {
				pids := announcerBackends(ctx, t, listener.Pool(), schema)
				if len(pids) != 1 {
					t.Fatalf("before kill %d: backends named %s-announce: %v, want exactly one", k, schema, pids)
				}
				var ended bool
				if err := listener.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1, $2)`, pids[0], hang.Patience().Milliseconds()).Scan(&ended); err != nil || !ended {
					t.Fatalf("pg_terminate_backend(%d): %v, %v; want true, nil", pids[0], ended, err)
				}
				id := fmt.Sprintf("r%d", k)
				if _, err := s.CreateRun(ctx, createReq(id)); err != nil {
					t.Fatal(err)
				}
				expectNotes(t, got, created(id))
			}
			expectNoneBefore(ctx, t, s, got, "last")
			expectStats(t, s, postgres.NotifyStats{Peak: 1, Sent: int64(kills + 2), Connections: int64(kills + 1), Announcements: int64(kills + 2)},
				"one connection per kill more than the first, nothing failed")
		})
	}
}

// TestAnnouncerBacksOff: while its connections are refused (a proxy closes
// every connection of the announcer's application_name after its startup
// message; the pool's connections pass), the announcer tries again after a
// growing delay (100 ms doubling), not in a loop, and keeps what waits;
// once connections are accepted again, what waited and what follows
// arrive, in order. The announcer waits on a manual clock: each delay is
// read off its pending timer, and ends when the test moves the clock.
func TestAnnouncerBacksOff(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	clk := clock.NewManual(0)
	t.Cleanup(postgres.SetAnnounceTimers(clk)) // restored after the store is closed
	dsn, schema := pgtest.Schema(t)
	got := intxListen(ctx, t, intxOpen(ctx, t, dsn, schema, false), 16)
	proxy, proxied := newCommitProxy(t, dsn)
	proxy.watch(schema + "-announce")
	proxy.refuseApp.Store(true)
	s := announcerOpen(ctx, t, proxied, schema, postgres.Options{})
	closeOnManualClock(t, s, clk)
	if _, err := s.CreateRun(ctx, createReq("waited")); err != nil {
		t.Fatal(err)
	}
	// Tries at 0, 100, 300, 700 and 1500 ms: each refused try is followed
	// by one wait, twice as long as the one before.
	for try, delay := int64(1), int64(100); try <= 5; try, delay = try+1, 2*delay {
		if err := clk.BlockUntilDue(ctx, clk.Now()+delay); err != nil {
			t.Fatal(hang.Message(fmt.Sprintf("the announcer's wait after refused try %d", try), hang.Patience()))
		}
		if next, _ := clk.NextDeadline(); next != clk.Now()+delay {
			t.Fatalf("after refused try %d the announcer waits %d ms, want %d (delays from 100 ms doubling)", try, next-clk.Now(), delay)
		}
		if n := int64(proxy.appConns.Load()); n != try {
			t.Fatalf("the announcer tried %d connections before its wait number %d, want %d: one try per wait, no loop", n, try, try)
		}
		if st := s.NotifyStats(); st != (postgres.NotifyStats{Queued: 1, Peak: 1}) {
			t.Fatalf("NotifyStats while refused %+v, want the one notification still queued", st)
		}
		expectNoneYet(t, got)
		if try < 5 {
			clk.Advance(delay)
		}
	}
	proxy.refuseApp.Store(false)
	next, _ := clk.NextDeadline()
	clk.Set(next) // the next try is accepted
	expectNotes(t, got, created("waited"))
	clk.Advance(1_000) // past the spacing of announcements (announceInterval)
	if _, err := s.CreateRun(ctx, createReq("after")); err != nil {
		t.Fatal(err)
	}
	expectNotes(t, got, created("after"))
	expectStats(t, s, postgres.NotifyStats{Peak: 1, Sent: 2, Connections: 1, Announcements: 2}, "two sent on one connection, none dropped or failed")
}

// TestNotifyQueueBound: with the announcer's connection held (a proxy
// holds its statements: the first notification, "probe", is in flight),
// no more than Options.NotifyQueue notifications wait; more drop the
// oldest, counted in NotifyStats.Dropped. Once the connection is released,
// the probe and exactly the newest NotifyQueue notifications arrive, in
// commit order.
func TestNotifyQueueBound(t *testing.T) {
	const limit = 50
	cancelled := func(id string) spec.Notification {
		return spec.Notification{Kind: spec.NotifyRunCancelled, Tenant: "acme", RunID: id}
	}
	ids := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s%03d", prefix, i))
		}
		return out
	}
	cases := []struct {
		name string
		// queue makes the changes whose notifications are queued behind
		// the probe, and returns them in commit order.
		queue func(ctx context.Context, t *testing.T, s *postgres.Store) []spec.Notification
	}{
		{"one bulk admission of three times the limit", func(ctx context.Context, t *testing.T, s *postgres.Store) []spec.Notification {
			var reqs []spec.CreateRunRequest
			var notes []spec.Notification
			for _, id := range ids("b", 3*limit) {
				reqs = append(reqs, createReq(id))
				notes = append(notes, created(id))
			}
			if _, err := s.CreateRuns(ctx, reqs); err != nil {
				t.Fatal(err)
			}
			return notes
		}},
		{"the limit and ten more admissions", func(ctx context.Context, t *testing.T, s *postgres.Store) []spec.Notification {
			var notes []spec.Notification
			for _, id := range ids("c", limit+10) {
				if _, err := s.CreateRun(ctx, createReq(id)); err != nil {
					t.Fatal(err)
				}
				notes = append(notes, created(id))
			}
			return notes
		}},
		{"admissions then cancels", func(ctx context.Context, t *testing.T, s *postgres.Store) []spec.Notification {
			var notes []spec.Notification
			list := ids("d", 40)
			for _, id := range list {
				if _, err := s.CreateRun(ctx, createReq(id)); err != nil {
					t.Fatal(err)
				}
				notes = append(notes, created(id))
			}
			for _, id := range list[:20] {
				if _, err := s.Cancel(ctx, spec.CancelRequest{Tenant: "acme", RunID: id}); err != nil {
					t.Fatal(err)
				}
				notes = append(notes, cancelled(id))
			}
			return notes
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := hang.Context(context.Background())
			defer cancel()
			dsn, schema := pgtest.Schema(t)
			got := intxListen(ctx, t, intxOpen(ctx, t, dsn, schema, false), 4*limit)
			proxy, proxied := newCommitProxy(t, dsn)
			proxy.watch(schema + "-announce")
			s := announcerOpen(ctx, t, proxied, schema, postgres.Options{NotifyQueue: limit})
			proxy.stall()
			if _, err := s.CreateRun(ctx, createReq("probe")); err != nil {
				t.Fatal(err)
			}
			waitStats(t, s, "the probe taken for sending on the first connection", func(st postgres.NotifyStats) bool {
				return st.Connections == 1 && st.Queued == 0 && st.Peak == 1
			})
			all := c.queue(ctx, t, s)
			dropped := len(all) - limit
			want := postgres.NotifyStats{Queued: limit, Peak: limit, Dropped: int64(dropped), Connections: 1}
			if st := s.NotifyStats(); st != want {
				t.Fatalf("NotifyStats with %d queued behind the held probe: %+v, want %+v", len(all), st, want)
			}
			proxy.resume()
			expectNotes(t, got, append([]spec.Notification{created("probe")}, all[dropped:]...)...)
			expectStats(t, s, postgres.NotifyStats{Peak: limit, Sent: int64(1 + limit), Dropped: int64(dropped), Connections: 1,
				Announcements: 2}, "the probe, then the newest NotifyQueue in one announcement")
			expectNoneBefore(ctx, t, s, got, "last")
		})
	}
}

// TestCloseGivesUpInTime: Close gives up on what it cannot send
// announceTimeout (here 1 s, against 5 s by default) after it was called,
// however many batches wait: with the announcer's connection held, a batch
// in flight and three waiting (SetMaxAnnounceBatch(1)), Close returns once
// the clock has moved announceTimeout past its call, counting all four as
// Failed. The announcer waits on a manual clock: a Close that gave up
// later, or never, would not return.
func TestCloseGivesUpInTime(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	defer postgres.SetMaxAnnounceBatch(1)()
	const timeout = time.Second
	defer postgres.SetAnnounceTimeout(timeout)()
	clk := clock.NewManual(0)
	defer postgres.SetAnnounceTimers(clk)()
	dsn, schema := pgtest.Schema(t)
	proxy, proxied := newCommitProxy(t, dsn)
	proxy.watch(schema + "-announce")
	s := announcerOpen(ctx, t, proxied, schema, postgres.Options{})
	closeOnManualClock(t, s, clk)
	proxy.stall()
	for i := range 4 {
		if _, err := s.CreateRun(ctx, createReq(fmt.Sprintf("r%d", i))); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			waitStats(t, s, "the first notification taken for sending", func(st postgres.NotifyStats) bool {
				return st.Connections == 1 && st.Queued == 0
			})
		}
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	// The send in flight and Close each wait for timeout to pass.
	if err := clk.BlockUntilDueN(ctx, timeout.Milliseconds(), 2); err != nil {
		t.Fatal(hang.Message("Close's bound and the send's to be armed", hang.Patience()))
	}
	clk.Advance(timeout.Milliseconds())
	hang.Wait(t, closed, "Close to give up once its bound had passed")
	if st, want := s.NotifyStats(), (postgres.NotifyStats{Peak: 3, Failed: 4, Connections: 1}); st != want {
		t.Errorf("NotifyStats after Close: %+v, want %+v", st, want)
	}
}

// TestAnnouncementsSpaced: an announcement starts no sooner than
// announceInterval (here 3 s) after the one before, and what arrives
// meanwhile waits and goes together: the first notification after a quiet
// interval goes at once, the ten admitted right after it in one second
// announcement, once the interval has passed on the announcer's (manual)
// clock.
func TestAnnouncementsSpaced(t *testing.T) {
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	// Restored after the store is closed (cleanups run last first): its
	// announcer reads the interval until then.
	t.Cleanup(postgres.SetAnnounceInterval(3 * time.Second))
	clk := clock.NewManual(0)
	t.Cleanup(postgres.SetAnnounceTimers(clk))
	dsn, schema := pgtest.Schema(t)
	got := intxListen(ctx, t, intxOpen(ctx, t, dsn, schema, false), 16)
	s := announcerOpen(ctx, t, dsn, schema, postgres.Options{})
	closeOnManualClock(t, s, clk)
	if _, err := s.CreateRun(ctx, createReq("first")); err != nil {
		t.Fatal(err)
	}
	expectNotes(t, got, created("first"))
	var rest []spec.Notification
	for i := range 10 {
		id := fmt.Sprintf("r%d", i)
		if _, err := s.CreateRun(ctx, createReq(id)); err != nil {
			t.Fatal(err)
		}
		rest = append(rest, created(id))
	}
	if err := clk.BlockUntilDue(ctx, 3_000); err != nil {
		t.Fatal(hang.Message("the announcer to wait for the interval to pass", hang.Patience()))
	}
	expectNoneYet(t, got)
	clk.Advance(3_000)
	expectNotes(t, got, rest...)
	expectStats(t, s, postgres.NotifyStats{Peak: 10, Sent: 11, Connections: 1, Announcements: 2},
		"the first at once, the ten after it in one announcement")
}
