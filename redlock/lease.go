package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/drift"
)

// lifetime is a Lock's validity and end, guarded by the Lock's mu; this
// file ends it (released or lost) and hands out its lease.
type lifetime struct {
	deadline time.Time // end of validity on the local monotonic clock
	released bool      // Release or Close ran
	lost     bool      // the lock was lost (sticky: a later release keeps it)
	lossErr  error     // why it was lost: ErrLockLost with the reason (nil: none given)
	lastFail error     // the last renewal's failure, since its last success (nil: none)
	lease    *lease    // created on first use of Done, Err or Context, or by auto-extension
}

// lease is the local view of a lock's validity: a context cancelled with
// ErrReleased or ErrLockLost as its cause, the cancel functions of the
// contexts handed out by Lock.Context (cancelled at the same moment, not by a
// goroutine later), and a timer that ends the lease at the deadline. It is
// created lazily, so locks nobody watches cost neither. Guarded by Lock.mu.
type lease struct {
	ctx      context.Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	children map[int]context.CancelCauseFunc
	next     int
}

// rearm moves the lease's timer to fire after d. Nil-safe.
func (ls *lease) rearm(d time.Duration) {
	if ls != nil {
		ls.timer.Reset(d)
	}
}

// end cancels the lease and every context derived from it with cause.
func (ls *lease) end(cause error) {
	ls.timer.Stop()
	ls.cancel(cause)
	for _, cancel := range ls.children {
		cancel(cause)
	}
	ls.children = nil
}

// cause is why a lock that is no longer held ended; l.mu must be held.
func (l *Lock) causeLocked() error {
	switch {
	case l.life.lost && l.life.lossErr != nil:
		return l.life.lossErr
	case l.life.lost:
		return ErrLockLost
	}
	return ErrReleased
}

// loseLocked ends a held lock as lost, as endLocked(true) does, for the
// reason why ("" when the last renewal's failure says it all): Err and the
// lease's cause then say why, led by the last failed renewal, which names
// the nodes that failed. It reports whether the lock was held until now, and
// the reason. l.mu must be held.
func (l *Lock) loseLocked(why string) (bool, string) {
	if l.life.released || l.life.lost {
		return l.endLocked(true), ""
	}
	var parts []string
	if l.life.lastFail != nil {
		parts = append(parts, "the last renewal failed: "+strings.TrimPrefix(l.life.lastFail.Error(), "redlock: "))
	}
	if why != "" {
		parts = append(parts, why)
	}
	why = strings.Join(parts, "; ")
	if why != "" {
		l.life.lossErr = fmt.Errorf("%w: %s", ErrLockLost, why)
	}
	return l.endLocked(true), why
}

// leaseLocked returns the lock's lease, creating it on first use; l.mu must
// be held.
func (l *Lock) leaseLocked() *lease {
	if l.life.lease != nil {
		return l.life.lease
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	ls := &lease{ctx: ctx, cancel: cancel, children: map[int]context.CancelCauseFunc{}}
	ls.timer = time.AfterFunc(l.deadlineLocked().Sub(l.cfg.Now()), l.expire)
	l.life.lease = ls
	if l.life.released || l.life.lost {
		ls.end(l.causeLocked())
	}
	return ls
}

// expire runs when the lease's timer fires: the lock is lost unless an
// extend moved the deadline meanwhile.
func (l *Lock) expire() {
	l.mu.Lock()
	if l.life.released || l.life.lost {
		l.mu.Unlock()
		return
	}
	if left := l.deadlineLocked().Sub(l.cfg.Now()); left > 0 {
		l.life.lease.rearm(left)
		l.mu.Unlock()
		return
	}
	_, why := l.loseLocked("validity ran out")
	l.mu.Unlock()
	l.c.lostLock(l, why)
}

// endLocked ends a held lock: lost (sticky: a later release keeps it lost)
// or released. It cancels the lease and its contexts with the matching
// cause, and forgets a lost lock in the Client (its keys expire with their
// TTL). It reports whether the lock was held until now. l.mu must be held.
func (l *Lock) endLocked(lost bool) bool {
	wasHeld := !l.life.released && !l.life.lost
	if lost {
		if l.life.released {
			return false
		}
		l.life.lost = true
	} else {
		l.life.released = true
	}
	if !wasHeld {
		return false
	}
	if l.life.lease != nil {
		l.life.lease.end(l.causeLocked())
	}
	if lost {
		l.c.untrack(l)
		l.c.unclaim(l.cfg, l.eachKey, l.id.token)
	}
	l.leaveSession()
	return true
}

// Done returns a channel closed once the lock is released or lost: its
// deadline passed unextended (a local timer: no node need answer),
// auto-extension gave up, or a quorum said the token is gone. Err says which.
func (l *Lock) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leaseLocked().ctx.Done()
}

// Err returns nil while the lock is held; once it was lost, an error matching
// ErrLockLost that says why (also after a later Release); after Release or
// Client.Close of a held lock, ErrReleased.
func (l *Lock) Err() error {
	l.mu.Lock()
	lostNow, why := false, ""
	if !l.life.released && !l.life.lost && !l.cfg.Now().Before(l.deadlineLocked()) {
		lostNow, why = l.loseLocked("validity ran out")
	}
	var err error
	if l.life.released || l.life.lost {
		err = l.causeLocked()
	}
	l.mu.Unlock()
	if lostNow {
		l.c.lostLock(l, why)
	}
	return err
}

// Context returns a context derived from parent and also cancelled when the
// lock is released or lost, with ErrReleased or ErrLockLost as its cause
// (context.Cause). Call cancel when done, as with context.WithCancel.
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	l.mu.Lock()
	ls := l.leaseLocked()
	if ls.ctx.Err() != nil {
		cause := context.Cause(ls.ctx)
		l.mu.Unlock()
		cancel(cause)
		return ctx, func() { cancel(context.Canceled) }
	}
	id := ls.next
	ls.next++
	ls.children[id] = cancel
	l.mu.Unlock()
	return ctx, func() {
		l.mu.Lock()
		delete(ls.children, id)
		l.mu.Unlock()
		cancel(context.Canceled)
	}
}

// declareLost marks a held lock lost and reports it.
func (l *Lock) declareLost(why string) {
	l.mu.Lock()
	lost, why := l.loseLocked(why)
	l.mu.Unlock()
	if lost {
		l.c.lostLock(l, why)
	}
}

// Do acquires key (waiting like Lock), runs fn with a context cancelled once
// the lock is released or lost (context.Cause says which), and releases it
// when fn returns or panics (re-panicking after); the lock is auto-extended
// unless opts say WithAutoExtend(false). It returns fn's error, matching
// ErrLockLost too if the lock was lost, joined with a failed release's; or,
// without calling fn, Lock's error, or one for a nil fn.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	return c.under(ctx, key, fn, func() (*Lock, error) {
		return c.Lock(ctx, key, append([]Option{WithAutoExtend(true)}, opts...)...)
	})
}

// under is Do with acquire for Lock: name is the key or keys, for errors.
func (c *Client) under(ctx context.Context, name string, fn func(ctx context.Context) error, acquire func() (*Lock, error)) (err error) {
	if fn == nil {
		return fmt.Errorf("redlock: Do %q: fn is nil; pass the function to run under the lock", name)
	}
	l, err := acquire()
	if err != nil {
		return err
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()
	panicked := true
	defer func() {
		lost := l.Err()
		rerr := l.Release(context.WithoutCancel(ctx))
		switch {
		case errors.Is(lost, ErrLockLost):
			err = errors.Join(err, fmt.Errorf("redlock: Do %q: the lock was lost while fn ran: %w", name, ErrLockLost))
		case rerr != nil:
			err = errors.Join(err, rerr)
		}
		if panicked {
			if p := recover(); p != nil {
				panic(p)
			}
		}
	}()
	err = fn(lctx)
	panicked = false
	return err
}

// deadlineLocked is the lock's deadline: l.life.deadline, which a session lock
// computes anew from its session while it is held. l.mu must be held.
func (l *Lock) deadlineLocked() time.Time {
	if l.kind.session && !l.life.released && !l.life.lost {
		l.life.deadline = l.sessionDeadlineLocked()
	}
	return l.life.deadline
}

// extended records an extend round's outcome while the op slot is held, so
// that no later Extend or Release comes in between: whether a quorum
// confirmed (won), whether so many nodes said the token is gone that none
// can (gone), and the round's error, made only when needed.
func (l *Lock) extended(ctx context.Context, won, gone bool, quorumErr func() *QuorumError, start time.Time, ttl time.Duration) error {
	cfg := l.cfg
	end := cfg.Now()
	deadline := drift.Deadline(start, ttl, cfg.DriftFactor)
	var err error
	var qe *QuorumError
	lostNow, why := false, ""
	l.mu.Lock()
	switch {
	case l.life.released:
		err = ErrReleased
	case l.life.lost: // the lease ran out during the round: it stays lost
		err = ErrLockLost
	case won && end.Before(deadline):
		l.life.deadline, l.life.lastFail = deadline, nil
		l.life.lease.rearm(deadline.Sub(cfg.Now()))
	default:
		if deadline.Before(l.life.deadline) {
			l.life.deadline = deadline
			l.life.lease.rearm(deadline.Sub(cfg.Now()))
		}
		qe = quorumErr()
		qe.Elapsed = end.Sub(start)
		if won {
			qe.Validity = deadline.Sub(end)
		}
		err, l.life.lastFail = qe, qe
		if gone || !end.Before(l.life.deadline) {
			lostNow, why = l.loseLocked("")
			err = fmt.Errorf("%w: %w", ErrLockLost, qe)
		}
		err = withCaller(ctx, err)
	}
	l.mu.Unlock()
	if lostNow {
		l.c.lostLock(l, why)
	}
	return err
}

// usable returns why the lock can no longer be used at now, if it cannot: it
// was released, lost, or its deadline passed (which marks it lost).
func (l *Lock) usable(now time.Time) error {
	l.mu.Lock()
	released, wasLost := l.life.released, l.life.lost
	deadline := l.deadlineLocked()
	lost, why := false, ""
	if !released && !wasLost && !now.Before(deadline) {
		lost, why = l.loseLocked("validity ran out")
	}
	l.mu.Unlock()
	if lost {
		l.c.lostLock(l, why)
	}
	switch {
	case released:
		return ErrReleased
	case wasLost:
		return ErrLockLost
	case lost:
		return fmt.Errorf("%w: its validity ended at %v", ErrLockLost, deadline.Format(time.RFC3339Nano))
	}
	return nil
}

// heldLocked reports whether the lock is neither released nor lost, and
// releasedLocked whether it was released; l.mu must be held.
func (l *Lock) heldLocked() bool     { return !l.life.released && !l.life.lost }
func (l *Lock) releasedLocked() bool { return l.life.released }

// rearmLocked moves a held lock's lease timer to its deadline, which may
// have moved earlier; l.mu must be held.
func (l *Lock) rearmLocked() {
	if l.heldLocked() {
		l.life.lease.rearm(l.deadlineLocked().Sub(l.cfg.Now()))
	}
}

// endForReleaseLocked marks the lock released, lost first (lost, why: to
// be reported) when its deadline has passed unnoticed: a lock is lost the
// same way whether or not its lease was watched. ErrReleased if it was
// released already. l.mu must be held.
func (l *Lock) endForReleaseLocked() (lost bool, why string, err error) {
	if l.life.released {
		return false, "", ErrReleased
	}
	if !l.life.lost && !l.cfg.Now().Before(l.deadlineLocked()) {
		lost, why = l.loseLocked("validity ran out")
	}
	l.endLocked(false)
	return lost, why, nil
}
