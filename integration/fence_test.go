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

// fenceHold is one successful fenced acquisition, on the test's monotonic
// clock.
type fenceHold struct {
	who      string
	token    string
	fence    uint64
	start    time.Time // read just before Lock was called
	acquired time.Time // read just after it returned
	deadline time.Time // Lock.Deadline()
	released time.Time // read when the critical section ended, just before Release
}

// checkFences verifies the fencing properties of the holdings of one key and
// returns a description of every violation:
//
//   - every token is unique and positive;
//   - no two holders overlap in [acquired, released] on the test's clock
//     (they never do if the lock works: a holder's acquisition completes
//     after the previous holder's release began, unless the previous lock
//     expired first, which the deadline check of history.check reports);
//   - ordered by acquisition, the tokens strictly increase (S4). This also
//     covers G2 of docs/safety.md (an acquisition that started after
//     another returned has the greater token): between two such holdings
//     in acquisition order, tokens could not fall without some adjacent
//     pair falling.
func checkFences(holds []fenceHold) (problems []string) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	seen := map[uint64]fenceHold{}
	for _, x := range holds {
		if x.fence == 0 {
			bad("%s (token %s) got fence 0 with fencing on", x.who, x.token)
		}
		if y, dup := seen[x.fence]; dup {
			bad("fence %d given twice: to %s (token %s) and %s (token %s)", x.fence, y.who, y.token, x.who, x.token)
		}
		seen[x.fence] = x
	}
	byAcq := slices.Clone(holds)
	slices.SortFunc(byAcq, func(a, b fenceHold) int { return a.acquired.Compare(b.acquired) })
	var last fenceHold // the holding seen so far that released last
	for j, x := range byAcq {
		if j == 0 {
			last = x
			continue
		}
		if prev := byAcq[j-1]; x.fence <= prev.fence {
			bad("S4 violated: %s acquired %v after %s but got fence %d, not above %d",
				x.who, x.acquired.Sub(prev.acquired), prev.who, x.fence, prev.fence)
		}
		if x.acquired.Before(last.released) {
			bad("holders overlap: %s (fence %d) acquired %v before %s (fence %d) released",
				x.who, x.fence, last.released.Sub(x.acquired), last.who, last.fence)
		}
		if x.released.After(last.released) {
			last = x
		}
	}
	return problems
}

// TestCheckFences shows that checkFences catches duplicate, falling and
// overlapping fenced holdings (no Redis needed).
func TestCheckFences(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	hold := func(who string, f uint64, start, acq, rel int) fenceHold {
		return fenceHold{who: who, token: who, fence: f, start: at(start), acquired: at(acq), released: at(rel), deadline: at(start + 900)}
	}
	for _, tc := range []struct {
		name  string
		holds []fenceHold
		want  int
	}{
		{"sequential, increasing", []fenceHold{hold("a", 3, 0, 1, 10), hold("b", 5, 2, 11, 20), hold("c", 6, 21, 22, 30)}, 0},
		{"duplicate (also not increasing)", []fenceHold{hold("a", 3, 0, 1, 10), hold("b", 3, 2, 11, 20)}, 2},
		{"falling", []fenceHold{hold("a", 3, 0, 1, 10), hold("b", 9, 0, 20, 30), hold("c", 4, 15, 40, 50)}, 1},
		{"two holders inside a's window", []fenceHold{hold("a", 3, 0, 1, 100), hold("b", 5, 0, 2, 3), hold("c", 6, 0, 50, 60)}, 2},
		{"zero", []fenceHold{hold("a", 0, 0, 1, 10)}, 1},
	} {
		if p := checkFences(tc.holds); len(p) != tc.want {
			t.Errorf("%s: problems %q, want %d", tc.name, p, tc.want)
		}
	}
}

// TestFencingUnderKillsAndRestarts: 16 goroutines on 4 Clients (each with
// its own connections) take one key with fencing until 1,000 acquisitions
// have succeeded or 90 s have passed (at least 200 are needed for the
// checks to mean something: the rate is the machine's, not the library's,
// and is only logged), while one or two of the five nodes at a time are killed
// (SIGKILL) and restarted with their data. Every token is unique; ordered
// by acquisition the tokens strictly increase (S4), and so do those of any
// acquisition that started after another returned (G2); no two holders
// overlap (S1); a counter guarded by the lock loses no update (S5); after
// the run a quorum of nodes still hold a counter at least as high as the
// last token (the write-back survived the kills); and the keys left on
// restarted nodes expire within the TTL (L1).
func TestFencingUnderKillsAndRestarts(t *testing.T) {
	const (
		ttl         = time.Second
		nodeTimeout = 150 * time.Millisecond
		clients     = 4
		perClient   = 4
		want        = 1000
		minHolds    = 200
		bound       = 90 * time.Second
		key         = "fenced"
	)
	c := startCluster(t, ttl, "")
	c.keepsData() // killed nodes come back with their data
	dropFenceCounters(t, c)
	ctx := ctxT(t, bound+30*time.Second)
	opts := []redlock.Option{
		redlock.WithTTL(ttl),
		redlock.WithNodeTimeout(nodeTimeout),
		// Small, but not so small that 16 waiters split every free
		// lock's nodes between them and spend the 2 CPUs on failed
		// rounds: with 1..10 ms, the same run managed 13-40
		// acquisitions a second, with 5..50 ms 80-130.
		redlock.WithRetryBackoff(5*time.Millisecond, 50*time.Millisecond),
		redlock.WithFencing(true),
	}
	lcs := make([]*lockClient, clients)
	for i := range lcs {
		lcs[i] = c.newLockClient(t, fmt.Sprintf("client%d", i), c.direct, opts...)
		warm(t, ctx, lcs[i])
	}

	var (
		mu         sync.Mutex
		holds      []fenceHold
		guarded    atomic.Int64 // see TestKillMinorityUnderContention
		completed  atomic.Int64
		failures   atomic.Int64
		relFailed  atomic.Int64
		unexpected atomic.Int64
		reached    = make(chan struct{})
		reachOnce  sync.Once
		wg         sync.WaitGroup
	)
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	begin := time.Now()
	for w := range clients * perClient {
		lc := lcs[w%clients]
		who := fmt.Sprintf("worker%d/%s", w, lc.name)
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		wg.Go(func() {
			for wctx.Err() == nil {
				start := time.Now()
				l, err := lc.Lock(wctx, key)
				acquired := time.Now()
				if err != nil {
					if wctx.Err() != nil {
						return
					}
					failures.Add(1)
					if !errors.Is(err, redlock.ErrNotAcquired) && unexpected.Add(1) <= 5 {
						t.Errorf("%s: Lock: unexpected error %v", who, err)
					}
					continue
				}
				// The critical section: a non-atomic read-modify-write.
				v := guarded.Load()
				time.Sleep(time.Duration(100+rng.IntN(300)) * time.Microsecond)
				guarded.Store(v + 1)
				released := time.Now()
				rerr := l.Release(context.Background())
				mu.Lock()
				holds = append(holds, fenceHold{who: who, token: l.Token(), fence: l.Fence(), start: start, acquired: acquired, deadline: l.Deadline(), released: released})
				mu.Unlock()
				if completed.Add(1) >= want {
					reachOnce.Do(func() { close(reached) })
				}
				if rerr != nil {
					// Legitimate only when nodes of the lock's quorum were
					// killed: their copies expire with the TTL.
					relFailed.Add(1)
					if !releaseFailedByNode(rerr) && unexpected.Add(1) <= 5 {
						t.Errorf("%s: Release: %v", who, rerr)
					}
				}
			}
		})
	}
	workersStopped := false
	stopWorkers := func() {
		if !workersStopped {
			workersStopped = true
			stopWork()
			wg.Wait()
		}
	}
	t.Cleanup(stopWorkers)

	// The fault schedule: kill one node, or two staggered, keep them down
	// a while, restart them (one after the other) with their data, leave
	// all five up a while. Never more than two are down. The schedule
	// notes when the number of nodes down changed: after a Kill returned
	// (+1), before a Restart was called (−1), so that between two events
	// the count is certain.
	type downChange struct {
		at    time.Time
		delta int
	}
	var (
		kills, restarts int
		changes         []downChange
		faultsDone      = make(chan struct{})
		stopFaults      = make(chan struct{})
	)
	go func() {
		defer close(faultsDone)
		rng := rand.New(rand.NewPCG(1, 2))
		var down []int
		pace := func(lo, hi time.Duration) bool { // false once stopped
			select {
			case <-stopFaults:
				return false
			case <-time.After(lo + time.Duration(rng.Int64N(int64(hi-lo)))):
				return true
			}
		}
		restart := func() bool {
			changes = append(changes, downChange{time.Now(), -1})
			if err := c.Node(down[0]).Restart(false); err != nil {
				t.Errorf("restart node%d: %v", down[0], err)
				return false
			}
			restarts++
			down = down[1:]
			return true
		}
		defer func() { // leave every node running
			for len(down) > 0 && restart() {
			}
		}()
		for {
			victims := rng.Perm(nodes)[:1+rng.IntN(2)]
			for j, v := range victims {
				if j > 0 && !pace(30*time.Millisecond, 200*time.Millisecond) {
					return
				}
				if err := c.Node(v).Kill(); err != nil {
					t.Errorf("kill node%d: %v", v, err)
					return
				}
				changes = append(changes, downChange{time.Now(), +1})
				kills++
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
	}()
	faultsStopped := false
	stopFaultSchedule := func() {
		if !faultsStopped {
			faultsStopped = true
			close(stopFaults)
			<-faultsDone // every killed node is restarted by then
		}
	}
	t.Cleanup(stopFaultSchedule)

	select {
	case <-reached:
	case <-time.After(bound):
		if n := completed.Load(); n < minHolds {
			t.Fatalf("only %d fenced acquisitions within %v, fewer than the %d the checks need (%d failed attempts)", n, bound, minHolds, failures.Load())
		}
		t.Logf("%d of %d fenced acquisitions within %v (%d failed attempts): checking those", completed.Load(), want, bound, failures.Load())
	}
	took := time.Since(begin)
	stopWorkers()
	stopFaultSchedule()

	mu.Lock()
	defer mu.Unlock()
	for i, p := range checkFences(holds) {
		if i == 20 {
			t.Errorf("... %d fencing problems in total", len(checkFences(holds)))
			break
		}
		t.Error(p)
	}
	var hist history
	for _, x := range holds {
		hist.add(holding{key: key, who: x.who, token: x.token, start: x.start, acquired: x.acquired, deadline: x.deadline, released: x.released})
	}
	counts, problems := hist.check(ttl)
	for i, p := range problems {
		if i == 20 {
			t.Errorf("... %d history problems in total", len(problems))
			break
		}
		t.Error(p)
	}
	if got := guarded.Load(); got != int64(counts[key]) || counts[key] != len(holds) {
		t.Errorf("S5 violated: the guarded counter is %d, but %d critical sections completed", got, counts[key])
	}
	if len(holds) < minHolds {
		t.Fatalf("%d acquisitions recorded, want at least %d", len(holds), minHolds)
	}

	// How many acquisitions completed while one or two nodes were down
	// (on the schedule's side of each change: certainly down).
	var downAt [3]int
	for _, x := range holds {
		n := 0
		for _, ch := range changes {
			if ch.at.Before(x.acquired) {
				n += ch.delta
			}
		}
		downAt[max(0, min(n, 2))]++
	}
	if kills == 0 || downAt[1]+downAt[2] == 0 {
		t.Errorf("%d kills, and %d acquisitions completed while a node was down: the run did not test fencing under faults", kills, downAt[1]+downAt[2])
	}

	// Every token was written back to a quorum before it was handed out;
	// kills and restarts with data must not have lowered the counters.
	byFence := func(a, b fenceHold) int { return cmp.Compare(a.fence, b.fence) }
	top, minF := slices.MaxFunc(holds, byFence).fence, slices.MinFunc(holds, byFence).fence
	admins := c.admins(t)
	var atLeast int
	var ctrs []uint64
	for _, cl := range admins {
		n := counterOn(t, cl, key)
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
	gone := eventually(t, ttl+2*time.Second, 20*time.Millisecond, "every lock key of "+key+" expired or released", func() bool {
		for _, cl := range admins {
			if get(t, cl, rkey(key)) != "" {
				return false
			}
		}
		return true
	})

	t.Logf("%d fenced acquisitions by %d goroutines on %d Clients in %v (%.0f/s): %d kills, %d restarts with data; acquisitions with 0/1/2 nodes down: %v; %d Lock calls failed, %d releases short of a quorum",
		len(holds), clients*perClient, clients, took.Round(time.Millisecond), float64(len(holds))/took.Seconds(), kills, restarts, downAt, failures.Load(), relFailed.Load())
	t.Logf("tokens %d..%d: %d handed out, %d values in between skipped (raised by failed rounds); counters on the nodes afterwards %v; keys gone %v after the faults stopped",
		minF, top, len(holds), int64(top-minF+1)-int64(len(holds)), ctrs, gone.Round(time.Millisecond))
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

	// A is paused past its validity: it does nothing until its deadline
	// has passed on the local clock (Done closes then).
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
	// Where B's lock lives: on a quorum at least. A node whose copy of A's
	// key had not expired yet when B's winning round reached it said
	// "taken" and stays empty (Redlock does not retry it), so B need not
	// be on all five. Wait until no node holds A's token any more.
	var bNodes []int
	eventually(t, 2*time.Second, 5*time.Millisecond, "A's keys gone and B's token on a quorum", func() bool {
		bNodes = bNodes[:0]
		for i, cl := range admins {
			switch get(t, cl, rkey(key)) {
			case lb.Token():
				bNodes = append(bNodes, i)
			case "":
			default:
				return false
			}
		}
		return len(bNodes) >= nodes/2+1
	})

	// A wakes up and acts on its old lock.
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

// TestFencingCost measures, without asserting on the numbers, what fencing
// costs an acquisition on real Redis: 200 sequential TryLock+Release cycles
// without fencing and 200 with, on one Client, interleaved in blocks of 20
// (alternating which goes first), and logs the median TryLock latency of
// each and their ratio. With fencing, the sequential tokens must increase.
func TestFencingCost(t *testing.T) {
	const (
		ttl         = 2 * time.Second
		nodeTimeout = 100 * time.Millisecond
		cycles      = 200
		block       = 20
	)
	c := startCluster(t, ttl, "")
	dropFenceCounters(t, c)
	ctx := ctxT(t, 60*time.Second)
	lc := c.newLockClient(t, "cost", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout))
	// Each mode on its own key: a key's clients must all use one setting.
	plainKey, fencedKey := "cost-plain", "cost-fenced"
	var (
		plain, fenced []time.Duration
		lastFence     uint64
	)
	cycle := func(key string, opts ...redlock.Option) time.Duration {
		t.Helper()
		start := time.Now()
		l, err := lc.TryLock(ctx, key, opts...)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("TryLock %s: %v", key, err)
		}
		if key == fencedKey {
			if l.Fence() <= lastFence {
				t.Errorf("sequential fenced acquisitions: fence %d after %d", l.Fence(), lastFence)
			}
			lastFence = l.Fence()
		} else if l.Fence() != 0 {
			t.Errorf("fence %d without fencing, want 0", l.Fence())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %s: %v", key, err)
		}
		return took
	}
	// Warm up both paths (identity check, script loading), not measured.
	cycle(plainKey)
	cycle(fencedKey, redlock.WithFencing(true))
	for b := range cycles / block {
		runPlain := func() {
			for range block {
				plain = append(plain, cycle(plainKey))
			}
		}
		runFenced := func() {
			for range block {
				fenced = append(fenced, cycle(fencedKey, redlock.WithFencing(true)))
			}
		}
		if b%2 == 0 {
			runPlain()
			runFenced()
		} else {
			runFenced()
			runPlain()
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
