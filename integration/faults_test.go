package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

// goRedisReadTimeout is go-redis' default ReadTimeout: without the
// per-node timeout, a frozen node would hold a call this long.
const goRedisReadTimeout = 3 * time.Second

// failBound is the longest a failed acquisition may take: 10 per-node
// timeouts (the round and the roll-back take two), and well under
// go-redis' own read timeout.
func failBound(t *testing.T, nodeTimeout time.Duration) time.Duration {
	t.Helper()
	b := 10 * nodeTimeout
	if b > goRedisReadTimeout/2 {
		t.Fatalf("node timeout %v too long for a bound well under go-redis' %v", nodeTimeout, goRedisReadTimeout)
	}
	return b
}

// warm makes one acquisition and release, so that the Client has verified
// every node's identity (INFO server run_id) before faults begin: a node
// that cannot be verified is "not asked" instead of "error"/"timeout".
func warm(t *testing.T, ctx context.Context, lc *lockClient) {
	t.Helper()
	l, err := lc.TryLock(ctx, "warm-up")
	if err != nil {
		t.Fatalf("%s: warm-up TryLock: %v", lc.name, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("%s: warm-up Release: %v", lc.name, err)
	}
}

// warmClients returns a client per name, each with connections of its own
// straight to every node and opts, warmed up (warm).
func (c *cluster) warmClients(t *testing.T, ctx context.Context, opts []redlock.Option, names ...string) []*lockClient {
	t.Helper()
	lcs := make([]*lockClient, len(names))
	for i, name := range names {
		lcs[i] = c.newLockClient(t, name, c.direct, opts...)
		warm(t, ctx, lcs[i])
	}
	return lcs
}

// numbered returns the names prefix0, prefix1 ... prefix<n-1>.
func numbered(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return names
}

// failingAttempts makes n TryLocks that must fail because the nodes in bad
// are unavailable, checks each error and its duration, and returns the
// durations. Each attempt uses a key of its own (key-<i>): the available
// nodes then say yes, so the round can only be decided once every node in
// bad has failed, and the error must name them all. (On one key, a late
// roll-back of the previous attempt may still be in flight and make a live
// node answer "taken", which decides the round before the bad nodes fail.)
func failingAttempts(t *testing.T, ctx context.Context, lc *lockClient, n int, key string, bound time.Duration, bad []int, want ...redlock.Outcome) []time.Duration {
	t.Helper()
	var took []time.Duration
	for i := range n {
		start := time.Now()
		_, err := lc.TryLock(ctx, fmt.Sprintf("%s-%d", key, i))
		el := time.Since(start)
		took = append(took, el)
		qe := checkFailedRound(t, err, bad, want...)
		if el >= bound {
			t.Errorf("attempt %d failed after %v, want < %v: %v", i, el, bound, err)
		}
		if qe.Agreed() > nodes-len(bad) {
			t.Errorf("attempt %d: %d nodes agreed, but only %d are up: %v", i, qe.Agreed(), nodes-len(bad), err)
		}
		if i == 0 {
			t.Logf("first failure after %v: %v", el.Round(time.Microsecond), err)
		}
	}
	return took
}

// TestKillMajority kills three of five nodes: every TryLock fails fast with a
// *QuorumError naming the dead nodes, Lock gives up within its wait budget,
// nothing is left on the live nodes, and after the nodes restart (keeping
// their data) locks are acquired again, also by a Client created while they
// were down.
func TestKillMajority(t *testing.T) {
	const (
		ttl         = 2 * time.Second
		nodeTimeout = 100 * time.Millisecond
		attempts    = 20
	)
	// heldTTL is the TTL of the lock held while the nodes die: killing
	// three containers on a loaded machine can outlast ttl, and the lock
	// must still be valid when Close releases it.
	const heldTTL = 30 * time.Second
	c := startCluster(t, heldTTL, "")
	c.keepsData() // the dead nodes come back with their data below
	ctx := ctxT(t, 60*time.Second)
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}
	lc := c.newLockClient(t, "verified", c.direct, opts...)
	warm(t, ctx, lc)
	bound := failBound(t, nodeTimeout)
	// A Client that holds a lock when the nodes die.
	holder := c.newLockClient(t, "holder", c.direct, opts...)
	held, err := holder.TryLock(ctx, "held-when-killed", redlock.WithTTL(heldTTL))
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}

	dead := []int{1, 3, 4}
	for _, i := range dead {
		if err := c.Node(i).Kill(); err != nil {
			t.Fatal(err)
		}
	}

	closedOnDeadNodes(t, ctx, holder, held, bound)
	took := failingAttempts(t, ctx, lc, attempts, "majority-dead", bound, dead, redlock.OutcomeError, redlock.OutcomeTimeout)
	t.Logf("TryLock with 3 of 5 nodes killed failed in %s (node timeout %v, bound %v)", durations(took), nodeTimeout, bound)

	// Lock retries, and gives up within its budget (plus one attempt).
	const wait = 400 * time.Millisecond
	start := time.Now()
	_, err = lc.Lock(ctx, "majority-dead", redlock.WithMaxWait(wait))
	el := time.Since(start)
	checkFailedRound(t, err, dead, redlock.OutcomeError, redlock.OutcomeTimeout)
	if el >= wait+bound {
		t.Errorf("Lock with WithMaxWait(%v) returned after %v", wait, el)
	}

	// A Client created now cannot verify the dead nodes' identities: it
	// leaves them out ("not asked"), and fails just as fast.
	fresh := c.newLockClient(t, "fresh", c.direct, opts...)
	took = failingAttempts(t, ctx, fresh, 5, "majority-dead", bound, dead, redlock.OutcomeError, redlock.OutcomeTimeout, redlock.OutcomeNotAsked)
	t.Logf("fresh Client with 3 of 5 nodes killed failed in %s", durations(took))

	for _, i := range dead {
		if err := c.Node(i).Restart(false); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []*lockClient{lc, fresh} {
		took, tries := acquiresAgain(t, ctx, x, "majority-dead", "after restart")
		t.Logf("%s: acquired again %v after the restarts, in %d attempts", x.name, took, tries)
	}
}

// closedOnDeadNodes: holder, whose lock held is on nodes a majority of
// which died, can no longer confirm it, and its Close (within bound)
// reports the release that the dead nodes made fail (their copies expire
// with the TTL, or come back with it after a restart that keeps the data);
// the closed Client acquires nothing more.
func closedOnDeadNodes(t *testing.T, ctx context.Context, holder *lockClient, held *redlock.Lock, bound time.Duration) {
	t.Helper()
	if ok, err := held.Held(ctx); ok {
		t.Errorf("Held with 3 of 5 nodes dead = true, %v", err)
	}
	start := time.Now()
	err := holder.Close()
	if el := time.Since(start); el >= bound {
		t.Errorf("Close took %v, want < %v", el, bound)
	}
	if !errors.Is(err, redlock.ErrNotHeld) || !strings.Contains(err.Error(), held.Key()) {
		t.Errorf("Close with a lock on dead nodes = %v; want the failed release (ErrNotHeld, naming the key)", err)
	} else {
		t.Logf("Close: %v", err)
	}
	if _, err := holder.TryLock(ctx, "after-close"); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("TryLock after Close = %v, want ErrClosed", err)
	}
}

// acquiresAgain waits (10 s at most) until lc acquires key, then releases
// it; every failed attempt must fail with ErrNotAcquired and name the nodes.
// It returns how long that took and how many attempts it made.
func acquiresAgain(t *testing.T, ctx context.Context, lc *lockClient, key, when string) (time.Duration, int) {
	t.Helper()
	var tries int
	took := eventually(t, 10*time.Second, 20*time.Millisecond, lc.name+": TryLock "+when, func() bool {
		tries++
		l, err := lc.TryLock(ctx, key)
		if err != nil {
			if !errors.Is(err, redlock.ErrNotAcquired) || !strings.Contains(err.Error(), "node") {
				t.Fatalf("%s: TryLock %s: %v", lc.name, when, err)
			}
			return false
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: Release %s: %v", lc.name, when, err)
		}
		return true
	})
	return took, tries
}

// TestPause freezes nodes (sockets stay open, nothing is answered): with
// three of five paused every TryLock fails within the bound with the frozen
// nodes timing out; with two paused acquisitions succeed without waiting
// for them, and their deadlines still leave the drift allowance before the
// keys expire on the live nodes.
func TestPause(t *testing.T) {
	const (
		ttl         = 3 * time.Second
		nodeTimeout = 100 * time.Millisecond
		attempts    = 20
	)
	c := startCluster(t, ttl, "")
	admins := c.admins(t)
	t.Cleanup(func() { // before the cluster's own clean-up and checks
		for i := range c.Len() {
			_ = c.Node(i).Resume()
		}
	})
	ctx := ctxT(t, 60*time.Second)
	lcs := c.warmClients(t, ctx, []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}, "three-paused", "two-paused")
	three, two := lcs[0], lcs[1]
	bound := failBound(t, nodeTimeout)

	paused := []int{0, 2, 4}
	for _, i := range paused {
		if err := c.Node(i).Pause(); err != nil {
			t.Fatal(err)
		}
	}
	took := failingAttempts(t, ctx, three, attempts, "paused", bound, paused, redlock.OutcomeTimeout)
	t.Logf("TryLock with 3 of 5 nodes paused failed in %s (node timeout %v, bound %v)", durations(took), nodeTimeout, bound)
	// Close joins the late-reply clean-up; the live nodes must hold none of
	// the failed tokens. (The frozen nodes will run the SETs queued in
	// their sockets when they resume: those keys expire with the TTL,
	// which the cluster's clean-up check verifies.)
	three.closeAndCheck(t)

	// Two paused: a quorum of three answers at once. A per-call node
	// timeout far above the live nodes' answers: if a round waited for the
	// paused nodes it would take this long. The live nodes must all hold
	// the lock: the quorum is exactly them.
	if err := c.Node(0).Resume(); err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		l, start, ret := quorumRound(t, ctx, two, "two-paused", time.Second, time.Second)
		if held, err := l.Held(ctx); !held || err != nil {
			t.Fatalf("round %d: Held = %v, %v", round, held, err)
		}
		checkDeadline(t, l, start, ret, ttl, 0, admins, []int{0, 1, 3})
		if err := l.Extend(ctx, 0); err != nil {
			t.Fatalf("round %d: Extend with 2 of 5 nodes paused: %v", round, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("round %d: Release with 2 of 5 nodes paused: %v", round, err)
		}
	}

	for i := range c.Len() {
		if err := c.Node(i).Resume(); err != nil {
			t.Fatal(err)
		}
	}
	acquiresAgain(t, ctx, two, "after-resume", "after Resume") // everything answers again
}

// quorumRound makes lc acquire key with a per-call node timeout of slow,
// far above the answers of a quorum of fast nodes: the call must succeed
// within (before the other nodes can answer), not waiting for the others.
// It returns the lock and when the call started and returned.
func quorumRound(t *testing.T, ctx context.Context, lc *lockClient, key string, slow, within time.Duration) (*redlock.Lock, time.Time, time.Time) {
	t.Helper()
	start := time.Now()
	l, err := lc.TryLock(ctx, key, redlock.WithNodeTimeout(slow))
	ret := time.Now()
	if err != nil {
		t.Fatalf("%s: TryLock with a quorum of fast nodes: %v", lc.name, err)
	}
	if el := ret.Sub(start); el >= within {
		t.Errorf("%s: TryLock took %v: it waited for the slow nodes", lc.name, el)
	}
	return l, start, ret
}

// TestProxyFaults injects faults between one Client and the nodes through
// per-client TCP proxies, while another Client is connected directly.
func TestProxyFaults(t *testing.T) {
	const (
		ttl         = 3 * time.Second
		nodeTimeout = 100 * time.Millisecond
	)
	c := startCluster(t, ttl, "")
	pt := &proxyTest{admins: c.admins(t), ctx: ctxT(t, 60*time.Second), ttl: ttl, bound: failBound(t, nodeTimeout)}
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}
	pt.proxied, pt.proxies, _ = c.proxied(t, pt.ctx, "proxied", opts...)
	pt.direct = c.warmClients(t, pt.ctx, opts, "direct")[0]
	t.Run("latency-on-two", pt.latencyOnTwo)
	t.Run("latency-on-three", pt.latencyOnThree)
	t.Run("blackhole-three", pt.blackholeThree)
}

// proxyTest is what TestProxyFaults' subtests share: the proxied client
// and its proxies, the directly connected client, their TTL, and the bound
// of a failed acquisition.
type proxyTest struct {
	admins          []*redis.Client
	ctx             context.Context
	proxied, direct *lockClient
	proxies         []*testkit.Proxy
	ttl, bound      time.Duration
}

const (
	// proxyLatency is the latency TestProxyFaults puts on slow links,
	// each way.
	proxyLatency = 100 * time.Millisecond
	// proxyPatient is a per-call node timeout that slow nodes meet: their
	// answers arrive after at least 2 × proxyLatency.
	proxyPatient = 2 * time.Second
)

// slow puts the latency on the proxies of nodes idx until the test ends.
func (pt *proxyTest) slow(t *testing.T, idx ...int) {
	for _, i := range idx {
		pt.proxies[i].SetLatency(proxyLatency)
	}
	t.Cleanup(func() {
		for _, i := range idx {
			pt.proxies[i].SetLatency(0)
		}
	})
}

// latencyOnTwo: three fast nodes decide; a round does not wait for the
// slow ones, whose answers cannot come before 2 × latency.
func (pt *proxyTest) latencyOnTwo(t *testing.T) {
	pt.slow(t, 0, 1)
	for round := range 5 {
		l, start, ret := quorumRound(t, pt.ctx, pt.proxied, "latency", proxyPatient, 2*proxyLatency)
		checkDeadline(t, l, start, ret, pt.ttl, 0, pt.admins, []int{2, 3, 4})
		if err := l.Release(pt.ctx); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
	}
}

// latencyOnThree: now a quorum needs a slow node: a round takes at least 2
// × latency, and the deadline must account for it. (With the client's own
// node timeout, less than one slow round trip, the lock is refused:
// TestRollbackOnSlowNodes.)
func (pt *proxyTest) latencyOnThree(t *testing.T) {
	pt.slow(t, 0, 1, 2)
	for round := range 3 {
		start := time.Now()
		l, err := pt.proxied.TryLock(pt.ctx, "latency", redlock.WithNodeTimeout(proxyPatient))
		ret := time.Now()
		if err != nil {
			t.Fatalf("round %d: TryLock with latency on 3 of 5: %v", round, err)
		}
		if el := ret.Sub(start); el < 2*proxyLatency {
			t.Fatalf("round %d: TryLock took %v, less than one slow round trip", round, el)
		}
		checkDeadline(t, l, start, ret, pt.ttl, 2*proxyLatency, pt.admins, []int{3, 4})
		if err := l.Release(pt.ctx); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
	}
}

// blackholeThree cuts the proxied client off from three nodes: its
// attempts fail within the bound, while the directly connected client
// acquires the same key meanwhile, even while the cut-off client keeps
// trying; once healed, the proxied client acquires again.
func (pt *proxyTest) blackholeThree(t *testing.T) {
	cut := []int{2, 3, 4}
	blackhole := func(on bool) {
		for _, i := range cut {
			pt.proxies[i].Blackhole(on)
		}
	}
	blackhole(true)
	defer blackhole(false)
	took := failingAttempts(t, pt.ctx, pt.proxied, 10, "partition", pt.bound, cut, redlock.OutcomeTimeout)
	t.Logf("TryLock with 3 of 5 nodes blackholed failed in %s", durations(took))

	done := make(chan []time.Duration)
	go func() {
		var took []time.Duration
		for range 5 {
			start := time.Now()
			_, err := pt.proxied.TryLock(pt.ctx, "partition")
			took = append(took, time.Since(start))
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Errorf("cut-off client: TryLock = %v, want ErrNotAcquired", err)
			}
		}
		done <- took
	}()
	for round := range 5 {
		start := time.Now()
		l, err := pt.direct.TryLock(pt.ctx, "partition")
		ret := time.Now()
		if err != nil {
			t.Fatalf("round %d: direct TryLock during the partition: %v", round, err)
		}
		checkDeadline(t, l, start, ret, pt.ttl, 0, pt.admins, nil)
		if err := l.Release(pt.ctx); err != nil {
			t.Fatalf("round %d: direct Release: %v", round, err)
		}
	}
	for _, d := range <-done {
		if d >= pt.bound {
			t.Errorf("cut-off client's TryLock took %v, want < %v", d, pt.bound)
		}
	}
	blackhole(false)
	acquiresAgain(t, pt.ctx, pt.proxied, "partition", "after the partition heals")
}
