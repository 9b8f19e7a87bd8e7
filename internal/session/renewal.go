package session

import (
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// Reply is one node's answer to a renewal its caller waits for (Renew with
// replies).
type Reply struct {
	N       int
	R       node.Result
	Latency time.Duration
}

// renewal is one node's renewal command, and its receiver.
type renewal struct {
	s        *Session
	n        int
	start    time.Time
	gen      uint64
	inc      int64
	deadline time.Time
	replies  chan Reply // nil, or buffered for every reply
	cycle    *cycle     // the background renewal it is part of (nil: a caller's)
}

// cycle is one background renewal of a session: the commands sent at
// start, and the answers counted so far. Guarded by the session's mu.
type cycle struct {
	start                     time.Time
	sent, answered, confirmed int
	told                      bool // its members were told
}

// Renew renews the session, from now, on the nodes where it lives: those
// whose last renewal has answered, or all of them when replies is not nil
// (a caller that waits, as Extend does), which then gets every reply. It
// returns how many it sent. Its caller holds a count on the Client's
// WaitGroup (the renewals' goroutine's, or Extend's), so that each
// command's own count can be added; its reply ends it.
func (s *Session) Renew(now time.Time, replies chan Reply) int {
	var sends []renewal
	var cy *cycle
	if replies == nil {
		cy = &cycle{start: now}
	}
	s.mu.Lock()
	for n := range s.nodes {
		nd := &s.nodes[n]
		if nd.gen == 0 || nd.busy > 0 && replies == nil || !s.env.Verified(n) {
			continue
		}
		nd.busy++
		wait := min(max(s.cfg.NodeTimeout, (s.until(n).Sub(now)-s.cfg.NodeTimeout)/2), s.cfg.MaxWait)
		sends = append(sends, renewal{s: s, n: n, start: now, gen: nd.gen, inc: nd.inc, deadline: now.Add(wait), replies: replies, cycle: cy})
	}
	if cy != nil {
		cy.sent = len(sends)
	}
	s.mu.Unlock()
	if cy != nil && len(sends) == 0 {
		s.renewed(cy, false, false)
	}
	for i := range sends {
		r := &sends[i] // Close waits for the reply (by r.deadline at most)
		s.env.Send(node.Op{Kind: node.RenewSession, Key: s.key, Token: strconv.FormatInt(r.inc, 10), TTL: s.cfg.TTL}, r.deadline, r.n, r)
	}
	return len(sends)
}

// Deliver records node n's answer: a confirmation moves the node's
// confirmation time; a "no" (the incarnation has ended there, for good), or
// a confirmation sent or read after the node's last one stopped vouching
// (the session may have lapsed in between, and a deadline read meanwhile
// must not come back), drops the generation. An error changes nothing:
// the deadlines it would have moved stay where they are.
func (r *renewal) Deliver(n int, res node.Result) {
	s := r.s
	defer s.env.Done()
	now := s.cfg.Now()
	s.mu.Lock()
	nd := &s.nodes[n]
	nd.busy--
	dropped, confirmed := false, false
	if res.Err == nil && nd.gen == r.gen && r.gen != 0 {
		if res.Int == 1 && r.start.Before(s.until(n)) && now.Before(s.until(n)) {
			if r.start.After(nd.conf) {
				nd.conf = r.start
			}
			confirmed = true
		} else {
			nd.gen, dropped = 0, true
		}
	}
	ms := s.snapshotLocked(dropped)
	s.mu.Unlock()
	rearm(ms)
	if r.cycle != nil {
		s.renewed(r.cycle, true, confirmed)
	}
	if r.replies != nil {
		r.replies <- Reply{N: n, R: res, Latency: s.cfg.Now().Sub(r.start)}
	}
}

// renewed counts one answer to cy (answered), a confirmation if confirmed,
// and tells the watched members once the cycle is decided: won once a
// quorum of nodes confirmed it, failed once every node it was sent to
// answered (or timed out) without a quorum.
func (s *Session) renewed(cy *cycle, answered, confirmed bool) {
	q := s.cfg.Quorum
	s.mu.Lock()
	if answered {
		cy.answered++
	}
	if confirmed {
		cy.confirmed++
	}
	won := cy.confirmed >= q
	if cy.told || !won && cy.answered < cy.sent || s.watched == 0 {
		s.mu.Unlock()
		return
	}
	cy.told = true
	ms := make([]Member, 0, s.watched)
	for m, watched := range s.members {
		if watched {
			ms = append(ms, m)
		}
	}
	confirmedBy, sent := cy.confirmed, cy.sent
	s.mu.Unlock()
	took := s.cfg.Now().Sub(cy.start)
	for _, m := range ms {
		m.Renewed(took, won, confirmedBy, sent, q)
	}
}
