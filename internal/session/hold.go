package session

import (
	"time"

	"github.com/quorumlock/quorumlock/internal/quorum"
)

// Key identifies a Client's session: the locks of one key prefix, TTL,
// renewal interval, node timeout and drift factor share it.
type Key struct {
	Prefix                  string
	TTL, Every, NodeTimeout time.Duration
	Drift                   float64
}

// Hold is a lock's hold on its renewal session: the session (nil for a lock
// that has none), the session's generation the lock holds on each node (0:
// not held there), and until when its key there lives at least, as far as
// the replies tell (see Deadline). Its owner guards it, and sets it before
// the lock is shared.
type Hold struct {
	sess     *Session
	gens     []uint64
	keyUntil []time.Time
}

// NewHold returns a lock's hold on s (nil: the lock has no session), held
// on the nodes n with gens[n] != 0, whose keys live at least until
// keyUntil.
func NewHold(s *Session, gens []uint64, keyUntil time.Time) Hold {
	if s == nil {
		return Hold{}
	}
	h := Hold{sess: s, gens: gens, keyUntil: make([]time.Time, len(gens))}
	for n := range h.keyUntil {
		h.keyUntil[n] = keyUntil
	}
	return h
}

// Session returns the session held (nil: none).
func (h *Hold) Session() *Session { return h.sess }

// Gen returns the generation held on node n (0: none).
func (h *Hold) Gen(n int) uint64 { return h.gens[n] }

// Nodes returns how many nodes the hold spans.
func (h *Hold) Nodes() int { return len(h.gens) }

// Deadline is the lock's deadline as its session's confirmations tell it
// (Session.Deadline), for a lock acquired at acquired with quorum q.
func (h *Hold) Deadline(acquired time.Time, q int) time.Time {
	return h.sess.Deadline(h.gens, h.keyUntil, acquired, q)
}

// Accepted records a late yes of node n, incarnation inc, to the acquire of
// a lock acquired at acquired (Session.Accepted), and returns the
// generation it puts the lock in there (0: none).
func (h *Hold) Accepted(n int, inc int64, acquired time.Time) uint64 {
	return h.sess.Accepted(n, inc, acquired)
}

// Count counts node n, with generation gen, for the lock from now on; its
// key there lives at least until keyUntil.
func (h *Hold) Count(n int, gen uint64, keyUntil time.Time) {
	h.gens[n], h.keyUntil[n] = gen, keyUntil
}

// Refreshed records node j's answer rep to a refresh of the lock's key, the
// i-th of its command, read at now: a confirmation read in time vouches for
// the key until until; a node that said the key no longer holds the token,
// or whose earlier refresh had stopped vouching before this one was read
// (the key may have expired in between), stops counting (dropped: the
// lock's deadline may have moved earlier). It reports whether the node, if
// the lock counts it, confirmed.
func (h *Hold) Refreshed(j int, rep quorum.Reply, i int, now, until time.Time) (confirmed, dropped bool) {
	switch {
	case h.gens[j] == 0:
	case rep.Err != nil || len(rep.Str) <= i:
		return false, false
	case rep.Str[i] == '1' && now.Before(h.keyUntil[j]):
		if until.After(h.keyUntil[j]) {
			h.keyUntil[j] = until
		}
	default:
		h.gens[j] = 0
		return false, true
	}
	return true, false
}
