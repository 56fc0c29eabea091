//go:build leasehold_mutants

package mutant

import (
	"slices"
	"sync/atomic"
)

var active atomic.Value // string

// Built is true in leasehold_mutants builds: a command that runs a test of
// this build again must build with the tag too.
const Built = true

// On reports whether the named mutant is switched on.
func On(name string) bool {
	a, _ := active.Load().(string)
	return a == name
}

// Set switches a mutant on ("" for none) for every store in the process and
// returns a function that restores the previous one. It exists only in
// leasehold_mutants builds. It panics on an unknown name.
func Set(name string) (restore func()) {
	if name != "" && !slices.Contains(Names, name) && !slices.Contains(Parts, name) && !slices.Contains(Listing, name) && !slices.Contains(UI, name) {
		panic("mutant: unknown mutant " + name)
	}
	prev, _ := active.Load().(string)
	active.Store(name)
	return func() { active.Store(prev) }
}
