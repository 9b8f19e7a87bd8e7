package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// TestPasswords: against 5 servers that require a password, exec works
// with the password in QUORUMLOCK_ADDRS, and its command's environment
// lists the nodes without it; --password-file keeps it out of the
// addresses altogether; a wrong password is reported as such (exit 5).
func TestPasswords(t *testing.T) {
	c := redisproc.Start(t, 5)
	for _, cl := range c.Clients(t) {
		if err := cl.ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
			t.Fatal(err)
		}
	}
	var withPassword []string
	for _, a := range c.Addrs() {
		withPassword = append(withPassword, "redis://:s3cret@"+a)
	}
	show := []string{"sh", "-c", `echo "addrs=$QUORUMLOCK_ADDRS"`}
	p := startCLI(t, []string{envAddrs + "=" + strings.Join(withPassword, ",")}, append([]string{"exec", nodeTimeout, freshServers, "pw-1", "--"}, show...)...)
	line := p.waitLine(t, "addrs=")
	if code := p.wait(t); code != 0 || strings.Contains(line, "s3cret") || !strings.Contains(line, "redis://"+c.Addrs()[0]) {
		t.Fatalf("exec with the password in %s: exit %d; the command saw %q\n%s", envAddrs, code, line, p.stderr.String())
	}

	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := strings.Join(c.Addrs(), ",")
	p = startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, "--password-file", file, "pw-2", "--", "true")
	if code := p.wait(t); code != 0 {
		t.Fatalf("exec with --password-file: exit %d\n%s", code, p.stderr.String())
	}

	if err := os.WriteFile(file, []byte("xyzzy-not-it\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p = startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, "--password-file", file, "pw-3", "--", "true")
	if code := p.wait(t); code != exitUnavailable || !strings.Contains(p.stderr.String(), "refused the password") || strings.Contains(p.stderr.String(), "xyzzy") {
		t.Errorf("exec with a wrong password: exit %d, want %d saying the password was refused (and not showing it)\n%s", code, exitUnavailable, p.stderr.String())
	}
}
