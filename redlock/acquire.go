package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
	"github.com/quorumlock/quorumlock/internal/session"
	"github.com/quorumlock/quorumlock/internal/tokens"
	"github.com/quorumlock/quorumlock/internal/wake"
)

// TryLock makes one attempt to acquire key, without waiting for it to be
// free; on success the Lock is held on a quorum of nodes until its Deadline.
// It waits for nodes as WithNodeTimeout states, after this Client's attempt
// in flight on key, if any. The error matches ErrNotAcquired when the key is
// taken, too few nodes answered or no validity was left (errors.As finds a
// *QuorumError), and ctx.Err() too if ctx ended first; it is ErrClosed once
// Close has begun, and a plain error for an empty key, an invalid option
// (both before any I/O) or a failing token generator.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.acquireConfig(key, opts)
	if err != nil {
		return nil, err
	}
	t := c.one(cfg, key)
	return c.asCall(ctx, cfg, key, func(cl *call) (*Lock, error) { return c.try(ctx, t, cfg, nil, cl) })
}

// asCall runs one acquiring call of key with cfg through run (one attempt,
// or Lock's loop) as the Observer's call record: its Contended events, and
// AcquireFailed when it fails.
func (c *Client) asCall(ctx context.Context, cfg *conf.Config, key string, run func(cl *call) (*Lock, error)) (*Lock, error) {
	cl := newCall(ctx, cfg, key)
	l, err := run(cl)
	c.callFailed(cfg, cl, err, true)
	return l, err
}

// try is one attempt: one round for t, or t's own sweep.
func (c *Client) try(ctx context.Context, t *target, cfg *conf.Config, ln *wake.Place, cl *call) (*Lock, error) {
	if t.sweep != nil {
		return t.sweep(ctx, cfg, cl)
	}
	return c.attempt(ctx, t, cfg, ln, cl)
}

// attempt is one acquisition round for t, of the waiter ln when it is not
// nil.
func (c *Client) attempt(ctx context.Context, t *target, cfg *conf.Config, ln *wake.Place, cl *call) (*Lock, error) {
	key := t.key
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock: acquire %q: not attempted: %w (%w)", key, err, ErrNotAcquired)
	}
	if err := c.enterRound(ctx, cfg); err != nil {
		return nil, err
	}
	defer c.wg.Done()
	if err := t.enter(ctx, &c.gates); err != nil {
		return nil, fmt.Errorf("redlock: acquire %q: not attempted: waiting for this Client's round on the key: %w (%w)", key, err, ErrNotAcquired)
	}
	defer t.exit(&c.gates)
	if cl != nil {
		cl.attempts++
	}
	v, err := c.vote(ctx, cfg, t, c.sessionFor(cfg), ln)
	if err != nil {
		return nil, fmt.Errorf("redlock: acquire %q: %w", key, err)
	}
	v.call = cl
	if v.won && v.kind.fenced {
		v.writeBack(ctx, c, cfg, key)
	}
	if v.won {
		if l := c.newLock(ctx, v.kind.observed(cfg, v), key, v); l != nil {
			return l, nil
		}
		// Close began during the round and will not release this lock:
		// roll it back like a failed round.
	}
	return nil, c.lose(ctx, cfg, t, v)
}

// lose takes back what the attempt v for t may have taken, and returns its
// error: ErrClosed for a round won as Close began, else its QuorumError
// (with the caller's error when ctx ended).
func (c *Client) lose(ctx context.Context, cfg *conf.Config, t *target, v *acquisition) error {
	c.unclaim(cfg, t.each, v.rd.op.Token)
	ended := callerErr(ctx) // before the roll-back, which may outlast the caller's deadline
	c.rollback(ctx, cfg, v.rd, v.said)
	for i, u := range v.unsure { // their SET may land yet
		if u {
			c.releaseUnsure(cfg, i, refOf(v.rd.op), errUnknownFate)
		}
	}
	if v.won {
		return ErrClosed
	}
	qe := v.failure
	if qe == nil {
		qe = v.rd.quorumError(t.key)
		qe.Elapsed = v.elapsed
		if v.rd.won() {
			qe.Validity = v.validity
		}
	}
	if ended != nil {
		qe.cut = true // the caller's deadline, not the nodes, may have ended it
		return fmt.Errorf("%w: %w", qe, ended)
	}
	return qe
}

// acquisition is the state of one acquisition round.
type acquisition struct {
	rd       *round
	kind     *kind     // of the lock it acquires
	start    time.Time // T1, on cfg's clock
	elapsed  time.Duration
	validity time.Duration
	said     []bool  // nodes that answered yes
	askv     [8]bool // the write-back's nodes, for up to 8
	fence    uint64  // the highest counter among them
	won      bool
	failure  *QuorumError     // the write-back's, when it failed
	landed   []chan struct{}  // fencing over Pools that do not queue: closed when node i's acquire call returned
	sess     *session.Session // a session lock's session, else nil
	gens     []uint64         // per node that said yes: the session's generation there
	refused  bool             // a node said "taken", or failed in a way that may have run the script
	lineLen  int              // the longest line of waiters a node that said "taken" reported
	waiter   string           // the Lock call's name in the key's line ("": a TryLock)
	inLine   bool             // the waiter may be in the line on some node
	keys     []string         // a lock of several keys: the caller's keys (nil: one key)
	permit   *permitTry       // a semaphore's permit: the attempt at it (nil: none)
	unsure   []bool           // nodes whose call failed in a way that may still set the key (nil: none)
	call     *call            // the acquiring call, for the observer (nil: none)
}

// vote runs the SET round for t with a new token (of session s, when not
// nil), as waiter ln's (when not nil), and decides it: won when a quorum
// said yes and validity is left. A node whose call failed in a way that may
// still have set the key is released in the background at once (it does
// not count for the lock). The error is the token generator's, or the
// claim's (attemptToken).
func (c *Client) vote(ctx context.Context, cfg *conf.Config, t *target, s *session.Session, ln *wake.Place) (*acquisition, error) {
	token, err := c.attemptToken(cfg, t, s)
	if err != nil {
		return nil, err
	}
	k := kindOf(cfg, t, s)
	o := node.Op{Key: t.rkey, Token: token, TTL: cfg.TTL}
	a := &acquisition{start: cfg.Now(), said: make([]bool, len(c.pools)), kind: k, keys: t.keys, permit: t.permit}
	k.acquireArgs(cfg, t, s, &o)
	if k == kindSession {
		a.sess, a.gens = s, make([]uint64, len(c.pools))
	}
	call := c.call
	if k.fenced {
		o.FenceKey = c.fenceKey(cfg, t.rkey)
		call = a.noteLanded(c)
	}
	if ln != nil {
		ln.Fill(&o, cfg.LineTTL())
	}
	a.rd = c.run(ctx, cfg, send{spec: k.acquire, o: o, call: call})
	a.rd.settle(a)
	a.won = a.timed(cfg) > 0 && a.rd.won()
	if ln != nil {
		ln.Joined = ln.Joined || !a.won || a.refused
		ln.Seen = a.lineLen
		a.waiter, a.inLine = ln.ID, ln.Joined
	}
	return a, nil
}

// attemptToken returns the token of an attempt for t under cfg: session
// s's (when not nil), else cfg's generator's, checked, with cfg's metadata.
// A token the caller's generator made is claimed on every key of t (the
// library's and sessions' tokens never repeat: nothing to claim); when one
// of them is claimed already, the error matches ErrNotAcquired.
func (c *Client) attemptToken(cfg *conf.Config, t *target, s *session.Session) (string, error) {
	var sess string
	if s != nil {
		sess = s.Token()
	}
	token, err := tokens.Make(cfg.Token, sess, cfg.Metadata)
	if err != nil {
		return "", fmt.Errorf("token generator: %w", err)
	}
	if cfg.CustomToken && !c.claims.Claim(t.each, token) {
		return "", fmt.Errorf("the token generator returned %q, which a Lock of this Client holds on the key, or an attempt under way may take: a second holder of one token (tokens must be unique, see WithTokenGenerator): %w", token, ErrNotAcquired)
	}
	return token, nil
}

// timed records the time a took since its start and the validity that
// leaves (the TTL less that time and the drift allowance), and returns
// the validity.
func (a *acquisition) timed(cfg *conf.Config) time.Duration {
	a.elapsed = cfg.Now().Sub(a.start)
	a.validity = drift.Validity(cfg.TTL, a.elapsed, cfg.DriftFactor)
	return a.validity
}

// vote notes a yes, and a node whose call failed in a way that may still
// set the key: it does not count for the round, and it is released once
// the round is decided, in the background if the round failed, by the
// lock's Release if it was won. (Released at once, the node could take
// the key meanwhile, count for an extend of the lock, and then lose it to
// the background release: the lock below its quorum while held.)
func (a *acquisition) vote(rep quorum.Reply, yes bool) {
	if a.kind.permit {
		a.permit.saw(rep)
	}
	switch {
	case yes:
		a.said[rep.Node] = true
		a.fence = max(a.fence, uint64(rep.Int))
		if a.kind.session {
			a.gens[rep.Node] = a.sess.Accepted(rep.Node, rep.Int, a.start)
		}
	case node.MayHaveWritten(rep.Err):
		if a.unsure == nil {
			a.unsure = make([]bool, len(a.said))
		}
		a.unsure[rep.Node] = true
		a.refused = true
	case rep.Err == nil:
		a.refused = true // taken: a waiter joined the line there
		if !a.kind.permit {
			a.lineLen = max(a.lineLen, int(-rep.Int))
		}
	}
}

// noteLanded returns c.call, noting in a.landed when each node's call has
// returned: the write-back to a node must not overtake its SET. (A Pool that
// queues runs a node's commands in order.)
func (a *acquisition) noteLanded(c *Client) quorum.Call {
	a.landed = make([]chan struct{}, len(c.pools))
	for i := range a.landed {
		a.landed[i] = make(chan struct{})
	}
	return func(ctx context.Context, i int, op *node.Op) node.Result {
		defer close(a.landed[i])
		return c.call(ctx, i, op)
	}
}

// writeBack raises the fencing counter to the maximum on the nodes that said
// yes or have not answered yet, while we hold the lock there, and keeps the
// acquisition won only if a quorum confirmed with validity left: the next
// holder's counters then exceed ours.
func (a *acquisition) writeBack(ctx context.Context, c *Client, cfg *conf.Config, key string) {
	op := a.rd.op
	o := node.Op{Key: op.Key, Keys: op.Keys, FenceKey: op.FenceKey, Token: op.Token, Fence: a.fence, KeyArg: op.KeyArg, TokenArg: op.TokenArg}
	ask := a.askv[:0]
	for i := range a.said {
		ask = append(ask, a.said[i] || a.rd.out[i])
	}
	afterLanded := func(ctx context.Context, i int, op *node.Op) node.Result {
		select {
		case <-a.landed[i]:
		case <-ctx.Done():
			return node.Result{Err: ctx.Err()}
		}
		return c.call(ctx, i, op)
	}
	rd := c.run(ctx, cfg, send{spec: opRaise, o: o, ask: ask, call: afterLanded})
	rd.settle(nil)
	rd.finish(nil)
	a.won = a.timed(cfg) > 0 && rd.won()
	if !a.won {
		a.failure = rd.quorumError(key)
		a.failure.Phase, a.failure.Elapsed, a.failure.Validity, a.failure.TTL = "fence write-back", a.elapsed, a.validity, cfg.TTL
	}
}

// rollback takes a failed round's token back: at once from the nodes that
// said yes (their SET has landed), in parallel, bounded by the node timeout;
// from the nodes still in flight when their reply arrives (late). It
// returns when the nodes that said yes answered or the timeout passed.
func (c *Client) rollback(ctx context.Context, cfg *conf.Config, rd *round, said []bool) {
	ref := refOf(rd.op)
	rkey := ref.rkey
	rd.finish(func(rep quorum.Reply) {
		if rep.Int > 0 || node.MayHaveWritten(rep.Err) {
			c.releaseUnsure(cfg, rep.Node, ref, rep.Err)
		}
		if rep.Int > 0 && rd.op.Waiter != "" {
			c.notes.SplitLate(rkey, rd.op.Waiter, cfg.Jitter(cfg.HandGrace()))
		}
	})
	rel := c.run(context.WithoutCancel(ctx), cfg, send{spec: ref.spec, o: node.Op{Key: rkey, Keys: ref.keys, Token: ref.token, KeyArg: rd.op.KeyArg, TokenArg: rd.op.TokenArg, Grace: c.grace(cfg)}, ask: said})
	retry := func(rep quorum.Reply) {
		switch {
		case rep.Err == nil:
		case node.Refused(rep.Err): // sent again, it would be refused again; the key expires with its TTL
			c.health.Failed(rep.Node, rep.Err)
		default:
			// Of unknown fate, or never written (no connection, queued
			// past its deadline): the node said yes, so the key was there,
			// and an answer that finds nothing means the first delete ran.
			c.releaseUnsure(cfg, rep.Node, ref, errDeleteFailed)
		}
	}
	for {
		rep, ok := rel.r.Next()
		if !ok {
			break
		}
		retry(rep)
	}
	rel.finish(retry)
}
