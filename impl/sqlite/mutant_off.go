//go:build !leasehold_mutants

package sqlite

// activeMutant is always "" outside leasehold_mutants builds.
const activeMutant = ""
