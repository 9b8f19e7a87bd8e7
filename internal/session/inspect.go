package session

import (
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// NodeState is what a Session knows of itself on one node.
type NodeState struct {
	Inc  int64  // the incarnation the node's session key holds
	Gen  uint64 // the Client's name for (node, Inc); 0: none known to live
	Busy int    // renewals in flight
}

// Node returns what s knows of itself on node n.
func (s *Session) Node(n int) NodeState {
	s.mu.Lock()
	defer s.mu.Unlock()
	nd := s.nodes[n]
	return NodeState{Inc: nd.inc, Gen: nd.gen, Busy: nd.busy}
}

// Begin starts a renewal of node n's current generation as Renew does,
// from start, without sending it, and returns the receiver of its reply:
// for tests that play the reply themselves. It is in flight until its
// Deliver, which ends one count of the Client's WaitGroup (the caller adds
// it).
func (s *Session) Begin(n int, start time.Time) node.Receiver {
	s.mu.Lock()
	defer s.mu.Unlock()
	nd := &s.nodes[n]
	nd.busy++
	return &renewal{s: s, n: n, start: start, gen: nd.gen, inc: nd.inc}
}
