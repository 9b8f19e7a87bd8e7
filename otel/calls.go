package qlotel

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// A waiting call (Lock, Acquire, Campaign, ...) reports each refused
// attempt as it happens, and its end later; the Observer keeps the call's
// span open in between, so that the attempts become its children. Every
// event of one call carries the call's number (redlock.Event.Call), by which
// its open span is found; the call's end closes it.

// openCall is a waiting call whose span is open.
type openCall struct {
	ctx  context.Context // carries span
	span trace.Span
}

// calls holds the open calls, at most max. Safe for concurrent use.
type calls struct {
	max int
	n   atomic.Int64 // entries, read without mu on the fast path
	mu  sync.Mutex
	m   map[uint64]*openCall
}

func newCalls(max int) *calls { return &calls{max: max, m: make(map[uint64]*openCall)} }

// find returns the open call numbered id, nil if none; it forgets that
// call when take is set.
func (c *calls) find(id uint64, take bool) *openCall {
	if id == 0 || c.n.Load() == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	oc := c.m[id]
	if oc != nil && take {
		delete(c.m, id)
		c.n.Add(-1)
	}
	return oc
}

// reserve claims room for one more open call; false when max are open.
func (c *calls) reserve() bool {
	for {
		n := c.n.Load()
		if n >= int64(c.max) {
			return false
		}
		if c.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// unreserve gives back room that reserve claimed and insert did not use.
func (c *calls) unreserve() { c.n.Add(-1) }

// insert keeps oc open as call id, in the room reserve claimed.
func (c *calls) insert(id uint64, oc *openCall) {
	c.mu.Lock()
	c.m[id] = oc
	c.mu.Unlock()
}
