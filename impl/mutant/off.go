//go:build !leasehold_mutants

package mutant

// On reports whether the named mutant is switched on: never, outside
// leasehold_mutants builds.
func On(name string) bool { return false }

// Built is false outside leasehold_mutants builds (see on.go).
const Built = false
