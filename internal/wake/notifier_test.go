package wake

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// TestNotifier: a waiter is woken by its Client's own release at once, by
// other releases only once a quorum of nodes published the same token (after
// a small delay), once per release, and never again for a release it was
// woken for already.
func TestNotifier(t *testing.T) {
	n := memNotifier(t)
	woken := func(w *Waiter) (d int64, ok bool) {
		select {
		case d := <-w.Wake():
			return int64(d), true
		default:
			return 0, false
		}
	}
	w := n.Add("k", "", false)
	n.Sleep(w, true)
	n.published("k", "a")
	n.published("k", "a")
	n.published("k", "b") // another release: not counted with a's
	if _, ok := woken(w); ok {
		t.Fatal("woken before a quorum published")
	}
	n.published("k", "a")
	if d, ok := woken(w); !ok || d <= 0 || d > int64(Spread) {
		t.Fatalf("after a quorum: woken %v, delay %v; want a delay in (0, %v]", ok, d, Spread)
	}
	n.published("k", "a")
	n.published("k", "a")
	if _, ok := woken(w); ok {
		t.Fatal("woken twice for one release")
	}
	n.Sleep(w, true)
	n.Released("k", "c")
	if d, ok := woken(w); !ok || d != 0 {
		t.Fatalf("own release: woken %v, delay %v; want at once", ok, d)
	}
	for range 5 {
		n.published("k", "c")
	}
	if _, ok := woken(w); ok {
		t.Fatal("woken by the messages of an own release")
	}
	other := n.Add("other", "", false)
	n.Remove("k", w)
	n.Released("k", "d") // no waiter: nothing to do
	if _, ok := woken(other); ok {
		t.Fatal("a release of k woke a waiter of another key")
	}
	n.Remove("other", other)
	if len(n.keys) != 0 {
		t.Fatalf("keys left: %v", n.keys)
	}
}

// TestSplitLateWakesTheAsleepWaiter: a yes that came late to a failed
// attempt (the votes split) wakes its waiter, asleep, to try after the
// delay, and only that waiter; another late yes within the retry max does
// not wake it again (a lock held on a bare quorum would make it spin).
func TestSplitLateWakesTheAsleepWaiter(t *testing.T) {
	n := memNotifier(t)
	a, b := n.Add("k", "a.1", false), n.Add("k", "b.1", false)
	n.Rest("k", a, nil)
	n.Rest("k", b, nil)
	n.SplitLate("k", "a.1", time.Millisecond)
	select {
	case d := <-a.Wake():
		if d != time.Millisecond {
			t.Fatalf("woken to try after %v; want after the delay, 1ms", d)
		}
	default:
		t.Fatal("the waiter whose attempt took a node late was not woken")
	}
	if got := n.Stats.WokenBySplit.Load(); got != 1 {
		t.Fatalf("%d split wake-ups; want 1", got)
	}
	n.Rest("k", a, nil)
	n.SplitLate("k", "a.1", time.Millisecond)
	select {
	case <-a.Wake():
		t.Fatal("woken again by a late yes within the retry max")
	case <-b.Wake():
		t.Fatal("another waiter was woken")
	default:
	}
}

// memNotifier returns the Notifier of a Client of 5 nodes without
// subscriptions whose keys go with their last waiter.
func memNotifier(t *testing.T) *Notifier {
	t.Helper()
	n := New(Config{Quorum: 3, RetryMax: 100 * time.Millisecond, Random: rand.N[time.Duration],
		Subscribers: make([]node.Subscriber, 5), Timeout: time.Second, Setup: time.Second, Linger: -1})
	t.Cleanup(n.Close)
	return n
}

// TestLingerTimersEndWithClose: the timer that keeps a key subscribed after
// its last waiter left is stopped when a waiter comes back, and Close stops
// those still running: nothing of a closed Client waits to run.
func TestLingerTimersEndWithClose(t *testing.T) {
	n := New(Config{Quorum: 3, RetryMax: 100 * time.Millisecond, Random: rand.N[time.Duration],
		Subscribers: make([]node.Subscriber, 5), Timeout: time.Second, Setup: time.Second})
	n.Remove("k", n.Add("k", "", false))
	first := n.keys["k"].linger
	n.Remove("k", n.Add("k", "", false)) // a waiter came back, and left again
	if first == nil || first.Stop() {
		t.Fatal("the first linger timer was still running after a waiter came back")
	}
	n.Remove("j", n.Add("j", "", false))
	timers := []*time.Timer{n.keys["k"].linger, n.keys["j"].linger}
	n.Close()
	for i, tm := range timers {
		if tm.Stop() {
			t.Errorf("linger timer %d still running after Close", i)
		}
	}
}
