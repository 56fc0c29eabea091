//go:build leasehold_mutants

package etcd_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMutantsEtcd shows that the checks reach this store: each broken
// variant must fail the check named, run as its own go test (the kit runs
// a check to pass, so a failure is observed from outside). A check may be
// one conformance test (TestConformance/<name>).
func TestMutantsEtcd(t *testing.T) {
	if os.Getenv("LEASEHOLD_ETCD_MUTANT") != "" {
		t.Skip("inside a mutant's run")
	}
	for _, c := range []struct{ mutant, test string }{
		{"no_compares", "TestLinearizable"},
		{"lost_answer_applied", "TestLinearizableUnderFaults"},
		{"bulk_ignores_fingerprint", "TestConformance/CreateRunsMembersAreIndependent"},
	} {
		t.Run(c.mutant, func(t *testing.T) {
			cmd := exec.Command("go", "test", "-tags", "leasehold_mutants", "-count=1", "-run", "^"+c.test+"$", ".")
			cmd.Env = append(os.Environ(), "LEASEHOLD_ETCD_MUTANT="+c.mutant, "LEASEHOLD_REPORTS="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s passed with the broken variant %s: the check does not reach it\n%s", c.test, c.mutant, tail(out))
			}
			t.Logf("%s caught %s:\n%s", c.test, c.mutant, tail(out))
		})
	}
}

func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var keep []string
	for _, l := range lines {
		if strings.Contains(l, "Illegal") || strings.Contains(l, "accounting") || strings.Contains(l, "FAIL") || strings.Contains(l, "lost") {
			keep = append(keep, l)
		}
	}
	if len(keep) > 12 {
		keep = keep[:12]
	}
	return strings.Join(keep, "\n")
}
