package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/drift"
)

// A Lock's lifetime (internal/lease keeps it, under l.mu): this file hands
// out its watchers (Done, Err, Context), ends it when its timer fires, and
// records renewals' outcomes in it. lock.go ends it on release or loss.

// expire runs when the lease's timer fires: the lock is lost unless an
// extend moved the deadline meanwhile.
func (l *Lock) expire() {
	l.mu.Lock()
	l.deadlineLocked() // a session lock's, from its session
	lost, why := l.lostLocked(l.life.Expired(l.cfg.Now()))
	l.mu.Unlock()
	if lost {
		l.c.lostLock(l, why)
	}
}

// Done returns a channel closed once the lock is released or lost: its
// deadline passed unextended (a local timer: no node need answer),
// auto-extension gave up, or a quorum said the token is gone. Err says which.
func (l *Lock) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadlineLocked() // a session lock's, from its session: the timer's
	return l.life.Done(l.cfg.Now(), l.expire)
}

// Err returns nil while the lock is held; once it was lost, an error matching
// ErrLockLost that says why (also after a later Release); after Release or
// Client.Close of a held lock, ErrReleased.
func (l *Lock) Err() error {
	l.mu.Lock()
	l.deadlineLocked() // a session lock's, from its session
	lost, why := l.lostLocked(l.life.LoseIfExpired(l.cfg.Now()))
	var err error
	if !l.life.Held() {
		err = l.life.Cause()
	}
	l.mu.Unlock()
	if lost {
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
	l.deadlineLocked() // a session lock's, from its session: the timer's
	forget, ended := l.life.Child(l.cfg.Now(), l.expire, cancel)
	l.mu.Unlock()
	if ended != nil {
		cancel(ended)
		return ctx, func() { cancel(context.Canceled) }
	}
	return ctx, func() {
		l.mu.Lock()
		forget()
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

// extended records an extend round's outcome while the op slot is held, so
// that no later Extend or Release comes in between: whether a quorum
// confirmed (won), whether so many nodes said the token is gone that none
// can (gone), and the round's error, made only when needed.
func (l *Lock) extended(ctx context.Context, won, gone bool, quorumErr func() *QuorumError, start time.Time, ttl time.Duration) error {
	cfg := l.cfg
	end := cfg.Now()
	deadline := drift.Deadline(start, ttl, cfg.DriftFactor)
	var err error
	lostNow, why := false, ""
	l.mu.Lock()
	switch {
	case l.life.Released():
		err = ErrReleased
	case l.life.Lost(): // the lease ran out during the round: it stays lost
		err = ErrLockLost
	case won && end.Before(deadline):
		l.life.Confirmed(deadline, cfg.Now())
	default:
		qe := quorumErr()
		qe.Elapsed = end.Sub(start)
		if won {
			qe.Validity = deadline.Sub(end)
		}
		l.life.Failed(deadline, cfg.Now(), qe)
		err = qe
		if gone || !end.Before(l.life.Deadline()) {
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
	released, wasLost := l.life.Released(), l.life.Lost()
	deadline := l.deadlineLocked()
	lost, why := l.lostLocked(l.life.LoseIfExpired(now))
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
