//go:build leasehold_mutants

package browsertest

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/impl/mutant"
)

// TestChecksCatchBrokenUIs runs each check on the UI broken for it: each
// must fail, or it proves nothing.
func TestChecksCatchBrokenUIs(t *testing.T) {
	browser := startBrowser(t)
	for _, c := range checks {
		t.Run(c.name+"/"+c.mutant, func(t *testing.T) {
			e := newEnv(t, browser)
			defer mutant.Set(c.mutant)()
			err := c.check(e)
			if err == nil {
				t.Fatalf("%s passed on the broken UI %s", c.name, c.mutant)
			}
			if !errors.As(err, new(failure)) {
				t.Fatalf("%s did not reach a verdict on the broken UI %s: %v", c.name, c.mutant, err)
			}
			t.Logf("caught %s: %v", c.mutant, err)
		})
	}
}
