package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is an in-process TCP proxy from 127.0.0.1:<random port> to one node,
// for injecting faults between one client and one node. Each accepted
// connection gets its own upstream connection; when either side closes, the
// other is closed too. All methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	latency   atomic.Int64 // time.Duration
	blackhole atomic.Bool
	accepted  atomic.Int64

	mu     sync.Mutex
	conns  map[*proxyConn]struct{}
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
}

// chunk is data read from one side, to be written to the other at due.
type chunk struct {
	data []byte
	due  time.Time
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
	p.conns[pc] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(pc, client, up) }()
	go func() { defer wg.Done(); p.pipe(pc, up, client) }()
	wg.Wait()

	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// pipe forwards src to dst until either fails or pc is closed. A reader
// stamps each chunk with its due time; a writer delivers it then, so
// latency does not accumulate across chunks.
func (p *Proxy) pipe(pc *proxyConn, src, dst net.Conn) {
	ch := make(chan chunk, 64)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		timer := time.NewTimer(0)
		<-timer.C
		for c := range ch {
			if wait := time.Until(c.due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-pc.done:
					timer.Stop()
					return
				}
			}
			if p.blackhole.Load() { // turned on while the chunk was delayed
				pc.dropped.Store(true)
				continue
			}
			if _, err := dst.Write(c.data); err != nil {
				pc.close(false)
				return
			}
		}
	}()

	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.blackhole.Load() {
				pc.dropped.Store(true)
			} else {
				c := chunk{data: append([]byte(nil), buf[:n]...)}
				c.due = time.Now().Add(time.Duration(p.latency.Load()))
				select {
				case ch <- c:
				case <-pc.done:
				}
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
