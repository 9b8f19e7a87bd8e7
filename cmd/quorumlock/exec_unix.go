//go:build unix

package main

import (
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// relayed are the signals exec passes on to the command's process group.
var relayed = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
)

// ownProcessGroup makes cmd start in a process group of its own, so that
// signals reach the command's children too. When stdin is the terminal and
// quorumlock's group is its foreground, the new group becomes the
// foreground (the command can read the terminal and gets Ctrl-C itself);
// restore gives the foreground back once the command has exited.
func ownProcessGroup(cmd *exec.Cmd, stdin io.Reader) (restore func()) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	f, ok := stdin.(*os.File)
	if !ok {
		return func() {}
	}
	fd := int(f.Fd())
	if fg, err := tcgetpgrp(fd); err != nil || fg != syscall.Getpgrp() {
		return func() {}
	}
	cmd.SysProcAttr.Foreground = true
	cmd.SysProcAttr.Ctty = fd
	return func() {
		// A background group that sets the foreground gets SIGTTOU
		// unless it ignores it.
		if !signal.Ignored(syscall.SIGTTOU) {
			signal.Ignore(syscall.SIGTTOU)
			defer signal.Reset(syscall.SIGTTOU)
		}
		_ = tcsetpgrp(fd, syscall.Getpgrp())
	}
}

// ignoreStop ignores SIGTSTP (and the command inherits that) until restore
// is called.
func ignoreStop() (restore func()) {
	if signal.Ignored(syscall.SIGTSTP) {
		return func() {}
	}
	signal.Ignore(syscall.SIGTSTP)
	return func() { signal.Reset(syscall.SIGTSTP) }
}

// signalGroup sends sig to the process group that p leads.
func signalGroup(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	return syscall.Kill(-p.Pid, s)
}

// exitStatus is the status to exit with for a command that ended with ps:
// its exit code, or 128+N when signal N killed it, as shells report it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signalName is the conventional name of sig, such as SIGTERM.
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		for _, n := range signalNames {
			if n.sig == s {
				return n.name
			}
		}
	}
	return sig.String()
}

var signalNames = []struct {
	sig  syscall.Signal
	name string
}{
	{syscall.SIGINT, "SIGINT"}, {syscall.SIGTERM, "SIGTERM"}, {syscall.SIGHUP, "SIGHUP"},
	{syscall.SIGQUIT, "SIGQUIT"}, {syscall.SIGUSR1, "SIGUSR1"}, {syscall.SIGUSR2, "SIGUSR2"},
}

// status is the exit status for a signal: 128 + its number.
func (s signalError) status() int {
	if n, ok := s.sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitFailed
}
