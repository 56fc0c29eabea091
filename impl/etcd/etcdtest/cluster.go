// Package etcdtest starts etcd clusters for tests and benchmarks: members
// as child processes (impl/etcd/internal/member, built once per test
// binary with go build) on free loopback ports, each with its own data
// directory, so that a test can SIGKILL a member and start it again on the
// directory it left. Nothing is installed: the member is leasehold's own
// small main over etcd's embed package.
package etcdtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// memberPkg is the member's package, built with go build in
// etcdModule's directory.
const (
	memberPkg  = "github.com/leasehold/leasehold/impl/etcd/internal/member"
	etcdModule = "github.com/leasehold/leasehold/impl/etcd"
)

var build struct {
	once sync.Once
	path string
	err  error
	dir  string
}

// memberBinary builds the member once per process.
func memberBinary() (string, error) {
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "leasehold-etcd-member-")
		if build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "member")
		// Built in the etcd store's own module, whose go.sum has the
		// etcd server's modules: a module that requires the store (the
		// benchmark's bench/river) has no reason to list them.
		root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", etcdModule).Output()
		if err != nil {
			build.err = fmt.Errorf("go list -m %s: %v", etcdModule, err)
			return
		}
		cmd := exec.Command("go", "build", "-o", build.path, memberPkg)
		cmd.Dir = strings.TrimSpace(string(root))
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build %s in %s: %v\n%s", memberPkg, cmd.Dir, err, out)
		}
	})
	return build.path, build.err
}

// Member is one member of a Cluster.
type Member struct {
	Name, ClientURL, PeerURL, Dir string
	cluster                       string
	cmd                           *exec.Cmd
	exited                        chan struct{}
	log                           *os.File
}

// Cluster is a set of members started by a test.
type Cluster struct {
	Members []*Member
	dir     string
	bin     string
	args    []string // more flags of every member (StartWith)
	mu      sync.Mutex
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts an n-member cluster under dir and waits until it serves a
// linearizable read. Stop it with Stop. The ports are picked free a moment
// before the members bind them, so another process can take one in
// between (a client's ephemeral port): a cluster whose member exits while
// starting is started again on other ports, up to three times.
func Start(dir string, n int) (*Cluster, error) { return StartWith(dir, n) }

// StartWith is Start with more flags for every member, as the member's
// main takes them (impl/etcd/internal/member: -max-txn-ops N,
// -max-request-bytes N, -quota N, ...), kept across Restart.
func StartWith(dir string, n int, args ...string) (*Cluster, error) {
	bin, err := memberBinary()
	if err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		c, err := start(filepath.Join(dir, fmt.Sprintf("start%d", try)), n, bin, args)
		if err == nil || try == 3 || !errors.Is(err, errExited) {
			return c, err
		}
	}
}

// errExited: a member process ended while it should be serving.
var errExited = errors.New("etcd member exited")

func start(dir string, n int, bin string, args []string) (*Cluster, error) {
	c := &Cluster{dir: dir, bin: bin, args: args}
	var initial []string
	for i := 0; i < n; i++ {
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		m := &Member{Name: fmt.Sprintf("m%d", i), ClientURL: fmt.Sprintf("http://127.0.0.1:%d", cp),
			PeerURL: fmt.Sprintf("http://127.0.0.1:%d", pp), Dir: filepath.Join(dir, fmt.Sprintf("m%d", i))}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		m.cluster = strings.Join(initial, ",")
		if err := c.startMember(m, "new"); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, m := range c.Members {
		if err := c.waitReady(m, 60*time.Second); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.WaitHealthy(60 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startMember(m *Member, state string) error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(c.dir, m.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, append([]string{"-name", m.Name, "-dir", m.Dir, "-client", m.ClientURL, "-peer", m.PeerURL,
		"-cluster", m.cluster, "-state", state}, c.args...)...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	// The member dies with the test binary, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	m.cmd, m.log, m.exited = cmd, logf, make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
			}
		}
	}()
	go func(exited chan struct{}) {
		cmd.Wait()
		logf.Close()
		close(exited)
	}(m.exited)
	_ = ready
	return nil
}

// waitReady waits until m answers a status request.
func (c *Cluster) waitReady(m *Member, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = cli.Status(ctx, m.ClientURL)
			cancel()
			cli.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-m.exited:
			return fmt.Errorf("%w: %s, log %s:\n%s", errExited, m.Name, filepath.Join(c.dir, m.Name+".log"), c.logTail(m))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("etcd member %s not ready after %s; see %s", m.Name, d, filepath.Join(c.dir, m.Name+".log"))
}

// WaitHealthy waits until a linearizable read through every live member
// succeeds (a leader is elected and a quorum answers).
func (c *Cluster) WaitHealthy(d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		last = nil
		for _, m := range c.Members {
			if !m.Running() {
				continue
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
			if err != nil {
				last = err
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = cli.Get(ctx, "health")
			cancel()
			cli.Close()
			if err != nil {
				last = err
				break
			}
		}
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("etcd cluster not healthy after %s: %v", d, last)
}

// Running reports whether the member's process is alive.
func (m *Member) Running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.ClientURL
	}
	return out
}

// Client connects to every member.
func (c *Cluster) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second})
}

// Kill SIGKILLs member i and waits for it to exit. Its data directory stays.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.Members[i]
	if !m.Running() {
		return
	}
	m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
}

// Restart starts member i again on its data directory and waits until it
// serves. Its ports may have been taken meanwhile by another process's
// client (they are ephemeral ports): a member that exits while starting is
// started again, up to five times, half a second apart.
func (c *Cluster) Restart(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.Members[i]
	if m.Running() {
		return nil
	}
	for try := 1; ; try++ {
		if err := c.startMember(m, "existing"); err != nil {
			return err
		}
		err := c.waitReady(m, 60*time.Second)
		if err == nil || try == 5 || !errors.Is(err, errExited) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// logTail is the end of m's log, for an error message (the test's
// temporary directory may be gone when someone reads it).
func (c *Cluster) logTail(m *Member) string {
	b, err := os.ReadFile(filepath.Join(c.dir, m.Name+".log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Leader returns the index of the member that is leader now, or -1.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if !m.Running() {
			continue
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, m.ClientURL)
		cancel()
		cli.Close()
		if err == nil && st.Header.MemberId == st.Leader {
			return i
		}
	}
	return -1
}

// Stop kills every member.
func (c *Cluster) Stop() {
	for i := range c.Members {
		c.Kill(i)
	}
}

// Shared is a cluster of n members for the whole test binary, started on
// first use in a temporary directory; StopShared (from TestMain) stops it.
func Shared(t testing.TB, n int) *Cluster {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if c, ok := shared[n]; ok {
		return c
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("leasehold-etcd-%d-", n))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(dir, n)
	if err != nil {
		t.Fatalf("start a %d-member etcd cluster: %v", n, err)
	}
	shared[n] = c
	return c
}

var (
	sharedMu sync.Mutex
	shared   = map[int]*Cluster{}
)

// StopShared stops the shared clusters and removes their directories and
// the built member.
func StopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for n, c := range shared {
		c.Stop()
		os.RemoveAll(c.dir)
		delete(shared, n)
	}
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}
