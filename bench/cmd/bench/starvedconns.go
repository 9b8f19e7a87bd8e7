package main

// What the starved scenario counts of the client's connections, as the
// overload harness of issue 32 does: on the client's side, through a
// Dialer that wraps every connection both implementations open, the dials,
// the failed dials and the connections closed, and of those the ones closed
// before they had read 1,000 bytes (a connection closed during its set-up:
// the restart guard's INFO reply alone is about 2.5 KB). The servers' own
// counts (total_connections_received, connected_clients) missed closes: a
// connection whose set-up failed was left open by go-redis v9.22 and
// counted as pool growth.

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// connDialer, when set, is the Dialer of every client newOurs and
// newRedsync make (the starved child sets it; nil elsewhere).
var connDialer func(ctx context.Context, network, addr string) (net.Conn, error)

// connEvents counts connection events per bucket of the child's timeline;
// events before t0 (set-up and warm-up) go to before.
type connEvents struct {
	at                                        func() int // the bucket of now, -1 outside the measured range
	dials, dialErrs, closed, closedEarly      []atomic.Int64
	beforeDials, beforeClosed, beforeDialErrs atomic.Int64
}

func newConnEvents(nb int, at func() int) *connEvents {
	return &connEvents{at: at, dials: make([]atomic.Int64, nb), dialErrs: make([]atomic.Int64, nb),
		closed: make([]atomic.Int64, nb), closedEarly: make([]atomic.Int64, nb)}
}

func (e *connEvents) add(v []atomic.Int64, before *atomic.Int64) {
	if i := e.at(); i >= 0 {
		v[i].Add(1)
	} else if before != nil {
		before.Add(1)
	}
}

func (e *connEvents) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}
		cn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			e.add(e.dialErrs, &e.beforeDialErrs)
			return nil, err
		}
		e.add(e.dials, &e.beforeDials)
		return &countedConn{Conn: cn, e: e}, nil
	}
}

// snapshot copies the per-bucket counts into out.
func (e *connEvents) snapshot(out *childOut) {
	get := func(v []atomic.Int64) []int64 {
		s := make([]int64, len(v))
		for i := range v {
			s[i] = v[i].Load()
		}
		return s
	}
	out.Dials, out.DialErrs, out.Closed, out.ClosedEarly = get(e.dials), get(e.dialErrs), get(e.closed), get(e.closedEarly)
	out.SetupDials, out.SetupClosed = e.beforeDials.Load(), e.beforeClosed.Load()
}

// countedConn counts its bytes read and its close.
type countedConn struct {
	net.Conn
	e    *connEvents
	read atomic.Int64
	once sync.Once
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.e.add(c.e.closed, &c.e.beforeClosed)
		if c.read.Load() < 1000 {
			c.e.add(c.e.closedEarly, nil)
		}
	})
	return c.Conn.Close()
}
