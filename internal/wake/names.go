package wake

import (
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// Place is a Lock call's place in the key's line of waiters on the nodes
// (docs/design.md, "Hand-off"): each attempt told "taken" puts the waiter
// in the line, ranked by its first attempt; a release hands the key to the
// first waiter, and names it to the waiting Clients, whose Notifier wakes
// exactly that waiter. It belongs to one Lock call, which updates Joined
// and Seen between its attempts.
type Place struct {
	ID     string // the waiter, as the nodes and the release messages name it
	Rank   int64  // the first attempt, in µs since the Unix epoch
	Joined bool   // an attempt was told "taken" or failed: the waiter may be in the line
	Seen   int    // the longest line of waiters the last attempt was told of (0: none)
}

// Fill makes o, an acquire, the waiter's at p, whose entry in the line
// lives lineTTL after the attempt.
func (p *Place) Fill(o *node.Op, lineTTL time.Duration) {
	o.Waiter, o.Rank, o.LineTTL, o.InLine = p.ID, p.Rank, lineTTL, p.Joined
}

// Spot is what a Lock keeps of its acquiring call's Place: the waiter's
// name ("" for TryLock), and whether it may be in the key's line on some
// node (an attempt was told "taken"). The Lock leaves the line there once it
// holds the key, and its release takes it out of the line for good
// everywhere. Its owner guards it.
type Spot struct {
	Waiter string
	InLine bool
}

// Names names the waiters of one Client (node.WaiterName): the release
// script publishes a hand-off to a waiter on the channel of its key and
// Client (node.HandChannel), so that only that Client reads it. Safe for
// concurrent use.
type Names struct {
	client string
	n      atomic.Uint64
}

// NewNames returns the namer of the Client named client (random, and the
// same for all its waiters).
func NewNames(client string) *Names { return &Names{client: client} }

// Client returns the Client's name.
func (ns *Names) Client() string { return ns.client }

// Next returns a new waiter's place, ranked now.
func (ns *Names) Next() *Place {
	return &Place{ID: node.WaiterName(ns.client, ns.n.Add(1)), Rank: time.Now().UnixMicro()}
}

// Tally counts, over a release's answers, the waiters the nodes handed the
// key to, and names the one most of them did. It allocates nothing for the
// usual few names. The zero Tally is empty; not safe for concurrent use.
type Tally struct {
	names  [5]string
	counts [5]int
	n      int
}

// Vote counts one node's hand-off to waiter name ("": to nobody, not
// counted). Past five different names, new ones are not counted.
func (h *Tally) Vote(name string) {
	if name == "" {
		return
	}
	for i := range h.n {
		if h.names[i] == name {
			h.counts[i]++
			return
		}
	}
	if h.n < len(h.names) {
		h.names[h.n], h.counts[h.n] = name, 1
		h.n++
	}
}

// Most returns the waiter the most nodes handed the key to (the first
// counted among equals), or "" if none.
func (h *Tally) Most() string {
	best := -1
	for i := range h.n {
		if best < 0 || h.counts[i] > h.counts[best] {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return h.names[best]
}
