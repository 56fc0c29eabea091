package history

import "sync"

// Provider simulates an external system (a payment API, say) that honours
// fencing: a call carrying a generation older than one it has already seen
// for the key is rejected. It does not deduplicate by key — the effect
// ledger must — so Applied counting above one is a duplicated effect.
type Provider struct {
	mu      sync.Mutex
	applied map[string]int
	fence   map[string]int64
}

// NewProvider returns a provider with nothing applied.
func NewProvider() *Provider {
	return &Provider{applied: map[string]int{}, fence: map[string]int64{}}
}

// Call applies the effect for key at generation gen, unless fenced off.
func (p *Provider) Call(key string, gen int64) (applied bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen < p.fence[key] {
		return false
	}
	p.fence[key] = gen
	p.applied[key]++
	return true
}

// Status reports whether the effect for key was applied (reconciliation).
func (p *Provider) Status(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied[key] > 0
}

// Duplicates returns the keys applied more than once.
func (p *Provider) Duplicates() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, n := range p.applied {
		if n > 1 {
			out[k] = n
		}
	}
	return out
}
