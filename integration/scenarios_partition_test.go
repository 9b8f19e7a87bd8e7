package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// The contention phase of TestAsymmetricPartition (contendAcross).
const (
	// partitionSections is the number of critical sections it runs.
	partitionSections = 30
	// perPartitionClient is the number of goroutines per client, on two
	// clients per side. Under this partition no round can fail before
	// the two nodes its client cannot reach time out, so a failed round
	// keeps its partial keys for a node timeout, blocking the others.
	// (Before a Client ran its rounds for one key one at a time, 3
	// goroutines on one client per side, retrying after 5..30 ms, managed
	// 9-14 critical sections in 5 s.)
	perPartitionClient = 2
)

// TestAsymmetricPartition cuts the network differently for two clients: one
// sees nodes 0 1 2 only, two sees 2 3 4 only (per-client proxies blackhole
// the others), so node 2 alone decides between them. Step by step: while
// one holds the key, two's attempts fail and leave one's copies untouched
// (value and TTL, on every node), and one can still extend; then the other
// way round; a holder of two whose lock expired cannot release or extend
// one's lock on the shared node; finally two clients per side contend, and
// the history checker finds no two holders overlapping (S1, SEC), every
// deadline within its bounds (S2), and no update of a counter guarded by
// the lock lost (S5, LIN).
func TestAsymmetricPartition(t *testing.T) {
	const (
		ttl         = 2 * time.Second
		nodeTimeout = 100 * time.Millisecond
	)
	c := startCluster(t, ttl, "")
	pt := &partitionTest{c: c, admins: c.admins(t), ctx: ctxT(t, 60*time.Second), sees: map[*lockClient][]int{}}
	var via1, via2 func(int) *redis.Options
	pt.p1, via1 = c.proxyEach(t)
	pt.p2, via2 = c.proxyEach(t)
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}
	one := c.newLockClient(t, "one", via1, opts...)
	two := c.newLockClient(t, "two", via2, opts...)
	warm(t, pt.ctx, one)
	warm(t, pt.ctx, two)
	pt.sees[one], pt.sees[two] = []int{0, 1, 2}, []int{2, 3, 4}
	for _, i := range []int{3, 4} {
		pt.p1[i].Blackhole(true)
	}
	for _, i := range []int{0, 1} {
		pt.p2[i].Blackhole(true)
	}

	// one holds; two is refused and touches nothing; one extends.
	l1 := pt.holds(t, one)
	pt.blocked(t, two, l1)
	if err := l1.Extend(pt.ctx, 0); err != nil {
		t.Fatalf("one: Extend while two is refused: %v", err)
	}
	c.mustHoldAll(t, pt.admins, pt.sees[one], partitionKey, l1.Token(), ttl.Milliseconds()-500, ttl.Milliseconds())
	if err := l1.Release(pt.ctx); err != nil {
		t.Fatalf("one: Release: %v", err)
	}
	// The other way round.
	l2 := pt.holds(t, two)
	pt.blocked(t, one, l2)
	if err := l2.Release(pt.ctx); err != nil {
		t.Fatalf("two: Release: %v", err)
	}
	pt.staleHandle(t, one, two, nodeTimeout)

	// Contention: a second client on each side (its own connections,
	// through the same cut proxies).
	oneB := c.newLockClient(t, "one-b", via1, opts...)
	twoB := c.newLockClient(t, "two-b", via2, opts...)
	pt.sees[oneB], pt.sees[twoB] = pt.sees[one], pt.sees[two]
	pt.contention(t, []*lockClient{one, two, oneB, twoB}, ttl, nodeTimeout)
}

// partitionKey is the key of TestAsymmetricPartition.
const partitionKey = "partition"

// partitionTest is what TestAsymmetricPartition's steps share: the proxies
// of the clients of each side (p1, p2) and the nodes each client sees.
type partitionTest struct {
	c      *cluster
	admins []*redis.Client
	ctx    context.Context
	p1, p2 []*testkit.Proxy
	sees   map[*lockClient][]int
}

// holds acquires the key for x, which must succeed on exactly the nodes x
// sees. Its lock's calls get the patient node timeout: they succeed at the
// quorum, without waiting for the cut-off nodes.
func (pt *partitionTest) holds(t *testing.T, x *lockClient, opts ...redlock.Option) *redlock.Lock {
	t.Helper()
	l, err := x.TryLock(pt.ctx, partitionKey, append([]redlock.Option{redlock.WithNodeTimeout(patient)}, opts...)...)
	if err != nil {
		t.Fatalf("%s: TryLock with the key free on the nodes it sees: %v", x.name, err)
	}
	if on := tokensOn(t, pt.admins, rkey(partitionKey), l.Token()); !slices.Equal(on, pt.sees[x]) {
		t.Fatalf("%s: its token is on nodes %v, want exactly %v", x.name, on, pt.sees[x])
	}
	return l
}

// blocked makes x try the held key: TryLock 3 times, then Lock with a short
// wait; every attempt must fail with node 2 (shared) taken, and the
// holder's copies must be as they were.
func (pt *partitionTest) blocked(t *testing.T, x *lockClient, holder *redlock.Lock) {
	t.Helper()
	before := snapshot(t, pt.admins, rkey(partitionKey))
	for range 3 {
		_, err := x.TryLock(pt.ctx, partitionKey)
		checkFailedRound(t, err, []int{2}, redlock.OutcomeTaken)
	}
	_, err := x.Lock(pt.ctx, partitionKey, redlock.WithMaxWait(300*time.Millisecond))
	checkFailedRound(t, err, []int{2}, redlock.OutcomeTaken)
	if held := checkIntact(t, pt.admins, before, holder.Token(), x.name+"'s failed attempts"); len(held) != 3 {
		t.Errorf("before %s's attempts, %d nodes held the key, want 3: %v", x.name, len(held), before.vals)
	}
}

// staleHandle: a holder of two lets its short lock expire; one takes the
// key over (on node 2 once two's copy has expired there); the stale handle
// of two can then neither extend nor release anything of one's.
func (pt *partitionTest) staleHandle(t *testing.T, one, two *lockClient, nodeTimeout time.Duration) {
	ctx := pt.ctx
	stale := pt.holds(t, two, redlock.WithTTL(400*time.Millisecond), redlock.WithNodeTimeout(nodeTimeout))
	// Failed rounds wait for the cut-off nodes: a shorter node timeout
	// than patient, still ample for the nodes one sees.
	l1, err := one.Lock(ctx, partitionKey, redlock.WithNodeTimeout(250*time.Millisecond))
	acq := time.Now()
	if err != nil {
		t.Fatalf("one: Lock after two's lock expired: %v", err)
	}
	if acq.Before(stale.Deadline()) {
		t.Fatalf("one acquired %v before the deadline of two's lock", stale.Deadline().Sub(acq))
	}
	<-stale.Done()
	before := snapshot(t, pt.admins, rkey(partitionKey))
	if err := stale.Extend(ctx, 0); !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("two: Extend of the expired lock = %v, want ErrLockLost", err)
	}
	err = stale.Release(ctx)
	if !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("two: Release of the expired lock = %v, want ErrNotHeld", err)
	} else if qe := asQuorumError(t, err); qe.Agreed() != 0 || qe.Nodes[2].Outcome != redlock.OutcomeNotHeld {
		t.Errorf("two: Release of the expired lock: %d nodes confirmed, node2 %v; want none, node2 not held: %v", qe.Agreed(), qe.Nodes[2].Outcome, err)
	}
	checkIntact(t, pt.admins, before, l1.Token(), "the stale holder's Extend and Release")
	if ok, err := l1.Held(ctx); !ok || err != nil {
		t.Fatalf("one: Held after the stale holder's attempts = %v, %v", ok, err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatalf("one: Release: %v", err)
	}
}

// contention runs contendAcross on contenders and checks its history, then
// heals the partition and closes the contenders.
func (pt *partitionTest) contention(t *testing.T, contenders []*lockClient, ttl, nodeTimeout time.Duration) {
	rounds := func() (n int64) {
		for _, x := range contenders {
			n += x.tokens.attempts()
		}
		return n
	}
	rounds0 := rounds()
	h := history.New()
	counter := new(atomic.Int64) // see recorded.increment
	var tl workerTally
	took, calls := contendAcross(t, pt.ctx, h, contenders, pt.sees, ttl, counter, &tl)
	h.SetCounter(partitionKey, counter.Load())
	r := checkHistory(t, h, history.Config{NodeTimeout: nodeTimeout})
	if n := tl.done(); r.Checked[history.S5] != n || r.Sections != n || n < partitionSections {
		t.Errorf("%d critical sections (S5 checked %d, %d recorded), want at least %d", n, r.Checked[history.S5], r.Sections, partitionSections)
	}
	eventuallyGone(t, pt.admins, partitionKey)
	// Heal the partition before closing: the background releases still
	// waiting on cut-off nodes (where nothing arrived) then fail at once
	// instead of running out their budget.
	for _, p := range append(pt.p1, pt.p2...) {
		p.Blackhole(false)
	}
	for _, x := range contenders {
		x.closeAndCheck(t)
	}
	t.Logf("contention across the partition: %d critical sections in %v, %d Lock calls, %d acquisition rounds, %d releases short of a quorum",
		tl.done(), took.Round(time.Millisecond), calls, rounds()-rounds0, tl.relFailed.Load())
}

// contendAcross runs perPartitionClient goroutines on each of contenders,
// each waiting up to 1 s in Lock for partitionKey and incrementing counter
// under it, until partitionSections critical sections are done. A Release may fail for
// timeouts (a loaded machine), but no node a contender sees may say "not
// held": the key would have been someone else's there while it held the
// lock. It returns how long that took and how many Lock calls were made.
func contendAcross(t *testing.T, ctx context.Context, h *history.History, contenders []*lockClient, sees map[*lockClient][]int, ttl time.Duration, counter *atomic.Int64, tl *workerTally) (time.Duration, int64) {
	var (
		calls atomic.Int64
		wg    sync.WaitGroup
	)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	for w := range len(contenders) * perPartitionClient {
		x := contenders[w%len(contenders)]
		wk := newWorker(h, x, fmt.Sprintf("%s/worker%d", x.name, w), ttl, w, 6, time.Second)
		relOK := func(err error) bool {
			var qe *redlock.QuorumError
			return errors.As(err, &qe) && !slices.ContainsFunc(sees[x], func(i int) bool { return qe.Nodes[i].Outcome == redlock.OutcomeNotHeld })
		}
		wg.Go(func() {
			for wctx.Err() == nil && tl.done() < partitionSections {
				calls.Add(1)
				wk.turn(t, wctx, partitionKey, counter, time.Duration(2000+wk.rng.IntN(3000))*time.Microsecond, tl, relOK)
			}
		})
	}
	took := eventually(t, 30*time.Second, 10*time.Millisecond, "contention across the partition", func() bool {
		return tl.done() >= partitionSections
	})
	stop()
	wg.Wait()
	return took, calls.Load()
}
