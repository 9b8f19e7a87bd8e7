package redisproc

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStartOnFreePortRetries: a port another process took between the
// pick and the server's bind costs one try, not the test: the server that
// could not bind is removed, and the next port is used.
func TestStartOnFreePortRetries(t *testing.T) {
	bin, err := FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var made []*Server
	s, port, err := StartOnFreePort(func(port int) (*Server, error) {
		if len(made) == 0 { // someone else binds the first port picked
			l, err := net.Listen("tcp", Addr(port))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { // refuse every connection: PING fails fast
				defer close(done)
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			t.Cleanup(func() { l.Close(); <-done })
		}
		s, err := New(bin, filepath.Join(dir, strconv.Itoa(port)), port, Args("", nil))
		made = append(made, s)
		return s, err
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Remove() })
	if len(made) != 2 || s != made[1] || port != made[1].port {
		t.Fatalf("%d servers made, the second on port %d expected; got port %d", len(made), made[len(made)-1].port, port)
	}
	if _, err := os.Stat(made[0].dir); !os.IsNotExist(err) {
		t.Errorf("the server that could not bind was not removed: %v", err)
	}
}

// TestFindBinaryServer: QUORUMLOCK_SERVER chooses the binary, and a missing
// one is an error that names the variable, not a fallback to redis-server.
func TestFindBinaryServer(t *testing.T) {
	t.Setenv(EnvServer, "")
	if got := ServerName(); got != "redis-server" {
		t.Fatalf("ServerName() with %s empty = %q, want redis-server", EnvServer, got)
	}
	t.Setenv(EnvServer, "quorumlock-no-such-server")
	if got := ServerName(); got != "quorumlock-no-such-server" {
		t.Fatalf("ServerName() = %q, want quorumlock-no-such-server", got)
	}
	p, err := FindBinary()
	if err == nil {
		t.Fatalf("FindBinary() = %q, want an error", p)
	}
	for _, want := range []string{"quorumlock-no-such-server", EnvServer} {
		if !strings.Contains(err.Error(), want) || !strings.Contains(InstallHint(), want) {
			t.Errorf("error %q or hint %q lacks %q", err, InstallHint(), want)
		}
	}
}
