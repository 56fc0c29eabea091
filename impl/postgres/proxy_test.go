package postgres_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

// commitProxy is a TCP proxy between the store and PostgreSQL that
// understands just enough of the wire protocol to lose the answer to a
// COMMIT: when armed, it forwards the next COMMIT (a simple-protocol 'Q'
// message, which is how pgx commits), swallows everything the server sends
// back until ReadyForQuery (so the commit has certainly finished on the
// server), and then cuts the connection. The client sees its connection die
// after COMMIT was sent: the unknown-outcome case, made deterministic.
type commitProxy struct {
	ln     net.Listener
	target string
	armed  atomic.Int32 // 0 off; armLoseAnswer; armLoseAnswerAndServer
	refuse atomic.Bool  // close every new connection at once (server "unreachable")
	cuts   atomic.Int32 // commits whose answer was lost
	mu     sync.Mutex
	open   []net.Conn

	// Faults of one client only, the one whose startup message names
	// application_name app (see watch): its connections are counted, and
	// either closed right after the startup message (refuseApp) or held
	// (a message of theirs waits while gate is not nil; see stall).
	app       string // under mu
	appConns  atomic.Int32
	refuseApp atomic.Bool
	gate      chan struct{} // under mu; closed by resume
	done      chan struct{} // closed by close: releases held messages
	closing   sync.Once
}

const (
	armLoseAnswer          = 1 // lose the next COMMIT's answer; later connections work
	armLoseAnswerAndServer = 2 // also make the server unreachable afterwards
)

// newCommitProxy starts a proxy to the server of dsn and returns it with a
// DSN that connects through it (plain TCP: the proxy cannot parse TLS).
func newCommitProxy(t *testing.T, dsn string) (*commitProxy, string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &commitProxy{ln: ln, target: net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), done: make(chan struct{})}
	t.Cleanup(p.close)
	go p.serve()
	u := url.URL{Scheme: "postgres", Host: ln.Addr().String(), Path: "/" + cfg.Database, RawQuery: "sslmode=disable"}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	} else {
		u.User = url.User(cfg.User)
	}
	return p, u.String()
}

func (p *commitProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.open = append(p.open, c, s)
		p.mu.Unlock()
		var swallow atomic.Int32 // the arm mode of the COMMIT in flight, or 0
		go p.clientToServer(c, s, &swallow)
		go p.serverToClient(c, s, &swallow)
	}
}

// clientToServer forwards the startup message, then message by message,
// arming swallow before it forwards an armed COMMIT.
func (p *commitProxy) clientToServer(c, s net.Conn, swallow *atomic.Int32) {
	defer s.Close()
	var lenBuf [4]byte
	if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
		return
	}
	n := int(binary.BigEndian.Uint32(lenBuf[:]))
	if n < 4 {
		return
	}
	startup := make([]byte, n)
	copy(startup, lenBuf[:])
	if _, err := io.ReadFull(c, startup[4:]); err != nil {
		return
	}
	watched := p.watches(startup)
	if watched {
		p.appConns.Add(1)
		if p.refuseApp.Load() {
			c.Close()
			return
		}
	}
	if _, err := s.Write(startup); err != nil {
		return
	}
	for {
		msg, err := readMessage(c)
		if err != nil {
			return
		}
		// Authentication ('p') passes, so that a held connection is open.
		if watched && msg[0] != 'p' {
			p.hold()
		}
		if msg[0] == 'Q' && strings.EqualFold(string(bytes.TrimRight(msg[5:], "\x00")), "commit") {
			if mode := p.armed.Swap(0); mode != 0 {
				swallow.Store(mode)
			}
		}
		if _, err := s.Write(msg); err != nil {
			return
		}
	}
}

// serverToClient forwards the server's messages, or, while swallowing,
// drops them up to ReadyForQuery and then cuts the connection.
func (p *commitProxy) serverToClient(c, s net.Conn, swallow *atomic.Int32) {
	defer c.Close()
	for {
		msg, err := readMessage(s)
		if err != nil {
			return
		}
		mode := swallow.Load()
		if mode == 0 {
			if _, err := c.Write(msg); err != nil {
				return
			}
			continue
		}
		if msg[0] != 'Z' {
			continue
		}
		// The server has finished the COMMIT; the client never hears of it.
		// Count the cut before any close can wake the client.
		p.cuts.Add(1)
		if mode == armLoseAnswerAndServer {
			p.refuse.Store(true)
			p.closeAll()
		}
		c.Close()
		s.Close()
		return
	}
}

// readMessage reads one typed protocol message (type byte, int32 length
// including itself, body).
func readMessage(r io.Reader) ([]byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[1:]))
	if n < 4 {
		return nil, fmt.Errorf("bad message length %d", n)
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[5:])
	return msg, err
}

func (p *commitProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open {
		c.Close()
	}
	p.open = nil
}

func (p *commitProxy) close() {
	p.closing.Do(func() { close(p.done) })
	p.ln.Close()
	p.closeAll()
}

// watch names the application_name whose connections refuseApp and stall
// act on, and appConns counts.
func (p *commitProxy) watch(app string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.app = app
}

// watches reports whether a startup message names the watched
// application_name (parameters are NUL-terminated name, value pairs).
func (p *commitProxy) watches(startup []byte) bool {
	p.mu.Lock()
	app := p.app
	p.mu.Unlock()
	return app != "" && bytes.Contains(startup, []byte("\x00application_name\x00"+app+"\x00"))
}

// stall holds every message the watched client sends from now on (its
// statements do not reach the server) until resume.
func (p *commitProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

// resume forwards the held messages and stops holding.
func (p *commitProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// hold waits while the proxy is stalled.
func (p *commitProxy) hold() {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	if gate == nil {
		return
	}
	select {
	case <-gate:
	case <-p.done:
	}
}
