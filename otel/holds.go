package qlotel

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// staleAfter is how long past its deadline a tracked lock may be forgotten
// when the table is full: it was left to expire (its Lost is reported only
// to a holder that watches it) or extended by hand.
const staleAfter = time.Minute

// hold is a lock the Observer saw acquired and not yet released or lost.
type hold struct {
	start    time.Time
	deadline time.Time
	acquire  trace.SpanContext // the acquiring call's span, for links
}

// holds maps the tokens of held locks to their holds, with at most max
// entries. Safe for concurrent use.
type holds struct {
	max       int
	mu        sync.Mutex
	m         map[string]hold
	lastSweep time.Time
}

func newHolds(max int) *holds { return &holds{max: max, m: make(map[string]hold)} }

// add tracks token's hold; when the table is full it first forgets stale
// holds (at most once a second), and it drops the new one if still full.
func (h *holds) add(token string, v hold) {
	if token == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.m) >= h.max && v.start.Sub(h.lastSweep) >= time.Second {
		h.lastSweep = v.start
		for k, old := range h.m {
			if v.start.Sub(old.deadline) > staleAfter {
				delete(h.m, k)
			}
		}
	}
	if len(h.m) < h.max {
		h.m[token] = v
	}
}

// extend moves token's deadline, if it is tracked.
func (h *holds) extend(token string, deadline time.Time) {
	h.mu.Lock()
	if v, ok := h.m[token]; ok {
		v.deadline = deadline
		h.m[token] = v
	}
	h.mu.Unlock()
}

// get returns token's hold, if tracked.
func (h *holds) get(token string) (hold, bool) {
	h.mu.Lock()
	v, ok := h.m[token]
	h.mu.Unlock()
	return v, ok
}

// take returns token's hold and forgets it.
func (h *holds) take(token string) (hold, bool) {
	h.mu.Lock()
	v, ok := h.m[token]
	if ok {
		delete(h.m, token)
	}
	h.mu.Unlock()
	return v, ok
}
