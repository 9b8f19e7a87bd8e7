// Package schedule runs work for many items as each comes due, from one
// goroutine and a heap ordered by due time, instead of a goroutine and a
// timer per item; the items due within a window of the earliest are handed
// to one batch. A Client's renewal service is one (docs/design.md,
// "Leases").
package schedule

import (
	"container/heap"
	"sync"
	"time"
)

// Entry is an item's place in a Schedule: embed it in the item (the zero
// Entry is not scheduled). Only the Schedule reads or writes it, under its
// lock.
type Entry struct {
	due time.Time
	pos int // 1 + the item's index in the heap; 0: not scheduled
}

// Item is what a Schedule holds: a pointer to a type that embeds an Entry.
type Item interface{ entry() *Entry }

func (e *Entry) entry() *Entry { return e }

// Slot is an Entry that carries a value: the item of a Schedule of values
// that do not embed an Entry themselves (a Client's renewal service holds
// one Slot per auto-extended Lock).
type Slot[V any] struct {
	Entry
	Value V
}

// Config is what a Schedule runs.
type Config[T Item] struct {
	Now func() time.Time // the clock due times are read on
	// Window returns how long after the due time of head, the earliest
	// item due, other items may be due and still join head's batch.
	Window func(head T) time.Duration
	Run    func(batch []T) // runs a batch of items due, on a goroutine of Go's
	Go     func(f func())  // starts f on a goroutine its owner joins
}

// Schedule holds the items due in the future. Its goroutine runs while
// items are scheduled and exits when none are (the next Add starts it
// again) or on Close. Safe for concurrent use.
type Schedule[T Item] struct {
	cfg     Config[T]
	mu      sync.Mutex
	h       items[T]
	wake    chan struct{} // capacity 1: the heap's head changed, or closed
	running bool
	closed  bool
}

// New returns an empty Schedule running cfg.
func New[T Item](cfg Config[T]) *Schedule[T] {
	return &Schedule[T]{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Add schedules x (again, if it is scheduled) at due; it reports false
// after Close.
func (s *Schedule[T]) Add(x T, due time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	e := x.entry()
	e.due = due
	if e.pos > 0 {
		heap.Fix(&s.h, e.pos-1)
	} else {
		heap.Push(&s.h, x)
	}
	switch {
	case !s.running:
		s.running = true
		s.cfg.Go(s.run)
	case e.pos == 1:
		signal(s.wake)
	}
	return true
}

// Remove unschedules x (a no-op when it is not scheduled).
func (s *Schedule[T]) Remove(x T) {
	s.mu.Lock()
	if e := x.entry(); e.pos > 0 {
		heap.Remove(&s.h, e.pos-1)
	}
	s.mu.Unlock()
}

// Close unschedules every item; no batch starts after it returns.
func (s *Schedule[T]) Close() {
	s.mu.Lock()
	s.closed = true
	for _, x := range s.h {
		x.entry().pos = 0
	}
	s.h = nil
	if s.running {
		signal(s.wake)
	}
	s.mu.Unlock()
}

// run is the Schedule's goroutine: it waits for the earliest item due and
// hands every item due by then (and within the window after) to a batch.
func (s *Schedule[T]) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		batch, wait, ok := s.take()
		if !ok {
			return
		}
		if len(batch) > 0 {
			s.cfg.Go(func() { s.cfg.Run(batch) })
			continue
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-s.wake:
		}
	}
}

// take pops the items due now (and those due within the head's window), or
// says how long to wait for the head; false when the goroutine must exit.
func (s *Schedule[T]) take() (batch []T, wait time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.h) == 0 {
		s.running = false
		return nil, 0, false
	}
	now := s.cfg.Now()
	head := s.h[0]
	if wait := head.entry().due.Sub(now); wait > 0 {
		return nil, wait, true
	}
	until := now.Add(s.cfg.Window(head))
	for len(s.h) > 0 && !s.h[0].entry().due.After(until) {
		batch = append(batch, heap.Pop(&s.h).(T))
	}
	return batch, 0, true
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// items orders items by due time; each one's Entry.pos follows its index.
type items[T Item] []T

func (h items[T]) Len() int           { return len(h) }
func (h items[T]) Less(i, j int) bool { return h[i].entry().due.Before(h[j].entry().due) }
func (h items[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].entry().pos, h[j].entry().pos = i+1, j+1
}
func (h *items[T]) Push(x any) {
	t := x.(T)
	t.entry().pos = len(*h) + 1
	*h = append(*h, t)
}
func (h *items[T]) Pop() any {
	old := *h
	var zero T
	t := old[len(old)-1]
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	t.entry().pos = 0
	return t
}
