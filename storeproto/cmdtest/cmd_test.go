package cmdtest

import (
	"os"
	"os/exec"
	"testing"

	"github.com/leasehold/leasehold/harness/report"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/leaseholdtest"
	"github.com/leasehold/leasehold/storeproto"
)

// PythonPort is the command of the Python port, run from the repository root.
const PythonPort = "python3 ports/python-sqlite/store.py"

// target is the store under check: the command of LEASEHOLD_STORE_CMD, or
// the Python port. Replay commands carry the command.
func target(t *testing.T) leaseholdtest.Store {
	t.Helper()
	root, err := report.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd, fromEnv, err := storeproto.FromEnv(root)
	if err != nil {
		t.Fatal(err)
	}
	if !fromEnv {
		needPython(t)
		cmd = storeproto.Command{Line: PythonPort, Dir: root}
		return leaseholdtest.Store{Name: "python-sqlite", Factory: cmd.Factory()}
	}
	env := map[string]string{storeproto.EnvCmd: cmd.Line}
	if d := os.Getenv(storeproto.EnvDir); d != "" && d != root {
		env[storeproto.EnvDir] = d
	}
	if d := os.Getenv(storeproto.EnvTimeout); d != "" {
		env[storeproto.EnvTimeout] = d
	}
	return leaseholdtest.Store{Name: "store-cmd", Factory: cmd.Factory(), Env: env, Transient: true}
}

// needPython skips loudly without python3, or fails under CI (where the
// Python port must be checked).
func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		if pgtest.Required() {
			t.Fatalf("python3 is not on PATH, and CI must check the Python port (%v)", err)
		}
		t.Skipf("NO PYTHON: python3 is not on PATH (%v); set %s to check another store command", err, storeproto.EnvCmd)
	}
}

func TestConformance(t *testing.T) { leaseholdtest.Conformance(t, target(t)) }

func TestProperty(t *testing.T) { leaseholdtest.Property(t, target(t)) }

func TestLinearizable(t *testing.T) { leaseholdtest.Linearizability(t, target(t)) }

func TestScenarios(t *testing.T) { leaseholdtest.Scenarios(t, target(t)) }

func TestRuntime(t *testing.T) { leaseholdtest.Runtime(t, target(t)) }
