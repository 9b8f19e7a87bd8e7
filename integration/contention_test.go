package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/redlock"
)

// holding is one successful acquisition, on the test's monotonic clock.
type holding struct {
	key, who string
	token    string
	start    time.Time // read just before TryLock/Lock was called
	acquired time.Time // read just after it returned
	deadline time.Time // Lock.Deadline()
	released time.Time // read when the critical section ended, just before Release
}

// end is when the holder's claim ends: it stops working at release or at its
// deadline, whichever is first.
func (h holding) end() time.Time {
	if h.deadline.Before(h.released) {
		return h.deadline
	}
	return h.released
}

// history collects holdings from many goroutines.
type history struct {
	mu    sync.Mutex
	holds []holding
}

func (h *history) add(x holding) {
	h.mu.Lock()
	h.holds = append(h.holds, x)
	h.mu.Unlock()
}

// check verifies S1 (no two holders of one key have overlapping windows
// [acquired, min(released, deadline)]) and the deadline bounds of every
// holding (start + TTL − allowance ≤ deadline ≤ return + TTL − allowance,
// validity left at return, work finished before the deadline). It returns
// the number of holdings per key and a description of every violation.
func (h *history) check(ttl time.Duration) (counts map[string]int, problems []string) {
	allowance := drift.Allowance(ttl, drift.DefaultFactor)
	h.mu.Lock()
	holds := slices.Clone(h.holds)
	h.mu.Unlock()
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	perKey := map[string][]holding{}
	for _, x := range holds {
		if !x.deadline.After(x.acquired) {
			bad("%s by %s: deadline %v before the call returned", x.key, x.who, x.acquired.Sub(x.deadline))
		}
		if x.deadline.After(x.acquired.Add(ttl - allowance)) {
			bad("%s by %s: deadline %v after return, beyond TTL − allowance", x.key, x.who, x.deadline.Sub(x.acquired))
		}
		if x.deadline.Before(x.start.Add(ttl - allowance)) {
			bad("%s by %s: deadline %v after the call started, below TTL − allowance", x.key, x.who, x.deadline.Sub(x.start))
		}
		if x.released.After(x.deadline) {
			bad("%s by %s: critical section ran %v past the deadline (the machine stalled longer than the TTL?)", x.key, x.who, x.released.Sub(x.deadline))
		}
		perKey[x.key] = append(perKey[x.key], x)
	}
	counts = map[string]int{}
	for key, xs := range perKey {
		counts[key] = len(xs)
		slices.SortFunc(xs, func(a, b holding) int { return a.acquired.Compare(b.acquired) })
		var prev holding // the holding seen so far whose window ends last
		for j, x := range xs {
			if j > 0 && x.acquired.Before(prev.end()) {
				bad("S1 violated on %s: %s (token %s) held it until %v after acquiring, but %s (token %s) acquired it %v before that",
					key, prev.who, prev.token, prev.end().Sub(prev.acquired), x.who, x.token, prev.end().Sub(x.acquired))
			}
			if j == 0 || x.end().After(prev.end()) {
				prev = x
			}
		}
	}
	return counts, problems
}

// TestHistoryChecker shows that the checker used by the contention test
// catches overlapping holders and bad deadlines (no Redis needed).
func TestHistoryChecker(t *testing.T) {
	const ttl = time.Second
	allow := drift.Allowance(ttl, drift.DefaultFactor)
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	hold := func(who string, start, acq, rel int) holding {
		return holding{key: "k", who: who, start: at(start), acquired: at(acq), deadline: at(start).Add(ttl - allow), released: at(rel)}
	}
	var ok history
	ok.add(hold("a", 0, 1, 10))
	ok.add(hold("b", 5, 11, 20)) // starts waiting during a, acquires after a released
	ok.add(hold("c", 21, 22, 30))
	if counts, problems := ok.check(ttl); counts["k"] != 3 || len(problems) != 0 {
		t.Fatalf("sequential holders: counts %v, problems %q", counts, problems)
	}

	var overlap history
	overlap.add(hold("a", 0, 1, 100))
	overlap.add(hold("b", 0, 2, 3)) // inside a's window
	overlap.add(hold("c", 0, 50, 60))
	if _, problems := overlap.check(ttl); len(problems) != 2 {
		t.Fatalf("two holders inside a's window: problems %q, want 2", problems)
	}

	var late history
	x := hold("a", 0, 1, 10)
	x.deadline = x.deadline.Add(allow) // no drift allowance deducted
	late.add(x)
	y := hold("b", 2000, 2001, 3500) // worked past its deadline
	late.add(y)
	if _, problems := late.check(ttl); len(problems) != 2 {
		t.Fatalf("bad deadlines: problems %q, want 2", problems)
	}
}

// TestKillMinorityUnderContention kills one, then a second, of five nodes
// while locks are held and 16 goroutines (on 4 Clients with their own
// connections) contend for 3 keys. Acquisitions keep succeeding after each
// kill; no two holders of one key ever overlap (S1); a counter guarded by
// each lock loses no increment (S5); a lock held across both kills stays
// held and extendable; and no failed attempt leaves its token behind (L2).
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
	opts := []redlock.Option{
		redlock.WithTTL(ttl),
		redlock.WithNodeTimeout(nodeTimeout),
		redlock.WithRetryBackoff(2*time.Millisecond, 20*time.Millisecond),
	}
	lcs := make([]*lockClient, clients)
	for i := range lcs {
		lcs[i] = c.newLockClient(t, fmt.Sprintf("client%d", i), c.direct, opts...)
	}
	ctx := ctxT(t, 90*time.Second)
	keys := []string{"hot-a", "hot-b", "hot-c"}

	// The counters are read and written with separate atomic operations: a
	// non-atomic read-modify-write, so an overlap of two holders loses an
	// increment, while the race detector (which cannot see the ordering
	// that Redis provides between two Clients) stays quiet.
	counters := map[string]*atomic.Int64{}
	for _, k := range keys {
		counters[k] = new(atomic.Int64)
	}
	var (
		hist       history
		completed  atomic.Int64
		failures   atomic.Int64
		stop       = make(chan struct{})
		wg         sync.WaitGroup
		unexpected atomic.Int64
		// releases that did not reach a quorum because a node died
		releaseFailures atomic.Int64
	)
	for w := range workers {
		lc := lcs[w%clients]
		who := fmt.Sprintf("worker%d/%s", w, lc.name)
		rng := rand.New(rand.NewPCG(uint64(w), 42))
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[rng.IntN(len(keys))]
				start := time.Now()
				var l *redlock.Lock
				var err error
				if w%2 == 0 {
					l, err = lc.Lock(ctx, key, redlock.WithMaxWait(2*time.Second))
				} else {
					l, err = lc.TryLock(ctx, key)
				}
				acquired := time.Now()
				if err != nil {
					if !errors.Is(err, redlock.ErrNotAcquired) && unexpected.Add(1) <= 5 {
						t.Errorf("%s: acquire %s: unexpected error %v", who, key, err)
					}
					failures.Add(1)
					if ctx.Err() != nil {
						return
					}
					// Pace the TryLock workers a little (not synchronisation).
					time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond)
					continue
				}
				// The critical section: a read-modify-write with a pause.
				v := counters[key].Load()
				time.Sleep(time.Duration(100+rng.IntN(400)) * time.Microsecond)
				counters[key].Store(v + 1)
				released := time.Now()
				rerr := l.Release(ctx)
				hist.add(holding{key: key, who: who, token: l.Token(), start: start, acquired: acquired, deadline: l.Deadline(), released: released})
				completed.Add(1)
				if rerr != nil {
					// Legitimate only when a node of the lock's quorum
					// died: its copy expires with the TTL.
					releaseFailures.Add(1)
					if !releaseFailedByNode(rerr) && unexpected.Add(1) <= 5 {
						t.Errorf("%s: release %s: %v", who, key, rerr)
					}
				}
			}
		})
	}
	stopped := false
	stopWorkers := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(stopWorkers)

	// A lock held across both kills, on a key nobody contends for. The
	// test's premise is that it is on all 5 nodes, so that it keeps a
	// quorum when two of them die: TryLock returns at a quorum, and on a
	// loaded machine a straggling SET can miss its deadline in the node's
	// queue (never sent). Then the lock is released and taken again.
	admins := c.admins(t)
	var held *redlock.Lock
	for attempt := 0; held == nil; attempt++ {
		l, err := lcs[0].TryLock(ctx, "held-across-kills", redlock.WithTTL(heldTTL))
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		if onAll(ctx, admins, rkey("held-across-kills"), l.Token()) {
			held = l
			break
		}
		if attempt == 20 {
			t.Fatalf("the lock never reached all 5 nodes in %d attempts", attempt+1)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	progress := func(phase string) {
		t.Helper()
		from := completed.Load()
		took := eventually(t, 30*time.Second, 5*time.Millisecond, phase+": critical sections completed", func() bool {
			return completed.Load() >= from+perPhase
		})
		t.Logf("%s: %d critical sections in %v (failed attempts so far: %d)", phase, perPhase, took, failures.Load())
	}
	stillHeld := func(phase string) {
		t.Helper()
		if ok, err := held.Held(ctx); !ok || err != nil {
			t.Fatalf("%s: Held = %v, %v; want true", phase, ok, err)
		}
		if err := held.Extend(ctx, 0); err != nil {
			t.Fatalf("%s: Extend: %v", phase, err)
		}
	}

	progress("all 5 nodes up")
	if err := c.Node(4).Kill(); err != nil {
		t.Fatal(err)
	}
	stillHeld("node4 killed")
	progress("node4 killed")
	if err := c.Node(3).Kill(); err != nil {
		t.Fatal(err)
	}
	stillHeld("node3 and node4 killed")
	progress("node3 and node4 killed")
	stopWorkers()

	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release of the lock held across the kills: %v", err)
	}
	counts, problems := hist.check(ttl)
	for i, p := range problems {
		if i == 20 {
			t.Errorf("... %d problems in total", len(problems))
			break
		}
		t.Error(p)
	}
	total := 0
	for _, k := range keys {
		total += counts[k]
		if got := counters[k].Load(); got != int64(counts[k]) {
			t.Errorf("S5 violated on %s: the guarded counter is %d, but %d critical sections completed", k, got, counts[k])
		}
	}
	t.Logf("%d critical sections on %d keys, %d failed attempts, %d releases short of a quorum after a kill; counters %v",
		total, len(keys), failures.Load(), releaseFailures.Load(), counts)
	for _, lc := range lcs {
		lc.closeAndCheck(t)
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
