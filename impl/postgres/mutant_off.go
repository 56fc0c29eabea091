//go:build !leasehold_mutants

package postgres

// activeMutant is always "" outside leasehold_mutants builds.
const activeMutant = ""
