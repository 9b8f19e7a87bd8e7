package redlock

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/pool"
)

// lateAcquire is a Pool of package pool whose first acquire command fails at
// once with a lost reply, and reaches the node only after delay: a command
// whose reply was lost and which lands late.
type lateAcquire struct {
	pool.Pool
	s     node.Sender
	delay time.Duration
	done  atomic.Bool
}

func (p *lateAcquire) Send(op *node.Op, deadline time.Time, rcv node.Receiver, tag int) {
	if op.Kind != node.Acquire || p.done.Swap(true) {
		p.s.Send(op, deadline, rcv, tag)
		return
	}
	rcv.Deliver(tag, node.Result{Err: io.ErrUnexpectedEOF})
	time.AfterFunc(p.delay, func() { p.s.Send(op, time.Now().Add(time.Second), discard{}, 0) })
}

type discard struct{}

func (discard) Deliver(int, node.Result) {}

// TestLostReplyThatLandsLateCountsForTheLock: an acquire whose reply was lost
// in a round the lock won lands late on its node, and an extend then
// counts that node for the lock. Nothing may take the key from it while
// the lock is held: the simulator found (seeds 27511, 40433, 52538 at
// 2e27756) that the background release sent at once for the lost reply,
// re-sent until its horizon, deleted it after the extend had counted it,
// leaving the lock below its quorum while its holder held it.
func TestLostReplyThatLandsLateCountsForTheLock(t *testing.T) {
	e := newEnv(t, 3)
	ps := e.scriptPools()
	late := &lateAcquire{Pool: ps[0], s: ps[0].(node.Sender), delay: 250 * time.Millisecond}
	ps[0] = late
	c := New2(t, ps, WithNodeTimeout(100*time.Millisecond), WithTTL(10*time.Second))
	verifyAll(t, c)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	k := rkey("k")
	waitFor(t, "the late acquire lands on node 0", func() bool { return e.value(0, k) == l.Token() })
	e.nodes[2].m.Del(k) // node 2 lost it (as by a restart): nodes 0 and 1 hold it
	if err := l.Extend(ctx, 0); err != nil {
		t.Fatalf("Extend with nodes 0 and 1 holding the token: %v", err)
	}
	time.Sleep(2 * time.Second) // past every re-send of a release for node 0
	if held := e.holders(k, l.Token()); held < 2 {
		t.Fatalf("the lock is held (deadline in %v) on %d nodes, below its quorum of 2", time.Until(l.Deadline()).Round(time.Millisecond), held)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the release takes the key from every node", func() bool { return e.holders(k, "") == 3 })
}

// lostReleaseReply is a Pool of package pool whose releases all reach the
// node, and the first one's reply is lost once it ran (the round sees an
// error): a delete that ran while its client could not tell. It counts the
// releases.
type lostReleaseReply struct {
	pool.Pool
	s        node.Sender
	lost     atomic.Bool
	releases atomic.Int32
}

func (p *lostReleaseReply) Send(op *node.Op, deadline time.Time, rcv node.Receiver, tag int) {
	if op.Kind != node.Release {
		p.s.Send(op, deadline, rcv, tag)
		return
	}
	p.releases.Add(1)
	if p.lost.Swap(true) {
		p.s.Send(op, deadline, rcv, tag)
		return
	}
	p.s.Send(op, deadline, lostReply{rcv, tag}, 0)
}

// lostReply hands on, once the command ran, an error in place of its reply.
type lostReply struct {
	rcv node.Receiver
	tag int
}

func (l lostReply) Deliver(int, node.Result) {
	l.rcv.Deliver(l.tag, node.Result{Err: io.ErrUnexpectedEOF})
}

// TestRollbackOfKnownSetStopsWhenAnswered: a roll-back's delete whose reply
// was lost (it ran) on a node that said yes is sent again once; the node
// answers "not held" (the first delete took the key), and since that
// node's SET was seen, the answer ends it. It was re-sent while it found
// nothing, for the TTL and the clean-up budget (14 sends in 12 s for a 10 s
// TTL), as if the SET's own fate were unknown: under a starved process, a
// flood of background commands for keys long gone.
func TestRollbackOfKnownSetStopsWhenAnswered(t *testing.T) {
	e := newEnv(t, 5)
	ps := e.scriptPools()
	lost := &lostReleaseReply{Pool: ps[4], s: ps[4].(node.Sender)}
	ps[4] = lost
	c := New2(t, ps, WithNodeTimeout(100*time.Millisecond), WithTTL(10*time.Second))
	verifyAll(t, c)
	for i := range 3 { // another holder's copies, answering late: the round fails after 3 and 4 said yes
		if err := e.nodes[i].m.Set(rkey("rb"), "other"); err != nil {
			t.Fatal(err)
		}
		e.nodes[i].fault.hold(true, "acquire")
	}
	time.AfterFunc(20*time.Millisecond, func() {
		for i := range 3 {
			e.nodes[i].fault.open()
		}
	})
	if _, err := c.TryLock(context.Background(), "rb"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock with the key taken on 3 nodes = %v, want ErrNotAcquired", err)
	}
	time.Sleep(2 * time.Second) // re-sends after 100 ms, doubling: 4 more within 2 s
	if v := e.value(4, rkey("rb")); v != "" {
		t.Fatalf("node 4 still holds %q after the roll-back", v)
	}
	if n := lost.releases.Load(); n != 2 {
		t.Fatalf("%d roll-back deletes sent to node 4; want 2 (the one whose reply was lost, and one re-send that answers)", n)
	}
}
