package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// TestLeaseHeldWhileContended: a holder with auto-extension keeps its lock
// for more than 5 TTLs on real Redis while 6 goroutines of 3 other clients
// keep trying to take it; none of them gets it, and it is free once released.
func TestLeaseHeldWhileContended(t *testing.T) {
	const (
		ttl         = 600 * time.Millisecond
		nodeTimeout = 100 * time.Millisecond
	)
	c := startCluster(t, ttl, "")
	ctx := ctxT(t, 60*time.Second)
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}
	holder := c.newLockClient(t, "holder", c.direct, opts...)
	l, err := holder.TryLock(ctx, "lease", redlock.WithAutoExtend(true))
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()

	var (
		stop     atomic.Bool
		tries    atomic.Int64
		won      atomic.Int64
		wg       sync.WaitGroup
		contend  []*lockClient
		contendN = 3
	)
	for i := range contendN {
		contend = append(contend, c.newLockClient(t, "contender"+string(rune('A'+i)), c.direct, opts...))
	}
	for _, lc := range contend {
		for range 2 {
			wg.Go(func() {
				for !stop.Load() {
					tries.Add(1)
					if other, err := lc.TryLock(ctx, "lease"); err == nil {
						won.Add(1)
						_ = other.Release(ctx)
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
	}
	for time.Since(acquired) < 5*ttl+ttl/2 {
		select {
		case <-l.Done():
			t.Fatalf("the lease ended after %v: %v", time.Since(acquired), l.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	stop.Store(true)
	wg.Wait()
	if won.Load() != 0 {
		t.Fatalf("contenders acquired the held lock %d times", won.Load())
	}
	if tries.Load() < 20 {
		t.Fatalf("only %d contending attempts", tries.Load())
	}
	if ok, err := l.Held(ctx); !ok || err != nil || l.Err() != nil {
		t.Fatalf("after %v: Held = %v, %v; Err %v", time.Since(acquired), ok, err, l.Err())
	}
	t.Logf("held for %v (%.1f TTLs) against %d attempts of %d goroutines", time.Since(acquired).Round(time.Millisecond), float64(time.Since(acquired))/float64(ttl), tries.Load(), 2*contendN)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := contend[0].TryLock(ctx, "lease"); err != nil {
		t.Fatalf("after Release: %v", err)
	}
}

// failures signals every failed renewal.
type failures struct {
	redlock.NopObserver
	ch chan struct{}
}

func (f failures) ExtendFailed(redlock.Event) {
	select {
	case f.ch <- struct{}{}:
	default:
	}
}

// TestLeaseLostWhenMajorityKilled: killing 3 of 5 nodes under an
// auto-extended lock cancels its lease context with ErrLockLost before the
// deadline of its last successful renewal; once the nodes are back, another
// client gets the lock only after that deadline.
func TestLeaseLostWhenMajorityKilled(t *testing.T) {
	const (
		ttl         = 2 * time.Second
		nodeTimeout = 100 * time.Millisecond
	)
	c := startCluster(t, ttl, "")
	c.keepsData() // the killed nodes come back with their data
	ctx := ctxT(t, 60*time.Second)
	failed := failures{ch: make(chan struct{}, 1)}
	holder := c.newLockClient(t, "holder", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout), redlock.WithObserver(failed))
	next := c.newLockClient(t, "next", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout))
	l, err := holder.TryLock(ctx, "lease", redlock.WithAutoExtend(true))
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()

	for _, i := range []int{0, 2, 4} {
		if err := c.Node(i).Kill(); err != nil {
			t.Fatal(err)
		}
	}
	// After a renewal has failed, none can succeed any more: the deadline
	// is final.
	select {
	case <-failed.ch:
	case <-lctx.Done():
	}
	deadline := l.Deadline()

	<-lctx.Done()
	lostAt := time.Now()
	if !errors.Is(context.Cause(lctx), redlock.ErrLockLost) || !errors.Is(l.Err(), redlock.ErrLockLost) {
		t.Fatalf("cause %v, Err %v; want ErrLockLost", context.Cause(lctx), l.Err())
	}
	if lostAt.After(deadline) {
		t.Fatalf("the lease was declared lost %v after its deadline", lostAt.Sub(deadline))
	}
	t.Logf("lease lost %v before its deadline", deadline.Sub(lostAt).Round(time.Millisecond))

	for _, i := range []int{0, 2, 4} {
		if err := c.Node(i).Restart(false); err != nil { // with their data
			t.Fatal(err)
		}
	}
	l2, err := next.Lock(ctx, "lease", redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Now(); got.Before(deadline) {
		t.Fatalf("the next holder got the lock %v before the old deadline", deadline.Sub(got))
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBatchedRenewalsUnderNodeFaults (issue 12): 1,000 auto-extended locks
// of one Client, renewed by its renewal service in batches, stay held on
// real Redis for 5 TTLs while one node is paused for longer than a TTL and
// another is killed and restarted with its data; every lock is still on a
// quorum at the end (read back from the servers), and Release frees them.
func TestBatchedRenewalsUnderNodeFaults(t *testing.T) {
	const (
		ttl   = 2 * time.Second
		locks = 1000
	)
	c := startCluster(t, ttl, "")
	c.keepsData()
	ctx := ctxT(t, 90*time.Second)
	lc := c.newLockClient(t, "holder", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(200*time.Millisecond))
	ls := make([]*redlock.Lock, locks)
	for i := range ls {
		l, err := lc.TryLock(ctx, fmt.Sprintf("batch-%d", i), redlock.WithAutoExtend(true))
		if err != nil {
			t.Fatalf("lock %d: %v", i, err)
		}
		ls[i] = l
	}
	start := time.Now()
	if err := c.Node(0).Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + ttl/2)
	if err := c.Node(0).Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.Node(1).Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl)
	if err := c.Node(1).Restart(false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5*ttl - time.Since(start))
	admins := c.admins(t)
	for i, l := range ls {
		if l.Err() != nil {
			t.Fatalf("lock %d lost after %v: %v", i, time.Since(start), l.Err())
		}
		on := 0
		for _, a := range admins {
			if get(t, a, rkey(l.Key())) == l.Token() {
				on++
			}
		}
		if on < nodes/2+1 {
			t.Fatalf("lock %d: Err nil, but its token is on %d nodes", i, on)
		}
	}
	for _, l := range ls {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %s: %v", l.Key(), err)
		}
	}
}
