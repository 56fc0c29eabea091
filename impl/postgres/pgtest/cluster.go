package pgtest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/hang"
)

// EnvBin names the directory holding initdb and pg_ctl for Cluster; default
// DefaultBin.
const EnvBin = "LEASEHOLD_PG_BIN"

// DefaultBin is where Debian's postgresql-15 package installs its server
// binaries.
const DefaultBin = "/usr/lib/postgresql/15/bin"

// Cluster is a PostgreSQL server of one test's own, for fault tests that
// stop, restart or crash their server: never the shared server of DSN. It
// is initialized (initdb, trust authentication) into a fresh directory
// under the system's temporary directory and listens on a free loopback
// port and a Unix socket in that directory. Run as root, the server runs
// as the postgres OS user (runuser), since PostgreSQL refuses to run as
// root. fsync is off unless ClusterOptions.Durable: a Cluster is for
// restarts and lost connections, not for durability across a power loss.
type Cluster struct {
	bin, dir, data string
	port           int
	asPostgres     bool // run the binaries through runuser -u postgres
	opts           ClusterOptions
}

// ClusterOptions configures NewClusterWith; the zero value is NewCluster's
// cluster.
type ClusterOptions struct {
	// Data is the data directory initdb creates (a directory that does not
	// exist, or an empty one the server's user may write to). Default: one
	// in the cluster's temporary directory. A Data of the caller's is left
	// in place when the test ends. The socket and the server's log stay in
	// the temporary directory.
	Data string
	// Initialized says Data holds a data directory already (a copy of
	// InitDB's): no initdb.
	Initialized bool
	// Durable runs the server with fsync and full_page_writes on: for tests
	// of durability across a power loss. initdb never syncs what it wrote
	// (--no-sync): such a test makes its setup durable itself.
	Durable bool
	// Settings are more server settings, each "name=value".
	Settings []string
}

// NewCluster initializes and starts a Cluster for t; it is stopped and
// removed when t ends. Without the binaries (EnvBin, default DefaultBin) it
// skips t, or fails it when Required.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	return NewClusterWith(t, ClusterOptions{})
}

// NewClusterWith is NewCluster with options.
func NewClusterWith(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	c := newCluster(t, opts)
	if !opts.Initialized {
		c.initdb(t)
	}
	c.Start(t)
	return c
}

// InitDB initializes a data directory that no server runs on, removed when
// t ends: a template that clusters copy (ClusterOptions.Initialized), one
// initdb for many of them.
func InitDB(t testing.TB) string {
	t.Helper()
	c := newCluster(t, ClusterOptions{})
	c.initdb(t)
	return c.data
}

// newCluster finds the binaries and makes the cluster's directory.
func newCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		msg := fmt.Sprintf("NO POSTGRESQL SERVER BINARIES FOR THIS FAULT TEST: %v. It starts, stops and restarts a PostgreSQL server of its own "+
			"(never the shared one); install postgresql-15 or set %s to the directory holding initdb and pg_ctl.", err, EnvBin)
		if Required() {
			t.Fatalf("%s (%s=1 or %s=true: a PostgreSQL suite may not skip)", msg, EnvRequire, EnvCI)
		}
		t.Skip(msg)
	}
	c, err := makeCluster(bin, opts)
	if c != nil {
		t.Cleanup(func() {
			if err := c.remove(); err != nil {
				t.Errorf("pgtest: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return c
}

// binDir returns the directory of the server binaries (EnvBin, default
// DefaultBin), or why they are not there.
func binDir() (string, error) {
	bin := cmp.Or(os.Getenv(EnvBin), DefaultBin)
	for _, tool := range []string{"initdb", "pg_ctl"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			return "", err
		}
	}
	return bin, nil
}

// makeCluster makes a cluster's directory; running as root, it and
// opts.Data belong to the postgres OS user. A cluster it returns with an
// error is still to be removed.
func makeCluster(bin string, opts ClusterOptions) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "leasehold-pgcluster-")
	if err != nil {
		return nil, fmt.Errorf("cluster directory: %v", err)
	}
	c := &Cluster{bin: bin, dir: dir, data: cmp.Or(opts.Data, filepath.Join(dir, "data")), asPostgres: os.Geteuid() == 0, opts: opts}
	if !c.asPostgres {
		return c, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return c, fmt.Errorf("running as root, the cluster needs the postgres OS user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chmod(dir, 0o755); err != nil {
		return c, err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return c, fmt.Errorf("chown %s to postgres: %v", dir, err)
	}
	if opts.Data != "" {
		if err := os.MkdirAll(opts.Data, 0o700); err != nil {
			return c, err
		}
		if err := os.Chown(opts.Data, uid, gid); err != nil {
			return c, fmt.Errorf("chown %s to postgres: %v", opts.Data, err)
		}
	}
	return c, nil
}

// startPrivate initializes and starts a cluster with no test of its own:
// DSN's server when no DSN is configured (Main removes it).
func startPrivate() (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, fmt.Errorf("no PostgreSQL server binaries: %v; install postgresql-15 or set %s", err, EnvBin)
	}
	c, err := makeCluster(bin, ClusterOptions{})
	if err == nil {
		var out []byte
		if out, err = c.run("initdb", "-D", c.data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
			err = fmt.Errorf("initdb: %v\n%s", err, out)
		} else {
			err = c.start()
		}
	}
	if err != nil && c != nil {
		c.remove()
	}
	return c, err
}

// remove stops the cluster if it runs (immediate mode: its data is thrown
// away) and removes its directory.
func (c *Cluster) remove() error {
	var err error
	if _, statErr := os.Stat(filepath.Join(c.data, "postmaster.pid")); statErr == nil {
		if out, stopErr := c.pgCtl("stop", "-m", "immediate", "-w", "-t", pgCtlWait()); stopErr != nil {
			err = fmt.Errorf("stopping the cluster in %s: %v\n%s", c.dir, stopErr, out)
		}
	}
	os.RemoveAll(c.dir)
	return err
}

// initdb initializes the cluster's data directory.
func (c *Cluster) initdb(t testing.TB) {
	t.Helper()
	if out, err := c.run("initdb", "-D", c.data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
}

// DSN is the connection string of the cluster's postgres database (user
// postgres, no password, plain TCP on loopback).
func (c *Cluster) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Start starts the stopped cluster and waits until it accepts connections.
// The first start picks a free loopback port; later starts keep it, so a
// DSN taken before a restart still works after it.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// start is Start, returning what went wrong.
func (c *Cluster) start() error {
	first := c.port == 0
	for try := 0; ; try++ {
		if first {
			port, err := freePort()
			if err != nil {
				return err
			}
			c.port = port
		}
		out, err := c.pgCtl("start", "-w", "-t", pgCtlWait(), "-l", filepath.Join(c.dir, "server.log"), "-o", c.serverOptions())
		if err == nil {
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		// Another process may have taken the free port meanwhile: only a
		// first start may move to another one.
		if first && try < 2 && bytes.Contains(log, []byte("could not bind")) {
			continue
		}
		return fmt.Errorf("pg_ctl start: %v\n%s\nserver log:\n%s", err, out, log)
	}
}

// serverOptions are the postgres command line's options.
func (c *Cluster) serverOptions() string {
	o := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c max_connections=60", c.port, c.dir)
	if !c.opts.Durable {
		o += " -c fsync=off -c full_page_writes=off"
	}
	for _, s := range c.opts.Settings {
		o += " -c " + s
	}
	return o
}

// Log is the server's log so far.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
	return string(b)
}

// Stop shuts the cluster down in pg_ctl's fast mode: every session is
// terminated (its transaction rolled back), and the server exits once it
// has written a checkpoint.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if out, err := c.pgCtl("stop", "-m", "fast", "-w", "-t", pgCtlWait()); err != nil {
		t.Fatalf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
}

// Restart is Stop then Start, on the same port.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.Stop(t)
	c.Start(t)
}

// Conn opens a plain connection to the cluster (closed when t ends), for a
// test's own queries, such as pg_stat_activity.
func (c *Cluster) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN()+"&application_name=leasehold-pgtest")
	if err != nil {
		t.Fatalf("pgtest: connect to the cluster: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func (c *Cluster) pgCtl(args ...string) ([]byte, error) {
	return c.run("pg_ctl", append([]string{"-D", c.data}, args...)...)
}

// run runs one of the server binaries, as the postgres OS user when the
// test runs as root.
func (c *Cluster) run(tool string, args ...string) ([]byte, error) {
	name, argv := filepath.Join(c.bin, tool), args
	if c.asPostgres {
		name, argv = "runuser", append([]string{"-u", "postgres", "--", filepath.Join(c.bin, tool)}, args...)
	}
	ctx, cancel := hang.Context(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, name, argv...)
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// pgCtlWait is how long pg_ctl waits for the server to start or stop (its
// -t, in seconds): the checks' patience, less a little so that pg_ctl
// says what it was waiting for before its own command's guard stops it.
func pgCtlWait() string {
	return strconv.Itoa(max(1, int(hang.Patience().Seconds())-5))
}
