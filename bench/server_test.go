package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPostgresCPU: a postgres process's CPU time is its schedstat run time
// in nanoseconds where there is one, else its stat utime+stime in ticks;
// other processes are not counted.
func TestPostgresCPU(t *testing.T) {
	// A stat line with a name that has spaces and parentheses, as the
	// kernel writes it; utime 120 and stime 30 ticks.
	stat := func(name string) string {
		return "4242 (" + name + ") S 1 4242 4242 0 -1 4194560 1 0 0 0 120 30 0 0 20 0 1 0 100 1000 10\n"
	}
	for _, tc := range []struct {
		name, stat, schedstat string
		want                  time.Duration
		ok                    bool
	}{
		{"schedstat", stat("postgres"), "1503000123 2000 7\n", 1503000123, true},
		{"ticks without schedstat", stat("postgres"), "", 1500 * time.Millisecond, true},
		{"ticks when schedstat is unreadable", stat("postgres"), "garbage\n", 1500 * time.Millisecond, true},
		{"another process", stat("post gres (x)"), "1503000123 2000 7\n", 0, false},
		{"a truncated stat", "4242 (postgres) S 1 2\n", "", 0, false},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(tc.stat), 0o600); err != nil {
			t.Fatal(err)
		}
		if tc.schedstat != "" {
			if err := os.WriteFile(filepath.Join(dir, "schedstat"), []byte(tc.schedstat), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got, ok := postgresCPU(dir); got != tc.want || ok != tc.ok {
			t.Errorf("%s: postgresCPU = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := postgresCPU(filepath.Join(t.TempDir(), "gone")); ok {
		t.Errorf("a process that exited (no /proc entry) was counted")
	}
}
