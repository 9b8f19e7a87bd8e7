package pool

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// newSilentServer accepts connections and never answers, like a paused
// Redis server; it returns its address and stops on cleanup.
func newSilentServer(t *testing.T) string {
	addr, _ := newCountingSilentServer(t)
	return addr
}

// newCountingSilentServer is newSilentServer that also returns the number
// of connections it has accepted so far.
func newCountingSilentServer(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		conns    []net.Conn
		wg       sync.WaitGroup
		accepted atomic.Int64
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			accepted.Add(1)
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String(), &accepted
}
