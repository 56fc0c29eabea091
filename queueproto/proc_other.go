//go:build !unix

package queueproto

import (
	"errors"
	"os/exec"
)

type signal int

const (
	sigStop signal = iota
	sigCont
)

func ownProcessGroup(*exec.Cmd) {}

func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		cmd.Process.Kill()
	}
}

func signalProcessGroup(*exec.Cmd, signal) error {
	return errors.New("pausing a process needs a Unix system")
}
