package redlock

import (
	"context"
	"testing"
	"time"
)

// TestNotifier: a waiter is woken by its Client's own release at once, by
// other releases only once a quorum of nodes published the same token (after
// a small delay), once per release, and never again for a release it was
// woken for already.
func TestNotifier(t *testing.T) {
	n := memNotifier(t)
	n.linger = 0 // a key goes with its last waiter
	woken := func(w *waiter) (d int64, ok bool) {
		select {
		case d := <-w.wake:
			return int64(d), true
		default:
			return 0, false
		}
	}
	w := n.add("k", "", false)
	n.sleep(w, true)
	n.published("k", "a")
	n.published("k", "a")
	n.published("k", "b") // another release: not counted with a's
	if _, ok := woken(w); ok {
		t.Fatal("woken before a quorum published")
	}
	n.published("k", "a")
	if d, ok := woken(w); !ok || d <= 0 || d > int64(notifySpread) {
		t.Fatalf("after a quorum: woken %v, delay %v; want a delay in (0, %v]", ok, d, notifySpread)
	}
	n.published("k", "a")
	n.published("k", "a")
	if _, ok := woken(w); ok {
		t.Fatal("woken twice for one release")
	}
	n.sleep(w, true)
	n.released("k", "c")
	if d, ok := woken(w); !ok || d != 0 {
		t.Fatalf("own release: woken %v, delay %v; want at once", ok, d)
	}
	for range 5 {
		n.published("k", "c")
	}
	if _, ok := woken(w); ok {
		t.Fatal("woken by the messages of an own release")
	}
	other := n.add("other", "", false)
	n.remove("k", w)
	n.released("k", "d") // no waiter: nothing to do
	if _, ok := woken(other); ok {
		t.Fatal("a release of k woke a waiter of another key")
	}
	n.remove("other", other)
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
	a, b := n.add("k", "a.1", false), n.add("k", "b.1", false)
	n.rest("k", a, nil)
	n.rest("k", b, nil)
	n.splitLate("k", "a.1", time.Millisecond)
	select {
	case d := <-a.wake:
		if d != time.Millisecond {
			t.Fatalf("woken to try after %v; want after the delay, 1ms", d)
		}
	default:
		t.Fatal("the waiter whose attempt took a node late was not woken")
	}
	if got := n.wokenBySplit.Load(); got != 1 {
		t.Fatalf("%d split wake-ups; want 1", got)
	}
	n.rest("k", a, nil)
	n.splitLate("k", "a.1", time.Millisecond)
	select {
	case <-a.wake:
		t.Fatal("woken again by a late yes within the retry max")
	case <-b.wake:
		t.Fatal("another waiter was woken")
	default:
	}
}

// memNotifier returns the notifier of a Client over in-memory pools.
func memNotifier(t *testing.T) *notifier {
	t.Helper()
	c, err := New(asPools(newMemPools(5)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &c.notes
}

// TestDelayedWakeCutShort: a waiter woken to try after a delay (a split's
// late yes) tries at once when a release wakes it during that delay.
func TestDelayedWakeCutShort(t *testing.T) {
	n := memNotifier(t)
	s := &sleeper{c: n.c, cfg: n.c.cfg, t: target{key: "k", rkey: "k"}}
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.sleep(ctx, time.Hour)
	}()
	for registered := false; !registered; time.Sleep(time.Millisecond) {
		n.mu.Lock()
		k := n.keys["k"]
		registered = k != nil && len(k.waiters) == 1 && k.waiters[0].asleep
		if registered {
			n.wake(k.waiters[0], time.Hour, &n.wokenBySplit) // as splitLate does
		}
		n.mu.Unlock()
	}
	n.released("k", "t") // a release of this Client's: at once
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("a release during the delay of a delayed wake-up did not cut it short")
	}
	if ctx.Err() != nil {
		t.Fatal("the sleep ended with its context, not with the release")
	}
}

// TestLingerTimersEndWithClose: the timer that keeps a key subscribed after
// its last waiter left is stopped when a waiter comes back, and Close stops
// those still running: nothing of a closed Client waits to run.
func TestLingerTimersEndWithClose(t *testing.T) {
	c, err := New(asPools(newMemPools(5)))
	if err != nil {
		t.Fatal(err)
	}
	n := &c.notes
	n.remove("k", n.add("k", "", false))
	first := n.keys["k"].linger
	n.remove("k", n.add("k", "", false)) // a waiter came back, and left again
	if first == nil || first.Stop() {
		t.Fatal("the first linger timer was still running after a waiter came back")
	}
	n.remove("j", n.add("j", "", false))
	timers := []*time.Timer{n.keys["k"].linger, n.keys["j"].linger}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i, tm := range timers {
		if tm.Stop() {
			t.Errorf("linger timer %d still running after Close", i)
		}
	}
}
