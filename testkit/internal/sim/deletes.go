package sim

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/quorumlock/quorumlock/internal/node"
)

// RD (no delete sent again once answered): a client sends a delete of a
// token under a key to a node in the background (a roll-back, a re-send,
// the delete of a late yes) after the node answered one, only where that
// token's acquire there has an unknown fate (an answer that
// was an error after which the SET may still have run: a timeout, a reset).
// Where every acquire of the token on the node answered, the key was set or
// not before the answered delete ran, and nothing of the token can land
// there later: another delete finds nothing (docs/design.md, "A release
// never written"). Sends that were on their way when the answer came are
// not counted, nor one background send for each delete that failed (two
// deletes of one token on their way at once, a Release call's and a lost
// session lock's, do not know of each other); an acquire of the token
// sent again starts over, and so does a Release call (two handles of one
// lock, Resume's, each release it). Every
// delete RD counts is one the nodes run for nothing; before 2026-11-29 a
// Release that ended before a node's SET answered sent such deletes for
// TTL + the cleanup budget (TestFindsBugHeldResend).
type deleteLog struct {
	mu         sync.Mutex
	m          map[deleteKey]*deleteState
	violations []string
}

type deleteKey struct {
	client     string
	node       int
	key, token string
}

type deleteState struct {
	acquiring int  // acquires of the token sent and not answered
	unknown   bool // an acquire's answer left its fate unknown
	answered  bool // a delete was answered since the last acquire answered
	owed      int  // deletes that failed and were not sent again yet
}

// acquires and deletes are the kinds RD follows.
var (
	acquires = map[node.Kind]bool{node.Acquire: true, node.AcquireFenced: true, node.AcquirePermit: true,
		node.AcquireSession: true, node.AcquireAll: true, node.AcquireShared: true}
	deletes = map[node.Kind]bool{node.Release: true, node.ReleaseAll: true, node.ReleaseShared: true}
)

// tracked reports whether RD follows commands of kind k.
func tracked(k node.Kind) bool { return acquires[k] || deletes[k] }

// sent records op, sent by client to node i, and RD's violation if it is
// a delete sent again.
func (d *deleteLog) sent(client string, i int, op *node.Op) {
	if !tracked(op.Kind) || op.Token == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.state(deleteKey{client, i, op.Key, op.Token})
	if acquires[op.Kind] {
		s.acquiring++
		return
	}
	if !op.Background { // a Release call: what it re-sends is judged anew
		s.answered = false
		return
	}
	if s.owed > 0 { // sent again: the library cannot know another delete answered
		s.owed--
		return
	}
	if s.acquiring == 0 && !s.unknown && s.answered {
		d.violations = append(d.violations, fmt.Sprintf("RD: %s sent node %d a %s of %q token %s again after the node answered one, with every acquire of the token there answered", client, i, kindNames[op.Kind], op.Key, short(op.Token)))
	}
}

// delivered records the answer r to op, sent by client to node i.
func (d *deleteLog) delivered(client string, i int, op *node.Op, r node.Result) {
	if !tracked(op.Kind) || op.Token == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.state(deleteKey{client, i, op.Key, op.Token})
	switch {
	case acquires[op.Kind]:
		s.acquiring--
		s.unknown = s.unknown || mayHaveRun(r.Err)
		s.answered = false
	case r.Err == nil:
		s.answered = true
	default:
		s.owed++
	}
}

func (d *deleteLog) state(k deleteKey) *deleteState {
	if d.m == nil {
		d.m = map[deleteKey]*deleteState{}
	}
	s := d.m[k]
	if s == nil {
		s = &deleteState{}
		d.m[k] = s
	}
	return s
}

// mayHaveRun reports whether a command answered err may have run on the
// node: not when it was never written (queued past its deadline, a refused
// dial) or the node refused it.
func mayHaveRun(err error) bool {
	if err == nil || errors.Is(err, node.ErrNotSent) {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

func (d *deleteLog) found() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.violations...)
}
