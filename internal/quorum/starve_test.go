package quorum

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// afterSender answers every Send after its delay; when that is negative,
// it gives up as a Pool does, at the deadline plus op.Follow.
type afterSender struct{ delay time.Duration }

func (s afterSender) Send(op *node.Op, deadline time.Time, rcv node.Receiver, tag int) {
	if s.delay < 0 {
		time.AfterFunc(time.Until(deadline.Add(op.Follow)), func() { rcv.Deliver(tag, node.Result{Err: context.DeadlineExceeded}) })
		return
	}
	time.AfterFunc(s.delay, func() { rcv.Deliver(tag, node.Result{Int: 1}) })
}

// starvedNext starts a one-node round with a 50 ms timeout whose node
// answers after answer, lets its owner first run at wake (a process the
// scheduler starved: the round's timer fired long before), and returns
// what Next gives then and when (virtual time since the start).
func starvedNext(t *testing.T, answer, wake time.Duration) (ok bool, took time.Duration, err error) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	op := &node.Op{Follow: time.Second}
	r := Start(context.Background(), Plan{WG: &wg, Timeout: 50 * time.Millisecond, N: 1, Senders: []node.Sender{afterSender{answer}}, Op: op})
	time.Sleep(wake)
	_, ok = r.Next()
	took, err = time.Since(start), r.Err()
	r.Finish(nil)
	wg.Done()
	wg.Wait()
	return ok, took, err
}

// TestStarvedOwnerTakesArrivedReply: a reply that arrived after the
// deadline but before the owner could look is taken, not dropped for the
// timer that fired meanwhile (validity accounts for the time it took).
func TestStarvedOwnerTakesArrivedReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for range 20 { // select between two ready cases is random
			if ok, _, err := starvedNext(t, 100*time.Millisecond, 200*time.Millisecond); !ok {
				t.Fatalf("Next dropped a reply that had arrived (err %v)", err)
			}
		}
	})
}

// TestStarvedOwnerWaitsAGrace: an owner that first runs long after the
// round's deadline (its process was not scheduled) gives the replies one
// more node timeout to be delivered: they were most likely read by then,
// only not yet handed over.
func TestStarvedOwnerWaitsAGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ok, took, err := starvedNext(t, 210*time.Millisecond, 200*time.Millisecond)
		if !ok || took != 210*time.Millisecond {
			t.Fatalf("Next %v (err %v) after %v, want the reply at 210ms", ok, err, took)
		}
	})
}

// TestGraceEndsAtTimeout: a node that never answers ends a starved round
// one node timeout after its owner woke, and an owner that was not starved
// at the deadline itself: no grace without evidence of starvation.
func TestGraceEndsAtTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct{ wake, want time.Duration }{
			{0, 50 * time.Millisecond},
			{200 * time.Millisecond, 250 * time.Millisecond},
		} {
			ok, took, err := starvedNext(t, -1, c.wake)
			if ok || !errors.Is(err, context.DeadlineExceeded) || took != c.want {
				t.Fatalf("owner woke at %v: Next %v, err %v after %v; want DeadlineExceeded after %v", c.wake, ok, err, took, c.want)
			}
		}
	})
}

// TestStalledRoundStillSends: a command held back by Plan.Hold (a lock's
// command waiting for its acquire's reply) is still sent after the round's
// deadline passed while the process stood still: the round waits that
// much longer (internal/stall), so the command is not given up unsent.
// Real time: the stall clock measures real stand-stills.
func TestStalledRoundStillSends(t *testing.T) {
	stall.Hold()
	defer stall.Done()
	var wg sync.WaitGroup
	wg.Add(1)
	defer wg.Wait()
	defer wg.Done()
	op := &node.Op{Follow: 5 * time.Second}
	r := Start(context.Background(), Plan{WG: &wg, Timeout: 200 * time.Millisecond, N: 1, Hold: []bool{true}, Senders: []node.Sender{afterSender{0}}, Op: op})
	defer r.Finish(nil)
	stall.Freeze(1200 * time.Millisecond)
	time.Sleep(time.Second) // the process stands still past the deadline
	if !r.Send(0) {
		t.Fatal("a held command was given up unsent after the process stood still past the round's deadline")
	}
	if rep, ok := r.Next(); !ok || rep.Err != nil {
		t.Fatalf("Next: %+v, %v; want the node's reply", rep, ok)
	}
}
