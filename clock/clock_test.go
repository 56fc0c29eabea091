package clock

import (
	"errors"
	"math"
	"testing"
)

func TestAdd(t *testing.T) {
	cases := []struct {
		name    string
		t, d    int64
		want    int64
		wantErr error
	}{
		{"zero", 0, 0, 0, nil},
		{"plain", 1000, 30_000, 31_000, nil},
		{"to the edge", math.MaxInt64 - 5, 5, math.MaxInt64, nil},
		{"one past the edge", math.MaxInt64 - 5, 6, 0, ErrOverflow},
		{"max plus max", math.MaxInt64, math.MaxInt64, 0, ErrOverflow},
		{"negative time", -1, 5, 0, ErrNegative},
		{"negative duration", 5, -1, 0, ErrNegative},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Add(c.t, c.d)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("Add(%d, %d) error = %v, want %v", c.t, c.d, err, c.wantErr)
			}
			if err == nil && got != c.want {
				t.Fatalf("Add(%d, %d) = %d, want %d", c.t, c.d, got, c.want)
			}
		})
	}
}

func TestManual(t *testing.T) {
	m := NewManual(10)
	if got := m.Now(); got != 10 {
		t.Fatalf("Now() = %d, want 10", got)
	}
	if got, err := m.Advance(5); err != nil || got != 15 {
		t.Fatalf("Advance(5) = %d, %v; want 15, nil", got, err)
	}
	m.Set(math.MaxInt64 - 1)
	if _, err := m.Advance(2); !errors.Is(err, ErrOverflow) {
		t.Fatalf("Advance past MaxInt64: error = %v, want ErrOverflow", err)
	}
	if got := m.Now(); got != math.MaxInt64-1 {
		t.Fatalf("a refused Advance moved the clock to %d", got)
	}
	if _, err := m.Advance(-1); !errors.Is(err, ErrNegative) {
		t.Fatalf("Advance(-1): error = %v, want ErrNegative", err)
	}
}

func TestRecorder(t *testing.T) {
	m := NewManual(7)
	r := &Recorder{Source: m}
	if _, n := r.Last(); n != 0 {
		t.Fatalf("reads before any Now = %d, want 0", n)
	}
	r.Now()
	m.Set(9)
	if got, n := r.Last(); got != 7 || n != 1 {
		t.Fatalf("Last() = %d, %d; want 7, 1 (the value read, not the clock's current value)", got, n)
	}
}
