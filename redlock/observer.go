package redlock

import (
	"time"
)

// Event describes one step in a lock's life, for an Observer.
type Event struct {
	Key      string        // the lock's key, as the caller named it
	Token    string        // the lock's token
	Took     time.Duration // how long the step took (for Lost: 0)
	Deadline time.Time     // the lock's deadline after the step
	Err      error         // for ExtendFailed and Lost: why
}

// Observer is told about the life of every lock of a Client: for metrics,
// tracing or alerts. Its methods are called synchronously from the goroutine
// that did the step (the caller's, or one the Client runs: renewals, the
// lease's timer), so they must be quick, must not block, and must not call
// back into the Lock or Client (Extend, Release or Client.Close from an
// observer may deadlock). They may be called concurrently for different
// locks. Embed NopObserver to implement only some methods.
type Observer interface {
	Acquired(Event)     // a Lock or TryLock won its round
	Extended(Event)     // an automatic renewal of a lock renewed key by key succeeded (none for session locks: WithAutoExtend)
	ExtendFailed(Event) // such a renewal failed (none for session locks); it is retried while validity is left
	Lost(Event)         // the lock was lost: validity ran out, or the nodes said the token is gone
	Released(Event)     // Release (or Close) ran; Err is its error, if any
}

// NopObserver implements Observer with methods that do nothing; embed it to
// implement only the methods you need.
type NopObserver struct{}

func (NopObserver) Acquired(Event)     {}
func (NopObserver) Extended(Event)     {}
func (NopObserver) ExtendFailed(Event) {}
func (NopObserver) Lost(Event)         {}
func (NopObserver) Released(Event)     {}

var _ Observer = NopObserver{}

// event describes l now.
func (l *Lock) event(took time.Duration, err error) Event {
	return Event{Key: l.key, Token: l.token, Took: took, Deadline: l.Deadline(), Err: err}
}

// observe calls fn with the configured observer, if any.
func (c *Client) observe(cfg *config, fn func(Observer)) {
	if cfg.observer != nil {
		fn(cfg.observer)
	}
}

// lostLock handles a lock that was just lost: it reports it to the log and
// the observer, and deletes a session lock's key (releaseLost).
func (c *Client) lostLock(l *Lock, why string) {
	l.cfg.logger.Warn("redlock: lock lost", "key", l.key, "why", why)
	c.observe(l.cfg, func(o Observer) { o.Lost(l.event(0, ErrLockLost)) })
	c.releaseLost(l)
}
