//go:build !leasehold_mutants

package etcd

// mutant is always false outside the leasehold_mutants build tag.
func mutant(string) bool { return false }
