package integration

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestSessionLostLockDeletedOnce: a session lock is won while its acquire
// to node 4 is held in the link, and lost (its session ended on the nodes)
// before that acquire lands. When it lands it says yes, and the
// lock's late answer deletes the key there. The lock's Release afterwards
// must not send node 4 another delete: the late answer's delete freed it
// (the simulator's seed 23343, property RD; -tags quorumlock_bug_lostresend
// puts the second delete back, and this test fails with it).
func TestSessionLostLockDeletedOnce(t *testing.T) {
	const ttl = 2 * time.Second
	r, x := newSessionRig(t, ttl, "lost-x") // the session exists on every node
	ctx, admins, proxies, a := r.ctx, r.admins, r.proxies, r.a
	wl, err := a.TryLock(ctx, "lost-warm")
	if err == nil {
		err = wl.Release(ctx)
	}
	if err != nil {
		t.Fatalf("warm-up cycle (the release script cached on every node): %v", err)
	}
	quietLinks(t, ctx, x, ttl)
	proxies[4].HoldWrite(rkey("lost-y"))
	start := time.Now()
	ly, err := a.TryLock(ctx, "lost-y")
	if err != nil {
		t.Fatalf("TryLock with node 4's link holding: %v", err)
	}
	eventually(t, time.Second, time.Millisecond, "node 4's acquire of lost-y held in its link", func() bool { return proxies[4].Held() > 0 })
	// End the session on every node, as its expiry would, and renew it now:
	// the lock is lost well within the follow budget of its acquire round
	// (2 s), so that node 4's yes, landing next, is read as a late answer.
	sk, ok := sessionOf(rkey("lost-y"), get(t, admins[0], rkey("lost-y")))
	if !ok {
		t.Fatalf("node0: lost-y is no session lock's key")
	}
	for _, cl := range admins {
		if err := cl.Del(ctx, sk).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_ = ly.Extend(ctx, ttl)
	select {
	case <-ly.Done():
	case <-time.After(time.Second):
		t.Fatal("premise: lost-y not lost within 1 s of its session's end")
	}
	deletes := watchDeletes(t, admins[4].Options().Addr, rkey("lost-y"))
	proxies[4].Deliver()
	t.Logf("node 4's acquire delivered %v after TryLock began (its round's follow budget: 2 s)", time.Since(start).Round(time.Millisecond))
	eventually(t, 5*time.Second, 5*time.Millisecond, "the late yes on node 4 deleted there", func() bool {
		return deletes() >= 1 && get(t, admins[4], rkey("lost-y")) == ""
	})
	if err := ly.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Release of the lost lock: %v, want ErrNotHeld", err)
	}
	time.Sleep(time.Second) // the Release's commands, and any re-send, have gone out
	if n := deletes(); n != 1 {
		t.Errorf("node 4 was sent %d deletes of lost-y after its late yes, want 1 (the late answer's)", n)
	}
}

// watchDeletes follows the MONITOR stream of the server at addr until the
// test ends and returns a function that counts the release scripts run on
// rkey so far.
func watchDeletes(t *testing.T, addr, rkey string) func() int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q, %v", l, err)
	}
	sha, key := `"`+scripts.Release.Hash()+`"`, `"`+rkey+`"`
	var n atomic.Int64
	done := make(chan struct{})
	t.Cleanup(func() { _ = conn.Close(); <-done }) // runs first: the reader ends with the connection
	go func() {
		defer close(done)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return // closed at the test's end (or, before, a failed read)
			}
			if strings.Contains(l, sha) && strings.Contains(l, key) {
				n.Add(1)
			}
		}
	}()
	return func() int { return int(n.Load()) }
}
