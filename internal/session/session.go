// Package session keeps a Client's renewal sessions: the auto-extended
// locks that share a TTL hang on one session key per node, and renewing the
// session renews them all, at a cost that does not grow with their number.
// A lock key names its session and the session's incarnation on the node;
// it is held exactly while the session key holds that incarnation. This
// package knows the session on each node (its incarnation, the Client's
// generation for it, its last confirmation) and renews it; the locks are
// its Members. docs/safety.md, "Renewal sessions", has the argument;
// docs/design.md, "Leases", the mechanism. A Session is safe for
// concurrent use.
package session

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/node"
)

// Config is what a session's renewals follow: those of the first lock that
// made it.
type Config struct {
	TTL         time.Duration    // the session key's TTL, which each renewal sets
	Every       time.Duration    // between two background renewals
	NodeTimeout time.Duration    // a renewal waits at least this long for its reply
	MaxWait     time.Duration    // and at most this long
	Drift       float64          // the clock drift factor
	Now         func() time.Time // the local clock
	Quorum      int              // of the nodes, for a background renewal's events
}

// Env is what a session needs of its Client.
type Env struct {
	// Send sends a renewal to node n, bounded by deadline; r gets its
	// result and calls Done once it has. The caller holds a count on the
	// Client's WaitGroup, and Send adds the command's own.
	Send     func(o node.Op, deadline time.Time, n int, r node.Receiver)
	Done     func()           // ends the count Send added
	Go       func(func())     // runs the renewals' goroutine, counted
	Stop     <-chan struct{}  // closed when the Client closes: the renewals stop
	Verified func(n int) bool // whether node n's identity is verified
}

// Member is a lock of a session.
type Member interface {
	// Rearm is called when the lock's deadline may have moved earlier (a
	// generation of its session was dropped on a node).
	Rearm()
	// Renewed is called for a watched lock once a background renewal is
	// decided: won when confirmed of the sent nodes reached the quorum q;
	// took is how long it took.
	Renewed(took time.Duration, won bool, confirmed, sent, q int)
}

// Session is one session of a Client, on every node.
type Session struct {
	cfg Config
	env Env
	sid string // the first bytes of every token of the session
	key string // the session key
	seq string // the nodes' incarnation sequence
	ctr atomic.Uint64

	mu      sync.Mutex
	nodes   []nodeState
	gens    uint64          // the last generation handed out
	members map[Member]bool // locks not yet released or lost: whether watched
	watched int             // how many of them are
	running bool            // run's goroutine is live
}

// nodeState is what the Client knows of the session on one node.
type nodeState struct {
	inc  int64     // the incarnation the node's session key holds
	gen  uint64    // the Client's name for (node, inc); 0: none known to live
	conf time.Time // start of the latest round the node confirmed inc in
	busy int       // renewals in flight
}

// New returns the session sid, keyed key on the nodes (seq: their
// incarnation sequence), over n nodes.
func New(cfg Config, env Env, sid, key, seq string, n int) *Session {
	return &Session{cfg: cfg, env: env, sid: sid, key: key, seq: seq, nodes: make([]nodeState, n), members: map[Member]bool{}}
}

// Key returns the session key.
func (s *Session) Key() string { return s.key }

// Seq returns the key of the nodes' incarnation sequence.
func (s *Session) Seq() string { return s.seq }

// Token returns a new lock token of the session: its id and a counter.
func (s *Session) Token() string {
	return s.sid + strconv.FormatUint(s.ctr.Add(1), 36)
}

// until is when node n's confirmation of the session stops vouching for it
// on the local clock; s.mu must be held.
func (s *Session) until(n int) time.Time {
	return drift.Deadline(s.nodes[n].conf, s.cfg.TTL, s.cfg.Drift)
}

// Accepted records that node n said at a round started at start that the
// session lives there with incarnation inc, and returns the generation a
// lock acquired by that round holds on n (0: none). While the node's last
// confirmation still vouches (now, and at start), an incarnation below the
// known one is a reply older than it: that incarnation has ended, and the
// lock does not count n. Any other incarnation, or one whose confirmation
// may have lapsed, is a new generation: the locks of the old one lose n.
// A generation's vouching, once lapsed, never comes back, so no deadline
// ever moves from the past to the future.
func (s *Session) Accepted(n int, inc int64, start time.Time) uint64 {
	now := s.cfg.Now()
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
		*nd = nodeState{inc: inc, gen: s.gens, conf: start, busy: nd.busy}
	} else if start.After(nd.conf) {
		nd.conf = start
	}
	gen := nd.gen
	ms := s.snapshotLocked(dropped)
	s.mu.Unlock()
	rearm(ms)
	return gen
}

// snapshotLocked returns the session's members when a generation was
// dropped (their deadlines may have moved earlier), else nil; s.mu must be
// held.
func (s *Session) snapshotLocked(dropped bool) []Member {
	if !dropped {
		return nil
	}
	ms := make([]Member, 0, len(s.members))
	for m := range s.members {
		ms = append(ms, m)
	}
	return ms
}

func rearm(ms []Member) {
	for _, m := range ms {
		m.Rearm()
	}
}

// Deadline is the deadline of a lock that holds generation gens[n] on each
// node n (0: none), whose key there lives until keyUntil[n]: the latest
// instant by which q of those nodes (its quorum) have vouched, each for the
// shorter of its session and the lock's key; acquired (long past) when
// fewer do.
func (s *Session) Deadline(gens []uint64, keyUntil []time.Time, acquired time.Time, q int) time.Time {
	var buf [8]time.Time
	ts := buf[:0]
	s.mu.Lock()
	for n, g := range gens {
		if g != 0 && g == s.nodes[n].gen {
			ts = append(ts, earlier(s.until(n), keyUntil[n]))
		}
	}
	s.mu.Unlock()
	if len(ts) < q {
		return acquired
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

// Add makes m one of the session's members (watched: its Renewed is
// called) and starts the renewals if they are not running.
func (s *Session) Add(m Member, watched bool) {
	s.mu.Lock()
	s.members[m] = watched
	if watched {
		s.watched++
	}
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		s.env.Go(s.run)
	}
}

// Remove forgets m (released or lost).
func (s *Session) Remove(m Member) {
	s.mu.Lock()
	if watched, ok := s.members[m]; ok && watched {
		s.watched--
	}
	delete(s.members, m)
	s.mu.Unlock()
}

// run renews the session on every node where it lives, every Every, until
// it has no members left or the Client closes.
func (s *Session) run() {
	t := time.NewTimer(s.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.env.Stop:
			s.mu.Lock()
			s.running = false
			s.mu.Unlock()
			return
		}
		if !s.renew() {
			return
		}
		t.Reset(s.cfg.Every)
	}
}

// renew sends one renewal to each node where the session lives and whose
// previous renewal has answered (so that a slow node is never sent more
// than it can answer); false, and the goroutine stops, when the session has
// no members left.
func (s *Session) renew() bool {
	s.mu.Lock()
	if len(s.members) == 0 {
		s.running = false
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()
	s.Renew(s.cfg.Now(), nil)
	return true
}
