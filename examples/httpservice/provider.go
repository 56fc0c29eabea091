package main

import (
	"errors"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/spec"
	"github.com/leasehold/leasehold/worker"
)

// ErrStaleGeneration is Payments' refusal of a call whose generation is
// lower than one it has already seen for the key: the caller's lease was
// taken over. Nothing was charged.
var ErrStaleGeneration = errors.New("payments: a later attempt has already used this idempotency key; nothing charged")

// Payments is a stand-in for a payment provider that does its part of
// "never charges twice", as a real one must behind Job.Effect:
//
//   - It deduplicates by idempotency key: a second charge with a key that
//     was charged returns the original payment's reference and charges
//     nothing.
//   - It fences by generation: it remembers the highest generation (the
//     lease's fencing token) it has seen for each key, in a charge or a
//     status request, and refuses a charge with a lower one
//     (ErrStaleGeneration). A worker that was paused past its lease, whose
//     run another worker took over, cannot charge after the takeover.
//
// The worker's effect ledger and its own lease check stop almost every
// repeated call before it is made; these two rules stop the rest (see the
// worker package's documentation, "Effects").
type Payments struct {
	mu      sync.Mutex
	charged map[string]string // idempotency key -> payment reference
	seen    map[string]int64  // idempotency key -> highest generation seen
	charges int
}

// Charge takes the payment for key once, on behalf of generation, and
// returns its reference; the same key again returns the same reference.
func (p *Payments) Charge(key string, generation int64, o order) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if generation < p.seen[key] {
		return "", fmt.Errorf("%w (generation %d, seen %d)", ErrStaleGeneration, generation, p.seen[key])
	}
	p.see(key, generation)
	if ref, ok := p.charged[key]; ok {
		return ref, nil
	}
	if p.charged == nil {
		p.charged = map[string]string{}
	}
	p.charges++
	ref := fmt.Sprintf("pay_%d", p.charges)
	p.charged[key] = ref
	return ref, nil
}

// Status says whether key was charged, and records generation as seen.
func (p *Payments) Status(key string, generation int64) worker.EffectStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.see(key, generation)
	if ref, ok := p.charged[key]; ok {
		return worker.EffectStatus{State: spec.EffectSucceeded, ProviderRef: ref}
	}
	return worker.EffectStatus{State: spec.EffectFailed}
}

func (p *Payments) see(key string, generation int64) {
	if p.seen == nil {
		p.seen = map[string]int64{}
	}
	p.seen[key] = max(p.seen[key], generation)
}

// Calls returns how many charges were taken.
func (p *Payments) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charges
}
