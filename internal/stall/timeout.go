package stall

import (
	"context"
	"sync"
	"time"
)

// WithTimeout returns a copy of parent that ends d from now, not counting
// the time the process stands still meanwhile: its Deadline is that
// moment moved later by the stand-still so far (Extend), and Done closes,
// with Err context.DeadlineExceeded, only once that has passed (at once
// for d <= 0). It ends with parent too. A context derived from it reports
// its timeout as context.Canceled, with context.Cause DeadlineExceeded.
// The clock is held until cancel is called, which must be; cancel may be
// called more than once, from any goroutine. For a wait whose bound must
// not pass only because this process could not look, where go-redis or
// another library reads the context's Done.
func WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	Hold()
	inner, cancel := context.WithCancelCause(parent)
	c := &timeoutCtx{Context: inner, at: time.Now().Add(d), mark: Now()}
	if d <= 0 {
		cancel(context.DeadlineExceeded)
	}
	c.mu.Lock() // the timer may fire before it is stored
	c.timer = time.AfterFunc(d, func() { c.fire(cancel) })
	c.mu.Unlock()
	var once sync.Once
	return c, func() {
		once.Do(func() {
			c.mu.Lock()
			c.stopped = true // a fire under way sets no timer again
			c.timer.Stop()
			c.mu.Unlock()
			cancel(context.Canceled)
			Done()
		})
	}
}

// fire ends the context with context.DeadlineExceeded, or, if the process
// stood still since it began, sets the timer again for the rest.
func (c *timeoutCtx) fire(cancel context.CancelCauseFunc) {
	if rest := time.Until(c.end()); rest > 0 {
		c.mu.Lock()
		if !c.stopped {
			c.timer.Reset(rest)
		}
		c.mu.Unlock()
		return
	}
	cancel(context.DeadlineExceeded)
}

// timeoutCtx is WithTimeout's context: inner, cancelled by its timer once
// at, moved by the stand-still since mark, has passed.
type timeoutCtx struct {
	context.Context
	at   time.Time
	mark time.Duration

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool // cancel was called
}

func (c *timeoutCtx) end() time.Time { return Extend(c.at, c.mark) }

// Deadline is the earlier of the parent's and end.
func (c *timeoutCtx) Deadline() (time.Time, bool) {
	end := c.end()
	if p, ok := c.Context.Deadline(); ok && p.Before(end) {
		return p, true
	}
	return end, true
}

// Err reports the timeout as context.DeadlineExceeded, as a context from
// context.WithTimeout does.
func (c *timeoutCtx) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}
