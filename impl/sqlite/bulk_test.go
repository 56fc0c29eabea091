package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

func TestPiecesCoverTheBatch(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 127, 128, 129, 255, 1000, spec.MaxBatch} {
		sum := 0
		for _, size := range pieces(n) {
			if _, ok := admissionTexts[size]; !ok {
				t.Fatalf("pieces(%d) has a piece of %d, which has no statement text", n, size)
			}
			sum += size
		}
		if sum != n {
			t.Fatalf("pieces(%d) = %v covers %d members, want %d", n, pieces(n), sum, n)
		}
	}
}

// TestBulkAdmissionAcrossPieces sends one batch of spec.MaxBatch members,
// whose replays, conflicts and taken run ids refer to members of other
// pieces and to runs stored before, and wants of every member the outcome
// that CreateRun gives it when the same requests come one by one.
func TestBulkAdmissionAcrossPieces(t *testing.T) {
	ctx := context.Background()
	open := func(name string) *Store {
		s, err := Open(ctx, filepath.Join(t.TempDir(), name), Options{Config: spec.DefaultConfig()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	req := func(key, runID, payload string) spec.CreateRunRequest {
		return spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: key, RunID: runID, Payload: []byte(payload)}
	}
	stored := []spec.CreateRunRequest{req("old-0", "old-0", `{}`), req("old-1", "old-1", `{}`)}
	var batch []spec.CreateRunRequest
	for i := 0; len(batch) < spec.MaxBatch; i++ {
		far := fmt.Sprint(i / 14 * 7) // a created member about i/2 back: most often in another piece
		switch i % 7 {
		case 1:
			batch = append(batch, req("k-"+far, "r-"+far, `{"n":`+far+`}`)) // replay of an earlier member
		case 2:
			batch = append(batch, req("k-"+far, "x-"+fmt.Sprint(i), `{"other":1}`)) // conflict with it
		case 3:
			batch = append(batch, req("y-"+fmt.Sprint(i), "r-"+far, `{}`)) // its run id, taken
		case 4:
			batch = append(batch, req("old-0", "z-"+fmt.Sprint(i), `{}`)) // replay of a stored run
		case 5:
			batch = append(batch, req("w-"+fmt.Sprint(i), "old-1", `{}`)) // a stored run id
		default:
			batch = append(batch, req("k-"+fmt.Sprint(i), "r-"+fmt.Sprint(i), `{"n":`+fmt.Sprint(i)+`}`))
		}
	}
	bulk, single := open("bulk.db"), open("single.db")
	for _, s := range []*Store{bulk, single} {
		for _, r := range stored {
			if _, err := s.CreateRun(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	outs, err := bulk.CreateRuns(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for i, r := range batch {
		want, wantErr := single.CreateRun(ctx, r)
		got := outs[i]
		if spec.CodeOf(got.Err) != spec.CodeOf(wantErr) || got.Result.Replayed != want.Replayed || got.Result.Run.ID != want.Run.ID {
			t.Fatalf("member %d (key %s, run %s): CreateRuns gave run %q replayed=%v err=%v; CreateRun gives run %q replayed=%v err=%v",
				i, r.IdempotencyKey, r.RunID, got.Result.Run.ID, got.Result.Replayed, got.Err, want.Run.ID, want.Replayed, wantErr)
		}
		kinds[fmt.Sprintf("%s replayed=%v", spec.CodeOf(wantErr), want.Replayed)]++
	}
	if len(kinds) != 4 {
		t.Fatalf("the batch should hold created, replayed, conflicting and taken members; it held %v", kinds)
	}
	t.Logf("outcomes: %v", kinds)
}
