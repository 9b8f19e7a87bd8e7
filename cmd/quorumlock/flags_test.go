package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// TestWaitConflictPrefix: with the lock held by "hold", exec exits with
// --conflict-exit's status; exec --wait forever waits until hold releases
// it on SIGTERM, then runs its command; and --prefix names other keys:
// status with the default prefix finds that lock free.
func TestWaitConflictPrefix(t *testing.T) {
	c := redisproc.Start(t, 5)
	addrs := strings.Join(c.Addrs(), ",")
	const key = "flags-1"
	h := startCLI(t, nil, "hold", nodeTimeout, freshServers, "--addrs", addrs, key)
	h.waitLine(t, "fence ")

	p := startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, "--conflict-exit", "9", key, "--", "echo", "ran")
	if code := p.wait(t); code != 9 || strings.Contains(p.stdout.String(), "ran") {
		t.Errorf("exec on a held lock with --conflict-exit 9: exit %d\n%s", code, p.stderr.String())
	}

	w := startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, "--wait", "forever", key, "--", "echo", "got it")
	st := startCLI(t, nil, "status", nodeTimeout, "--addrs", addrs, key) // still held: the waiter waits
	if code := st.wait(t); code != exitOK {
		t.Fatalf("status while hold holds the lock: exit %d", code)
	}
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w.waitLine(t, "got it")
	if code := w.wait(t); code != 0 {
		t.Errorf("exec --wait forever: exit %d\n%s", code, w.stderr.String())
	}

	o := startCLI(t, nil, "hold", nodeTimeout, freshServers, "--addrs", addrs, "--prefix", "other:", key)
	o.waitLine(t, "fence ")
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, exitFree}, {[]string{"--prefix", "other:"}, exitOK}} {
		st := startCLI(t, nil, append([]string{"status", nodeTimeout, "--addrs", addrs, key}, tc.args...)...)
		if code := st.wait(t); code != tc.want {
			t.Errorf("status %q of a lock held under the prefix other: exit %d, want %d\n%s", tc.args, code, tc.want, st.stdout.String())
		}
	}
}

func TestVersion(t *testing.T) {
	p := startCLI(t, nil, "--version")
	if code := p.wait(t); code != 0 || !strings.HasPrefix(p.stdout.String(), "quorumlock ") || !strings.Contains(p.stdout.String(), "go1.") {
		t.Errorf("--version: exit %d, %q", code, p.stdout.String())
	}
}
