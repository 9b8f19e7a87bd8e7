package testkit

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// sink is a TCP server that records, per connection, the bytes it received
// and whether the peer closed; it lets the test write to a connection too.
type sink struct {
	t  *testing.T
	ln net.Listener

	mu      sync.Mutex
	conns   []*sinkConn
	changed chan struct{} // closed and replaced on every change
	wg      sync.WaitGroup
}

type sinkConn struct {
	c      net.Conn
	got    bytes.Buffer
	closed bool
}

func newSink(t *testing.T) *sink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{t: t, ln: ln, changed: make(chan struct{})}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			sc := &sinkConn{c: c}
			s.mu.Lock()
			s.conns = append(s.conns, sc)
			s.notify()
			s.mu.Unlock()
			s.wg.Go(func() {
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					s.mu.Lock()
					sc.got.Write(buf[:n])
					if err != nil {
						sc.closed = true
					}
					s.notify()
					s.mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, sc := range s.conns {
			sc.c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *sink) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// state returns what connection i received and whether it was closed.
func (s *sink) state(i int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.conns) {
		return "", false
	}
	return s.conns[i].got.String(), s.conns[i].closed
}

// waitFor waits until cond holds (it is called under s.mu) or d passes.
func (s *sink) waitFor(d time.Duration, cond func() bool) bool {
	timeout := time.After(d)
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-timeout:
			return false
		}
	}
}

// want waits until connection i received exactly data and is closed or
// not; it fails the test with what it saw when that does not happen in 2 s.
func (s *sink) want(i int, data string, closed bool) {
	s.t.Helper()
	ok := s.waitFor(2*time.Second, func() bool {
		return i < len(s.conns) && s.conns[i].got.String() == data && s.conns[i].closed == closed
	})
	if !ok {
		got, c := s.state(i)
		s.t.Fatalf("node side of connection %d: got %q (closed %v), want %q (closed %v)", i, got, c, data, closed)
	}
}

// stays checks that connection i still has exactly data and the same closed
// state after d: nothing more arrives.
func (s *sink) stays(i int, data string, closed bool, d time.Duration) {
	s.t.Helper()
	time.Sleep(d)
	if got, c := s.state(i); got != data || c != closed {
		s.t.Fatalf("node side of connection %d: got %q (closed %v), want still %q (closed %v)", i, got, c, data, closed)
	}
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("reading %d bytes from the proxy: %v", n, err)
	}
	return string(buf)
}

// waitHeld waits until the proxy holds n bytes.
func waitHeld(t *testing.T, p *Proxy, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for p.Held() != n {
		if time.Now().After(deadline) {
			t.Fatalf("proxy holds %d bytes, want %d", p.Held(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// linked returns a sink, a proxy to it (closed by a t.Cleanup; closing it
// again is harmless) and a client connection through the proxy on which
// "a1" already reached the sink.
func linked(t *testing.T) (*sink, *Proxy, net.Conn) {
	t.Helper()
	s := newSink(t)
	p, err := newProxy(s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	a := dial(t, p)
	write(t, a, "a1")
	s.want(0, "a1", false)
	return s, p, a
}

// linkedHeld is linked, then a hold of scope under which "a2" was written
// and is held.
func linkedHeld(t *testing.T, scope HoldScope) (*sink, *Proxy, net.Conn) {
	t.Helper()
	s, p, a := linked(t)
	p.Hold(scope)
	write(t, a, "a2")
	waitHeld(t, p, 2)
	return s, p, a
}

// conn returns the node side of the sink's connection i.
func (s *sink) conn(i int) net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[i].c
}

// quiet is long enough for a stray byte to arrive.
const quiet = 150 * time.Millisecond

// TestProxyHold checks late delivery: while held, what the client writes is
// kept and reaches the node only on Deliver, also after the client closed
// the connection; replies flow; HoldOpen lets new connections through,
// HoldAll does not; HoldNext holds the first connection written on,
// HoldWrite the first written on with its pattern.
func TestProxyHold(t *testing.T) {
	t.Run("open", testHoldOpen)
	t.Run("all", testHoldAll)
	t.Run("next", testHoldNext)
	t.Run("write", testHoldWrite)
	t.Run("reset-discards", testHoldResetDiscards)
	t.Run("close-while-held", testCloseWhileHeld)
}

func testHoldOpen(t *testing.T) {
	s, p, a := linkedHeld(t, HoldOpen)
	s.stays(0, "a1", false, quiet)

	// Replies flow while held.
	nodeSide := s.conn(0)
	write(t, nodeSide, "r1")
	if got := readN(t, a, 2); got != "r1" {
		t.Fatalf("reply through a held link: %q, want r1", got)
	}

	// A connection opened after Hold(HoldOpen) is not held.
	b := dial(t, p)
	write(t, b, "b1")
	s.want(1, "b1", false)

	// The client gives up on a: its held bytes must still land.
	write(t, a, "a3")
	waitHeld(t, p, 4)
	a.Close()
	s.stays(0, "a1", false, quiet)

	if n := p.Deliver(); n != 4 {
		t.Fatalf("Deliver wrote %d bytes, want 4", n)
	}
	s.want(0, "a1a2a3", true) // landed, then closed like the client did
	if p.Held() != 0 {
		t.Fatalf("Held after Deliver: %d", p.Held())
	}
	if n := p.Deliver(); n != 0 {
		t.Fatalf("second Deliver wrote %d bytes, want 0", n)
	}

	// After Deliver, b works as before.
	write(t, b, "b2")
	s.want(1, "b1b2", false)
}

func testHoldAll(t *testing.T) {
	s, p, a := linked(t)

	p.Hold(HoldAll)
	write(t, a, "a2")
	b := dial(t, p) // opened while held: held too
	if !s.waitFor(2*time.Second, func() bool { return len(s.conns) == 2 }) {
		t.Fatal("the proxy did not connect the new connection to the node")
	}
	write(t, b, "b1")
	waitHeld(t, p, 4)
	b.Close()
	// The node writes to b after the client closed it: the proxy's
	// writes to the client fail, and b's held bytes must survive that.
	nodeSide := s.conn(1)
	for range 3 {
		write(t, nodeSide, "push")
		time.Sleep(20 * time.Millisecond)
	}
	write(t, a, "a3")
	waitHeld(t, p, 6)
	s.stays(0, "a1", false, quiet)
	s.stays(1, "", false, 0)

	if n := p.Deliver(); n != 6 {
		t.Fatalf("Deliver wrote %d bytes, want 6", n)
	}
	s.want(0, "a1a2a3", false)
	s.want(1, "b1", true)

	// Data written after Deliver goes through at once.
	write(t, a, "a4")
	s.want(0, "a1a2a3a4", false)
}

func testHoldNext(t *testing.T) {
	s, p, a := linked(t)
	b := dial(t, p)
	if !s.waitFor(2*time.Second, func() bool { return len(s.conns) == 2 }) {
		t.Fatal("the proxy did not connect the second connection to the node")
	}
	p.Hold(HoldNext)
	write(t, b, "b1") // the first write after Hold: b is held
	waitHeld(t, p, 2)
	write(t, a, "a2") // a was open, but not the one written on: not held
	s.want(0, "a1a2", false)
	c := dial(t, p) // opened later: not held either
	write(t, c, "c1")
	s.want(2, "c1", false)
	write(t, b, "b2") // b stays held
	waitHeld(t, p, 4)
	s.stays(1, "", false, quiet)
	if n := p.Deliver(); n != 4 {
		t.Fatalf("Deliver wrote %d bytes, want 4", n)
	}
	s.want(1, "b1b2", false)
	write(t, b, "b3") // the hold is over
	s.want(1, "b1b2b3", false)
}

func testHoldWrite(t *testing.T) {
	s, p, a := linked(t)
	b := dial(t, p)
	if !s.waitFor(2*time.Second, func() bool { return len(s.conns) == 2 }) {
		t.Fatal("the proxy did not connect the second connection to the node")
	}
	p.HoldWrite("key")
	write(t, a, "ping") // without the pattern: passes, a is not held
	s.want(0, "a1ping", false)
	write(t, b, "set key") // the first write with it: b is held
	waitHeld(t, p, 7)
	write(t, a, "get key") // a was passed over: the one hold is taken
	s.want(0, "a1pingget key", false)
	s.stays(1, "", false, quiet)
	if n := p.Deliver(); n != 7 {
		t.Fatalf("Deliver wrote %d bytes, want 7", n)
	}
	s.want(1, "set key", false)
}

func testHoldResetDiscards(t *testing.T) {
	s, p, _ := linkedHeld(t, HoldOpen)
	p.Reset()
	if n := p.Deliver(); n != 0 {
		t.Fatalf("Deliver after Reset wrote %d bytes, want 0", n)
	}
	s.want(0, "a1", true)
}

func testCloseWhileHeld(t *testing.T) {
	_, p, a := linkedHeld(t, HoldAll)
	a.Close()
	// Close must not wait for a Deliver that never comes.
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung with data held")
	}
}
