package main

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/spec"
)

// TestPaymentsNeverChargesTwice: whatever order two generations' calls for
// one key arrive in, Payments charges at most once: a repeat returns the
// original reference, and a generation lower than one seen is refused.
func TestPaymentsNeverChargesTwice(t *testing.T) {
	type call struct {
		status     bool // Status instead of Charge
		generation int64
		wantRef    string // Charge: the reference; Status: "" for failed
		wantStale  bool   // Charge refused with ErrStaleGeneration
	}
	cases := []struct {
		name    string
		calls   []call
		charges int
	}{
		{"one charge", []call{{generation: 1, wantRef: "pay_1"}}, 1},
		{"the same generation again gets the original payment", []call{{generation: 1, wantRef: "pay_1"}, {generation: 1, wantRef: "pay_1"}}, 1},
		{"a later generation gets the original payment", []call{{generation: 1, wantRef: "pay_1"}, {generation: 2, wantRef: "pay_1"}}, 1},
		{"a paused generation waking after the takeover's charge is refused",
			[]call{{status: true, generation: 2}, {generation: 2, wantRef: "pay_1"}, {generation: 1, wantStale: true}}, 1},
		{"a paused generation waking after the takeover's status request is refused",
			[]call{{status: true, generation: 2}, {generation: 1, wantStale: true}, {generation: 2, wantRef: "pay_1"}}, 1},
		{"status before any charge says failed", []call{{status: true, generation: 1}}, 0},
		{"status after the charge names it", []call{{generation: 1, wantRef: "pay_1"}, {status: true, generation: 2, wantRef: "pay_1"}}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &Payments{}
			for i, k := range c.calls {
				if k.status {
					st := p.Status("charge/r1", k.generation)
					want := spec.EffectFailed
					if k.wantRef != "" {
						want = spec.EffectSucceeded
					}
					if st.State != want || st.ProviderRef != k.wantRef {
						t.Fatalf("call %d: Status(generation %d) = %+v, want %s %q", i, k.generation, st, want, k.wantRef)
					}
					continue
				}
				ref, err := p.Charge("charge/r1", k.generation, order{Amount: 1200, Currency: "EUR"})
				if k.wantStale {
					if !errors.Is(err, ErrStaleGeneration) || ref != "" {
						t.Fatalf("call %d: Charge(generation %d) = %q, %v; want ErrStaleGeneration", i, k.generation, ref, err)
					}
					continue
				}
				if err != nil || ref != k.wantRef {
					t.Fatalf("call %d: Charge(generation %d) = %q, %v; want %q", i, k.generation, ref, err, k.wantRef)
				}
			}
			if got := p.Calls(); got != c.charges {
				t.Fatalf("%d charges taken, want %d", got, c.charges)
			}
		})
	}
	// Keys are independent.
	p := &Payments{}
	a, _ := p.Charge("charge/r1", 1, order{Amount: 1, Currency: "EUR"})
	b, _ := p.Charge("charge/r2", 1, order{Amount: 1, Currency: "EUR"})
	if a != "pay_1" || b != "pay_2" || p.Calls() != 2 {
		t.Fatalf("two keys charged %q and %q (%d charges), want pay_1, pay_2 and 2", a, b, p.Calls())
	}
}
