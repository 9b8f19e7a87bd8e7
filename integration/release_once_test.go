package integration

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
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
	ps[4].HoldWrite(rkey(key)) // the SET, not a health check or a pool's set-up written first
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// TryLock returns at a quorum: node4's SET may not be written yet.
	eventually(t, 5*time.Second, 5*time.Millisecond, "node4's SET held in its link", func() bool { return ps[4].Held() > 0 })
	if v := get(t, admins[4], rkey(key)); v != "" {
		t.Fatalf("node4: %s = %q while its SET is held", key, v)
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
