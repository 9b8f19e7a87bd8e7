package integration

// Late landings (issue 11, defects 1-3): the first rule of the design brief
// says that a command's fate is unknown until its reply is seen. A command
// whose call timed out may still run on its node after the caller moved on.
// Each test here delays some nodes' commands for a short while: a "transient
// delay" of lateDelay, switched on for lateWindow. The proxies still
// deliver what they read during that window, lateDelay after reading it,
// after the client gave up on it and closed its connection. Then the test
// checks what the late commands did to the lock:
//
//	TestLateExtendNeverShortens    a late, shorter PEXPIRE landing after a longer extend
//	TestLateSetOutlivesRelease     a late SET of a won round landing after its Release
//	TestLateSetAfterFailedRound    late SETs of a failed round landing after its roll-back
//	TestLateRenewalAfterRelease    a late batched renewal landing after its Release and the next holder's acquire
//	TestLateAttemptOfDepartedWaiter a Lock call's late attempt landing after it left the key's line

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

const (
	// lateDelay is how long the proxies hold what they read while the
	// transient delay is on: four node timeouts, so that every call they
	// carry has timed out long before its command lands.
	lateDelay = 400 * time.Millisecond
	// lateWindow is how long the transient delay stays on: shorter than
	// the node timeout, so that what the client sends after a call timed
	// out (a roll-back, another extend, a release) is not delayed.
	lateWindow = 50 * time.Millisecond
	// lateNodeTimeout is the node timeout of the clients whose commands
	// are delayed.
	lateNodeTimeout = 100 * time.Millisecond
	// lateTTL is the TTL of the delayed locks: long against the test, so
	// that a token left behind is obviously left behind.
	lateTTL = 10 * time.Second
	// lateSlack is how long after its due time a delayed command may take
	// to be written and run on the busy test machine.
	lateSlack = 300 * time.Millisecond
)

// lateDelayed is a transient delay on some nodes' proxies (delayBriefly).
type lateDelayed struct {
	t        *testing.T
	offDone  chan struct{} // closed once the delay is off, at offAt
	pings    chan error
	n        int
	once     sync.Once
	offAt    time.Time
	landedAt time.Time
	errs     []error
}

// delayBriefly turns a transient delay on for the proxies of the nodes idx
// and returns at once; the caller then starts the operation whose commands
// are to land late. A goroutine sends, 20 ms later (once the operation's
// commands have been read by the proxies) and while the delay is still on,
// a PING through each of those proxies on the drainers' ready connections,
// and turns the delay off lateWindow after it was turned on. The wait for
// the landing also runs at the end of the test, so that no goroutine is
// left behind.
func delayBriefly(t *testing.T, ps []*testkit.Proxy, drainers []*redis.Client, idx []int) *lateDelayed {
	t.Helper()
	d := &lateDelayed{t: t, offDone: make(chan struct{}), pings: make(chan error, len(idx)), n: len(idx)}
	for _, i := range idx {
		ps[i].SetLatency(lateDelay)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		for _, i := range idx {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := drainers[i].Ping(ctx).Err(); err != nil {
					d.pings <- fmt.Errorf("PING through the proxy of node%d: %w", i, err)
					return
				}
				d.pings <- nil
			}()
		}
		time.Sleep(lateWindow - 20*time.Millisecond)
		for _, i := range idx {
			ps[i].SetLatency(0)
		}
		d.offAt = time.Now()
		close(d.offDone)
	}()
	t.Cleanup(d.wait)
	return d
}

func (d *lateDelayed) wait() {
	d.once.Do(func() {
		<-d.offDone
		for range d.n {
			if err := <-d.pings; err != nil {
				d.errs = append(d.errs, err)
			}
		}
		time.Sleep(time.Until(d.offAt.Add(lateDelay + lateSlack)))
		d.landedAt = time.Now()
	})
}

// off waits until the delay has been turned off; what the client sends
// from then on is not delayed.
func (d *lateDelayed) off() { <-d.offDone }

// landed waits until everything the proxies read while the delay was on has
// been delivered and run, and returns the time it did: everything read then
// was due at most lateDelay after the delay was turned off, so it waits at
// least that long plus lateSlack, and also until the PINGs have been
// answered (each reached its node behind what its proxy read before it).
// Calling it again returns the same time.
func (d *lateDelayed) landed() time.Time {
	d.t.Helper()
	d.wait()
	for _, err := range d.errs {
		d.t.Fatal(err)
	}
	return d.landedAt
}

// holders returns, for every node that stores token under the lock key of
// key, "node<i> (PTTL <ms>ms)".
func holders(t *testing.T, admins []*redis.Client, key, token string) []string {
	t.Helper()
	var out []string
	for i, cl := range admins {
		if get(t, cl, rkey(key)) == token {
			out = append(out, fmt.Sprintf("node%d (PTTL %dms)", i, pttl(t, cl, rkey(key))))
		}
	}
	return out
}

// settle waits until no reply to the client's earlier calls is still on its
// way. A round returns at its quorum, while the other nodes' replies may
// still be in flight; if the delay came on now, those replies would be
// held too, and a Pool runs a node's commands one batch at a time, so the
// command the test means to delay would wait behind them until its
// deadline and never be sent. Every call ends within the node timeout
// (answered or timed out), so twice that is enough.
func settle() { time.Sleep(2 * lateNodeTimeout) }

// lateAttempts runs scenario until its premise holds, at most 3 times, on
// the keys "k", "k-2", "k-3". The scenario returns false, after logging
// why, when the machine was too slow for its premise (a node that should
// answer at once missed the 100 ms node timeout); it reports the
// property's violations with t.Error itself.
func lateAttempts(t *testing.T, scenario func(key string) bool) {
	t.Helper()
	for n := 1; n <= 3; n++ {
		key := "k"
		if n > 1 {
			key = fmt.Sprintf("k-%d", n)
		}
		if scenario(key) {
			return
		}
		t.Logf("attempt %d on %q: the premise did not hold (see above); again on a fresh key", n, key)
	}
	t.Fatal("the premise did not hold in 3 attempts: the machine is too slow for a 100 ms node timeout")
}

// lateRig is the set-up of the late-landing tests that delay client a's
// commands: a cluster, its admin clients, a through a proxy per node (ps,
// with their drainers), and b, another client connected directly, both
// warmed up.
type lateRig struct {
	ctx      context.Context
	admins   []*redis.Client
	ps       []*testkit.Proxy
	drainers []*redis.Client
	a, b     *lockClient
}

// newLateRig starts the cluster and the rig's clients; closeAndCheck
// closes them and checks what their failed rounds left.
func newLateRig(t *testing.T) *lateRig {
	t.Helper()
	c := startCluster(t, lateTTL, "")
	r := &lateRig{ctx: ctxT(t, 60*time.Second), admins: c.admins(t)}
	r.a, r.ps, r.drainers = c.proxied(t, r.ctx, "a", redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(lateNodeTimeout))
	r.b = c.warmClients(t, r.ctx, []redlock.Option{redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(patient)}, "b")[0]
	return r
}

func (r *lateRig) closeAndCheck(t *testing.T) {
	t.Helper()
	r.a.closeAndCheck(t)
	r.b.closeAndCheck(t)
}

// delay turns the transient delay on for the nodes idx (delayBriefly).
func (r *lateRig) delay(t *testing.T, idx []int) *lateDelayed {
	t.Helper()
	return delayBriefly(t, r.ps, r.drainers, idx)
}

// delayedTryLock waits until no earlier reply is on its way (settle), turns
// the transient delay on for the nodes slow, and calls a.TryLock(key).
func (r *lateRig) delayedTryLock(t *testing.T, key string, slow []int) (*lateDelayed, *redlock.Lock, error) {
	t.Helper()
	settle()
	d := r.delay(t, slow)
	l, err := r.a.TryLock(r.ctx, key)
	return d, l, err
}

// TestLateExtendNeverShortens (two holders): an extend to a short TTL that
// timed out on every node must not, when its PEXPIREs land after a later,
// longer extend succeeded, cut the key below the holder's deadline.
//
// A holds "k" with a 10 s TTL. With the transient delay on every node,
// A.Extend(1s) times out everywhere (an error; the lock is not lost). With
// the delay gone, A.Extend(10s) succeeds. Then the late PEXPIRE 1000s land.
// From then on, for 2 s (well past the 1 s they would leave), as long as A
// believes it holds the lock (Err() nil, Deadline ahead), a quorum of nodes
// must keep A's token at least until A's deadline, and another client B must
// never acquire "k".
func TestLateExtendNeverShortens(t *testing.T) {
	r := newLateRig(t)
	lateAttempts(t, func(key string) bool { return r.extendNeverShortens(t, key) })
	r.closeAndCheck(t)
}

// extendNeverShortens is TestLateExtendNeverShortens on key; it returns
// false if the premise did not hold.
func (r *lateRig) extendNeverShortens(t *testing.T, key string) bool {
	ctx := r.ctx
	l, err := r.a.TryLock(ctx, key)
	if err != nil {
		t.Logf("premise: a.TryLock(%q): %v", key, err)
		return false
	}
	defer func() { _ = l.Release(ctx) }() // a broken premise, or b took it
	// An extend with no delay: every node now has the extend script, so
	// the late command below runs wherever it lands.
	if err := l.Extend(ctx, lateTTL); err != nil {
		t.Logf("premise: a.Extend(%v) with no delay: %v", lateTTL, err)
		return false
	}
	settle()
	if h := holders(t, r.admins, key, l.Token()); len(h) != nodes {
		t.Logf("premise: a's token is only on %v", h)
		return false
	}

	delayed := r.delay(t, all())
	err = l.Extend(ctx, time.Second)
	t.Logf("a.Extend(1s) with the transient delay on every node: %v", err)
	if err == nil {
		t.Fatal("a.Extend(1s) with every node delayed by 400 ms (node timeout 100 ms) succeeded; want a timeout on every node")
	}
	if lerr := l.Err(); lerr != nil {
		t.Fatalf("after an extend that only timed out, Err() = %v; want the lock still held", lerr)
	}
	// The second extend is sent after the delay is gone (it was, already,
	// when the first one timed out) and before the late PEXPIREs land.
	delayed.off()
	if err := l.Extend(ctx, lateTTL); err != nil {
		t.Logf("premise: a.Extend(%v) after the delay: %v", lateTTL, err)
		delayed.landed()
		return false
	}
	t.Logf("a.Extend(%v) succeeded; deadline in %v; the key on the nodes: %v", lateTTL, time.Until(l.Deadline()).Round(time.Millisecond), holders(t, r.admins, key, l.Token()))

	at := delayed.landed()
	t.Logf("the late PEXPIREs have landed; the key on the nodes: %v", holders(t, r.admins, key, l.Token()))
	if stolen := r.watchHeld(t, l, at); !stolen {
		if err := l.Release(ctx); err != nil {
			t.Errorf("a: Release: %v", err)
		}
	}
	return true
}

// watchHeld checks, every 20 ms for 2 s after at (or until a no longer
// believes it holds l), that a quorum of nodes keeps a's token at least
// until l's deadline, and that b cannot acquire l's key; it reports the
// first violation of each and whether b took the key.
func (r *lateRig) watchHeld(t *testing.T, l *redlock.Lock, at time.Time) (stolen bool) {
	t.Helper()
	key := l.Key()
	var short, stole string // the first violation of each kind
	for end := at.Add(2 * time.Second); time.Now().Before(end) && (short == "" || stole == ""); time.Sleep(20 * time.Millisecond) {
		if l.Err() != nil || !time.Now().Before(l.Deadline()) {
			// Not a violation: the property holds while a believes it
			// holds the lock, and it no longer does.
			t.Logf("%v after the late PEXPIREs landed, a no longer believes it holds the lock (Err %v, deadline in %v): nothing left to check",
				time.Since(at).Round(time.Millisecond), l.Err(), time.Until(l.Deadline()).Round(time.Millisecond))
			break
		}
		if short == "" {
			if good, seen := r.keptUntil(t, l); good < nodes/2+1 {
				short = fmt.Sprintf("%v after the late PEXPIREs landed, only %d nodes keep a's token until a's deadline (%v ahead), fewer than a quorum of %d: %s",
					time.Since(at).Round(time.Millisecond), good, time.Until(l.Deadline()).Round(time.Millisecond), nodes/2+1, strings.Join(seen, ", "))
			}
		}
		if stole == "" {
			lb, err := r.b.TryLock(r.ctx, key)
			if err != nil {
				if !errors.Is(err, redlock.ErrNotAcquired) {
					t.Errorf("b: TryLock: %v", err)
				}
				continue
			}
			if l.Err() == nil && time.Now().Before(l.Deadline()) {
				stole = fmt.Sprintf("%v after the late PEXPIREs landed, b acquired %q while a still holds it (Err nil, deadline %v ahead): two holders",
					time.Since(at).Round(time.Millisecond), key, time.Until(l.Deadline()).Round(time.Millisecond))
			}
			if err := lb.Release(r.ctx); err != nil {
				t.Errorf("b: Release: %v", err)
			}
		}
	}
	if short != "" {
		t.Error(short)
	}
	if stole != "" {
		t.Error(stole)
	}
	return stole != ""
}

// keptUntil counts the nodes whose copy of l's key holds l's token and
// expires no earlier than l's deadline: at or after the moment its PTTL was
// asked (Redis' 1 ms precision aside) plus the PTTL. It also describes
// every node's copy.
func (r *lateRig) keptUntil(t *testing.T, l *redlock.Lock) (good int, seen []string) {
	t.Helper()
	rk := rkey(l.Key())
	for i, cl := range r.admins {
		left := time.Until(l.Deadline()).Milliseconds()
		ms := pttl(t, cl, rk)
		ours := get(t, cl, rk) == l.Token()
		seen = append(seen, fmt.Sprintf("node%d PTTL %dms (a's token: %v)", i, ms, ours))
		if ours && ms+1 >= left {
			good++
		}
	}
	return good, seen
}

// TestLateSetOutlivesRelease (released lock stays on nodes): a SET of a won
// round that lands after the lock's Release must not keep the released
// token on its node for the TTL.
//
// A's TryLock has its SETs to nodes 0 and 1 delayed by the transient delay:
// it wins on the three fast nodes. 150 ms later A releases the lock, and
// Release returns nil. Then the delayed SETs land on nodes 0 and 1, where
// the key is free. Within 3 s after that, no node may hold A's token.
func TestLateSetOutlivesRelease(t *testing.T) {
	r := newLateRig(t)
	slow := []int{0, 1}
	lateAttempts(t, func(key string) bool {
		delayed, l, err := r.delayedTryLock(t, key, slow)
		if err != nil {
			t.Logf("premise: a.TryLock(%q) with nodes %v delayed: %v; want it to win on the three fast nodes", key, slow, err)
			delayed.landed()
			return false
		}
		for _, i := range slow {
			if v := get(t, r.admins[i], rkey(key)); v != "" {
				t.Fatalf("node%d holds %q right after TryLock returned: its SET was not delayed", i, v)
			}
		}
		time.Sleep(150 * time.Millisecond)
		if err := l.Release(r.ctx); err != nil {
			t.Logf("premise: a.Release 150 ms after TryLock: %v", err)
			delayed.landed()
			return false
		}
		t.Logf("released; the token on the nodes: %v", holders(t, r.admins, key, l.Token()))

		at := delayed.landed()
		t.Logf("the delayed SETs have landed; the token on the nodes: %v", holders(t, r.admins, key, l.Token()))
		for end := at.Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			left := holders(t, r.admins, key, l.Token())
			if len(left) == 0 {
				t.Logf("the released token was gone from every node %v after the delayed SETs landed", time.Since(at).Round(time.Millisecond))
				break
			}
			if time.Now().After(end) {
				t.Errorf("3 s after the delayed SETs landed, the token of the lock a released (Release returned nil) is still on %s: a released lock stays on the nodes for its TTL",
					strings.Join(left, ", "))
				break
			}
		}
		return true
	})
	r.closeAndCheck(t)
}

// TestLateSetAfterFailedRound (a failed round blocks the key): the SETs of a
// failed round that land after its roll-back must not keep the key blocked
// for the TTL.
//
// A's TryLock has its SETs to nodes 0, 1 and 2 delayed by the transient
// delay: only the two fast nodes say yes, and it fails, the slow ones timing
// out. Then the delayed SETs land on the three nodes, a majority. Within 3 s
// after that, the failed token must be gone from every node, and another
// client B's TryLock on the key must succeed.
func TestLateSetAfterFailedRound(t *testing.T) {
	r := newLateRig(t)
	slow := []int{0, 1, 2}
	lateAttempts(t, func(key string) bool {
		before := r.a.tokens.failed()
		delayed, _, err := r.delayedTryLock(t, key, slow)
		t.Logf("a.TryLock(%q) with nodes %v delayed: %v", key, slow, err)
		checkFailedRound(t, err, slow, redlock.OutcomeTimeout)
		var token string
		for tok := range r.a.tokens.failed() {
			if !before[tok] {
				token = tok
			}
		}
		if token == "" {
			t.Fatal("the failed round's token is not in a's token log")
		}
		at := delayed.landed()
		t.Logf("the delayed SETs have landed; the failed token on the nodes: %v", holders(t, r.admins, key, token))
		r.unblocked(t, key, token, at)
		return true
	})
	r.closeAndCheck(t)
}

// unblocked checks that, within 3 s after at, the failed round's token is
// gone from every node and b acquires key.
func (r *lateRig) unblocked(t *testing.T, key, token string, at time.Time) {
	t.Helper()
	var (
		won     bool
		lastErr error
	)
	for end := at.Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left := holders(t, r.admins, key, token)
		if !won {
			lb, err := r.b.TryLock(r.ctx, key)
			if err == nil {
				won = true
				t.Logf("b acquired %q %v after the delayed SETs landed", key, time.Since(at).Round(time.Millisecond))
				if err := lb.Release(r.ctx); err != nil {
					t.Errorf("b: Release: %v", err)
				}
			} else {
				lastErr = err
			}
		}
		if won && len(left) == 0 {
			return
		}
		if time.Now().After(end) {
			if len(left) > 0 {
				t.Errorf("3 s after the delayed SETs landed, the token of a's FAILED round is still on %s", strings.Join(left, ", "))
			}
			if !won {
				t.Errorf("3 s after the delayed SETs landed, b still cannot acquire %q: the failed round blocks the key; b's last TryLock: %v", key, lastErr)
			}
			return
		}
	}
}

// TestLateRenewalAfterRelease (issue 12): a batched renewal (ExtendMany)
// held by the proxies past its wait, so that its lock is released and taken
// by another client before it lands, must leave the new holder's key alone:
// its TTL stays the new holder's, and the old token reappears nowhere.
//
// A holds "k" with auto-extension every 300 ms (TTL 10 s). Every proxy holds
// what it reads for 3 s, for 350 ms: a renewal goes out meanwhile and waits
// for its answers until its bound (2 s), holding A's Extend/Release slot, so
// A's Release returns only after it, 2 s or more later, and is not delayed
// itself. B then takes "k" with a 5 s TTL; the late ExtendMany (PEXPIRE to
// 10 s) lands after that.
func TestLateRenewalAfterRelease(t *testing.T) {
	const hold, bTTL = 3 * time.Second, 5 * time.Second
	c := startCluster(t, lateTTL, "")
	admins := c.admins(t)
	ctx := ctxT(t, 90*time.Second)
	ps, via := c.proxyEach(t)
	a := c.newLockClient(t, "a", via, redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(lateNodeTimeout), redlock.WithRenewEvery(300*time.Millisecond))
	b := c.newLockClient(t, "b", c.direct, redlock.WithTTL(bTTL), redlock.WithNodeTimeout(patient))
	warm(t, ctx, a)
	warm(t, ctx, b)
	lateAttempts(t, func(key string) bool {
		l, err := a.TryLock(ctx, key, redlock.WithAutoExtend(true))
		if err != nil {
			t.Logf("premise: a.TryLock(%q): %v", key, err)
			return false
		}
		settle()
		on := time.Now()
		for _, p := range ps {
			p.SetLatency(hold)
		}
		time.Sleep(350 * time.Millisecond)
		for _, p := range ps {
			p.SetLatency(0)
		}
		start := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Logf("a.Release: %v", err)
		}
		releaseTook := time.Since(start)
		if releaseTook < time.Second {
			t.Logf("premise: a.Release took %v: no renewal was waiting on the held proxies", releaseTook)
			time.Sleep(time.Until(on.Add(hold + lateSlack)))
			return false
		}
		lb, err := b.TryLock(ctx, key)
		if err != nil {
			t.Logf("premise: b.TryLock after a's release: %v", err)
			time.Sleep(time.Until(on.Add(hold + lateSlack)))
			return false
		}
		defer func() { _ = lb.Release(ctx) }()
		if time.Now().After(on.Add(hold)) {
			t.Logf("premise: b acquired %v after the late commands were due", time.Since(on.Add(hold)))
			return false
		}
		time.Sleep(time.Until(on.Add(hold + lateSlack)))
		if h := holders(t, admins, key, l.Token()); len(h) != 0 {
			t.Errorf("a's released token came back on %v", h)
		}
		t.Logf("a's release took %v; b's key on the nodes after the late commands landed: %v", releaseTook, holders(t, admins, key, lb.Token()))
		for i, cl := range admins {
			if get(t, cl, rkey(key)) == lb.Token() {
				if ms := pttl(t, cl, rkey(key)); ms > bTTL.Milliseconds() {
					t.Errorf("node%d: b's key has PTTL %dms, above b's TTL %v: a's late renewal extended it", i, ms, bTTL)
				}
			}
		}
		return true
	})
}

// TestLateAttemptOfDepartedWaiter (a waiter comes back after it left): a
// Lock call waits for a key another client holds; its next attempt is held
// in the links (HoldWrite: the connection it is written on) and never
// answered, and the call gives up. It leaves the key's line on every node
// (in the background, on connections that are not held). Then the held
// attempts land: on each node they find the key taken and would put the waiter back in the line, where the next
// release would hand the key to a waiter that is gone, for a grace each
// time. They must not: the nodes keep the departed waiter out, and the
// holder's release leaves the key free for anyone at once.
func TestLateAttemptOfDepartedWaiter(t *testing.T) {
	const key = "late-line"
	c := startCluster(t, lateTTL, "")
	admins := c.admins(t)
	ctx := ctxT(t, 60*time.Second)
	ps, via := c.proxyEach(t)
	// The holder's timing is not under test: a node timeout that a loaded
	// machine cannot miss (its release once timed out on all 5 nodes at
	// the default 50 ms under make test's load).
	holder := c.newLockClient(t, "holder", c.direct, redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(time.Second))
	a := c.newLockClient(t, "a", via, redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(lateNodeTimeout),
		redlock.WithRetryBackoff(20*time.Millisecond, 40*time.Millisecond))
	warm(t, ctx, a)
	warm(t, ctx, holder)
	held, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// On every node: a node where the holder's acquire is still on its
	// way would give a's first attempt the key there, keeping a out of
	// that node's line.
	eventuallyAll(t, admins, key, held.Token())
	waitCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gaveUp := make(chan error, 1)
	go func() {
		_, err := a.Lock(waitCtx, key)
		gaveUp <- err
	}()
	var waiter string
	// Subscribed too: the subscription's connection set-up (HELLO, the
	// guard's INFO) must not be what the hold catches.
	eventually(t, 5*time.Second, 5*time.Millisecond, "a's waiter in the line of every node, and subscribed there", func() bool {
		for _, cl := range admins {
			w := waiters(t, ctx, cl, key)
			if len(w) != 1 || (waiter != "" && w[0] != waiter) {
				return false
			}
			waiter = w[0]
			if n, err := cl.PubSubNumSub(ctx, rkey(key)).Result(); err != nil || n[rkey(key)] == 0 {
				return false
			}
		}
		return true
	})
	for _, p := range ps {
		p.HoldWrite(rkey(key)) // an attempt, not a health check
	}
	eventually(t, 5*time.Second, 5*time.Millisecond, "a's next attempt held on every link", func() bool {
		return !slices.ContainsFunc(ps, func(p *testkit.Proxy) bool { return p.Held() == 0 })
	})
	giveUp()
	if err := <-gaveUp; !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("a.Lock after giving up: %v; want ErrNotAcquired", err)
	}
	eventually(t, 5*time.Second, 10*time.Millisecond, "a's waiter out of every node's line", func() bool {
		return !slices.ContainsFunc(admins, func(cl *redis.Client) bool { return len(waiters(t, ctx, cl, key)) != 0 })
	})
	heldAttemptsLand(t, ctx, admins, ps, key)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	handedToNobody(t, admins, key)
	b := c.newLockClient(t, "b", c.direct, redlock.WithTTL(lateTTL))
	l, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("another client's TryLock right after the release: %v", err)
	}
	_ = l.Release(ctx)
}

// waiters returns the waiters in key's line on the node of cl.
func waiters(t *testing.T, ctx context.Context, cl *redis.Client, key string) []string {
	t.Helper()
	w, err := cl.ZRange(ctx, rkey(key)+"\x1fq", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// heldAttemptsLand delivers what the proxies ps held, waits until each
// node ran it (a script call more), and checks that no node put the
// departed waiter back in key's line.
func heldAttemptsLand(t *testing.T, ctx context.Context, admins []*redis.Client, ps []*testkit.Proxy, key string) {
	t.Helper()
	before := make([]int64, len(admins))
	for i, cl := range admins {
		before[i] = scriptCalls(t, cl)
	}
	for i, p := range ps {
		if p.Deliver() == 0 {
			t.Fatalf("node%d: the held attempt was not delivered", i)
		}
	}
	eventually(t, 5*time.Second, 5*time.Millisecond, "the held attempts run", func() bool {
		for i, cl := range admins {
			if scriptCalls(t, cl) == before[i] {
				return false
			}
		}
		return true
	})
	for i, cl := range admins {
		if w := waiters(t, ctx, cl, key); len(w) != 0 {
			t.Errorf("node%d: the line holds %v after the departed waiter's held attempt landed; want it empty", i, w)
		}
	}
}

// handedToNobody waits until key is free on every node after its release,
// failing at once if a node hands it to a waiter. Release returns once a
// quorum released: the other nodes' deletes may still be on their way.
func handedToNobody(t *testing.T, admins []*redis.Client, key string) {
	t.Helper()
	eventually(t, 5*time.Second, 5*time.Millisecond, "the key free on every node after its release", func() bool {
		free := true
		for i, cl := range admins {
			switch v := get(t, cl, rkey(key)); {
			case strings.HasPrefix(v, "\x1e"):
				t.Fatalf("node%d: %q handed to %q after its release; want it handed to nobody", i, key, v[1:])
			case v != "":
				free = false
			}
		}
		return free
	})
}

// scriptCalls returns how many scripts the node has run (EVALSHA calls).
func scriptCalls(t *testing.T, cl *redis.Client) int64 {
	t.Helper()
	info, err := cl.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_evalsha:calls=")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
	return n
}
