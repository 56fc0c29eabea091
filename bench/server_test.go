package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
)

// TestPostgresCPU: a postgres process's own CPU time is its schedstat run
// time in nanoseconds where there is one, else its stat utime+stime in
// ticks; its exited children's is cutime+cstime; other processes are not
// counted.
func TestPostgresCPU(t *testing.T) {
	// A stat line as the kernel writes it: utime 120 and stime 30 ticks,
	// cutime 7 and cstime 3.
	stat := func(name string) string {
		return "4242 (" + name + ") S 1 4242 4242 0 -1 4194560 1 0 0 0 120 30 7 3 20 0 1 0 100 1000 10\n"
	}
	for _, tc := range []struct {
		name, stat, schedstat string
		own, reaped           time.Duration
		ppid                  int
		ok                    bool
	}{
		{"schedstat", stat("postgres"), "1503000123 2000 7\n", 1503000123, 100 * time.Millisecond, 1, true},
		{"ticks without schedstat", stat("postgres"), "", 1500 * time.Millisecond, 100 * time.Millisecond, 1, true},
		{"ticks when schedstat is unreadable", stat("postgres"), "garbage\n", 1500 * time.Millisecond, 100 * time.Millisecond, 1, true},
		// The name ends at the last ')': read to the first, it would be postgres.
		{"another process", stat("postgres) (x"), "1503000123 2000 7\n", 0, 0, 0, false},
		{"a truncated stat", "4242 (postgres) S 1 2 3 4 5 6 7 8 9 10 11 12 13\n", "", 0, 0, 0, false},
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
		if own, reaped, ppid, ok := postgresCPU(dir); own != tc.own || reaped != tc.reaped || ppid != tc.ppid || ok != tc.ok {
			t.Errorf("%s: postgresCPU = %v, %v, %v, %v; want %v, %v, %v, %v", tc.name, own, reaped, ppid, ok, tc.own, tc.reaped, tc.ppid, tc.ok)
		}
	}
	if _, _, _, ok := postgresCPU(filepath.Join(t.TempDir(), "gone")); ok {
		t.Errorf("a process that exited (no /proc entry) was counted")
	}
}

// TestScanCountsOneServer: the scan counts the postmaster given and its
// children, and no other server's processes (a test's private cluster that
// stops between two readings took its time out of the difference) nor
// other processes; postmaster 0 counts every postgres process.
func TestScanCountsOneServer(t *testing.T) {
	proc := t.TempDir()
	for _, p := range []struct {
		pid, ppid int
		name      string
		ticks     int // utime; cutime is a tenth of it
	}{
		{10, 1, "postgres", 100}, // the server under test
		{11, 10, "postgres", 20}, // its backend
		{12, 10, "postgres", 3},  // its walwriter
		{20, 1, "postgres", 500}, // another server
		{21, 20, "postgres", 70}, // its backend
		{30, 10, "bash", 900},    // not a postgres process
	} {
		dir := filepath.Join(proc, strconv.Itoa(p.pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%d (%s) S %d 1 1 0 -1 0 0 0 0 0 %d 0 %d 0 20 0 1 0 100 1000 10\n", p.pid, p.name, p.ppid, p.ticks, p.ticks/10)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tick := time.Second / clockTicks
	for _, tc := range []struct {
		postmaster  int
		own, reaped time.Duration
	}{
		{10, 123 * tick, 12 * tick},
		{20, 570 * tick, 57 * tick},
		{0, 693 * tick, 69 * tick},
	} {
		if own, reaped := scanPostgres(proc, tc.postmaster); own != tc.own || reaped != tc.reaped {
			t.Errorf("postmaster %d: own %v, reaped %v; want %v, %v", tc.postmaster, own, reaped, tc.own, tc.reaped)
		}
	}
}

// TestServerCPUCountsExitedBackends: a backend that works and exits between
// two readings of serverCPU is counted for what it did in between. Counting
// live processes alone, the difference lost that work and also took off
// what the backend had done before the first reading.
func TestServerCPUCountsExitedBackends(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	dir := "/proc/" + strconv.Itoa(pid)
	_, _, postmaster, ok := postgresCPU(dir)
	if !ok {
		t.Skipf("backend %d is not a process of this machine named postgres: the server runs elsewhere, and serverCPU reads /proc", pid)
	}
	before := serverCPU(postmaster)
	start, _, _, _ := postgresCPU(dir)
	if _, err := conn.Exec(ctx, `SELECT count(*) FROM generate_series(1, 3000000)`); err != nil {
		t.Fatal(err)
	}
	end, _, _, _ := postgresCPU(dir)
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Gone from /proc once the postmaster has reaped it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still in /proc 10 s after its connection closed", pid)
		}
	}
	used, got := end-start, serverCPU(postmaster)-before
	// The children's time is read in ticks: up to two short (cutime, cstime).
	if slack := 2 * time.Second / clockTicks; got < used-slack {
		t.Errorf("server CPU across the backend's exit: %v; want at least the %v it used in between (less %v of tick rounding)", got, used, slack)
	}
}

// TestConsistentCPU: a scan across which a child was reaped (its parent's
// reaped time changed) is taken again, and a scan is used only once the
// reaped time held still across it.
func TestConsistentCPU(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scans  [][2]time.Duration // (own, reaped) of each scan in turn
		want   time.Duration
		nScans int
	}{
		{"still", [][2]time.Duration{{0, 5}, {100, 5}, {0, 5}}, 105, 3},
		// A backend of 40 reaped during the second scan, which counted it
		// both as itself and in its parent's time: taken again.
		{"reaped during a scan", [][2]time.Duration{{0, 5}, {140, 45}, {0, 45}, {100, 45}, {0, 45}}, 145, 5},
		{"never still: the last scan", [][2]time.Duration{{0, 1}, {10, 2}, {0, 3}, {10, 4}, {0, 5}, {10, 6}, {0, 7},
			{10, 8}, {0, 9}, {10, 10}, {0, 11}}, 20, 11},
	} {
		n := 0
		got := consistentCPU(func() (time.Duration, time.Duration) {
			s := tc.scans[n]
			n++
			return s[0], s[1]
		})
		if got != tc.want || n != tc.nScans {
			t.Errorf("%s: %v after %d scans; want %v after %d", tc.name, got, n, tc.want, tc.nScans)
		}
	}
}
