// Package server starts database servers of a caller's own — a PostgreSQL
// cluster, a Redis server — on free loopback ports, for checks that crash
// and restart their database: never the shared servers other checks use.
package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EnvPGBin names the directory holding initdb and pg_ctl; default
// DefaultPGBin.
const EnvPGBin = "LEASEHOLD_PG_BIN"

// DefaultPGBin is where Debian's postgresql-15 package installs its server
// binaries.
const DefaultPGBin = "/usr/lib/postgresql/15/bin"

// Postgres is a private PostgreSQL cluster: initialized (initdb, trust
// authentication) into a fresh directory under the system's temporary
// directory, listening on a free loopback port. Run as root, the server
// runs as the postgres OS user (runuser). fsync is off: a crash here kills
// the server's processes, never the operating system, so what a process
// wrote is in the page cache and the crash loses exactly what PostgreSQL
// had not written.
type Postgres struct {
	bin, dir, data string
	port           int
	asPostgres     bool
}

// PGBin returns the directory of the server binaries ($LEASEHOLD_PG_BIN or
// DefaultPGBin), or an error that says how to install them.
func PGBin() (string, error) {
	bin := os.Getenv(EnvPGBin)
	if bin == "" {
		bin = DefaultPGBin
	}
	for _, tool := range []string{"initdb", "pg_ctl"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			return "", fmt.Errorf("no PostgreSQL server binaries for a private server: %v; install postgresql-15 or set %s to the directory holding initdb and pg_ctl", err, EnvPGBin)
		}
	}
	return bin, nil
}

// StartPostgres initializes and starts a private cluster.
func StartPostgres() (*Postgres, error) {
	bin, err := PGBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "leasehold-pgserver-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{bin: bin, dir: dir, data: filepath.Join(dir, "data"), asPostgres: os.Geteuid() == 0}
	fail := func(err error) (*Postgres, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if p.asPostgres {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("running as root, a private PostgreSQL server needs the postgres OS user: %v", err))
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(dir, 0o755); err != nil {
			return fail(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			return fail(err)
		}
	}
	if out, err := p.run("initdb", "-D", p.data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	if err := p.Start(); err != nil {
		return fail(err)
	}
	return p, nil
}

// DSN is the connection string of the cluster's postgres database.
func (p *Postgres) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// Start starts the stopped cluster and waits until it accepts
// connections. The first start picks a free port; later starts keep it.
func (p *Postgres) Start() error {
	first := p.port == 0
	for try := 0; ; try++ {
		if first {
			port, err := FreePort()
			if err != nil {
				return err
			}
			p.port = port
		}
		out, err := p.pgCtl("start", "-w", "-t", "60", "-l", filepath.Join(p.dir, "server.log"), "-o",
			fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c fsync=off -c full_page_writes=off -c max_connections=100", p.port, p.dir))
		if err == nil {
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
		if first && try < 2 && bytes.Contains(log, []byte("could not bind")) {
			continue
		}
		return fmt.Errorf("pg_ctl start: %v\n%s\nserver log:\n%s", err, out, log)
	}
}

// Crash stops the cluster in pg_ctl's immediate mode: the postmaster and
// every backend are killed with no checkpoint; the next start replays the
// WAL, as after a crash.
func (p *Postgres) Crash() error {
	if out, err := p.pgCtl("stop", "-m", "immediate", "-w", "-t", "60"); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %v\n%s", err, out)
	}
	return nil
}

// PID returns the running postmaster's process id (postmaster.pid), so a
// caller can prove a restart happened.
func (p *Postgres) PID() (int, error) {
	raw, err := os.ReadFile(filepath.Join(p.data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// Close stops the cluster if it runs and removes its directory.
func (p *Postgres) Close() error {
	var err error
	if _, statErr := os.Stat(filepath.Join(p.data, "postmaster.pid")); statErr == nil {
		err = p.Crash()
	}
	os.RemoveAll(p.dir)
	return err
}

func (p *Postgres) pgCtl(args ...string) ([]byte, error) {
	return p.run("pg_ctl", append([]string{"-D", p.data}, args...)...)
}

func (p *Postgres) run(tool string, args ...string) ([]byte, error) {
	name, argv := filepath.Join(p.bin, tool), args
	if p.asPostgres {
		name, argv = "runuser", append([]string{"-u", "postgres", "--", filepath.Join(p.bin, tool)}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, argv...)
	cmd.Dir = p.dir
	return cmd.CombinedOutput()
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
