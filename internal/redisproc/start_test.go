package redisproc

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
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
