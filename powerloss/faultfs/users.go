package faultfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killWait bounds how long KillUsers waits for the processes it killed to
// go: a guard against a hang, not a measure.
const killWait = time.Minute

// KillUsers kills (SIGKILL) every process but this one whose working
// directory or an open file is under the mount point, as a power loss ends
// every process on the machine, and waits until each is gone: reaped, or a
// zombie child of this process, for its own exec.Cmd to reap (a server that
// checks whether its predecessor lives, as PostgreSQL's postmaster does,
// takes a zombie for a live one). Use it after a power loss, before
// Restart, on servers that are not the test's children (PostgreSQL's
// backends are the postmaster's).
func (f *FS) KillUsers() error {
	deadline := time.Now().Add(killWait)
	killed := map[int]bool{}
	for {
		for _, pid := range f.users() {
			syscall.Kill(pid, syscall.SIGKILL)
			killed[pid] = true
		}
		var left []int
		for pid := range killed {
			if !gone(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("faultfs: processes %v that used %s are not gone %s after SIGKILL", left, f.mnt, killWait)
		}
		// They are not our children: nothing tells us when they are gone
		// but /proc.
		time.Sleep(5 * time.Millisecond)
	}
}

// gone reports whether process pid has ended and been reaped, or is a
// zombie child of this process.
func gone(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) > 1 && fields[0] == "Z" && fields[1] == strconv.Itoa(os.Getpid())
}

// users lists the processes but this one using the mount.
func (f *FS) users() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		uses := f.under(readlink(filepath.Join(dir, "cwd")))
		if !uses {
			fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
			for _, fd := range fds {
				if f.under(readlink(filepath.Join(dir, "fd", fd.Name()))) {
					uses = true
					break
				}
			}
		}
		if uses {
			out = append(out, pid)
		}
	}
	return out
}

func readlink(p string) string {
	s, _ := os.Readlink(p)
	return s
}

// under reports whether path is the mount point or under it.
func (f *FS) under(path string) bool {
	return path == f.mnt || strings.HasPrefix(path, f.mnt+"/")
}
