package postgres

import (
	"context"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/spec"
)

var _ spec.LockWaitReporter = (*Store)(nil)

// backends is the set of server process ids of a Store's pooled
// connections. Every Store of one schema shares its application_name and
// search_path, so neither tells one Store's sessions from another's; the
// backend pid, recorded as each connection opens, does.
type backends struct {
	mu   sync.Mutex
	pids map[int32]struct{}
}

func newBackends() *backends { return &backends{pids: map[int32]struct{}{}} }

// afterConnect is the pool's AfterConnect: it records the new session.
func (b *backends) afterConnect(_ context.Context, c *pgx.Conn) error {
	b.mu.Lock()
	b.pids[int32(c.PgConn().PID())] = struct{}{}
	b.mu.Unlock()
	return nil
}

// beforeClose is the pool's BeforeClose: it forgets the closing session.
func (b *backends) beforeClose(c *pgx.Conn) {
	b.mu.Lock()
	delete(b.pids, int32(c.PgConn().PID()))
	b.mu.Unlock()
}

func (b *backends) list() []int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]int32, 0, len(b.pids))
	for pid := range b.pids {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// LockWaits implements spec.LockWaitReporter: the number of this Store's
// sessions that pg_stat_activity shows waiting for a heavyweight lock
// (wait_event_type 'Lock': a row's transaction id, a tuple, a relation, or an
// advisory lock such as admission's key lock), except waits for an
// 'object' lock: the one object lock a pooled session takes is the one
// PostgreSQL serializes notifying commits with, which the announcer's
// pg_notify, not a call, waits for. It asks on a connection of
// its own from the pool, never on a waiting one (a waiting call holds its
// connection until it returns); with every pooled connection held it waits
// for a free one, so callers bound it with ctx. The announcer's LISTEN
// connection is not pooled and never counted.
func (s *Store) LockWaits(ctx context.Context) (int, error) {
	pids := s.backends.list()
	var n int
	err := s.pool.QueryRow(ctx, `SELECT pg_catalog.count(*)::int FROM pg_catalog.pg_stat_activity
		WHERE wait_event_type = 'Lock' AND wait_event <> 'object' AND pid = ANY($1::int4[]) AND pid <> pg_catalog.pg_backend_pid()`, pids).Scan(&n)
	if err != nil {
		return 0, typed(ctx, err)
	}
	return n, nil
}
