package quorum

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNextThenFinish: Next hands replies over as they arrive; Finish gives
// the rest to late, on a goroutine counted in the WaitGroup.
func TestNextThenFinish(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1) // the caller's own count, as Start requires
	release := make(chan struct{})
	r := Start(context.Background(), Plan{WG: &wg, Timeout: time.Minute, N: 4, Ask: []bool{true, true, false, true}, Op: &node.Op{},
		Call: func(ctx context.Context, i int, _ *node.Op) node.Result {
			if i == 3 {
				<-release
			}
			return node.Result{Int: int64(i * 10)}
		}})
	if r.Pending() != 3 {
		t.Fatalf("pending %d, want 3 (node 2 not asked)", r.Pending())
	}
	got := map[int]int64{}
	for range 2 {
		rep, ok := r.Next()
		if !ok {
			t.Fatal("Next returned false with replies pending")
		}
		got[rep.Node] = rep.Int
	}
	if got[0] != 0 || got[1] != 10 || len(got) != 2 {
		t.Fatalf("got %v", got)
	}
	late := make(chan Reply, 1)
	r.Finish(func(rep Reply) { late <- rep })
	close(release)
	if rep := <-late; rep.Node != 3 || rep.Int != 30 || rep.Latency <= 0 {
		t.Fatalf("late reply %+v", rep)
	}
	wg.Done()
	wg.Wait()
}

// TestDeadlineEndsNext: a node that never answers makes Next return false
// at the timeout, with DeadlineExceeded; its call sees the context end.
func TestDeadlineEndsNext(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	r := Start(context.Background(), Plan{WG: &wg, Timeout: 10 * time.Millisecond, N: 1, Op: &node.Op{},
		Call: func(ctx context.Context, i int, _ *node.Op) node.Result {
			<-ctx.Done()
			return node.Result{Err: ctx.Err()}
		}})
	// The call gives up at the deadline too: its error is either taken by
	// Next (it was delivered by the time Next saw the deadline) or handed to
	// Finish's late; either way the round ends with DeadlineExceeded.
	late := make(chan error, 1)
	if rep, ok := r.Next(); ok {
		if !errors.Is(rep.Err, context.DeadlineExceeded) {
			t.Fatalf("Next returned %+v from a node that never answers", rep)
		}
		late <- rep.Err
		if _, ok := r.Next(); ok {
			t.Fatal("a second reply from one node")
		}
	}
	if !errors.Is(r.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v", r.Err())
	}
	r.Finish(func(rep Reply) { late <- rep.Err })
	if err := <-late; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("late error %v", err)
	}
	wg.Done()
	wg.Wait()
}

// TestParentCancel: cancelling the parent ends the round with Canceled.
// TestParentCancel: the parent's cancellation ends the round's wait at once,
// but not the calls: a call cut off could still run on its node, and then
// nobody would learn its fate. They run to their own deadline and their
// result goes to late.
func TestParentCancel(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	callErrs := make(chan error, 2)
	r := Start(ctx, Plan{WG: &wg, Timeout: 100 * time.Millisecond, N: 2, Op: &node.Op{Follow: 50 * time.Millisecond}, Call: func(ctx context.Context, i int, _ *node.Op) node.Result {
		<-ctx.Done()
		callErrs <- ctx.Err()
		return node.Result{Err: ctx.Err()}
	}})
	cancel()
	if _, ok := r.Next(); ok {
		t.Fatal("reply after cancel")
	}
	if !errors.Is(r.Err(), context.Canceled) {
		t.Fatalf("Err %v", r.Err())
	}
	late := make(chan error, 2)
	r.Finish(func(rep Reply) { late <- rep.Err })
	wg.Done()
	wg.Wait()
	for range 2 {
		if err := <-callErrs; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call ended with %v, want its own deadline (not the parent's cancellation)", err)
		}
		if err := <-late; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("late got %v", err)
		}
	}
}

func TestNoNodesAsked(t *testing.T) {
	var wg sync.WaitGroup
	r := Start(context.Background(), Plan{WG: &wg, Timeout: time.Minute, N: 3, Ask: make([]bool, 3), Op: &node.Op{},
		Call: func(ctx context.Context, i int, _ *node.Op) node.Result { panic("asked") }})
	if _, ok := r.Next(); ok {
		t.Fatal("reply with no node asked")
	}
	r.Finish(nil)
	wg.Wait()
}

// chanSender is a node.Sender that answers when told to, on a goroutine of
// its own, like a Pool's writer.
type chanSender struct {
	got chan func(node.Result)
}

func (s *chanSender) Send(op *node.Op, deadline time.Time, rcv node.Receiver, tag int) {
	s.got <- func(res node.Result) { rcv.Deliver(tag, res) }
}

// TestSenders: nodes with a Sender get the op through Send (no call), the
// others through call; a reply delivered after Finish goes to late, and then
// runs only after it, with the WaitGroup counting the wait.
func TestSenders(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	s0, s2 := &chanSender{got: make(chan func(node.Result), 1)}, &chanSender{got: make(chan func(node.Result), 1)}
	op := &node.Op{Kind: node.Release}
	r := Start(context.Background(), Plan{WG: &wg, Timeout: time.Minute, N: 3, Senders: []node.Sender{s0, nil, s2}, Op: op,
		Call: func(ctx context.Context, i int, got *node.Op) node.Result {
			if i != 1 || got != op {
				t.Errorf("call(%d, %p): want only node 1 with the round's op", i, got)
			}
			return node.Result{Int: 1}
		}})
	answer0, answer2 := <-s0.got, <-s2.got
	answer0(node.Result{Int: 7})
	seen := map[int]int64{}
	for range 2 {
		rep, ok := r.Next()
		if !ok {
			t.Fatal("Next returned false with replies pending")
		}
		seen[rep.Node] = rep.Int
	}
	if seen[0] != 7 || seen[1] != 1 {
		t.Fatalf("replies %v", seen)
	}
	var late []int
	thenRan := make(chan struct{})
	r.FinishThen(func(rep Reply) { late = append(late, rep.Node) }, func() { close(thenRan) })
	select {
	case <-thenRan:
		t.Fatal("then ran before the last reply")
	default:
	}
	answer2(node.Result{Err: errors.New("late failure")})
	<-thenRan
	if len(late) != 1 || late[0] != 2 {
		t.Fatalf("late replies %v, want node 2", late)
	}
	wg.Done()
	wg.Wait()
}

// TestSenderDeadline: the round's deadline ends Next even though a Sender
// has not answered; the deadline handed to Send is the round's.
func TestSenderDeadline(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	s := &chanSender{got: make(chan func(node.Result), 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	r := Start(ctx, Plan{WG: &wg, Timeout: time.Minute, N: 1, Senders: []node.Sender{s}, Op: &node.Op{}})
	if _, ok := r.Next(); ok {
		t.Fatal("reply from a node that has not answered")
	}
	if !errors.Is(r.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v", r.Err())
	}
	r.Finish(nil)
	(<-s.got)(node.Result{Err: node.ErrNotSent})
	wg.Done()
	wg.Wait()
}

// TestHeldNodes: a node held back by Plan.Hold counts as pending, is sent
// nothing until Send, and is sent then; Send after Finish delivers
// node.ErrNotSent without sending.
func TestHeldNodes(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	var calls sync.Map
	call := func(ctx context.Context, i int, _ *node.Op) node.Result {
		calls.Store(i, true)
		return node.Result{Int: int64(i)}
	}
	r := Start(context.Background(), Plan{WG: &wg, Timeout: 200 * time.Millisecond, N: 3, Hold: []bool{false, true, true}, Op: &node.Op{}, Call: call})
	if r.Pending() != 3 {
		t.Fatalf("Pending %d, want 3", r.Pending())
	}
	if rep, ok := r.Next(); !ok || rep.Node != 0 {
		t.Fatalf("first reply %+v %v, want node 0", rep, ok)
	}
	if _, sent := calls.Load(1); sent {
		t.Fatal("a held node was sent op before Send")
	}
	r.Send(1)
	if rep, ok := r.Next(); !ok || rep.Node != 1 || rep.Err != nil {
		t.Fatalf("after Send(1): %+v %v", rep, ok)
	}
	late := make(chan Reply, 1)
	r.Finish(func(rep Reply) { late <- rep })
	r.Send(2) // nobody waits any more
	if rep := <-late; rep.Node != 2 || !errors.Is(rep.Err, node.ErrNotSent) {
		t.Fatalf("Send after Finish: %+v, want ErrNotSent", rep)
	}
	if _, sent := calls.Load(2); sent {
		t.Fatal("Send after Finish sent op")
	}
	wg.Done()
	wg.Wait()
}
