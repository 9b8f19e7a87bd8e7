package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
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
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}
	holder := c.newLockClient(t, "holder", c.direct, opts...)
	other := c.newLockClient(t, "other", c.direct, opts...)
	warm(t, ctx, holder)
	warm(t, ctx, other)
	// Auto-extended, so that the lock survives however long a kill takes
	// on a loaded machine; the test extends it by hand as well.
	l, err := holder.TryLock(ctx, key, redlock.WithAutoExtend(true))
	if err != nil {
		t.Fatal(err)
	}
	heldByToken(t, admins, key, l.Token())

	stillHeld := func(phase string) {
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
	refused := func(phase string, dead []int) {
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

	var dead []int
	for _, i := range []int{4, 1} {
		if err := c.Node(i).Kill(); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, i)
		phase := fmt.Sprintf("nodes %v killed", dead)
		stillHeld(phase)
		refused(phase, dead)
	}

	// The holder keeps the lock past its TTL, renewing it, while the other
	// client waits.
	type result struct {
		l   *redlock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := other.Lock(ctx, key, redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
		got <- result{l, err, time.Now()}
	}()
	select {
	case r := <-got:
		t.Fatalf("the waiting client returned from Lock while the lock was held and renewed: %v", r.err)
	case <-l.Done():
		t.Fatalf("the lease ended with 2 nodes dead: %v", l.Err())
	case <-time.After(ttl + ttl/2):
	}
	stillHeld("renewed for 1.5 TTL with 2 nodes dead")
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
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}
	a := c.newLockClient(t, "a", c.direct, opts...)
	later := c.newLockClient(t, "later", c.direct, redlock.WithTTL(holdTTL), redlock.WithNodeTimeout(patient), redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	holder := c.newLockClient(t, "holder", c.direct, redlock.WithTTL(holdTTL), redlock.WithNodeTimeout(patient))
	for _, x := range []*lockClient{a, later, holder} {
		warm(t, ctx, x)
	}
	lh, err := holder.TryLock(ctx, heldKey)
	if err != nil {
		t.Fatal(err)
	}
	heldByToken(t, admins, heldKey, lh.Token())

	for _, i := range paused {
		if err := c.Node(i).Pause(); err != nil {
			t.Fatal(err)
		}
	}
	pausedAt := time.Now()

	start := time.Now()
	_, err = a.TryLock(ctx, key)
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

	// The held lock: no quorum can confirm it, but it is not lost either.
	d0 := lh.Deadline()
	err = lh.Extend(ctx, 0)
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

	// Stay frozen past the background roll-backs' bound.
	time.Sleep(time.Until(pausedAt.Add(ttl + 200*time.Millisecond)))
	for _, i := range paused {
		if err := c.Node(i).Resume(); err != nil {
			t.Fatal(err)
		}
	}
	resumed := time.Now()
	type result struct {
		l   *redlock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := later.Lock(ctx, key)
		got <- result{l, err, time.Now()}
	}()

	// What the queued commands left: keys of failed rounds, with a TTL no
	// longer than theirs; none may stay longer than that TTL.
	failed := a.tokens.failed()
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

	r := <-got
	if r.err != nil {
		t.Fatalf("Lock started at the resume: %v", r.err)
	}
	t.Logf("a client waiting from the resume got the lock %v after it", r.at.Sub(resumed).Round(time.Millisecond))
	if ok, err := r.l.Held(ctx); !ok || err != nil {
		t.Fatalf("Held of the later lock = %v, %v", ok, err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatalf("Release of the later lock: %v", err)
	}

	// The held lock works again.
	if err := lh.Extend(ctx, 0); err != nil {
		t.Fatalf("Extend of the held lock after the resume: %v", err)
	}
	if ok, err := lh.Held(ctx); !ok || err != nil {
		t.Fatalf("Held after the resume = %v, %v", ok, err)
	}
	if err := lh.Release(ctx); err != nil {
		t.Fatalf("Release after the resume: %v", err)
	}
	eventuallyGone(t, admins, heldKey)
	eventuallyGone(t, admins, key)
	a.closeAndCheck(t)
}

// lateCommandsAfterResume checks commands that reach a node long after
// they were sent (queued in a frozen node's socket, or held up on a frozen
// link): when they finally run, they must not create a lock that nobody
// holds for longer than its TTL, and must not disturb the lock of a later
// holder.
func lateCommandsAfterResume(t *testing.T, c *cluster) {
	const (
		ttl         = 600 * time.Millisecond // also bounds the background roll-backs
		laterTTL    = 3 * time.Second
		nodeTimeout = 200 * time.Millisecond
	)
	admins := c.admins(t)
	ctx := ctxT(t, 30*time.Second)
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}
	fp, viaFrozen := c.proxyEach(t)
	drainers := c.drainers(t, fp)
	holder := c.newLockClient(t, "holder", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(patient))
	frozen := c.newLockClient(t, "frozen", viaFrozen, opts...)
	later := c.newLockClient(t, "later", c.direct, redlock.WithTTL(laterTTL), redlock.WithNodeTimeout(patient),
		redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	for _, x := range []*lockClient{holder, frozen, later} {
		warm(t, ctx, x)
	}

	// Two nodes frozen while a holder acquires, extends and releases a
	// lock, and a later client takes it: everything they sent the frozen
	// nodes (on connections set up before) runs on resume, in some order.
	// The later lock must come through intact.
	t.Run("minority-paused-handoff", func(t *testing.T) {
		const key = "handoff"
		rk := rkey(key)
		frz := []int{3, 4}
		t.Cleanup(func() {
			for _, i := range frz {
				_ = c.Node(i).Resume()
			}
		})
		for _, i := range frz {
			if err := c.Node(i).Pause(); err != nil {
				t.Fatal(err)
			}
		}
		pausedAt := time.Now()
		lh, err := holder.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("holder: TryLock with 2 of 5 nodes paused: %v", err)
		}
		if err := lh.Extend(ctx, 0); err != nil {
			t.Fatalf("holder: Extend with 2 of 5 nodes paused: %v", err)
		}
		if err := lh.Release(ctx); err != nil {
			t.Fatalf("holder: Release with 2 of 5 nodes paused: %v", err)
		}
		lb, err := later.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("later: TryLock with 2 of 5 nodes paused: %v", err)
		}
		live := admins[:3]
		before := snapshot(t, live, rk)
		if on := checkIntact(t, live, before, lb.Token(), "nothing yet"); len(on) != 3 {
			t.Fatalf("later's token is on nodes %v, want 0 1 2", on)
		}
		time.Sleep(time.Until(pausedAt.Add(ttl + 200*time.Millisecond)))
		for _, i := range frz {
			if err := c.Node(i).Resume(); err != nil {
				t.Fatal(err)
			}
		}
		// Every copy on the resumed nodes is the holder's (with at most
		// its TTL: it must expire) or the later client's (at most its).
		check := func(when string) (holderOn, laterOn []int) {
			t.Helper()
			for _, i := range frz {
				switch v, ms := getTTL(t, admins[i], rk); {
				case v == "":
				case v == lh.Token() && ms >= 0 && ms <= ttl.Milliseconds():
					holderOn = append(holderOn, i)
				case v == lb.Token() && ms >= 0 && ms <= laterTTL.Milliseconds():
					laterOn = append(laterOn, i)
				default:
					t.Errorf("%s: node%d: %s = %q with PTTL %dms; want nothing, the released holder's token (PTTL ≤ %v) or the later one's (≤ %v)",
						when, i, rk, v, ms, ttl, laterTTL)
				}
			}
			return holderOn, laterOn
		}
		h, l := check("right after the resume")
		t.Logf("right after the resume: the released holder's token on %v, the later holder's on %v", h, l)
		gone := eventually(t, ttl+time.Second, 5*time.Millisecond, "released holder's copies gone", func() bool {
			h, _ := check("after the resume")
			return len(h) == 0
		})
		_, l = check("after the holder's copies went")
		t.Logf("the released holder's copies were gone %v after the resume; the later holder's token is on %v too", gone.Round(time.Millisecond), l)
		checkIntact(t, live, before, lb.Token(), "the late commands of the frozen nodes")
		if ok, err := lb.Held(ctx); !ok || err != nil {
			t.Fatalf("later: Held after the resume = %v, %v", ok, err)
		}
		if err := lb.Extend(ctx, 0); err != nil {
			t.Fatalf("later: Extend after the resume: %v", err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatalf("later: Release: %v", err)
		}
		eventuallyGone(t, admins, key)
	})

	// The frozen client's link to every node freezes (its proxies delay
	// everything by more than the TTL) right after it acquired: its Extend,
	// a new attempt and its Release all reach the nodes after its lock has
	// expired and the later client has taken the key, and must leave the
	// later client's copies as they were.
	t.Run("frozen-link", func(t *testing.T) {
		const (
			key   = "frozen-link"
			delay = ttl + 100*time.Millisecond // each way
		)
		rk := rkey(key)
		lf, err := frozen.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		heldByToken(t, admins, key, lf.Token())
		for _, p := range fp {
			p.SetLatency(delay)
		}
		defer func() {
			for _, p := range fp {
				p.SetLatency(0)
			}
		}()
		if err := lf.Extend(ctx, 0); !errors.Is(err, redlock.ErrNotHeld) {
			t.Errorf("frozen: Extend = %v, want ErrNotHeld (timeouts)", err)
		}
		start := time.Now()
		lb, err := later.Lock(ctx, key)
		acq := time.Now()
		if err != nil {
			t.Fatalf("later: Lock: %v", err)
		}
		if acq.Before(lf.Deadline()) {
			t.Fatalf("later acquired the key %v before the frozen holder's deadline", lf.Deadline().Sub(acq))
		}
		t.Logf("later waited %v for the frozen holder's lock to expire", acq.Sub(start).Round(time.Millisecond))
		// later holds a quorum; a node whose copy of the frozen holder's
		// key had not expired yet when later's round reached it said
		// "taken" and stays empty. Wait until no node holds the frozen
		// holder's token any more.
		var on []int
		eventually(t, 2*time.Second, 5*time.Millisecond, "the frozen holder's copies expired", func() bool {
			on = tokensOn(t, admins, rk, lb.Token())
			return len(tokensOn(t, admins, rk, lf.Token())) == 0
		})
		if len(on) < nodes/2+1 {
			t.Fatalf("later's token is on nodes %v, fewer than a quorum", on)
		}
		before := snapshot(t, admins, rk)
		if _, err := frozen.TryLock(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Errorf("frozen: TryLock = %v, want ErrNotAcquired", err)
		}
		if err := lf.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
			t.Errorf("frozen: Release = %v, want ErrNotHeld", err)
		}
		// Everything the frozen client sent has run once a PING sent
		// after it through the same proxies is answered.
		drain(t, drainers, 5*delay)
		checkIntact(t, admins, before, lb.Token(), "the frozen client's late commands")
		if ok, err := lb.Held(ctx); !ok || err != nil {
			t.Fatalf("later: Held = %v, %v", ok, err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatalf("later: Release: %v", err)
		}
		eventuallyGone(t, admins, key)
	})
}
