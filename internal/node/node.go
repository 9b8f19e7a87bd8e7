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
	"context"
	"errors"
	"time"
)

// Kind names the lock operation an Op runs.
type Kind uint8

// The operations, one per method of pool.Pool that changes or reads a lock.
const (
	Acquire        Kind = iota // acquire script: Int 1 when the key holds token, 0 when taken
	AcquireFenced              // acquire script: Int = new counter, 0 when taken
	RaiseFence                 // raise-fence script: Int 1 while key holds token
	Extend                     // extend script: Int 1 when the TTL was set
	Release                    // release script: Int 1 when deleted
	Get                        // GET key: Str, "" when absent
	ExtendMany                 // extend script over Keys and Tokens: Str, one '1' or '0' per key
	AcquireSession             // session acquire script: Int = the session's incarnation, 0 when taken
	RenewSession               // session renewal script: Int 1 while the session key holds Token
	Peek                       // peek script: Str, the token that holds key, "" when it is free
	Leave                      // leave script (Waiter, Grace): Int 1 when the key had been handed to Waiter
	Resume                     // resume script: Int 1 when the TTL was set, -1 for a session lock of Token, else 0
	Inspect                    // inspect script (FenceKey): Str, read with ParseInspect
	AcquireAll                 // multi-key acquire script over Keys (FenceKey: fenced): Int 1 or the counter, 0 when taken
	ReleaseAll                 // multi-key release script over Keys (Grace): Int 1 when every key held Token
	HeldAll                    // multi-key check over Keys: Int 1 when every key holds Token
	AcquireShared              // shared acquire script: Int 1 when Token is a shared holder, 0 when taken
	ExtendShared               // shared extend script: Int 1 when Token is a live shared holder
	ReleaseShared              // shared release script (Grace): Int 1 when Token was a live shared holder
	HeldShared                 // shared check: Int 1 when Token is a live shared holder
	AcquirePermit              // semaphore permit script over Keys (count key, permit keys), Slot, Permits: Int 1 held, 0 taken, minus the declared count on a mismatch; Str one '1' per free permit
	ExtendPermit               // permit extend script (Key, FenceKey the count key, Permits): Int 1 when the TTL was set
)

// Op is one command for every node of a round. It must not change once sent.
type Op struct {
	Kind     Kind
	Key      string
	FenceKey string
	Token    string
	TTL      time.Duration
	Fence    uint64

	// Values is the context of the call that sent the command, for its
	// values only: a Pool that writes the command on a goroutine of its
	// own passes them to go-redis (hooks read them) under a context of its
	// own, whose deadline is the command's plus Follow. Nil: no values.
	Values context.Context

	// Background marks work nobody waits for (releases of late replies,
	// with a long deadline): a Pool queues it apart from the rounds'
	// commands, so that it never holds them up.
	Background bool

	// Follow is how long after its deadline a command that was written is
	// still waited for on its connection: the round has stopped waiting,
	// but the command may still run, and only its reply tells whether it
	// did (see Sender). 0: until the deadline only.
	Follow time.Duration

	// WriteLate marks a command that is harmless whenever it lands (a
	// release: it deletes only a key that still holds Token): a Pool that
	// queues commands writes it until deadline + Follow, not only until
	// deadline. Left unwritten, it would have to be sent again; written
	// late, its reply, which is followed, tells its fate.
	WriteLate bool

	// Keys and Tokens are the locks of an ExtendMany, as command
	// arguments (Key and Token are unused). For the multi-key kinds
	// (AcquireAll, ReleaseAll, HeldAll, and a RaiseFence of a multi-key
	// lock), Keys are the lock's keys, Key the first of them.
	Keys, Tokens []any

	// Permits is a semaphore's number of permits, Slot the permit an
	// AcquirePermit takes (0-based; Key is its key, Keys the count key
	// and then every permit's key). An ExtendPermit's count key is
	// FenceKey.
	Permits, Slot int

	// Session is an AcquireSession's session key, Seq the node's
	// incarnation sequence, KeyTTL the lock key's own TTL, PrefixLen the
	// length of the prefix the session key is named under. (A
	// RenewSession's session key is Key, its incarnation Token.)
	Session, Seq string
	KeyTTL       time.Duration
	PrefixLen    int

	// Waiter, Rank, LineTTL and InLine make an acquire a waiter's of
	// Lock (Waiter "": none): taken, it joins the key's line ranked Rank
	// (µs), its entry living LineTTL; free or handed to it, it takes the
	// key and leaves the line (when InLine: it may be in it). Grace makes a
	// Release hand the key to the first waiter for that long (0: no
	// hand-off), and its Waiter (the lock's, if it waited) leave the line
	// for good for LineTTL; a Leave takes Waiter out of the line for good
	// for LineTTL and hands the key on for Grace if it had been handed to
	// Waiter, telling the next waiter if Tell. (internal/scripts/lib.lua)
	Waiter  string
	Rank    int64
	LineTTL time.Duration
	InLine  bool
	Grace   time.Duration
	Tell    bool

	// KeyArg and TokenArg are Key and Token as command arguments. Build
	// boxes them when they are nil; an Op for the same key and token may
	// take them from an earlier one, to save the allocations.
	KeyArg, TokenArg any

	// Args is the Redis command (EVALSHA for the scripts), built once by
	// Build and shared by the nodes' commands.
	Args []any
	argv [14]any // Args' storage
}

// Result is one node's answer to an Op.
type Result struct {
	Int int64  // Acquire..Release, AcquireSession, RenewSession, AcquirePermit (see Kind)
	Str string // Get: the value; Peek: the token; ExtendMany: one '1' or '0' per key; Release with a Grace: the waiter the key was handed to

	Err error // the node gave no definite answer (see pool.Pool)
}

// Receiver takes results. Deliver is called exactly once per Send, from a
// goroutine of the Pool (or of Send's caller, when the Pool fails at once);
// it must not block: it may queue more sends, but not wait for them.
type Receiver interface {
	Deliver(tag int, r Result)
}

// StallClocked is implemented by Pools whose waits for a server keep the
// stall clock (internal/stall): they do not count the time the process
// stood still. A Pool that wraps another forwards it.
type StallClocked interface {
	KeepsStallClock() bool
}

// Sender is implemented by Pools that queue Ops rather than run each call on
// the caller's goroutine.
type Sender interface {
	// Send queues op and returns at once. The node's answer goes to
	// rcv.Deliver(tag, ...) exactly once: the reply, an error (the node
	// failed, the connection broke, no reply came by deadline + op.Follow,
	// the Pool was closed), or ErrNotSent when the deadline (deadline +
	// op.Follow for an op.WriteLate) passed before op was written. A command that was written is followed on its own
	// connection until deadline + op.Follow: its reply is delivered even
	// after deadline, and the commands queued behind it are not held up.
	// That bound does not count the time the process stood still
	// (internal/stall), and a command that waits for its connection's
	// set-up waits until the Pool's set-up budget ends if that is later.
	Send(op *Op, deadline time.Time, rcv Receiver, tag int)
}

// WriteBy returns until when a Pool that queues commands may write op,
// sent with deadline: deadline, or deadline + op.Follow for an
// op.WriteLate.
func WriteBy(op *Op, deadline time.Time) time.Time {
	if op.WriteLate {
		return deadline.Add(op.Follow)
	}
	return deadline
}

// ErrNotSent is the error of an Op whose deadline passed while it waited in
// a Pool's queue: it was never written, so it changed nothing on the node.
var ErrNotSent = errors.New("not sent: the deadline passed while the command waited to be written")

// New returns op with its Args built.
func New(op Op) *Op {
	o := &op
	o.Build()
	return o
}

// Subscriber is implemented by Pools that can deliver the release
// notifications the release script publishes (on the channel named after
// the lock key, the released token as the message). It is optional: a
// Client whose Pools lack it polls.
type Subscriber interface {
	// Subscribe opens a subscription, subscribed to no channel yet, whose
	// events go to h on a goroutine of the subscription. The subscription
	// connects in the background; setup bounds each of its connection
	// setups (dial, handshake, the Pool's connection checks), after which
	// it is dropped and tried again.
	Subscribe(h Handler, setup time.Duration) Subscription
}

// Handler takes a subscription's events; its functions must not block.
type Handler struct {
	// Published receives a message.
	Published func(channel, message string)
	// Subscribed tells that the node confirmed a subscription to channel:
	// messages published from then on are delivered. It is called again
	// when the subscription connects anew (it missed what was published
	// meanwhile).
	Subscribed func(channel string)
}

// Subscription is one node's subscription, shared by all the waiters of a
// Client. Its methods are safe for concurrent use. Messages sent while the
// connection is down are lost; it reconnects and resubscribes by itself.
type Subscription interface {
	Add(ctx context.Context, channels ...string) error
	Remove(ctx context.Context, channels ...string) error
	// Close ends the subscription and joins its goroutine. It does not
	// wait for a connection setup in progress to finish: it ends it, or,
	// where the Pool cannot, waits at most for the setup bound.
	Close() error
}
