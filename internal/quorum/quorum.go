// Package quorum fans one command out to every node of a Redlock client in
// parallel and hands the replies back one at a time, so the caller can
// decide as soon as the outcome is certain and leave the stragglers to a
// clean-up function that still sees every reply.
//
// A node whose Pool implements node.Sender gets the command through Send:
// no goroutine, context or timer per node, and the Pool may coalesce it with
// other rounds' commands. Any other node is called through call on a
// goroutine of its own, with a context that ends at the round's deadline or
// when the parent ends.
//
// A Round is owned by one goroutine: Next and Finish must not be called
// concurrently. The goroutines it starts, and the wait for replies after
// Finish, are counted in the WaitGroup given to Start, so their owner can
// join them.
package quorum

import (
	"context"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// Reply is one node's answer.
type Reply struct {
	Node int // index of the node
	node.Result
	Latency time.Duration // from the start of the round to the reply
}

// Call runs op on node i synchronously, honouring ctx.
type Call func(ctx context.Context, i int, op *node.Op) node.Result

// Round is one fan-out in progress.
type Round struct {
	parent   context.Context
	start    time.Time
	deadline time.Time
	timeout  time.Duration
	replies  chan Reply
	timer    *time.Timer
	mark     time.Duration // stall.Now() at the start
	fireAt   time.Time     // when timer is due (owner only)
	expired  bool          // timer has fired since it was last set (owner only)
	pending  int           // replies not yet taken by Next (owner only)
	err      error         // why Next stopped early (owner only)
	wg       *sync.WaitGroup
	senders  []node.Sender
	op       *node.Op
	call     Call

	mu       sync.Mutex
	finished bool
	left     int // sends not yet delivered, plus Finish's own share while it drains
	late     func(Reply)
	then     func()
	ctx      context.Context    // of calls on goroutines; nil until the first
	cancel   context.CancelFunc // ctx's
}

// Plan is what Start sends, to which nodes, and how.
type Plan struct {
	// WG counts every goroutine Start starts and every round Finish
	// leaves waiting for replies: the caller must hold a count of its own
	// on it while it calls Start and Finish.
	WG      *sync.WaitGroup
	Timeout time.Duration // the round ends at Timeout, or at parent's deadline if that comes first
	N       int           // the nodes are [0, N)
	Ask     []bool        // the nodes to send to: those i with Ask[i] (nil: all)
	// Hold: the asked nodes for which Hold[i] is true are not sent Op
	// yet; they count as pending until Send(i), which must be called once
	// for each of them (while a count is held on WG). Nil: none.
	Hold    []bool
	Senders []node.Sender // per node; where nil (or the slice is), Op goes through Call on a goroutine
	Op      *node.Op
	Call    Call
}

// Start sends p.Op to every node p asks. The round ends at p.Timeout, or at
// parent's deadline if that comes first, or when parent is cancelled; the
// nodes' work goes on until their reply arrives or Op.Follow after that
// deadline (parent's cancellation does not stop it), and replies that
// arrive after the caller decided are handed to Finish's late.
func Start(parent context.Context, p Plan) *Round {
	start := time.Now()
	deadline := start.Add(p.Timeout)
	if d, ok := parent.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	r := &Round{parent: parent, start: start, mark: stall.Now(), deadline: deadline, timeout: p.Timeout, replies: make(chan Reply, p.N), wg: p.WG, senders: p.Senders, op: p.Op, call: p.Call}
	for i := range p.N {
		if p.Ask != nil && !p.Ask[i] {
			continue
		}
		r.pending++
		r.mu.Lock()
		r.left++
		r.mu.Unlock()
		if p.Hold == nil || !p.Hold[i] {
			r.send(i)
		}
	}
	r.timer, r.fireAt = time.NewTimer(time.Until(deadline)), deadline
	return r
}

// ErrHeldBack is the result Send delivers for a node it did not send to:
// the command was never written (it matches node.ErrNotSent).
var ErrHeldBack error = heldBack{}

type heldBack struct{}

func (heldBack) Error() string {
	return "not sent: held back until an earlier command answered, and the round had ended by then"
}

func (heldBack) Is(target error) bool { return target == node.ErrNotSent }

// Send sends op to node i, held back by Plan.Hold, now and reports true; or,
// once the round's deadline has passed or Finish was called (nobody waits
// for the reply any more), delivers ErrHeldBack for it without sending and
// reports false.
func (r *Round) Send(i int) bool {
	r.mu.Lock()
	finished := r.finished
	r.mu.Unlock()
	if finished || !time.Now().Before(stall.Extend(r.deadline, r.mark)) {
		r.Deliver(i, node.Result{Err: ErrHeldBack})
		return false
	}
	r.send(i)
	return true
}

func (r *Round) send(i int) {
	if r.senders != nil && r.senders[i] != nil {
		r.senders[i].Send(r.op, r.deadline, r, i)
		return
	}
	r.mu.Lock()
	if r.ctx == nil {
		// The call outlives the round's wait: it is followed until its
		// own reply (or op.Follow past the deadline), and the caller's
		// cancellation does not cut it off, since a call cut off may
		// still run on the node and then nobody would know.
		r.ctx, r.cancel = context.WithDeadline(context.WithoutCancel(r.parent), r.deadline.Add(r.op.Follow))
	}
	ctx := r.ctx
	r.mu.Unlock()
	r.wg.Go(func() { r.Deliver(i, r.call(ctx, i, r.op)) })
}

// Deliver hands node i's result to the round (node.Receiver). It never
// blocks on the round's owner.
func (r *Round) Deliver(i int, res node.Result) {
	rep := Reply{Node: i, Result: res, Latency: time.Since(r.start)}
	r.mu.Lock()
	if !r.finished {
		r.left--
		r.replies <- rep // never blocks: one slot per node
		r.mu.Unlock()
		return
	}
	late := r.late
	r.mu.Unlock()
	if late != nil {
		late(rep)
	}
	r.done()
}

// done counts one delivery after Finish; the last one ends the round.
func (r *Round) done() {
	r.mu.Lock()
	r.left--
	last := r.left == 0
	r.mu.Unlock()
	if !last {
		return
	}
	r.mu.Lock()
	cancel := r.cancel
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if r.then != nil {
		r.then()
	}
}

// Deadline is when the round stops waiting (see Start).
func (r *Round) Deadline() time.Time { return r.deadline }

// Pending is the number of replies not yet taken by Next.
func (r *Round) Pending() int { return r.pending }

// Next returns the next reply to arrive. It returns false when no reply is
// pending or the round has ended first (its deadline passed or the parent
// was cancelled); Err then tells which. A reply delivered by the time the
// owner sees the deadline pass is still returned. A round whose process
// stood still meanwhile (the scheduler starved it, the runtime stopped it)
// waits longer for replies that may have arrived but not been read or
// handed over: until its deadline moved later by what the process stood
// still since the round began (internal/stall), or, where no stall clock
// runs, one more timeout when the owner saw the deadline pass late by a
// quarter timeout or more; never past op.Follow after the round's
// deadline or past the parent's.
func (r *Round) Next() (Reply, bool) {
	for r.pending > 0 && r.err == nil {
		if !r.expired {
			select {
			case rep := <-r.replies:
				r.pending--
				return rep, true
			case <-r.timer.C:
				r.expired = true
			case <-r.parent.Done():
				r.err = r.parent.Err()
				return Reply{}, false
			}
		}
		select {
		case rep := <-r.replies:
			r.pending--
			return rep, true
		default:
		}
		if !r.grace() {
			r.err = context.DeadlineExceeded
		}
	}
	return Reply{}, false
}

// grace re-arms the timer when the round's process stood still (see Next)
// and reports whether it did.
func (r *Round) grace() bool {
	now := time.Now()
	end := stall.Extend(r.deadline, r.mark)
	if now.Sub(r.fireAt) >= r.timeout/4 {
		end = later(end, now.Add(r.timeout))
	}
	if limit := r.deadline.Add(r.op.Follow); end.After(limit) {
		end = limit
	}
	if d, ok := r.parent.Deadline(); ok && end.After(d) {
		end = d
	}
	if !now.Before(end) || r.parent.Err() != nil {
		return false
	}
	r.timer.Reset(end.Sub(now))
	r.fireAt, r.expired = end, false
	return true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Err is nil while the round is open, context.DeadlineExceeded once the
// timeout (or the parent's deadline) has passed, context.Canceled once the
// parent was cancelled.
func (r *Round) Err() error {
	if r.err != nil {
		return r.err
	}
	if !time.Now().Before(r.deadline) {
		return context.DeadlineExceeded
	}
	return r.parent.Err()
}

// Finish ends the round. Every reply Next has not returned goes to late
// (nil drops them), as it arrives, on the goroutine that delivers it; late
// must not block. Finish does not wait.
func (r *Round) Finish(late func(Reply)) { r.FinishThen(late, nil) }

// FinishThen is Finish, and then calls then (if not nil) once every reply
// has been handed to late: at once when none is pending.
func (r *Round) FinishThen(late func(Reply), then func()) {
	r.timer.Stop()
	r.mu.Lock()
	r.finished, r.late, r.then = true, late, then
	r.left++ // our own share while we drain what has arrived
	if r.left > 1 {
		r.wg.Add(1)
		r.then = func() {
			if then != nil {
				then()
			}
			r.wg.Done()
		}
	}
	r.mu.Unlock()
	for {
		select {
		case rep := <-r.replies: // nothing is added once finished is set
			if late != nil {
				late(rep)
			}
			continue
		default:
		}
		break
	}
	r.done()
}
