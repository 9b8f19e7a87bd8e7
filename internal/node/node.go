// Package node describes one command of a lock round as data, so that a
// Pool can queue it and answer through a callback: a round then needs no
// goroutine, context or timer per node, and a Pool can coalesce the
// commands of many concurrent rounds into one write (a pipeline).
//
// An Op is built once per round and shared, read-only, by every node it is
// sent to. Pools that implement Sender take Ops; the others are called
// through their synchronous pool.Pool methods (see internal/quorum).
package node

import (
	"errors"
	"time"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Kind names the lock operation an Op runs.
type Kind uint8

// The operations, one per method of pool.Pool that changes or reads a lock.
const (
	Acquire       Kind = iota // SET key token NX PX ttl: Int 1 when set, 0 when taken
	AcquireFenced             // acquire script: Int = new counter, 0 when taken
	RaiseFence                // raise-fence script: Int 1 while key holds token
	Extend                    // extend script: Int 1 when the TTL was set
	Release                   // release script: Int 1 when deleted
	Get                       // GET key: Str, "" when absent
)

// Op is one command for every node of a round. It must not change once sent.
type Op struct {
	Kind     Kind
	Key      string
	FenceKey string
	Token    string
	TTL      time.Duration
	Fence    uint64

	// Background marks work nobody waits for (releases of late replies,
	// with a long deadline): a Pool queues it apart from the rounds'
	// commands, so that it never holds them up.
	Background bool

	// Args is the Redis command (EVALSHA for the scripts), built once by
	// New and shared by the nodes' commands.
	Args []any
}

// Result is one node's answer to an Op.
type Result struct {
	Int int64  // Acquire..Release (see Kind)
	Str string // Get
	Err error  // the node gave no definite answer (see pool.Pool)
}

// Receiver takes results. Deliver is called exactly once per Send, from a
// goroutine of the Pool (or of Send's caller, when the Pool fails at once);
// it must not block: it may queue more sends, but not wait for them.
type Receiver interface {
	Deliver(tag int, r Result)
}

// Sender is implemented by Pools that queue Ops rather than run each call on
// the caller's goroutine.
type Sender interface {
	// Send queues op and returns at once. The node's answer goes to
	// rcv.Deliver(tag, ...) exactly once: the reply, an error (the node
	// failed, the deadline passed during I/O, the Pool was closed), or
	// ErrNotSent when the deadline passed before op was written. A reply is
	// delivered even after the deadline when it arrived by then.
	Send(op *Op, deadline time.Time, rcv Receiver, tag int)
}

// ErrNotSent is the error of an Op whose deadline passed while it waited in
// a Pool's queue: it was never written, so it changed nothing on the node.
var ErrNotSent = errors.New("not sent: the deadline passed while the command waited to be written")

// Boxed constants of the commands, so that building Args does not allocate
// for them.
var (
	argSet, argPX, argNX, argGet, argEvalSha any = "set", "px", "nx", "get", "evalsha"

	shaAcquireFenced any = scripts.AcquireFenced.Hash()
	shaRaiseFence    any = scripts.RaiseFence.Hash()
	shaExtend        any = scripts.Extend.Hash()
	shaRelease       any = scripts.Release.Hash()
)

// New returns op with its Args built.
func New(op Op) *Op {
	o := &op
	ms := func() any { return op.TTL.Milliseconds() }
	switch op.Kind {
	case Acquire:
		o.Args = []any{argSet, op.Key, op.Token, argPX, ms(), argNX}
	case AcquireFenced:
		o.Args = []any{argEvalSha, shaAcquireFenced, 2, op.Key, op.FenceKey, op.Token, ms()}
	case RaiseFence:
		o.Args = []any{argEvalSha, shaRaiseFence, 2, op.Key, op.FenceKey, op.Token, op.Fence}
	case Extend:
		o.Args = []any{argEvalSha, shaExtend, 1, op.Key, op.Token, ms()}
	case Release:
		o.Args = []any{argEvalSha, shaRelease, 1, op.Key, op.Token}
	case Get:
		o.Args = []any{argGet, op.Key}
	}
	return o
}
