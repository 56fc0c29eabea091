package harness

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// flakySnapshots answers unavailable (or err) for its first fails calls.
type flakySnapshots struct {
	fails, calls int
	err          error
}

func (f *flakySnapshots) Snapshot(context.Context) (spec.Snapshot, error) {
	f.calls++
	if f.calls <= f.fails {
		return spec.Snapshot{}, f.err
	}
	return spec.Snapshot{Runs: []spec.Run{{ID: "r1"}}}, nil
}

// TestReadSnapshotRetriesUnavailable: the accounting's reads ride out a
// store's unavailable answers (a replicated store losing a member) and
// return any other error at once.
func TestReadSnapshotRetriesUnavailable(t *testing.T) {
	ctx := context.Background()
	f := &flakySnapshots{fails: 3, err: spec.Errorf(spec.CodeUnavailable, "a member is down")}
	snap, err := readSnapshot(ctx, f)
	if err != nil || len(snap.Runs) != 1 || f.calls != 4 {
		t.Fatalf("after 3 unavailable answers: %d runs, err %v, %d calls; want 1 run, no error, 4 calls", len(snap.Runs), err, f.calls)
	}
	other := errors.New("a broken store")
	f = &flakySnapshots{fails: 3, err: other}
	if _, err := readSnapshot(ctx, f); !errors.Is(err, other) || f.calls != 1 {
		t.Fatalf("another error: err %v after %d calls; want it returned after 1 call", err, f.calls)
	}
}
