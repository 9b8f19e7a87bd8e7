package redlock

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
)

// Renewal sessions: the auto-extended locks of a Client that share a TTL hang
// on one session key per node, and renewing the session renews them all, at
// a cost that does not grow with their number. A lock key names its session
// and the session's incarnation on the node; it is held exactly while the
// session key holds that incarnation. The lock keys carry a long TTL of
// their own (keyTTL) that only collects them once their session has ended,
// refreshed by the renewal service every half of it. docs/safety.md,
// "Renewal sessions", has the argument; docs/design.md, "Leases", the
// mechanism.

// keyTTL is the TTL of a session lock's key: long, so that refreshing it
// costs little, yet bounded, so that the keys of a session that ended are
// collected.
func keyTTL(cfg *config) time.Duration { return 10 * cfg.ttl }

// sessionKey identifies a session: the locks of one prefix, TTL, renewal
// interval, node timeout and drift factor share it.
type sessionKey struct {
	prefix         string
	ttl, every, nt time.Duration
	drift          float64
}

// session is one session of a Client, on every node.
type session struct {
	c    *Client
	cfg  *config // the first lock's: its ttl, drift, timeout and clock are the session's
	sid  string  // 16 characters: the first bytes of every token of the session
	skey string  // the session key: prefix + "s:" + sid
	seq  string  // the nodes' incarnation sequence: prefix + "s:seq"
	ctr  atomic.Uint64

	mu      sync.Mutex
	nodes   []sessionNode
	gens    uint64             // the last generation handed out
	locks   map[*Lock]struct{} // locks of the session not yet released or lost
	watched int                // how many of them have an Observer
	running bool               // run's goroutine is live
}

// sessionHold is a Lock's hold on its renewal session: sess is the session
// of a session lock (nil for the others); gens[i] the session's generation
// the lock holds on node i (0: not held there), keyUntil[i] how long its
// key there lives at least, as far as the replies tell (see
// session.deadline). Guarded by the Lock's mu; set before the lock is
// shared.
type sessionHold struct {
	sess     *session
	gens     []uint64
	keyUntil []time.Time
}

// holdSession makes l a lock of session s (nil: l is no session lock),
// held on the nodes i with gens[i] != 0, whose keys were set from start.
// Before l is shared.
func (l *Lock) holdSession(s *session, gens []uint64, start time.Time) {
	if s == nil {
		return
	}
	l.hold.sess, l.hold.gens, l.hold.keyUntil = s, gens, make([]time.Time, len(gens))
	for i := range l.hold.keyUntil {
		l.hold.keyUntil[i] = drift.Deadline(start, keyTTL(l.cfg), l.cfg.driftFactor)
	}
}

// joinSession has a session lock's session renew it (once it is tracked);
// leaveSession ends that (released or lost). Neither does anything for
// other locks.
func (l *Lock) joinSession() {
	if l.kind.session {
		l.hold.sess.add(l)
	}
}

func (l *Lock) leaveSession() {
	if l.kind.session {
		l.hold.sess.remove(l)
	}
}

// sessionDeadlineLocked is a session lock's deadline as its session's
// confirmations tell it; l.mu must be held.
func (l *Lock) sessionDeadlineLocked() time.Time { return l.hold.sess.deadline(l) }

// sessionAccepted records a late answer to a session lock's acquire and
// returns the session's generation a yes puts the lock in on its node (0:
// none, or no session lock).
func (l *Lock) sessionAccepted(rep quorum.Reply) uint64 {
	if !l.kind.session || rep.Err != nil || rep.Int <= 0 {
		return 0
	}
	return l.hold.sess.accepted(rep.Node, rep.Int, l.id.acquired)
}

// countNodeLocked counts node n, with the session's generation gen, for a
// session lock from now on; l.mu must be held.
func (l *Lock) countNodeLocked(n int, gen uint64) {
	l.hold.gens[n] = gen
	l.hold.keyUntil[n] = drift.Deadline(l.id.acquired, keyTTL(l.cfg), l.cfg.driftFactor)
}

// keyRefreshedLocked records node j's answer rep to a refresh of a session
// lock's key, the i-th of its command, read at now: a confirmation read in
// time vouches for the key until until; a node that said the key no longer
// holds the token, or whose earlier refresh had stopped vouching before
// this one was read (the key may have expired in between), stops counting
// for the lock. It reports whether the node, if the lock counts it,
// confirmed. l.mu must be held.
func (l *Lock) keyRefreshedLocked(j int, rep quorum.Reply, i int, now, until time.Time) bool {
	switch {
	case l.hold.gens[j] == 0:
	case rep.Err != nil || len(rep.Str) <= i:
		return false
	case rep.Str[i] == '1' && now.Before(l.hold.keyUntil[j]):
		l.hold.keyUntil[j] = later(l.hold.keyUntil[j], until)
	default:
		l.hold.gens[j] = 0
		l.rearmLocked()
		return false
	}
	return true
}

// sessionNode is what the Client knows of the session on one node.
type sessionNode struct {
	inc  int64     // the incarnation the node's session key holds
	gen  uint64    // the Client's name for (node, inc); 0: none known to live
	conf time.Time // start of the latest round the node confirmed inc in
	busy int       // renewals in flight
}

// maxSessions bounds a Client's renewal sessions, whatever the TTLs its
// calls ask for: one session per distinct (prefix, TTL, renewal interval,
// node timeout, drift) is made on first use and kept until Close; past
// maxSessions of them, locks of a new kind are renewed key by key.
const maxSessions = 16

// sessionFor returns the session the auto-extended locks of cfg hang on, or
// nil when locks of cfg are renewed key by key: without auto-extension, with
// WithMaxHold, WithFencing or WithTokenGenerator, over Pools that do not
// queue commands or are Redis Clusters (a script there may only touch the
// keys of one hash slot), or when the Client has maxSessions sessions of
// other kinds.
func (c *Client) sessionFor(cfg *config) *session {
	if !c.sessionLocks(cfg) {
		return nil
	}
	k := sessionKey{prefix: cfg.prefix, ttl: cfg.ttl, every: cfg.renewInterval(), nt: cfg.nodeTimeout, drift: cfg.driftFactor}
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	if s := c.sessions[k]; s != nil {
		return s
	}
	if len(c.sessions) >= maxSessions {
		return nil
	}
	var b [12]byte
	cfg.rnd.Read(b[:])
	sid := base64.RawURLEncoding.EncodeToString(b[:])
	s := &session{c: c, cfg: cfg, sid: sid, skey: node.SessionKey(cfg.prefix, sid), seq: node.SessionSeq(cfg.prefix),
		nodes: make([]sessionNode, len(c.pools)), locks: map[*Lock]struct{}{}}
	if c.sessions == nil {
		c.sessions = map[sessionKey]*session{}
	}
	c.sessions[k] = s
	return s
}

// sessionLocks reports whether the locks of cfg hang on a session (see
// sessionFor).
func (c *Client) sessionLocks(cfg *config) bool {
	return cfg.autoExtend && cfg.maxHold == 0 && !cfg.fencing && !cfg.customToken && !cfg.shared && !cfg.several && !cfg.permit && c.queued && !c.slotted
}

// token returns a new lock token of the session: its id and a counter.
func (s *session) token() string {
	return s.sid + strconv.FormatUint(s.ctr.Add(1), 36)
}

// until is when node n's confirmation of the session stops vouching for it
// on the local clock; s.mu must be held.
func (s *session) until(n int) time.Time {
	return drift.Deadline(s.nodes[n].conf, s.cfg.ttl, s.cfg.driftFactor)
}

// accepted records that node n said at a round started at start that the
// session lives there with incarnation inc, and returns the generation a
// lock acquired by that round holds on n (0: none). While the node's last
// confirmation still vouches (now, and at start), an incarnation below the
// known one is a reply older than it: that incarnation has ended, and the
// lock does not count n. Any other incarnation, or one whose confirmation
// may have lapsed, is a new generation: the locks of the old one lose n.
// A generation's vouching, once lapsed, never comes back, so no deadline
// ever moves from the past to the future.
func (s *session) accepted(n int, inc int64, start time.Time) uint64 {
	now := s.cfg.now()
	s.mu.Lock()
	nd := &s.nodes[n]
	vouching := start.Before(s.until(n)) && now.Before(s.until(n))
	if vouching && inc < nd.inc {
		s.mu.Unlock()
		return 0
	}
	dropped := nd.gen != 0 && (nd.inc != inc || !vouching)
	if dropped {
		nd.gen = 0
	}
	if nd.gen == 0 {
		s.gens++
		*nd = sessionNode{inc: inc, gen: s.gens, conf: start, busy: nd.busy}
	} else if start.After(nd.conf) {
		nd.conf = start
	}
	gen := nd.gen
	locks := s.snapshotLocked(dropped)
	s.mu.Unlock()
	rearm(locks)
	return gen
}

// snapshotLocked returns the session's locks when a generation was dropped
// (their deadlines may have moved earlier), else nil; s.mu must be held.
func (s *session) snapshotLocked(dropped bool) []*Lock {
	if !dropped {
		return nil
	}
	ls := make([]*Lock, 0, len(s.locks))
	for l := range s.locks {
		ls = append(ls, l)
	}
	return ls
}

// rearm moves the lease timers of locks whose deadline may have moved
// earlier.
func rearm(ls []*Lock) {
	for _, l := range ls {
		l.mu.Lock()
		l.rearmLocked()
		l.mu.Unlock()
	}
}

// deadline is lock l's deadline: the latest instant by which a quorum of
// the nodes it holds has vouched, each node for the shorter of its session
// and its lock key; the start of its acquisition (long past) when no quorum
// does. l.mu must be held.
func (s *session) deadline(l *Lock) time.Time {
	var buf [8]time.Time
	ts := buf[:0]
	s.mu.Lock()
	for n, g := range l.hold.gens {
		if g != 0 && g == s.nodes[n].gen {
			ts = append(ts, earlier(s.until(n), l.hold.keyUntil[n]))
		}
	}
	s.mu.Unlock()
	q := l.cfg.quorumOf(len(l.hold.gens))
	if len(ts) < q {
		return l.id.acquired
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return b.Compare(a) })
	return ts[q-1]
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// add makes l one of the session's locks and starts the renewals if they
// are not running.
func (s *session) add(l *Lock) {
	s.mu.Lock()
	s.locks[l] = struct{}{}
	if l.cfg.observer != nil {
		s.watched++
	}
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		s.c.wg.Go(s.run)
	}
}

// remove forgets l (released or lost).
func (s *session) remove(l *Lock) {
	s.mu.Lock()
	if _, ok := s.locks[l]; ok && l.cfg.observer != nil {
		s.watched--
	}
	delete(s.locks, l)
	s.mu.Unlock()
}

// run renews the session on every node where it lives, every renewal
// interval, until it has no locks left or the Client closes.
func (s *session) run() {
	t := time.NewTimer(s.cfg.renewInterval())
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.c.renew.ctx.Done():
			s.stopped()
			return
		}
		if !s.renew() {
			return
		}
		t.Reset(s.cfg.renewInterval())
	}
}

func (s *session) stopped() {
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
}

// renew sends one renewal to each node where the session lives and whose
// previous renewal has answered (so that a slow node is never sent more
// than it can answer); false, and the goroutine stops, when the session has
// no locks left.
func (s *session) renew() bool {
	s.mu.Lock()
	if len(s.locks) == 0 {
		s.running = false
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()
	s.send(s.cfg.now(), nil)
	return true
}

// send renews the session on the nodes where it lives: those whose last
// renewal has answered, or all of them when replies is not nil (Extend),
// which then gets every reply. It returns how many it sent. Its caller
// holds a count on c.wg (run's, or Extend's enter), so that each command's
// own count can be added; Deliver ends it.
func (s *session) send(now time.Time, replies chan sessionReply) int {
	var sends []sessionRenewal
	var cy *sessionCycle
	if replies == nil {
		cy = &sessionCycle{start: now}
	}
	s.mu.Lock()
	for n := range s.nodes {
		nd := &s.nodes[n]
		if nd.gen == 0 || nd.busy > 0 && replies == nil || !s.c.ids.Verified(n) {
			continue
		}
		nd.busy++
		wait := min(max(s.cfg.nodeTimeout, (s.until(n).Sub(now)-s.cfg.nodeTimeout)/2), cleanupTimeout(s.cfg))
		sends = append(sends, sessionRenewal{s: s, n: n, start: now, gen: nd.gen, inc: nd.inc, deadline: now.Add(wait), replies: replies, cycle: cy})
	}
	if cy != nil {
		cy.sent = len(sends)
	}
	s.mu.Unlock()
	if cy != nil && len(sends) == 0 {
		s.renewed(cy, false, false)
	}
	for i := range sends {
		sr := &sends[i] // Close waits for the reply (by sr.deadline at most)
		s.c.sendOwn(node.Op{Kind: node.RenewSession, Key: s.skey, Token: strconv.FormatInt(sr.inc, 10), TTL: s.cfg.ttl}, sr.deadline, sr.n, sr)
	}
	return len(sends)
}

// sessionReply is one node's answer to a renewal Extend waits for.
type sessionReply struct {
	n       int
	r       node.Result
	latency time.Duration
}

// sessionRenewal is one node's renewal command, and its receiver.
type sessionRenewal struct {
	s        *session
	n        int
	start    time.Time
	gen      uint64
	inc      int64
	deadline time.Time
	replies  chan sessionReply // nil, or buffered for every reply
	cycle    *sessionCycle     // the background renewal it is part of (nil: Extend's)
}

// Deliver records node n's answer: a confirmation moves the node's
// confirmation time; a "no" (the incarnation has ended there, for good), or
// a confirmation sent or read after the node's last one stopped vouching
// (the session may have lapsed in between, and a deadline read meanwhile
// must not come back), drops the generation. An error changes nothing:
// the deadlines it would have moved stay where they are.
func (sr *sessionRenewal) Deliver(n int, r node.Result) {
	s := sr.s
	defer s.c.wg.Done()
	now := s.cfg.now()
	s.mu.Lock()
	nd := &s.nodes[n]
	nd.busy--
	dropped, confirmed := false, false
	if r.Err == nil && nd.gen == sr.gen && sr.gen != 0 {
		if r.Int == 1 && sr.start.Before(s.until(n)) && now.Before(s.until(n)) {
			if sr.start.After(nd.conf) {
				nd.conf = sr.start
			}
			confirmed = true
		} else {
			nd.gen, dropped = 0, true
		}
	}
	locks := s.snapshotLocked(dropped)
	s.mu.Unlock()
	rearm(locks)
	if sr.cycle != nil {
		s.renewed(sr.cycle, true, confirmed)
	}
	if sr.replies != nil {
		sr.replies <- sessionReply{n: n, r: r, latency: s.cfg.now().Sub(sr.start)}
	}
}

// extendSession is Extend for a session lock, whose TTL is its session's: it
// renews the session on every node where it lives now, waits for their
// replies (until ctx ends or the replies' deadline), and succeeds when the
// lock's deadline is then at least start + ttl less the drift allowance.
// The op slot and an enter() count are held.
func (l *Lock) extendSession(ctx context.Context, ttl time.Duration, start time.Time) error {
	s, cfg := l.hold.sess, l.cfg
	if ttl != cfg.ttl {
		return fmt.Errorf("redlock: extend %q: an auto-extended lock is renewed with its session, to its TTL (%v); extend it with 0 or that TTL, or acquire it without auto-extension to extend it to %v", l.id.key, cfg.ttl, ttl)
	}
	replies := make(chan sessionReply, len(l.hold.gens))
	sent := s.send(start, replies)
	res := l.c.newResults()
	t := time.NewTimer(cleanupTimeout(cfg))
	defer t.Stop()
wait:
	for range sent {
		select {
		case sr := <-replies:
			res[sr.n] = sessionResult(l, sr)
		case <-ctx.Done():
			break wait
		case <-t.C:
			break wait
		}
	}
	if err := l.usable(cfg.now()); err != nil {
		return err
	}
	if !l.Deadline().Before(drift.Deadline(start, ttl, cfg.driftFactor)) {
		return nil
	}
	elapsed := cfg.now().Sub(start)
	markUnanswered(res, context.DeadlineExceeded, elapsed)
	return withCaller(ctx, &QuorumError{Op: "extend", Key: l.id.key, Quorum: cfg.quorumOf(len(res)), Nodes: res, Elapsed: elapsed, TTL: ttl})
}

// sessionResult is a node's session renewal as the NodeResult of a lock.
func sessionResult(l *Lock, sr sessionReply) NodeResult {
	if sr.r.Err != nil {
		return failedResult(sr.n, l.c, sr.r.Err, sr.latency)
	}
	o := OutcomeOK
	l.mu.Lock()
	if sr.r.Int != 1 || l.hold.gens[sr.n] == 0 {
		o = OutcomeNotHeld
	}
	l.mu.Unlock()
	return NodeResult{Node: l.c.pools[sr.n].Name(), Outcome: o, Latency: sr.latency}
}
