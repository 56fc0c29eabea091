package sqlite

import (
	"context"

	"github.com/leasehold/leasehold/spec"
)

var _ spec.LockWaitReporter = (*Store)(nil)

// LockWaits implements spec.LockWaitReporter: the number of this Store's
// writing calls queued for the database's write lock behind a writer of
// another Store (or of this one) in this process — the process-wide writer
// queue every writer of the file passes before BEGIN IMMEDIATE (writerLock).
// A writer that waits inside SQLite's own busy handler (for a writer in
// another process) is not counted: modernc.org/sqlite installs its own busy
// handler and offers no hook into it. It touches no connection.
func (s *Store) LockWaits(context.Context) (int, error) { return int(s.waiting.Load()), nil }
