// Package lease keeps a lock's lifetime as its holder sees it: the end of
// its validity on the local monotonic clock, whether it was released or lost
// and why, and the lease its watchers are handed (a context and a timer that
// fires at the deadline). It knows nothing of nodes or commands.
//
// A Life is not safe for concurrent use: its owner guards every call, and
// the functions it is given, with one mutex (the Lock's). The timer's
// callback (expire, given to Watch) runs without it and must take it.
package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The causes a lifetime ends with; package redlock exports them as
// ErrLockLost and ErrReleased.
var (
	ErrLost     = errors.New("redlock: lock lost")
	ErrReleased = errors.New("redlock: lock already released")
)

// Life is one lock's lifetime. Its zero value is a lock held until the zero
// time; New gives it its first deadline.
type Life struct {
	deadline time.Time // end of validity on the local monotonic clock
	released bool      // Release or Close ran
	lost     bool      // the lock was lost (sticky: a later release keeps it)
	lossErr  error     // why it was lost: ErrLost with the reason (nil: none given)
	lastFail error     // the last renewal's failure, since its last success (nil: none)
	watch    *watch    // created on first use of Watch
}

// watch is what a lock's watchers are handed: a context cancelled with the
// lifetime's cause, the cancel functions of the contexts derived from it
// (cancelled at the same moment, not by a goroutine later), and a timer that
// fires at the deadline. It is created lazily, so locks nobody watches cost
// neither.
type watch struct {
	ctx      context.Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	children map[int]context.CancelCauseFunc
	next     int
}

// New returns the lifetime of a lock held until deadline.
func New(deadline time.Time) Life { return Life{deadline: deadline} }

// Held reports whether the lock is neither released nor lost.
func (f *Life) Held() bool { return !f.released && !f.lost }

// Released reports whether the lock was released (also after a loss).
func (f *Life) Released() bool { return f.released }

// Lost reports whether the lock was lost.
func (f *Life) Lost() bool { return f.lost }

// Deadline returns the recorded end of validity.
func (f *Life) Deadline() time.Time { return f.deadline }

// Recompute sets the deadline of a held lock whose validity its owner
// computes anew (a renewal session's lock), without moving the timer.
func (f *Life) Recompute(deadline time.Time) { f.deadline = deadline }

// Cause is why a lock that is no longer held ended: ErrReleased, or ErrLost
// (with the reason, when one was given).
func (f *Life) Cause() error {
	switch {
	case f.lost && f.lossErr != nil:
		return f.lossErr
	case f.lost:
		return ErrLost
	}
	return ErrReleased
}

// End ends the lifetime, lost (sticky: a later release keeps it lost) or
// released, and cancels the watch with the matching cause. It reports
// whether the lock was held until now: only then must the owner let go of
// what the lock kept (its place in the Client, its session).
func (f *Life) End(lost bool) bool {
	wasHeld := f.Held()
	if lost {
		if f.released {
			return false
		}
		f.lost = true
	} else {
		f.released = true
	}
	if wasHeld && f.watch != nil {
		f.watch.end(f.Cause())
	}
	return wasHeld
}

// Lose ends a held lifetime as lost for the reason why ("" when the last
// renewal's failure says it all): Cause then says why, led by the last
// failed renewal. It reports whether the lock was held until now, and the
// reason (as End does, and "" when it was not held).
func (f *Life) Lose(why string) (bool, string) {
	if !f.Held() {
		return f.End(true), ""
	}
	var parts []string
	if f.lastFail != nil {
		parts = append(parts, "the last renewal failed: "+strings.TrimPrefix(f.lastFail.Error(), "redlock: "))
	}
	if why != "" {
		parts = append(parts, why)
	}
	why = strings.Join(parts, "; ")
	if why != "" {
		f.lossErr = fmt.Errorf("%w: %s", ErrLost, why)
	}
	return f.End(true), why
}

// LoseIfExpired loses a held lock whose deadline is not after now, as Lose
// does with "validity ran out"; it reports whether it did, and the reason.
func (f *Life) LoseIfExpired(now time.Time) (bool, string) {
	if !f.Held() || now.Before(f.deadline) {
		return false, ""
	}
	return f.Lose("validity ran out")
}

// Confirmed records a renewal a quorum confirmed in time: the deadline
// moves to deadline, the timer with it (now is the current time).
func (f *Life) Confirmed(deadline, now time.Time) {
	f.deadline, f.lastFail = deadline, nil
	f.Rearm(now)
}

// Failed records a failed renewal with error err whose own deadline would
// have been deadline: the lock's deadline never moves later, only earlier.
func (f *Life) Failed(deadline, now time.Time, err error) {
	if deadline.Before(f.deadline) {
		f.deadline = deadline
		f.Rearm(now)
	}
	f.lastFail = err
}

// Rearm moves a held lock's timer, if it is watched, to fire at the
// deadline, which may have moved earlier.
func (f *Life) Rearm(now time.Time) {
	if f.Held() && f.watch != nil {
		f.watch.timer.Reset(f.deadline.Sub(now))
	}
}

// Done returns the watch's channel, closed once the lifetime ends; the watch
// is created on first use, its timer calling expire at the deadline.
func (f *Life) Done(now time.Time, expire func()) <-chan struct{} {
	return f.watched(now, expire).ctx.Done()
}

// watched returns the watch, creating it on first use.
func (f *Life) watched(now time.Time, expire func()) *watch {
	if f.watch != nil {
		return f.watch
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	w := &watch{ctx: ctx, cancel: cancel, children: map[int]context.CancelCauseFunc{}}
	w.timer = time.AfterFunc(f.deadline.Sub(now), expire)
	f.watch = w
	if !f.Held() {
		w.end(f.Cause())
	}
	return w
}

// Child registers cancel, a context's, to be called with the cause when the
// lifetime ends (creating the watch as Done does), and returns the function
// that unregisters it, to be called under the owner's mutex. When the
// lifetime has ended already it registers nothing and returns the cause.
func (f *Life) Child(now time.Time, expire func(), cancel context.CancelCauseFunc) (forget func(), ended error) {
	w := f.watched(now, expire)
	if w.ctx.Err() != nil {
		return nil, context.Cause(w.ctx)
	}
	id := w.next
	w.next++
	w.children[id] = cancel
	return func() { delete(w.children, id) }, nil
}

// Expired is the timer's check, when it fires at now: the lock is lost
// (true, and the reason) unless it ended already or its deadline moved
// later, where the timer is moved to it.
func (f *Life) Expired(now time.Time) (bool, string) {
	if !f.Held() {
		return false, ""
	}
	if left := f.deadline.Sub(now); left > 0 {
		f.watch.timer.Reset(left)
		return false, ""
	}
	return f.Lose("validity ran out")
}

// end cancels the watch and every context derived from it with cause.
func (w *watch) end(cause error) {
	w.timer.Stop()
	w.cancel(cause)
	for _, cancel := range w.children {
		cancel(cause)
	}
	w.children = nil
}
