package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestKillMinorityUnderContention kills one, then a second, of five nodes
// while locks are held and 16 goroutines (on 4 Clients with their own
// connections) contend for 3 keys. Acquisitions keep succeeding after each
// kill; the history checker finds no two holders of one key overlapping (S1,
// SEC), every deadline within its bounds (S2), and no increment of the
// counter guarded by each lock lost (S5, LIN); a lock held across both kills
// stays held and extendable; and no failed attempt leaves its token behind
// (L2).
func TestKillMinorityUnderContention(t *testing.T) {
	const (
		ttl         = 4 * time.Second
		nodeTimeout = 200 * time.Millisecond
		clients     = 4
		workers     = 16
		perPhase    = 150 // critical sections required in each phase
		// heldTTL is the TTL of the lock held across the kills: a phase
		// on a loaded machine can outlast ttl, and the lock must not
		// expire between two of the test's extensions.
		heldTTL = 30 * time.Second
	)
	c := startCluster(t, heldTTL, "")
	ctx := ctxT(t, 90*time.Second)
	lcs := c.warmClients(t, ctx, []redlock.Option{
		redlock.WithTTL(ttl),
		redlock.WithNodeTimeout(nodeTimeout),
		redlock.WithRetryBackoff(2*time.Millisecond, 20*time.Millisecond),
	}, numbered("client", clients)...)
	keys := []string{"hot-a", "hot-b", "hot-c"}
	counters := map[string]*atomic.Int64{}
	for _, k := range keys {
		counters[k] = new(atomic.Int64)
	}
	h := history.New()
	var tl workerTally
	stopWorkers := contendForKeys(t, ctx, h, lcs, workers, ttl, counters, &tl)
	t.Cleanup(stopWorkers)

	held := record(h, lcs[0], "held-across-kills", heldTTL)
	l := holdOnAll(t, ctx, held, c.admins(t), "held-across-kills")
	progress := func(phase string) {
		t.Helper()
		from := tl.done()
		took := eventually(t, 30*time.Second, 5*time.Millisecond, phase+": critical sections completed", func() bool {
			return tl.done() >= from+perPhase
		})
		t.Logf("%s: %d critical sections in %v (failed attempts so far: %d)", phase, perPhase, took, tl.failed.Load())
	}
	progress("all 5 nodes up")
	for _, i := range []int{4, 3} {
		if err := c.Node(i).Kill(); err != nil {
			t.Fatal(err)
		}
		phase := fmt.Sprintf("node%d killed", i)
		stillHeld(t, ctx, held, l, phase)
		progress(phase)
	}
	stopWorkers()
	if err := held.release(t, ctx, l); err != nil {
		t.Fatalf("Release of the lock held across the kills: %v", err)
	}

	checkContention(t, h, &tl, counters, history.Config{NodeTimeout: nodeTimeout})
	for _, lc := range lcs {
		lc.closeAndCheck(t)
	}
}

// checkContention gives h the final value of each key's counter and checks
// it, with every critical section the workers completed counted by S5.
func checkContention(t *testing.T, h *history.History, tl *workerTally, counters map[string]*atomic.Int64, cfg history.Config) {
	t.Helper()
	for k, ctr := range counters {
		h.SetCounter(k, ctr.Load())
	}
	r := checkHistory(t, h, cfg)
	if r.Checked[history.S5] != tl.done() || r.Sections != tl.done() {
		t.Errorf("S5 checked %d of %d critical sections (%d recorded)", r.Checked[history.S5], tl.done(), r.Sections)
	}
	perKey := map[string]int{}
	for _, op := range tl.acquired() {
		perKey[op.Key]++
	}
	t.Logf("%d critical sections on %d keys (%v), %d failed attempts, %d releases short of a quorum",
		tl.done(), len(counters), perKey, tl.failed.Load(), tl.relFailed.Load())
}

// contendForKeys starts n workers on the clients lcs (in turn) that take
// the keys of counters at random and increment each key's counter under
// its lock, until the function it returns is called (which waits for them).
// The even ones wait up to 2 s in Lock, the odd ones TryLock, paced.
func contendForKeys(t *testing.T, ctx context.Context, h *history.History, lcs []*lockClient, n int, ttl time.Duration, counters map[string]*atomic.Int64, tl *workerTally) (stop func()) {
	keys := slices.Sorted(maps.Keys(counters))
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range n {
		lc := lcs[w%len(lcs)]
		wait := time.Duration(0)
		if w%2 == 0 {
			wait = 2 * time.Second
		}
		wk := newWorker(h, lc, fmt.Sprintf("worker%d/%s", w, lc.name), ttl, w, 42, wait)
		wg.Go(func() {
			for wctx.Err() == nil {
				key := keys[wk.rng.IntN(len(keys))]
				pause := time.Duration(100+wk.rng.IntN(400)) * time.Microsecond
				if !wk.turn(t, wctx, key, counters[key], pause, tl, releaseFailedByNode) && wait == 0 {
					// Pace the TryLock workers a little (not synchronisation).
					time.Sleep(time.Duration(1+wk.rng.IntN(3)) * time.Millisecond)
				}
			}
		})
	}
	return sync.OnceFunc(func() {
		cancel()
		wg.Wait()
	})
}

// holdOnAll acquires key with r's TTL and returns the lock once it is on
// all 5 nodes, so that it keeps a quorum when two of them die: TryLock
// returns at a quorum, and on a loaded machine a straggling SET can miss
// its deadline in the node's queue (never sent). A lock that did not reach
// them all is released and taken again.
func holdOnAll(t *testing.T, ctx context.Context, r *recorded, admins []*redis.Client, key string) *redlock.Lock {
	t.Helper()
	for range 20 {
		l, _, err := r.acquire(ctx, key, 0)
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		if onAll(ctx, admins, rkey(key), l.Token()) {
			return l
		}
		if err := r.release(t, ctx, l); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	t.Fatalf("the lock never reached all 5 nodes in 20 attempts")
	return nil
}

// stillHeld fails the test unless r's lock l is held and can be extended.
func stillHeld(t *testing.T, ctx context.Context, r *recorded, l *redlock.Lock, phase string) {
	t.Helper()
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Fatalf("%s: Held = %v, %v; want true", phase, ok, err)
	}
	if err := r.extend(ctx, l); err != nil {
		t.Fatalf("%s: Extend: %v", phase, err)
	}
}

// releaseFailedByNode reports whether err is a failed release that a dead
// node explains: it matches ErrNotHeld and at least one node failed (error
// or timeout) rather than saying "not held".
func releaseFailedByNode(err error) bool {
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotHeld) || !errors.As(err, &qe) {
		return false
	}
	for _, r := range qe.Nodes {
		if r.Outcome == redlock.OutcomeError || r.Outcome == redlock.OutcomeTimeout {
			return true
		}
	}
	return false
}

// onAll waits (a little) for the won round's stragglers and reports whether
// every node holds token at key.
func onAll(ctx context.Context, admins []*redis.Client, key, token string) bool {
	for range 50 {
		all := true
		for _, a := range admins {
			if v, err := a.Get(ctx, key).Result(); err != nil || v != token {
				all = false
			}
		}
		if all {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}
