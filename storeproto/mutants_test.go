//go:build leasehold_mutants

package storeproto_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/mutant"
)

// TestMutantAfterCommitAcceptsUnavailable: with the mutant harness that
// accepts unavailable after an after_commit fault, the check of
// TestAfterCommitFault must fail.
func TestMutantAfterCommitAcceptsUnavailable(t *testing.T) {
	defer mutant.Set(mutant.AfterCommitAcceptsUnavailable)()
	problems := afterCommitAnswers(t)
	if len(problems) == 0 {
		t.Fatalf("mutant %s survived: the harness accepted unavailable after an after_commit fault and nothing noticed", mutant.AfterCommitAcceptsUnavailable)
	}
	t.Logf("mutant %s caught: %d findings, the first: %s", mutant.AfterCommitAcceptsUnavailable, len(problems), problems[0])
}
