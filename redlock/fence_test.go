package redlock

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

// fenceKey is the fencing counter of every key under the default prefix on
// a standalone master.
const fenceKey = DefaultKeyPrefix + "fence"

// fenceOf returns node i's fencing counter for key (shared by all keys).
func (e *env) fenceOf(i int, key string) uint64 {
	v, err := e.nodes[i].m.Get(fenceKey)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}

// TestFencesIncrease: successive holders get strictly increasing tokens,
// also when the nodes' counters differ and the quorum changes.
func TestFencesIncrease(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithFencing(true))
	var last uint64
	for i := range 30 {
		// Every third round, one node fails, so the quorums differ.
		if i%3 == 0 {
			e.nodes[i%5].fault.setErr(errConnRefused)
		}
		l, err := c.TryLock(context.Background(), "fenced")
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("round %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.nodes[i%5].fault.setErr(nil)
		e.waitGone(rkey("fenced"))
	}
	// The counters live on, without a TTL.
	for i, n := range e.nodes {
		if ttl := n.m.TTL(fenceKey); ttl != 0 || !n.m.Exists(fenceKey) {
			t.Fatalf("node %d: counter has TTL %v", i, ttl)
		}
	}
}

// TestFenceWriteBack: the maximum of the agreeing nodes is written back to
// them, except on a node that no longer holds our token by then.
func TestFenceWriteBack(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithFencing(true), WithNodeTimeout(time.Minute), WithTTL(time.Hour))
	fk := rkey("wb") + ":fence"
	for i := 1; i < 5; i++ {
		e.nodes[i].m.Set(fk, "10") // nodes 1-4 have seen 10 holders, node 0 none
	}
	e.nodes[0].fault.hold(false, "raise")
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.TryLock(context.Background(), "wb")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for e.nodes[0].fault.calls.Load() < 2 { // the acquire, then the held-back raise
		time.Sleep(time.Millisecond)
	}
	e.nodes[0].m.Set(rkey("wb"), "someone-else") // our key on node 0 is gone
	<-e.nodes[0].fault.open()
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Fence() != 11 {
		t.Fatalf("fence %d, want 11 (10, incremented)", l.Fence())
	}
	e.waitHolders(rkey("wb"), l.Token(), 4)
	if f := e.fenceOf(0, "wb"); f != 1 {
		t.Fatalf("node 0 counter %d: raised although our token was gone", f)
	}
	for i := 1; i < 5; i++ {
		if f := e.fenceOf(i, "wb"); f != 11 {
			t.Fatalf("node %d counter %d, want 11", i, f)
		}
	}
}

// TestFenceWriteBackFails: when a quorum does not confirm the write-back,
// the acquisition fails and leaves nothing behind.
func TestFenceWriteBackFails(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithFencing(true), WithNodeTimeout(30*time.Millisecond))
	for i := range 3 {
		e.nodes[i].fault.hold(false, "raise")
	}
	_, err := c.TryLock(context.Background(), "wbf")
	qe := quorumErr(t, err)
	if !errors.Is(err, ErrNotAcquired) || qe.Phase != "fence write-back" {
		t.Fatalf("got %v (phase %q)", err, qe.Phase)
	}
	for i := range 3 {
		e.nodes[i].fault.open()
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range e.nodes {
		if v := e.value(i, rkey("wbf")); v != "" {
			t.Fatalf("node %d holds %q", i, v)
		}
	}
}

// TestNoFencingNoCounter: without fencing, Fence is 0 and no counter is made.
func TestNoFencingNoCounter(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	l, err := c.TryLock(context.Background(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	e.waitHolders(rkey("plain"), l.Token(), 5)
	if l.Fence() != 0 {
		t.Fatalf("Fence %d without fencing", l.Fence())
	}
	for i, n := range e.nodes {
		if n.m.Exists(rkey("plain") + ":fence") {
			t.Fatalf("node %d has a counter", i)
		}
		if calls := n.fault.calls.Load(); calls != 1 {
			t.Fatalf("node %d: %d calls for one acquisition, want 1", i, calls)
		}
	}
}

// TestFenceCountersBounded (issue 12): acquiring and releasing many
// distinct keys with fencing leaves one counter per master, not one per key.
func TestFenceCountersBounded(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithFencing(true))
	var last uint64
	for i := range 200 {
		l, err := c.TryLock(context.Background(), "bounded:"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last { // one counter for all keys: tokens still grow
			t.Fatalf("key %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil { // waits for the releases still under way
		t.Fatal(err)
	}
	for i, n := range e.nodes {
		if keys := n.m.Keys(); len(keys) != 1 || keys[0] != fenceKey {
			t.Fatalf("node %d keeps %d keys after 200 released locks (%.3q...), want only %s", i, len(keys), keys, fenceKey)
		}
	}
}

// TestFenceMigration (issue 12): counters of earlier versions, one per key
// (the lock key + ":fence"), are folded into the shared counter: the next
// token is above every quorum's old counter, even when the shared counter
// is lower, and the old counters are deleted where the lock was taken.
func TestFenceMigration(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithFencing(true))
	old := rkey("legacy") + ":fence"
	for i, v := range []string{"50", "50", "50", "7", "7"} { // the last holder's token was 50
		e.nodes[i].m.Set(old, v)
		e.nodes[i].m.Set(fenceKey, "3") // other keys' tokens so far
	}
	e.nodes[0].fault.setErr(errConnRefused) // a quorum without one of the 50s
	e.nodes[1].fault.setErr(errConnRefused)
	l, err := c.TryLock(context.Background(), "legacy")
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() <= 50 {
		t.Fatalf("fence %d after an old token of 50", l.Fence())
	}
	for i := 2; i < 5; i++ {
		if e.nodes[i].m.Exists(old) || e.fenceOf(i, "legacy") < l.Fence() {
			t.Fatalf("node %d: old counter left %v, counter %d < fence %d", i, e.nodes[i].m.Exists(old), e.fenceOf(i, "legacy"), l.Fence())
		}
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.nodes[0].fault.setErr(nil)
	e.nodes[1].fault.setErr(nil)
	l2, err := c.TryLock(context.Background(), "other")
	if err != nil || l2.Fence() <= l.Fence() {
		t.Fatalf("next key: fence %v (err %v), want above %d", l2, err, l.Fence())
	}
	_ = l2.Release(context.Background())
}
