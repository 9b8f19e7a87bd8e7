package stall

import (
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
	if got := Since(mark); got < 200*time.Millisecond {
		t.Fatalf("Since after a 300 ms stand-still: %v, want at least 200ms", got)
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
