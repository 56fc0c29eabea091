package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/impl/sqlite"
	"github.com/leasehold/leasehold/spec"
)

// TestMain stops pgtest's private PostgreSQL cluster, if one was
// started (see pgtest).
func TestMain(m *testing.M) { pgtest.Main(m) }

// stuckRun leaves, in s, a run with one attempt claimed by a worker that
// died an hour ago (by this host's clock): the store's clock is set back,
// so no test waits for a lease to expire.
func stuckRun(t *testing.T, open func(clock.Clock) spec.Store) {
	t.Helper()
	ctx := context.Background()
	past := clock.NewManual(time.Now().Add(-time.Hour).UnixMilli())
	s := open(past)
	defer s.Close()
	create := func(run string) {
		if _, err := s.CreateRun(ctx, spec.CreateRunRequest{Tenant: "acme", Operation: "work", IdempotencyKey: "k-" + run,
			RunID: run, Payload: []byte(`{}`), MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	create("r-stuck")
	if l, err := s.Claim(ctx, spec.ClaimRequest{Tenant: "acme", Worker: "w-dead", LeaseMs: 10_000, Limit: 1}); err != nil || len(l) != 1 {
		t.Fatalf("claim: %v, %v", l, err)
	}
	create("r-waiting")
}

// doctorRun runs `leasehold doctor` with args and returns its exit status
// and output.
func doctorRun(args ...string) (int, string) {
	var out bytes.Buffer
	status := run(context.Background(), append([]string{"doctor"}, args...), &out, &out)
	return status, out.String()
}

// testDoctorCommand: a stuck run makes the doctor exit 1 with the plan to
// reap it; --repair reaps it and exits 0; the next run is healthy.
func testDoctorCommand(t *testing.T, target []string) {
	dir := t.TempDir()
	status, out := doctorRun(append(target, "--reports", dir)...)
	if status != 1 || !strings.Contains(out, "# leasehold doctor: UNHEALTHY") || !strings.Contains(out, "| reapable | fail |") ||
		!strings.Contains(out, "- reap acme/r-stuck (generation 1, owner w-dead): planned") ||
		!strings.Contains(out, "leasehold doctor: unhealthy: reapable failed") {
		t.Fatalf("doctor on a stuck run: exit %d, output:\n%s", status, out)
	}
	var rep struct {
		Verdict string `json:"verdict"`
		Repairs struct {
			Mode    string                             `json:"mode"`
			Actions []struct{ Action, Outcome string } `json:"actions"`
		} `json:"repairs"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "doctor.json"))
	if err != nil || json.Unmarshal(b, &rep) != nil || rep.Verdict != "unhealthy" || rep.Repairs.Mode != "dry_run" || len(rep.Repairs.Actions) != 1 {
		t.Fatalf("doctor.json (%v):\n%s", err, b)
	}
	if md, err := os.ReadFile(filepath.Join(dir, "doctor.md")); err != nil || !strings.Contains(string(md), "## Repairs (dry run)") {
		t.Fatalf("doctor.md (%v):\n%s", err, md)
	}
	status, out = doctorRun(append(target, "--repair", "--actor", "ops-test", "--json")...)
	if status != 0 || !strings.Contains(out, `"mode": "applied"`) || !strings.Contains(out, `"outcome": "applied"`) || !strings.Contains(out, `"verdict": "healthy"`) {
		t.Fatalf("doctor --repair: exit %d, output:\n%s", status, out)
	}
	status, out = doctorRun(target...)
	if status != 0 || !strings.Contains(out, "# leasehold doctor: HEALTHY") || !strings.Contains(out, "Nothing to repair.") {
		t.Fatalf("doctor after the repair: exit %d, output:\n%s", status, out)
	}
}

func TestDoctorCommandSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.db")
	stuckRun(t, func(c clock.Clock) spec.Store {
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{Config: spec.DefaultConfig(), Clock: c})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	testDoctorCommand(t, []string{"--sqlite", path})
}

func TestDoctorCommandPostgres(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	stuckRun(t, func(c clock.Clock) spec.Store {
		s, err := postgres.Open(context.Background(), dsn, postgres.Options{Config: spec.DefaultConfig(), Clock: c, Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	testDoctorCommand(t, []string{"--dsn", dsn, "--schema", schema})
}
