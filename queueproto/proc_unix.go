//go:build unix

package queueproto

import (
	"os/exec"
	"syscall"
)

const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// ownProcessGroup starts cmd in a process group of its own, so that the
// shell and whatever it starts are signalled together.
func ownProcessGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

func killProcessGroup(cmd *exec.Cmd) { signalProcessGroup(cmd, syscall.SIGKILL) }

func signalProcessGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}
