// Package pgcluster starts a PostgreSQL server of the caller's own from the
// local server binaries (initdb and pg_ctl of Debian's postgresql-15, or
// EnvBin): initialized with trust authentication into a fresh directory
// under the system's temporary directory, listening on a free loopback port
// and on a Unix socket in that directory. Run as root, the server runs as
// the postgres OS user (runuser), since PostgreSQL refuses to run as root.
//
// It is for whoever needs a server nobody else uses: fault tests that stop,
// restart or crash their server (through pgtest, which wraps it for
// testing.TB), the probes' db-restart, and a benchmark that needs settings
// a shared server does not have (autovacuum on, fsync on). It never
// touches a shared server.
package pgcluster

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/internal/hang"
	"github.com/leasehold/leasehold/internal/server"
)

// EnvBin names the directory holding initdb and pg_ctl; default DefaultBin.
const EnvBin = "LEASEHOLD_PG_BIN"

// DefaultBin is where Debian's postgresql-15 package installs its server
// binaries.
const DefaultBin = "/usr/lib/postgresql/15/bin"

// Options configures a Cluster; the zero value is a fresh, non-durable
// cluster with PostgreSQL's defaults otherwise.
type Options struct {
	// Data is the data directory initdb creates (a directory that does not
	// exist, or an empty one the server's user may write to). Default: one
	// in the cluster's temporary directory. A Data of the caller's is left
	// in place by Remove. The socket and the server's log stay in the
	// temporary directory.
	Data string
	// Initialized says Data holds a data directory already (a copy of
	// another cluster's): no InitDB.
	Initialized bool
	// Durable runs the server with fsync and full_page_writes on (its
	// defaults); otherwise both are off, for restarts and lost connections
	// rather than durability. initdb never syncs what it wrote (--no-sync):
	// a caller that needs its setup durable makes it durable itself.
	Durable bool
	// MaxConnections is the server's max_connections (default 60).
	MaxConnections int
	// Settings are more server settings, each "name=value".
	Settings []string
}

// Cluster is one private PostgreSQL server. Its methods are not safe for
// concurrent use.
type Cluster struct {
	bin, dir, data string
	port           int
	asPostgres     bool // run the binaries through runuser -u postgres
	opts           Options
}

// BinDir returns the directory of the server binaries (EnvBin, default
// DefaultBin), or why they are not there.
func BinDir() (string, error) {
	bin := cmp.Or(os.Getenv(EnvBin), DefaultBin)
	for _, tool := range []string{"initdb", "pg_ctl"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			return "", fmt.Errorf("%v; install postgresql-15 or set %s to the directory holding initdb and pg_ctl", err, EnvBin)
		}
	}
	return bin, nil
}

// New finds the binaries and makes the cluster's directory; running as
// root, it and opts.Data belong to the postgres OS user. Nothing is
// initialized or started. A Cluster returned with an error is nil or
// already removed.
func New(opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "leasehold-pgcluster-")
	if err != nil {
		return nil, fmt.Errorf("cluster directory: %v", err)
	}
	c := &Cluster{bin: bin, dir: dir, data: cmp.Or(opts.Data, filepath.Join(dir, "data")), asPostgres: os.Geteuid() == 0, opts: opts}
	if err := c.chownToPostgres(); err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// Start is New, InitDB (unless opts.Initialized) and Start in one: a
// running cluster, or nothing left behind.
func Start(opts Options) (*Cluster, error) {
	c, err := New(opts)
	if err != nil {
		return nil, err
	}
	if !opts.Initialized {
		err = c.InitDB()
	}
	if err == nil {
		err = c.Start()
	}
	if err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// chownToPostgres gives the cluster's directories to the postgres OS user
// when running as root.
func (c *Cluster) chownToPostgres() error {
	if !c.asPostgres {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root, the cluster needs the postgres OS user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return err
	}
	if err := os.Chown(c.dir, uid, gid); err != nil {
		return fmt.Errorf("chown %s to postgres: %v", c.dir, err)
	}
	if c.opts.Data != "" {
		if err := os.MkdirAll(c.opts.Data, 0o700); err != nil {
			return err
		}
		if err := os.Chown(c.opts.Data, uid, gid); err != nil {
			return fmt.Errorf("chown %s to postgres: %v", c.opts.Data, err)
		}
	}
	return nil
}

// InitDB initializes the cluster's data directory.
func (c *Cluster) InitDB() error {
	if out, err := c.run("initdb", "-D", c.data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return nil
}

// Dir is the cluster's temporary directory (socket, server log).
func (c *Cluster) Dir() string { return c.dir }

// Data is the cluster's data directory.
func (c *Cluster) Data() string { return c.data }

// DSN is the connection string of the cluster's postgres database (user
// postgres, no password, plain TCP on loopback).
func (c *Cluster) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Start starts the stopped cluster and waits until it accepts connections.
// The first start picks a free loopback port; later starts keep it, so a
// DSN taken before a restart still works after it.
func (c *Cluster) Start() error {
	first := c.port == 0
	for try := 0; ; try++ {
		if first {
			port, err := server.FreePort()
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
	o := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c max_connections=%d", c.port, c.dir, cmp.Or(c.opts.MaxConnections, 60))
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
func (c *Cluster) Stop() error {
	if out, err := c.pgCtl("stop", "-m", "fast", "-w", "-t", pgCtlWait()); err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

// Crash stops the cluster in pg_ctl's immediate mode: the postmaster and
// every backend are killed with no checkpoint; the next Start replays the
// WAL, as after a crash.
func (c *Cluster) Crash() error {
	if out, err := c.pgCtl("stop", "-m", "immediate", "-w", "-t", pgCtlWait()); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %v\n%s", err, out)
	}
	return nil
}

// PID returns the running postmaster's process id (postmaster.pid), so a
// caller can prove a restart happened.
func (c *Cluster) PID() (int, error) {
	raw, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// Remove stops the cluster if it runs (Crash: its data is thrown away) and
// removes its temporary directory.
func (c *Cluster) Remove() error {
	var err error
	if _, statErr := os.Stat(filepath.Join(c.data, "postmaster.pid")); statErr == nil {
		if err = c.Crash(); err != nil {
			err = fmt.Errorf("stopping the cluster in %s: %w", c.dir, err)
		}
	}
	os.RemoveAll(c.dir)
	return err
}

func (c *Cluster) pgCtl(args ...string) ([]byte, error) {
	return c.run("pg_ctl", append([]string{"-D", c.data}, args...)...)
}

// run runs one of the server binaries, as the postgres OS user when running
// as root.
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

// pgCtlWait is how long pg_ctl waits for the server to start or stop (its
// -t, in seconds): the checks' patience, less a little so that pg_ctl
// says what it was waiting for before its own command's guard stops it.
func pgCtlWait() string {
	return strconv.Itoa(max(1, int(hang.Patience().Seconds())-5))
}
