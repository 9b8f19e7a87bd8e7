package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/lease"
	"github.com/quorumlock/quorumlock/internal/node"
)

var (
	// ErrNotAcquired is matched (with errors.Is) by every error of TryLock
	// and Lock that means "the lock is not yours": another holder has it,
	// too few nodes answered in time, no validity was left, or the wait
	// ended. Errors from bad input, a closed Client or misconfigured pools
	// do not match it.
	ErrNotAcquired = errors.New("redlock: lock not acquired")
	// ErrNotHeld is matched by errors of Extend, Release, Held and
	// Client.Resume when a quorum of nodes did not confirm the lock's
	// token: the lock expired, another client holds it now, or too many
	// nodes failed (the *QuorumError tells which).
	ErrNotHeld = errors.New("redlock: lock not held")
	// ErrLockLost is returned by Extend once the lock's validity has run
	// out on the local clock, or once a quorum of nodes said they no longer
	// hold its token: the lock cannot be extended back to life.
	ErrLockLost = lease.ErrLost
	// ErrReleased is returned by Release and Extend on a lock that this
	// handle (or Client.Close) has already released. Held returns false
	// and no error for such a lock.
	ErrReleased = lease.ErrReleased
	// ErrClosed is returned by every operation of a Client after Close.
	ErrClosed = errors.New("redlock: client closed")
	// ErrUnavailable is matched by a *QuorumError (with errors.Is) when so
	// many nodes failed (an error, a timeout, or not asked) that no quorum
	// could have been reached even had every other node said yes: the
	// lock service is unavailable, which "taken" or "not held" is not.
	// A round decided before every node answered counts only the failures
	// it saw; an acquire round that the caller's context ended before the
	// node timeout does not match it, nor does one that matches ErrAuth
	// (the nodes answered, refusing this Client).
	ErrUnavailable = errors.New("redlock: too few nodes answered")
	// ErrAuth is matched by a *QuorumError (with errors.Is) when so many
	// nodes refused this Client's credentials or rights (WRONGPASS,
	// NOAUTH, NOPERM, or the protocol error a server gives a connection
	// that did not authenticate) that the others could not have made a
	// quorum: a configuration error, not an outage. Lock, LockAll, Do and
	// a semaphore's Acquire and Do return it at once instead of retrying;
	// a failed acquire's error still matches ErrNotAcquired too. A refusal
	// by fewer nodes is no error: it is logged once per node (WithLogger).
	ErrAuth = errors.New("redlock: refused by the nodes: check the pools' password, user and ACL rules")
)

// Outcome is what one node did in one operation.
type Outcome uint8

const (
	// OutcomePending: the node had not answered when the outcome was
	// already certain; its late answer is still handled (a late "yes" on a
	// failed acquire is released, on a won one it counts for the lock).
	OutcomePending Outcome = iota
	// OutcomeOK: the node did what was asked.
	OutcomeOK
	// OutcomeTaken: on acquire, another token holds the key on this node.
	OutcomeTaken
	// OutcomeNotHeld: on extend, release or held, the key is absent on this
	// node or holds another token.
	OutcomeNotHeld
	// OutcomeError: the node answered with an error or the call failed.
	OutcomeError
	// OutcomeTimeout: no answer within the per-node timeout, also when the
	// command could not even be written by then (Err says "not sent").
	OutcomeTimeout
	// OutcomeNotAsked: the node was not asked, because its identity (INFO
	// server run_id) is not verified yet; Err says why.
	OutcomeNotAsked
)

var outcomeNames = [...]string{"pending", "ok", "taken", "not held", "error", "timeout", "not asked"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", o)
}

// NodeResult is one node's part in an operation.
type NodeResult struct {
	Node    string        // the pool's name
	Outcome Outcome       // what the node did
	Err     error         // the node's error, for OutcomeError, OutcomeTimeout and OutcomeNotAsked
	Latency time.Duration // from the start of the operation to the node's answer; 0 if none came
}

// QuorumError reports an operation that missed its quorum, with each node's
// outcome (errors.As gets it). It matches ErrNotAcquired for an acquire,
// ErrNotHeld for an extend, release, held or resume, never the nodes' errors.
type QuorumError struct {
	Op      string        // "acquire", "extend", "release", "held", "resume" or "locked"
	Phase   string        // "" or, for an acquire that failed writing its fencing token back, "fence write-back"
	Key     string        // the lock's key as the caller named it (without prefix)
	Quorum  int           // nodes needed
	Nodes   []NodeResult  // one per pool, in the order given to New
	Elapsed time.Duration // how long the operation took up to its decision
	// Validity is what was left of the TTL when a quorum agreed but the
	// round took too long (zero or negative); zero otherwise.
	Validity time.Duration
	// TTL is the TTL the operation's command set on the nodes that ran it
	// (an acquire's, an extend's, a resume's); zero for the others.
	TTL time.Duration

	cut bool // the caller's context ended the round: its failures say nothing of the nodes
}

// Agreed is the number of nodes with OutcomeOK.
func (e *QuorumError) Agreed() int { return e.count(OutcomeOK) }

func (e *QuorumError) count(o Outcome) int {
	n := 0
	for _, r := range e.Nodes {
		if r.Outcome == o {
			n++
		}
	}
	return n
}

// gone reports whether more nodes than a quorum can spare said they do not
// hold the token: the lock has expired or belongs to someone else.
func (e *QuorumError) gone() bool { return e.count(OutcomeNotHeld) > len(e.Nodes)-e.Quorum }

func (e *QuorumError) Error() string {
	var b strings.Builder
	refusal := e.refusedQuorum()
	if refusal {
		e.writeRefusal(&b)
	} else {
		e.writeSummary(&b)
	}
	sep := " ("
	for _, r := range e.Nodes {
		if r.Outcome == OutcomeOK {
			continue
		}
		b.WriteString(sep)
		sep = "; "
		b.WriteString(r.Node)
		switch {
		case r.Outcome == OutcomePending:
			b.WriteString(" not waited for: the round was decided without it")
		case r.Outcome == OutcomeTimeout:
			fmt.Fprintf(&b, " timeout after %v", r.Latency.Round(time.Microsecond))
		case r.Err != nil && refusal && node.AuthRefusal(r.Err) != "": // said above
			fmt.Fprintf(&b, " %s: %s", r.Outcome, replyText(r.Err))
		case r.Err != nil:
			fmt.Fprintf(&b, " %s: %s", r.Outcome, nodeErrText(r.Err))
		default:
			fmt.Fprintf(&b, " %s", r.Outcome)
		}
	}
	if sep == "; " {
		b.WriteByte(')')
	}
	return b.String()
}

// writeSummary writes how many nodes agreed, of how many needed.
func (e *QuorumError) writeSummary(b *strings.Builder) {
	verb := "confirmed the token"
	switch e.Op {
	case "acquire":
		verb = "agreed"
	case "locked":
		verb = "answered"
	}
	if e.Phase != "" {
		verb = "confirmed the token"
		fmt.Fprintf(b, "redlock: %s %q (%s): %d of %d nodes %s", e.Op, e.Key, e.Phase, e.Agreed(), len(e.Nodes), verb)
	} else {
		fmt.Fprintf(b, "redlock: %s %q: %d of %d nodes %s", e.Op, e.Key, e.Agreed(), len(e.Nodes), verb)
	}
	if e.Op == "locked" {
		fmt.Fprintf(b, ", too few to tell whether one token is on %d", e.Quorum)
	} else if e.Agreed() >= e.Quorum {
		fmt.Fprintf(b, " but the round took %v, leaving no validity (%v)", e.Elapsed.Round(time.Microsecond), e.Validity)
	} else {
		fmt.Fprintf(b, ", %d needed", e.Quorum)
	}
}

// Is reports whether target is ErrAuth or ErrUnavailable and the operation
// failed as that error's doc says (a round ctx cut short is not unavailable).
func (e *QuorumError) Is(target error) bool {
	if target == ErrAuth {
		return e.refusedQuorum()
	}
	if target != ErrUnavailable || e.cut || e.refusedQuorum() {
		return false
	}
	failed := e.count(OutcomeError) + e.count(OutcomeTimeout) + e.count(OutcomeNotAsked)
	return failed > len(e.Nodes)-e.Quorum
}

// Unwrap returns ErrNotAcquired for a failed acquire and ErrNotHeld for a
// failed extend, release, held check or resume.
func (e *QuorumError) Unwrap() error {
	switch e.Op {
	case "acquire":
		return ErrNotAcquired
	case "extend", "release", "held", "resume":
		return ErrNotHeld
	}
	return nil
}

// withCaller is err, which also wraps the caller's error when ctx ended
// (callerErr): the caller stopped waiting, and errors.Is finds both.
func withCaller(ctx context.Context, err error) error {
	if cerr := callerErr(ctx); cerr != nil {
		return fmt.Errorf("%w: %w", err, cerr)
	}
	return err
}
