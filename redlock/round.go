package redlock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
)

// The round engine: every operation (acquire, fence write-back, extend,
// release, held) is one entry of the table below and runs through run and
// settle. A round sends one command to the nodes, counts their votes as the
// replies arrive and stops as soon as the outcome is certain. The commands
// it stopped waiting for are followed (node.Op.Follow): their replies still
// arrive, and the operation's late handler decides what they mean
// (docs/design.md, "Every command's fate").

// opSpec is one operation as the engine runs it.
type opSpec struct {
	name string                               // in errors: "acquire", "extend", ...
	kind node.Kind                            // the command
	yes  func(rep quorum.Reply, l *Lock) bool // whether a reply confirms
	no   Outcome                              // what a reply that does not confirm means
	// decisive: keep reading while enough "no" replies could still
	// arrive to prove the lock gone (extend, held); acquire and release
	// stop once a quorum of yes is out of reach.
	decisive bool
	// unfollowed: a reply after the round's deadline is of no use and
	// its command harmless whenever it lands (renewals), so it is not
	// waited for past the deadline.
	unfollowed bool
	// writeLate: the command is harmless whenever it lands (releases:
	// they delete only a key that still holds the token), so a Pool that
	// queues it writes it until the deadline + Follow (node.Op.WriteLate)
	// rather than leave it unwritten to be sent again.
	writeLate bool
}

var (
	opAcquire    = &opSpec{name: "acquire", kind: node.Acquire, yes: intPositive, no: OutcomeTaken}
	opFenced     = &opSpec{name: "acquire", kind: node.AcquireFenced, yes: intPositive, no: OutcomeTaken}
	opSession    = &opSpec{name: "acquire", kind: node.AcquireSession, yes: intPositive, no: OutcomeTaken}
	opRaise      = &opSpec{name: "acquire", kind: node.RaiseFence, yes: intPositive, no: OutcomeNotHeld}
	opExtend     = &opSpec{name: "extend", kind: node.Extend, yes: intPositive, no: OutcomeNotHeld, decisive: true}
	opRelease    = &opSpec{name: "release", kind: node.Release, yes: intPositive, no: OutcomeNotHeld, decisive: true, writeLate: true}
	opHeld       = &opSpec{name: "held", kind: node.Get, yes: holdsToken, no: OutcomeNotHeld, decisive: true}
	opPeek       = &opSpec{name: "held", kind: node.Peek, yes: holdsToken, no: OutcomeNotHeld, decisive: true}
	opLocked     = &opSpec{name: "locked", kind: node.Get}                          // voted by round.tallyTokens
	opLockedPeek = &opSpec{name: "locked", kind: node.Peek}                         // the same, when session locks were met
	opExtendMany = &opSpec{name: "extend", kind: node.ExtendMany, unfollowed: true} // voted per lock by renewal.settle

	// A lock of several keys (TryLockAll): one command covers every key.
	opAcquireAll = &opSpec{name: "acquire", kind: node.AcquireAll, yes: intPositive, no: OutcomeTaken}
	opExtendAll  = &opSpec{name: "extend", kind: node.ExtendMany, yes: everyKey, no: OutcomeNotHeld, decisive: true}
	opReleaseAll = &opSpec{name: "release", kind: node.ReleaseAll, yes: intPositive, no: OutcomeNotHeld, decisive: true, writeLate: true}
	opHeldAll    = &opSpec{name: "held", kind: node.HeldAll, yes: intPositive, no: OutcomeNotHeld, decisive: true}

	// A shared holder (Shared).
	opAcquireShared = &opSpec{name: "acquire", kind: node.AcquireShared, yes: intPositive, no: OutcomeTaken}
	opExtendShared  = &opSpec{name: "extend", kind: node.ExtendShared, yes: intPositive, no: OutcomeNotHeld, decisive: true}
	opReleaseShared = &opSpec{name: "release", kind: node.ReleaseShared, yes: intPositive, no: OutcomeNotHeld, decisive: true, writeLate: true}
	opHeldShared    = &opSpec{name: "held", kind: node.HeldShared, yes: intPositive, no: OutcomeNotHeld, decisive: true}

	// A semaphore's permit (Client.Semaphore): released and checked as a
	// lock of its key.
	opAcquirePermit = &opSpec{name: "acquire", kind: node.AcquirePermit, yes: intPositive, no: OutcomeTaken}
	opExtendPermit  = &opSpec{name: "extend", kind: node.ExtendPermit, yes: intPositive, no: OutcomeNotHeld, decisive: true}
)

func intPositive(rep quorum.Reply, _ *Lock) bool { return rep.Int > 0 }

func holdsToken(rep quorum.Reply, l *Lock) bool { return rep.Str == l.id.token }

// everyKey: an ExtendMany of one lock's keys confirms when every key held
// the token.
func everyKey(rep quorum.Reply, _ *Lock) bool {
	return rep.Str != "" && strings.Trim(rep.Str, "1") == ""
}

// round is one operation's fan-out and its tally. Owned by one goroutine.
type round struct {
	c     *Client
	cfg   *conf.Config
	spec  *opSpec
	l     *Lock // the lock the round is about; nil for acquire rounds
	r     *quorum.Round
	op    *node.Op
	res   []NodeResult
	q     int
	start time.Time
	out   []bool // nodes asked whose reply settle has not taken
	outv  [8]bool
	yes   int  // replies that confirmed
	no    int  // replies that did not (spec.no)
	fail  int  // errors
	cut   bool // the caller's deadline comes before the node timeout's
	// chained[i]: the command to node i waits for the lock's acquire there
	// to answer, and Lock.late sends it then, or, once the round has ended,
	// takes over what it was for (nil: no node waits).
	chained []bool
}

// send is what one round sends: spec's command o, about the lock l (nil:
// none), to the nodes i with ask[i] (nil: every node) whose identity is
// verified, through call for the Pools that do not queue commands (nil:
// the Client's). It holds no function called only during run (an ask as a
// function would escape with the struct).
type send struct {
	spec *opSpec
	o    node.Op
	l    *Lock
	ask  []bool
	call quorum.Call
}

// run starts a round of s with the per-node timeout. A round about a lock
// holds back the nodes whose acquire command has not answered yet and
// sends to each as soon as it has (see Lock.chain): no command of a lock
// overtakes its SET.
func (c *Client) run(ctx context.Context, cfg *conf.Config, s send) *round {
	spec, l, o := s.spec, s.l, s.o
	rd := &round{c: c, cfg: cfg, spec: spec, l: l, res: c.newResults(), q: cfg.QuorumOf(len(c.pools)), start: time.Now()}
	if d, ok := ctx.Deadline(); ok && d.Before(rd.start.Add(cfg.NodeTimeout)) {
		rd.cut = true
	}
	if n := len(c.pools); n <= len(rd.outv) {
		rd.out = rd.outv[:n]
	} else {
		rd.out = make([]bool, n)
	}
	o.Kind, o.Follow, o.Values, o.WriteLate = spec.kind, cfg.Follow(), ctx, spec.writeLate
	if spec.unfollowed {
		o.Follow = 0
	}
	op := &o
	op.Build()
	rd.op = op
	var hold []bool
	if l != nil {
		hold = l.landingNow()
	}
	call := s.call
	if call == nil {
		call = c.call
	}
	rd.r = quorum.Start(ctx, quorum.Plan{WG: &c.wg, Timeout: cfg.NodeTimeout, N: len(c.pools), Ask: rd.asking(s.ask), Hold: hold,
		Senders: c.senders, Op: op, Call: call})
	if hold != nil {
		rd.chained = l.chain(rd, hold)
	}
	return rd
}

// lateOwns reports whether rep is a held-back node's command that was
// never sent because the round had ended (see chained): Lock.late, which
// saw the acquire's answer there, took over what the command was for.
func (rd *round) lateOwns(rep quorum.Reply) bool {
	return rd.chained != nil && rd.chained[rep.Node] && errors.Is(rep.Err, quorum.ErrHeldBack)
}

// asking records in rd.out the nodes the round asks, and returns them (nil:
// every node): those ask selects (nil: all) whose identity is verified; the
// others ask selects show in rd.res as not asked, with why.
func (rd *round) asking(ask []bool) []bool {
	ids := rd.c.ids
	all := ids.AllVerified()
	for i := range rd.out {
		rd.out[i] = ask == nil || ask[i]
		if rd.out[i] && !all && !ids.Verified(i) {
			rd.out[i] = false
			rd.res[i].Outcome, rd.res[i].Err = OutcomeNotAsked, ids.Why(i)
		}
	}
	if ask == nil && all {
		return nil
	}
	return rd.out
}

// voter sees every reply settle takes, with whether it confirmed.
type voter interface {
	vote(rep quorum.Reply, yes bool)
}

// settle reads replies until the outcome is certain: a quorum confirmed, a
// quorum can no longer confirm (for decisive specs: and no more "no"
// replies could prove the lock gone), or the round ended. each, if not nil,
// sees every reply settle takes.
func (rd *round) settle(each voter) {
	for {
		rep, yes, ok := rd.next()
		if !ok {
			return
		}
		if each != nil {
			each.vote(rep, yes)
		}
	}
}

// next takes and counts the next reply while the outcome is not certain
// (see settle), and says whether it confirmed; ok is false once the
// outcome is certain or the round has ended. A caller that tallies the
// replies itself loops on next rather than passing settle a voter: a voter
// on the stack escapes through the interface call.
func (rd *round) next() (rep quorum.Reply, yes, ok bool) {
	n, pending := len(rd.res), rd.r.Pending()
	if pending == 0 || rd.yes >= rd.q || rd.no > n-rd.q {
		return rep, false, false
	}
	if rd.yes+pending < rd.q && (!rd.spec.decisive || rd.no+pending <= n-rd.q) {
		return rep, false, false
	}
	if rep, ok = rd.r.Next(); !ok {
		return rep, false, false
	}
	rd.out[rep.Node] = false
	yes = rep.Err == nil && rd.spec.yes(rep, rd.l)
	rd.note(rep)
	switch {
	case rep.Err != nil:
		rd.res[rep.Node] = failedResult(rep.Node, rd.c, rep.Err, rep.Latency)
		rd.fail++
	case yes:
		rd.res[rep.Node] = NodeResult{Node: rd.res[rep.Node].Node, Outcome: OutcomeOK, Latency: rep.Latency}
		rd.yes++
	default:
		rd.res[rep.Node] = NodeResult{Node: rd.res[rep.Node].Node, Outcome: rd.spec.no, Latency: rep.Latency}
		rd.no++
	}
	return rep, yes, true
}

// note tells the Client's health log of a reply of the round, taken by
// next or arriving late: an answer ends its node's outage, a failure may
// begin one. A timeout of a round the caller's short deadline cut is no
// outage.
func (rd *round) note(rep quorum.Reply) {
	h := rd.c.health
	if h == nil {
		return
	}
	switch {
	case rep.Err == nil:
		h.Answered(rep.Node)
	case !rd.cut || !node.TimedOut(rep.Err):
		h.Failed(rep.Node, rep.Err)
	}
}

// finish ends the round as quorum.Round.Finish does, handing replies that
// arrive later to late (if not nil), and to the health log, so that a node
// whose replies come after the rounds' decisions is still seen to fail, or
// to answer again. A late command never written (node.ErrNotSent) says
// nothing of its node: the round no longer waited for it.
func (rd *round) finish(late func(quorum.Reply)) {
	if rd.c.health == nil {
		rd.r.Finish(late)
		return
	}
	rd.r.Finish(func(rep quorum.Reply) {
		if !errors.Is(rep.Err, node.ErrNotSent) {
			rd.note(rep)
		}
		if late != nil {
			late(rep)
		}
	})
}

// won reports whether a quorum confirmed; gone whether so many nodes said
// "no" that a quorum can never confirm.
func (rd *round) won() bool  { return rd.yes >= rd.q }
func (rd *round) gone() bool { return rd.no > len(rd.res)-rd.q }

// quorumError describes the round's failure, marking the nodes that had not
// answered when it ended.
func (rd *round) quorumError(key string) *QuorumError {
	elapsed := time.Since(rd.start)
	markUnanswered(rd.res, rd.r.Err(), elapsed)
	return &QuorumError{Op: rd.spec.name, Key: key, Quorum: rd.q, Nodes: rd.res, Elapsed: elapsed, TTL: rd.op.TTL}
}

// newResults returns one NodeResult per pool, named and pending.
func (c *Client) newResults() []NodeResult {
	res := make([]NodeResult, len(c.pools))
	for i, p := range c.pools {
		res[i].Node = p.Name()
	}
	return res
}

// failedResult classifies a node's error as a timeout or an error. A command
// whose deadline passed before it could be written (the node's connection
// was stuck behind earlier commands: a frozen node) got no answer in time
// either: a timeout.
func failedResult(i int, c *Client, err error, latency time.Duration) NodeResult {
	o := OutcomeError
	if node.TimedOut(err) {
		o = OutcomeTimeout
	}
	return NodeResult{Node: c.pools[i].Name(), Outcome: o, Err: err, Latency: latency}
}

// markUnanswered sets the outcome of nodes still pending when the round ended:
// timeout when its deadline passed, error when the caller's context was
// cancelled; nodes merely not needed stay pending.
func markUnanswered(res []NodeResult, roundErr error, elapsed time.Duration) {
	for i := range res {
		if res[i].Outcome != OutcomePending {
			continue
		}
		switch {
		case errors.Is(roundErr, context.DeadlineExceeded):
			res[i].Outcome, res[i].Err, res[i].Latency = OutcomeTimeout, roundErr, elapsed
		case roundErr != nil:
			res[i].Outcome, res[i].Err = OutcomeError, roundErr
		}
	}
}

// callerErr is ctx.Err() after a round that ctx may have ended: also
// context.DeadlineExceeded when ctx's deadline has passed but ctx has not
// noticed yet. A round ends at the caller's deadline on a timer of its own,
// which can fire just before the context's, and the error must still say
// that the caller's time ran out.
func callerErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
