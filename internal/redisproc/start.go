package redisproc

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Start starts n server processes (redis-server, or $QUORUMLOCK_SERVER) for
// a white-box test of this module and returns once each answers PING; a
// t.Cleanup removes them and their directory. It fails the test with
// t.Fatalf when the binary is missing or a server does not start. Users and the integration suite use the test
// kit instead, which adds containers, pauses on Docker and fault proxies.
func Start(t testing.TB, n int) Servers {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		t.Fatalf("redisproc: %v (%s)", err, InstallHint())
	}
	dir, err := TempDir()
	if err != nil {
		t.Fatalf("redisproc: %v", err)
	}
	var out Servers
	t.Cleanup(func() {
		for _, s := range out {
			if err := s.Remove(); err != nil {
				t.Errorf("redisproc: removing %s: %v", s.Addr(), err)
			}
		}
		_ = os.RemoveAll(dir)
	})
	for i := range n {
		s, _, err := StartOnFreePort(func(port int) (*Server, error) {
			return New(bin, filepath.Join(dir, fmt.Sprintf("node%d-port%d", i, port)), port, Args("", nil))
		}, "")
		if err != nil {
			t.Fatalf("redisproc: node %d: %v", i, err)
		}
		out = append(out, s)
	}
	return out
}

// Launcher is a server StartOnFreePort can start: a process, or the test
// kit's container.
type Launcher interface {
	Process
	Launch(amnesia bool) error
	Remove() error
}

// StartTries is how many ports StartOnFreePort tries.
const StartTries = 3

// StartOnFreePort makes a server on a free port with newSrv, launches it
// and waits until it answers PING (with password), trying up to StartTries
// ports: another process may take a port between its pick and the server's
// bind. It returns the server and its port. On failure it has removed every
// server it made, and returns the last error, naming the port.
func StartOnFreePort[S Launcher](newSrv func(port int) (S, error), password string) (S, int, error) {
	var zero S
	var lastErr error
	for range StartTries {
		port, err := PickPort()
		if err != nil {
			return zero, 0, err
		}
		srv, err := newSrv(port)
		if err != nil {
			return zero, 0, fmt.Errorf("port %d: %w", port, err)
		}
		err = srv.Launch(false)
		if err == nil {
			err = WaitReady(srv, Addr(port), password)
		}
		if err == nil {
			return srv, port, nil
		}
		_ = srv.Remove()
		lastErr = fmt.Errorf("port %d: %w", port, err)
	}
	return zero, 0, lastErr
}

// Restart kills the server if it runs, starts it again on its address (with
// an empty dataset if amnesia is set) and waits until it answers PING.
func (p *Server) Restart(amnesia bool) error {
	if err := p.Kill(); err != nil {
		return err
	}
	if err := p.Launch(amnesia); err != nil {
		return err
	}
	return WaitReady(p, p.Addr(), "")
}

// Servers are the servers Start started, in order.
type Servers []*Server

// Node returns server i.
func (ss Servers) Node(i int) *Server { return ss[i] }

// Addrs returns the servers' addresses, in order.
func (ss Servers) Addrs() []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Addr()
	}
	return out
}

// Clients returns one new client per server (as by NewClient), closed by a
// t.Cleanup.
func (ss Servers) Clients(t testing.TB) []*redis.Client {
	out := make([]*redis.Client, len(ss))
	for i, s := range ss {
		out[i] = NewClient(s.Addr(), "")
		t.Cleanup(func() { _ = out[i].Close() })
	}
	return out
}
