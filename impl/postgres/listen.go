package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/spec"
)

// LISTEN/NOTIFY. CreateRun, Replay and Cancel call pg_notify inside their
// own transactions, so a notification is delivered exactly when (and only
// if) the change it announces commits. Notifications are hints for
// spec.Notifier listeners (a worker waiting for work, a worker running an
// attempt that was just cancelled); nothing depends on them arriving.
//
// PostgreSQL serializes the commits of notifying transactions (a
// database-wide lock taken at commit), which bounds admission throughput on
// very busy servers; only run creation and cancellation notify.

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

const notifyQuery = `SELECT pg_notify(@channel, @payload)`

// notifyEach sends one notification per payload (a bulk admission's runs).
const notifyEach = `SELECT count(pg_notify(@channel, p)) FROM unnest(@payloads::text[]) AS p`

// notify queues a notification in t's transaction; PostgreSQL delivers it
// when the transaction commits and drops it if it rolls back. The payload is
// small (names and an integer), far below the 8000-byte limit.
func (s *Store) notify(t *txn, kind spec.NotificationKind, tenant, runID string, generation int64) error {
	if !s.notifies {
		return nil
	}
	p, err := notificationPayload(kind, tenant, runID, generation)
	if err != nil {
		return err
	}
	_, err = t.exec(notifyQuery, args{"channel": s.Channel(), "payload": p})
	return err
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
