package spec

import (
	"math"
	"testing"
)

// TestCompletedPayloadIsObject: the hand-written run_completed payload is
// the bytes object writes for it, at the edges of int64 too.
func TestCompletedPayloadIsObject(t *testing.T) {
	for _, g := range []int64{0, 1, -1, 42, 1 << 53, math.MaxInt64, math.MinInt64} {
		if got, want := CompletedPayload(g), object(map[string]any{"generation": g}); got != want {
			t.Errorf("CompletedPayload(%d) = %s, want %s", g, got, want)
		}
	}
}
