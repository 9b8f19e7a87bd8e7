package testkit

import (
	"bytes"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is an in-process TCP proxy from 127.0.0.1:<random port> to one node,
// for injecting faults between one client and one node. Each accepted
// connection gets its own upstream connection; when either side closes, the
// other is closed too, once what was read from the client (held data
// included, see Hold) has been written to the node. All methods are safe
// for concurrent use.
//
// The faults: SetLatency (slow link), Blackhole (lost packets), Reset (TCP
// RST), and Hold / Deliver (late delivery: what the client wrote reaches the
// node only after the client gave up on it).
type Proxy struct {
	target string
	ln     net.Listener

	latency   atomic.Int64 // time.Duration
	blackhole atomic.Bool
	accepted  atomic.Int64

	mu     sync.Mutex
	conns  map[*proxyConn]struct{}
	hold   *hold // the hold in force, nil when none
	closed bool

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type proxyConn struct {
	client, upstream net.Conn
	dropped          atomic.Bool // data was discarded by a blackhole
	done             chan struct{}
	once             sync.Once
	hold             *hold // guarded by Proxy.mu: the hold that keeps what the client writes
}

// chunk is data read from one side, to be written to the other at due (and,
// if held, not before Deliver released it).
type chunk struct {
	data []byte
	due  time.Time
	held *heldChunk
}

// HoldScope says which connections a hold applies to (see Proxy.Hold).
type HoldScope uint8

const (
	// HoldOpen holds the connections open when Hold is called: the
	// commands in flight on them, and everything the client writes on them
	// until it gives up on them, land late; connections the client opens
	// afterwards work normally. This is a TCP connection whose segments
	// are retransmitted late, or a stalled path, while a new connection
	// gets through: a command sent again, or a clean-up sent on a new
	// connection, overtakes the late one.
	HoldOpen HoldScope = iota + 1
	// HoldAll also holds every connection opened while the hold is on:
	// nothing the client writes reaches the node before Deliver (a link
	// that buffers everything, or a client-side stall).
	HoldAll
	// HoldNext holds one connection: the first one, open or opened later,
	// on which the client writes after Hold, from that write on. Every
	// other connection works normally. This is one TCP connection whose
	// segments are retransmitted late: whichever connection the client
	// uses for its next command and for what follows it (another idle
	// connection, a new one), the later command overtakes the held one.
	// Each Hold(HoldNext) while a hold is in force holds one connection
	// more.
	HoldNext
)

// String returns "open", "all" or "next".
func (s HoldScope) String() string {
	switch s {
	case HoldOpen:
		return "open"
	case HoldAll:
		return "all"
	case HoldNext:
		return "next"
	}
	return "HoldScope(?)"
}

// hold is one late-delivery fault: the data read from the client on the
// connections it applies to, in the order it was read, until Deliver.
type hold struct {
	all        bool     // new connections are held too (HoldAll)
	next       [][]byte // per connection still to be held: what its first held write contains (nil: anything)
	delivering bool     // Deliver has started: data read now is not held
	queue      []*heldChunk
	bytes      int
}

// heldChunk is one held read. Deliver closes ready to let the connection's
// writer write it; the writer closes done after writing it (written says
// whether it was written: a connection reset meanwhile loses it).
type heldChunk struct {
	pc          *proxyConn
	n           int
	ready, done chan struct{}
	written     atomic.Bool
}

// NewProxy starts a new in-process TCP proxy from 127.0.0.1:<random port>
// to target, a "host:port" that need not be a Node of this package (a
// server the test started otherwise, such as a Redis Cluster's node), and
// registers a t.Cleanup that closes it. The proxy dials target only when a
// client connects. It fails the test with t.Fatalf if it cannot listen.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := newProxy(target)
	if err != nil {
		t.Fatalf("testkit: proxy to %s: %v", target, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func newProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the proxy's "127.0.0.1:PORT" address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of data forwarded in either direction by d
// from the moment the proxy read it (so a request/response round trip
// takes at least 2*d more). 0 or a negative d removes the delay. It applies
// to data read after the call, on current and future connections.
func (p *Proxy) SetLatency(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.latency.Store(int64(d))
}

// Hold makes the link deliver late: from now on, data read from the client
// on the connections scope names is kept, in order, and not forwarded to
// the node until Deliver; it is never dropped, and replies (to what was sent
// before, or pushed by the node) flow back normally. A connection the client
// closes (or that a client's timeout made it abandon) while its data is held
// stays open towards the node until Deliver has written that data: the
// bytes were sent, the client gave up, and they land anyway. Calling Hold
// again while a hold is in force adds the connections now open (and, with
// HoldAll, those opened later) to it.
//
// SetLatency also delivers late what it read, but it delays both directions
// and every connection alike, by a set duration, so a clean-up sent on a new
// connection still lands after the command it cleans up. Hold models the
// case that breaks naive clean-up: a command that was written, timed out,
// and runs on the node at a moment the test chooses (Deliver), after the
// client's clean-up and on a link whose new connections work (HoldOpen).
//
// Reset, Close and a Blackhole that lost data on a connection discard what
// it held (a reset connection loses what it had not delivered).
func (p *Proxy) Hold(scope HoldScope) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil {
		p.hold = &hold{}
	}
	h := p.hold
	switch scope {
	case HoldAll:
		h.all = true
	case HoldNext:
		h.next = append(h.next, nil)
		return
	}
	for pc := range p.conns {
		if pc.hold == nil || pc.hold.delivering {
			pc.hold = h
		}
	}
}

// HoldWrite holds one connection as Hold(HoldNext) does, but from the
// first write that contains pattern (as one read of the proxy: a command
// of a few hundred bytes, written whole, is), so that a test holds the
// command it means and not a health check or a set-up command the client
// happens to write first. Writes without pattern, on any connection, pass
// until then. Each call while a hold is in force holds one connection more.
// An empty pattern is Hold(HoldNext).
func (p *Proxy) HoldWrite(pattern string) {
	if pattern == "" {
		p.Hold(HoldNext)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil {
		p.hold = &hold{}
	}
	p.hold.next = append(p.hold.next, []byte(pattern))
}

// holdNext puts pc under h if a connection is still to be held at a write
// such as data (HoldNext, HoldWrite). The caller holds p.mu.
func (h *hold) holdNext(pc *proxyConn, data []byte) {
	for i, m := range h.next {
		if m == nil || bytes.Contains(data, m) {
			h.next = slices.Delete(h.next, i, i+1)
			pc.hold = h
			return
		}
	}
}

// Deliver ends the hold in force: it writes everything held to the node, in
// the order the proxy read it (across connections too, one read at a time,
// each after the one before was written), including the data of connections
// the client has closed meanwhile, which are closed towards the node right
// after. It returns the number of bytes written. Data the client writes
// after Deliver started is forwarded as usual, after the held data of its
// connection. Commands on different connections are not ordered by TCP: the
// node usually runs them in the order written, but need not (behind Docker's
// port forwarder, itself a proxy with a goroutine per connection, less so).
// Without a hold in force, Deliver does nothing and returns 0.
func (p *Proxy) Deliver() int {
	p.mu.Lock()
	h := p.hold
	p.hold = nil
	if h == nil {
		p.mu.Unlock()
		return 0
	}
	h.delivering = true
	queue := h.queue
	h.queue = nil
	p.mu.Unlock()

	n := 0
	for _, c := range queue {
		close(c.ready)
		select {
		case <-c.done:
		case <-c.pc.done: // reset meanwhile: its data is lost
		}
		if c.written.Load() {
			n += c.n
		}
	}
	p.mu.Lock()
	for pc := range p.conns {
		if pc.hold == h {
			pc.hold = nil
		}
	}
	p.mu.Unlock()
	return n
}

// Held returns the number of bytes the hold in force keeps (0 when there is
// none).
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil {
		return 0
	}
	return p.hold.bytes
}

// Blackhole, while on, keeps accepting connections (and connecting them
// upstream) but forwards nothing in either direction: data read is
// discarded, as by a network that drops packets, so callers see timeouts,
// not errors. Turning it off closes the connections that lost data while
// it was on (their byte streams are no longer in sync); connections that
// were idle keep working.
func (p *Proxy) Blackhole(on bool) {
	p.blackhole.Store(on)
	if on {
		return
	}
	p.mu.Lock()
	var lost []*proxyConn
	for c := range p.conns {
		if c.dropped.Load() {
			lost = append(lost, c)
		}
	}
	p.mu.Unlock()
	for _, c := range lost {
		c.close(true)
	}
}

// Accepted returns the number of connections the proxy has accepted since
// it started, including those closed since. A client's dial through the
// proxy has returned by the time it is counted.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Reset closes all current connections, on both sides, with a TCP RST
// (SO_LINGER 0), so their users see "connection reset by peer". New
// connections are accepted normally afterwards.
func (p *Proxy) Reset() {
	p.mu.Lock()
	all := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.close(true)
	}
}

// Close stops listening, resets all connections and waits for the proxy's
// goroutines to finish. It returns the error of closing the listener;
// calling it again returns the same result.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.closeErr = p.ln.Close()
		p.Reset()
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: back off, retry
			continue
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		// The node is down: refuse like it would.
		resetConn(client)
		return
	}
	pc := &proxyConn{client: client, upstream: up, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.close(true)
		return
	}
	if p.hold != nil && p.hold.all {
		pc.hold = p.hold
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(pc, client, up, true) }()
	go func() { defer wg.Done(); p.pipe(pc, up, client, false) }()
	wg.Wait()

	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// pipe forwards src to dst until either fails or pc is closed. A reader
// stamps each chunk with its due time; a writer delivers it then, so
// latency does not accumulate across chunks. From the client (up), a chunk
// read while pc is held waits for Deliver as well.
//
// When the client side ends (EOF, an error, or the node's reply could not
// be written to it), the client-to-node pipe still writes what it read,
// held data included, before both sides are closed: a command the client
// wrote is not lost because the client stopped waiting for its reply.
func (p *Proxy) pipe(pc *proxyConn, src, dst net.Conn, up bool) {
	ch := make(chan chunk, 64)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		p.deliver(pc, ch, dst, up)
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.drop(pc) {
			select {
			case ch <- p.chunkOf(pc, buf[:n], up):
			case <-pc.done:
			}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	<-writerDone // deliver what was read before the EOF, then close both
	pc.close(false)
}

// drop reports whether the link is blackholed, and then marks pc as having
// lost data.
func (p *Proxy) drop(pc *proxyConn) bool {
	if !p.blackhole.Load() {
		return false
	}
	pc.dropped.Store(true)
	return true
}

// chunkOf copies data into a chunk due once the latency has passed; from
// the client (up) while pc is held, the chunk joins the hold's queue.
func (p *Proxy) chunkOf(pc *proxyConn, data []byte, up bool) chunk {
	c := chunk{data: append([]byte(nil), data...), due: time.Now().Add(time.Duration(p.latency.Load()))}
	if up {
		p.mu.Lock()
		if h := p.hold; h != nil && pc.hold == nil {
			h.holdNext(pc, data)
		}
		if h := pc.hold; h != nil && !h.delivering {
			c.held = &heldChunk{pc: pc, n: len(data), ready: make(chan struct{}), done: make(chan struct{})}
			h.queue = append(h.queue, c.held)
			h.bytes += len(data)
		}
		p.mu.Unlock()
	}
	return c
}

// deliver writes each chunk of ch to dst when it is due (and, if held,
// delivered) until ch is closed or pc ends. When the client is gone, the
// node-to-client side closes the client's connection, so that the
// client-to-node pipe ends after delivering what it read, and discards the
// rest.
func (p *Proxy) deliver(pc *proxyConn, ch <-chan chunk, dst net.Conn, up bool) {
	timer := time.NewTimer(0)
	<-timer.C
	failed := false
	for c := range ch {
		if failed {
			continue
		}
		if !await(pc, c, timer) {
			return
		}
		if p.drop(pc) { // turned on while the chunk was delayed
			if c.held != nil {
				close(c.held.done)
			}
			continue
		}
		_, err := dst.Write(c.data)
		if c.held != nil {
			c.held.written.Store(err == nil)
			close(c.held.done)
		}
		if err != nil && up {
			pc.close(false)
			return
		}
		if err != nil {
			_ = pc.client.Close()
			failed = true
		}
	}
}

// await waits until c is due and, if held, delivered; it returns false when
// pc ended first.
func await(pc *proxyConn, c chunk, timer *time.Timer) bool {
	if wait := time.Until(c.due); wait > 0 {
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-pc.done:
			timer.Stop()
			return false
		}
	}
	if c.held == nil {
		return true
	}
	select {
	case <-c.held.ready:
		return true
	case <-pc.done:
		return false
	}
}

// close closes both sides once; with rst, using SO_LINGER 0 so the peers
// get a TCP RST.
func (pc *proxyConn) close(rst bool) {
	pc.once.Do(func() {
		close(pc.done)
		if rst {
			resetConn(pc.client)
			resetConn(pc.upstream)
			return
		}
		pc.client.Close()
		pc.upstream.Close()
	})
}

func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
