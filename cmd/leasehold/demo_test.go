package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoDatabaseIsHealthy: the file `leasehold demo --dir` leaves is a
// database like any other: `leasehold doctor` on it says HEALTHY and exits
// 0 (with the demo's clock at 1970 it said UNHEALTHY: an idempotency
// record expired for decades).
func TestDemoDatabaseIsHealthy(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if status := run(context.Background(), []string{"demo", "--dir", dir}, &out, &out); status != 0 ||
		!strings.Contains(out.String(), "created + replayed; generation=1; status=completed; events=2") {
		t.Fatalf("leasehold demo: exit status %d\n%s", status, out.String())
	}
	status, report := doctorRun("--sqlite", filepath.Join(dir, "demo.db"))
	if status != 0 || !strings.Contains(report, "# leasehold doctor: HEALTHY") {
		t.Fatalf("leasehold doctor on the demo's database: exit status %d\n%s", status, report)
	}
}
