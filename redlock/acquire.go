package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
)

// TryLock makes one attempt to acquire key and does not wait.
//
// It sends SET NX PX to every node in parallel and returns as soon as the
// outcome is certain: success once a quorum agreed (and validity is left),
// failure once too few nodes remain to reach one; no slow node delays the
// answer by more than the per-node timeout. On failure it removes its token,
// before returning, from every node that answered and may hold it (a second
// round, bounded by the per-node timeout too, on a context detached from
// ctx); nodes still in flight are cleaned up when they answer, and deletes
// that timed out are sent again, after TryLock has returned (Close waits
// for both). Nodes that answered "taken" or with an error reply cost no
// second round trip. On the first use of a Client, the nodes' identities
// are checked first (see New). Rounds of one Client for one key run one at a time (a TryLock first waits for the round in flight,
// which is bounded like its own): concurrent rounds would split the nodes'
// votes so that neither wins.
//
// Errors: a *QuorumError (matching ErrNotAcquired) when the lock is taken or
// too few nodes answered; an error matching both ErrNotAcquired and
// ctx.Err() when ctx ended first; ErrClosed after Close; a plain error for
// an empty key, invalid options or pools that reach the same server.
// TryLock is safe for concurrent use.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.callConfig("acquire", key, opts)
	if err != nil {
		return nil, err
	}
	return c.attempt(ctx, key, cfg)
}

// Lock acquires key, retrying after jittered, growing delays (see
// WithRetryBackoff) until it succeeds, ctx ends or the WithMaxWait budget is
// spent. When ctx ends, the error matches both ErrNotAcquired and ctx.Err()
// with errors.Is; when the budget is spent it matches ErrNotAcquired. Either
// way it carries the last attempt's *QuorumError for errors.As. Each attempt
// behaves like TryLock and leaves nothing behind when it fails. Lock is safe
// for concurrent use.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.callConfig("acquire", key, opts)
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	var timer *time.Timer
	var last error // the previous attempt's error
	var w *waiter  // registered for release notifications after a failed attempt
	var rkey string
	defer func() {
		if w != nil {
			c.notes.remove(rkey, w)
		}
	}()
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil && last != nil {
			return nil, fmt.Errorf("redlock: acquire %q: stopped after %d attempts: %w; last attempt: %w", key, attempt, err, last)
		}
		l, err := c.attempt(ctx, key, cfg)
		if err == nil || !errors.Is(err, ErrNotAcquired) {
			return l, err
		}
		if cerr := ctx.Err(); cerr != nil {
			if !errors.Is(err, cerr) { // ctx ended after the round was decided
				err = fmt.Errorf("%w: %w", err, cerr)
			}
			return nil, err
		}
		last = err
		delay := cfg.retryDelay(attempt)
		if cfg.maxWait > 0 {
			left := cfg.maxWait - time.Since(begin)
			if left <= 0 {
				return nil, fmt.Errorf("redlock: acquire %q: gave up after %d attempts in %v (WithMaxWait %v): %w", key, attempt+1, time.Since(begin).Round(time.Millisecond), cfg.maxWait, err)
			}
			delay = min(delay, left) // one last attempt when the budget ends
		}
		if w == nil {
			rkey = c.redisKey(cfg, key)
			w = c.notes.add(rkey)
		}
		if timer == nil {
			timer = time.NewTimer(delay)
			defer timer.Stop()
		} else {
			timer.Reset(delay)
		}
		c.notes.sleep(w, true)
		select {
		case <-timer.C:
			c.notes.sleep(w, false)
		case d := <-w.wake: // the key was released
			if d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-ctx.Done():
				}
			}
		case <-ctx.Done():
			c.notes.sleep(w, false)
		}
	}
}

// attempt is one acquisition round.
func (c *Client) attempt(ctx context.Context, key string, cfg *config) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock: acquire %q: not attempted: %w (%w)", key, err, ErrNotAcquired)
	}
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.wg.Done()
	if err := c.ids.check(ctx, c, cfg); err != nil {
		return nil, err
	}
	rkey := c.redisKey(cfg, key)
	if err := c.gates.enter(ctx, rkey); err != nil {
		return nil, fmt.Errorf("redlock: acquire %q: not attempted: waiting for this Client's round on the key: %w (%w)", key, err, ErrNotAcquired)
	}
	defer c.gates.exit(rkey)
	token, err := cfg.token()
	if err == nil && token == "" {
		err = errors.New("it returned an empty token")
	}
	if err != nil {
		return nil, fmt.Errorf("redlock: acquire %q: token generator: %w", key, err)
	}
	n, q := len(c.pools), cfg.quorumOf(len(c.pools))
	res := c.newResults()

	var fkey string // the fencing counter, only when fencing
	op := node.Op{Kind: node.Acquire, Key: rkey, Token: token, TTL: cfg.ttl}
	if cfg.fencing {
		fkey = rkey + ":fence"
		op.Kind, op.FenceKey = node.AcquireFenced, fkey
	}
	start := cfg.now()
	call := c.call
	var landed []chan struct{} // fencing: closed when node i's acquire call returned
	if cfg.fencing {
		// The write-back to a node must not overtake our SET there. A
		// Pool that queues (node.Sender) keeps a node's commands in order;
		// for the others, the write-back call waits for the acquire call.
		landed = make([]chan struct{}, n)
		for i := range landed {
			landed[i] = make(chan struct{})
		}
		call = func(ctx context.Context, i int, op *node.Op) node.Result {
			defer close(landed[i])
			return c.call(ctx, i, op)
		}
	}
	aop := node.New(op)
	r := quorum.Start(ctx, &c.wg, cfg.nodeTimeout, n, c.ids.ask(res), c.senders, aop, call)
	var fence uint64 // the highest counter among the nodes that agreed
	yes, no := 0, n-r.Pending()
	said := make([]bool, n) // nodes that answered yes
	for yes < q && n-no >= q {
		rep, ok := r.Next()
		if !ok {
			break
		}
		switch {
		case rep.Err != nil:
			res[rep.Node] = failed(rep.Node, c, rep.Err, rep.Latency)
			if mayHaveWritten(rep.Err) {
				// The SET may still land: clean up in the background, with
				// time for a slow node (see cleanupTimeout). Harmless if
				// the round is won: this node is not counted for the lock.
				c.releaseUnsure(cfg, rep.Node, rkey, token, rep.Err)
			}
			no++
		case rep.Int > 0:
			res[rep.Node] = NodeResult{Node: c.pools[rep.Node].Name(), Outcome: OutcomeOK, Latency: rep.Latency}
			said[rep.Node] = true
			if cfg.fencing {
				fence = max(fence, uint64(rep.Int))
			}
			yes++
		default:
			res[rep.Node] = NodeResult{Node: c.pools[rep.Node].Name(), Outcome: OutcomeTaken, Latency: rep.Latency}
			no++
		}
	}
	end := cfg.now()
	elapsed := end.Sub(start)
	markUnanswered(res, r.Err(), elapsed)

	validity := drift.Validity(cfg.ttl, elapsed, cfg.driftFactor)
	won := yes >= q && validity > 0
	var failure *QuorumError
	if won && cfg.fencing {
		// Write the maximum back to a quorum while we hold it, before
		// reporting success: the next holder's counters then exceed it.
		var rres []NodeResult
		rres, won = c.raiseFence(ctx, cfg, rkey, fkey, token, fence, q, landed)
		end = cfg.now()
		elapsed = end.Sub(start)
		if validity = drift.Validity(cfg.ttl, elapsed, cfg.driftFactor); won && validity <= 0 {
			won = false
		}
		if !won {
			failure = &QuorumError{Op: "acquire", Phase: "fence write-back", Key: key, Quorum: q, Nodes: rres, Elapsed: elapsed, Validity: validity}
		}
	}
	if won {
		l := &Lock{c: c, cfg: cfg, op: make(chan struct{}, 1), key: key, rkey: rkey, token: token, fence: fence, keyArg: aop.KeyArg, tokenArg: aop.TokenArg, acquired: start, deadline: drift.Deadline(start, cfg.ttl, cfg.driftFactor)}
		if c.track(l) {
			r.Finish(func(rep quorum.Reply) {
				if rep.Int > 0 || mayHaveWritten(rep.Err) {
					l.late(rep.Node)
				}
			})
			if cfg.autoExtend {
				l.extDone = make(chan struct{})
				done := l.Done()
				c.wg.Go(func() { l.autoExtend(done) })
			}
			if cfg.debug(ctx) {
				cfg.logger.Debug("redlock: acquired", "key", key, "took", elapsed, "deadline", l.deadline)
			}
			if cfg.observer != nil {
				cfg.observer.Acquired(l.event(elapsed, nil))
			}
			return l, nil
		}
		// Close began during the round and will not release this lock:
		// roll it back like a failed round.
	}

	// Failed: take our token back from every node that may hold it: now
	// from those that said yes; those still in flight when they answer.
	r.Finish(func(rep quorum.Reply) {
		if rep.Int > 0 || mayHaveWritten(rep.Err) {
			c.releaseUnsure(cfg, rep.Node, rkey, token, rep.Err)
		}
	})
	c.releaseAll(ctx, cfg, rkey, token, func(i int) bool { return said[i] })
	if won {
		return nil, ErrClosed
	}
	qe := failure
	if qe == nil {
		qe = &QuorumError{Op: "acquire", Key: key, Quorum: q, Nodes: res, Elapsed: elapsed}
		if yes >= q {
			qe.Validity = validity
		}
	}
	if err := callerErr(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", qe, err)
	}
	return nil, qe
}

// callerErr is ctx.Err() after a round that ctx may have ended: also
// context.DeadlineExceeded when ctx's deadline has passed but ctx has not
// noticed yet. A round ends at the caller's deadline on a timer of its own,
// which can fire just before the context's, and the error must still say
// that the caller's time ran out.
func callerErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// raiseFence runs the fencing write-back round: on every node, raise the
// counter to fence while the lock still holds token there (the nodes whose
// SET was still in flight at the decision count too, once it has landed: a
// node's write-back waits for its acquire call, closing landed[i]). It
// reports each node's outcome and whether a quorum q confirmed.
func (c *Client) raiseFence(ctx context.Context, cfg *config, rkey, fkey, token string, fence uint64, q int, landed []chan struct{}) ([]NodeResult, bool) {
	res := c.newResults()
	start := time.Now()
	op := node.New(node.Op{Kind: node.RaiseFence, Key: rkey, FenceKey: fkey, Token: token, Fence: fence})
	r := quorum.Start(ctx, &c.wg, cfg.nodeTimeout, len(c.pools), c.ids.ask(res), c.senders, op, func(ctx context.Context, i int, op *node.Op) node.Result {
		select {
		case <-landed[i]:
		case <-ctx.Done():
			return node.Result{Err: ctx.Err()}
		}
		return c.call(ctx, i, op)
	})
	yes, _ := c.count(r, res, q, nil)
	markUnanswered(res, r.Err(), time.Since(start))
	r.Finish(nil)
	return res, yes >= q
}

// mayHaveWritten reports whether a call that failed with err may still have
// changed the node: true unless the node itself answered with an error reply
// (READONLY, OOM, NOPERM, WRONGTYPE...), which Redis sends only for commands
// it did not run, or the command was never written (node.ErrNotSent).
func mayHaveWritten(err error) bool {
	if err == nil || errors.Is(err, node.ErrNotSent) {
		return false
	}
	var rerr redis.Error
	return !errors.As(err, &rerr)
}

// releaseAll releases rkey/token on every node for which which(i) holds, in
// parallel, on a context detached from ctx and bounded by the node timeout,
// and returns when all answered or the timeout passed. A delete that failed
// in a way that may not have reached the node (a timeout, a broken
// connection) is sent again in the background, with time for a slow node,
// as Release does.
func (c *Client) releaseAll(ctx context.Context, cfg *config, rkey, token string, which func(int) bool) {
	op := node.New(node.Op{Kind: node.Release, Key: rkey, Token: token})
	r := quorum.Start(context.WithoutCancel(ctx), &c.wg, cfg.nodeTimeout, len(c.pools), which, c.senders, op, c.call)
	logFailure := func(rep quorum.Reply) {
		switch {
		case rep.Err == nil:
		case mayHaveWritten(rep.Err):
			c.wg.Go(func() { c.releaseUnsure(cfg, rep.Node, rkey, token, rep.Err) })
		default:
			cfg.logger.Warn("redlock: roll-back failed; the key expires with its TTL", "pool", c.pools[rep.Node].Name(), "key", rkey, "err", rep.Err)
		}
	}
	for {
		rep, ok := r.Next()
		if !ok {
			break
		}
		logFailure(rep)
	}
	r.Finish(logFailure)
}

// releaseNode releases rkey/token on node i when it may hold them and no
// caller is waiting: after a reply that arrived after its round was decided,
// or a failure that may have run the command. It does not wait: the release
// is queued on the node's Pool (or runs on a goroutine for Pools that do not
// queue), bounded by cleanupTimeout, and counted in c.wg so that Close waits
// for it. The caller must hold a count on c.wg (an enter(), or a round's).
func (c *Client) releaseNode(cfg *config, i int, rkey, token string) {
	c.sendRelease(&background{c: c, cfg: cfg, rkey: rkey, token: token}, i)
}

// releaseUnsure is releaseNode after a call that failed with err (nil: it
// answered yes) and so may or may not have set the key. A command whose
// connection broke or timed out can still be on its way to the node (in a
// proxy, in the network) and land after a release sent on another
// connection: when that release finds nothing of ours, it is sent once more
// after recheckDelay, so that a late SET is not left until its TTL.
func (c *Client) releaseUnsure(cfg *config, i int, rkey, token string, err error) {
	bg := &background{c: c, cfg: cfg, rkey: rkey, token: token}
	if err != nil {
		bg.recheck = recheckDelay(cfg)
	}
	c.sendRelease(bg, i)
}

// recheckDelay is how long releaseUnsure waits before its second release:
// a command still in flight when its call failed arrives within one more
// one-way latency of the link, below the node timeout on any link the lock
// can work over; 100 ms at most, so that Close, which waits for it, is not
// held up by a long node timeout.
func recheckDelay(cfg *config) time.Duration {
	return min(cfg.nodeTimeout, 100*time.Millisecond)
}

// sendRelease queues bg's release on node i (see releaseNode).
func (c *Client) sendRelease(bg *background, i int) {
	cfg := bg.cfg
	op := node.New(node.Op{Kind: node.Release, Key: bg.rkey, Token: bg.token, Background: true})
	deadline := time.Now().Add(cleanupTimeout(cfg))
	c.wg.Add(1)
	if s := c.senders[i]; s != nil {
		s.Send(op, deadline, bg, i)
		return
	}
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		bg.Deliver(i, c.call(ctx, i, op))
	}()
}

// background receives the result of a release nobody waits for.
type background struct {
	c       *Client
	cfg     *config
	rkey    string
	token   string
	recheck time.Duration // > 0: if nothing was released, try again after it, once
}

func (b *background) Deliver(i int, r node.Result) {
	defer b.c.wg.Done()
	if r.Err == nil && r.Int == 0 && b.recheck > 0 {
		again := &background{c: b.c, cfg: b.cfg, rkey: b.rkey, token: b.token}
		b.c.wg.Add(1) // Close waits for the second release too
		time.AfterFunc(b.recheck, func() {
			defer b.c.wg.Done()
			b.c.sendRelease(again, i)
		})
		return
	}
	if r.Err != nil {
		b.cfg.logger.Warn("redlock: releasing a late reply failed; the key expires with its TTL", "pool", b.c.pools[i].Name(), "key", b.rkey, "err", r.Err)
	}
}

// cleanupTimeout bounds a release nobody waits for: longer than the node
// timeout, because the node it goes to was slow or failing, so that a node
// that is merely slow still gets it (after go-redis dropped the connection
// of a timed-out call, it must dial anew: connect, HELLO, the restart
// guard's INFO, EVALSHA and perhaps EVAL, up to five round trips); never
// longer than the TTL, after which the key is gone anyway. Close waits for
// these releases.
func cleanupTimeout(cfg *config) time.Duration {
	return min(cfg.ttl, max(10*cfg.nodeTimeout, 2*time.Second))
}

// newResults returns one NodeResult per pool, named and pending.
func (c *Client) newResults() []NodeResult {
	res := make([]NodeResult, len(c.pools))
	for i, p := range c.pools {
		res[i].Node = p.Name()
	}
	return res
}

// failed classifies a node's error as a timeout or an error.
func failed(i int, c *Client, err error, latency time.Duration) NodeResult {
	o := OutcomeError
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		o = OutcomeTimeout
	}
	return NodeResult{Node: c.pools[i].Name(), Outcome: o, Err: err, Latency: latency}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// markUnanswered sets the outcome of nodes still pending when the round ended:
// timeout when its deadline passed, error when the caller's context was
// cancelled; nodes merely not needed stay pending.
func markUnanswered(res []NodeResult, roundErr error, elapsed time.Duration) {
	for i := range res {
		if res[i].Outcome != OutcomePending {
			continue
		}
		switch {
		case errors.Is(roundErr, context.DeadlineExceeded):
			res[i].Outcome, res[i].Err, res[i].Latency = OutcomeTimeout, roundErr, elapsed
		case roundErr != nil:
			res[i].Outcome, res[i].Err = OutcomeError, roundErr
		}
	}
}
