package redlock

import (
	"testing"
	"time"
)

// TestNotifier: a waiter is woken by its Client's own release at once, by
// other releases only once a quorum of nodes published the same token (after
// a small delay), once per release, and never again for a release it was
// woken for already.
func TestNotifier(t *testing.T) {
	c, err := New(asPools(newMemPools(5)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := &c.notes
	n.linger = 0 // a key goes with its last waiter
	woken := func(w *waiter) (d int64, ok bool) {
		select {
		case d := <-w.wake:
			return int64(d), true
		default:
			return 0, false
		}
	}
	w := n.add("k", "")
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
	other := n.add("other", "")
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
// attempt (the votes split) wakes its waiter after the delay if it is
// asleep then, and only that waiter.
func TestSplitLateWakesTheAsleepWaiter(t *testing.T) {
	c, err := New(asPools(newMemPools(5)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := &c.notes
	a, b := n.add("k", "a.1"), n.add("k", "b.1")
	n.rest("k", a, nil)
	n.rest("k", b, nil)
	n.splitLate("k", "a.1", time.Millisecond)
	select {
	case d := <-a.wake:
		if d != 0 {
			t.Fatalf("woken with a delay of %v; want at once, the delay spent", d)
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiter whose attempt took a node late was not woken")
	}
	for end := time.Now().Add(time.Minute); n.wokenBySplit.Load() == 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond) // the wake-up is counted right after it is sent
	}
	if got := n.wokenBySplit.Load(); got != 1 {
		t.Fatalf("%d split wake-ups; want 1", got)
	}
	select {
	case <-b.wake:
		t.Fatal("another waiter was woken")
	default:
	}
}
