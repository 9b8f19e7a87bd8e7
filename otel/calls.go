package qlotel

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlock/quorumlock/redlock"
)

// A waiting call (Lock, Acquire, Campaign, ...) reports each refused
// attempt as it happens, and its end later; the Observer keeps the call's
// span open in between, so that the attempts become its children. An Event
// names its call only by its context, key, start (now - Waited) and
// attempts so far, so a call is found by those: among the open calls of
// the same context and key that have seen fewer attempts, the one whose
// start is nearest. A first refusal (one attempt) always opens a new call.
// Concurrent calls with one context and key may thus swap spans only when
// they start within the jitter of that estimate (microseconds), and every
// open call is closed by exactly one ending call.

// callKey identifies the calls of one context and key.
type callKey struct {
	ctx context.Context
	key string
}

// openCall is a waiting call whose span is open.
type openCall struct {
	begin    time.Time
	attempts int             // the most its call has reported; guarded by calls.mu
	ctx      context.Context // carries span
	span     trace.Span
}

// calls holds the open calls, at most max. Safe for concurrent use.
type calls struct {
	max int
	n   atomic.Int64 // entries, read without mu on the fast path
	mu  sync.Mutex
	m   map[callKey][]*openCall
}

func newCalls(max int) *calls { return &calls{max: max, m: make(map[callKey][]*openCall)} }

var (
	backgroundType = reflect.TypeOf(context.Background())
	todoType       = reflect.TypeOf(context.TODO())
)

// keyOf returns e's call key; false when its context cannot safely be a
// map key (a context of a non-pointer type other than Background's and
// TODO's might hold a value that is not comparable, which would panic).
func keyOf(e *redlock.Event) (callKey, bool) {
	if e.Context == nil {
		return callKey{}, false
	}
	t := reflect.TypeOf(e.Context)
	if t.Kind() != reflect.Pointer && t != backgroundType && t != todoType {
		return callKey{}, false
	}
	return callKey{ctx: e.Context, key: e.Key}, true
}

// find returns the open call of k that has seen fewer than attempts
// attempts and began nearest begin, nil if none. It notes attempts in the
// call found, and forgets that call when take is set.
func (c *calls) find(k callKey, begin time.Time, attempts int, take bool) *openCall {
	if c.n.Load() == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.m[k]
	best := -1
	for i, oc := range list {
		if oc.attempts < attempts && (best < 0 || absDur(oc.begin.Sub(begin)) < absDur(list[best].begin.Sub(begin))) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	oc := list[best]
	oc.attempts = attempts
	if take {
		list = append(list[:best], list[best+1:]...)
		if len(list) == 0 {
			delete(c.m, k)
		} else {
			c.m[k] = list
		}
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

// insert keeps oc open as a call of k, in the room reserve claimed.
func (c *calls) insert(k callKey, oc *openCall) {
	c.mu.Lock()
	c.m[k] = append(c.m[k], oc)
	c.mu.Unlock()
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
