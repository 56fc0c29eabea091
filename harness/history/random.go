package history

import "sync/atomic"

// ScriptedRandom is a spec.Random whose next draw the harness chooses: it
// sets Next before an operation, and the model's Op carries the same value as
// its Jitter. Int64N returns Next reduced into [0, n) and counts the draw.
type ScriptedRandom struct {
	next  atomic.Int64
	draws atomic.Int64
}

// Set chooses the value of the next draws.
func (r *ScriptedRandom) Set(v int64) { r.next.Store(v) }

// Int64N implements spec.Random.
func (r *ScriptedRandom) Int64N(n int64) int64 {
	r.draws.Add(1)
	v := r.next.Load() % n
	if v < 0 {
		v += n
	}
	return v
}

// Draws returns how many draws have been made.
func (r *ScriptedRandom) Draws() int64 { return r.draws.Load() }
