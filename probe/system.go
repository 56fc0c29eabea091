package probe

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/impl/postgres/pgcluster"
	"github.com/leasehold/leasehold/internal/server"
	"github.com/leasehold/leasehold/queueproto"
)

// System is one row of the matrix: a queue behind an adapter.
type System struct {
	// Name is the row's name; the adapter's hello must say the same.
	Name string `json:"system"`
	// Dir is where Build and Run run ("" for the current directory).
	Dir string `json:"dir,omitempty"`
	// Build, when set, runs once before the probes (sh -c, in Dir).
	Build string `json:"build,omitempty"`
	// Run is the adapter command (sh -c, in Dir).
	Run string `json:"run"`
	// Flag is how `leasehold probe` names the system in a replay command.
	Flag string `json:"-"`
}

// PeerFile is the file in peers/<name>/ that makes a folder a system.
const PeerFile = "probe.json"

// Peers reads every peers/*/probe.json under root, in name order.
func Peers(root string) ([]System, error) {
	files, err := filepath.Glob(filepath.Join(root, "peers", "*", PeerFile))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []System
	for _, f := range files {
		s, err := ReadPeer(f)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// ReadPeer reads one probe.json; its folder is the system's Dir.
func ReadPeer(file string) (System, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return System{}, err
	}
	var s System
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return System{}, fmt.Errorf("%s: %v (want {\"system\", \"build\", \"run\"}, docs/ADAPTERS.md)", file, err)
	}
	if s.Name == "" || s.Run == "" {
		return System{}, fmt.Errorf("%s: system and run are required (docs/ADAPTERS.md, Where adapters live)", file)
	}
	s.Dir = filepath.Dir(file)
	s.Flag = "--system " + s.Name
	return s, nil
}

// BuildSystem runs a system's build command, returning its output on
// failure.
func BuildSystem(ctx context.Context, s System) error {
	if s.Build == "" {
		return nil
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", s.Build)
	cmd.Dir = s.Dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("building %s (%s in %s): %v\n%s", s.Name, s.Build, s.Dir, err, tail(string(out), 40))
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Env is where the probes find their databases.
type Env struct {
	// PostgresDSN is the shared PostgreSQL server: each run gets a schema
	// of its own on it, dropped afterwards.
	PostgresDSN string
	// RedisURL is the shared Redis server: each run gets a key prefix of
	// its own, deleted afterwards.
	RedisURL string
	// TmpDir holds each run's directory (needs dir) and transcripts.
	TmpDir string
	// Wire, when set, receives every line between the runner and each
	// adapter process.
	Wire func(run, process, dir, line string)
}

// target is where one cell's runs put their namespaces: the shared server,
// or a private one the cell started to restart it.
type target struct {
	sys     System
	command queueproto.Command
	needs   string
	env     *Env
	cell    string

	postgres string
	redis    string
	pg       *pgcluster.Cluster
	rd       *server.Redis
}

func newNamespace() string {
	var b [5]byte
	rand.Read(b[:])
	return "lhp_" + hex.EncodeToString(b[:])
}

func (t *target) wire(process string) func(dir, line string) {
	if t.env.Wire == nil {
		return nil
	}
	return func(dir, line string) { t.env.Wire(t.cell, process, dir, line) }
}

// open is the open request of one process of a run.
func (t *target) open(ns, process string, create bool) queueproto.OpenParams {
	p := queueproto.OpenParams{Namespace: ns, Create: create, Process: process}
	switch t.needs {
	case queueproto.NeedPostgres:
		p.Postgres = t.postgres
	case queueproto.NeedRedis:
		p.Redis = t.redis
	case queueproto.NeedDir:
		p.Dir = filepath.Join(t.env.TmpDir, ns)
	}
	return p
}

// prepare makes a run's namespace ready: its directory exists.
func (t *target) prepare(ns string) error {
	if t.needs == queueproto.NeedDir {
		return os.MkdirAll(filepath.Join(t.env.TmpDir, ns), 0o755)
	}
	return nil
}

// missing says what the system needs that the environment lacks, or "".
func (t *target) missing() string {
	switch {
	case t.needs == queueproto.NeedPostgres && t.postgres == "":
		return "PostgreSQL (set LEASEHOLD_PG_DSN)"
	case t.needs == queueproto.NeedRedis && t.redis == "":
		return "Redis (set LEASEHOLD_REDIS_URL)"
	}
	return ""
}

// privatePostgres is db-restart's server: fsync off, since a crash here
// kills the server's processes, never the operating system, so what a
// process wrote is in the page cache and the crash loses exactly what
// PostgreSQL had not written.
var privatePostgres = pgcluster.Options{MaxConnections: 100}

// private moves the target to a private server of its own (db-restart).
func (t *target) private(hello queueproto.Hello) error {
	switch t.needs {
	case queueproto.NeedPostgres:
		pg, err := pgcluster.Start(privatePostgres)
		if err != nil {
			return err
		}
		t.pg, t.postgres = pg, pg.DSN()
	case queueproto.NeedRedis:
		rd, err := server.StartRedis(hello.ServerArgs)
		if err != nil {
			return err
		}
		t.rd, t.redis = rd, rd.URL()
	}
	return nil
}

// restart crashes the private server and starts it again; it returns what
// happened, and whether the server process changed.
func (t *target) restart() (string, bool, error) {
	switch {
	case t.pg != nil:
		before, _ := t.pg.PID()
		if err := t.pg.Crash(); err != nil {
			return "", false, err
		}
		if err := t.pg.Start(); err != nil {
			return "", false, err
		}
		after, err := t.pg.PID()
		return fmt.Sprintf("PostgreSQL crashed (pg_ctl stop -m immediate, postmaster %d) and started again (postmaster %d): WAL replayed", before, after), err == nil && after != before, err
	case t.rd != nil:
		before, _ := t.rd.PID()
		if err := t.rd.Crash(); err != nil {
			return "", false, err
		}
		if err := t.rd.Start(); err != nil {
			return "", false, err
		}
		after, err := t.rd.PID()
		return fmt.Sprintf("redis-server SIGKILLed (pid %d) and started again (pid %d) with the queue's recommended arguments", before, after), err == nil && after != before, err
	}
	return "the database is embedded: every process holding it was killed and it is opened again", true, nil
}

// cleanup removes a run's namespace.
func (t *target) cleanup(ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch t.needs {
	case queueproto.NeedPostgres:
		conn, err := pgx.Connect(ctx, t.postgres)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{ns}.Sanitize()+" CASCADE")
		return err
	case queueproto.NeedRedis:
		return redisDeletePrefix(ctx, t.redis, ns)
	case queueproto.NeedDir:
		return os.RemoveAll(filepath.Join(t.env.TmpDir, ns))
	}
	return nil
}

// close stops the target's private server.
func (t *target) close() {
	if t.pg != nil {
		t.pg.Remove()
	}
	if t.rd != nil {
		t.rd.Close()
	}
}

var redisMu sync.Mutex

// redisDeletePrefix deletes every key that starts with prefix, speaking
// RESP over one connection (SCAN, then DEL per batch).
func redisDeletePrefix(ctx context.Context, rawURL, prefix string) error {
	redisMu.Lock()
	defer redisMu.Unlock()
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	rd := bufio.NewReader(conn)
	cmd := func(args ...string) (any, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(b.String())); err != nil {
			return nil, err
		}
		return readRESP(rd)
	}
	cursor := "0"
	for {
		reply, err := cmd("SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000")
		if err != nil {
			return err
		}
		parts, ok := reply.([]any)
		if !ok || len(parts) != 2 {
			return fmt.Errorf("redis SCAN: unexpected reply %v", reply)
		}
		cursor, _ = parts[0].(string)
		keys, _ := parts[1].([]any)
		if len(keys) > 0 {
			args := []string{"DEL"}
			for _, k := range keys {
				args = append(args, k.(string))
			}
			if _, err := cmd(args...); err != nil {
				return err
			}
		}
		if cursor == "0" {
			return nil
		}
	}
}

// readRESP reads one RESP2 reply: strings, integers, arrays; an error
// reply is returned as an error.
func readRESP(rd *bufio.Reader) (any, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("redis: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	case '$':
		var n int
		fmt.Sscan(line[1:], &n)
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		var n int
		fmt.Sscan(line[1:], &n)
		out := make([]any, 0, max(n, 0))
		for range n {
			v, err := readRESP(rd)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}
