package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
)

// Lock is a lock acquired on a quorum of nodes: the handle through which it
// is extended, checked and released. It is safe for concurrent use by many
// goroutines: Extend and Release are serialised (never two at once on one
// Lock), the other methods never block on them.
type Lock struct {
	c     *Client
	cfg   *config
	key   string // as the caller named it
	rkey  string // the Redis key
	token string
	fence uint64 // 0 without fencing

	// op serialises Extend and Release: a one-slot semaphore rather than a
	// mutex, because it is held across I/O and a goroutine waiting on a
	// channel is durably blocked for testing/synctest, unlike one on a mutex.
	op chan struct{}

	mu       sync.Mutex
	deadline time.Time // end of validity on the local monotonic clock
	released bool      // Release or Close ran
	lost     bool      // the lock was lost (sticky: a later release keeps it)
	acquired time.Time // start of the acquiring round
	lease    *lease    // created on first use of Done, Err or Context, or by auto-extension

	// keyArg and tokenArg are rkey and token boxed as command arguments
	// by the acquiring round, reused by the release; rel is the release's
	// Op (a Lock is released once).
	keyArg, tokenArg any
	rel              node.Op
	// relQueued: the release was queued on every node (all Pools are
	// node.Senders), behind the acquiring round's commands; guarded by mu.
	relQueued bool

	// extDone is closed when the auto-extender has exited; nil without one.
	// Set before the Lock is returned and never changed: read without mu.
	extDone chan struct{}
}

// Key returns the lock's key as passed to Lock or TryLock (without prefix).
func (l *Lock) Key() string { return l.key }

// Token returns the random value that marks this lock on the nodes.
func (l *Lock) Token() string { return l.token }

// Fence returns the lock's fencing token (WithFencing): a number that is
// strictly greater than that of every earlier holder of the key, so that a
// resource which remembers the highest token it has seen can refuse writes
// from a holder whose lock has since passed to someone else. It is 0 for
// locks acquired without fencing. Safe for concurrent use.
func (l *Lock) Fence() uint64 { return l.fence }

// Deadline returns the end of the lock's validity on the local clock: the
// start of the round that acquired or last extended it, plus the TTL, less
// the drift allowance. Do not act under the lock at or after this instant.
// The result carries a monotonic clock reading: compare it with time.Now,
// not with times from other machines.
func (l *Lock) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Extend sets the lock's TTL to ttl on every node where it still holds the
// lock (0 means the TTL it was acquired with) and, if a quorum confirms in
// time, moves the deadline to the extend's own start + ttl − drift allowance.
//
// It never re-creates a key that has expired. It returns ErrReleased after
// Release; ErrLockLost, without any I/O, once the deadline has passed, and
// after a quorum of nodes said they no longer hold the token; a
// *QuorumError matching ErrNotHeld when the quorum was not reached for
// another reason. When ctx ended before a quorum confirmed, the error also
// matches ctx.Err() (the lock is not lost for that). After a failed extend
// the deadline never moves later (it may move earlier when ttl is shorter
// than what was left), because some nodes may have taken the new TTL.
// Extend is safe for concurrent use; concurrent calls run one after the
// other, and a call starts only once every node has answered the one
// before (or timed out).
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	cfg := l.cfg
	if ttl == 0 {
		ttl = cfg.ttl
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("redlock: extend %q: TTL %v must be at least 1ms (0 means the lock's TTL)", l.key, ttl)
	}
	ttl = ttl.Truncate(time.Millisecond)
	if err := drift.Check(ttl, cfg.driftFactor, cfg.nodeTimeout); err != nil {
		return fmt.Errorf("redlock: extend %q: %w", l.key, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redlock: extend %q: not attempted: %w", l.key, err)
	}
	select { // one Extend or Release at a time, stragglers included
	case l.op <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("redlock: extend %q: waiting for the previous extend: %w", l.key, ctx.Err())
	}
	holdOp := true
	defer func() {
		if holdOp {
			<-l.op
		}
	}()
	start := cfg.now()
	if err := l.usable(start); err != nil {
		return err
	}
	if err := l.c.enter(); err != nil {
		return err
	}
	defer l.c.wg.Done()
	if err := l.c.ids.check(ctx, l.c, cfg); err != nil {
		return err
	}

	c := l.c
	n, q := len(c.pools), cfg.quorumOf(len(c.pools))
	res := c.newResults()
	op := node.New(node.Op{Kind: node.Extend, Key: l.rkey, Token: l.token, TTL: ttl})
	r := quorum.Start(ctx, &c.wg, cfg.nodeTimeout, n, c.ids.ask(res), c.senders, op, c.call)
	yes, notHeld := c.count(r, res, q, nil)
	end := cfg.now()
	elapsed := end.Sub(start)
	markUnanswered(res, r.Err(), elapsed)
	deadline := drift.Deadline(start, ttl, cfg.driftFactor)
	qe := &QuorumError{Op: "extend", Key: l.key, Quorum: q, Nodes: res, Elapsed: elapsed}
	if yes >= q {
		qe.Validity = deadline.Sub(end)
	}

	// Record the outcome while still holding the op slot, so that no later
	// Extend or Release can come in between.
	var err error
	lostNow := false
	l.mu.Lock()
	switch {
	case l.released:
		err = ErrReleased
	case l.lost: // the lease ran out during the round: it stays lost
		err = ErrLockLost
	case yes >= q && end.Before(deadline):
		l.deadline = deadline
		l.lease.rearm(deadline.Sub(cfg.now()))
	default:
		if deadline.Before(l.deadline) {
			l.deadline = deadline
			l.lease.rearm(deadline.Sub(cfg.now()))
		}
		err = qe
		if notHeld > n-q || !end.Before(l.deadline) {
			lostNow = l.endLocked(true)
			err = fmt.Errorf("%w: %w", ErrLockLost, qe)
		}
		if cerr := callerErr(ctx); cerr != nil { // the caller stopped waiting
			err = fmt.Errorf("%w: %w", err, cerr)
		}
	}
	l.mu.Unlock()
	if lostNow {
		l.c.observeLost(l, qe.Error())
	}
	// Return at quorum, but let the next Extend or Release start only after
	// this round's stragglers have answered: a late PEXPIRE with a shorter
	// TTL landing after a later extend would shorten a node it counted.
	holdOp = false
	r.FinishThen(nil, func() { <-l.op })
	return err
}

// count runs the voting loop of an extend, release or held round: a reply
// for which isYes holds (nil: Int == 1) confirms our token, another means
// the node does not hold it. It reads
// replies until the outcome is settled: a quorum confirmed, more than n − q
// nodes said "not held" (the lock is gone for sure), or neither can happen
// any more (too many nodes failed).
func (c *Client) count(r *quorum.Round, res []NodeResult, q int, isYes func(quorum.Reply) bool) (yes, notHeld int) {
	n, pending := len(res), r.Pending()
	for pending > 0 && yes < q && notHeld <= n-q && (yes+pending >= q || notHeld+pending > n-q) {
		rep, ok := r.Next()
		if !ok {
			break
		}
		pending--
		switch {
		case rep.Err != nil:
			res[rep.Node] = failed(rep.Node, c, rep.Err, rep.Latency)
		case isYes == nil && rep.Int == 1 || isYes != nil && isYes(rep):
			res[rep.Node] = NodeResult{Node: res[rep.Node].Node, Outcome: OutcomeOK, Latency: rep.Latency}
			yes++
		default:
			res[rep.Node] = NodeResult{Node: res[rep.Node].Node, Outcome: OutcomeNotHeld, Latency: rep.Latency}
			notHeld++
		}
	}
	return yes, notHeld
}

// usable returns why the lock can no longer be used at now, if it cannot: it
// was released, lost, or its deadline passed (which marks it lost).
func (l *Lock) usable(now time.Time) error {
	l.mu.Lock()
	released, wasLost := l.released, l.lost
	lost := !released && !wasLost && !now.Before(l.deadline) && l.endLocked(true)
	deadline := l.deadline
	l.mu.Unlock()
	if lost {
		l.c.observeLost(l, "validity ran out")
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

// Release deletes the lock's token from every node (a token-checked delete:
// a key that holds another token is never touched) and marks the handle
// released, whatever the outcome.
//
// It returns nil once a quorum confirmed the delete; ErrReleased if the
// handle was already released (by Release or Client.Close); a *QuorumError
// matching ErrNotHeld when a quorum did not confirm, because the lock had
// expired, another client holds it now, or nodes failed (their copies expire
// with the TTL). Release detaches from ctx's cancellation, so a deferred
// Release still runs after ctx ended; the per-node timeout bounds its round,
// after it has waited for a running Extend (and that Extend's slowest node)
// and for the auto-extender to stop. It is safe for concurrent use; only one
// call releases, the others get ErrReleased. While Client.Close runs it may
// return ErrClosed: Close releases the lock itself.
func (l *Lock) Release(ctx context.Context) error {
	err := l.release(ctx)
	if l.extDone != nil {
		<-l.extDone // the auto-extender stops once the lease ends
	}
	return err
}

func (l *Lock) release(ctx context.Context) error {
	l.op <- struct{}{} // one Extend or Release at a time
	defer func() { <-l.op }()
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return ErrReleased
	}
	if err := l.c.enter(); err != nil {
		return err // Close releases every lock it tracks
	}
	defer l.c.wg.Done()
	return l.releaseLocked(ctx)
}

// releaseLocked releases the lock; l.op and an enter() count (or Close's
// share of the WaitGroup) must be held.
func (l *Lock) releaseLocked(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return ErrReleased
	}
	l.endLocked(false) // from here on, late replies release themselves
	l.mu.Unlock()
	c := l.c
	c.untrack(l)

	cfg := l.cfg
	n, q := len(c.pools), cfg.quorumOf(len(c.pools))
	res := c.newResults()
	start := time.Now()
	l.rel = node.Op{Kind: node.Release, Key: l.rkey, Token: l.token, KeyArg: l.keyArg, TokenArg: l.tokenArg}
	l.rel.Build()
	r := quorum.Start(context.WithoutCancel(ctx), &c.wg, cfg.nodeTimeout, n, nil, c.senders, &l.rel, c.call)
	if c.queued {
		l.mu.Lock()
		l.relQueued = true
		l.mu.Unlock()
		// Each node runs its queued commands in order: a waiter's SET
		// sent now lands behind our delete, so it may try at once.
		c.notes.released(l.rkey, l.token)
	}
	yes, _ := c.count(r, res, q, nil)
	if yes >= q && !c.queued {
		c.notes.released(l.rkey, l.token) // a waiter of this Client tries now
	}
	roundErr := r.Err() // before Finish ends the round
	// A delete that failed in a way that may not have reached the node is
	// sent again in the background, with time for a slow node.
	retry := func(i int, err error) {
		if mayHaveWritten(err) {
			c.releaseNode(cfg, i, l.rkey, l.token)
		}
	}
	for i := range res {
		if res[i].Outcome == OutcomeError || res[i].Outcome == OutcomeTimeout {
			retry(i, res[i].Err)
		}
	}
	r.Finish(func(rep quorum.Reply) { retry(rep.Node, rep.Err) })
	var err error
	if yes < q {
		markUnanswered(res, roundErr, time.Since(start))
		err = &QuorumError{Op: "release", Key: l.key, Quorum: q, Nodes: res, Elapsed: time.Since(start)}
	}
	if cfg.debug(ctx) {
		cfg.logger.Debug("redlock: released", "key", l.key, "took", time.Since(start), "err", err)
	}
	if cfg.observer != nil {
		cfg.observer.Released(l.event(time.Since(start), err))
	}
	return err
}

// late handles a reply to the acquiring round that arrived after the round
// was won: the node may hold our token. If the lock is still held, Release
// will reach that node like every other; if it was already released or
// lost, the node is released now, unless the release was queued on the
// node after the acquiring command (all Pools are node.Senders): the node
// runs it after the SET.
func (l *Lock) late(i int) {
	l.mu.Lock()
	held := !l.released && !l.lost
	queued := l.relQueued
	l.mu.Unlock()
	if !held && !queued {
		l.c.releaseNode(l.cfg, i, l.rkey, l.token)
	}
}

// Held reports whether the lock is still held: its deadline has not passed
// and a quorum of nodes hold its token. It returns false and a nil error
// when the handle was released, the deadline passed, or enough nodes say
// they hold another token or none (the lock is then marked lost: Done
// closes); false and a *QuorumError when too few nodes answered to tell
// (also matching ctx.Err() when ctx ended before they did). It changes
// nothing on the nodes and is safe for concurrent use.
func (l *Lock) Held(ctx context.Context) (bool, error) {
	if l.usable(l.cfg.now()) != nil {
		return false, nil
	}
	c := l.c
	if err := c.enter(); err != nil {
		return false, err
	}
	defer c.wg.Done()
	cfg := l.cfg
	if err := c.ids.check(ctx, c, cfg); err != nil {
		return false, err
	}
	n, q := len(c.pools), cfg.quorumOf(len(c.pools))
	res := c.newResults()
	start := time.Now()
	op := node.New(node.Op{Kind: node.Get, Key: l.rkey})
	r := quorum.Start(ctx, &c.wg, cfg.nodeTimeout, n, c.ids.ask(res), c.senders, op, c.call)
	yes, notHeld := c.count(r, res, q, func(rep quorum.Reply) bool { return rep.Str == l.token })
	roundErr := r.Err() // before Finish ends the round
	r.Finish(nil)
	switch {
	case yes >= q:
		return l.usable(l.cfg.now()) == nil, nil
	case notHeld > n-q: // the token is gone from too many nodes: lost
		l.mu.Lock()
		lost := l.endLocked(true)
		l.mu.Unlock()
		if lost {
			l.c.observeLost(l, "a quorum of nodes no longer hold the token")
		}
		return false, nil
	}
	markUnanswered(res, roundErr, time.Since(start))
	qe := &QuorumError{Op: "held", Key: l.key, Quorum: q, Nodes: res, Elapsed: time.Since(start)}
	if err := callerErr(ctx); err != nil { // the caller stopped waiting
		return false, fmt.Errorf("%w: %w", qe, err)
	}
	return false, qe
}

// track registers a new lock for Close; it fails once Close has begun (Close
// has taken its list of locks to release by then).
func (c *Client) track(l *Lock) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.held[l] = struct{}{}
	return true
}

func (c *Client) untrack(l *Lock) {
	c.mu.Lock()
	delete(c.held, l)
	c.mu.Unlock()
}
