package redlock

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
	"github.com/quorumlock/quorumlock/internal/session"
)

// Renewal sessions (internal/session): the auto-extended locks of a Client
// that share a TTL hang on one session key per node, and renewing the
// session renews them all. This file makes a Client's sessions. The lock keys carry
// a long TTL of their own (Config.KeyTTL) that only collects them once their
// session has ended, refreshed by the renewal service every half of it.
// A Lock's hold on its session is a session.Hold; lock.go joins and leaves
// the session.
// docs/safety.md, "Renewal sessions", has the argument; docs/design.md,
// "Leases", the mechanism.

// sessionAccepted records a late answer to a session lock's acquire and
// returns the session's generation a yes puts the lock in on its node (0:
// none, or no session lock).
func (l *Lock) sessionAccepted(rep quorum.Reply) uint64 {
	if !l.kind.session || rep.Err != nil || rep.Int <= 0 {
		return 0
	}
	return l.hold.Accepted(rep.Node, rep.Int, l.id.acquired)
}

// countNodeLocked counts node n, with the session's generation gen, for a
// session lock from now on; l.mu must be held.
func (l *Lock) countNodeLocked(n int, gen uint64) {
	l.hold.Count(n, gen, drift.Deadline(l.id.acquired, l.cfg.KeyTTL(), l.cfg.DriftFactor))
}

// member is a Lock as a member of its session.
type member Lock

// Rearm moves the lock's lease timer to its deadline, which may have moved
// earlier.
func (m *member) Rearm() {
	l := (*Lock)(m)
	l.mu.Lock()
	l.rearmLocked()
	l.mu.Unlock()
}

// Renewed tells the lock's Observer of one background renewal of its
// session, as an automatic renewal of the lock: Extended once a quorum of
// nodes confirmed it, ExtendFailed once every node it was sent to answered
// (or timed out) without a quorum.
func (m *member) Renewed(took time.Duration, won bool, confirmed, sent, q int) {
	l := (*Lock)(m)
	if won {
		observerOf(l.cfg).Extended(l.event(took, nil))
		return
	}
	err := fmt.Errorf("redlock: renewal session of %q: %d of %d nodes confirmed its renewal, %d needed: %w", l.id.key, confirmed, sent, q, ErrNotHeld)
	observerOf(l.cfg).ExtendFailed(l.event(took, err))
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
func (c *Client) sessionFor(cfg *conf.Config) *session.Session {
	if !c.sessionLocks(cfg) {
		return nil
	}
	k := session.Key{Prefix: cfg.Prefix, TTL: cfg.TTL, Every: cfg.RenewInterval(), NodeTimeout: cfg.NodeTimeout, Drift: cfg.DriftFactor}
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	if s := c.sessions[k]; s != nil {
		return s
	}
	if len(c.sessions) >= maxSessions {
		return nil
	}
	var b [12]byte
	cfg.Rnd.Read(b[:])
	sid := base64.RawURLEncoding.EncodeToString(b[:])
	s := session.New(session.Config{TTL: cfg.TTL, Every: cfg.RenewInterval(), NodeTimeout: cfg.NodeTimeout, MaxWait: cfg.CleanupTimeout(),
		Drift: cfg.DriftFactor, Now: cfg.Now, Quorum: cfg.QuorumOf(len(c.pools))},
		session.Env{Send: c.sendOwn, Done: c.wg.Done, Go: c.wg.Go, Stop: c.renew.ctx.Done(), Verified: c.ids.Verified},
		sid, node.SessionKey(cfg.Prefix, sid), node.SessionSeq(cfg.Prefix), len(c.pools))
	if c.sessions == nil {
		c.sessions = map[session.Key]*session.Session{}
	}
	c.sessions[k] = s
	return s
}

// sessionLocks reports whether the locks of cfg hang on a session (see
// sessionFor).
func (c *Client) sessionLocks(cfg *conf.Config) bool {
	return cfg.AutoExtend && cfg.MaxHold == 0 && !cfg.CustomToken && c.queued && !c.slotted && sessionKind(cfg)
}

// extendSession is Extend for a session lock, whose TTL is its session's: it
// renews the session on every node where it lives now, waits for their
// replies (until ctx ends or the replies' deadline), and succeeds when the
// lock's deadline is then at least start + ttl less the drift allowance.
// The op slot and an enter() count are held.
func (l *Lock) extendSession(ctx context.Context, ttl time.Duration, start time.Time) error {
	s, cfg := l.hold.Session(), l.cfg
	if ttl != cfg.TTL {
		return fmt.Errorf("redlock: extend %q: an auto-extended lock is renewed with its session, to its TTL (%v); extend it with 0 or that TTL, or acquire it without auto-extension to extend it to %v", l.id.key, cfg.TTL, ttl)
	}
	replies := make(chan session.Reply, l.hold.Nodes())
	sent := s.Renew(start, replies)
	res := l.c.newResults()
	t := time.NewTimer(cfg.CleanupTimeout())
	defer t.Stop()
wait:
	for range sent {
		select {
		case sr := <-replies:
			res[sr.N] = sessionResult(l, sr)
		case <-ctx.Done():
			break wait
		case <-t.C:
			break wait
		}
	}
	if err := l.usable(cfg.Now()); err != nil {
		return err
	}
	if !l.Deadline().Before(drift.Deadline(start, ttl, cfg.DriftFactor)) {
		return nil
	}
	elapsed := cfg.Now().Sub(start)
	markUnanswered(res, context.DeadlineExceeded, elapsed)
	return withCaller(ctx, &QuorumError{Op: "extend", Key: l.id.key, Quorum: cfg.QuorumOf(len(res)), Nodes: res, Elapsed: elapsed, TTL: ttl})
}

// sessionResult is a node's session renewal as the NodeResult of a lock.
func sessionResult(l *Lock, sr session.Reply) NodeResult {
	if sr.R.Err != nil {
		return failedResult(sr.N, l.c, sr.R.Err, sr.Latency)
	}
	o := OutcomeOK
	l.mu.Lock()
	if sr.R.Int != 1 || l.hold.Gen(sr.N) == 0 {
		o = OutcomeNotHeld
	}
	l.mu.Unlock()
	return NodeResult{Node: l.c.pools[sr.N].Name(), Outcome: o, Latency: sr.Latency}
}
