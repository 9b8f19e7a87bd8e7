//go:build !unix

package main

import (
	"io"
	"os"
	"os/exec"
)

// relayed are the signals exec passes on to the command.
var relayed = []os.Signal{os.Interrupt}

var (
	sigTerm = os.Kill // no SIGTERM here: the command is killed at once
	sigKill = os.Kill
)

// ownProcessGroup does nothing on this system: the command shares
// quorumlock's console.
func ownProcessGroup(*exec.Cmd, io.Reader) (restore func()) { return func() {} }

func ignoreStop() (restore func()) { return func() {} }

// signalGroup sends sig to p (there are no process groups here).
func signalGroup(p *os.Process, sig os.Signal) error { return p.Signal(sig) }

func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }

func signalName(sig os.Signal) string { return sig.String() }

func (s signalError) status() int { return exitFailed }
