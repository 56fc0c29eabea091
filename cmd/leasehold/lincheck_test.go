package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/harness"
	"github.com/leasehold/leasehold/harness/history"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
	"github.com/leasehold/leasehold/spec"
)

// TestLincheck: a recorded history checks as linearizable; one with a
// doctored claim does not; and an empty, misspelled or incomplete file is
// an error, never a pass.
func TestLincheck(t *testing.T) {
	w := harness.Workload{Factory: sqlitetest.Factory, Config: harness.TestConfig(), Seed: 3, Tenants: []string{"t1"},
		Workers: 2, APIs: 1, Ops: 200}
	h, err := w.Record(t.Context(), t)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	head := history.Header{Store: "sqlite", Seed: w.Seed, Partitioned: true, Drained: true, Config: w.Config, Replay: "replay"}
	good, err := history.Encode(h, head)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := lincheck(&out, write("good.json", good), time.Minute); err != nil || !strings.Contains(out.String(), "linearizability Ok") {
		t.Fatalf("a recorded history: want Ok, got %v\n%s", err, out.String())
	}
	for i, e := range h.Entries {
		if leases, ok := e.Out.Result.Value.([]spec.Lease); ok && len(leases) > 0 {
			bad := append([]spec.Lease(nil), leases...)
			bad[0].Generation += 2
			h.Entries[i].Out.Result.Value = bad
			break
		}
	}
	doctored, _ := history.Encode(h, head)
	out.Reset()
	if err := lincheck(&out, write("doctored.json", doctored), time.Minute); err == nil || !strings.Contains(out.String(), "linearizability Illegal") {
		t.Fatalf("a doctored history: want Illegal and an error, got %v\n%s", err, out.String())
	}
	for name, data := range map[string]string{
		"empty":       "",
		"no entries":  `{"store":"x","entries":[]}`,
		"misspelled":  strings.Replace(string(good), `"entries"`, `"entrys"`, 1),
		"incomplete":  `{"store":"x","config":{},"entries":[{"kind":"claim","req":{}}]}`,
		"not a value": "[]",
	} {
		if err := lincheck(&out, write("bad.json", []byte(data)), time.Minute); err == nil {
			t.Errorf("%s: want an error, got a pass", name)
		}
	}
}
