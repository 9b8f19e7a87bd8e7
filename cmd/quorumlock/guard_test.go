package main

import (
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// TestExecRefusesAmnesiacMasters: while one exec holds a lock, 3 of the 5
// masters restart without their data. Each exec is a new process whose
// pools meet the restarted servers for the first time, so only a strict
// restart guard keeps them out: by default a second exec must not run its
// command; with --restart-guard 0 (the control) it does, while the first
// one still holds the lock: the overlap the default prevents. (The first
// exec runs with the guard off: every server has just started.)
func TestExecRefusesAmnesiacMasters(t *testing.T) {
	c := redisproc.Start(t, 5)
	addrs := strings.Join(c.Addrs(), ",")
	const key = "exec-amnesia"
	first := startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, "--ttl", "20s", key, "--", "sh", "-c", `echo holding; read line`)
	first.waitLine(t, "holding")
	for i := range 3 {
		if err := c.Node(i).Restart(true); err != nil {
			t.Fatal(err)
		}
	}
	second := startCLI(t, nil, "exec", nodeTimeout, "--addrs", addrs, key, "--", "sh", "-c", "echo second ran")
	code := second.wait(t)
	if strings.Contains(second.stdout.String(), "second ran") {
		t.Fatalf("a second exec ran its command while the first held the lock, with 3 of 5 masters restarted empty (exit %d)\nstderr:\n%s", code, second.stderr.String())
	}
	if code != exitUnavailable || !strings.Contains(second.stderr.String(), "restart") {
		t.Errorf("second exec: exit %d, want %d naming the restarted masters\nstderr:\n%s", code, exitUnavailable, second.stderr.String())
	}
	control := startCLI(t, nil, "exec", nodeTimeout, "--addrs", addrs, "--restart-guard", "0", key, "--", "sh", "-c", "echo control ran")
	if code := control.wait(t); code != 0 || !strings.Contains(control.stdout.String(), "control ran") {
		t.Errorf("with --restart-guard 0 the restarted masters vote and the lock is taken again (the overlap the guard prevents): exit %d\nstderr:\n%s", code, control.stderr.String())
	}
}
