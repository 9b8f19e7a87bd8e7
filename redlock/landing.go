package redlock

import (
	"errors"
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/internal/bugs"
	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/owed"
	"github.com/quorumlock/quorumlock/internal/quorum"
)

// landing is what of a Lock's acquiring round has not answered yet, and
// what the answers that came after the round was won left to do
// (docs/design.md, "Every command's fate"). nodes[i]: node i's acquire
// command has not answered yet; no other command of the lock goes to node
// i before it has (it could overtake the SET): chained holds the rounds
// waiting for it. unsure[i]: it failed without a reply, so it may still
// land (nil until needed). resumed: the lock came from Resume, whose
// command sets no key, so none of its answers leaves a key of unknown
// fate (set before the lock is shared). Guarded by the Lock's mu; only
// this file touches it (newLock through land). nodes is the Lock's own (a slice into
// the acquiring round would keep the round alive as long as the lock is
// held), stored in v[:8] for up to 8 nodes. freed[i]: a release in the
// background deletes the key on node i (a lost session lock's, a late
// answer's), re-sent until the node answers; no other goes there (nil
// until needed; in v[8:] for up to 8 nodes).
type landing struct {
	nodes, unsure, freed []bool
	v                    [16]bool
	chained              []chainedSend
	resumed              bool
}

// chainedSend is a round's command held back for a node until the node's
// acquire command has answered.
type chainedSend struct {
	node    int
	r       *quorum.Round
	release bool // a release round: when sent, the node needs no other
}

// land starts l's landing part, before l is shared: out, the nodes the
// acquiring round asked whose answer it did not take; unsure, those whose
// acquire failed without a reply (nil: none); resumed, whether Resume
// acquired it.
func (l *Lock) land(out, unsure []bool, resumed bool) {
	l.landing.nodes = append(l.landing.v[:0:8], out...)
	l.landing.resumed = resumed
	if unsure != nil { // a Release re-checks these nodes (see vote)
		l.landing.unsure = slices.Clone(unsure)
	}
}

// answered reports whether node i's acquire has answered; for newLock,
// before late sees the answers.
func (l *Lock) answered(i int) bool { return !l.landing.nodes[i] }

// unsureLocked returns the nodes whose acquire failed without a reply (nil:
// none), in a slice of the caller's; l.mu must be held.
func (l *Lock) unsureLocked() []bool { return slices.Clone(l.landing.unsure) }

// landingNow returns which nodes' acquire commands have not answered yet,
// or nil when none.
func (l *Lock) landingNow() []bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.landing.nodes, true) {
		return nil
	}
	return slices.Clone(l.landing.nodes)
}

// chain sends rd's command to each node it held back (hold[i] and asked)
// once that node's acquire command has answered: now if it has meanwhile,
// else from late. It returns hold, true where late will.
func (l *Lock) chain(rd *round, hold []bool) []bool {
	var now []int
	l.mu.Lock()
	for i, h := range hold {
		switch {
		case !h || !rd.out[i]:
			hold[i] = false
		case l.landing.nodes[i]:
			l.landing.chained = append(l.landing.chained, chainedSend{node: i, r: rd.r, release: isRelease(rd.spec)})
		default:
			hold[i] = false
			now = append(now, i)
		}
	}
	l.mu.Unlock()
	for _, i := range now {
		rd.r.Send(i)
	}
	return hold
}

// late handles a reply to the acquiring round that arrived after the round
// was won: the node may hold our token. If the lock is still held, Release
// will reach that node like every other; if it was already released, the
// node is released now. A plain lock that was lost, or whose deadline has
// passed, without a Release is not: its token may have been handed over
// (Client.Resume), and a release now could take a key that the resumed
// lock counts on; its key there lives its TTL, and a Release of the handle
// still reaches it. (A session lock, which cannot be resumed, is released.)
func (l *Lock) late(rep quorum.Reply) {
	gen := l.sessionAccepted(rep) // a session lock's generation on the node, if it said yes
	l.mu.Lock()
	l.landing.nodes[rep.Node] = false
	if node.MayHaveWritten(rep.Err) && !l.landing.resumed { // a SET may land yet
		if l.landing.unsure == nil {
			l.landing.unsure = make([]bool, len(l.landing.nodes))
		}
		l.landing.unsure[rep.Node] = true
	}
	keep := l.life.Held() && l.cfg.Now().Before(l.deadlineLocked())
	free := l.life.Released() || !keep && l.kind.session // nobody can count on the token any more
	free = free && (rep.Int > 0 || node.MayHaveWritten(rep.Err)) && l.freeLocked(rep.Node)
	waited := l.place.Waiter != "" && !(rep.Err == nil && rep.Int > 0) // it may wait in the line there
	l.place.InLine = l.place.InLine || waited
	if keep && gen != 0 { // the node counts for the lock from now on
		l.countNodeLocked(rep.Node, gen)
	}
	var buf [4]chainedSend
	waiting := buf[:0]
	kept := l.landing.chained[:0]
	for _, cs := range l.landing.chained {
		if cs.node == rep.Node {
			waiting = append(waiting, cs)
		} else {
			kept = append(kept, cs)
		}
	}
	clear(l.landing.chained[len(kept):])
	l.landing.chained = kept
	l.mu.Unlock()
	releasing := false // a chained release goes to the node now
	for _, cs := range waiting {
		if cs.r.Send(rep.Node) && cs.release {
			releasing = true
		}
	}
	if waited {
		l.c.leaveLine(l.cfg, l.id.rkey, l.place.Waiter, false, func(i int) bool { return i == rep.Node }, false)
	}
	if free {
		l.releaseLate(rep, releasing)
	}
}

// freeLocked records that a release in the background deletes the key on
// node i, and reports whether none did yet (with -tags
// quorumlock_bug_lostresend: always). l.mu must be held.
func (l *Lock) freeLocked(i int) bool {
	if n := len(l.landing.nodes); l.landing.freed == nil {
		if n <= 8 { // beside nodes, in v: no allocation
			l.landing.freed = l.landing.v[8 : 8+n : 8+n]
		} else {
			l.landing.freed = make([]bool, n)
		}
	}
	was := l.landing.freed[i]
	l.landing.freed[i] = !bugs.LostResend
	return !was
}

// owedDelete is a delete a lock owes node: err is releaseUnsure's.
type owedDelete struct {
	node int
	err  error
}

// lossDeletes returns the deletes a lost lock owes and marks their nodes
// freed: to every node but those already freed and those whose acquire has
// not answered (late frees those), re-checked (errUnknownFate) where the
// acquire's fate is unknown. None once the lock was released: a Release
// that came between the loss and these deletes sent its own round to every
// node not freed.
func (l *Lock) lossDeletes() []owedDelete {
	var owed []owedDelete
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.life.Released() && !bugs.LostResend {
		return nil
	}
	for i := range l.landing.nodes {
		if l.landing.nodes[i] && !bugs.LostResend || !l.freeLocked(i) {
			continue
		}
		o := owedDelete{node: i}
		if l.landing.unsure != nil && l.landing.unsure[i] {
			o.err = errUnknownFate
		}
		owed = append(owed, o)
	}
	return owed
}

// unfreedLocked returns the nodes whose key no release in the background
// deletes (nil: every node). l.mu must be held.
func (l *Lock) unfreedLocked() []bool {
	if !slices.Contains(l.landing.freed, true) {
		return nil
	}
	ask := make([]bool, len(l.landing.freed))
	for i, f := range l.landing.freed {
		ask[i] = !f
	}
	return ask
}

// releaseLate deletes the lock's key on the node of a late answer to its
// acquiring round, once nobody can count on the token there. A yes is
// deleted once, unless a chained release, sent now, covers it. An acquire
// of unknown fate may land yet: its delete re-checks. A resume of unknown
// fate sets no key, so the key it may have found is deleted like a yes.
func (l *Lock) releaseLate(rep quorum.Reply, releasing bool) {
	unknown := node.MayHaveWritten(rep.Err)
	switch {
	case unknown && !l.landing.resumed:
		l.c.releaseUnsure(l.cfg, rep.Node, l.ref(), rep.Err)
	case releasing:
	case rep.Int > 0:
		l.c.releaseUnsure(l.cfg, rep.Node, l.ref(), nil)
	case unknown: // re-sent until the node answers, like a failed delete
		l.c.releaseUnsure(l.cfg, rep.Node, l.ref(), errDeleteFailed)
	}
}

// releaseUnsure releases r on node i when it may hold it and no caller is
// waiting: after a yes that arrived after its round was decided, or for a
// lock that was lost (err nil), or after a call that failed with err. It
// does not wait: the release is queued on the node's Pool (or runs on a
// goroutine for Pools that do not queue), bounded by Config.CleanupTimeout, and
// counted in c.wg so that Close waits for it; the caller must hold a count
// on c.wg. Until recheckHorizon from now, it is sent again after
// Config.RecheckDelay, doubling up to owed.MaxWait, as long as it fails without the
// node's refusal (it may never have been written) and, when err is not nil
// (the acquire whose fate err left unknown may still land: held in a
// proxy, in a frozen server's socket), also while it finds nothing of
// ours. A caller that saw the acquire's yes and sends a delete again
// because an earlier one failed passes errDeleteFailed: it is sent again
// until the node answers, and an answer that finds nothing ends it (the
// earlier delete ran; a key once gone cannot come back).
func (c *Client) releaseUnsure(cfg *conf.Config, i int, r ref, err error) {
	d := &owed.Delete{Env: &c.owed, Op: node.Op{Kind: r.spec.kind, Key: r.rkey, Keys: r.keys, Token: r.token, Grace: c.grace(cfg)},
		Bound: cfg.CleanupTimeout(), Unsure: err != nil && err != errDeleteFailed}
	if err != nil || !bugs.LateDrop {
		d.Again = owed.Policy{Wait: cfg.RecheckDelay(), Horizon: time.Now().Add(recheckHorizon(cfg, r))}
	}
	d.Send(i)
}

// recheckHorizon is how long a release of unknown fate of r is re-sent: a
// SET that lands within it is gone within owed.MaxWait (docs/design.md, the
// leftover bound); one that lands later lives its TTL. A session lock's
// acquire that lands is held while its session lives, up to its key's own
// TTL: its releases are re-sent for that long.
func recheckHorizon(cfg *conf.Config, r ref) time.Duration {
	if r.session {
		return cfg.KeyTTL() + cfg.CleanupTimeout()
	}
	return cfg.TTL + cfg.CleanupTimeout()
}

// errDeleteFailed stands for a delete that failed (no reply, or never
// written) on a node whose acquire's yes was seen (see releaseUnsure).
var errDeleteFailed = errors.New("the delete failed on a node that said yes")

// leaveLine takes waiter, whose Lock call ended, out of the key's line for
// good (its attempts that land late do not put it back) on the nodes where
// ask(i) (every node when ask is nil), and hands the key on where it had
// been handed to it, telling the next waiter if tell (a waiter that took
// the lock does not: its release will). A waiter that ended without the
// lock (wait) leaves like a round's command and waits for the nodes'
// answers up to the node timeout, so that a shared holder that asks next,
// from any Client, no longer finds it in the line; a waiter that took the
// lock leaves in the background. Close waits for the
// leaves. A leave that fails is sent again (owed.Leave); an entry it still
// misses lapses by itself (Config.LineTTL).
func (c *Client) leaveLine(cfg *conf.Config, rkey, waiter string, tell bool, ask func(int) bool, wait bool) {
	if c.enter() != nil {
		return
	}
	defer c.wg.Done()
	lv := &owed.Leave{Env: &c.owed, Bound: cfg.CleanupTimeout(),
		Op:    node.Op{Kind: node.Leave, Key: rkey, Waiter: waiter, Grace: cfg.HandGrace(), LineTTL: cfg.StayOut(), Tell: tell, Background: true, Values: ownWork},
		Again: owed.Policy{Wait: cfg.RecheckDelay(), Horizon: time.Now().Add(cfg.StayOut())}}
	var patience time.Duration // with the rounds' commands, bounded like one of them
	if wait && !bugs.LeaveLate {
		patience = cfg.NodeTimeout
	}
	lv.SendAll(ask, c.bgDeadline(cfg), patience, cfg.Follow())
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
