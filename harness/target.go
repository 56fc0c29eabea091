package harness

import "github.com/leasehold/leasehold/impl/storetest"

// Target is a store the harness checks: its name in reports, the factory
// that opens it, and what a replay command needs besides the seed.
type Target struct {
	// Name names the store in reports and in the figures it reports ("sqlite").
	Name    string
	Factory storetest.Factory
	// Env is the environment the calling test needs to run again (for a
	// store given as a command: LEASEHOLD_STORE_CMD); every replay command
	// starts with it.
	Env map[string]string
	// Tags are the build tags the calling test needs ("" for none).
	Tags string
	// Transient marks a store that is not part of this repository (a
	// command under `leasehold verify --store-cmd`): a failing property
	// run's failfile is kept in the run's reports directory only, never
	// left in the package's testdata/, where rapid would replay it on every
	// later run against whatever store the next command is, nor in
	// reports/failfiles, which make replay holds this repository to.
	Transient bool
}
