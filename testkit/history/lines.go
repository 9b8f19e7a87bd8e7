package history

import (
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

// LineKind is what a command of a waiter of Lock does to the key's line.
type LineKind uint8

// The kinds of a waiter's commands.
const (
	// LineAttempt is an acquire sent for a waiter: told "taken", the node
	// puts the waiter in the key's line (or keeps its place) for
	// LineCmd.TTL; one that takes the key takes the waiter out.
	LineAttempt LineKind = iota + 1
	// LineLeave takes the waiter out of the line for good (its Lock call
	// ended, or it took the lock without that node).
	LineLeave
	// LineRelease is the release of the lock the waiter took, which takes
	// it out of the line for good.
	LineRelease
)

// LineAnswer is what a node answered to a waiter's command.
type LineAnswer uint8

// The answers to a waiter's command.
const (
	// Taken: the node ran an attempt and answered that the key is taken:
	// the waiter is in its line (unless the line was full).
	Taken LineAnswer = iota + 1
	// Took: the node ran an attempt and answered yes: the waiter took the
	// key there, and left the line.
	Took
	// NotSent: the command was never written (queued past its deadline, a
	// failed dial): it never runs.
	NotSent
	// Unknown: an error that leaves the command's fate open (a timeout, a
	// reset connection), or an error reply.
	Unknown
)

// LineCmd is one command of a waiter of Lock (Client.Lock of one key, held
// alone, over Pools that keep lines: docs/design.md, "Hand-off") to one
// node, as its client saw it: RecordReplies records them all. Start is just
// before the command was sent, End just after its answer; the command ran,
// if it did, in between.
type LineCmd struct {
	Client string
	Node   int
	Key    string // the Redis key
	Waiter string // the waiter's name on the nodes
	Token  string // an attempt's token; "" for a leave
	Kind   LineKind
	Answer LineAnswer
	// TTL is how long after an attempt runs the node keeps the waiter's
	// entry (node.Op.LineTTL), on the node's clock.
	TTL        time.Duration
	Start, End time.Duration
}

// AddLineCmd records a command of a waiter of Lock (WF). RecordReplies
// records them; tests that build a history by hand call it.
func (h *History) AddLineCmd(c LineCmd) { add(h, &h.lines, c) }

// lineCmd returns the LineCmd of op, answered res, if op is a waiter's.
func lineCmd(op *node.Op, res node.Result) (LineCmd, bool) {
	c := LineCmd{Key: op.Key, Waiter: op.Waiter, TTL: op.LineTTL}
	switch {
	case op.Waiter == "":
		return c, false
	case op.Kind == node.Leave:
		c.Kind = LineLeave
	case op.Kind == node.Release:
		c.Kind = LineRelease
	case op.Kind == node.Acquire, op.Kind == node.AcquireFenced, op.Kind == node.AcquireSession:
		c.Kind, c.Token = LineAttempt, op.Token
	default:
		return c, false
	}
	c.Answer = answerOf(op.Kind, res)
	return c, true
}

// answerOf classifies a waiter's command's answer.
func answerOf(k node.Kind, res node.Result) LineAnswer {
	switch {
	case res.Err != nil && neverSent(res.Err):
		return NotSent
	case res.Err != nil:
		return Unknown
	case k == node.Acquire && res.Int == 1, k != node.Acquire && res.Int > 0:
		return Took
	}
	return Taken
}

// neverSent reports whether err says the command was never written: queued
// past its deadline (node.ErrNotSent) or a failed dial.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.Is(err, node.ErrNotSent) || errors.As(err, &op) && op.Op == "dial"
}

// errorReply reports whether err is a node's error reply (redis.Error),
// not the nil reply go-redis also types so.
func errorReply(err error) bool {
	var re redis.Error
	return err != nil && !errors.Is(err, redis.Nil) && errors.As(err, &re)
}
