package main

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// demoNode is one of the demo's embedded Redis servers behind a front door
// the demo shuts and opens: a killed node refuses connections and cuts the
// ones it had, as a crashed server does, and a revived one answers again on
// the same address with its data. The embedded server itself runs from start
// to end: miniredis' own Close and Restart race with a command in flight (its
// INFO reads the server Close sets to nil, and can crash the demo).
//
// kill, revive and close are for one goroutine; the connections it serves
// are any number.
type demoNode struct {
	srv  *miniredis.Miniredis
	addr string // where the node answers, the same after a revival

	mu    sync.Mutex
	ln    net.Listener          // nil while the node is down
	conns map[net.Conn]struct{} // both ends of every open connection
	wg    sync.WaitGroup        // the front door's goroutines
}

// startDemoNode starts an embedded server and opens its front door on a free
// port of 127.0.0.1. On an error nothing is left running.
func startDemoNode() (*demoNode, error) {
	srv, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	n := &demoNode{srv: srv, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}}
	if err := n.revive(); err != nil {
		srv.Close()
		return nil, err
	}
	return n, nil
}

// revive opens the front door on the node's address; a node that is up
// stays as it is.
func (n *demoNode) revive() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", n.addr)
	if err != nil {
		return err
	}
	n.ln, n.addr = ln, ln.Addr().String()
	n.wg.Go(func() { n.accept(ln) })
	return nil
}

// kill shuts the front door and cuts every connection through it, and
// returns once none of its goroutines runs.
func (n *demoNode) kill() {
	n.mu.Lock()
	if n.ln != nil {
		n.ln.Close()
		n.ln = nil
	}
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// close kills the node and stops its server once the server has finished
// every command it was given: it has no more to read. After a second it
// stops the server anyway (a command still running then could meet the
// race the front door avoids; none takes that long).
func (n *demoNode) close() {
	n.kill()
	for end := time.Now().Add(time.Second); n.srv.CurrentConnectionCount() > 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	n.srv.Close()
}

// accept serves the connections ln takes until ln is closed.
func (n *demoNode) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.wg.Go(func() { n.forward(c) })
	}
}

// forward carries c's bytes to the server and back until either side ends
// or the node is killed.
func (n *demoNode) forward(c net.Conn) {
	up, err := net.Dial("tcp", n.srv.Addr())
	if err != nil {
		c.Close()
		return
	}
	n.mu.Lock()
	if n.ln == nil { // killed while this connection was dialled
		n.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	n.conns[c], n.conns[up] = struct{}{}, struct{}{}
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { copyAndClose(up, c); close(done) }()
	copyAndClose(c, up)
	<-done
	n.mu.Lock()
	delete(n.conns, c)
	delete(n.conns, up)
	n.mu.Unlock()
}

// copyAndClose copies src to dst until either fails, then closes both, so
// that the copy the other way ends too.
func copyAndClose(dst, src net.Conn) {
	_, _ = io.Copy(dst, src) // a cut connection is what a client of a crashed server sees
	dst.Close()
	src.Close()
}
