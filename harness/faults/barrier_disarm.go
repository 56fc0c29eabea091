package faults

// Disarm removes x if it is still armed (its operation never reached it) and
// reports whether it did. A barrier whose operation ended before the hook
// point (for example a guarded write refused before it wrote anything) would
// otherwise stay armed and stop the client's next operation of that kind;
// the scenario runner disarms it when it reports that the pause never
// happened.
func (b *Barriers) Disarm(x *Barrier) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := barrierKey{x.Client, x.Op, x.Point}
	if b.armed[k] != x {
		return false
	}
	delete(b.armed, k)
	return true
}
