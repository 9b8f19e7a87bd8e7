package redlock

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/conf"
)

// Event describes one step in a lock's life, for an Observer.
type Event struct {
	Key      string        // the lock's key, as the caller named it (a semaphore's name)
	Token    string        // the lock's token ("" for Contended and AcquireFailed)
	Took     time.Duration // how long the step's round took (for Lost: 0)
	Deadline time.Time     // the lock's deadline after the step, or the last it had (Released, Lost); zero for Contended and AcquireFailed
	Err      error         // for Contended, AcquireFailed, ExtendFailed and Lost: why; for Released: its error

	// Context is the context of the call the step belongs to (TryLock,
	// Lock, Release, ...), for its values (a trace's span, say); nil for
	// steps the Client takes on its own (renewals, Lost).
	Context context.Context

	// Call, Waited and Attempts describe the acquiring call, for
	// Acquired, Contended and AcquireFailed: Call is the same for every
	// event of one call and distinct across the calls of a process (0 for
	// other events, and for a Resume's Acquired); Waited is the time since
	// the call began; Attempts the acquisition rounds it has run (a
	// semaphore runs one per permit it tries).
	Call     uint64
	Waited   time.Duration
	Attempts int

	// Quorum and Nodes describe the round the step reports: for
	// Acquired, Contended and Released, the step's own; for AcquireFailed,
	// the call's last round unless a Contended event reported it already
	// (the call's ctx ended or its budget ran out while it waited) or no
	// round ran (bad state, ctx ended first). Quorum is the nodes needed;
	// Nodes is every node's outcome and latency, in the order of the Pools
	// given to New, nil when the event reports no round, and for Extended,
	// ExtendFailed and Lost. So every acquisition round of a lock is
	// reported by exactly one event with Nodes (of a semaphore's sweep
	// through its permits, only the last round). The slice is the event's
	// own.
	Quorum int
	Nodes  []NodeResult
}

// Agreed is the number of nodes in Nodes that did what was asked
// (OutcomeOK).
func (e Event) Agreed() int {
	n := 0
	for _, r := range e.Nodes {
		if r.Outcome == OutcomeOK {
			n++
		}
	}
	return n
}

// Degraded reports whether a node of the round did other than asked: failed,
// timed out, was not asked, or held another token (OutcomePending does not
// count). A lock won while degraded is as safe, with fewer nodes to spare.
func (e Event) Degraded() bool {
	for _, r := range e.Nodes {
		if r.Outcome != OutcomeOK && r.Outcome != OutcomePending {
			return true
		}
	}
	return false
}

// Unavailable reports whether Err says too few nodes answered for a quorum
// (ErrUnavailable), rather than that the key is taken.
func (e Event) Unavailable() bool { return errors.Is(e.Err, ErrUnavailable) }

// Observer is told about the life of every lock of a Client. Every acquiring
// call (TryLock, Lock, Do, their All forms, Campaign, a Semaphore's) that
// passed its argument checks ends in exactly one Acquired or AcquireFailed
// (a permit met with another count is given back unreported); a successful
// Resume is an Acquired, a failed one unreported. Methods run synchronously
// on the step's goroutine, concurrently for different locks: they must be
// quick, not block, and not call into the Lock or Client (it may deadlock).
// Embed NopObserver to implement only some methods, and those added later.
type Observer interface {
	Acquired(Event)      // a TryLock, Lock or other acquiring call won its round
	Contended(Event)     // a round of a waiting call (Lock, Acquire, Campaign, ...) failed; it waits to try again (ctx or WithMaxWait may end the wait first)
	AcquireFailed(Event) // an acquiring call returns an error: taken, unavailable, ctx ended, budget spent
	Extended(Event)      // an automatic renewal of the lock succeeded (a session lock's: its session's, once a quorum confirmed it)
	ExtendFailed(Event)  // such a renewal failed; it is retried while validity is left
	Lost(Event)          // the lock was lost: validity ran out, or the nodes said the token is gone
	Released(Event)      // Release (or Close) ran; Err is its error, if any
}

// NopObserver implements Observer with methods that do nothing; embed it to
// implement only the methods you need.
type NopObserver struct{}

func (NopObserver) Acquired(Event)      {}
func (NopObserver) Contended(Event)     {}
func (NopObserver) AcquireFailed(Event) {}
func (NopObserver) Extended(Event)      {}
func (NopObserver) ExtendFailed(Event)  {}
func (NopObserver) Lost(Event)          {}
func (NopObserver) Released(Event)      {}

var _ Observer = NopObserver{}

// event describes l now.
func (l *Lock) event(took time.Duration, err error) Event {
	return Event{Key: l.id.key, Token: l.id.token, Took: took, Deadline: l.Deadline(), Err: err}
}

// withRound adds rd's quorum and per-node outcomes to e.
func (e Event) withRound(rd *round) Event {
	e.Quorum, e.Nodes = rd.q, slices.Clone(rd.res)
	return e
}

// call is one acquiring call (TryLock, Lock, TryAcquire, ...) as observers
// see it. Owned by the call's goroutine.
type call struct {
	id       uint64 // Event.Call
	ctx      context.Context
	key      string
	begin    time.Time
	attempts int // rounds begun
	reported int // rounds a Contended event reported
}

// newCall starts a call of key, or returns nil when cfg has no observer.
func newCall(ctx context.Context, cfg *conf.Config, key string) *call {
	if cfg.Observer == nil {
		return nil
	}
	return &call{id: callIDs.Add(1), ctx: ctx, key: key, begin: time.Now()}
}

// callIDs numbers the acquiring calls observers see.
var callIDs atomic.Uint64

// callFailed tells cfg's observer, if any, that an attempt of cl failed with
// err: the call returns err (final) or waits and tries again.
func (c *Client) callFailed(cfg *conf.Config, cl *call, err error, final bool) {
	if cl == nil || err == nil {
		return
	}
	e := Event{Key: cl.key, Err: err, Context: cl.ctx, Call: cl.id, Waited: time.Since(cl.begin), Attempts: cl.attempts}
	var qe *QuorumError
	if cl.attempts > cl.reported && errors.As(err, &qe) { // a round no event reported yet
		e.Took, e.Quorum, e.Nodes = qe.Elapsed, qe.Quorum, slices.Clone(qe.Nodes)
	}
	cl.reported = cl.attempts
	if final {
		observerOf(cfg).AcquireFailed(e)
	} else {
		observerOf(cfg).Contended(e)
	}
}

// observerOf is cfg's Observer (WithObserver), nil when none.
func observerOf(cfg *conf.Config) Observer {
	o, _ := cfg.Observer.(Observer)
	return o
}

// observe calls fn with the configured observer, if any.
func (c *Client) observe(cfg *conf.Config, fn func(Observer)) {
	if cfg.Observer != nil {
		fn(observerOf(cfg))
	}
}

// lostLock handles a lock that was just lost: it reports it (reportLost)
// and deletes a session lock's key (releaseLost).
func (c *Client) lostLock(l *Lock, why string) {
	c.reportLost(l, why)
	c.releaseLost(l)
}

// reportLost tells the log and the observer that l was just lost.
func (c *Client) reportLost(l *Lock, why string) {
	l.cfg.Logger.Warn("redlock: lock lost", "key", l.id.key, "why", why)
	c.observe(l.cfg, func(o Observer) { o.Lost(l.event(0, ErrLockLost)) })
}
