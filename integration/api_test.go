package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestOperations runs every public operation of a Client and a Lock against
// five real servers and checks what they did on every node.
func TestOperations(t *testing.T) {
	const (
		ttl       = 3 * time.Second
		longTTL   = 20 * time.Second
		nodeLimit = 200 * time.Millisecond
	)
	c := startCluster(t, longTTL, "")
	admins := c.admins(t)
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeLimit)}
	a := c.newLockClient(t, "a", c.direct, opts...)
	b := c.newLockClient(t, "b", c.direct, opts...)
	ctx := ctxT(t, 30*time.Second)

	t.Run("TryLock", func(t *testing.T) {
		key := "op-trylock"
		start := time.Now()
		l, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("TryLock on a free key: %v", err)
		}
		ret := time.Now()
		if l.Key() != key || l.Token() == "" {
			t.Fatalf("Key() = %q, Token() = %q", l.Key(), l.Token())
		}
		checkDeadline(t, l, start, ret, ttl, 0, admins, nil)
		// The token is on every node (all five answer quickly; give late
		// "yes" replies time to land before looking), with the TTL.
		eventually(t, 5*time.Second, 5*time.Millisecond, "token on all five nodes", func() bool {
			for _, cl := range admins {
				if get(t, cl, rkey(key)) != l.Token() {
					return false
				}
			}
			return true
		})
		c.mustHoldAll(t, admins, all(), key, l.Token(), 0, ttl.Milliseconds())
		checkDeadline(t, l, start, ret, ttl, 0, admins, all())

		// Another client cannot take it; the error says who refused.
		_, err = b.TryLock(ctx, key)
		qe := checkFailedRound(t, err, nil)
		if qe.Op != "acquire" || qe.Key != key || qe.Quorum != 3 || qe.Agreed() != 0 {
			t.Fatalf("QuorumError %+v: want op acquire, key %q, quorum 3, nobody agreeing", qe, key)
		}
		taken := 0
		for _, r := range qe.Nodes {
			if r.Outcome == redlock.OutcomeTaken {
				taken++
			}
		}
		if taken < 3 || !strings.Contains(err.Error(), "taken") {
			t.Fatalf("%d nodes reported taken, want at least 3: %v", taken, err)
		}
		// The holder's token is untouched everywhere.
		c.mustHoldAll(t, admins, all(), key, l.Token(), 0, ttl.Milliseconds())

		// Held and Locked see it.
		if held, err := l.Held(ctx); !held || err != nil {
			t.Fatalf("Held = %v, %v; want true", held, err)
		}
		if locked, err := b.Locked(ctx, key); !locked || err != nil {
			t.Fatalf("Locked (other client) = %v, %v; want true", locked, err)
		}
		if locked, err := b.Locked(ctx, "op-never-locked"); locked || err != nil {
			t.Fatalf("Locked on a free key = %v, %v; want false, nil", locked, err)
		}

		// Release deletes it from every node; the handle is then spent.
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		eventuallyGone(t, admins, key)
		if held, err := l.Held(ctx); held || err != nil {
			t.Fatalf("Held after Release = %v, %v; want false, nil", held, err)
		}
		if locked, err := b.Locked(ctx, key); locked || err != nil {
			t.Fatalf("Locked after Release = %v, %v; want false, nil", locked, err)
		}
		if err := l.Release(ctx); !errors.Is(err, redlock.ErrReleased) {
			t.Fatalf("second Release = %v, want ErrReleased", err)
		}
		if err := l.Extend(ctx, 0); !errors.Is(err, redlock.ErrReleased) {
			t.Fatalf("Extend after Release = %v, want ErrReleased", err)
		}
		// And the other client gets it now.
		l2, err := b.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("TryLock after Release: %v", err)
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	})

	t.Run("LockWaitsForRelease", func(t *testing.T) {
		key := "op-lock-waits"
		holder, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		w := c.newLockClient(t, "waiter", c.direct, opts...)
		type result struct {
			l   *redlock.Lock
			err error
			at  time.Time
		}
		done := make(chan result, 1)
		go func() {
			l, err := w.Lock(ctx, key, redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
			done <- result{l, err, time.Now()}
		}()
		// The waiter is waiting once it has failed a few rounds.
		eventually(t, 10*time.Second, 2*time.Millisecond, "waiter retried 3 times", func() bool {
			return w.tokens.attempts() >= 3
		})
		select {
		case r := <-done:
			t.Fatalf("Lock returned while the lock was held: %v, %v", r.l, r.err)
		default:
		}
		released := time.Now()
		if err := holder.Release(ctx); err != nil {
			t.Fatalf("holder Release: %v", err)
		}
		var r result
		select {
		case r = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Lock did not return within 10s of the holder's Release")
		}
		if r.err != nil {
			t.Fatalf("waiting Lock: %v", r.err)
		}
		if !r.at.After(released) {
			t.Fatalf("waiter acquired at %v, before the holder released at %v", r.at, released)
		}
		t.Logf("waiter acquired %v after the release call, after %d rounds", r.at.Sub(released), w.tokens.attempts())
		if held, err := r.l.Held(ctx); !held || err != nil {
			t.Fatalf("waiter Held = %v, %v", held, err)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatalf("waiter Release: %v", err)
		}
		w.closeAndCheck(t)
	})

	t.Run("LockGivesUp", func(t *testing.T) {
		key := "op-lock-gives-up"
		holder, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Release(ctx)
		const wait = 300 * time.Millisecond
		start := time.Now()
		_, err = b.Lock(ctx, key, redlock.WithMaxWait(wait), redlock.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))
		el := time.Since(start)
		checkFailedRound(t, err, nil)
		if el > wait+10*nodeLimit {
			t.Fatalf("Lock with WithMaxWait(%v) returned after %v", wait, el)
		}
		// A cancelled context ends the wait with an error matching both.
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err = b.Lock(cctx, key)
		if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock with an expiring ctx = %v; want ErrNotAcquired and DeadlineExceeded", err)
		}
	})

	t.Run("Extend", func(t *testing.T) {
		key := "op-extend"
		l, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, 5*time.Millisecond, "token on all five nodes", func() bool {
			for _, cl := range admins {
				if get(t, cl, rkey(key)) != l.Token() {
					return false
				}
			}
			return true
		})
		before := l.Deadline()
		start := time.Now()
		if err := l.Extend(ctx, longTTL); err != nil {
			t.Fatalf("Extend(%v): %v", longTTL, err)
		}
		longAllow := drift.Allowance(longTTL, drift.DefaultFactor)
		if d := l.Deadline(); !d.After(before) || d.Before(start) || d.After(time.Now().Add(longTTL-longAllow)) {
			t.Fatalf("Deadline after Extend(%v) is %v from the call, was %v", longTTL, d.Sub(start), before.Sub(start))
		}
		// The server TTL really changed, on every node that answered in
		// time; Extend waits only for a quorum, so poll for the others.
		eventually(t, 5*time.Second, 5*time.Millisecond, "PTTL raised on all nodes", func() bool {
			for _, cl := range admins {
				if pttl(t, cl, rkey(key)) <= ttl.Milliseconds() {
					return false
				}
			}
			return true
		})
		c.mustHoldAll(t, admins, all(), key, l.Token(), ttl.Milliseconds(), longTTL.Milliseconds())

		// Extend(0) goes back to the lock's own TTL: the local deadline
		// moves earlier, but an extend never shortens a key on a node (a
		// late one must not cut a later, longer one short), so the keys
		// keep the longer TTL, which is never below the new deadline.
		start = time.Now()
		if err := l.Extend(ctx, 0); err != nil {
			t.Fatalf("Extend(0): %v", err)
		}
		if d := l.Deadline(); d.Before(start) || d.After(time.Now().Add(ttl)) {
			t.Fatalf("Deadline after Extend(0) is %v from the call, want within the lock's TTL %v", d.Sub(start), ttl)
		}
		c.mustHoldAll(t, admins, all(), key, l.Token(), time.Until(l.Deadline()).Milliseconds(), longTTL.Milliseconds())
		if held, err := l.Held(ctx); !held || err != nil {
			t.Fatalf("Held after Extend = %v, %v", held, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		// Extend never re-creates a key: the spent handle refuses, and no
		// node has the key.
		if err := l.Extend(ctx, 0); !errors.Is(err, redlock.ErrReleased) {
			t.Fatalf("Extend after Release = %v, want ErrReleased", err)
		}
		eventuallyGone(t, admins, key)
	})

	t.Run("CloseReleasesHeldLocks", func(t *testing.T) {
		x := c.newLockClient(t, "closer", c.direct, opts...)
		var locks []*redlock.Lock
		for _, key := range []string{"op-close-1", "op-close-2"} {
			l, err := x.TryLock(ctx, key)
			if err != nil {
				t.Fatalf("TryLock %s: %v", key, err)
			}
			locks = append(locks, l)
		}
		if err := x.Close(); err != nil {
			t.Fatalf("Close with two held locks: %v", err)
		}
		// Close waited for every release it started, stragglers included.
		for _, l := range locks {
			for i, cl := range admins {
				if v := get(t, cl, rkey(l.Key())); v != "" {
					t.Errorf("node%d still holds %s = %q after Close returned", i, rkey(l.Key()), v)
				}
			}
			if err := l.Release(ctx); !errors.Is(err, redlock.ErrReleased) && !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("Release after Close = %v, want ErrReleased or ErrClosed", err)
			}
		}
		if err := x.Close(); !errors.Is(err, redlock.ErrClosed) {
			t.Errorf("second Close = %v, want ErrClosed", err)
		}
		for name, op := range map[string]func() error{
			"TryLock": func() error { _, err := x.TryLock(ctx, "op-close-3"); return err },
			"Lock":    func() error { _, err := x.Lock(ctx, "op-close-3"); return err },
			"Locked":  func() error { _, err := x.Locked(ctx, "op-close-3"); return err },
		} {
			if err := op(); !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("%s after Close = %v, want ErrClosed", name, err)
			}
		}
		x.closeAndCheck(t)
	})

	t.Run("BadInput", func(t *testing.T) {
		// Bad input is refused before any I/O and is not ErrNotAcquired.
		if _, err := a.TryLock(ctx, ""); err == nil || errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("TryLock(\"\") = %v", err)
		}
		if _, err := a.TryLock(ctx, "op-bad", redlock.WithTTL(100*time.Millisecond), redlock.WithNodeTimeout(time.Second)); err == nil || errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("TryLock with TTL below the node timeout = %v", err)
		}
		for i, cl := range admins {
			if v := get(t, cl, rkey("op-bad")); v != "" {
				t.Errorf("node%d holds %q after refused calls", i, v)
			}
		}
	})
}

// TestExpiry lets a short lock expire on the servers and checks that the
// key disappears no earlier than the client's deadline, that the lock can
// then be taken by another client, and that the old handle can neither
// extend nor release the new holder's lock.
func TestExpiry(t *testing.T) {
	const (
		ttl       = 300 * time.Millisecond
		nodeLimit = 100 * time.Millisecond
		otherTTL  = 5 * time.Second
	)
	c := startCluster(t, otherTTL, "")
	admins := c.admins(t)
	a := c.newLockClient(t, "a", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeLimit))
	b := c.newLockClient(t, "b", c.direct, redlock.WithTTL(otherTTL), redlock.WithNodeTimeout(nodeLimit))
	ctx := ctxT(t, 30*time.Second)
	key := "expiry"

	start := time.Now()
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	checkDeadline(t, l, start, time.Now(), ttl, 0, admins, nil)
	var freeAt time.Time
	took := eventually(t, 10*time.Second, 5*time.Millisecond, "Locked turns false after expiry", func() bool {
		locked, err := b.Locked(ctx, key)
		if err != nil {
			t.Fatalf("Locked: %v", err)
		}
		freeAt = time.Now()
		return !locked
	})
	t.Logf("lock with TTL %v seen free %v after the call that acquired it", ttl, took)
	// The servers' expiry is never earlier than the client's deadline:
	// the drift allowance keeps the client on the safe side.
	if freeAt.Before(l.Deadline()) {
		t.Fatalf("the key was gone %v before the lock's deadline", l.Deadline().Sub(freeAt))
	}
	if held, err := l.Held(ctx); held || err != nil {
		t.Fatalf("Held after expiry = %v, %v; want false, nil", held, err)
	}
	if err := l.Extend(ctx, 0); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after expiry = %v, want ErrLockLost", err)
	}

	// Another client takes it; the old handle must not touch it.
	l2, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after expiry: %v", err)
	}
	// The nodes b took: a quorum, though not always all five (a node whose
	// copy of the old key expired a little later told b "taken").
	var holding []int
	for i, cl := range admins {
		if get(t, cl, rkey(key)) == l2.Token() {
			holding = append(holding, i)
		}
	}
	if len(holding) < 3 {
		t.Fatalf("the new token is on nodes %v only; want a quorum", holding)
	}
	err = l.Release(ctx)
	if !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("Release of the expired handle = %v, want ErrNotHeld", err)
	}
	qe := asQuorumError(t, err)
	if qe.Agreed() != 0 {
		t.Fatalf("Release of the expired handle: %d nodes confirmed: %v", qe.Agreed(), err)
	}
	c.mustHoldAll(t, admins, holding, key, l2.Token(), ttl.Milliseconds(), otherTTL.Milliseconds())
	if err := l.Extend(ctx, 0); !errors.Is(err, redlock.ErrReleased) && !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend of the expired handle = %v", err)
	}
	c.mustHoldAll(t, admins, holding, key, l2.Token(), ttl.Milliseconds(), otherTTL.Milliseconds())
	if err := l2.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestScriptFlush empties the servers' script caches between acquire and
// Extend, and between Extend and Release: the scripts are sent again (EVAL
// after NOSCRIPT) and nothing fails.
func TestScriptFlush(t *testing.T) {
	const ttl = 3 * time.Second
	c := startCluster(t, ttl, "")
	admins := c.admins(t)
	a := c.newLockClient(t, "a", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(200*time.Millisecond))
	ctx := ctxT(t, 30*time.Second)
	flush := func() {
		for i, cl := range admins {
			if err := cl.ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH node%d: %v", i, err)
			}
		}
	}
	for round := range 3 {
		key := "script-flush"
		l, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("round %d: TryLock: %v", round, err)
		}
		flush()
		if err := l.Extend(ctx, 2*ttl/3); err != nil {
			t.Fatalf("round %d: Extend after SCRIPT FLUSH: %v", round, err)
		}
		flush()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("round %d: Release after SCRIPT FLUSH: %v", round, err)
		}
		eventuallyGone(t, admins, key)
	}
}

// TestACLWithoutScripts connects as a Redis user that may run plain
// commands but not EVAL/EVALSHA. Every lock operation that writes is a
// script (docs/design.md, "Every command's fate"), so acquisition fails at
// once with a *QuorumError that names the nodes and their NOPERM replies,
// and leaves no key behind: a user that could take locks but never release
// them is refused up front.
func TestACLWithoutScripts(t *testing.T) {
	const ttl = 2 * time.Second
	c := startCluster(t, ttl, "")
	ctx := ctxT(t, 30*time.Second)
	admins := c.admins(t)
	for i, cl := range admins {
		if err := cl.Do(ctx, "ACL", "SETUSER", "locker", "on", ">pw", "~*", "+@all", "-evalsha", "-eval").Err(); err != nil {
			t.Fatalf("ACL SETUSER on node%d: %v", i, err)
		}
	}
	a := c.newLockClient(t, "locker", func(i int) *redis.Options {
		return &redis.Options{Addr: c.Node(i).Addr(), Username: "locker", Password: "pw"}
	}, redlock.WithTTL(ttl), redlock.WithNodeTimeout(200*time.Millisecond))

	key := "acl"
	_, err := a.TryLock(ctx, key)
	if err == nil {
		t.Fatal("TryLock succeeded for a user that may not run scripts")
	}
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Errorf("TryLock error %v does not match ErrNotAcquired", err)
	}
	qe := asQuorumError(t, err)
	msg := err.Error()
	failed := 0
	for i, r := range qe.Nodes {
		if r.Outcome != redlock.OutcomeError {
			continue
		}
		failed++
		if r.Err == nil || !strings.Contains(r.Err.Error(), "NOPERM") {
			t.Errorf("node%d error %v, want NOPERM", i, r.Err)
		}
		if !strings.Contains(msg, r.Node+" error") {
			t.Errorf("message does not name %s: %s", r.Node, msg)
		}
	}
	if failed < 3 {
		t.Fatalf("%d nodes with NOPERM errors, want at least 3: %s", failed, msg)
	}
	t.Logf("TryLock: %v", err)
	eventuallyGone(t, admins, key)
}

// TestPassword runs against servers that require a password: pools that
// carry it work, pools without it (or with a wrong one) fail with an error
// that names the authentication problem.
func TestPassword(t *testing.T) {
	const ttl = 2 * time.Second
	c := startCluster(t, ttl, "s3cret")
	ctx := ctxT(t, 30*time.Second)
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(200 * time.Millisecond)}

	good := c.newLockClient(t, "with-password", c.direct, opts...)
	l, err := good.TryLock(ctx, "pw")
	if err != nil {
		t.Fatalf("TryLock with the password: %v", err)
	}
	if err := l.Extend(ctx, 0); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if held, err := l.Held(ctx); !held || err != nil {
		t.Fatalf("Held = %v, %v", held, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	for _, tc := range []struct {
		name, password, want string
	}{
		{"no-password", "", "NOAUTH"},
		{"wrong-password", "wrong", "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := c.newLockClient(t, tc.name, func(i int) *redis.Options {
				return &redis.Options{Addr: c.Node(i).Addr(), Password: tc.password}
			}, opts...)
			for range 2 { // the first call also checks identities
				_, err := bad.TryLock(ctx, "pw")
				qe := checkFailedRound(t, err, nil)
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error does not say %s: %v", tc.want, err)
				}
				errs := 0
				for _, r := range qe.Nodes {
					if r.Err != nil && strings.Contains(r.Err.Error(), tc.want) {
						errs++
					}
				}
				if errs < 3 {
					t.Fatalf("%d nodes report %s, want at least 3: %v", errs, tc.want, err)
				}
				t.Logf("%v", err)
			}
			if _, err := bad.Locked(ctx, "pw"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Locked = %v, want an error saying %s", err, tc.want)
			}
		})
	}
}
