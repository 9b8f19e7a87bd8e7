package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/drift"
)

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
	if l.lost {
		return ErrLockLost
	}
	return ErrReleased
}

// leaseLocked returns the lock's lease, creating it on first use; l.mu must
// be held.
func (l *Lock) leaseLocked() *lease {
	if l.lease != nil {
		return l.lease
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	ls := &lease{ctx: ctx, cancel: cancel, children: map[int]context.CancelCauseFunc{}}
	ls.timer = time.AfterFunc(l.deadline.Sub(l.cfg.now()), l.expire)
	l.lease = ls
	if l.released || l.lost {
		ls.end(l.causeLocked())
	}
	return ls
}

// expire runs when the lease's timer fires: the lock is lost unless an
// extend moved the deadline meanwhile.
func (l *Lock) expire() {
	l.mu.Lock()
	if l.released || l.lost {
		l.mu.Unlock()
		return
	}
	if left := l.deadline.Sub(l.cfg.now()); left > 0 {
		l.lease.rearm(left)
		l.mu.Unlock()
		return
	}
	l.endLocked(true)
	l.mu.Unlock()
	l.c.observeLost(l, "validity ran out")
}

// endLocked ends a held lock: lost (sticky: a later release keeps it lost)
// or released. It cancels the lease and its contexts with the matching
// cause, and forgets a lost lock in the Client (its keys expire with their
// TTL). It reports whether the lock was held until now. l.mu must be held.
func (l *Lock) endLocked(lost bool) bool {
	wasHeld := !l.released && !l.lost
	if lost {
		if l.released {
			return false
		}
		l.lost = true
	} else {
		l.released = true
	}
	if !wasHeld {
		return false
	}
	if l.lease != nil {
		l.lease.end(l.causeLocked())
	}
	if lost {
		l.c.untrack(l)
	}
	return true
}

// Done returns a channel that is closed once the lock is released or lost:
// its deadline passed without a successful extend (a local timer: it fires
// even when no Redis node can be reached), a quorum said the token is gone,
// or auto-extension gave up. Err tells which. Safe for concurrent use.
func (l *Lock) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leaseLocked().ctx.Done()
}

// Err returns nil while the lock is held, ErrLockLost once it was lost (also
// when it was released afterwards), and ErrReleased after Release (or
// Client.Close) of a lock that was held. Safe for concurrent use.
func (l *Lock) Err() error {
	l.mu.Lock()
	lostNow := !l.released && !l.lost && !l.cfg.now().Before(l.deadline) && l.endLocked(true)
	var err error
	if l.released || l.lost {
		err = l.causeLocked()
	}
	l.mu.Unlock()
	if lostNow {
		l.c.observeLost(l, "validity ran out")
	}
	return err
}

// Context returns a context derived from parent that is also cancelled, at
// the moment the lock is released or lost, with ErrReleased or ErrLockLost
// as its cause (context.Cause). Work done under the lock should use it, so
// that it stops as soon as the lock is gone. Call cancel when done with the
// context, as with context.WithCancel. Safe for concurrent use.
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

// autoExtend renews the lock every cfg.renewInterval() until it is released or
// lost, or the maximum hold time is reached. A failed renewal is retried
// while the lock is valid; once no renewal can finish before the deadline,
// the lock is declared lost. It runs on a goroutine counted in the Client's
// WaitGroup and closes l.extDone when it exits.
func (l *Lock) autoExtend(done <-chan struct{}) {
	defer close(l.extDone)
	cfg := l.cfg
	t := time.NewTimer(l.nextRenewal())
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		now := cfg.now()
		if left := l.Deadline().Sub(now); left <= cfg.nodeTimeout {
			l.declareLost(fmt.Sprintf("%v of validity left, less than the node timeout: no renewal can be confirmed in time", left))
			return
		}
		ttl := cfg.ttl
		if cfg.maxHold > 0 {
			remaining := l.acquired.Add(cfg.maxHold).Sub(now)
			if drift.Check(remaining, cfg.driftFactor, cfg.nodeTimeout) != nil {
				cfg.logger.Warn("redlock: maximum hold time reached; the lock is left to expire", "key", l.key, "max_hold", cfg.maxHold)
				return // the lease timer marks it lost at its deadline
			}
			ttl = min(ttl, remaining) // never renewed past acquisition + maxHold
			if !drift.Deadline(now, ttl, cfg.driftFactor).After(l.Deadline()) {
				return // no renewal can move the deadline any later
			}
		}
		err := l.Extend(context.Background(), ttl)
		switch {
		case err == nil:
			l.c.observe(cfg, func(o Observer) { o.Extended(l.event(cfg.now().Sub(now), nil)) })
			t.Reset(l.nextRenewal())
			continue
		case errors.Is(err, ErrReleased), errors.Is(err, ErrClosed):
			return
		}
		l.c.observe(cfg, func(o Observer) { o.ExtendFailed(l.event(cfg.now().Sub(now), err)) })
		cfg.logger.Warn("redlock: renewal failed", "key", l.key, "err", err)
		if errors.Is(err, ErrLockLost) {
			return // Extend has marked it lost and told the observer
		}
		// Retry halfway to the last moment a renewal can still be
		// confirmed, but not sooner than a quarter node timeout from now;
		// the check at the top declares the loss once it is too late.
		left := l.Deadline().Sub(cfg.now())
		t.Reset(min(cfg.renewInterval(), max((left-cfg.nodeTimeout)/2, cfg.nodeTimeout/4)))
	}
}

// nextRenewal is the wait before the next renewal: the renewal interval, but
// never so long that a renewal started then could not be confirmed (one node
// timeout) with a node timeout to spare before the deadline, and never less
// than a quarter node timeout.
func (l *Lock) nextRenewal() time.Duration {
	cfg := l.cfg
	return max(cfg.nodeTimeout/4, min(cfg.renewInterval(), l.Deadline().Sub(cfg.now())-2*cfg.nodeTimeout))
}

// declareLost marks a held lock lost and reports it.
func (l *Lock) declareLost(why string) {
	l.mu.Lock()
	lost := l.endLocked(true)
	l.mu.Unlock()
	if lost {
		l.c.observeLost(l, why)
	}
}

// Do acquires key (waiting like Lock), runs fn with a context that is
// cancelled as soon as the lock is released or lost (context.Cause tells
// which), and releases the lock when fn returns or panics; after a panic it
// panics again with the same value once the lock is released. The lock is
// auto-extended while fn runs, unless opts say WithAutoExtend(false).
//
// Do returns fn's error. If the lock was lost while fn ran, the error also
// matches ErrLockLost; if the release failed, its error is joined to fn's,
// never in its place. It returns Lock's error without calling fn when the
// lock is not acquired, and an error for a nil fn. Safe for concurrent use.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if fn == nil {
		return fmt.Errorf("redlock: Do %q: fn is nil; pass the function to run under the lock", key)
	}
	l, err := c.Lock(ctx, key, append([]Option{WithAutoExtend(true)}, opts...)...)
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
			err = errors.Join(err, fmt.Errorf("redlock: Do %q: the lock was lost while fn ran: %w", key, ErrLockLost))
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
