package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache holds the store's statements prepared once on its *sql.DB, keyed
// by their text, so that SQLite parses and plans each of them once per
// connection instead of on every call (database/sql keeps a prepared copy per
// connection and tx.StmtContext reuses it). The keys are the SQL constants
// of queries.go, the fixed reads of read.go and the mutants' statements
// derived from them at init: a bounded set, since no statement is built per
// call. Keying by text means a mutant's statement is its own entry.
//
// A statement is prepared on the pool, which needs a free connection; a
// transaction that asked for one while holding its own connection could wait
// forever for the pool (MaxConns 1, or every connection in a transaction).
// So a miss runs the text unprepared this once and prepares it in the
// background, where waiting for a connection blocks no one.
type stmtCache struct {
	db      *sql.DB
	mu      sync.Mutex
	stmts   map[string]*sql.Stmt // nil value: being prepared
	closed  bool
	pending sync.WaitGroup
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, stmts: map[string]*sql.Stmt{}}
}

// get returns the prepared statement for query, or nil after starting its
// preparation (or while it is being prepared, or once the cache is closed).
func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.stmts[query]
	if ok || c.closed {
		return st
	}
	c.stmts[query] = nil
	c.pending.Add(1)
	go c.prepare(query)
	return nil
}

func (c *stmtCache) prepare(query string) {
	defer c.pending.Done()
	st, err := c.db.Prepare(query)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		delete(c.stmts, query) // the next call tries again
	case c.closed:
		st.Close()
	default:
		c.stmts[query] = st
	}
}

// close closes every prepared statement and refuses new ones; a preparation
// in flight closes its statement, or fails once db is closed (Store.Close
// closes db, then waits for them on pending).
func (c *stmtCache) close() {
	c.mu.Lock()
	c.closed = true
	for _, st := range c.stmts {
		if st != nil {
			st.Close()
		}
	}
	c.mu.Unlock()
}

// txn is one operation's transaction. Its ExecContext, QueryContext and
// QueryRowContext are *sql.Tx's, run through the store's prepared statements;
// it has no other way to run SQL, so every statement of an operation goes
// through the cache. A statement's rows must be closed before the same
// statement runs again in the transaction (one prepared statement per
// connection), as every caller does.
type txn struct {
	tx    *sql.Tx
	cache *stmtCache
	// stmts are the statements bound to tx so far: a batch runs each
	// statement once per member.
	stmts map[string]*sql.Stmt
}

func (c *stmtCache) begin(ctx context.Context, opts *sql.TxOptions) (*txn, error) {
	tx, err := c.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &txn{tx: tx, cache: c}, nil
}

// stmt returns query bound to the transaction, or nil to run it as text.
func (t *txn) stmt(ctx context.Context, query string) *sql.Stmt {
	if st, ok := t.stmts[query]; ok {
		return st
	}
	shared := t.cache.get(query)
	if shared == nil {
		return nil
	}
	st := t.tx.StmtContext(ctx, shared)
	if t.stmts == nil {
		t.stmts = map[string]*sql.Stmt{}
	}
	t.stmts[query] = st
	return st
}

// ExecContext is (*sql.Tx).ExecContext.
func (t *txn) ExecContext(ctx context.Context, query string, a ...any) (sql.Result, error) {
	if st := t.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, a...)
	}
	return t.tx.ExecContext(ctx, query, a...)
}

// QueryContext is (*sql.Tx).QueryContext.
func (t *txn) QueryContext(ctx context.Context, query string, a ...any) (*sql.Rows, error) {
	if st := t.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, a...)
	}
	return t.tx.QueryContext(ctx, query, a...)
}

// QueryRowContext is (*sql.Tx).QueryRowContext.
func (t *txn) QueryRowContext(ctx context.Context, query string, a ...any) *sql.Row {
	if st := t.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, a...)
	}
	return t.tx.QueryRowContext(ctx, query, a...)
}

// Commit is (*sql.Tx).Commit; it closes the statements bound to the
// transaction, not the store's.
func (t *txn) Commit() error { return t.tx.Commit() }

// Rollback is (*sql.Tx).Rollback.
func (t *txn) Rollback() error { return t.tx.Rollback() }
