package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestSlowLinks runs the scenarios of slow and cancelled calls on one
// cluster (each starts its own clients and proxies, on keys of its own):
// replies delayed past the TTL, extends racing the lock's expiry, and
// cancellation before and during calls.
func TestSlowLinks(t *testing.T) {
	c := startCluster(t, 3*time.Second, "")
	dropFenceCounters(t, c)
	t.Run("replies-delayed-past-TTL", func(t *testing.T) { repliesDelayedPastTTL(t, c) })
	t.Run("extend-racing-expiry", func(t *testing.T) { extendRacingExpiry(t, c) })
	t.Run("cancellation", func(t *testing.T) { cancellation(t, c) })
}

// repliesDelayedPastTTL slows three of five nodes down behind a client's
// proxies. With more delay than the TTL, the acquisition fails (the slow
// nodes time out), and once the delayed SETs have landed, the roll-backs
// sent after them have removed them: no key is left (L2). With fencing and a
// node timeout that waits for the slow nodes, a quorum agrees, but the two
// round trips (SET, then the fence write-back) use up the TTL: the
// acquisition fails for want of validity (S2), and leaves nothing either.
func repliesDelayedPastTTL(t *testing.T, c *cluster) {
	const maxTTL = 2 * time.Second
	dt := &delayedTest{ctx: ctxT(t, 30*time.Second), admins: c.admins(t), slow: []int{0, 1, 2}}
	dt.lc, dt.ps, dt.drainers = c.proxied(t, dt.ctx, "delayed", redlock.WithTTL(maxTTL), redlock.WithNodeTimeout(patient))
	eventuallyGone(t, dt.admins, "warm-up")
	t.Run("latency-above-TTL", dt.latencyAboveTTL)
	t.Run("no-validity-left", dt.noValidityLeft)
	dt.lc.closeAndCheck(t)
}

// delayedTest is what repliesDelayedPastTTL's subtests share: the client
// whose links to the slow nodes get the latency, through its proxies ps.
type delayedTest struct {
	ctx      context.Context
	admins   []*redis.Client
	lc       *lockClient
	ps       []*testkit.Proxy
	drainers []*redis.Client
	slow     []int
}

// rewarm runs a fenced acquisition and its release with no latency, so
// that the client has a ready connection to every node (one that timed out
// was dropped, and a new one costs a connect, HELLO and the restart
// guard's INFO: three more round trips behind a slow proxy) and every node
// has the fenced script (its first run costs EVALSHA, NOSCRIPT, EVAL).
// Then it waits until no straggler of it is on its way.
func (dt *delayedTest) rewarm(t *testing.T) {
	t.Helper()
	l, err := dt.lc.TryLock(dt.ctx, "warm-up-fenced", redlock.WithFencing(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(dt.ctx); err != nil {
		t.Fatal(err)
	}
	eventuallyGone(t, dt.admins, "warm-up-fenced")
}

// slowDown puts latency on the links to the slow nodes until the test ends.
func (dt *delayedTest) slowDown(t *testing.T, latency time.Duration) {
	set := func(d time.Duration) {
		for _, i := range dt.slow {
			dt.ps[i].SetLatency(d)
		}
	}
	set(latency)
	t.Cleanup(func() { set(0) })
}

// landedNothing waits until the delayed commands have landed (within
// bound), and fails the test if a node holds key.
func (dt *delayedTest) landedNothing(t *testing.T, key string, bound time.Duration) {
	t.Helper()
	drain(t, dt.drainers, bound)
	for i, cl := range dt.admins {
		if v := get(t, cl, rkey(key)); v != "" {
			t.Errorf("node%d still holds %s = %q (PTTL %dms) after the delayed commands landed", i, rkey(key), v, pttl(t, cl, rkey(key)))
		}
	}
}

// latencyAboveTTL: the slow nodes time out, the acquisition fails.
func (dt *delayedTest) latencyAboveTTL(t *testing.T) {
	const (
		ttl     = 400 * time.Millisecond
		latency = 500 * time.Millisecond // each way
		key     = "delayed-past-ttl"
	)
	dt.rewarm(t)
	dt.slowDown(t, latency)
	start := time.Now()
	_, err := dt.lc.TryLock(dt.ctx, key, redlock.WithTTL(ttl), redlock.WithNodeTimeout(100*time.Millisecond))
	t.Logf("TryLock with %v latency on nodes %v and a %v TTL failed after %v: %v", latency, dt.slow, ttl, time.Since(start).Round(time.Microsecond), err)
	checkFailedRound(t, err, dt.slow, redlock.OutcomeTimeout)
	dt.landedNothing(t, key, 10*latency)
}

// noValidityLeft: with fencing and a node timeout that waits for the slow
// nodes, a quorum agrees, but the two round trips use up the TTL.
func (dt *delayedTest) noValidityLeft(t *testing.T) {
	const (
		ttl         = 700 * time.Millisecond
		nodeTimeout = 600 * time.Millisecond // waits for the slow nodes
		latency     = 180 * time.Millisecond // each way: 2 round trips > TTL
		key         = "delayed-no-validity"
	)
	dt.rewarm(t)
	dt.slowDown(t, latency)
	start := time.Now()
	_, err := dt.lc.TryLock(dt.ctx, key, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout), redlock.WithFencing(true))
	took := time.Since(start)
	t.Logf("fenced TryLock with %v latency on nodes %v and a %v TTL failed after %v: %v", latency, dt.slow, ttl, took.Round(time.Microsecond), err)
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("TryLock whose two round trips outlast the TTL = %v, want ErrNotAcquired", err)
	}
	qe := asQuorumError(t, err)
	if qe.Agreed() < qe.Quorum || qe.Validity > 0 {
		t.Errorf("QuorumError: %d agreed (quorum %d), validity %v; want a quorum and no validity: %v", qe.Agreed(), qe.Quorum, qe.Validity, err)
	}
	dt.landedNothing(t, key, 10*latency)
}

// extendRacingExpiry extends a lock right around its deadline while
// another client keeps trying to take it. Before each Extend, the PEXPIRE
// to 0-3 nodes is slowed (proxy latency) so that it lands after the key
// expired there: a quorum may confirm (the extend succeeds), or too many
// nodes no longer hold the token (ErrLockLost), and an Extend called after
// the deadline is refused at once. Whatever happened, the history checker
// finds that the other client never acquired the key within the validity
// the holder was given (S1), including after a successful extend, and every
// deadline, the extends' too, within its bounds (S2).
func extendRacingExpiry(t *testing.T, c *cluster) {
	const (
		ttl         = 200 * time.Millisecond
		nodeTimeout = 100 * time.Millisecond
		latency     = 15 * time.Millisecond // each way, to the slowed nodes
		key         = "extend-race"
	)
	ctx := ctxT(t, 60*time.Second)
	ps, via := c.proxyEach(t)
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}
	holder := c.newLockClient(t, "holder", via, append(opts, redlock.WithRetryBackoff(2*time.Millisecond, 10*time.Millisecond))...)
	contender := c.newLockClient(t, "contender", c.direct, opts...)
	warm(t, ctx, holder)
	warm(t, ctx, contender)

	h := history.New()
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan int)
	go func() { done <- contend(t, cctx, record(h, contender, "contender", ttl), key) }()

	// lead: how long before the deadline Extend is called (negative:
	// after it); slow: how many nodes get the latency.
	cases := []struct {
		slow int
		lead time.Duration
	}{
		{0, 10 * time.Millisecond}, {1, 3 * time.Millisecond}, {2, 3 * time.Millisecond}, {3, 3 * time.Millisecond},
		{2, 0}, {3, 8 * time.Millisecond}, {3, 0}, {2, 10 * time.Millisecond},
		{3, 15 * time.Millisecond}, {0, -2 * time.Millisecond},
	}
	rh := record(h, holder, "holder", ttl)
	outcomes := map[string]int{}
	for n, tc := range cases {
		outcomes[extendAround(t, ctx, rh, key, ps[:tc.slow], tc.lead, latency, n)]++
	}
	delete(outcomes, "")
	stop()
	won := <-done
	r := checkHistory(t, h, history.Config{NodeTimeout: nodeTimeout})
	if r.Acquired != won+len(cases) {
		t.Errorf("the history holds %d acquisitions, want the holder's %d and the contender's %d", r.Acquired, len(cases), won)
	}
	t.Logf("%d extends around the deadline: %v; the contender acquired %d times, %d holders checked", len(cases), outcomes, won, r.Acquired)
	if outcomes["extended"] == 0 || outcomes["lost: nodes no longer held it"]+outcomes["lost: deadline passed"] == 0 {
		t.Errorf("outcomes %v: the cases did not cover both a successful and a failed extend", outcomes)
	}
	if won == 0 {
		t.Error("the contender never acquired the key: the race was not tested")
	}
}

// extendAround is case n of extendRacingExpiry: the holder r takes key,
// waits until lead before its deadline, and extends the lock with latency
// on the links slow. It returns the outcome (extendOutcome; "" for a
// failure of the test). The holder never releases: it lets the lock run
// out at its deadline, the one it had or the one the extend gave it, and
// extendAround returns once it did.
func extendAround(t *testing.T, ctx context.Context, r *recorded, key string, slow []*testkit.Proxy, lead, latency time.Duration, n int) string {
	t.Helper()
	l, _, err := r.acquire(ctx, key, -1)
	if err != nil {
		t.Fatalf("case %d: holder: Lock: %v", n, err)
	}
	d0 := l.Deadline()
	time.Sleep(time.Until(d0.Add(-lead)))
	for _, p := range slow {
		p.SetLatency(latency)
	}
	eStart := time.Now()
	err = r.extend(ctx, l)
	for _, p := range slow {
		p.SetLatency(0)
	}
	outcome := extendOutcome(err)
	if outcome == "" {
		t.Errorf("case %d (%d slow nodes, called %v before the deadline): Extend = %v; want success or ErrLockLost", n, len(slow), d0.Sub(eStart), err)
	}
	<-l.Done() // the lock runs out; the contender takes it
	return outcome
}

// contend makes r try key until ctx ends, releasing it at once whenever it
// wins, and returns how many times it won.
func contend(t *testing.T, ctx context.Context, r *recorded, key string) (won int) {
	for ctx.Err() == nil {
		l, _, err := r.acquire(ctx, key, 0)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, redlock.ErrNotAcquired) {
				t.Errorf("contender: TryLock: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		won++
		// A release short of a quorum is legitimate only when a node
		// failed (timed out on the loaded machine): the copies expire
		// with the short TTL.
		if err := r.release(t, context.Background(), l); err != nil && !releaseFailedByNode(err) {
			t.Errorf("contender: Release: %v", err)
		}
	}
	return won
}

// extendOutcome names what an Extend's error says about the lock, "" for
// an error it must not return.
func extendOutcome(err error) string {
	var qe *redlock.QuorumError
	switch {
	case err == nil:
		return "extended"
	case errors.Is(err, redlock.ErrLockLost) && errors.As(err, &qe):
		return "lost: nodes no longer held it"
	case errors.Is(err, redlock.ErrLockLost):
		return "lost: deadline passed"
	case errors.Is(err, redlock.ErrNotHeld) && releaseFailedByNode(err):
		// A node missed the node timeout (a loaded machine): not
		// confirmed, not lost; the holder keeps to its old deadline.
		return "not confirmed: a node timed out"
	}
	return ""
}

// cancellation cancels the caller's context before and during each call
// (with 100 ms each way to every node, so that calls are in flight when it
// happens): TryLock, Lock, Extend, Held and Locked return errors matching
// context.Canceled (and ErrNotAcquired for acquisitions); a cancelled Extend
// does not lose the lock; Release detaches from the cancellation and
// completes; and after Close, once everything sent has landed, nothing of
// the client is left on any node.
func cancellation(t *testing.T, c *cluster) {
	const ttl = 3 * time.Second
	ct := &cancelTest{ctx: ctxT(t, 30*time.Second), admins: c.admins(t)}
	var drainers []*redis.Client
	// A patient node timeout: only the cancellation ends a call.
	ct.a, ct.ps, drainers = c.proxied(t, ct.ctx, "a", redlock.WithTTL(ttl), redlock.WithNodeTimeout(time.Second))
	ct.other = c.warmClients(t, ct.ctx, []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(patient)}, "other")[0]
	t.Run("before", ct.before)
	t.Run("during", ct.during)

	// Close joins the clean-up of the cancelled rounds; once everything a
	// sent has landed, none of its keys may be left.
	if err := ct.a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	drain(t, drainers, 5*time.Second) // with the latency still on: a PING must not overtake
	for _, p := range ct.ps {
		p.SetLatency(0)
	}
	for _, key := range ct.keys {
		for i, cl := range ct.admins {
			if v := get(t, cl, rkey(key)); v != "" {
				t.Errorf("node%d still holds %s = %q (PTTL %dms) after Close", i, rkey(key), v, pttl(t, cl, rkey(key)))
			}
		}
	}
	ct.a.closeAndCheck(t)
}

// cancelTest is what cancellation's subtests share: client a, whose links
// pass through the proxies ps, another client, and the keys a used.
type cancelTest struct {
	ctx      context.Context
	admins   []*redis.Client
	a, other *lockClient
	ps       []*testkit.Proxy
	keys     []string
}

// cancelLatency is the latency on a's links, each way, once the calls are
// cancelled "during".
const cancelLatency = 100 * time.Millisecond

// canceled fails the test unless err matches context.Canceled and, for an
// acquisition, ErrNotAcquired.
func canceled(t *testing.T, op string, err error, acquire bool) {
	t.Helper()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("%s = %v; want an error matching context.Canceled", op, err)
	}
	if acquire && !errors.Is(err, redlock.ErrNotAcquired) {
		t.Errorf("%s = %v; want an error matching ErrNotAcquired", op, err)
	}
}

// before: every call with a context cancelled before it; TryLock and Lock
// make no attempt, a cancelled Extend leaves the lock unchanged, and
// Release detaches from ctx (a deferred Release still runs).
func (ct *cancelTest) before(t *testing.T) {
	const key = "cancel-before"
	ct.keys = append(ct.keys, key)
	cctx, cancel := context.WithCancel(ct.ctx)
	cancel()
	made := ct.a.tokens.attempts()
	_, err := ct.a.TryLock(cctx, key)
	canceled(t, "TryLock", err, true)
	_, err = ct.a.Lock(cctx, key)
	canceled(t, "Lock", err, true)
	if n := ct.a.tokens.attempts() - made; n != 0 {
		t.Errorf("TryLock and Lock with a cancelled context made %d attempts", n)
	}
	l, err := ct.a.TryLock(ct.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	d0 := l.Deadline()
	err = l.Extend(cctx, 0)
	canceled(t, "Extend", err, false)
	if errors.Is(err, redlock.ErrLockLost) || l.Err() != nil || !l.Deadline().Equal(d0) {
		t.Errorf("after a cancelled Extend: %v, Err %v, deadline moved %v; want the lock unchanged", err, l.Err(), l.Deadline().Sub(d0))
	}
	_, err = l.Held(cctx)
	canceled(t, "Held", err, false)
	_, err = ct.a.Locked(cctx, key)
	canceled(t, "Locked", err, false)
	if err := l.Release(cctx); err != nil {
		t.Errorf("Release with a cancelled context = %v; want nil (it detaches)", err)
	}
	eventuallyGone(t, ct.admins, key)
}

// cancelAfter returns a context cancelled d from now (or at the end of the
// test).
func (ct *cancelTest) cancelAfter(t *testing.T, d time.Duration) context.Context {
	cctx, cancel := context.WithCancel(ct.ctx)
	timer := time.AfterFunc(d, cancel)
	t.Cleanup(func() { timer.Stop(); cancel() })
	return cctx
}

// during: every call cancelled while it is in flight, with the latency on
// every link (until the end of the test: see cancellation's drain).
func (ct *cancelTest) during(t *testing.T) {
	for _, p := range ct.ps {
		p.SetLatency(cancelLatency)
	}
	// Cancelled while its SETs are on their way.
	ct.keys = append(ct.keys, "cancel-trylock")
	_, err := ct.a.TryLock(ct.cancelAfter(t, cancelLatency/2), "cancel-trylock")
	canceled(t, "TryLock cancelled in flight", err, true)

	// Cancelled while waiting for a held key.
	ct.keys = append(ct.keys, "cancel-wait")
	lo, err := ct.other.TryLock(ct.ctx, "cancel-wait")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ct.a.Lock(ct.cancelAfter(t, 5*cancelLatency), "cancel-wait")
	canceled(t, "Lock cancelled while waiting", err, true)
	if err := lo.Release(ct.ctx); err != nil {
		t.Fatal(err)
	}

	ct.keys = append(ct.keys, "cancel-extend")
	l, err := ct.a.TryLock(ct.ctx, "cancel-extend")
	if err != nil {
		t.Fatal(err)
	}
	err = l.Extend(ct.cancelAfter(t, cancelLatency/2), 0)
	canceled(t, "Extend cancelled in flight", err, false)
	if errors.Is(err, redlock.ErrLockLost) || l.Err() != nil {
		t.Errorf("after an Extend cancelled in flight: %v, Err %v; want the lock still held", err, l.Err())
	}
	_, err = l.Held(ct.cancelAfter(t, cancelLatency/2))
	canceled(t, "Held cancelled in flight", err, false)
	_, err = ct.a.Locked(ct.cancelAfter(t, cancelLatency/2), "cancel-extend")
	canceled(t, "Locked cancelled in flight", err, false)
	if err := l.Extend(ct.ctx, 0); err != nil {
		t.Errorf("Extend after the cancelled calls: %v", err)
	}
	if err := l.Release(ct.cancelAfter(t, cancelLatency/2)); err != nil {
		t.Errorf("Release cancelled in flight = %v; want nil (it detaches)", err)
	}
}
