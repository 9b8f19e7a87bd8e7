package quorum

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNextThenFinish: Next hands replies over as they arrive; Finish gives
// the rest to late, on a goroutine counted in the WaitGroup.
func TestNextThenFinish(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1) // the caller's own count, as Start requires
	release := make(chan struct{})
	r := Start(context.Background(), &wg, time.Minute, 4, func(i int) bool { return i != 2 },
		func(ctx context.Context, i int) (int, error) {
			if i == 3 {
				<-release
			}
			return i * 10, nil
		})
	if r.Pending() != 3 {
		t.Fatalf("pending %d, want 3 (node 2 not asked)", r.Pending())
	}
	got := map[int]int{}
	for range 2 {
		rep, ok := r.Next()
		if !ok {
			t.Fatal("Next returned false with replies pending")
		}
		got[rep.Node] = rep.Val
	}
	if got[0] != 0 || got[1] != 10 || len(got) != 2 {
		t.Fatalf("got %v", got)
	}
	late := make(chan Reply[int], 1)
	r.Finish(func(rep Reply[int]) { late <- rep })
	close(release)
	if rep := <-late; rep.Node != 3 || rep.Val != 30 || rep.Latency <= 0 {
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
	r := Start(context.Background(), &wg, 10*time.Millisecond, 1, nil,
		func(ctx context.Context, i int) (bool, error) {
			<-ctx.Done()
			return false, ctx.Err()
		})
	if _, ok := r.Next(); ok {
		t.Fatal("Next returned a reply from a node that never answers")
	}
	if !errors.Is(r.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v", r.Err())
	}
	late := make(chan error, 1)
	r.Finish(func(rep Reply[bool]) { late <- rep.Err })
	if err := <-late; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("late error %v", err)
	}
	wg.Done()
	wg.Wait()
}

// TestParentCancel: cancelling the parent ends the round with Canceled.
func TestParentCancel(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	r := Start(ctx, &wg, time.Minute, 2, nil, func(ctx context.Context, i int) (bool, error) {
		<-ctx.Done()
		return false, ctx.Err()
	})
	cancel()
	if _, ok := r.Next(); ok {
		t.Fatal("reply after cancel")
	}
	if !errors.Is(r.Err(), context.Canceled) {
		t.Fatalf("Err %v", r.Err())
	}
	r.Finish(nil)
	wg.Done()
	wg.Wait()
}

func TestNoNodesAsked(t *testing.T) {
	var wg sync.WaitGroup
	r := Start(context.Background(), &wg, time.Minute, 3, func(int) bool { return false },
		func(ctx context.Context, i int) (bool, error) { panic("asked") })
	if _, ok := r.Next(); ok {
		t.Fatal("reply with no node asked")
	}
	r.Finish(nil)
	wg.Wait()
}
