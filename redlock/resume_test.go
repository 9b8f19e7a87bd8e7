package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/quorumlock/pool"
)

// scriptPools are Pools of package pool over the env's servers, without the
// fault wrapper: they queue commands and run the scripts (resume.lua,
// inspect.lua), where the env's own Pools take the synchronous path
// (callOn).
func (e *env) scriptPools() []pool.Pool {
	e.t.Helper()
	ps := make([]pool.Pool, len(e.nodes))
	for i, n := range e.nodes {
		p, err := pool.New(n.rdb, pool.WithName(fmt.Sprintf("node%d", i)))
		if err != nil {
			e.t.Fatal(err)
		}
		ps[i] = p
	}
	return ps
}

// TestResumeEverySubset resumes a token held on every subset of the 5 nodes
// (the others absent or held by another token), with every subset failing
// (an error reply or a refused connection), through the scripts and through
// the synchronous path: it wins exactly when a quorum holds the token and
// works; the nodes that confirmed then live at least the new TTL, and no
// node ever gets the key it did not hold.
func TestResumeEverySubset(t *testing.T) {
	e := newEnv(t, 5)
	e.everySubsetOnBothPaths(t, resumeSubset, WithTTL(time.Minute))
}

// everySubsetOnBothPaths calls check for every subset of the 5 nodes held
// and every subset failing, with a Client over Pools that run the scripts
// and one over the env's Pools (the synchronous path).
func (e *env) everySubsetOnBothPaths(t *testing.T, check func(t *testing.T, e *env, c *Client, path string, held, failing int), opts ...Option) {
	for _, path := range []struct {
		name  string
		pools []pool.Pool
	}{{"scripts", e.scriptPools()}, {"synchronous", e.pools}} {
		c, err := New(path.pools, append([]Option{testNodeTimeout}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		for held := range 32 {
			for failing := range 32 {
				check(t, e, c, path.name, held, failing)
			}
		}
		_ = c.Close()
	}
}

func resumeSubset(t *testing.T, e *env, c *Client, path string, held, failing int) {
	t.Helper()
	key := fmt.Sprintf("resume-%s-%d-%d", path, held, failing)
	k, token := rkey(key), "tok-"+key
	for i, n := range e.nodes {
		switch {
		case held&(1<<i) != 0:
			n.m.Set(k, token)
			n.m.SetTTL(k, 2*time.Second)
		case i%2 == 0:
			n.m.Set(k, "someone-else")
			n.m.SetTTL(k, 2*time.Second)
		}
		if failing&(1<<i) != 0 {
			if path == "scripts" || i%2 == 0 {
				n.m.SetError("ERR injected")
			} else {
				n.fault.setErr(errConnRefused)
			}
		}
	}
	l, err := c.Resume(context.Background(), key, token)
	for _, n := range e.nodes {
		n.m.SetError("")
		n.fault.setErr(nil)
	}
	working := held &^ failing
	if want := bits.OnesCount(uint(working)) >= 3; (err == nil) != want {
		t.Fatalf("%s: held %05b failing %05b: Resume err = %v, want success %v", path, held, failing, err, want)
	}
	if err != nil && (!errors.Is(err, ErrNotHeld) || errors.Is(err, ErrSessionToken)) {
		t.Fatalf("%s: held %05b failing %05b: %v: want ErrNotHeld, not ErrSessionToken", path, held, failing, err)
	}
	if err == nil && (l.Token() != token || l.Key() != key || l.Fence() != 0 || time.Until(l.Deadline()) < 50*time.Second) {
		t.Fatalf("%s: resumed lock: token %q key %q fence %d deadline in %v", path, l.Token(), l.Key(), l.Fence(), time.Until(l.Deadline()))
	}
	extended := 0 // nodes that live the new TTL: at least the quorum that confirmed
	for i, n := range e.nodes {
		v := e.value(i, k)
		switch {
		case held&(1<<i) == 0 && v == token:
			t.Fatalf("%s: held %05b failing %05b: node %d got the key, which it did not hold", path, held, failing, i)
		case held&(1<<i) == 0 && i%2 == 0 && v != "someone-else":
			t.Fatalf("%s: node %d: the other holder's key became %q", path, i, v)
		case v == token && n.m.TTL(k) > 50*time.Second:
			extended++
		}
	}
	if err == nil && extended < 3 {
		t.Fatalf("%s: held %05b failing %05b: %d nodes live the new TTL, want a quorum", path, held, failing, extended)
	}
}

// TestResumeNeverRecreates: a released lock and an expired one stay gone.
func TestResumeNeverRecreates(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	ctx := context.Background()
	l, err := c.TryLock(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	token := l.Token()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitGone(rkey("gone")) // Release returns at quorum; the rest follow
	for _, cl := range []*Client{c, New2(t, e.scriptPools())} {
		if _, err := cl.Resume(ctx, "gone", token); !errors.Is(err, ErrNotHeld) || quorumErr(t, err).count(OutcomeNotHeld) < 3 {
			t.Fatalf("Resume of a released lock: %v, want ErrNotHeld with nodes not holding it", err)
		}
	}
	if n := e.holders(rkey("gone"), ""); n != 5 {
		t.Fatalf("the key exists on %d nodes after Resume of a released lock", 5-n)
	}
}

// New2 is a Client over pools, closed at the end of the test.
func New2(t *testing.T, pools []pool.Pool, opts ...Option) *Client {
	t.Helper()
	c, err := New(pools, append([]Option{testNodeTimeout}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestResumedLockIsTheLock: a lock resumed by another Client is the same
// lock: it extends and releases it, and the first handle then fails.
func TestResumedLockIsTheLock(t *testing.T) {
	e := newEnv(t, 5)
	ctx := context.Background()
	first, second := e.client(WithTTL(5*time.Second)), New2(t, e.scriptPools())
	l, err := first.TryLock(ctx, "job", WithMetadata("host-a pid 42"))
	if err != nil {
		t.Fatal(err)
	}
	// TryLock returns once a quorum said yes. A SET still on its way to the
	// last node could land after the resumed handle's release, which another
	// Client cannot know of: it lives its TTL there (the first handle's own
	// Release would remove it: TestLateYesCountsForWonLock). This test is
	// about the two handles, so it starts once every SET has landed.
	e.waitHolders(rkey("job"), l.Token(), 5)
	r, err := second.Resume(ctx, "job", l.Token(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	long := 0 // Resume returns once a quorum confirmed: those live the new TTL
	for _, n := range e.nodes {
		if n.m.TTL(rkey("job")) > 50*time.Second {
			long++
		}
	}
	if long < 3 {
		t.Fatalf("after Resume with a TTL of 1m, %d nodes live it, want a quorum", long)
	}
	if err := r.Extend(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitGone(rkey("job"))
	if err := l.Extend(ctx, 0); !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNotHeld) {
		t.Fatalf("the first handle's Extend after the resumed one released: %v", err)
	}
	if _, err := second.TryLock(ctx, "job"); err != nil {
		t.Fatalf("the key is not free after the resumed lock's release: %v", err)
	}
}

// TestResumeRejectsBadInput before any I/O.
func TestResumeRejectsBadInput(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	for _, tc := range []struct{ key, token string }{
		{"", "t"}, {"k", ""}, {"k", "a\x1f1\x1f11"}, {"k", "\x1ewaiter"}, {"k", "\x1creader"},
	} {
		_, err := c.Resume(context.Background(), tc.key, tc.token)
		if err == nil || errors.Is(err, ErrNotHeld) {
			t.Fatalf("Resume(%q, %q) = %v, want a plain error", tc.key, tc.token, err)
		}
	}
	if _, err := c.Resume(context.Background(), "k", "t", WithTTL(-1)); err == nil {
		t.Fatal("Resume with a negative TTL succeeded")
	}
	for i, n := range e.nodes {
		if calls := n.fault.calls.Load(); calls != 0 {
			t.Fatalf("node %d saw %d calls", i, calls)
		}
	}
}

// TestResumeRefusesASharedKeysValue: the value of a key held shared, as a
// raw GET prints it (0x1c and the token of the holder that made it
// shared), is no token: Resume refuses it before any I/O, the shared hold
// stays, and a lock of the key alone is still refused. Before, Resume took
// it for a plain lock's token and returned a lock held alone beside the
// shared holder (issue 31, defect 1).
func TestResumeRefusesASharedKeysValue(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(time.Minute))
	ctx := context.Background()
	r, err := c.TryLock(ctx, "doc", Shared())
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := e.nodes[0].m.Get(rkey("doc"))
	if l, err := c.Resume(ctx, "doc", raw); err == nil || errors.Is(err, ErrNotHeld) {
		t.Fatalf("Resume with the shared key's value %q = %v, %v; want a plain error before any I/O", raw, l, err)
	}
	if _, err := c.TryLock(ctx, "doc"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock of the key held shared = %v; want ErrNotAcquired", err)
	}
	if ok, err := r.Held(ctx); !ok || err != nil {
		t.Fatalf("the shared holder's Held = %v, %v", ok, err)
	}
}

// TestResumeRefusesSessionLocks: the token of a lock held through a
// renewal session is refused, and its key is left as it was: a resumed
// handle could not keep the session alive, and extending the key would
// confirm a lock whose session may already be dead.
func TestResumeRefusesSessionLocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t)
		l, err := c.TryLock(t.Context(), "s")
		if err != nil {
			t.Fatal(err)
		}
		if l.hold.Session() == nil {
			t.Fatal("the lock is not a session lock")
		}
		key := func() memEntry { // under the pool's lock: a send may write it
			ps[0].memPool.mu.Lock()
			defer ps[0].memPool.mu.Unlock()
			return ps[0].memPool.keys[rkey("s")]
		}
		synctest.Wait() // the acquire's commands the round did not wait for
		before := key()
		_, err = c.Resume(t.Context(), "s", l.Token())
		if !errors.Is(err, ErrSessionToken) || !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Resume of a session lock's token: %v, want ErrSessionToken and ErrNotHeld", err)
		}
		synctest.Wait()
		if after := key(); after != before {
			t.Fatalf("Resume changed the session lock's key: %+v, was %+v", after, before)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestResumeAfterClose fails with ErrClosed.
func TestResumeAfterClose(t *testing.T) {
	e := newEnv(t, 3)
	c := e.client()
	_ = c.Close()
	if _, err := c.Resume(context.Background(), "k", "t"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Resume after Close: %v", err)
	}
}

// TestMetadataTravelsInTheToken: the description follows the token after
// 0x1d; bad descriptions are refused before any I/O.
func TestMetadataTravelsInTheToken(t *testing.T) {
	e := newEnv(t, 3)
	c := e.client(WithMetadata("host-a"))
	l, err := c.TryLock(context.Background(), "m")
	if err != nil {
		t.Fatal(err)
	}
	own, meta, _ := strings.Cut(l.Token(), "\x1d")
	if meta != "host-a" || len(own) != 22 || l.Metadata() != "host-a" {
		t.Fatalf("token %q, Metadata %q", l.Token(), l.Metadata())
	}
	e.waitHolders(rkey("m"), l.Token(), len(e.nodes)) // the nodes hold the token, description and all
	for _, bad := range []string{strings.Repeat("x", MaxMetadata+1), "a\x1fb", "a\x1db", "\x1e"} {
		if _, err := c.TryLock(context.Background(), "m2", WithMetadata(bad)); err == nil || errors.Is(err, ErrNotAcquired) {
			t.Fatalf("WithMetadata(%q): %v, want a plain error", bad, err)
		}
	}
	gen := WithTokenGenerator(func() (string, error) { return "a\x1db", nil })
	if _, err := c.TryLock(context.Background(), "m3", gen); err == nil || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a generated token with 0x1d: %v, want a plain error", err)
	}
}

// TestResumedLockAutoExtends: a lock resumed WithAutoExtend is renewed like
// an acquired one (by the batched renewals: it has no session), stays held
// over several TTLs, and its lease ends at Release.
func TestResumedLockAutoExtends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sendEnvWith(t, WithAutoExtend(false))
		l, err := c.TryLock(t.Context(), "auto")
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Resume(t.Context(), "auto", l.Token(), WithAutoExtend(true))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // 3.3 TTLs
		if err := r.Err(); err != nil || memHolders(ps, r) < 3 {
			t.Fatalf("after 3.3 TTLs: Err %v, held on %d nodes", err, memHolders(ps, r))
		}
		if err := r.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-r.Done()
		synctest.Wait() // the nodes Release did not wait for
		if n := memHolders(ps, r); n != 0 {
			t.Fatalf("held on %d nodes after Release", n)
		}
	})
}

// TestResumeOfUnansweredNodeDeletesOnce: a Resume whose command to node 4
// never answers (its fate unknown), then a Release of the resumed lock. A
// resume sets no key, so nothing of it can land later: node 4 gets one
// delete, whether the lock's key was there or not, and it is gone after
// Close. Before, the resumed lock took the unanswered node for one whose
// SET may land yet, and re-sent its delete while it found nothing, for TTL
// + the cleanup budget.
func TestResumeOfUnansweredNodeDeletesOnce(t *testing.T) {
	for _, there := range []bool{true, false} {
		t.Run(fmt.Sprintf("key-there=%v", there), func(t *testing.T) {
			e := newEnv(t, 5)
			ctx := context.Background()
			l, err := e.client(WithTTL(time.Hour)).TryLock(ctx, "ru")
			if err != nil {
				t.Fatal(err)
			}
			e.waitHolders(rkey("ru"), l.Token(), 5)
			if !there {
				e.nodes[4].m.Del(rkey("ru"))
			}
			c := e.client(WithNodeTimeout(100*time.Millisecond), WithTTL(time.Hour))
			verifyAll(t, c)
			e.nodes[4].fault.hold(false, "get") // node 4's resume never runs
			r, err := c.Resume(ctx, "ru", l.Token())
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
			calls := e.nodes[4].fault.calls.Load()
			for deadline := time.Now().Add(10 * time.Second); e.nodes[4].fault.inflight.Load() != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("node 4's resume still waits after 10s")
				}
			}
			if err := c.Close(); err != nil { // sends what is pending, once more
				t.Fatal(err)
			}
			if n := e.nodes[4].fault.calls.Load() - calls; n != 1 {
				t.Errorf("node 4 got %d deletes, want 1", n)
			}
			if v := e.value(4, rkey("ru")); v != "" {
				t.Errorf("node 4 still holds %q", v)
			}
		})
	}
}
