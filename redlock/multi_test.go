package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/pool"
)

// scriptClient is a Client over the env's servers through Pools that run the
// scripts (a lock of several keys needs them), closed at the end of the test.
func (e *env) scriptClient(opts ...Option) *Client {
	e.t.Helper()
	c, err := New(e.scriptPools(), append([]Option{testNodeTimeout}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestLockAllEverySubset takes two keys on 5 nodes with every subset of nodes
// where one of the keys is taken by another lock (the first key on even
// nodes, the second on odd ones) and every subset failing (an error reply):
// TryLockAll wins exactly when a quorum of nodes have both keys free and
// work; each node then holds both keys or neither (never one: a node admits
// the lock whole or not at all), the other lock's keys are untouched, and a
// failed attempt leaves none of its token anywhere once its roll-back ends.
func TestLockAllEverySubset(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(time.Minute))
	verifyAll(t, c)
	for taken := range 32 {
		for failing := range 32 {
			lockAllSubset(t, e, c, taken, failing)
		}
	}
}

func lockAllSubset(t *testing.T, e *env, c *Client, taken, failing int) {
	t.Helper()
	keys := []string{fmt.Sprintf("all-%d-%d-a", taken, failing), fmt.Sprintf("all-%d-%d-b", taken, failing)}
	for i, n := range e.nodes {
		if taken&(1<<i) != 0 {
			n.m.Set(rkey(keys[i%2]), "someone-else")
		}
		if failing&(1<<i) != 0 {
			n.m.SetError("ERR injected")
		}
	}
	l, err := c.TryLockAll(context.Background(), keys)
	for _, n := range e.nodes {
		n.m.SetError("")
	}
	free := bits.OnesCount(uint(31 &^ taken &^ failing))
	if (err == nil) != (free >= 3) {
		t.Fatalf("taken %05b failing %05b: TryLockAll err = %v, want success %v", taken, failing, err, free >= 3)
	}
	if err != nil && !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("taken %05b failing %05b: %v, want ErrNotAcquired", taken, failing, err)
	}
	ours := func(v string) bool { return v != "" && v != "someone-else" }
	waitFor(t, "the nodes settle", func() bool { // late replies and roll-backs land
		both := 0
		for i := range e.nodes {
			a, b := ours(e.value(i, rkey(keys[0]))), ours(e.value(i, rkey(keys[1])))
			if a != b {
				return false
			}
			if a {
				both++
			}
		}
		return err == nil && both >= 3 || err != nil && both == 0
	})
	for i := range e.nodes {
		k := rkey(keys[i%2])
		if taken&(1<<i) != 0 && e.value(i, k) != "someone-else" {
			t.Fatalf("taken %05b failing %05b: node %d: the other lock's key became %q", taken, failing, i, e.value(i, k))
		}
		if err == nil && ours(e.value(i, rkey(keys[0]))) && e.value(i, rkey(keys[0])) != l.Token() {
			t.Fatalf("node %d holds a token that is not the lock's", i)
		}
	}
	if err == nil {
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("taken %05b failing %05b: release: %v", taken, failing, err)
		}
	}
}

// TestLockAllBadInput: every refusal comes before any I/O.
func TestLockAllBadInput(t *testing.T) {
	e := newEnv(t, 3)
	c := e.scriptClient()
	sync := e.client()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		c    *Client
		keys []string
		opts []Option
		want string
	}{
		{"nil list", c, nil, nil, "no keys"},
		{"empty list", c, []string{}, nil, "no keys"},
		{"empty key", c, []string{"a", ""}, nil, "key 1 is empty"},
		{"repeated key", c, []string{"a", "b", "a"}, nil, `"a" is listed twice`},
		{"bad option", c, []string{"a", "b"}, []Option{WithTTL(-1)}, "TTL"},
		{"synchronous pools", sync, []string{"a", "b"}, nil, "package pool"},
	} {
		for _, call := range []func() error{
			func() error { _, err := tc.c.TryLockAll(ctx, tc.keys, tc.opts...); return err },
			func() error { _, err := tc.c.LockAll(ctx, tc.keys, tc.opts...); return err },
			func() error {
				return tc.c.DoAll(ctx, tc.keys, func(context.Context) error { return nil }, tc.opts...)
			},
		} {
			if err := call(); err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrNotAcquired) {
				t.Errorf("%s: err = %v, want an error about %q", tc.name, err, tc.want)
			}
		}
	}
	if err := c.DoAll(ctx, []string{"a", "b"}, nil); err == nil || !strings.Contains(err.Error(), "fn is nil") {
		t.Errorf("DoAll with a nil fn: %v", err)
	}
	for _, n := range e.nodes {
		if n.fault.calls.Load() != 0 || len(n.m.Keys()) != 0 {
			t.Fatalf("bad input reached a node: %d calls, keys %v", n.fault.calls.Load(), n.m.Keys())
		}
	}
}

// slottedPool is a Pool of package pool that says it is a Redis Cluster
// client: a lock's keys must then share a hash slot.
type slottedPool struct {
	pool.Pool
	node.Sender
}

func (slottedPool) Slotted() bool { return true }

// TestLockAllOneSlotOnCluster: on Cluster pools, keys in different slots are
// refused before any I/O, and one hash tag makes them work.
func TestLockAllOneSlotOnCluster(t *testing.T) {
	e := newEnv(t, 3)
	var ps []pool.Pool
	for _, p := range e.scriptPools() {
		ps = append(ps, slottedPool{Pool: p, Sender: p.(node.Sender)})
	}
	c := New2(t, ps, testNodeTimeout)
	_, err := c.TryLockAll(context.Background(), []string{"orders", "stock"})
	if err == nil || !strings.Contains(err.Error(), "one slot") || !strings.Contains(err.Error(), "hash tag") {
		t.Fatalf("keys in two slots: %v, want an error naming the slots and the hash tag", err)
	}
	l, err := c.TryLockAll(context.Background(), []string{"orders", "stock"}, WithKeyPrefix("{shop}:"))
	if err != nil {
		t.Fatalf("keys under one hash tag: %v", err)
	}
	for i := range e.nodes {
		if e.value(i, "{shop}:{orders}") != l.Token() && e.value(i, "{shop}:{stock}") != l.Token() {
			continue
		}
		if e.value(i, "{shop}:{orders}") != e.value(i, "{shop}:{stock}") {
			t.Fatalf("node %d holds one key of two", i)
		}
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLockAllLeaseAPI: a lock of several keys has the whole lease API, and
// keeps every one of its keys from other locks of one key or several.
func TestLockAllLeaseAPI(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(10*time.Second), WithFencing(true))
	verifyAll(t, c) // tests read every node
	ctx := context.Background()
	prev, err := c.TryLock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLockAll(ctx, []string{"c", "a", "b"}, WithMetadata("job 7"))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Keys(); strings.Join(got, ",") != "c,a,b" || l.Key() != "c" || l.Metadata() != "job 7" {
		t.Fatalf("Keys %v Key %q Metadata %q", got, l.Key(), l.Metadata())
	}
	if l.Fence() <= prev.Fence() {
		t.Fatalf("fence %d after a holder of b with fence %d", l.Fence(), prev.Fence())
	}
	holding := e.settledAll(t, l)
	if _, err := c.TryLock(ctx, "b"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock of a key of the lock: %v, want ErrNotAcquired", err)
	}
	if _, err := c.TryLockAll(ctx, []string{"d", "a"}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLockAll overlapping the lock: %v, want ErrNotAcquired", err)
	}
	e.waitGone(rkey("d")) // all or none: d was never taken, or was rolled back
	if held, err := l.Held(ctx); !held || err != nil {
		t.Fatalf("Held = %v, %v", held, err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every key lives a minute on the nodes that hold the lock after Extend", func() bool {
		for _, i := range holding { // a quorum answered; the others follow
			for _, k := range []string{"a", "b", "c"} {
				if e.nodes[i].m.TTL(rkey(k)) < 50*time.Second {
					return false
				}
			}
		}
		return true
	})
	for _, i := range holding[3:] { // one key gone: the lock is not held there
		e.nodes[i].m.Del(rkey("a"))
	}
	if held, err := l.Held(ctx); !held || err != nil {
		t.Fatalf("Held with 3 of 5 nodes holding every key = %v, %v", held, err)
	}
	e.nodes[holding[0]].m.Del(rkey("c"))
	if held, err := l.Held(ctx); held || err != nil {
		t.Fatalf("Held with 2 of 5 nodes holding every key = %v, %v; want false", held, err)
	}
	if !errors.Is(l.Err(), ErrLockLost) {
		t.Fatalf("Err after Held found it gone: %v", l.Err())
	}
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release of a lost lock succeeded")
	}
	for _, k := range []string{"a", "b", "c"} {
		e.waitGone(rkey(k))
	}
	next, err := c.TryLock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence() <= l.Fence() {
		t.Fatalf("the next holder of b has fence %d, not above %d", next.Fence(), l.Fence())
	}
}

// settledAll waits until every node has answered l's acquire command and
// holds every key of l or none, none where the command failed (it is
// released), and returns the nodes that hold them. (A quorum answered
// before l was returned; on a loaded machine, the others may time out.)
func (e *env) settledAll(t *testing.T, l *Lock) []int {
	t.Helper()
	waitFor(t, "every node answered the acquire", func() bool { return l.landingNow() == nil })
	l.mu.Lock()
	unsure := slices.Clone(l.landing.unsure)
	l.mu.Unlock()
	var holding []int
	waitFor(t, "every node holds every key or none", func() bool {
		holding = holding[:0]
		for i := range e.nodes {
			n := 0
			for _, k := range l.Keys() {
				if e.value(i, rkey(k)) == l.Token() {
					n++
				}
			}
			if n != 0 && n != len(l.Keys()) || n != 0 && unsure != nil && unsure[i] {
				return false
			}
			if n > 0 {
				holding = append(holding, i)
			}
		}
		return true
	})
	return holding
}

// TestLockAllReleaseLeavesOthers: Release deletes the lock's keys, never a
// key that holds another token, and a key a waiter of one key (Lock) waits
// for is handed to it.
func TestLockAllReleaseLeavesOthers(t *testing.T) {
	e := newEnv(t, 3)
	c := e.scriptClient(WithTTL(10 * time.Second))
	verifyAll(t, c) // tests read every node
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.TryLockAll(ctx, []string{"x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := c.Lock(ctx, "x")
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, "the waiter joins the line of x", func() bool {
		z, _ := e.nodes[0].m.ZMembers(rkey("x") + "\x1fq")
		return len(z) == 1
	})
	e.nodes[2].m.Set(rkey("y"), "someone-else") // y passed to another on one node
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with a quorum holding every key: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter of x: %v", err)
	}
	if v := e.value(2, rkey("y")); v != "someone-else" {
		t.Fatalf("Release deleted another's key: %q", v)
	}
}

// TestLockAllOverlappingSetsProgress: Clients contending for overlapping sets
// ({a,b}, {b,c}, {c,a}) and single keys all make progress, and no key ever
// has two holders at once.
func TestLockAllOverlappingSetsProgress(t *testing.T) {
	e := newEnv(t, 3)
	sets := [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"b"}}
	var holders [3]atomic.Int32 // per key: holders now
	var overlaps atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 8 {
		c := e.scriptClient(WithTTL(5*time.Second), WithRetryBackoff(time.Millisecond, 20*time.Millisecond))
		verifyAll(t, c) // tests read every node
		set := sets[w%len(sets)]
		wg.Go(func() {
			for range 10 {
				err := c.DoAll(ctx, set, func(context.Context) error {
					for _, k := range set {
						if holders[k[0]-'a'].Add(1) != 1 {
							overlaps.Add(1)
						}
					}
					time.Sleep(time.Millisecond)
					for _, k := range set {
						holders[k[0]-'a'].Add(-1)
					}
					return nil
				})
				if err != nil {
					t.Errorf("set %v: %v", set, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d times a key had two holders", n)
	}
}

// TestLockAllAutoExtend: an auto-extended lock of several keys outlives its
// TTL, every key renewed, and is released whole.
func TestLockAllAutoExtend(t *testing.T) {
	e := newEnv(t, 3)
	c := e.scriptClient(WithNodeTimeout(50*time.Millisecond), WithTTL(600*time.Millisecond), WithAutoExtend(true))
	verifyAll(t, c) // tests read every node
	ctx := context.Background()
	l, err := c.LockAll(ctx, []string{"p", "q"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("lost while auto-extended: %v", err)
	}
	if held, err := l.Held(ctx); !held || err != nil {
		t.Fatalf("Held after 2.5 TTLs = %v, %v", held, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"p", "q"} {
		waitFor(t, "the keys are gone", func() bool { return e.holders(rkey(k), "") == 3 })
	}
}
