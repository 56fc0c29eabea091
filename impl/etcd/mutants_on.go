//go:build leasehold_mutants

package etcd

import "os"

// mutant reports whether the deliberately broken variant name is on
// (LEASEHOLD_ETCD_MUTANT), so that a test can show the checks catch it.
// The variants exist only under the leasehold_mutants build tag.
func mutant(name string) bool { return os.Getenv("LEASEHOLD_ETCD_MUTANT") == name }
