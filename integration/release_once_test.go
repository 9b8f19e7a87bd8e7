package integration

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

// TestReleaseAheadOfLateSetDeletesOnce: a Release that ends while node4's
// SET is still held in its link. The release is held back from node4 (no
// delete may overtake its SET); when the SET lands, after the release round
// ended, node4 runs one delete, the late yes's, and the key is gone. Before,
// the release round also took its held-back delete, never sent, for one of
// unknown fate, and re-sent it for TTL + the cleanup budget while it found
// nothing (issue 32: one cycle in four of the overload harness's normal
// phase started such re-sends).
func TestReleaseAheadOfLateSetDeletesOnce(t *testing.T) {
	const key = "ahead"
	c := startCluster(t, lateTTL, "")
	admins := c.admins(t)
	ctx := ctxT(t, 60*time.Second)
	ps, via := c.proxyEach(t)
	a := c.newLockClient(t, "a", via, redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(time.Second), redlock.WithAutoExtend(false))
	warm(t, ctx, a)
	time.Sleep(1500 * time.Millisecond) // the Pools set their connections up a second after the first answer (pool/warm.go)
	warm(t, ctx, a)                     // so that the hold catches the SET, not that set-up
	ps[4].Hold(testkit.HoldNext)
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if ps[4].Held() == 0 || get(t, admins[4], rkey(key)) != "" {
		t.Fatalf("node4: the SET was not held in its link (%d bytes held, %s = %q)", ps[4].Held(), key, get(t, admins[4], rkey(key)))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, admins[4])
	if ps[4].Deliver() == 0 {
		t.Fatal("node4: nothing held to deliver")
	}
	eventually(t, 5*time.Second, 5*time.Millisecond, "node4 runs the SET and its delete", func() bool {
		return scriptCalls(t, admins[4]) >= before+2 && get(t, admins[4], rkey(key)) == ""
	})
	a.closeAndCheck(t) // sends what is pending at once, and waits for it
	if n := scriptCalls(t, admins[4]) - before; n != 2 {
		t.Errorf("node4 ran %d scripts once the SET was delivered, want 2 (the SET and one delete)", n)
	}
}
