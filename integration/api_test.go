package integration

import (
	"context"
	"errors"
	"slices"
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
	c := startCluster(t, opsLongTTL, "")
	o := &opsTest{c: c, admins: c.admins(t), opts: []redlock.Option{redlock.WithTTL(opsTTL), redlock.WithNodeTimeout(opsNodeLimit)}}
	o.a = c.newLockClient(t, "a", c.direct, o.opts...)
	o.b = c.newLockClient(t, "b", c.direct, o.opts...)
	o.ctx = ctxT(t, 30*time.Second)
	t.Run("TryLock", o.tryLock)
	t.Run("LockWaitsForRelease", o.lockWaitsForRelease)
	t.Run("LockGivesUp", o.lockGivesUp)
	t.Run("Extend", o.extend)
	t.Run("CloseReleasesHeldLocks", o.closeReleasesHeldLocks)
	t.Run("BadInput", o.badInput)
}

const (
	opsTTL       = 3 * time.Second
	opsLongTTL   = 20 * time.Second
	opsNodeLimit = 200 * time.Millisecond
)

// opsTest is what TestOperations' subtests share: five servers, their
// admin clients, and two clients a and b with opts (TTL opsTTL).
type opsTest struct {
	c      *cluster
	admins []*redis.Client
	opts   []redlock.Option
	a, b   *lockClient
	ctx    context.Context
}

// tryLock: TryLock on a free key puts the token on every node with the
// lock's TTL and a deadline that the servers' copies outlive; another
// client is refused, Held and Locked see the lock, and Release frees it.
func (o *opsTest) tryLock(t *testing.T) {
	const key = "op-trylock"
	start := time.Now()
	l, err := o.a.TryLock(o.ctx, key)
	if err != nil {
		t.Fatalf("TryLock on a free key: %v", err)
	}
	ret := time.Now()
	if l.Key() != key || l.Token() == "" {
		t.Fatalf("Key() = %q, Token() = %q", l.Key(), l.Token())
	}
	checkDeadline(t, l, start, ret, opsTTL, 0, o.admins, nil)
	// The token is on every node (all five answer quickly; give late
	// "yes" replies time to land before looking), with the TTL.
	eventuallyAll(t, o.admins, key, l.Token())
	o.c.mustHoldAll(t, o.admins, all(), key, l.Token(), 0, opsTTL.Milliseconds())
	checkDeadline(t, l, start, ret, opsTTL, 0, o.admins, all())
	o.refused(t, l)
	o.seenHeld(t, l)
	o.released(t, l)
}

// refused: another client cannot take l's key; the error says who refused,
// and the holder's token is untouched everywhere.
func (o *opsTest) refused(t *testing.T, l *redlock.Lock) {
	key := l.Key()
	_, err := o.b.TryLock(o.ctx, key)
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
	o.c.mustHoldAll(t, o.admins, all(), key, l.Token(), 0, opsTTL.Milliseconds())
}

// seenHeld: Held and Locked (of another client) see l, and Locked sees a
// key never locked free.
func (o *opsTest) seenHeld(t *testing.T, l *redlock.Lock) {
	if held, err := l.Held(o.ctx); !held || err != nil {
		t.Fatalf("Held = %v, %v; want true", held, err)
	}
	if locked, err := o.b.Locked(o.ctx, l.Key()); !locked || err != nil {
		t.Fatalf("Locked (other client) = %v, %v; want true", locked, err)
	}
	if locked, err := o.b.Locked(o.ctx, "op-never-locked"); locked || err != nil {
		t.Fatalf("Locked on a free key = %v, %v; want false, nil", locked, err)
	}
}

// released: Release deletes l's key from every node; the handle is then
// spent, and the other client gets the lock.
func (o *opsTest) released(t *testing.T, l *redlock.Lock) {
	key := l.Key()
	if err := l.Release(o.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	eventuallyGone(t, o.admins, key)
	if held, err := l.Held(o.ctx); held || err != nil {
		t.Fatalf("Held after Release = %v, %v; want false, nil", held, err)
	}
	if locked, err := o.b.Locked(o.ctx, key); locked || err != nil {
		t.Fatalf("Locked after Release = %v, %v; want false, nil", locked, err)
	}
	if err := l.Release(o.ctx); !errors.Is(err, redlock.ErrReleased) {
		t.Fatalf("second Release = %v, want ErrReleased", err)
	}
	if err := l.Extend(o.ctx, 0); !errors.Is(err, redlock.ErrReleased) {
		t.Fatalf("Extend after Release = %v, want ErrReleased", err)
	}
	l2, err := o.b.TryLock(o.ctx, key)
	if err != nil {
		t.Fatalf("TryLock after Release: %v", err)
	}
	if err := l2.Release(o.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// lockResult is what a Lock call in a goroutine returned, and when.
type lockResult struct {
	l   *redlock.Lock
	err error
	at  time.Time
}

// lockWaitsForRelease: Lock on a held key waits, retrying, and acquires
// after the holder's Release.
func (o *opsTest) lockWaitsForRelease(t *testing.T) {
	const key = "op-lock-waits"
	holder, err := o.a.TryLock(o.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	w := o.c.newLockClient(t, "waiter", o.c.direct, o.opts...)
	done := make(chan lockResult, 1)
	go func() {
		l, err := w.Lock(o.ctx, key, redlock.WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
		done <- lockResult{l, err, time.Now()}
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
	if err := holder.Release(o.ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
	var r lockResult
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
	if held, err := r.l.Held(o.ctx); !held || err != nil {
		t.Fatalf("waiter Held = %v, %v", held, err)
	}
	if err := r.l.Release(o.ctx); err != nil {
		t.Fatalf("waiter Release: %v", err)
	}
	w.closeAndCheck(t)
}

// lockGivesUp: Lock on a held key gives up after its WithMaxWait, and
// when its context ends.
func (o *opsTest) lockGivesUp(t *testing.T) {
	const key = "op-lock-gives-up"
	holder, err := o.a.TryLock(o.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(o.ctx)
	const wait = 300 * time.Millisecond
	start := time.Now()
	_, err = o.b.Lock(o.ctx, key, redlock.WithMaxWait(wait), redlock.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))
	el := time.Since(start)
	checkFailedRound(t, err, nil)
	if el > wait+10*opsNodeLimit {
		t.Fatalf("Lock with WithMaxWait(%v) returned after %v", wait, el)
	}
	// A cancelled context ends the wait with an error matching both.
	cctx, cancel := context.WithTimeout(o.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = o.b.Lock(cctx, key)
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with an expiring ctx = %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
}

// extend: Extend with a longer TTL moves the deadline and every node's TTL
// up; Extend(0) goes back to the lock's TTL without shortening the keys;
// after Release, Extend re-creates nothing.
func (o *opsTest) extend(t *testing.T) {
	const key = "op-extend"
	l, err := o.a.TryLock(o.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	eventuallyAll(t, o.admins, key, l.Token())
	o.extendLonger(t, l)
	o.extendBack(t, l)
	if held, err := l.Held(o.ctx); !held || err != nil {
		t.Fatalf("Held after Extend = %v, %v", held, err)
	}
	if err := l.Release(o.ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// Extend never re-creates a key: the spent handle refuses, and no
	// node has the key.
	if err := l.Extend(o.ctx, 0); !errors.Is(err, redlock.ErrReleased) {
		t.Fatalf("Extend after Release = %v, want ErrReleased", err)
	}
	eventuallyGone(t, o.admins, key)
}

// extendLonger extends l with opsLongTTL: its deadline and the keys' TTLs
// on every node move up.
func (o *opsTest) extendLonger(t *testing.T, l *redlock.Lock) {
	key := l.Key()
	before := l.Deadline()
	start := time.Now()
	if err := l.Extend(o.ctx, opsLongTTL); err != nil {
		t.Fatalf("Extend(%v): %v", opsLongTTL, err)
	}
	longAllow := drift.Allowance(opsLongTTL, drift.DefaultFactor)
	if d := l.Deadline(); !d.After(before) || d.Before(start) || d.After(time.Now().Add(opsLongTTL-longAllow)) {
		t.Fatalf("Deadline after Extend(%v) is %v from the call, was %v", opsLongTTL, d.Sub(start), before.Sub(start))
	}
	// The server TTL really changed, on every node that answered in
	// time; Extend waits only for a quorum, so poll for the others.
	eventually(t, 5*time.Second, 5*time.Millisecond, "PTTL raised on all nodes", func() bool {
		for _, cl := range o.admins {
			if pttl(t, cl, rkey(key)) <= opsTTL.Milliseconds() {
				return false
			}
		}
		return true
	})
	o.c.mustHoldAll(t, o.admins, all(), key, l.Token(), opsTTL.Milliseconds(), opsLongTTL.Milliseconds())
}

// extendBack: Extend(0) goes back to the lock's own TTL: the local deadline
// moves earlier, but an extend never shortens a key on a node (a late one
// must not cut a later, longer one short), so the keys keep the longer TTL,
// which is never below the new deadline.
func (o *opsTest) extendBack(t *testing.T, l *redlock.Lock) {
	start := time.Now()
	if err := l.Extend(o.ctx, 0); err != nil {
		t.Fatalf("Extend(0): %v", err)
	}
	if d := l.Deadline(); d.Before(start) || d.After(time.Now().Add(opsTTL)) {
		t.Fatalf("Deadline after Extend(0) is %v from the call, want within the lock's TTL %v", d.Sub(start), opsTTL)
	}
	o.c.mustHoldAll(t, o.admins, all(), l.Key(), l.Token(), time.Until(l.Deadline()).Milliseconds(), opsLongTTL.Milliseconds())
}

// closeReleasesHeldLocks: Close releases every lock the Client holds and
// waits for it; after it, every call returns ErrClosed.
func (o *opsTest) closeReleasesHeldLocks(t *testing.T) {
	x := o.c.newLockClient(t, "closer", o.c.direct, o.opts...)
	var locks []*redlock.Lock
	for _, key := range []string{"op-close-1", "op-close-2"} {
		l, err := x.TryLock(o.ctx, key)
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
		for i, cl := range o.admins {
			if v := get(t, cl, rkey(l.Key())); v != "" {
				t.Errorf("node%d still holds %s = %q after Close returned", i, rkey(l.Key()), v)
			}
		}
		if err := l.Release(o.ctx); !errors.Is(err, redlock.ErrReleased) && !errors.Is(err, redlock.ErrClosed) {
			t.Errorf("Release after Close = %v, want ErrReleased or ErrClosed", err)
		}
	}
	if err := x.Close(); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
	for name, op := range map[string]func() error{
		"TryLock": func() error { _, err := x.TryLock(o.ctx, "op-close-3"); return err },
		"Lock":    func() error { _, err := x.Lock(o.ctx, "op-close-3"); return err },
		"Locked":  func() error { _, err := x.Locked(o.ctx, "op-close-3"); return err },
	} {
		if err := op(); !errors.Is(err, redlock.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	x.closeAndCheck(t)
}

// badInput: bad input is refused before any I/O and is not
// ErrNotAcquired.
func (o *opsTest) badInput(t *testing.T) {
	if _, err := o.a.TryLock(o.ctx, ""); err == nil || errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("TryLock(\"\") = %v", err)
	}
	if _, err := o.a.TryLock(o.ctx, "op-bad", redlock.WithTTL(100*time.Millisecond), redlock.WithNodeTimeout(time.Second)); err == nil || errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("TryLock with TTL below the node timeout = %v", err)
	}
	for i, cl := range o.admins {
		if v := get(t, cl, rkey("op-bad")); v != "" {
			t.Errorf("node%d holds %q after refused calls", i, v)
		}
	}
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
	waitExpired(t, ctx, l, b)

	// Another client takes it; the old handle must not touch it.
	l2, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after expiry: %v", err)
	}
	// The nodes b took: a quorum, though not always all five (a node whose
	// copy of the old key expired a little later told b "taken").
	holding := tokensOn(t, admins, rkey(key), l2.Token())
	if len(holding) < 3 {
		t.Fatalf("the new token is on nodes %v only; want a quorum", holding)
	}
	// A late acquire of a's may have landed after its deadline: it is
	// left to its TTL (its token could have been resumed elsewhere), and
	// a's Release may delete it there, but nowhere else.
	own := tokensOn(t, admins, rkey(key), l.Token())
	err = l.Release(ctx)
	if !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("Release of the expired handle = %v, want ErrNotHeld", err)
	}
	qe := asQuorumError(t, err)
	for i, n := range qe.Nodes {
		if n.Outcome == redlock.OutcomeOK && !slices.Contains(own, i) {
			t.Fatalf("Release of the expired handle: node%d, which did not hold its token (%v did), confirmed: %v", i, own, err)
		}
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

// waitExpired waits until other sees l's key free, and checks that it was
// not free before l's deadline and that l then knows it lost the lock.
func waitExpired(t *testing.T, ctx context.Context, l *redlock.Lock, other *lockClient) {
	t.Helper()
	var freeAt time.Time
	took := eventually(t, 10*time.Second, 5*time.Millisecond, "Locked turns false after expiry", func() bool {
		locked, err := other.Locked(ctx, l.Key())
		if err != nil {
			t.Fatalf("Locked: %v", err)
		}
		freeAt = time.Now()
		return !locked
	})
	t.Logf("lock seen free %v after the call that acquired it", took)
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
	qe := checkFailedRound(t, err, nil)
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
