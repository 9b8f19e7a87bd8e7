package redlock

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/bugs"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
)

// Releases nobody waits for: the roll-back of a failed round, and every node
// that may hold a token we no longer want (a reply that arrived after its
// round was decided, a call whose fate stayed unknown). They are counted in
// the Client's WaitGroup, so Close waits for them, and bounded by
// cleanupTimeout.

// rollback takes a failed round's token back: at once from the nodes that
// said yes (their SET has landed), in parallel, bounded by the node timeout;
// from the nodes still in flight when their reply arrives (late). It
// returns when the nodes that said yes answered or the timeout passed.
func (c *Client) rollback(ctx context.Context, cfg *config, rd *round, said []bool) {
	ref := refOf(rd.op)
	rkey := ref.rkey
	rd.finish(func(rep quorum.Reply) {
		if rep.Int > 0 || node.MayHaveWritten(rep.Err) {
			c.releaseUnsure(cfg, rep.Node, ref, rep.Err)
		}
		if rep.Int > 0 && rd.op.Waiter != "" {
			c.notes.SplitLate(rkey, rd.op.Waiter, cfg.jitter(handGrace(cfg)))
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

// ref is what a release takes back from the nodes: a token on a key, on
// several keys, or a shared holder's place.
type ref struct {
	rkey  string
	keys  []any // a lock of several keys: all of them (rkey is the first); else nil
	token string
	spec  *opSpec // the release
}

// refOf is what the acquire command op may have taken.
func refOf(op *node.Op) ref {
	k := kindAcquiredBy(op)
	r := ref{rkey: op.Key, token: op.Token, spec: k.release}
	if k.allKeys {
		r.keys = op.Keys
	}
	return r
}

// ref is what the lock holds.
func (l *Lock) ref() ref {
	return ref{rkey: l.id.rkey, keys: l.id.keyArgs, token: l.id.token, spec: l.kind.release}
}

// releaseUnsure releases r on node i when it may hold it and no caller is
// waiting: after a yes that arrived after its round was decided, or for a
// lock that was lost (err nil), or after a call that failed with err. It
// does not wait: the release is queued on the node's Pool (or runs on a
// goroutine for Pools that do not queue), bounded by cleanupTimeout, and
// counted in c.wg so that Close waits for it; the caller must hold a count
// on c.wg. Until recheckHorizon from now, it is sent again after
// recheckDelay, doubling up to maxRecheck, as long as it fails without the
// node's refusal (it may never have been written) and, when err is not nil
// (the acquire whose fate err left unknown may still land: held in a
// proxy, in a frozen server's socket), also while it finds nothing of
// ours. A caller that saw the acquire's yes and sends a delete again
// because an earlier one failed passes errDeleteFailed: it is sent again
// until the node answers, and an answer that finds nothing ends it (the
// earlier delete ran; a key once gone cannot come back).
func (c *Client) releaseUnsure(cfg *config, i int, r ref, err error) {
	bg := &background{c: c, cfg: cfg, ref: r, unsure: err != nil && err != errDeleteFailed}
	if err != nil || !bugs.LateDrop {
		bg.again = resend{wait: recheckDelay(cfg), horizon: time.Now().Add(c.recheckHorizon(cfg))}
	}
	c.sendRelease(bg, i)
}

// errDeleteFailed stands for a delete that failed (no reply, or never
// written) on a node whose acquire's yes was seen (see releaseUnsure).
var errDeleteFailed = errors.New("the delete failed on a node that said yes")

// recheckDelay is the first wait before a release is sent again: a command
// still in flight when its call failed arrives within one more one-way
// latency of the link, below the node timeout on any link the lock can work
// over; 100 ms at most.
func recheckDelay(cfg *config) time.Duration {
	return min(cfg.nodeTimeout, 100*time.Millisecond)
}

// maxRecheck is the longest wait between two re-sends.
const maxRecheck = time.Second

// recheckHorizon is how long a release of unknown fate is re-sent: a SET
// that lands within it is gone within maxRecheck (docs/design.md, the
// leftover bound); one that lands later lives its TTL. A session lock's
// acquire that lands is held while its session lives, up to its key's own
// TTL: its releases are re-sent for that long.
func (c *Client) recheckHorizon(cfg *config) time.Duration {
	if c.sessionLocks(cfg) {
		return keyTTL(cfg) + cleanupTimeout(cfg)
	}
	return cfg.ttl + cleanupTimeout(cfg)
}

// ownWork is the context whose values the commands the Client sends on its
// own carry (background releases, leaving lines): none of a caller's, whose
// context may be recycled once its call returned (pool.WithHooks). Its one
// value marks them for tests.
var ownWork = context.WithValue(context.Background(), ownWorkKey{}, true)

type ownWorkKey struct{}

// sendRelease queues bg's release on node i (see releaseUnsure).
func (c *Client) sendRelease(bg *background, i int) {
	cfg := bg.cfg
	c.sendOwn(node.Op{Kind: bg.spec.kind, Key: bg.rkey, Keys: bg.keys, Token: bg.token, Grace: c.grace(cfg)}, c.bgDeadline(cfg), i, bg)
}

// sendOwn sends o, a command the Client sends on its own (nobody waits for
// its reply: a background release, a waiter leaving a line, a session's
// renewal), to node i, bounded by deadline; rcv gets its result, and must
// call c.wg.Done once it has (the command is counted in c.wg, so that Close
// waits for it). It goes through the node's queue, or, for a Pool that has
// none, a call on a goroutine. The caller must hold a count on c.wg.
func (c *Client) sendOwn(o node.Op, deadline time.Time, i int, rcv node.Receiver) {
	o.Background, o.Values = true, ownWork
	op := node.New(o)
	c.wg.Add(1)
	if s := c.senders[i]; s != nil {
		s.Send(op, deadline, rcv, i)
		return
	}
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		rcv.Deliver(i, c.call(ctx, i, op))
	}()
}

// resend is how a command the Client sends on its own is sent again while
// it fails: after wait (0: never), then twice as long each time up to
// maxRecheck, until horizon.
type resend struct {
	wait    time.Duration
	horizon time.Time
}

// sendAgain schedules send, with the policy for the time after that, to run
// after rs's wait, and reports whether it did: false when rs allows no more
// re-sends. Once Close has begun, send runs at once, one last time.
func (c *Client) sendAgain(rs resend, send func(next resend)) bool {
	wait := min(rs.wait, time.Until(rs.horizon))
	if rs.wait <= 0 || wait <= 0 {
		return false
	}
	next := resend{wait: min(2*rs.wait, maxRecheck), horizon: rs.horizon}
	if !c.rechecks.after(&c.wg, wait, func() { send(next) }) {
		send(resend{}) // Close has begun: once more, now, and no more
	}
	return true
}

// background receives the result of a release nobody waits for.
type background struct {
	c   *Client
	cfg *config
	ref
	again  resend // if the release failed, or found nothing while unsure
	unsure bool   // the node's fate is unknown: a release that finds nothing is sent again
}

func (b *background) Deliver(i int, r node.Result) {
	defer b.c.wg.Done()
	again := b.unsure && r.Err == nil && r.Int == 0 || r.Err != nil && !node.Refused(r.Err)
	if again && b.c.sendAgain(b.again, func(next resend) {
		b.c.sendRelease(&background{c: b.c, cfg: b.cfg, ref: b.ref, again: next, unsure: b.unsure}, i)
	}) {
		return
	}
	if r.Err != nil { // the key expires with its TTL
		b.c.health.Failed(i, r.Err)
	} else {
		b.c.health.Answered(i)
	}
}

// rechecks are the releases waiting to be sent again. Close sends them at
// once, one last time (and so does a release that answers after Close).
type rechecks struct {
	mu     sync.Mutex
	closed bool
	timers map[*time.Timer]recheck
	seq    uint64 // recheck.seq of the next one
}

// recheck is one pending re-send; seq orders them as they were scheduled,
// so that Close sends them in that order (a map's order is random, and the
// simulator replays a seed exactly).
type recheck struct {
	seq uint64
	fn  func()
}

// after runs fn after d on a timer counted in wg, and reports whether it was
// scheduled (not after stop).
func (rc *rechecks) after(wg *sync.WaitGroup, d time.Duration, fn func()) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.closed {
		return false
	}
	if rc.timers == nil {
		rc.timers = map[*time.Timer]recheck{}
	}
	wg.Add(1)
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		defer wg.Done()
		rc.mu.Lock()
		delete(rc.timers, t) // after after has returned: it holds mu until t is set
		rc.mu.Unlock()
		fn()
	})
	rc.timers[t] = recheck{rc.seq, fn}
	rc.seq++
	return true
}

// stop refuses new rechecks and runs the pending ones now.
func (rc *rechecks) stop(wg *sync.WaitGroup) {
	rc.mu.Lock()
	rc.closed = true
	timers := rc.timers
	rc.timers = nil
	rc.mu.Unlock()
	pending := slices.SortedFunc(maps.Keys(timers), func(a, b *time.Timer) int { return cmp.Compare(timers[a].seq, timers[b].seq) })
	for _, t := range pending {
		if t.Stop() {
			timers[t].fn()
			wg.Done()
		}
	}
}

// cleanupTimeout bounds a release nobody waits for, and how long a command
// is followed after its round stopped waiting: longer than the node timeout,
// because the node it goes to was slow or failing, so that a node that is
// merely slow still gets it (a new connection may need connect, HELLO, the
// restart guard's INFO, EVALSHA and perhaps EVAL); never longer than the
// TTL. Close waits for these releases.
func cleanupTimeout(cfg *config) time.Duration {
	return min(cfg.ttl, max(10*cfg.nodeTimeout, 2*time.Second))
}

// releaseLost deletes a lost session lock's key (token-checked) from every
// node in the background: its session may still live on the nodes, which
// would keep the key held for its whole garbage-collection TTL (10 × TTL)
// rather than the TTL that frees the key of a lost plain lock. A node whose
// acquire's fate is unknown is re-checked like a failed round's; one whose
// acquire has not answered yet is late's, and one already freed is not
// sent to again (see landing). Nothing after Close, which has released what
// it tracks.
func (c *Client) releaseLost(l *Lock) {
	if !l.kind.session || c.enter() != nil {
		return
	}
	defer c.wg.Done()
	for _, o := range l.lossDeletes() {
		c.releaseUnsure(l.cfg, o.node, l.ref(), o.err)
	}
}
