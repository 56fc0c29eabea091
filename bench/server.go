package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// server is the admin connection to the PostgreSQL server under test: it
// creates the benchmark databases and reads the counters around each phase.
type server struct {
	conn *pgx.Conn
	info PostgresInfo
	// postmaster is the server's postmaster process on this machine (0:
	// not found, the server runs elsewhere): its CPU time is counted with
	// that of its children, and no other PostgreSQL server's.
	postmaster int
}

// settingsThatMatter are the server settings that decide a commit-bound
// benchmark's figures; the report prints them.
var settingsThatMatter = []string{"synchronous_commit", "fsync", "shared_buffers", "wal_sync_method",
	"full_page_writes", "commit_delay", "wal_buffers", "max_wal_size", "checkpoint_timeout", "work_mem",
	"max_connections", "autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor", "jit"}

func openServer(ctx context.Context, dsn string) (*server, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	s := &server{conn: conn, info: PostgresInfo{Settings: map[string]string{}}}
	if err := conn.QueryRow(ctx, `SELECT version()`).Scan(&s.info.Version); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	if _, _, ppid, ok := postgresCPU("/proc/" + strconv.Itoa(backend)); ok {
		s.postmaster = ppid
	}
	for _, name := range settingsThatMatter {
		var v string
		if err := conn.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			conn.Close(ctx)
			return nil, err
		}
		s.info.Settings[name] = v
	}
	return s, nil
}

func (s *server) close() { s.conn.Close(context.Background()) }

// recreate drops the database if it exists and creates it empty.
func (s *server) recreate(ctx context.Context, name string) error {
	if err := s.drop(ctx, name); err != nil {
		return err
	}
	_, err := s.conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize())
	return err
}

func (s *server) drop(ctx context.Context, name string) error {
	_, err := s.conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
	return err
}

// counters is what the server and this process have done so far; the
// difference of two readings is a phase's cost.
type counters struct {
	at        time.Time
	xids      int64 // the next transaction id: the count of writing transactions so far
	walBytes  int64 // pg_current_wal_lsn() in bytes
	commits   int64 // pg_stat_database.xact_commit of the phase's database
	serverCPU time.Duration
	clientCPU time.Duration
}

// read takes a reading. Writing transactions are counted by transaction
// ids: every transaction that writes is assigned one, and the next id
// (pg_snapshot_xmax of a fresh snapshot) is exact at once, unlike
// pg_stat_database's counters, which a backend publishes up to seconds
// late. Read-only transactions (an empty claim) are not counted. The server
// is the benchmark's alone while it runs, so the counts are the phase's.
//
// Commits are pg_stat_database.xact_commit of db (read-only transactions
// included: an empty claim is a commit too). A backend publishes its
// counts at most once a second while busy and up to ten seconds after it
// goes idle, but always when it exits: so the after-reading of a phase that
// counts commits is taken once the phase's clients have closed their pools
// and their backends are gone (see measure).
func (s *server) read(ctx context.Context, db string) (counters, error) {
	c := counters{at: time.Now(), serverCPU: serverCPU(s.postmaster), clientCPU: processCPU()}
	err := s.conn.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
		pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = $1), 0)`, db).Scan(&c.xids, &c.walBytes, &c.commits)
	return c, err
}

// awaitNoBackends waits (up to 5 s) until no backend but this connection's
// is connected to db, so that every backend of the phase has published its
// counts.
func (s *server) awaitNoBackends(ctx context.Context, db string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		if err := s.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, db).Scan(&n); err != nil {
			return err
		}
		if n == 0 || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Cost is what one phase cost, per job.
type Cost struct {
	WriteTxPerJob  float64 `json:"write_transactions_per_job"`
	WALBytesPerJob float64 `json:"wal_bytes_per_job"`
	// CommitsPerJob is xact_commit of the phase's database per job (zero
	// where it was not counted: the ceiling, SQLite).
	CommitsPerJob   float64 `json:"commits_per_job"`
	ServerCPUPerJob float64 `json:"server_cpu_us_per_job"` // PostgreSQL processes, µs
	ClientCPUPerJob float64 `json:"client_cpu_us_per_job"` // this program, µs
}

// cost is the per-job cost between two readings.
func cost(before, after counters, jobs int) Cost {
	n := float64(jobs)
	return Cost{
		WriteTxPerJob:   float64(after.xids-before.xids) / n,
		WALBytesPerJob:  float64(after.walBytes-before.walBytes) / n,
		CommitsPerJob:   float64(after.commits-before.commits) / n,
		ServerCPUPerJob: float64((after.serverCPU - before.serverCPU).Microseconds()) / n,
		ClientCPUPerJob: float64((after.clientCPU - before.clientCPU).Microseconds()) / n,
	}
}

// measure runs fn and returns its wall time and per-job cost. end, when
// set, closes the phase's clients after fn (not timed); the after-reading
// then waits for their backends to exit, so that the commit count of db is
// complete. Without end the commit count is left zero.
func (s *server) measure(ctx context.Context, jobs int, db string, fn func() error, end func()) (time.Duration, Cost, error) {
	// No wait before: the phase's own clients are already connected (they
	// loaded its jobs); what they committed and have not yet published is
	// counted in the phase (a few statements of the loader).
	before, err := s.read(ctx, db)
	if err != nil {
		return 0, Cost{}, err
	}
	start := time.Now()
	if err := fn(); err != nil {
		if end != nil {
			end()
		}
		return 0, Cost{}, err
	}
	elapsed := time.Since(start)
	// Before end: the reading leaves out closing the phase's pools.
	after, err := s.read(ctx, db)
	if err != nil {
		return 0, Cost{}, err
	}
	if end != nil {
		end()
		if err := s.awaitNoBackends(ctx, db); err != nil {
			return 0, Cost{}, err
		}
		if err := s.conn.QueryRow(ctx, `SELECT coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = $1), 0)`, db).Scan(&after.commits); err != nil {
			return 0, Cost{}, err
		}
	}
	c := cost(before, after, jobs)
	if end == nil {
		c.CommitsPerJob = 0
	}
	return elapsed, c, nil
}

// withDatabase returns dsn pointing at database name: a URL's path is
// replaced; a key/value string gets a later dbname, which wins.
func withDatabase(dsn, name string) (string, error) {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("bench: bad DSN: %w", err)
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTicks is USER_HZ, the unit of /proc/*/stat times (100 on Linux).
const clockTicks = 100

// serverCPU is the CPU time of the PostgreSQL server whose postmaster is
// the process postmaster on this machine (the server under test runs here):
// the postmaster's own CPU time and its exited children's, and each live
// child's own. The postmaster's children are the backends and the server's
// own processes: a backend that exits between two readings is counted in
// the first as itself and in the second in the postmaster's children's
// time, so the difference holds what it did in between (to within the
// ticks of the children's time). Counting live processes alone lost that,
// and took off what the backend had done before the first reading. Other
// PostgreSQL servers on the machine (a test's private cluster that stops
// between two readings, say) are not counted; the other clients of the
// same server are, and the report's spreads show when they were busy.
// postmaster 0 (not found) counts every process named postgres. Zero where
// /proc is not available.
func serverCPU(postmaster int) time.Duration {
	return consistentCPU(func() (own, reaped time.Duration) { return scanPostgres("/proc", postmaster) })
}

// consistentCPU is the total of a scan (own + reaped) during which no
// child was reaped. A scan reads one process after another: a backend
// reaped between the reading of its own time and that of its parent's
// children's time would be counted twice, and once the other way round
// not at all. So the reaped time is read again after the scan, and a scan
// it changed across is taken again (a few times at most; a child of less
// than a tick goes unseen, and costs at most that).
func consistentCPU(scan func() (own, reaped time.Duration)) time.Duration {
	_, before := scan()
	for try := 1; ; try++ {
		own, reaped := scan()
		_, after := scan()
		if after == before || try == 5 {
			return own + reaped
		}
		before = after
	}
}

// scanPostgres sums, over the processes of proc (/proc) named postgres that
// are the postmaster or its children (every one, for postmaster 0), its own
// CPU time and its exited children's.
func scanPostgres(proc string, postmaster int) (own, reaped time.Duration) {
	dirs, err := filepath.Glob(filepath.Join(proc, "[0-9]*"))
	if err != nil {
		return 0, 0
	}
	for _, dir := range dirs {
		o, r, ppid, ok := postgresCPU(dir)
		if !ok {
			continue
		}
		if pid, _ := strconv.Atoi(filepath.Base(dir)); postmaster == 0 || pid == postmaster || ppid == postmaster {
			own, reaped = own+o, reaped+r
		}
	}
	return own, reaped
}

// postgresCPU is, if the process whose /proc directory is dir is named
// postgres, its own CPU time, its exited children's (cutime and cstime in
// stat, in ticks) and its parent's process id. Its own is its scheduler
// run time in nanoseconds (schedstat) where the kernel keeps it, else its
// utime and stime in ticks, each short by up to a tick: over the
// twenty-odd processes of a phase, too coarse for a short phase.
func postgresCPU(dir string) (own, reaped time.Duration, ppid int, ok bool) {
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || s[open+1:end] != "postgres" {
		return 0, 0, 0, false
	}
	// After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return 0, 0, 0, false
	}
	ticks := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * time.Second / clockTicks
	}
	ppid, _ = strconv.Atoi(f[1])
	own = ticks(11) + ticks(12)
	if b, err := os.ReadFile(dir + "/schedstat"); err == nil {
		// run time (ns), wait time (ns), time slices
		if g := strings.Fields(string(b)); len(g) > 0 {
			if ns, err := strconv.ParseInt(g[0], 10, 64); err == nil {
				own = time.Duration(ns)
			}
		}
	}
	return own, ticks(13) + ticks(14), ppid, true
}

// gitCommit is the commit of the code in dir, with "+dirty" when the work
// tree has changes to tracked files.
func gitCommit(dir string) string {
	if dir == "" {
		dir = "."
	}
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		commit += "+dirty"
	}
	return commit
}

func hostInfo() HostInfo {
	h := HostInfo{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				if i := strings.IndexByte(line, ':'); i >= 0 {
					h.CPUModel = strings.TrimSpace(line[i+1:])
				}
				break
			}
		}
	}
	return h
}
