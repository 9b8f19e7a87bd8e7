package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

// Renewal sessions on real Redis: the scripts of docs/safety.md, "Renewal
// sessions" (internal/scripts/lib.lua and the session scripts), against
// the acquire paths of every other kind of lock, and a session cut off from
// a quorum of nodes.

// sessionSeq is the nodes' incarnation sequence under the default prefix.
const sessionSeq = redlock.DefaultKeyPrefix + "s:seq"

// sessionOf returns the session key that lock key k's value v names, when v
// is a session lock's: token \x1f incarnation \x1f prefix length, its
// session key being the prefix, "s:" and the token's first 16 bytes.
func sessionOf(k, v string) (string, bool) {
	_, _, sk, ok := node.ParseSession(k, v)
	return sk, ok
}

// sessionClient returns a Client whose auto-extended locks hang on renewal
// sessions (random tokens, queued pools), over pools made with redisOpts.
func sessionClient(t *testing.T, c *cluster, redisOpts func(i int) *redis.Options, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	lc, err := c.dialClient("session client", redisOpts, clientOpts{libraryTokens: true,
		lock: append([]redlock.Option{redlock.WithAutoExtend(true)}, opts...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.closeAndCheck(t) }) // Close errors fail the test; no token log to check
	return lc.Client
}

// endSession deletes the session key of lock l on every node, as its
// expiry would.
func endSession(t *testing.T, admins []*redis.Client, l *redlock.Lock) {
	t.Helper()
	for i, cl := range admins {
		sk, ok := sessionOf(rkey(l.Key()), get(t, cl, rkey(l.Key())))
		if !ok {
			t.Fatalf("node%d: %s = %q is no session lock's value", i, rkey(l.Key()), get(t, cl, rkey(l.Key())))
		}
		if err := cl.Del(context.Background(), sk).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSessionLocksOnRealRedis: a session lock's key names its session, which
// carries the lock's TTL while the key carries a long one; other clients see
// it taken through every acquire path (bare SET NX, script, fenced script)
// and through Locked; once its session has ended (its key deleted, as by
// expiry), every one of those paths finds the key free, and the holder
// loses the lock at its next renewal.
func TestSessionLocksOnRealRedis(t *testing.T) {
	const ttl = 2 * time.Second
	c := startCluster(t, ttl, "")
	dropFenceCounters(t, c)
	admins := c.admins(t)
	ctx := ctxT(t, 30*time.Second)
	s := sessionClient(t, c, c.direct, redlock.WithTTL(ttl))
	keys := []string{"sess-plain", "sess-script", "sess-fenced"}
	var held []*redlock.Lock
	for _, k := range keys {
		l, err := s.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	time.Sleep(ttl) // past the TTL: the session's renewals keep them
	sessionTTLs(t, admins, keys[0], ttl)
	other := c.newLockClient(t, "other", c.direct, redlock.WithTTL(ttl))
	scripted := c.newLockClient(t, "scripted", func(i int) *redis.Options {
		o := c.direct(i)
		o.MaxRetries = 1 // a client that may retry runs the acquire script
		return o
	}, redlock.WithTTL(ttl))
	// The acquire paths, one per key: bare SET NX, script, fenced script.
	paths := []func() (*redlock.Lock, error){
		func() (*redlock.Lock, error) { return other.TryLock(ctx, keys[0]) },
		func() (*redlock.Lock, error) { return scripted.TryLock(ctx, keys[1]) },
		func() (*redlock.Lock, error) { return other.TryLock(ctx, keys[2], redlock.WithFencing(true)) },
	}
	for i, try := range paths {
		if _, err := try(); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("%s while its session lives: %v, want taken", keys[i], err)
		}
		if locked, err := other.Locked(ctx, keys[i]); !locked || err != nil {
			t.Fatalf("Locked(%s) = %v, %v while its session lives", keys[i], locked, err)
		}
		if ok, err := held[i].Held(ctx); !ok || err != nil {
			t.Fatalf("Held(%s) = %v, %v", keys[i], ok, err)
		}
	}
	endSession(t, admins, held[0])
	for i, try := range paths {
		if locked, err := other.Locked(ctx, keys[i]); locked || err != nil {
			t.Fatalf("Locked(%s) = %v, %v after its session ended", keys[i], locked, err)
		}
		l, err := try()
		if err != nil {
			t.Fatalf("%s after its session ended: %v", keys[i], err)
		}
		defer l.Release(context.Background())
	}
	for _, l := range held {
		lostWithSession(t, ctx, l, 2*ttl)
	}
}

// sessionTTLs checks, on every node, that the session lock key's session
// key carries the lock's TTL (at most ttl) and the key itself a longer one.
func sessionTTLs(t *testing.T, admins []*redis.Client, key string, ttl time.Duration) {
	t.Helper()
	for i, cl := range admins {
		sk, ok := sessionOf(rkey(key), get(t, cl, rkey(key)))
		if !ok {
			t.Fatalf("node%d: not a session lock's value: %q", i, get(t, cl, rkey(key)))
		}
		if ms := pttl(t, cl, sk); ms <= 0 || ms > ttl.Milliseconds() {
			t.Errorf("node%d: session key PTTL %dms, want (0, %d]", i, ms, ttl.Milliseconds())
		}
		if ms := pttl(t, cl, rkey(key)); ms <= ttl.Milliseconds() {
			t.Errorf("node%d: session lock key PTTL %dms, want its long TTL", i, ms)
		}
	}
}

// lostWithSession checks that the session lock l, whose session ended, is
// lost within bound, and that its Release says it is no longer held.
func lostWithSession(t *testing.T, ctx context.Context, l *redlock.Lock, bound time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(bound):
		t.Fatalf("%s: not lost %v after its session ended", l.Key(), bound)
	}
	if !errors.Is(l.Err(), redlock.ErrLockLost) {
		t.Fatalf("%s: Err %v", l.Key(), l.Err())
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrReleased) && !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("%s: Release of a lost session lock: %v", l.Key(), err)
	}
}

// TestSessionCutOffLosesBeforeOthersAcquire: a holder whose session renewals
// cannot reach a quorum of nodes (blackholed) learns that its locks are lost
// from its own clock, before any other client can acquire them: the other
// client's Lock, waiting on the same keys, returns only after the holder's
// deadline of that lock has passed, and every one of the holder's Done
// channels closes. (The deadline is the guarantee; the Done channel closes
// on a timer at the deadline, which a loaded machine may run late: it was
// once seen closing after the other Lock returned, under make test's load,
// with the deadline passed.)
func TestSessionCutOffLosesBeforeOthersAcquire(t *testing.T) {
	const ttl = 2 * time.Second
	c := startCluster(t, ttl, "")
	ctx := ctxT(t, 60*time.Second)
	proxies, via := c.proxyEach(t)
	s := sessionClient(t, c, via, redlock.WithTTL(ttl))
	const locks = 20
	held := make([]*redlock.Lock, locks)
	for i := range held {
		l, err := s.TryLock(ctx, fmt.Sprintf("cut-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
	}
	lostAll := make(chan time.Time, 1)
	go func() {
		for _, l := range held {
			<-l.Done()
		}
		lostAll <- time.Now()
	}()
	for _, px := range proxies[:3] {
		px.Blackhole(true)
	}
	other := c.newLockClient(t, "other", c.direct, redlock.WithTTL(ttl))
	for i := range held {
		l, err := other.Lock(ctx, fmt.Sprintf("cut-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		acquired := time.Now()
		for j, h := range held {
			if d := h.Deadline(); d.After(acquired) {
				t.Fatalf("cut-%d acquired by another client at %v, before the holder's deadline of cut-%d, %v", i, acquired, j, d)
			}
		}
		_ = l.Release(ctx)
	}
	select {
	case <-lostAll:
	case <-time.After(2 * ttl):
		t.Fatalf("the holder's locks did not all end within %v of the other client's acquisitions", 2*ttl)
	}
	for _, px := range proxies[:3] {
		px.Blackhole(false)
	}
}

// sessionRig is the set-up of the tests of a session's late commands: a
// cluster, its admin clients, and a session client a whose links pass
// through a proxy per node (proxies, in node order).
type sessionRig struct {
	c       *cluster
	ctx     context.Context
	admins  []*redis.Client
	proxies []*testkit.Proxy
	a       *redlock.Client
}

// newSessionRig starts the rig, a with TTL ttl and a 200 ms node timeout,
// and returns it with a's lock of key.
func newSessionRig(t *testing.T, ttl time.Duration, key string) (*sessionRig, *redlock.Lock) {
	t.Helper()
	r := &sessionRig{c: startCluster(t, ttl, ""), ctx: ctxT(t, 60*time.Second)}
	r.admins = r.c.admins(t)
	var via func(int) *redis.Options
	r.proxies, via = r.c.proxyEach(t)
	r.a = sessionClient(t, r.c, via, redlock.WithTTL(ttl), redlock.WithNodeTimeout(200*time.Millisecond))
	l, err := r.a.TryLock(r.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return r, l
}

// TestSessionLateAcquireCleanedUp: a failed session acquire whose commands
// land long after the call returned (held in the link, delivered past the
// clean-up horizon of a plain lock) writes into a session its Client still
// renews for another lock. Its releases are re-sent for as long as such a
// key can be held (the key's own TTL), so the key is deleted soon after it
// lands, while the session still lives, instead of being held for up to
// 10 × TTL.
func TestSessionLateAcquireCleanedUp(t *testing.T) {
	const ttl = 2 * time.Second
	r, x := newSessionRig(t, ttl, "late-x") // x keeps the session renewed
	c, ctx, admins, proxies, a := r.c, r.ctx, r.admins, r.proxies, r.a
	quietLinks(t, ctx, x, ttl)
	// HoldWrite: only the connection late-y's acquire goes out on is held;
	// x's renewals go on over the others.
	for _, px := range proxies[:3] {
		px.HoldWrite(rkey("late-y"))
	}
	if _, err := a.TryLock(ctx, "late-y"); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("TryLock with 3 of 5 links holding: %v", err)
	}
	for i, px := range proxies[:3] {
		if px.Held() == 0 || get(t, admins[i], rkey("late-y")) != "" {
			t.Fatalf("node%d: the acquire of late-y was not held in its link (%d bytes held, late-y = %q)", i, px.Held(), get(t, admins[i], rkey("late-y")))
		}
	}
	time.Sleep(2*ttl + 4*time.Second) // past a plain lock's clean-up horizon (TTL + 2 s)
	for _, px := range proxies[:3] {
		px.Deliver()
	}
	held := 0
	for _, cl := range admins[:3] {
		if v := get(t, cl, rkey("late-y")); v != "" {
			held++
		}
	}
	t.Logf("late-y on %d of 3 nodes right after the late delivery", held)
	b := c.newLockClient(t, "b", c.direct, redlock.WithTTL(ttl))
	took := eventually(t, 5*ttl, 50*time.Millisecond, "another client takes late-y", func() bool {
		l, err := b.TryLock(ctx, "late-y")
		if err == nil {
			_ = l.Release(ctx)
		}
		return err == nil
	})
	if err := x.Err(); err != nil {
		t.Fatalf("the session's other lock: %v", err)
	}
	t.Logf("late-y free %v after its acquire landed (its key's own TTL: %v)", took, 10*ttl)
}

// quietLinks returns once no command of session lock x's Client is in
// flight, and none is due for about a renewal interval, so that a hold
// applied now (HoldWrite) catches the next round's commands on the
// connections they are written on, and not a renewal of x's. With a
// command of x's acquire round still on its way (TryLock returns at a
// quorum) or a session renewal in flight, held with the link (HoldOpen),
// the next round's command went out on another connection once the held
// one's deadline passed, and landed at once (CI saw TryLock succeed with 3
// of 5 links holding). So: a periodic renewal
// has moved x's deadline (a renewal interval after x was taken, well past
// the deadline of its acquire round's commands), and then an Extend, which
// renews the session on every node where it lives, behind that renewal,
// and waits for every reply, has been answered.
func quietLinks(t *testing.T, ctx context.Context, x *redlock.Lock, ttl time.Duration) {
	t.Helper()
	d := x.Deadline()
	eventually(t, 2*ttl, time.Millisecond, "a periodic renewal moves late-x's deadline", func() bool {
		return x.Deadline().After(d)
	})
	if err := x.Extend(ctx, ttl); err != nil {
		t.Logf("Extend of late-x (to let every renewal answer): %v", err)
	}
}

// TestSessionLateRenewalAfterNextHolder: every command of a session holder
// is held in its links (HoldAll), so its lock is lost by its own deadline
// and its session ends on the nodes; another client then takes the key.
// When the held renewals (and the lost lock's clean-up) land, after the
// next holder's acquire, they find no incarnation to lengthen and no key of
// theirs to delete: the next holder keeps the key on every node it took.
func TestSessionLateRenewalAfterNextHolder(t *testing.T) {
	const ttl = 2 * time.Second
	r, la := newSessionRig(t, ttl, "late-renew")
	c, ctx, admins, proxies := r.c, r.ctx, r.admins, r.proxies
	// After a renewal, so that the nodes have the renewal script cached:
	// the late EVALSHAs must run, not fail with NOSCRIPT.
	time.Sleep(ttl / 2)
	for _, px := range proxies {
		px.Hold(testkit.HoldAll)
	}
	<-la.Done()
	b := c.newLockClient(t, "b", c.direct, redlock.WithTTL(ttl))
	lb, err := b.Lock(ctx, "late-renew")
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, px := range proxies {
		held += px.Held()
	}
	if held == 0 {
		t.Fatal("nothing of the holder's was held back")
	}
	// The nodes the next holder took (a quorum: those where the old key
	// had expired by its attempts).
	var took []int
	for i, cl := range admins {
		if get(t, cl, rkey("late-renew")) == lb.Token() {
			took = append(took, i)
		}
	}
	if len(took) < 3 {
		t.Fatalf("the next holder's token is on nodes %v only; want a quorum", took)
	}
	for _, px := range proxies {
		px.Deliver()
	}
	time.Sleep(500 * time.Millisecond) // the delivered commands run
	for _, i := range took {
		if v := get(t, admins[i], rkey("late-renew")); v != lb.Token() {
			t.Errorf("node%d: late-renew = %q after the old holder's commands landed, want the next holder's %q", i, v, lb.Token())
		}
	}
	if ok, err := lb.Held(ctx); !ok || err != nil {
		t.Fatalf("next holder: Held = %v, %v", ok, err)
	}
	// The late renewals did not bring the ended session back either.
	sk := redlock.DefaultKeyPrefix + "s:" + la.Token()[:16]
	for i, cl := range admins {
		if v := get(t, cl, sk); v != "" {
			t.Errorf("node%d: the old holder's session key %s = %q after its late renewals landed", i, sk, v)
		}
	}
	if !errors.Is(la.Err(), redlock.ErrLockLost) {
		t.Fatalf("old holder: Err %v, want ErrLockLost", la.Err())
	}
	t.Logf("%d bytes of the old holder's landed after the next holder's acquire", held)
	_ = lb.Release(ctx)
}
