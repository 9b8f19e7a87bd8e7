// Package quorum fans one call out to every node of a Redlock client in
// parallel and hands the replies back one at a time, so the caller can
// decide as soon as the outcome is certain and leave the stragglers to a
// clean-up function that still sees every reply.
//
// A Round is owned by one goroutine: Next and Finish must not be called
// concurrently. The goroutines it starts are counted in the WaitGroup given to
// Start, so their owner can join them.
package quorum

import (
	"context"
	"sync"
	"time"
)

// Reply is one node's answer.
type Reply[T any] struct {
	Node    int           // index of the node
	Val     T             // the call's result; meaningful only when Err is nil
	Err     error         // the call's error
	Latency time.Duration // from the start of the round to the reply
}

// Round is one fan-out in progress.
type Round[T any] struct {
	ctx     context.Context
	cancel  context.CancelFunc
	replies chan Reply[T]
	pending int // calls whose reply has not been taken by Next
	wg      *sync.WaitGroup
}

// Start calls call(ctx, i), each in its own goroutine, for every node i in
// [0, n) for which ask(i) is true (ask nil asks all). All calls share one
// context that ends after timeout or when parent ends, whichever comes first;
// it stays open for the stragglers after the caller has decided, until Finish
// has collected every reply. wg counts every goroutine Start and Finish start:
// the caller must hold a count of its own on wg while it calls Start, so that
// the counter is not zero when Start adds to it.
func Start[T any](parent context.Context, wg *sync.WaitGroup, timeout time.Duration, n int, ask func(int) bool, call func(ctx context.Context, i int) (T, error)) *Round[T] {
	ctx, cancel := context.WithTimeout(parent, timeout)
	r := &Round[T]{ctx: ctx, cancel: cancel, replies: make(chan Reply[T], n), wg: wg}
	start := time.Now()
	for i := range n {
		if ask != nil && !ask(i) {
			continue
		}
		r.pending++
		wg.Go(func() {
			v, err := call(ctx, i)
			r.replies <- Reply[T]{Node: i, Val: v, Err: err, Latency: time.Since(start)}
		})
	}
	return r
}

// Pending is the number of replies not yet taken by Next.
func (r *Round[T]) Pending() int { return r.pending }

// Next returns the next reply to arrive. It returns false when no reply is
// pending or the round's context has ended first (its deadline passed or the
// parent was cancelled); Err then tells which.
func (r *Round[T]) Next() (Reply[T], bool) {
	if r.pending == 0 {
		return Reply[T]{}, false
	}
	select {
	case rep := <-r.replies:
		r.pending--
		return rep, true
	case <-r.ctx.Done():
		return Reply[T]{}, false
	}
}

// Err is the round context's error: nil while it is open,
// context.DeadlineExceeded once the timeout (or the parent's deadline) has
// passed, context.Canceled once the parent was cancelled.
func (r *Round[T]) Err() error { return r.ctx.Err() }

// Finish ends the round. Every reply Next has not returned goes to late (nil
// drops them), in a goroutine counted in wg when some are still pending; the
// round's context is released after the last one. Finish does not wait.
func (r *Round[T]) Finish(late func(Reply[T])) { r.FinishThen(late, nil) }

// FinishThen is Finish, and then calls then (if not nil) once every reply
// has been handed to late: at once when none is pending.
func (r *Round[T]) FinishThen(late func(Reply[T]), then func()) {
	if r.pending == 0 {
		r.cancel()
		if then != nil {
			then()
		}
		return
	}
	pending := r.pending
	r.pending = 0
	r.wg.Go(func() {
		defer r.cancel()
		for range pending {
			rep := <-r.replies
			if late != nil {
				late(rep)
			}
		}
		if then != nil {
			then()
		}
	})
}
