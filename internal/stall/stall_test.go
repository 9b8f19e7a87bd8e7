package stall

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFreezeCounts: a stand-still of the clock's goroutine is counted, up
// to the moment it ends, while it is still under way, and Extend moves a
// deadline by it.
func TestFreezeCounts(t *testing.T) {
	Hold()
	defer Done()
	mark := Now()
	Freeze(300 * time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	if got := Since(mark); got < 200*time.Millisecond+Recover {
		t.Fatalf("Since after a 300 ms stand-still: %v, want at least 200ms and Recover (%v) to catch up", got, Recover)
	}
	d := time.Now()
	if got := Extend(d, mark).Sub(d); got < 200*time.Millisecond {
		t.Fatalf("Extend moved a deadline by %v, want at least 200ms", got)
	}
}

// TestNowOnlyGrows: Now never goes back, across a stand-still and the
// clock's goroutine stopping and starting again.
func TestNowOnlyGrows(t *testing.T) {
	prev := Now()
	for range 3 {
		Hold()
		Freeze(50 * time.Millisecond)
		for range 10 {
			n := Now()
			if n < prev {
				t.Fatalf("Now went back: %v after %v", n, prev)
			}
			prev = n
			time.Sleep(10 * time.Millisecond)
		}
		Done()
		time.Sleep(2 * Linger)
	}
}

// TestCreditBounded: Since never exceeds MaxCredit.
func TestCreditBounded(t *testing.T) {
	if got := Since(-time.Hour); got != MaxCredit {
		t.Fatalf("Since an hour of stand-still: %v, want MaxCredit %v", got, MaxCredit)
	}
}

// TestHoldAsTheClockStops: a Hold that comes just as the clock's goroutine
// decides to stop (its last user gone for Linger) still finds the clock
// running: a stand-still under it is counted.
func TestHoldAsTheClockStops(t *testing.T) {
	for i := range 12 {
		Hold()
		Done()
		time.Sleep(Linger + time.Duration(i)*Pulse/4) // around the goroutine's last ticks
		Hold()
		mark := Now()
		Freeze(100 * time.Millisecond)
		time.Sleep(150 * time.Millisecond)
		got := Since(mark)
		Done()
		if got < 50*time.Millisecond {
			t.Fatalf("try %d: Since across a 100 ms stand-still under a Hold: %v, want at least 50ms (the clock was not running)", i, got)
		}
	}
	time.Sleep(2 * Linger)
}

// TestWithTimeout: the context ends at its timeout when the process runs
// all along, and not before a stand-still it spans is made up; it ends
// with its parent, and its cancel ends it with context.Canceled.
func TestWithTimeout(t *testing.T) {
	ctx, cancel := WithTimeout(context.Background(), 50*time.Millisecond)
	start := time.Now()
	<-ctx.Done()
	if err, took := ctx.Err(), time.Since(start); err != context.DeadlineExceeded || took < 50*time.Millisecond {
		t.Fatalf("a 50 ms timeout: Err %v after %v; want DeadlineExceeded after at least 50ms", err, took)
	}
	cancel()
	cancel() // twice is no harm

	ctx, cancel = WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	Freeze(300 * time.Millisecond)
	select {
	case <-ctx.Done():
		t.Fatalf("ended during a stand-still, %v into it", time.Since(start))
	case <-time.After(300 * time.Millisecond):
	}
	if d, _ := ctx.Deadline(); time.Until(d) < 30*time.Millisecond {
		t.Fatalf("deadline %v from now right after a 300 ms stand-still; want the timeout's rest", time.Until(d))
	}
	<-ctx.Done()
	if ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("Err %v after the made-up timeout; want DeadlineExceeded", ctx.Err())
	}

	parent, stop := context.WithCancel(context.Background())
	ctx, cancel = WithTimeout(parent, time.Hour)
	stop()
	<-ctx.Done()
	if ctx.Err() != context.Canceled {
		t.Fatalf("Err %v after the parent's cancel; want Canceled", ctx.Err())
	}
	cancel()
	ctx, cancel = WithTimeout(context.Background(), time.Hour)
	cancel()
	if ctx.Err() != context.Canceled {
		t.Fatalf("Err %v after cancel; want Canceled", ctx.Err())
	}
	ctx, cancel = WithTimeout(context.Background(), 0)
	if ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("Err %v right after WithTimeout(0); want DeadlineExceeded", ctx.Err())
	}
	cancel()
	time.Sleep(2 * Linger)
}
