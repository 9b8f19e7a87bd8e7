package lease

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLossIsStickyAndSaysWhy(t *testing.T) {
	now := time.Now()
	f := New(now.Add(time.Second))
	f.Failed(now.Add(2*time.Second), now, errors.New("redlock: extend \"k\": 1 of 3 nodes"))
	if got := f.Deadline(); !got.Equal(now.Add(time.Second)) {
		t.Fatalf("a failed renewal moved the deadline later: %v", got.Sub(now))
	}
	held, why := f.Lose("a quorum said the token is gone")
	if !held || !strings.HasPrefix(why, "the last renewal failed: extend") || !strings.HasSuffix(why, "gone") {
		t.Fatalf("Lose = %v, %q", held, why)
	}
	if f.End(false) || !f.Lost() {
		t.Fatalf("a release after the loss reported the lock held, or unlost it (lost %v)", f.Lost())
	}
	if err := f.Cause(); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), why) {
		t.Fatalf("Cause = %v", err)
	}
	if again, _ := f.Lose("twice"); again {
		t.Fatal("a second loss reported the lock held")
	}
}

func TestWatchEndsWithTheCause(t *testing.T) {
	now := time.Now()
	f := New(now.Add(time.Hour))
	expired := make(chan struct{}, 1)
	done := f.Done(now, func() { expired <- struct{}{} })
	ctx, cancel := context.WithCancelCause(context.Background())
	forget, ended := f.Child(now, nil, cancel)
	if ended != nil || forget == nil {
		t.Fatalf("Child of a held lock = %v", ended)
	}
	if !f.End(false) {
		t.Fatal("End of a held lock reported it not held")
	}
	<-done
	if got := context.Cause(ctx); !errors.Is(got, ErrReleased) {
		t.Fatalf("the derived context's cause = %v, want ErrReleased", got)
	}
	if _, ended := f.Child(now, nil, func(error) {}); !errors.Is(ended, ErrReleased) {
		t.Fatalf("Child after the end = %v, want ErrReleased", ended)
	}
	select {
	case <-expired:
		t.Fatal("the timer fired after the end")
	default:
	}
}

func TestExpiredFollowsAMovedDeadline(t *testing.T) {
	now := time.Now()
	f := New(now.Add(time.Hour))
	f.Done(now, func() {})
	f.Confirmed(now.Add(2*time.Hour), now)
	if lost, _ := f.Expired(now.Add(time.Hour)); lost {
		t.Fatal("lost at the old deadline after a confirmed renewal")
	}
	if lost, why := f.Expired(now.Add(2 * time.Hour)); !lost || why != "validity ran out" {
		t.Fatalf("Expired at the deadline = %v, %q", lost, why)
	}
}
