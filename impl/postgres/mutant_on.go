//go:build leasehold_mutants

package postgres

import "slices"

// activeMutant is the broken behaviour switched on, or "".
var activeMutant string

// SetMutant switches a mutant on ("" for none) for every Store in the process
// and returns a function that restores the previous one. It exists only in
// leasehold_mutants builds. It panics on an unknown name.
func SetMutant(name string) (restore func()) {
	if name != "" && !slices.Contains(Mutants, name) {
		panic("postgres: unknown mutant " + name)
	}
	prev := activeMutant
	activeMutant = name
	return func() { activeMutant = prev }
}
