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
)

// sharedBy makes node i's k a key shared by holder token, lapsing in ttl.
func (e *env) sharedBy(i int, k, token string, ttl time.Duration) {
	m := e.nodes[i].m
	m.Set(k, "\x1c"+token)
	m.SetTTL(k, ttl)
	if _, err := m.ZAdd(k+"\x1fr", float64(time.Now().Add(ttl).UnixMilli()), token); err != nil {
		e.t.Fatal(err)
	}
	m.SetTTL(k+"\x1fr", ttl)
}

// sharedHolders returns the holders of k on node i, lapsed or not.
func (e *env) sharedHolders(i int, k string) []string {
	ms, _ := e.nodes[i].m.ZMembers(k + "\x1fr")
	return ms
}

// TestSharedEverySubset takes a shared lock with every subset of the 5 nodes
// where the key is held alone by another lock, every subset failing, and
// the other nodes alternately free and shared by another holder: it wins
// exactly when a quorum of nodes are free or shared and work; the nodes
// that said yes have it among their shared holders, the other holders are
// untouched, and a failed attempt leaves its token nowhere.
func TestSharedEverySubset(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(time.Minute), Shared())
	verifyAll(t, c)
	for taken := range 32 {
		for failing := range 32 {
			sharedSubset(t, e, c, taken, failing)
		}
	}
}

func sharedSubset(t *testing.T, e *env, c *Client, taken, failing int) {
	t.Helper()
	key := fmt.Sprintf("shared-%d-%d", taken, failing)
	k := rkey(key)
	for i, n := range e.nodes {
		switch {
		case taken&(1<<i) != 0:
			n.m.Set(k, "someone-else")
		case i%2 == 1:
			e.sharedBy(i, k, "reader-x", time.Minute)
		}
		if failing&(1<<i) != 0 {
			n.m.SetError("ERR injected")
		}
	}
	l, err := c.TryLock(context.Background(), key)
	for _, n := range e.nodes {
		n.m.SetError("")
	}
	if want := bits.OnesCount(uint(31&^taken&^failing)) >= 3; (err == nil) != want {
		t.Fatalf("taken %05b failing %05b: TryLock(Shared) err = %v, want success %v", taken, failing, err, want)
	}
	if err != nil && !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("taken %05b failing %05b: %v", taken, failing, err)
	}
	ours := func(i int) bool { // node i has a holder other than reader-x
		for _, h := range e.sharedHolders(i, k) {
			if h != "reader-x" {
				return true
			}
		}
		return false
	}
	waitFor(t, "the nodes settle", func() bool {
		n := 0
		for i := range e.nodes {
			if ours(i) {
				n++
			}
		}
		return err == nil && n >= 3 || err != nil && n == 0
	})
	for i := range e.nodes {
		// A node the round did not wait for may take our holder while
		// this reads (the key and its holders change together, in one
		// script): a holder without the key's mark counts only when the
		// holders read the same before and after the key.
		before := ours(i)
		v := e.value(i, k)
		switch {
		case taken&(1<<i) != 0 && (v != "someone-else" || ours(i)):
			t.Fatalf("taken %05b failing %05b: node %d: the other lock's key became %q, holders %v", taken, failing, i, v, e.sharedHolders(i, k))
		case i%2 == 1 && taken&(1<<i) == 0 && !strings.Contains(strings.Join(e.sharedHolders(i, k), ","), "reader-x"):
			t.Fatalf("node %d: the other shared holder is gone: %v", i, e.sharedHolders(i, k))
		case before && ours(i) && !strings.HasPrefix(v, "\x1c"):
			t.Fatalf("node %d: a shared holder on a key that reads %q", i, v)
		}
	}
	if err == nil {
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("taken %05b failing %05b: release: %v", taken, failing, err)
		}
	}
}

// TestSharedExcludesExclusive: shared holders hold together, and neither a
// lock of the key alone nor one of several keys gets in while they do;
// once the last one left, the key is free; while a lock holds it alone, no
// shared holder gets in.
func TestSharedExcludesExclusive(t *testing.T) {
	e := newEnv(t, 3)
	c := e.scriptClient(WithTTL(10 * time.Second))
	verifyAll(t, c) // tests read every node
	ctx := context.Background()
	a, err := c.TryLock(ctx, "doc", Shared(), WithMetadata("reader a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryLock(ctx, "doc", Shared(), WithMetadata("reader b"))
	if err != nil {
		t.Fatalf("a second shared holder: %v", err)
	}
	if !a.Shared() || !b.Shared() {
		t.Fatal("Lock.Shared is false for shared holders")
	}
	if _, err := c.TryLock(ctx, "doc"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock while shared: %v, want ErrNotAcquired", err)
	}
	if _, err := c.TryLockAll(ctx, []string{"other", "doc"}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLockAll while shared: %v, want ErrNotAcquired", err)
	}
	if locked, err := c.Locked(ctx, "doc"); !locked || err != nil {
		t.Fatalf("Locked while shared = %v, %v", locked, err)
	}
	in, err := c.Inspect(ctx, "doc")
	if err != nil || in.State != StateHeld || len(in.Shared) != 2 || in.Holder != "" {
		t.Fatalf("Inspect while shared: %+v, %v", in, err)
	}
	if metas := in.Shared[0].Metadata + "," + in.Shared[1].Metadata; metas != "reader a,reader b" && metas != "reader b,reader a" {
		t.Fatalf("Inspect's shared holders: %+v", in.Shared)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "doc"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock with one shared holder left: %v, want ErrNotAcquired", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range e.nodes {
		waitFor(t, "the shared key is gone", func() bool { return e.value(i, rkey("doc")) == "" && len(e.sharedHolders(i, rkey("doc"))) == 0 })
	}
	w, err := c.TryLock(ctx, "doc")
	if err != nil {
		t.Fatalf("TryLock after the shared holders left: %v", err)
	}
	if w.Shared() {
		t.Fatal("Lock.Shared is true for a lock held alone")
	}
	if _, err := c.TryLock(ctx, "doc", Shared()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a shared holder while held alone: %v, want ErrNotAcquired", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSharedWriterNotStarved: shared holders that take a new hold before
// they release the last one keep the key shared for ever, unless a waiting
// exclusive holder holds new ones back; it must get the key, alone, and
// the shared holders go on after it.
func TestSharedWriterNotStarved(t *testing.T) {
	e := newEnv(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	readers := e.scriptClient(WithTTL(5*time.Second), WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	verifyAll(t, readers)    // tests read every node
	var holding atomic.Int32 // shared holds now
	var stop, writerDone atomic.Bool
	var after atomic.Int32 // shared holds that began after the writer's
	take := func(l *Lock, err error) (*Lock, error) {
		if err == nil {
			holding.Add(1)
			if writerDone.Load() {
				after.Add(1)
			}
		}
		return l, err
	}
	drop := func(l *Lock) {
		holding.Add(-1)
		_ = l.Release(ctx)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			cur, err := take(readers.Lock(ctx, "doc", Shared()))
			for err == nil && !stop.Load() {
				time.Sleep(10 * time.Millisecond)
				next, terr := take(readers.TryLock(ctx, "doc", Shared())) // hand over hand
				drop(cur)
				if terr != nil {
					next, err = take(readers.Lock(ctx, "doc", Shared()))
				}
				cur = next
			}
			if err == nil {
				drop(cur)
			}
		})
	}
	waitFor(t, "readers overlap", func() bool { return holding.Load() >= 2 })
	writer := e.scriptClient(WithTTL(5 * time.Second))
	verifyAll(t, writer) // tests read every node
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	w, err := writer.Lock(wctx, "doc")
	if err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("the exclusive waiter starved: %v", err)
	}
	if n := holding.Load(); n != 0 {
		t.Errorf("the exclusive holder got the key with %d shared holds in", n)
	}
	_ = w.Release(ctx)
	writerDone.Store(true)
	waitFor(t, "shared holders go on", func() bool { return after.Load() > 0 })
	stop.Store(true)
	wg.Wait()
}

// TestSharedLeaseAPI: a shared holder extends, checks, auto-extends and is
// lost like any lock; a lapsed holder is not extended back.
func TestSharedLeaseAPI(t *testing.T) {
	e := newEnv(t, 3)
	c := e.scriptClient(WithNodeTimeout(50*time.Millisecond), WithTTL(600*time.Millisecond))
	verifyAll(t, c) // tests read every node
	ctx := context.Background()
	auto, err := c.Lock(ctx, "doc", Shared(), WithAutoExtend(true))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, "doc", Shared())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if held, err := l.Held(ctx); !held || err != nil {
		t.Fatalf("Held = %v, %v", held, err)
	}
	time.Sleep(1500 * time.Millisecond) // 2.5 TTLs: auto is renewed, l was extended
	if err := auto.Err(); err != nil {
		t.Fatalf("an auto-extended shared holder was lost: %v", err)
	}
	if held, err := auto.Held(ctx); !held || err != nil {
		t.Fatalf("auto Held = %v, %v", held, err)
	}
	long, err := c.TryLock(ctx, "doc", Shared())
	if err != nil {
		t.Fatal(err)
	}
	if err := long.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := long.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range e.nodes { // the key lives as long as l, now its longest-lived holder
		waitFor(t, "the key lives as long as its longest-lived holder", func() bool {
			if !slices.Contains(e.sharedHolders(i, rkey("doc")), l.Token()) {
				return true // l's acquire timed out there (a loaded machine)
			}
			if lapse, err := e.nodes[i].m.ZScore(rkey("doc")+"\x1fr", l.Token()); err != nil || lapse < float64(time.Now().Add(5*time.Second).UnixMilli()) {
				return true // l's 10 s extend timed out there: its place lapses with its first TTL
			}
			ttl := e.nodes[i].m.TTL(rkey("doc"))
			return ttl > 5*time.Second && ttl <= 10*time.Second
		})
	}
	if err := auto.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := l.Held(ctx); !held || err != nil {
		t.Fatalf("Held after the other holders left = %v, %v", held, err)
	}
	for i := range 2 { // l's place is gone on a quorum: it is lost
		e.nodes[i].m.ZRem(rkey("doc")+"\x1fr", l.Token())
	}
	if held, err := l.Held(ctx); held || err != nil {
		t.Fatalf("Held with its place gone on 2 of 3 nodes = %v, %v", held, err)
	}
	if err := l.Extend(ctx, 0); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Extend of a lost shared holder: %v", err)
	}
	if n := len(e.sharedHolders(0, rkey("doc"))); n != 0 {
		t.Fatalf("an extend put a lost holder back: %d holders", n)
	}
}

// TestSharedBadInput: Shared with fencing, over Pools that cannot keep
// lines, and for several keys is refused before any I/O.
func TestSharedBadInput(t *testing.T) {
	e := newEnv(t, 3)
	c := e.scriptClient()
	sync := e.client()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"fenced", func() error { _, err := c.TryLock(ctx, "k", Shared(), WithFencing(true)); return err }, "WithFencing"},
		{"fenced Lock", func() error { _, err := c.Lock(ctx, "k", Shared(), WithFencing(true)); return err }, "WithFencing"},
		{"synchronous pools", func() error { _, err := sync.TryLock(ctx, "k", Shared()); return err }, "package pool"},
		{"several keys", func() error { _, err := c.TryLockAll(ctx, []string{"a", "b"}, Shared()); return err }, "cannot be shared"},
		{"Do", func() error {
			return c.Do(ctx, "k", func(context.Context) error { return nil }, Shared(), WithFencing(true))
		}, "WithFencing"},
	} {
		if err := tc.call(); err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrNotAcquired) {
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
	for _, n := range e.nodes {
		if n.fault.calls.Load() != 0 || len(n.m.Keys()) != 0 {
			t.Fatalf("bad input reached a node: keys %v", n.m.Keys())
		}
	}
	if _, err := c.TryLock(ctx, "k", Shared(), WithTokenGenerator(func() (string, error) { return "\x1cx", nil })); err == nil || !strings.Contains(err.Error(), "shared") {
		t.Fatalf("a token that reads as a shared key: %v", err)
	}
}

// TestSharedHandsToWaitingWriter: the last shared holder's release hands
// the key to the exclusive waiter in line, in another Client.
func TestSharedHandsToWaitingWriter(t *testing.T) {
	e := newEnv(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.scriptClient(WithTTL(10 * time.Second))
	verifyAll(t, c) // tests read every node
	r, err := c.TryLock(ctx, "doc", Shared())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	writer := e.scriptClient(WithTTL(10 * time.Second))
	verifyAll(t, writer) // tests read every node
	go func() {
		w, err := writer.Lock(ctx, "doc")
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	// On every node: a writer in line on node 0 alone (its acquires to the
	// others not yet run, under make test's load) leaves a quorum that
	// admits a new shared holder, rightly.
	waitFor(t, "the writer joins the line on every node", func() bool {
		for _, n := range e.nodes {
			if z, _ := n.m.ZMembers(rkey("doc") + "\x1fq"); len(z) != 1 {
				return false
			}
		}
		return true
	})
	if _, err := c.TryLock(ctx, "doc", Shared()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a new shared holder while a writer waits: %v, want ErrNotAcquired", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiting writer: %v", err)
	}
}

// TestSharedLastReleaseWakesWriter: the last shared holder's release wakes
// the waiter the nodes hand the key to, also when different holders made
// the key shared on different nodes (each node's key names its own), which
// the waiter's Client would otherwise count as three releases of two nodes
// or fewer each, never a quorum, and leave the waiter to its slow polls.
func TestSharedLastReleaseWakesWriter(t *testing.T) {
	e := newEnv(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := e.scriptClient(WithTTL(10 * time.Second))
	verifyAll(t, c)
	var readers []*Lock
	for range 3 {
		r, err := c.TryLock(ctx, "doc", Shared())
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	k := rkey("doc")
	waitFor(t, "every node has the three holders", func() bool {
		for i := range e.nodes {
			if len(e.sharedHolders(i, k)) != 3 {
				return false
			}
		}
		return true
	})
	for i := range e.nodes { // nodes 0,1: B made it shared; 2,3: C; 4: A
		e.nodes[i].m.Set(k, "\x1c"+readers[[]int{1, 1, 2, 2, 0}[i]].Token())
		e.nodes[i].m.SetTTL(k, 10*time.Second)
	}
	writer := e.scriptClient(WithTTL(10*time.Second), WithRetryBackoff(5*time.Second, 10*time.Second))
	verifyAll(t, writer)
	got := make(chan error, 1)
	go func() {
		w, err := writer.Lock(ctx, "doc")
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, "the writer joins the line on every node", func() bool {
		for i := range e.nodes {
			if z, _ := e.nodes[i].m.ZMembers(k + "\x1fq"); len(z) != 1 {
				return false
			}
		}
		return true
	})
	waitFor(t, "the writer's Client is subscribed on every node, and the writer asleep", func() bool {
		return writer.notes.Settled(k, 1, 5) // the confirmations woke it once: its attempt must be over
	})
	woken := writer.notes.Stats.WokenByRelease.Load()
	for _, r := range readers {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatalf("the writer: %v", err)
	}
	woken = writer.notes.Stats.WokenByRelease.Load() - woken
	if woken == 0 {
		t.Fatalf("the writer got the key by polling: no release woke it (by subscription %d, again %d, messages %d)", writer.notes.Stats.WokenBySubscription.Load(), writer.notes.Stats.WokenAgain.Load(), writer.notes.Stats.Messages.Load())
	}
}

// TestWriterThatGaveUpHoldsNoReaderBack: an exclusive Lock that gives up on
// a key held shared leaves the key's line before it returns, so a shared
// TryLock right after, from the same Client or another, is admitted.
// Before, the leave went to the background lane, which the next command
// overtook on some nodes, and the shared TryLock was refused there as
// behind a waiter (issue 31, defect 5: 4-10 of 20 on real Redis).
func TestWriterThatGaveUpHoldsNoReaderBack(t *testing.T) {
	e := newEnv(t, 3)
	ctx := context.Background()
	c := e.scriptClient(WithTTL(time.Minute))
	other := e.scriptClient(WithTTL(time.Minute))
	verifyAll(t, c)
	verifyAll(t, other)
	r, err := c.TryLock(ctx, "doc", Shared())
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := range 20 {
		if _, err := c.Lock(ctx, "doc", WithMaxWait(20*time.Millisecond)); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("the exclusive Lock of a key held shared = %v; want ErrNotAcquired", err)
		}
		for _, cl := range []*Client{c, other}[i%2:][:1] {
			l, err := cl.TryLock(ctx, "doc", Shared())
			if err != nil {
				refused++
				continue
			}
			_ = l.Release(ctx)
		}
	}
	if refused > 0 {
		t.Fatalf("%d of 20 shared TryLocks right after a writer gave up were refused", refused)
	}
	_ = r.Release(ctx)
}
