package integration

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// fenceKey is the Redis key of the fencing counter of the lock named key:
// on a standalone master, one counter for every key under the prefix
// (documented in redlock.WithFencing).
func fenceKey(string) string { return redlock.DefaultKeyPrefix + "fence" }

// dropFenceCounters registers a clean-up, to run after the Clients of the
// test have closed and before the harness's lock-key TTL check (t.Cleanup is
// LIFO, so call it right after startCluster): the fencing counters live under
// the lock prefix and, by design, have no TTL, which that check would report
// as a lock key that never expires. It checks that every counter found on a
// reachable node indeed has no TTL and holds a positive integer, and deletes
// it, so that the check sees only lock keys.
func dropFenceCounters(t *testing.T, c *cluster) {
	t.Helper()
	t.Cleanup(func() {
		c.reachable(t, "fence counter clean-up", func(i int, cl *redis.Client) {
			for _, k := range lockKeys(t, cl) {
				if !strings.HasSuffix(k, ":fence") {
					continue
				}
				if ms := pttl(t, cl, k); ms != -1 {
					t.Errorf("node%d: fencing counter %q has PTTL %dms; counters must never expire", i, k, ms)
				}
				if n, err := strconv.ParseUint(get(t, cl, k), 10, 64); err != nil || n == 0 {
					t.Errorf("node%d: fencing counter %q = %q, want a positive integer (%v)", i, k, get(t, cl, k), err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if err := cl.Del(ctx, k).Err(); err != nil {
					t.Errorf("node%d: DEL %s: %v", i, k, err)
				}
				cancel()
			}
		})
	})
}

// counterOn returns the fencing counter of key on cl (0 when absent).
func counterOn(t *testing.T, cl *redis.Client, key string) uint64 {
	t.Helper()
	s := get(t, cl, fenceKey(key))
	if s == "" {
		return 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s on %s = %q: %v", fenceKey(key), cl.Options().Addr, s, err)
	}
	return n
}

// TestFencingUnderKillsAndRestarts: 16 goroutines on 4 Clients (each with
// its own connections) take one key with fencing until 1,000 acquisitions
// have succeeded or 90 s have passed (at least 200 are needed for the
// checks to mean something: the rate is the machine's, not the library's,
// and is only logged), while one or two of the five nodes at a time are killed
// (SIGKILL) and restarted with their data. The history checker finds every
// fencing token positive and, in the order of the holders, strictly
// increasing (S4, which covers G2 too: an acquisition that started after
// another returned has the greater token), no two holders overlapping (S1,
// SEC), every deadline within its bounds (S2), and no update of a counter
// guarded by the lock lost (S5, LIN); after the run a quorum of nodes still
// hold a counter at least as high as the last token (the write-back
// survived the kills); and the keys left on restarted nodes expire within
// the TTL (L1).
func TestFencingUnderKillsAndRestarts(t *testing.T) {
	const (
		ttl         = time.Second
		nodeTimeout = 150 * time.Millisecond
		clients     = 4
		perClient   = 4
		want        = 1000
		minHolds    = 200
		bound       = 90 * time.Second
	)
	c := startCluster(t, ttl, "")
	c.keepsData() // killed nodes come back with their data
	dropFenceCounters(t, c)
	ctx := ctxT(t, bound+30*time.Second)
	lcs := c.warmClients(t, ctx, []redlock.Option{
		redlock.WithTTL(ttl),
		redlock.WithNodeTimeout(nodeTimeout),
		// Small, but not so small that 16 waiters split every free
		// lock's nodes between them and spend the 2 CPUs on failed
		// rounds: with 1..10 ms, the same run managed 13-40
		// acquisitions a second, with 5..50 ms 80-130.
		redlock.WithRetryBackoff(5*time.Millisecond, 50*time.Millisecond),
		redlock.WithFencing(true),
	}, numbered("client", clients)...)

	h := history.New()
	var tl workerTally
	guarded := new(atomic.Int64)
	begin := time.Now()
	reached, stopWorkers := fencedWorkers(t, ctx, h, lcs, perClient, ttl, guarded, &tl, want)
	t.Cleanup(stopWorkers)
	faults := startKillSchedule(t, c, h.Now)
	t.Cleanup(faults.stop)

	select {
	case <-reached:
	case <-time.After(bound):
		if n := tl.done(); n < minHolds {
			t.Fatalf("only %d fenced acquisitions within %v, fewer than the %d the checks need (%d failed attempts)", n, bound, minHolds, tl.failed.Load())
		}
		t.Logf("%d of %d fenced acquisitions within %v (%d failed attempts): checking those", tl.done(), want, bound, tl.failed.Load())
	}
	took := time.Since(begin)
	stopWorkers()
	faults.stop()

	h.SetCounter(fencedKey, guarded.Load())
	checkFencedRun(t, c, h, tl.acquired(), faults, history.Config{NodeTimeout: nodeTimeout, Fencing: true}, ttl)
	t.Logf("%d fenced acquisitions by %d goroutines on %d Clients in %v (%.0f/s); %d Lock calls failed, %d releases short of a quorum",
		tl.done(), clients*perClient, clients, took.Round(time.Millisecond), float64(tl.done())/took.Seconds(), tl.failed.Load(), tl.relFailed.Load())
}

// fencedWorkers starts perClient workers on each of lcs that wait in Lock
// for fencedKey and increment guarded under it, until the function it
// returns is called (which waits for them); the channel it returns closes
// once want critical sections are done.
func fencedWorkers(t *testing.T, ctx context.Context, h *history.History, lcs []*lockClient, perClient int, ttl time.Duration, guarded *atomic.Int64, tl *workerTally, want int) (<-chan struct{}, func()) {
	reached := make(chan struct{})
	reachedOnce := sync.OnceFunc(func() { close(reached) })
	wctx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range len(lcs) * perClient {
		lc := lcs[w%len(lcs)]
		wk := newWorker(h, lc, fmt.Sprintf("worker%d/%s", w, lc.name), ttl, w, 7, -1)
		wg.Go(func() {
			for wctx.Err() == nil {
				pause := time.Duration(100+wk.rng.IntN(300)) * time.Microsecond
				if wk.turn(t, wctx, fencedKey, guarded, pause, tl, releaseFailedByNode) && tl.done() >= want {
					reachedOnce()
				}
			}
		})
	}
	return reached, sync.OnceFunc(func() { stopWork(); wg.Wait() })
}

// fencedKey is the key of TestFencingUnderKillsAndRestarts.
const fencedKey = "fenced"

// checkFencedRun checks TestFencingUnderKillsAndRestarts' run: the history
// (every acquisition in ops ran one critical section that incremented the
// counter h was given), that the run tested fencing under faults, that the
// kills and restarts lowered no counter below the last token on a quorum,
// and that every lock key is gone within the TTL of the last restart.
func checkFencedRun(t *testing.T, c *cluster, h *history.History, ops []history.Op, faults *killSchedule, cfg history.Config, ttl time.Duration) {
	t.Helper()
	r := checkHistory(t, h, cfg)
	if n := len(ops); r.Acquired != n || r.Sections != n || r.Checked[history.S5] != n || r.Checked[history.S4] != n-1 {
		t.Errorf("%d acquisitions ran a critical section, but the report counts %d acquisitions, %d sections, %d checked by S5, %d successive holders by S4",
			n, r.Acquired, r.Sections, r.Checked[history.S5], r.Checked[history.S4])
	}
	// How many acquisitions completed while one or two nodes were down
	// (on the schedule's side of each change: certainly down).
	var downAt [3]int
	for _, op := range ops {
		downAt[max(0, min(faults.downAt(op.End), 2))]++
	}
	if faults.kills == 0 || downAt[1]+downAt[2] == 0 {
		t.Errorf("%d kills, and %d acquisitions completed while a node was down: the run did not test fencing under faults", faults.kills, downAt[1]+downAt[2])
	}
	t.Logf("%d kills, %d restarts with data; acquisitions with 0/1/2 nodes down: %v", faults.kills, faults.restarts, downAt)

	// Every token was written back to a quorum before it was handed out;
	// kills and restarts with data must not have lowered the counters.
	byFence := func(a, b history.Op) int { return cmp.Compare(a.Fence, b.Fence) }
	top, minF := slices.MaxFunc(ops, byFence).Fence, slices.MinFunc(ops, byFence).Fence
	admins := c.admins(t)
	var atLeast int
	var ctrs []uint64
	for _, cl := range admins {
		n := counterOn(t, cl, fencedKey)
		ctrs = append(ctrs, n)
		if n >= top {
			atLeast++
		}
	}
	if atLeast < nodes/2+1 {
		t.Errorf("only %d nodes hold a fencing counter ≥ the last token %d (counters %v): the write-back was lost", atLeast, top, ctrs)
	}

	// L1: lock keys that a killed node kept (a holder's, or a failed
	// round's that could not be rolled back while the node was down) are
	// gone within the TTL of the last restart.
	gone := eventually(t, ttl+2*time.Second, 20*time.Millisecond, "every lock key of "+fencedKey+" expired or released", func() bool {
		for _, cl := range admins {
			if get(t, cl, rkey(fencedKey)) != "" {
				return false
			}
		}
		return true
	})
	t.Logf("tokens %d..%d: %d handed out, %d values in between skipped (raised by failed rounds); counters on the nodes afterwards %v; keys gone %v after the faults stopped",
		minF, top, len(ops), int64(top-minF+1)-int64(len(ops)), ctrs, gone.Round(time.Millisecond))
}

// killSchedule kills one node, or two staggered, keeps them down a while,
// restarts them (one after the other) with their data, and leaves all five
// up a while, over and over until stop; never more than two are down. It
// notes when the number of nodes down changed: after a Kill returned (+1),
// before a Restart was called (−1), so that between two events the count
// is certain. Its fields may be read once stop returned.
type killSchedule struct {
	kills, restarts int
	changes         []downChange
	halt, done      chan struct{}
	stop            func() // ends the schedule, restarts what is down, and waits
}

// downChange is one change of the number of nodes down, at a time on the
// History's clock.
type downChange struct {
	at    time.Duration
	delta int
}

// downAt returns the number of nodes certainly down at time at.
func (s *killSchedule) downAt(at time.Duration) int {
	n := 0
	for _, ch := range s.changes {
		if ch.at < at {
			n += ch.delta
		}
	}
	return n
}

// startKillSchedule starts the schedule on c, its changes timed by now.
func startKillSchedule(t *testing.T, c *cluster, now func() time.Duration) *killSchedule {
	s := &killSchedule{halt: make(chan struct{}), done: make(chan struct{})}
	s.stop = sync.OnceFunc(func() {
		close(s.halt)
		<-s.done // every killed node is restarted by then
	})
	go func() {
		defer close(s.done)
		s.run(t, c, now)
	}()
	return s
}

// run is the schedule, until halt.
func (s *killSchedule) run(t *testing.T, c *cluster, now func() time.Duration) {
	rng := rand.New(rand.NewPCG(1, 2))
	var down []int
	pace := func(lo, hi time.Duration) bool { // false once halted
		select {
		case <-s.halt:
			return false
		case <-time.After(lo + time.Duration(rng.Int64N(int64(hi-lo)))):
			return true
		}
	}
	restart := func() bool {
		s.changes = append(s.changes, downChange{now(), -1})
		if err := c.Node(down[0]).Restart(false); err != nil {
			t.Errorf("restart node%d: %v", down[0], err)
			return false
		}
		s.restarts++
		down = down[1:]
		return true
	}
	defer func() { // leave every node running
		for len(down) > 0 && restart() {
		}
	}()
	for {
		for j, v := range rng.Perm(nodes)[:1+rng.IntN(2)] {
			if j > 0 && !pace(30*time.Millisecond, 200*time.Millisecond) {
				return
			}
			if err := c.Node(v).Kill(); err != nil {
				t.Errorf("kill node%d: %v", v, err)
				return
			}
			s.changes = append(s.changes, downChange{now(), +1})
			s.kills++
			down = append(down, v)
		}
		if !pace(150*time.Millisecond, 500*time.Millisecond) {
			return
		}
		for len(down) > 0 {
			if !restart() || (len(down) > 0 && !pace(time.Millisecond, 150*time.Millisecond)) {
				return
			}
		}
		if !pace(100*time.Millisecond, 400*time.Millisecond) {
			return
		}
	}
}

// TestStaleWriterRejected: holder A (fencing, no auto-extension) writes to a
// fenced resource, then does nothing until its lock's validity has passed,
// as if paused. B acquires the lock with a greater token and writes. When A
// wakes up and writes with its old token, the resource refuses it
// (fence.ErrStale) and keeps B's value and token; A's Extend reports the
// lock lost, its Release matches ErrNotHeld, and B's keys on the nodes are
// untouched: B still holds the lock.
func TestStaleWriterRejected(t *testing.T) {
	const (
		ttlA        = 500 * time.Millisecond
		ttlB        = 5 * time.Second
		nodeTimeout = 100 * time.Millisecond
		key         = "fenced-resource"
		resource    = "resource"
	)
	c := startCluster(t, ttlB, "")
	dropFenceCounters(t, c)
	ctx := ctxT(t, 30*time.Second)
	admins := c.admins(t)
	res := admins[0] // the fenced resource lives on node 0
	a := c.newLockClient(t, "A", c.direct, redlock.WithTTL(ttlA), redlock.WithNodeTimeout(nodeTimeout), redlock.WithFencing(true))
	b := c.newLockClient(t, "B", c.direct, redlock.WithTTL(ttlB), redlock.WithNodeTimeout(nodeTimeout), redlock.WithFencing(true),
		redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))

	la, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("A: TryLock: %v", err)
	}
	if la.Fence() == 0 {
		t.Fatal("A: fence 0 with fencing on")
	}
	if err := fence.Write(ctx, res, resource, la.Fence(), "A, while it held the lock"); err != nil {
		t.Fatalf("A: write while holding the lock: %v", err)
	}

	pausedPastValidity(t, la, ttlA)

	// B waits for the lock (A's keys expire on the nodes) and writes.
	lb, err := b.Lock(ctx, key)
	if err != nil {
		t.Fatalf("B: Lock: %v", err)
	}
	if lb.Fence() <= la.Fence() {
		t.Fatalf("B's fence %d is not above A's %d", lb.Fence(), la.Fence())
	}
	if err := fence.Write(ctx, res, resource, lb.Fence(), "B"); err != nil {
		t.Fatalf("B: write: %v", err)
	}
	bNodes := soleHolder(t, admins, key, lb.Token())
	rerr := staleWriterRefused(t, ctx, res, resource, la, lb)

	// B's keys are intact on every node that held them, no node holds
	// anything but B's token, and B still holds the lock.
	c.mustHoldAll(t, admins, bNodes, key, lb.Token(), 0, ttlB.Milliseconds())
	for i, cl := range admins {
		if v := get(t, cl, rkey(key)); v != "" && v != lb.Token() {
			t.Errorf("node%d: %s = %q after A's attempts, want B's token %q or nothing", i, rkey(key), v, lb.Token())
		}
	}
	if ok, err := lb.Held(ctx); !ok || err != nil {
		t.Fatalf("B: Held = %v, %v after A's attempts; want true", ok, err)
	}
	t.Logf("A's fence %d, B's fence %d (B's lock on nodes %v); A's stale write refused; A's Release: %v", la.Fence(), lb.Fence(), bNodes, rerr)
	if err := lb.Release(ctx); err != nil {
		t.Fatalf("B: Release: %v", err)
	}
}

// pausedPastValidity waits, as holder A paused past its validity would,
// until A's lock la has passed its deadline on the local clock (its Done
// closes then, within 4 TTLs), and checks that A learns it lost the lock.
func pausedPastValidity(t *testing.T, la *redlock.Lock, ttlA time.Duration) {
	t.Helper()
	select {
	case <-la.Done():
	case <-time.After(4 * ttlA):
		t.Fatalf("A's lease did not end within %v of a %v TTL", 4*ttlA, ttlA)
	}
	if now := time.Now(); now.Before(la.Deadline()) {
		t.Fatalf("A's lease ended %v before its deadline", la.Deadline().Sub(now))
	}
	if !errors.Is(la.Err(), redlock.ErrLockLost) {
		t.Fatalf("A: Err = %v, want ErrLockLost", la.Err())
	}
}

// staleWriterRefused: A wakes up and acts on its old lock la after B took
// it (lb) and wrote the fenced resource. The resource refuses A's write and
// keeps B's value and fence; A's Extend reports the lock lost, and its
// Release, which it returns, matches ErrNotHeld with no node confirming.
func staleWriterRefused(t *testing.T, ctx context.Context, res *redis.Client, resource string, la, lb *redlock.Lock) error {
	t.Helper()
	if err := fence.Write(ctx, res, resource, la.Fence(), "A, after its lock passed to B"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("A: stale write returned %v, want fence.ErrStale", err)
	}
	v, tok, err := fence.Read(ctx, res, resource)
	if err != nil {
		t.Fatalf("fence.Read: %v", err)
	}
	if v != "B" || tok != lb.Fence() {
		t.Fatalf("the resource holds %q with fence %d, want B's %q with fence %d", v, tok, "B", lb.Fence())
	}
	if err := la.Extend(ctx, 0); !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("A: Extend after its deadline returned %v, want ErrLockLost", err)
	}
	rerr := la.Release(ctx)
	if !errors.Is(rerr, redlock.ErrNotHeld) {
		t.Fatalf("A: Release returned %v, want an error matching ErrNotHeld", rerr)
	}
	if qe := asQuorumError(t, rerr); qe.Agreed() != 0 {
		t.Errorf("A: Release: %d nodes confirmed A's token, want 0: %v", qe.Agreed(), rerr)
	}
	return rerr
}

// costCycle is one TryLock+Release of key by lc, fenced if lastFence is
// not nil (the fence must then rise above *lastFence, which it updates),
// and returns how long TryLock took.
func costCycle(t *testing.T, ctx context.Context, lc *lockClient, key string, lastFence *uint64) time.Duration {
	t.Helper()
	start := time.Now()
	l, err := lc.TryLock(ctx, key, redlock.WithFencing(lastFence != nil))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("TryLock %s: %v", key, err)
	}
	switch {
	case lastFence == nil && l.Fence() != 0:
		t.Errorf("fence %d without fencing, want 0", l.Fence())
	case lastFence != nil && l.Fence() <= *lastFence:
		t.Errorf("sequential fenced acquisitions: fence %d after %d", l.Fence(), *lastFence)
	}
	if lastFence != nil {
		*lastFence = l.Fence()
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release %s: %v", key, err)
	}
	return took
}

// TestFencingCost measures, without asserting on the numbers, what fencing
// costs an acquisition on real Redis: 200 sequential TryLock+Release cycles
// without fencing and 200 with, on one Client, interleaved in blocks of 20
// (alternating which goes first), and logs the median TryLock latency of
// each and their ratio. With fencing, the sequential tokens must increase.
func TestFencingCost(t *testing.T) {
	const (
		ttl = 2 * time.Second
		// A measurement, not a fault test: a node timeout that a loaded
		// machine's hiccup cannot trip (100 ms failed the warm-up once in
		// CI, on Valkey containers just started).
		nodeTimeout = time.Second
		cycles      = 200
		block       = 20
	)
	c := startCluster(t, ttl, "")
	dropFenceCounters(t, c)
	ctx := ctxT(t, 60*time.Second)
	lc := c.newLockClient(t, "cost", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout))
	// Each mode on its own key: a key's clients must all use one setting.
	var (
		plain, fenced []time.Duration
		lastFence     uint64
	)
	runPlain := func() { plain = append(plain, costCycle(t, ctx, lc, "cost-plain", nil)) }
	runFenced := func() { fenced = append(fenced, costCycle(t, ctx, lc, "cost-fenced", &lastFence)) }
	// Warm up both paths (identity check, script loading), not measured.
	costCycle(t, ctx, lc, "cost-plain", nil)
	costCycle(t, ctx, lc, "cost-fenced", &lastFence)
	for b := range cycles / block {
		first, second := runPlain, runFenced
		if b%2 == 1 {
			first, second = runFenced, runPlain
		}
		for range block {
			first()
		}
		for range block {
			second()
		}
	}
	if len(plain) != cycles || len(fenced) != cycles {
		t.Fatalf("%d plain and %d fenced cycles, want %d each", len(plain), len(fenced), cycles)
	}
	median := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	mp, mf := median(plain), median(fenced)
	t.Logf("TryLock without fencing: %s", durations(plain))
	t.Logf("TryLock with fencing:    %s", durations(fenced))
	t.Logf("median %v without, %v with fencing: ratio %.2f (fencing adds a write-back round trip)",
		mp.Round(time.Microsecond), mf.Round(time.Microsecond), float64(mf)/float64(mp))
}
