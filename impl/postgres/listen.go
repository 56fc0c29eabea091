package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/spec"
)

// LISTEN/NOTIFY. CreateRun, CreateRuns, Replay and Cancel announce what
// they changed once their transaction has committed: the store's announcer
// sends the notifications waiting at that moment in one transaction of its
// own, in the order the operations' commits returned. Notifications are
// hints for spec.Notifier listeners (a worker waiting for work, a worker
// running an attempt that was just cancelled); nothing depends on them
// arriving, and one is lost if the process dies between the commit and the
// announcement.
//
// They are not sent inside the operations' own transactions because
// PostgreSQL serializes the commits of notifying transactions (a
// database-wide lock held through the commit's WAL flush): every admission
// would wait for the one before it to reach the disk. The announcer takes
// that lock once per batch instead.

var _ spec.Notifier = (*Store)(nil)

// maxChannelBytes is PostgreSQL's identifier limit (NAMEDATALEN - 1); a
// longer channel name is an error in pg_notify.
const maxChannelBytes = 63

// Channel returns the notification channel of a schema: "leasehold_" and the
// schema name, or, when that would pass PostgreSQL's 63-byte limit,
// "leasehold_" and 32 hex digits of the name's SHA-256.
func Channel(schema string) string {
	if c := "leasehold_" + schema; len(c) <= maxChannelBytes {
		return c
	}
	sum := sha256.Sum256([]byte(schema))
	return "leasehold_" + hex.EncodeToString(sum[:16])
}

// Channel returns the store's notification channel (see the function Channel).
func (s *Store) Channel() string { return Channel(s.schema) }

// notification is the JSON payload of a notification.
type notification struct {
	Kind       spec.NotificationKind `json:"kind"`
	Tenant     string                `json:"tenant"`
	RunID      string                `json:"run_id"`
	Generation int64                 `json:"generation,omitempty"`
}

// notifyEach sends one notification per payload, in order.
const notifyEach = `SELECT count(pg_notify(@channel, p)) FROM unnest(@payloads::text[]) AS p`

// notify queues a notification of t's change; commit hands it to the
// announcer if the transaction commits, and it is dropped if not.
func (s *Store) notify(t *txn, kind spec.NotificationKind, tenant, runID string, generation int64) error {
	if s.announcer == nil {
		return nil
	}
	p, err := notificationPayload(kind, tenant, runID, generation)
	if err != nil {
		return err
	}
	t.notes = append(t.notes, p)
	return nil
}

// maxAnnounceBatch bounds the notifications one announcement sends (one
// statement, one transaction). A variable for tests.
var maxAnnounceBatch = 1000

// announceTimeout bounds one announcement, and Close's last flush in all;
// one that fails is logged and dropped (listeners find the work by
// polling).
const announceTimeout = 5 * time.Second

// announcer sends committed changes' notifications from one goroutine:
// everything waiting when it wakes goes out in one notifyEach (at most
// maxAnnounceBatch per statement), so concurrent admissions share one
// notifying commit instead of queueing behind one each.
type announcer struct {
	pool    *pgxpool.Pool
	channel string
	log     *slog.Logger
	wake    chan struct{} // one pending wake-up at most
	stop    chan struct{}
	done    chan struct{}
	closing sync.Once

	mu      sync.Mutex
	pending []string
}

func newAnnouncer(pool *pgxpool.Pool, channel string, log *slog.Logger) *announcer {
	a := &announcer{pool: pool, channel: channel, log: log, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

// add queues payloads, in order after those queued before; it never waits.
func (a *announcer) add(payloads []string) {
	if len(payloads) == 0 {
		return
	}
	a.mu.Lock()
	a.pending = append(a.pending, payloads...)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// close sends what is waiting and stops the announcer; the pool must still
// be open. What is added afterwards is dropped. A second close waits for
// the first.
func (a *announcer) close() {
	a.closing.Do(func() { close(a.stop) })
	<-a.done
}

func (a *announcer) run() {
	defer close(a.done)
	for {
		select {
		case <-a.wake:
			a.flush(context.Background(), false)
		case <-a.stop:
			// What is waiting goes out, within one announceTimeout in all.
			ctx, cancel := context.WithTimeout(context.Background(), announceTimeout)
			a.flush(ctx, true)
			cancel()
			return
		}
	}
}

// flush sends the pending notifications, oldest first, until none is left
// or ctx ends (what is left then is dropped). Unless it is the last flush,
// it also stops between two batches once close has been called, leaving
// the rest to the last one.
func (a *announcer) flush(ctx context.Context, last bool) {
	for ctx.Err() == nil {
		select {
		case <-a.stop:
			if !last {
				return
			}
		default:
		}
		a.mu.Lock()
		n := min(len(a.pending), maxAnnounceBatch)
		batch := a.pending[:n:n]
		if a.pending = a.pending[n:]; len(a.pending) == 0 {
			a.pending = nil
		}
		a.mu.Unlock()
		if n == 0 {
			return
		}
		sendCtx, cancel := context.WithTimeout(ctx, announceTimeout)
		_, err := a.pool.Exec(sendCtx, notifyEach, args{"channel": a.channel, "payloads": batch})
		cancel()
		if err != nil {
			a.log.Warn("postgres: notifications of committed changes not sent; listeners find the work by polling", "count", n, "err", err)
		}
	}
}

// notificationPayload is a notification's JSON payload.
func notificationPayload(kind spec.NotificationKind, tenant, runID string, generation int64) (string, error) {
	b, err := json.Marshal(notification{Kind: kind, Tenant: tenant, RunID: runID, Generation: generation})
	return string(b), err
}

// Listen implements spec.Notifier. It holds one dedicated connection (not
// one of the pool's) that LISTENs on the store's channel, and calls fn for
// every notification until ctx ends. After a connection failure it
// reconnects with a growing delay (100 ms doubling to 5 s) and, after every
// successful LISTEN (the first included), calls fn with NotifyResync,
// because notifications sent while it was not listening are lost. A payload
// it cannot parse is logged and skipped. It returns nil when ctx ends.
func (s *Store) Listen(ctx context.Context, fn func(spec.Notification)) error {
	delay := 100 * time.Millisecond
	for {
		listening, err := s.listenOnce(ctx, fn)
		if ctx.Err() != nil {
			return nil
		}
		if listening {
			delay = 100 * time.Millisecond
		}
		s.log.WarnContext(ctx, "notification listener disconnected; reconnecting", "channel", s.Channel(), "err", err, "delay", delay)
		wait := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil
		case <-wait.C:
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// listenOnce connects, LISTENs and delivers notifications until the
// connection fails or ctx ends. listening reports whether LISTEN succeeded.
func (s *Store) listenOnce(ctx context.Context, fn func(spec.Notification)) (listening bool, err error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = cfg.RuntimeParams["application_name"] + "-listen"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.Channel()}.Sanitize()); err != nil {
		return false, err
	}
	fn(spec.Notification{Kind: spec.NotifyResync})
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		var p notification
		if err := json.Unmarshal([]byte(n.Payload), &p); err != nil || p.Kind == "" {
			s.log.WarnContext(ctx, "notification payload not understood; skipped", "channel", n.Channel, "err", err)
			continue
		}
		fn(spec.Notification{Kind: p.Kind, Tenant: p.Tenant, RunID: p.RunID, Generation: p.Generation})
	}
}
