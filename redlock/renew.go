package redlock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// The renewal service: a Client renews all its auto-extended locks from one
// goroutine and a heap of the locks ordered by when each is due, instead of
// a goroutine and a timer per lock. The locks due within a short window are
// renewed together, with one ExtendMany command per node for up to
// renewChunk of them (renewbatch.go). See docs/design.md, "Leases".

// renewChunk is the most locks one ExtendMany command renews: about 1 ms of
// a server's time, so that a chunk never holds a node up for long.
const renewChunk = 512

// maxRenewWindow bounds how early a lock is renewed so that it can join the
// renewals due just before it.
const maxRenewWindow = 250 * time.Millisecond

// renewer is a Client's renewal service. Its goroutine runs while locks are
// scheduled, counted in the Client's WaitGroup, and exits when none are (the
// next add starts it again) or on close.
type renewer struct {
	c       *Client
	ctx     context.Context // of the renewals' rounds: close cancels it
	cancel  context.CancelFunc
	mu      sync.Mutex
	h       lockHeap
	wake    chan struct{} // capacity 1: the heap's head changed, or closed
	running bool
	closed  bool
}

// lockRenewal is a Lock's place in the renewal service: when the service
// renews it next, and its index in the service's heap (-1 when not
// scheduled). Guarded by renewer.mu; only this file reads it.
type lockRenewal struct {
	due time.Time
	idx int
}

// lockHeap orders locks by lockRenewal.due; lockRenewal.idx is a lock's index in
// it, -1 outside. Guarded by renewer.mu.
type lockHeap []*Lock

func (h lockHeap) Len() int           { return len(h) }
func (h lockHeap) Less(i, j int) bool { return h[i].renewal.due.Before(h[j].renewal.due) }
func (h lockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].renewal.idx, h[j].renewal.idx = i, j
}
func (h *lockHeap) Push(x any) {
	l := x.(*Lock)
	l.renewal.idx = len(*h)
	*h = append(*h, l)
}
func (h *lockHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.renewal.idx = -1
	return l
}

// firstRenewal is when a newly acquired lock is first renewed: at a random
// point in the second half of its renewal interval, so that locks acquired
// together do not all come due together.
func firstRenewal(l *Lock, now time.Time) time.Time {
	if l.hold.sess != nil { // its key's refresh, every half key TTL
		iv := keyTTL(l.cfg) / 2
		return now.Add(iv/2 + l.cfg.rnd.duration(iv/2+1))
	}
	iv := l.cfg.renewInterval()
	return now.Add(min(iv/2+l.cfg.rnd.duration(iv/2+1), l.maxWait(now)))
}

// maxWait is the longest a renewal may wait at now: never so long that it
// could not be confirmed (one node timeout) with a node timeout to spare
// before the deadline, never less than a quarter node timeout.
func (l *Lock) maxWait(now time.Time) time.Duration {
	return max(l.cfg.nodeTimeout/4, l.Deadline().Sub(now)-2*l.cfg.nodeTimeout)
}

// add schedules l's next renewal at due; it reports false after close.
func (r *renewer) add(l *Lock, due time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	l.renewal.due = due
	if l.renewal.idx >= 0 {
		heap.Fix(&r.h, l.renewal.idx)
	} else {
		heap.Push(&r.h, l)
	}
	if !r.running {
		r.running = true
		if r.wake == nil {
			r.wake = make(chan struct{}, 1)
		}
		r.c.wg.Go(r.run)
	} else if l.renewal.idx == 0 {
		signal(r.wake)
	}
	return true
}

// remove unschedules l (a no-op when it is not scheduled).
func (r *renewer) remove(l *Lock) {
	r.mu.Lock()
	if l.renewal.idx >= 0 {
		heap.Remove(&r.h, l.renewal.idx)
	}
	r.mu.Unlock()
}

// close stops the service: no renewal starts after it returns, and those
// under way stop waiting for replies (their goroutines finish, counted in
// the Client's WaitGroup).
func (r *renewer) close() {
	r.cancel() // renewals under way stop waiting: Close's bound holds
	r.mu.Lock()
	r.closed = true
	for _, l := range r.h {
		l.renewal.idx = -1
	}
	r.h = nil
	if r.running {
		signal(r.wake)
	}
	r.mu.Unlock()
}

// run is the service's goroutine: it waits for the earliest due lock and
// hands every lock due by then (and within the window after) to a batch.
func (r *renewer) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		batch, wait, ok := r.take()
		if !ok {
			return
		}
		if len(batch) > 0 {
			r.c.wg.Go(func() { r.renew(batch) })
			continue
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-r.wake:
		}
	}
}

// take pops the locks due now (and those due within the head's window), or
// says how long to wait for the head; false when the goroutine must exit.
func (r *renewer) take() (batch []*Lock, wait time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.h) == 0 {
		r.running = false
		return nil, 0, false
	}
	now := r.c.cfg.now()
	head := r.h[0]
	if wait := head.renewal.due.Sub(now); wait > 0 {
		return nil, wait, true
	}
	until := now.Add(min(head.cfg.renewInterval()/8, maxRenewWindow))
	for len(r.h) > 0 && !r.h[0].renewal.due.After(until) {
		batch = append(batch, heap.Pop(&r.h).(*Lock))
	}
	return batch, 0, true
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
