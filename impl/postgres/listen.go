package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/spec"
)

// LISTEN/NOTIFY. CreateRun, CreateRuns, Replay and Cancel announce what
// they changed once their transaction has committed: the store's announcer
// sends the notifications waiting at that moment in one transaction of its
// own, on a connection of its own (not the pool's), in the order the
// operations' commits returned. Notifications are hints for spec.Notifier
// listeners (a worker waiting for work, a worker running an attempt that
// was just cancelled); nothing depends on them arriving. One is lost if the
// process dies between the commit and the announcement, when more than
// Options.NotifyQueue wait (the oldest are dropped), or when its batch
// fails to send twice; NotifyStats counts the last two.
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

// announceTimeout bounds one connection attempt and one announcement, and
// Close's last flush in all. A variable for tests.
var announceTimeout = 5 * time.Second

// announceInterval is the least time from the start of one announcement
// to the start of the next. What arrives meanwhile waits and goes in the
// next, so a busy store commits at most one announcement transaction per
// interval (each takes PostgreSQL's notify lock and commits with a
// transaction id of its own), at the cost of up to that much delay under
// load; the first notification after a quiet interval goes at once. Close
// sends what is waiting without it. A variable for tests.
var announceInterval = 5 * time.Millisecond

// DefaultNotifyQueue is the most notifications that wait to be announced
// when Options.NotifyQueue is zero.
const DefaultNotifyQueue = 10000

// announceTimers is what the announcers made from now on wait with: the
// delay after a failure, the spacing of announcements, and the bounds of a
// connection attempt, of a send and of Close. The system's timers; a test's
// manual clock decides when each wait ends. A variable for tests.
var announceTimers clock.Timers = clock.System{}

// Reconnection delays of the announcer: the first wait after a failure,
// doubling up to the last.
const (
	announceRetryMin = 100 * time.Millisecond
	announceRetryMax = 5 * time.Second
)

// NotifyStats counts what a store's announcer did since Open (see
// Store.NotifyStats). Every notification queued is eventually counted in
// exactly one of Sent, Dropped or Failed, or still Queued (or in the batch
// being sent), except that one sent again after a failed send (see Failed)
// may be counted in Sent twice. (An operation's notifications handed over
// after Close are discarded, uncounted.)
type NotifyStats struct {
	// Queued is the number of notifications waiting now, not counting the
	// batch being sent; it never exceeds Options.NotifyQueue.
	Queued int
	// Peak is the largest Queued has been.
	Peak int
	// Sent counts notifications handed to PostgreSQL in a statement that
	// succeeded.
	Sent int64
	// Dropped counts notifications displaced from a full queue (the oldest
	// waiting go first); they were never sent.
	Dropped int64
	// Failed counts notifications whose batch failed twice (once on a
	// connection, once more on a new one), or that were still waiting when
	// Close gave up.
	Failed int64
	// Connections counts the dedicated connections the announcer opened:
	// the first, and one per reconnection.
	Connections int64
	// Announcements counts the statements that sent notifications and
	// succeeded, each a transaction of its own (see announceInterval).
	Announcements int64
}

// announcer sends committed changes' notifications from one goroutine:
// everything waiting when it wakes goes out in one notifyEach (at most
// maxAnnounceBatch per statement), no sooner than announceInterval after
// the announcement before, so concurrent admissions share one notifying
// commit instead of queueing behind one each.
//
// It sends on a connection of its own, never one of the pool's, so that a
// busy pool neither delays announcements nor loses a connection to them.
// The connection is opened when there is first something to send; when a
// connection attempt or a send fails, the connection is closed and the next
// attempt waits announceRetryMin, doubling to announceRetryMax, reset by a
// send that succeeds. A batch whose send failed is sent once more, on the
// new connection (a listener may then receive it twice), and dropped after
// a second failure.
//
// At most limit notifications wait. Adding to a full queue drops the oldest
// waiting: the newest say the most about what is to do now, and as workers
// also poll (worker.Config.Idle) and renew (which reports a cancel), a
// dropped notification delays a wake-up, never loses work.
type announcer struct {
	cfg     *pgx.ConnConfig // application_name ends in "-announce"
	timers  clock.Timers    // announceTimers when it was made
	channel string
	log     *slog.Logger
	limit   int
	wake    chan struct{} // one pending wake-up at most
	stop    chan struct{}
	done    chan struct{}
	// ctx ends announceTimeout after close is called: it bounds Close's
	// last flush, an announcement in flight included.
	ctx     context.Context
	cancel  context.CancelFunc
	closing sync.Once

	// The run goroutine's own: the connection (nil when there is none),
	// the batch to send again after a failed send, and the delay before
	// the next attempt after a failure.
	conn     *pgx.Conn
	retry    []string
	delay    time.Duration
	lastSend int64 // when the last announcement started (timers' Monotonic), if sent
	sent1    bool  // an announcement has started

	sent, failed, connections, announcements atomic.Int64

	mu      sync.Mutex
	pending []string
	closed  bool
	peak    int
	dropped int64
}

func newAnnouncer(cfg *pgx.ConnConfig, channel string, limit int, log *slog.Logger) *announcer {
	cfg = cfg.Copy()
	cfg.RuntimeParams["application_name"] = cfg.RuntimeParams["application_name"] + "-announce"
	ctx, cancel := context.WithCancel(context.Background())
	a := &announcer{cfg: cfg, timers: announceTimers, channel: channel, log: log, limit: limit, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), ctx: ctx, cancel: cancel, delay: announceRetryMin}
	go a.run()
	return a
}

// add queues payloads, in order after those queued before, dropping the
// oldest waiting beyond the limit; it never waits. What is added after
// close is discarded.
func (a *announcer) add(payloads []string) {
	if len(payloads) == 0 {
		return
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.pending = append(a.pending, payloads...)
	if over := len(a.pending) - a.limit; over > 0 {
		// Reslicing keeps memory bounded: append copies only the
		// waiting notifications when it grows the array.
		a.pending = a.pending[over:]
		a.dropped += int64(over)
	}
	a.peak = max(a.peak, len(a.pending))
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// stats reports the counters (see NotifyStats).
func (a *announcer) stats() NotifyStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return NotifyStats{Queued: len(a.pending), Peak: a.peak, Dropped: a.dropped,
		Sent: a.sent.Load(), Failed: a.failed.Load(), Connections: a.connections.Load(), Announcements: a.announcements.Load()}
}

// close sends what is waiting, giving up announceTimeout after it was
// called, closes the connection and stops the announcer. A second close
// waits for the first.
func (a *announcer) close() {
	a.closing.Do(func() {
		close(a.stop)
		giveUp := a.timers.NewTimer(announceTimeout.Milliseconds())
		go func() {
			select {
			case <-giveUp.C():
				a.cancel()
			case <-a.done:
				giveUp.Stop()
			}
		}()
	})
	<-a.done
	a.cancel()
}

func (a *announcer) run() {
	defer close(a.done)
	defer a.disconnect()
	for {
		select {
		case <-a.wake:
			a.flush(false)
		case <-a.stop:
			a.flush(true)
			a.mu.Lock()
			a.closed = true
			left := len(a.pending) + len(a.retry)
			a.pending, a.retry = nil, nil
			a.mu.Unlock()
			if left > 0 {
				a.failed.Add(int64(left))
				a.log.Warn("postgres: notifications of committed changes not sent before Close gave up; listeners find the work by polling", "count", left)
			}
			return
		}
	}
}

// flush sends the pending notifications, oldest first, until none is left
// or a.ctx ends, connecting first when there is no connection. Unless it is
// the last flush, it returns once close has been called, leaving the rest
// to the last one.
func (a *announcer) flush(last bool) {
	for a.ctx.Err() == nil {
		if !last && a.stopping() {
			return
		}
		if a.conn == nil && !a.connect() {
			if !a.pause(last) {
				return
			}
			continue
		}
		if !last && !a.spaced() {
			return
		}
		batch := a.retry
		if batch == nil {
			if batch = a.take(); len(batch) == 0 {
				return
			}
		}
		a.lastSend, a.sent1 = a.timers.Monotonic(), true
		sendCtx, cancel := a.within(a.ctx, announceTimeout)
		_, err := a.conn.Exec(sendCtx, notifyEach, args{"channel": a.channel, "payloads": batch})
		cancel()
		if err == nil {
			a.retry = nil
			a.sent.Add(int64(len(batch)))
			a.announcements.Add(1)
			a.delay = announceRetryMin
			continue
		}
		a.disconnect()
		if a.retry == nil {
			a.retry = batch
			a.log.Warn("postgres: notifications of committed changes not sent; sending them again on a new connection", "count", len(batch), "err", err)
		} else {
			a.retry = nil
			a.failed.Add(int64(len(batch)))
			a.log.Warn("postgres: notifications of committed changes not sent, twice; dropped (listeners find the work by polling)", "count", len(batch), "err", err)
		}
		if !a.pause(last) {
			return
		}
	}
}

// spaced waits until announceInterval has passed since the last
// announcement started. It reports false, at once, when close is called.
func (a *announcer) spaced() bool {
	wait := a.lastSend + announceInterval.Milliseconds() - a.timers.Monotonic()
	if !a.sent1 || wait <= 0 {
		return true
	}
	t := a.timers.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-a.stop:
		return false
	}
}

// take removes and returns the oldest waiting notifications, at most
// maxAnnounceBatch.
func (a *announcer) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := min(len(a.pending), maxAnnounceBatch)
	batch := a.pending[:n:n]
	if a.pending = a.pending[n:]; len(a.pending) == 0 {
		a.pending = nil
	}
	return batch
}

func (a *announcer) stopping() bool {
	select {
	case <-a.stop:
		return true
	default:
		return false
	}
}

// connect opens the dedicated connection; it reports whether it did.
func (a *announcer) connect() bool {
	ctx, cancel := a.within(a.ctx, announceTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, a.cfg)
	if err != nil {
		a.log.Warn("postgres: the announcer cannot connect; notifications wait", "err", err, "delay", a.delay)
		return false
	}
	a.conn = conn
	a.connections.Add(1)
	return true
}

// within is context.WithTimeout on a.timers: a context that ends when
// parent does or d has passed.
func (a *announcer) within(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t := a.timers.NewTimer(d.Milliseconds())
	go func() {
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
			t.Stop()
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// disconnect closes the connection, if there is one.
func (a *announcer) disconnect() {
	if a.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a.conn.Close(ctx)
	a.conn = nil
}

// pause waits a.delay after a failure, then doubles it (up to
// announceRetryMax). It reports false, without waiting the whole delay,
// when a.ctx ends or, unless last, when close is called.
func (a *announcer) pause(last bool) bool {
	t := a.timers.NewTimer(a.delay.Milliseconds())
	defer t.Stop()
	a.delay = min(2*a.delay, announceRetryMax)
	stop := a.stop
	if last {
		stop = nil
	}
	select {
	case <-t.C():
		return true
	case <-stop:
		return false
	case <-a.ctx.Done():
		return false
	}
}

// NotifyStats reports what the store's announcer did (see NotifyStats); all
// zero with Options.DisableNotify.
func (s *Store) NotifyStats() NotifyStats {
	if s.announcer == nil {
		return NotifyStats{}
	}
	return s.announcer.stats()
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
