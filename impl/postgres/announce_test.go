package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
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

// expectNotes receives want from got, in order, each within wait.
func expectNotes(t *testing.T, got <-chan spec.Notification, wait time.Duration, want ...spec.Notification) {
	t.Helper()
	for i, w := range want {
		select {
		case n := <-got:
			if n != w {
				t.Fatalf("notification %d of %d: %+v, want %+v", i+1, len(want), n, w)
			}
		case <-time.After(wait):
			t.Fatalf("received %d notifications of %d; %+v did not arrive within %v", i, len(want), w, wait)
		}
	}
}

// expectNone checks that nothing more arrives within wait.
func expectNone(t *testing.T, got <-chan spec.Notification, wait time.Duration) {
	t.Helper()
	select {
	case n := <-got:
		t.Fatalf("unexpected notification %+v: want no more", n)
	case <-time.After(wait):
	}
}

// waitStats polls s's NotifyStats until ok accepts them, failing after 10 s.
func waitStats(t *testing.T, s *postgres.Store, what string, ok func(postgres.NotifyStats) bool) postgres.NotifyStats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.NotifyStats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("NotifyStats %+v after 10 s: want %s", st, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expectStats waits up to 10 s for s's NotifyStats to be want (a listener
// may receive a batch before the announcer has counted it sent).
func expectStats(t *testing.T, s *postgres.Store, want postgres.NotifyStats, why string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.NotifyStats()
		if st == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("NotifyStats %+v after 10 s, want %+v (%s)", st, want, why)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
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
// the other connection, and queues for the CreateRun's own, which the pool
// hands to the longest waiter when the commit releases it), the
// notification still arrives at once, while the test holds every pool
// connection. The announcement is sent by one backend named
// "<application_name>-announce".
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
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			dsn, schema := pgtest.Schema(t)
			listener := intxOpen(ctx, t, dsn, schema, false)
			got := intxListen(ctx, t, listener, 16)
			var s *postgres.Store
			held := make(chan *pgxpool.Conn, 2)
			var hook spec.Hook
			if c.exhaust {
				hook = func(hctx context.Context, op spec.Op, p spec.HookPoint) error {
					if op != spec.OpCreateRun || p != spec.BeforeCommit {
						return nil
					}
					other, err := s.Pool().Acquire(hctx)
					if err != nil {
						return err
					}
					held <- other
					go func() {
						// Blocks until the commit releases the CreateRun's
						// connection.
						if last, err := s.Pool().Acquire(ctx); err == nil {
							held <- last
						}
					}()
					// Queued before the commit, this acquire is served first.
					time.Sleep(200 * time.Millisecond)
					return nil
				}
			}
			s = announcerOpen(ctx, t, dsn, schema, postgres.Options{MaxConns: 2, Hook: hook})
			defer func() {
				for range len(held) {
					(<-held).Release()
				}
			}()
			before := s.Pool().Stat().AcquireCount()
			if _, err := s.CreateRun(ctx, createReq("r")); err != nil {
				t.Fatal(err)
			}
			if c.exhaust {
				waitFor := time.After(10 * time.Second)
				for s.Pool().Stat().AcquiredConns() != 2 {
					select {
					case <-waitFor:
						t.Fatalf("the test holds %d pool connections, want both", s.Pool().Stat().AcquiredConns())
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
			// Well within announceTimeout (5 s), which a wait for a pool
			// connection would reach.
			expectNotes(t, got, 3*time.Second, created("r"))
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
			expectStats(t, s, postgres.NotifyStats{Queued: 0, Peak: 1, Sent: 1, Connections: 1, Announcements: 1}, "one sent on one connection")
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
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			dsn, schema := pgtest.Schema(t)
			listener := intxOpen(ctx, t, dsn, schema, false)
			got := intxListen(ctx, t, listener, 16)
			s := announcerOpen(ctx, t, dsn, schema, postgres.Options{})
			if _, err := s.CreateRun(ctx, createReq("r0")); err != nil {
				t.Fatal(err)
			}
			expectNotes(t, got, 5*time.Second, created("r0"))
			for k := 1; k <= kills; k++ {
				pids := announcerBackends(ctx, t, listener.Pool(), schema)
				if len(pids) != 1 {
					t.Fatalf("before kill %d: backends named %s-announce: %v, want exactly one", k, schema, pids)
				}
				var ended bool
				if err := listener.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, pids[0]).Scan(&ended); err != nil || !ended {
					t.Fatalf("pg_terminate_backend(%d): %v, %v; want true, nil", pids[0], ended, err)
				}
				id := fmt.Sprintf("r%d", k)
				if _, err := s.CreateRun(ctx, createReq(id)); err != nil {
					t.Fatal(err)
				}
				expectNotes(t, got, 5*time.Second, created(id))
			}
			expectStats(t, s, postgres.NotifyStats{Peak: 1, Sent: int64(kills + 1), Connections: int64(kills + 1), Announcements: int64(kills + 1)},
				"one connection per kill more than the first, nothing failed")
			expectNone(t, got, 200*time.Millisecond)
		})
	}
}

// TestAnnouncerBacksOff: while its connections are refused (a proxy closes
// every connection of the announcer's application_name after its startup
// message; the pool's connections pass), the announcer tries again after a
// growing delay (100 ms doubling), not in a loop, and keeps what waits;
// once connections are accepted again, what waited and what follows
// arrive, in order.
func TestAnnouncerBacksOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dsn, schema := pgtest.Schema(t)
	got := intxListen(ctx, t, intxOpen(ctx, t, dsn, schema, false), 16)
	proxy, proxied := newCommitProxy(t, dsn)
	proxy.watch(schema + "-announce")
	proxy.refuseApp.Store(true)
	s := announcerOpen(ctx, t, proxied, schema, postgres.Options{})
	if _, err := s.CreateRun(ctx, createReq("waited")); err != nil {
		t.Fatal(err)
	}
	// Tries at about 0, 0.1, 0.3, 0.7 and 1.5 s: five within 2 s, fewer
	// on a loaded machine (a late wake-up only stretches the delays). A
	// loop would make thousands.
	time.Sleep(2 * time.Second)
	if n := proxy.appConns.Load(); n < 2 || n > 6 {
		t.Fatalf("the announcer tried %d connections in 2 s while refused, want 2 to 6 (a retry, delays from 100 ms doubling)", n)
	}
	if st := s.NotifyStats(); st != (postgres.NotifyStats{Queued: 1, Peak: 1}) {
		t.Fatalf("NotifyStats while refused %+v, want the one notification still queued", st)
	}
	expectNone(t, got, 0)
	proxy.refuseApp.Store(false)
	// The next try is at most 3.2 s away.
	expectNotes(t, got, 5*time.Second, created("waited"))
	if _, err := s.CreateRun(ctx, createReq("after")); err != nil {
		t.Fatal(err)
	}
	expectNotes(t, got, 5*time.Second, created("after"))
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
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
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
			expectNotes(t, got, 5*time.Second, append([]spec.Notification{created("probe")}, all[dropped:]...)...)
			expectNone(t, got, 200*time.Millisecond)
			expectStats(t, s, postgres.NotifyStats{Peak: limit, Sent: int64(1 + limit), Dropped: int64(dropped), Connections: 1,
				Announcements: 2}, "the probe, then the newest NotifyQueue in one announcement")
		})
	}
}

// TestCloseGivesUpInTime: Close gives up on what it cannot send
// announceTimeout (here 1 s, against 5 s by default) after it was called,
// however many batches wait: with the announcer's connection held, a batch
// in flight and three waiting (SetMaxAnnounceBatch(1)), Close returns
// within that bound (and a second of slack) and counts all four as Failed.
func TestCloseGivesUpInTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	defer postgres.SetMaxAnnounceBatch(1)()
	const timeout = time.Second
	defer postgres.SetAnnounceTimeout(timeout)()
	dsn, schema := pgtest.Schema(t)
	proxy, proxied := newCommitProxy(t, dsn)
	proxy.watch(schema + "-announce")
	s := announcerOpen(ctx, t, proxied, schema, postgres.Options{})
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
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > timeout+time.Second {
		t.Errorf("Close took %v, want at most %v and a second of slack", d.Round(time.Millisecond), timeout)
	}
	// Whether Close's last flush got to open a second connection (the
	// first send's own timeout ends a little before Close's bound) is a
	// race: Connections is left out.
	st := s.NotifyStats()
	if st.Connections < 1 {
		t.Errorf("NotifyStats after Close: %+v, want at least one connection", st)
	}
	st.Connections = 0
	if want := (postgres.NotifyStats{Peak: 3, Failed: 4}); st != want {
		t.Errorf("NotifyStats after Close (but Connections): %+v, want %+v", st, want)
	}
}

// TestAnnouncementsSpaced: an announcement starts no sooner than
// announceInterval (here 3 s) after the one before, and what arrives
// meanwhile waits and goes together: the first notification after a quiet
// interval goes at once, the ten admitted right after it in one second
// announcement.
func TestAnnouncementsSpaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Restored after the store is closed (cleanups run last first): its
	// announcer reads the interval until then.
	t.Cleanup(postgres.SetAnnounceInterval(3 * time.Second))
	dsn, schema := pgtest.Schema(t)
	got := intxListen(ctx, t, intxOpen(ctx, t, dsn, schema, false), 16)
	s := announcerOpen(ctx, t, dsn, schema, postgres.Options{})
	if _, err := s.CreateRun(ctx, createReq("first")); err != nil {
		t.Fatal(err)
	}
	expectNotes(t, got, 2*time.Second, created("first"))
	var rest []spec.Notification
	for i := range 10 {
		id := fmt.Sprintf("r%d", i)
		if _, err := s.CreateRun(ctx, createReq(id)); err != nil {
			t.Fatal(err)
		}
		rest = append(rest, created(id))
	}
	expectNotes(t, got, 10*time.Second, rest...)
	expectStats(t, s, postgres.NotifyStats{Peak: 10, Sent: 11, Connections: 1, Announcements: 2},
		"the first at once, the ten after it in one announcement")
}
