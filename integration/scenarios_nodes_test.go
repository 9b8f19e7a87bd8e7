package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

// TestNodeFaults runs the scenarios that freeze or kill nodes on one cluster
// (each starts its own clients, on keys of its own, and resumes what it
// paused): commands that run late after a resume, a paused majority, and a
// minority killed under a held lock, last, since its nodes stay dead.
//
// What a frozen node runs when it resumes is what reached its socket: the
// commands written on connections set up before the freeze. A client's
// commands to one node go out through one writer, one batch at a time; once
// a batch timed out, go-redis drops its connection, and a new one sends
// HELLO (and the restart guard's INFO) first and waits for the answer, so
// later commands stay in the client until their deadline.
func TestNodeFaults(t *testing.T) {
	c := startCluster(t, 5*time.Second, "")
	t.Run("late-commands-after-resume", func(t *testing.T) { lateCommandsAfterResume(t, c) })
	t.Run("paused-majority", func(t *testing.T) { pausedMajority(t, c) })
	t.Run("minority-killed-while-held", func(t *testing.T) { minorityKilledWhileHeld(t, c) })
}

// minorityKilledWhileHeld kills one, then a second node (SIGKILL) under a
// held lock: after each kill the holder still has it (Held true, Extend
// succeeds, its lease is not ended) and another client cannot take it
// (TryLock and Lock fail, Locked says true); the holder then keeps it,
// renewed, for longer than its TTL while the other client waits in Lock,
// which gets the lock only after the holder's Release.
func minorityKilledWhileHeld(t *testing.T, c *cluster) {
	const (
		ttl         = time.Second
		nodeTimeout = patient // killed nodes refuse at once
		key         = "held-while-killed"
	)
	admins := c.admins(t)
	ctx := ctxT(t, 30*time.Second)
	lcs := c.warmClients(t, ctx, []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}, "holder", "other")
	holder, other := lcs[0], lcs[1]
	// Auto-extended, so that the lock survives however long a kill takes
	// on a loaded machine; the test extends it by hand as well.
	l, err := holder.TryLock(ctx, key, redlock.WithAutoExtend(true))
	if err != nil {
		t.Fatal(err)
	}
	eventuallyAll(t, admins, key, l.Token())

	var dead []int
	for _, i := range []int{4, 1} {
		if err := c.Node(i).Kill(); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, i)
		phase := fmt.Sprintf("nodes %v killed", dead)
		leaseHeld(t, ctx, l, phase)
		heldAgainst(t, ctx, other, key, phase, dead)
	}

	// The holder keeps the lock past its TTL, renewing it, while the other
	// client waits.
	got := lockAsync(ctx, other, key, redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	select {
	case r := <-got:
		t.Fatalf("the waiting client returned from Lock while the lock was held and renewed: %v", r.err)
	case <-l.Done():
		t.Fatalf("the lease ended with 2 nodes dead: %v", l.Err())
	case <-time.After(ttl + ttl/2):
	}
	leaseHeld(t, ctx, l, "renewed for 1.5 TTL with 2 nodes dead")
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with 2 nodes dead: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiting Lock after the Release: %v", r.err)
	}
	if r.at.Before(released) {
		t.Fatalf("the waiter acquired %v before the holder's Release", released.Sub(r.at))
	}
	live := []int{0, 2, 3}
	c.mustHoldAll(t, admins, live, key, r.l.Token(), 0, ttl.Milliseconds())
	if err := r.l.Release(ctx); err != nil {
		t.Fatalf("Release of the waiter's lock: %v", err)
	}
}

// leaseHeld fails the test unless the auto-extended lock l is held, can be
// extended, and its lease has not ended.
func leaseHeld(t *testing.T, ctx context.Context, l *redlock.Lock, phase string) {
	t.Helper()
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Fatalf("%s: Held = %v, %v; want true", phase, ok, err)
	}
	if err := l.Extend(ctx, 0); err != nil {
		t.Fatalf("%s: Extend: %v", phase, err)
	}
	select {
	case <-l.Done():
		t.Fatalf("%s: the lease ended: %v", phase, l.Err())
	default:
	}
}

// heldAgainst fails the test unless other cannot take the held key: TryLock
// fails with no node agreeing and no dead node answering, Lock gives up
// within a short budget, and Locked says the key is held.
func heldAgainst(t *testing.T, ctx context.Context, other *lockClient, key, phase string, dead []int) {
	t.Helper()
	_, err := other.TryLock(ctx, key)
	qe := checkFailedRound(t, err, nil)
	if qe.Agreed() != 0 {
		t.Errorf("%s: %d nodes agreed to a held lock: %v", phase, qe.Agreed(), err)
	}
	for i, r := range qe.Nodes {
		if r.Outcome == redlock.OutcomeTaken && slices.Contains(dead, i) {
			t.Errorf("%s: dead node%d answered: %v", phase, i, err)
		}
	}
	if _, err := other.Lock(ctx, key, redlock.WithMaxWait(200*time.Millisecond)); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Errorf("%s: Lock with a 200ms budget = %v, want ErrNotAcquired", phase, err)
	}
	if locked, err := other.Locked(ctx, key); !locked || err != nil {
		t.Errorf("%s: Locked = %v, %v; want true", phase, locked, err)
	}
}

// pausedMajority freezes three of five nodes (SIGSTOP or docker pause):
// TryLock and Lock fail, within the bounds the API states (the context's
// deadline, the wait budget), with the frozen nodes timing out; a lock held
// from before cannot be extended but is not declared lost; nothing can be
// decided. The nodes stay frozen longer than the background roll-back of the
// failed rounds waits, so the SETs queued in their sockets run on resume
// with nothing left to undo them: the test checks that those keys carry
// their TTL, that they are gone within it, that a client waiting from the
// resume gets the lock, and that the held lock works again.
func pausedMajority(t *testing.T, c *cluster) {
	const (
		// Short, so that the background roll-back, bounded by
		// min(TTL, max(10 × node timeout, 1 s)), gives up quickly.
		ttl         = 600 * time.Millisecond
		holdTTL     = 5 * time.Second
		nodeTimeout = 200 * time.Millisecond
		key         = "paused-majority"
		heldKey     = "held-across-pause"
	)
	admins := c.admins(t)
	paused := []int{0, 2, 4}
	t.Cleanup(func() { // before the cluster's checks
		for _, i := range paused {
			_ = c.Node(i).Resume()
		}
	})
	ctx := ctxT(t, 30*time.Second)
	a := c.newLockClient(t, "a", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout))
	later := c.newLockClient(t, "later", c.direct, redlock.WithTTL(holdTTL), redlock.WithNodeTimeout(patient), redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	holder := c.newLockClient(t, "holder", c.direct, redlock.WithTTL(holdTTL), redlock.WithNodeTimeout(patient))
	for _, x := range []*lockClient{a, later, holder} {
		warm(t, ctx, x)
	}
	lh, err := holder.TryLock(ctx, heldKey)
	if err != nil {
		t.Fatal(err)
	}
	eventuallyAll(t, admins, heldKey, lh.Token())

	for _, i := range paused {
		if err := c.Node(i).Pause(); err != nil {
			t.Fatal(err)
		}
	}
	pausedAt := time.Now()
	acquisitionsFail(t, ctx, a, key, paused)
	nothingDecided(t, ctx, lh, later, key, paused, nodeTimeout)

	// Stay frozen past the background roll-backs' bound.
	time.Sleep(time.Until(pausedAt.Add(ttl + 200*time.Millisecond)))
	for _, i := range paused {
		if err := c.Node(i).Resume(); err != nil {
			t.Fatal(err)
		}
	}
	resumed := time.Now()
	got := lockAsync(ctx, later, key)
	failedKeysExpire(t, admins, a.tokens.failed(), key, ttl)
	r := <-got
	if r.err != nil {
		t.Fatalf("Lock started at the resume: %v", r.err)
	}
	t.Logf("a client waiting from the resume got the lock %v after it", r.at.Sub(resumed).Round(time.Millisecond))
	heldAndReleased(t, ctx, "later", r.l)
	heldAndReleased(t, ctx, "holder after the resume", lh) // the held lock works again
	eventuallyGone(t, admins, heldKey)
	eventuallyGone(t, admins, key)
	a.closeAndCheck(t)
}

// acquisitionsFail checks that a's TryLock and Lock of key fail with the
// nodes paused timing out, within the bounds the API states: the
// context's deadline, the wait budget (which must not claim that the
// caller's context ended).
func acquisitionsFail(t *testing.T, ctx context.Context, a *lockClient, key string, paused []int) {
	t.Helper()
	start := time.Now()
	_, err := a.TryLock(ctx, key)
	t.Logf("TryLock with nodes %v paused failed after %v: %v", paused, time.Since(start).Round(time.Microsecond), err)
	checkFailedRound(t, err, paused, redlock.OutcomeTimeout)

	const budget = 300 * time.Millisecond
	lctx, cancel := context.WithTimeout(ctx, budget)
	start = time.Now()
	_, err = a.Lock(lctx, key)
	cancel()
	t.Logf("Lock with a %v context returned after %v", budget, time.Since(start).Round(time.Microsecond))
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with an expiring context = %v; want ErrNotAcquired and context.DeadlineExceeded", err)
	}
	checkFailedRound(t, err, paused, redlock.OutcomeTimeout)

	start = time.Now()
	_, err = a.Lock(ctx, key, redlock.WithMaxWait(budget))
	t.Logf("Lock with WithMaxWait(%v) returned after %v", budget, time.Since(start).Round(time.Microsecond))
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("Lock with its wait budget spent = %v: it must not claim that the caller's context ended", err)
	}
	checkFailedRound(t, err, paused, redlock.OutcomeTimeout)
}

// nothingDecided checks the lock lh held from before the pause: no quorum
// can confirm it (Extend fails with ErrNotHeld, the paused nodes timing
// out, and moves no deadline; Held fails), but it is not lost either; and
// Locked cannot tell whether key is held.
func nothingDecided(t *testing.T, ctx context.Context, lh *redlock.Lock, later *lockClient, key string, paused []int, nodeTimeout time.Duration) {
	t.Helper()
	d0 := lh.Deadline()
	err := lh.Extend(ctx, 0)
	if !errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("Extend with 3 of 5 nodes paused = %v; want ErrNotHeld (too few nodes), not ErrLockLost", err)
	} else {
		for _, i := range paused {
			if o := asQuorumError(t, err).Nodes[i].Outcome; o != redlock.OutcomeTimeout {
				t.Errorf("Extend: paused node%d: outcome %v, want timeout", i, o)
			}
		}
	}
	if d := lh.Deadline(); d.After(d0) || lh.Err() != nil {
		t.Errorf("after the failed Extend: deadline moved %v later, Err %v; want not later, nil", d.Sub(d0), lh.Err())
	}
	if ok, err := lh.Held(ctx); ok || !errors.As(err, new(*redlock.QuorumError)) {
		t.Errorf("Held with 3 of 5 nodes paused = %v, %v; want false and a *QuorumError", ok, err)
	}
	if locked, err := later.Locked(ctx, key, redlock.WithNodeTimeout(nodeTimeout)); locked || !errors.As(err, new(*redlock.QuorumError)) {
		t.Errorf("Locked with 3 of 5 nodes paused = %v, %v; want false and a *QuorumError", locked, err)
	}
}

// failedKeysExpire checks what the commands queued in the paused nodes'
// sockets left of key after the resume: keys of failed rounds (tokens
// failed), each with a TTL no longer than theirs (ttl), all gone within it.
func failedKeysExpire(t *testing.T, admins []*redis.Client, failed map[string]bool, key string, ttl time.Duration) {
	t.Helper()
	for v, on := range valuesOn(t, admins, rkey(key)) {
		if !failed[v] {
			continue
		}
		for _, i := range on {
			switch w, ms := getTTL(t, admins[i], rkey(key)); {
			case w != v:
				// released or expired since valuesOn looked
			case ms < 0 || ms > ttl.Milliseconds():
				t.Errorf("node%d: a failed round's key has PTTL %dms after the resume, want within the TTL %v", i, ms, ttl)
			}
		}
		if len(on) >= nodes/2+1 {
			t.Logf("after the resume, the failed round's token %s is on nodes %v, a quorum: the key stays locked, held by nobody, until it expires", v, on)
		} else {
			t.Logf("after the resume, the failed round's token %s is on nodes %v", v, on)
		}
	}
	gone := eventually(t, ttl+time.Second, 5*time.Millisecond, "failed rounds' keys gone after the resume", func() bool {
		return len(tokensIn(t, admins, rkey(key), failed)) == 0
	})
	t.Logf("the failed rounds' keys were gone %v after the resume", gone.Round(time.Millisecond))
}

// lateCommandsAfterResume checks commands that reach a node long after
// they were sent (queued in a frozen node's socket, or held up on a frozen
// link): when they finally run, they must not create a lock that nobody
// holds for longer than its TTL, and must not disturb the lock of a later
// holder.
func lateCommandsAfterResume(t *testing.T, c *cluster) {
	ctx := ctxT(t, 30*time.Second)
	rt := &resumeTest{c: c, ctx: ctx, admins: c.admins(t)}
	rt.holder = c.newLockClient(t, "holder", c.direct, redlock.WithTTL(resumeTTL), redlock.WithNodeTimeout(patient))
	warm(t, ctx, rt.holder)
	rt.frozen, rt.fp, rt.drainers = c.proxied(t, ctx, "frozen", redlock.WithTTL(resumeTTL), redlock.WithNodeTimeout(200*time.Millisecond))
	rt.later = c.newLockClient(t, "later", c.direct, redlock.WithTTL(resumeLaterTTL), redlock.WithNodeTimeout(patient),
		redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	warm(t, ctx, rt.later)
	t.Run("minority-paused-handoff", rt.minorityPausedHandoff)
	t.Run("frozen-link", rt.frozenLink)
}

// The TTLs of lateCommandsAfterResume: the holders' (which also bounds the
// background roll-backs) and the later client's.
const (
	resumeTTL      = 600 * time.Millisecond
	resumeLaterTTL = 3 * time.Second
)

// resumeTest is what lateCommandsAfterResume's scenarios share: a holder
// connected directly, the frozen client whose links pass through proxies
// (fp, with their drainers), and the later client, connected directly.
type resumeTest struct {
	c                     *cluster
	ctx                   context.Context
	admins                []*redis.Client
	holder, frozen, later *lockClient
	fp                    []*testkit.Proxy
	drainers              []*redis.Client
}

// minorityPausedHandoff: two nodes frozen while a holder acquires, extends
// and releases a lock, and a later client takes it: everything they sent
// the frozen nodes (on connections set up before) runs on resume, in some
// order. The later lock must come through intact.
func (rt *resumeTest) minorityPausedHandoff(t *testing.T) {
	const key = "handoff"
	ctx, admins := rt.ctx, rt.admins
	frz := []int{3, 4}
	t.Cleanup(func() {
		for _, i := range frz {
			_ = rt.c.Node(i).Resume()
		}
	})
	for _, i := range frz {
		if err := rt.c.Node(i).Pause(); err != nil {
			t.Fatal(err)
		}
	}
	pausedAt := time.Now()
	lh, err := rt.holder.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("holder: TryLock with 2 of 5 nodes paused: %v", err)
	}
	if err := lh.Extend(ctx, 0); err != nil {
		t.Fatalf("holder: Extend with 2 of 5 nodes paused: %v", err)
	}
	if err := lh.Release(ctx); err != nil {
		t.Fatalf("holder: Release with 2 of 5 nodes paused: %v", err)
	}
	lb, err := rt.later.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("later: TryLock with 2 of 5 nodes paused: %v", err)
	}
	live := admins[:3]
	before := snapshot(t, live, rkey(key))
	if on := checkIntact(t, live, before, lb.Token(), "nothing yet"); len(on) != 3 {
		t.Fatalf("later's token is on nodes %v, want 0 1 2", on)
	}
	time.Sleep(time.Until(pausedAt.Add(resumeTTL + 200*time.Millisecond)))
	for _, i := range frz {
		if err := rt.c.Node(i).Resume(); err != nil {
			t.Fatal(err)
		}
	}
	h, l := rt.resumedCopies(t, "right after the resume", frz, key, lh.Token(), lb.Token())
	t.Logf("right after the resume: the released holder's token on %v, the later holder's on %v", h, l)
	gone := eventually(t, resumeTTL+time.Second, 5*time.Millisecond, "released holder's copies gone", func() bool {
		h, _ := rt.resumedCopies(t, "after the resume", frz, key, lh.Token(), lb.Token())
		return len(h) == 0
	})
	_, l = rt.resumedCopies(t, "after the holder's copies went", frz, key, lh.Token(), lb.Token())
	t.Logf("the released holder's copies were gone %v after the resume; the later holder's token is on %v too", gone.Round(time.Millisecond), l)
	checkIntact(t, live, before, lb.Token(), "the late commands of the frozen nodes")
	heldAndReleased(t, ctx, "later, after the resume", lb)
	eventuallyGone(t, admins, key)
}

// resumedCopies checks that every copy of key on the resumed nodes frz is
// the released holder's (with at most its TTL: it must expire) or the later
// client's (at most its), and returns the nodes that hold each.
func (rt *resumeTest) resumedCopies(t *testing.T, when string, frz []int, key, holderTok, laterTok string) (holderOn, laterOn []int) {
	t.Helper()
	rk := rkey(key)
	for _, i := range frz {
		switch v, ms := getTTL(t, rt.admins[i], rk); {
		case v == "":
		case v == holderTok && ms >= 0 && ms <= resumeTTL.Milliseconds():
			holderOn = append(holderOn, i)
		case v == laterTok && ms >= 0 && ms <= resumeLaterTTL.Milliseconds():
			laterOn = append(laterOn, i)
		default:
			t.Errorf("%s: node%d: %s = %q with PTTL %dms; want nothing, the released holder's token (PTTL ≤ %v) or the later one's (≤ %v)",
				when, i, rk, v, ms, resumeTTL, resumeLaterTTL)
		}
	}
	return holderOn, laterOn
}

// frozenLink: the frozen client's link to every node freezes (its proxies
// delay everything by more than the TTL) right after it acquired: its
// Extend, a new attempt and its Release all reach the nodes after its lock
// has expired and the later client has taken the key, and must leave the
// later client's copies as they were.
func (rt *resumeTest) frozenLink(t *testing.T) {
	const (
		key   = "frozen-link"
		delay = resumeTTL + 100*time.Millisecond // each way
	)
	ctx, admins, rk := rt.ctx, rt.admins, rkey(key)
	lf, err := rt.frozen.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	eventuallyAll(t, admins, key, lf.Token())
	for _, p := range rt.fp {
		p.SetLatency(delay)
	}
	defer func() {
		for _, p := range rt.fp {
			p.SetLatency(0)
		}
	}()
	if err := lf.Extend(ctx, 0); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("frozen: Extend = %v, want ErrNotHeld (timeouts)", err)
	}
	start := time.Now()
	lb, err := rt.later.Lock(ctx, key)
	acq := time.Now()
	if err != nil {
		t.Fatalf("later: Lock: %v", err)
	}
	if acq.Before(lf.Deadline()) {
		t.Fatalf("later acquired the key %v before the frozen holder's deadline", lf.Deadline().Sub(acq))
	}
	t.Logf("later waited %v for the frozen holder's lock to expire", acq.Sub(start).Round(time.Millisecond))
	// later holds a quorum; wait until the frozen holder's copies expired.
	soleHolder(t, admins, key, lb.Token())
	before := snapshot(t, admins, rk)
	if _, err := rt.frozen.TryLock(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Errorf("frozen: TryLock = %v, want ErrNotAcquired", err)
	}
	if err := lf.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("frozen: Release = %v, want ErrNotHeld", err)
	}
	// Everything the frozen client sent has run once a PING sent after it
	// through the same proxies is answered.
	drain(t, rt.drainers, 5*delay)
	checkIntact(t, admins, before, lb.Token(), "the frozen client's late commands")
	heldAndReleased(t, ctx, "later", lb)
	eventuallyGone(t, admins, key)
}
