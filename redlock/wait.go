package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/internal/bugs"
	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/wake"
)

// Lock's wait: its attempts, and the sleeps between them, which a release
// of the key cuts short (docs/design.md, "Waiting"); and Do, which runs a
// function under a lock it waited for.

// Lock acquires key like TryLock, retrying (WithRetryBackoff; a release of
// key wakes it) until it succeeds, ctx ends or the WithMaxWait budget is
// spent. With Pools of package pool that are not Cluster clients, waiters
// get key in the order they first asked, across Clients, before later
// askers. When ctx ends the error matches ErrNotAcquired and ctx.Err(), when
// the budget is spent ErrNotAcquired, with the last round's *QuorumError if
// one ran; TryLock's other errors, and ErrAuth, return at once.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.acquireConfig(key, opts)
	if err != nil {
		return nil, err
	}
	return c.wait(ctx, c.one(cfg, key), cfg)
}

// wait is Lock's loop, for the key or keys t names: waiters of one key keep
// their place in its line, where the nodes keep lines; waiters of several
// keys never wait in a line (docs/design.md, "Several keys").
func (c *Client) wait(ctx context.Context, t *target, cfg *conf.Config) (*Lock, error) {
	return c.asCall(ctx, cfg, t.key, func(cl *call) (*Lock, error) { return c.waitFor(ctx, t, cfg, cl) })
}

// waitFor is wait's loop, as the call cl.
func (c *Client) waitFor(ctx context.Context, t *target, cfg *conf.Config, cl *call) (*Lock, error) {
	key := t.key
	begin := time.Now()
	s := newSleeper(c, cfg, t)
	if c.handoff && s.k.line {
		s.ln = c.names.Next()
	}
	defer s.stop()
	var last error // the previous attempt's error
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil && last != nil {
			return nil, fmt.Errorf("redlock: acquire %q: stopped after %d attempts: %w; last attempt: %w", key, attempt, err, last)
		}
		l, err := c.try(ctx, t, cfg, s.ln, cl)
		if err == nil || !errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrAuth) {
			s.won = err == nil
			return l, err
		}
		if cerr := ctx.Err(); cerr != nil {
			if !errors.Is(err, cerr) { // ctx ended after the round was decided
				err = fmt.Errorf("%w: %w", err, cerr)
			}
			var qe *QuorumError
			if last != nil && (!errors.As(err, &qe) || qe.cut) { // no round ran (the gate), or ctx cut it: keep the last one's detail
				err = fmt.Errorf("%w; last attempt: %w", err, last)
			}
			return nil, err
		}
		last = err
		delay := s.delay(attempt, err)
		if cfg.RetryWait != nil { // an election's candidate: its leader may have died
			delay = cfg.RetryWait(ctx, cfg, key, delay)
		}
		if cfg.MaxWait > 0 {
			left := cfg.MaxWait - time.Since(begin)
			if left <= 0 {
				return nil, fmt.Errorf("redlock: acquire %q: gave up after %d attempts in %v (WithMaxWait %v): %w", key, attempt+1, time.Since(begin).Round(time.Millisecond), cfg.MaxWait, err)
			}
			delay = min(delay, left) // one last attempt when the budget ends
		}
		c.callFailed(cfg, cl, err, false)
		s.sleep(ctx, delay)
	}
}

// delay is the wait before the attempt after attempt, which failed with
// err.
func (s *sleeper) delay(attempt int, err error) time.Duration {
	var qe *QuorumError
	if errors.As(err, &qe) && qe.Agreed() > 0 {
		s.c.notes.Stats.SplitAttempts.Add(1)
		s.splits++
		if d := s.splitDelay(); d > 0 {
			return s.cfg.Jitter(d)
		}
	}
	switch {
	case s.c.handoff && s.woken:
		// Woken by a release and still not the holder: some nodes had
		// not released yet (their messages wake it again) or handed the
		// key to a waiter that is not coming. The hand-offs lapse within
		// Config.HandGrace: try again by then, whatever the retry delays.
		return s.cfg.Jitter(s.cfg.HandGrace())
	case s.woken:
		return s.cfg.RetryDelay(0)
	case s.ln != nil && s.ln.Joined:
		// In the line, a release names this waiter when its turn
		// comes: polling only covers lost messages, and keeps its
		// entry from lapsing (Config.LineTTL).
		return s.cfg.Jitter(s.cfg.RetryMax)
	}
	return s.cfg.RetryDelay(attempt)
}

// splitDelay is the wait after the call's s.splits-th attempt that some
// nodes said yes to, where the nodes keep lines: the votes split (another
// attempt took the other nodes, or they were handed to other waiters),
// both sides roll back, and no release may come to wake anyone (a yes that
// comes late wakes the waiter the same way: SplitLate). Waiters that split
// are in the line only on the nodes that told them "taken", so releases
// hand the key to each of them on too few nodes to wake either. The wait
// is Config.HandGrace, doubled at each split: a lock held on a bare quorum splits
// every attempt, and after about log2(retry max / Config.HandGrace) of them the
// waiter is back to its polling (0: poll).
func (s *sleeper) splitDelay() time.Duration {
	if !s.c.handoff {
		return 0
	}
	if bugs.SplitOnce {
		return s.splitOnce()
	}
	d := s.cfg.HandGrace()
	for range s.splits - 1 {
		if d >= s.cfg.RetryMax {
			return 0
		}
		d *= 2
	}
	if d >= s.cfg.RetryMax {
		return 0
	}
	return d
}

// sleeper is Lock's wait between attempts: a timer, cut short when a release
// of the key (of any of the keys) wakes the waiter it registers after the
// first failed attempt.
type sleeper struct {
	c      *Client
	cfg    *conf.Config
	t      target      // the key or keys waited for (a copy: the caller's stays on its stack)
	k      *kind       // of the lock waited for (a session's are plain ones here)
	ln     *wake.Place // the waiter's place in the key's line, when the Client keeps lines
	won    bool
	woken  bool      // the last sleep was cut short by a release
	splits int       // the call's attempts that split the nodes' votes
	quick  time.Time // quorumlock_bug_splitonce: its last quick retry
	w      *wake.Waiter
	timer  *time.Timer
}

// newSleeper is the sleeper of a Lock call for t under cfg.
func newSleeper(c *Client, cfg *conf.Config, t *target) *sleeper {
	return &sleeper{c: c, cfg: cfg, t: *t, k: kindOf(cfg, t, nil)}
}

// sleep waits for delay, a release of the key, or ctx's end.
func (s *sleeper) sleep(ctx context.Context, delay time.Duration) {
	if s.w == nil {
		id := ""
		if s.ln != nil {
			id = s.ln.ID
		}
		s.w = s.c.notes.Add(s.t.first(), id, s.k.shared)
		s.t.each(func(rkey string) {
			if rkey != s.t.first() {
				s.c.notes.Also(rkey, s.w)
			}
		})
	}
	if s.timer == nil {
		s.timer = time.NewTimer(delay)
	} else {
		s.timer.Reset(delay)
	}
	s.c.notes.Rest(s.t.first(), s.w, s.ln)
	s.woken = false
	select {
	case <-s.timer.C:
		s.c.notes.Sleep(s.w, false)
	case d := <-s.w.Wake(): // the key was released
		s.woken = true
		if d > 0 { // after d, unless another wake-up comes sooner
			s.timer.Reset(d)
			select {
			case <-s.timer.C:
			case <-s.w.Wake():
			case <-ctx.Done():
			}
		}
	case <-ctx.Done():
		s.c.notes.Sleep(s.w, false)
	}
}

// stop leaves the notifier and stops the timer. A waiter that did not take
// the lock leaves the key's line; one that did leaves it with its release.
func (s *sleeper) stop() {
	if s.w != nil {
		s.t.each(func(rkey string) { s.c.notes.Remove(rkey, s.w) })
	}
	if ln := s.ln; ln != nil && ln.Joined && !s.won {
		s.c.leaveLine(s.cfg, s.t.rkey, ln.ID, true, nil, true)
	}
	if s.timer != nil {
		s.timer.Stop()
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
