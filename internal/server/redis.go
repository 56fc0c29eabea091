package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// EnvRedisServer names the redis-server binary; default "redis-server" on
// the PATH.
const EnvRedisServer = "LEASEHOLD_REDIS_SERVER"

// Redis is a private Redis server on a free loopback port, its data in a
// fresh directory, started with the caller's extra arguments (a queue's
// recommended persistence settings).
type Redis struct {
	bin, dir string
	port     int
	args     []string
	cmd      *exec.Cmd
	done     chan struct{}
}

// StartRedis starts a private Redis server with args added to its command
// line.
func StartRedis(args []string) (*Redis, error) {
	bin := os.Getenv(EnvRedisServer)
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("no redis-server for a private server: %v; install redis-server or set %s", err, EnvRedisServer)
	}
	dir, err := os.MkdirTemp("", "leasehold-redisserver-")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &Redis{bin: path, dir: dir, port: port, args: args}
	if err := r.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

// URL is the server's redis:// URL.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d", r.port) }

// Start starts the stopped server on its port and directory and waits
// until it accepts connections.
func (r *Redis) Start() error {
	argv := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir, "--daemonize", "no"}, r.args...)
	cmd := exec.Command(r.bin, argv...)
	log, err := os.OpenFile(r.dir+"/server.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(done) }()
	r.cmd, r.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			out, _ := os.ReadFile(r.dir + "/server.log")
			return fmt.Errorf("redis-server exited at start:\n%s", out)
		default:
		}
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.port), time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.Crash()
	return errors.New("redis-server did not accept connections within 30s")
}

// Crash kills the server with SIGKILL: what it had not written to its
// files is lost, as in a crash.
func (r *Redis) Crash() error {
	if r.cmd == nil {
		return nil
	}
	r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
	return nil
}

// PID returns the running server's process id.
func (r *Redis) PID() (int, error) {
	if r.cmd == nil {
		return 0, errors.New("the server is not running")
	}
	return r.cmd.Process.Pid, nil
}

// Close kills the server and removes its directory.
func (r *Redis) Close() error {
	err := r.Crash()
	os.RemoveAll(r.dir)
	return err
}
