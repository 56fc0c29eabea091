package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
)

// pinMode is how a drain's MVCC horizon is held back: by a REPEATABLE READ
// transaction of another client of the same database that has taken its
// snapshot and stays open, the way a long report or a forgotten session
// holds it in production. While it is open, no row version that became
// dead after its snapshot can be removed, by VACUUM or by page pruning,
// and no index entry pointing to one can be marked dead: every claim steps
// over the entries of the jobs claimed before it (bench/findings.md §32).
type pinMode string

const (
	pinNone pinMode = ""
	// pinWhole: the snapshot is taken before the drain starts and held to
	// its end.
	pinWhole pinMode = "whole"
	// pinMid: the snapshot is taken once half the drain's jobs are
	// completed, and held to its end.
	pinMid pinMode = "mid"
)

// pinModes are the pinned drains of every round, in the order measured.
var pinModes = []pinMode{pinWhole, pinMid}

// text names the mode for the report.
func (m pinMode) text() string {
	switch m {
	case pinWhole:
		return "horizon pinned for the whole drain"
	case pinMid:
		return "horizon pinned from the drain's midpoint"
	}
	return "unpinned"
}

// pin is a REPEATABLE READ transaction on a connection of its own to one
// database, its snapshot taken: it holds that database's horizon back
// until released. The connection is opened before the phase, so that
// taking the snapshot mid-phase costs a round trip, not a connection.
type pin struct {
	mode pinMode
	n    int // the drain's jobs (pinMid takes the snapshot at n/2)
	conn *pgx.Conn

	mu       sync.Mutex
	tx       pgx.Tx
	pid      int
	xmin     string // backend_xmin once taken
	err      error  // a failed take
	released bool
	taken    chan struct{} // closed once taken, or once released untaken
	once     sync.Once     // take, or close taken untaken
}

// openPin connects to dsn for a drain of n jobs pinned by mode (nil for
// pinNone). pinWhole takes its snapshot at once.
func openPin(ctx context.Context, dsn string, mode pinMode, n int) (*pin, error) {
	if mode == pinNone {
		return nil, nil
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("pin: %w", err)
	}
	p := &pin{mode: mode, n: n, conn: conn, taken: make(chan struct{})}
	if mode == pinWhole {
		p.once.Do(func() { p.take(ctx) })
		if err := p.wait(ctx); err != nil {
			p.release()
			return nil, err
		}
	}
	return p, nil
}

// progress is told how many jobs are completed; a pinMid pin takes its
// snapshot (in a goroutine of its own, so the caller does not wait) once
// it is told half of them.
func (p *pin) progress(ctx context.Context, done int) {
	if p != nil && p.mode == pinMid && done >= (p.n+1)/2 {
		p.once.Do(func() { go p.take(ctx) })
	}
}

// take begins the transaction and takes its snapshot; its outcome is
// recorded for wait.
func (p *pin) take(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer close(p.taken)
	p.err = func() error {
		tx, err := p.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return err
		}
		p.tx = tx
		// The first statement takes the transaction's snapshot; the
		// second reads the horizon it holds.
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_class`).Scan(&n); err != nil {
			return err
		}
		var xmin *string
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid(), backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&p.pid, &xmin); err != nil {
			return err
		}
		if xmin == nil {
			return errors.New("the pin's transaction holds no snapshot (backend_xmin is null)")
		}
		p.xmin = *xmin
		return nil
	}()
	if p.err != nil {
		p.err = fmt.Errorf("pin (%s): %w", p.mode, p.err)
	}
}

// wait waits until the snapshot was taken and returns the take's error.
func (p *pin) wait(ctx context.Context) error {
	select {
	case <-p.taken:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// held checks, at the end of the phase, that the pin was taken and still
// holds its horizon: another connection (admin, to any database of the
// server) sees the pin's backend with the same backend_xmin. A pinMid pin
// not taken by now (its drain never reached half) is an error.
func (p *pin) held(ctx context.Context, admin *pgx.Conn) error {
	if p == nil {
		return nil
	}
	select {
	case <-p.taken:
	default:
		return fmt.Errorf("pin (%s): the drain ended before its snapshot was taken", p.mode)
	}
	if err := p.wait(ctx); err != nil {
		return err
	}
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND backend_xmin::text = $2`, p.pid, p.xmin).Scan(&n); err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("pin (%s): backend %d no longer holds the horizon at xmin %s at the end of the drain", p.mode, p.pid, p.xmin)
	}
	return nil
}

// release ends the transaction and closes the connection; a nil or
// released pin: nothing to do.
func (p *pin) release() {
	if p == nil {
		return
	}
	p.once.Do(func() { close(p.taken) }) // a pinMid pin never taken: nothing to wait for
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return
	}
	p.released = true
	ctx := context.Background()
	if p.tx != nil {
		_ = p.tx.Rollback(ctx)
	}
	_ = p.conn.Close(ctx)
}

// claimCounters are a system's claim counters in its database's statistics,
// cumulative: the difference of two readings is a phase's.
type claimCounters struct {
	// indexReads is idx_tup_read summed over the indexes the claims scan:
	// the entries they returned, each one claimed job or an entry whose row
	// version the claim's snapshot cannot see (dead, or not yet committed)
	// and had to step over.
	indexReads int64
	// deadTuples is the table's n_dead_tup: row versions dead but not yet
	// removed (VACUUM or page pruning).
	deadTuples int64
}

// leaseholdClaims is leasehold's PostgreSQL store in schema: the two claim
// branches' indexes (migrations 1 and 3).
func leaseholdClaims(schema string) ClaimTarget {
	return ClaimTarget{Schema: schema, Table: "jobs", Indexes: []string{"jobs_due", "jobs_expired"}}
}

// readClaims reads the counters of t on a connection of its own to dsn.
// Backends publish their counts when they exit and at most once a second
// while busy: a reading after a phase is taken once its clients have
// closed (measure).
func readClaims(ctx context.Context, dsn string, t ClaimTarget) (claimCounters, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return claimCounters{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var c claimCounters
	err = conn.QueryRow(ctx, `SELECT
		coalesce((SELECT sum(idx_tup_read) FROM pg_stat_user_indexes WHERE schemaname = $1 AND relname = $2 AND indexrelname = ANY($3)), 0)::bigint,
		coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2), 0)`,
		cmp.Or(t.Schema, "public"), t.Table, t.Indexes).Scan(&c.indexReads, &c.deadTuples)
	return c, err
}

// fillClaims records a drain's claim counters: the index entries its claims
// read per job, and the dead row versions left at its end.
func (r *DrainResult) fillClaims(before, after claimCounters) {
	if r.Jobs > 0 {
		r.ClaimIndexReadsPerJob = float64(after.indexReads-before.indexReads) / float64(r.Jobs)
	}
	r.DeadRowVersions = after.deadTuples
}

// deadReadsPerJob is the claim-index entries read per job beyond the job
// itself: the entries of row versions the claims stepped over (0 when not
// counted).
func (d DrainResult) deadReadsPerJob() float64 {
	return max(0, d.ClaimIndexReadsPerJob-1)
}
