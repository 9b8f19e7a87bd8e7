package redlock

import (
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"context"
	"errors"
	"fmt"
	"github.com/quorumlock/quorumlock/pool"
	"strings"
	"testing"
	"time"
)

// TestFencedAcquireErrorLeavesNoKey (issue 11, defect 4): when the fencing
// counter cannot be incremented (here: it is not an integer on 3 nodes), the
// acquire script fails before it writes the lock key. Before, it had set the
// key and then failed, the error reply counted as "did not write", and the
// key blocked every later acquire for its TTL.
func TestFencedAcquireErrorLeavesNoKey(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithFencing(true), WithTTL(time.Hour))
	k := rkey("corrupt")
	for i := range 3 {
		if err := e.nodes[i].m.Set(fenceKey, "not-a-number"); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.TryLock(context.Background(), "corrupt")
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock with 3 corrupt counters = %v, want ErrNotAcquired", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range e.nodes {
		if v := e.value(i, k); v != "" {
			t.Fatalf("node %d holds %q after a failed fenced acquire: the script wrote before it failed", i, v)
		}
	}
	for i := range 3 { // repaired: the key is free at once
		e.nodes[i].m.Del(fenceKey)
	}
	l, err := e.client(WithFencing(true)).TryLock(context.Background(), "corrupt")
	if err != nil {
		t.Fatalf("TryLock after the counters were repaired: %v", err)
	}
	_ = l.Release(context.Background())
}

// TestAcquireSentTwice (issue 11, defect 9): a copy of an acquire whose first
// copy set the key (a client that retries after a broken connection) answers
// yes, plain and fenced, and the fenced one does not increment again.
func TestAcquireSentTwice(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()}) // go-redis' default retries: copies can happen
	t.Cleanup(func() { _ = rdb.Close() })
	p, err := pool.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	ctx := context.Background()
	for range 2 {
		ok, err := p.Acquire(ctx, "plain", "tok", time.Minute)
		if !ok || err != nil {
			t.Fatalf("Acquire = %v, %v; want true (the key holds our token)", ok, err)
		}
	}
	if ok, _ := p.Acquire(ctx, "plain", "other", time.Minute); ok {
		t.Fatal("Acquire of a key holding another token said yes")
	}
	for range 2 {
		n, err := p.AcquireFenced(ctx, "fenced", "fenced:fence", "tok", time.Minute)
		if n != 1 || err != nil {
			t.Fatalf("AcquireFenced = %d, %v; want 1 twice (no second increment)", n, err)
		}
	}
}

// TestExpiredLocksForgotten (issue 11, defect 5): locks left to expire
// without Release, Extend, Held or Done are not kept by the Client forever,
// and Close sends no release for them.
func TestExpiredLocksForgotten(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithNodeTimeout(200*time.Millisecond), WithTTL(time.Second))
	const n = 1000
	take := func(prefix string, count int) { // a round lost to a loaded machine is tried again
		for i := 0; i < count; {
			if _, err := c.TryLock(context.Background(), fmt.Sprintf("%s-%d", prefix, i)); err == nil {
				i++
			} else if !errors.Is(err, ErrNotAcquired) {
				t.Fatal(err)
			}
		}
	}
	take("left", n)
	time.Sleep(time.Second) // every deadline has passed
	take("new", 10)
	c.mu.RLock()
	held := len(c.held)
	c.mu.RUnlock()
	if held > 64 {
		t.Fatalf("the Client tracks %d locks after %d expired and 10 were taken, want at most 64", held, n)
	}
	before := e.nodes[0].fault.calls.Load()
	_ = c.Close() // a release timed out on a loaded machine is not the point here
	// The 10 live locks' releases (and re-sends of those a loaded machine
	// timed out), not one per expired lock.
	if sent := e.nodes[0].fault.calls.Load() - before; sent >= 100 {
		t.Fatalf("Close sent %d releases to node 0, want about the 10 live locks'", sent)
	}
}

// TestLockKeepsLastErrorAtGate (issue 11, defect 7): when ctx ends while a
// Lock waits at the per-key gate behind its Client's round in flight, the
// error still carries the earlier attempt's *QuorumError.
func TestLockKeepsLastErrorAtGate(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	for _, n := range e.nodes {
		n.m.Set(rkey("gate"), "someone-else")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "gate")
		errc <- err
	}()
	for e.nodes[4].fault.calls.Load() < 1 { // the first attempt has been sent
		time.Sleep(time.Millisecond)
	}
	for _, n := range e.nodes { // the next round holds the gate until ctx ends
		n.fault.hold(false, "acquire")
	}
	go func() { _, _ = c.TryLock(context.Background(), "gate") }()
	err := <-errc
	for _, n := range e.nodes {
		n.fault.open()
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Lock = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	quorumErr(t, err)
}

// TestNoCommandOvertakesTheSet (issue 11, defect 10): an Extend right after
// TryLock does not go to a node whose SET has not answered yet (it could
// overtake it), and a Release then leaves nothing on that node once the SET
// lands.
func TestNoCommandOvertakesTheSet(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithTTL(time.Hour))
	e.nodes[4].fault.hold(false, "acquire")
	l, err := c.TryLock(context.Background(), "slow")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Held(context.Background()); !ok || err != nil {
		t.Fatalf("Held = %v, %v", ok, err)
	}
	if got := e.nodes[4].fault.calls.Load(); got != 1 {
		t.Fatalf("node 4 got %d calls, want only the acquire still in flight", got)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-e.nodes[4].fault.open() // the SET lands after the release
	e.waitGone(rkey("slow"))
}

// TestReleaseAfterUnwatchedExpiry (issue 11, defect 10): a lock released
// after its deadline passed is reported lost the same way whether or not its
// lease was watched: Err is ErrLockLost and the observer hears Lost.
func TestReleaseAfterUnwatchedExpiry(t *testing.T) {
	for _, watched := range []bool{false, true} {
		e := newEnv(t, 5)
		clock := newManualClock()
		rec := &recorder{}
		c := e.client(withClock(clock.Now), WithObserver(rec))
		l, err := c.TryLock(context.Background(), "expired")
		if err != nil {
			t.Fatal(err)
		}
		if watched {
			_ = l.Err()
		}
		clock.Advance(time.Minute)
		if watched {
			_ = l.Err()
		}
		_ = l.Release(context.Background())
		if err := l.Err(); !errors.Is(err, ErrLockLost) {
			t.Errorf("watched %v: Err after Release = %v, want ErrLockLost", watched, err)
		}
		if got := len(rec.of("lost")); got != 1 {
			t.Errorf("watched %v: %d Lost events, want 1", watched, got)
		}
	}
}

// TestDuplicateAfterRestart (issue 11, defect 8): nodes 0 and 3 reach one
// server. Node 3 is not answering at the first check, and the server
// restarts (new run_id) before node 3 is checked again: the later check must
// compare node 3 with node 0's new run_id, not with the one recorded before.
func TestDuplicateAfterRestart(t *testing.T) {
	e := newEnv(t, 5)
	before, after := "run-id-before", "run-id-after"
	setID := func(i int, id *string, err error) {
		e.nodes[i].fault.mu.Lock()
		e.nodes[i].fault.runID, e.nodes[i].fault.runIDErr = id, err
		e.nodes[i].fault.mu.Unlock()
	}
	setID(0, &before, nil)
	setID(3, nil, errConnRefused)
	c := e.client(withRecheck(0))
	if _, err := c.Locked(context.Background(), "dup"); err != nil {
		t.Fatal(err)
	}
	setID(0, &after, nil) // the server restarted
	setID(3, &after, nil) // and node 3 reaches it again
	deadline := time.Now().Add(5 * time.Second)
	for !c.ids.Verified(3) && c.ids.Dup() == nil && time.Now().Before(deadline) {
		_, _ = c.Locked(context.Background(), "poke") // each call may start a check
		time.Sleep(time.Millisecond)
	}
	if c.ids.Verified(3) || c.ids.Dup() == nil {
		t.Fatalf("node 3 verified %v, duplicate error %v: one server counts twice", c.ids.Verified(3), c.ids.Dup())
	}
	if _, err := c.TryLock(context.Background(), "dup"); err == nil || !strings.Contains(err.Error(), "reach the same Redis server") {
		t.Fatalf("TryLock = %v, want the duplicate-server error", err)
	}
}
