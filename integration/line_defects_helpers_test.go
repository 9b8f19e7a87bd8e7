package integration

// Helpers of line_defects_test.go.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// cutLink is a client's link to one node that the test cuts at the moment a
// reply arrives: the reply is handed to the client, and at once every
// connection of the link is closed and new ones are refused (a dial error),
// until restore. So what the client sends in answer to that reply cannot be
// written: its fate is known, it never reached the node. The fault proxy
// cannot do this on its own: between the reply passing through it and the
// client's next command there are microseconds.
//
// Its dial is a redis.Options.Dialer; it dials addr (a fault proxy of the
// node) and wraps the connection.
type cutLink struct {
	addr string

	mu    sync.Mutex
	armed bool // the next read of a reply cuts the link
	down  bool // dials are refused
	conns map[*linkConn]struct{}
	cut   chan struct{} // closed when the link was cut
	cutAt time.Time
	read  string // what the read that cut the link handed over
}

func newCutLink(addr string) *cutLink {
	return &cutLink{addr: addr, conns: map[*linkConn]struct{}{}, cut: make(chan struct{})}
}

// errLinkCut is what a connection of a cut link answers.
var errLinkCut = errors.New("the test cut the link")

// dial is the link's redis.Options.Dialer.
func (l *cutLink) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	l.mu.Lock()
	down := l.down
	l.mu.Unlock()
	if down {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, l.addr)
	if err != nil {
		return nil, err
	}
	lc := &linkConn{Conn: c, l: l}
	l.mu.Lock()
	if l.down {
		l.mu.Unlock()
		_ = c.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
	return lc, nil
}

// arm makes the next data the client reads on the link cut it, right after
// the read hands the data over.
func (l *cutLink) arm() {
	l.mu.Lock()
	l.armed = true
	l.mu.Unlock()
}

// fire cuts the link if it is armed, after a read handed data over: it
// marks every connection dead (their writes fail without writing, go-redis'
// health check finds them broken), closes them, and refuses new dials.
func (l *cutLink) fire(data []byte) {
	l.mu.Lock()
	if !l.armed {
		l.mu.Unlock()
		return
	}
	l.armed, l.down, l.cutAt, l.read = false, true, time.Now(), string(data)
	conns := l.conns
	l.conns = map[*linkConn]struct{}{}
	for c := range conns {
		c.dead = true
	}
	close(l.cut)
	l.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

// restore lets new connections through again, and returns when.
func (l *cutLink) restore() time.Time {
	l.mu.Lock()
	l.down = false
	l.mu.Unlock()
	return time.Now()
}

// waitCut waits at most d for the link to be cut and returns when it was,
// and what the read that cut it handed over.
func (l *cutLink) waitCut(t *testing.T, d time.Duration, what string) (time.Time, string) {
	t.Helper()
	select {
	case <-l.cut:
	case <-time.After(d):
		t.Fatalf("premise: %s: no reply came back on the link within %v", what, d)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cutAt, l.read
}

// linkConn is a connection of a cutLink.
type linkConn struct {
	net.Conn
	l    *cutLink
	dead bool // guarded by l.mu
}

func (c *linkConn) isDead() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.dead
}

func (c *linkConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.l.fire(b[:n])
	}
	return n, err
}

func (c *linkConn) Write(b []byte) (int, error) {
	if c.isDead() {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: errLinkCut}
	}
	return c.Conn.Write(b)
}

// SyscallConn lets go-redis' health check of an idle connection look at the
// socket; a connection of a cut link is broken.
func (c *linkConn) SyscallConn() (syscall.RawConn, error) {
	if c.isDead() {
		return nil, errLinkCut
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a syscall.Conn")
	}
	return sc.SyscallConn()
}

// lineSets are the sorted sets of a key's line on a node: q (the waiters),
// x (when each entry lapses) and g (the waiters that left for good, where
// the library keeps them apart from x).
var lineSets = [...]string{"q", "x", "g"}

// lineSizes returns ZCARD of each of key's lineSets on cl.
func lineSizes(ctx context.Context, cl *redis.Client, key string) (sizes [len(lineSets)]int64, err error) {
	pipe := cl.Pipeline()
	var cmds [len(lineSets)]*redis.IntCmd
	for i, s := range lineSets {
		cmds[i] = pipe.ZCard(ctx, rkey(key)+"\x1f"+s)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return sizes, err
	}
	for i, c := range cmds {
		sizes[i] = c.Val()
	}
	return sizes, nil
}

// namesToken reports whether v, a lock key's value, was written for token:
// the token itself, or a session lock's value (token, 0x1f, ...).
func namesToken(v, token string) bool {
	return v != "" && (v == token || strings.HasPrefix(v, token+"\x1f"))
}

// tokenOf returns the token in v, a lock key's value (a session lock's
// value holds it before its first 0x1f).
func tokenOf(v string) string {
	tok, _, _ := strings.Cut(v, "\x1f")
	return tok
}

// keyOn describes key's value and PTTL on the node of cl.
func keyOn(t *testing.T, cl *redis.Client, key string) string {
	t.Helper()
	v := get(t, cl, rkey(key))
	if v == "" {
		return "absent"
	}
	return fmt.Sprintf("%q, PTTL %dms", v, pttl(t, cl, rkey(key)))
}
