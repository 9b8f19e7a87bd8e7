package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRollbackRetriedAfterTimeout: a failed acquisition's roll-back that
// times out on a node (the delete may not have reached it) is sent again in
// the background, as Release does, and Close waits for it: the failed
// round's token does not stay on the node until its TTL. Before, the
// roll-back only logged the failure, and a busy node kept the token of a
// round that nobody holds (L2), as the stampede scenario of the integration
// suite showed under load.
func TestRollbackRetriedAfterTimeout(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithNodeTimeout(100 * time.Millisecond))
	for i := range 3 { // another holder's copies: the round must fail
		if err := e.nodes[i].m.Set(rkey("rb"), "other"); err != nil {
			t.Fatal(err)
		}
	}
	// Nodes 3 and 4 say yes first, so that the round is decided only
	// when the others' "taken" arrives and the roll-back goes to 3 and 4.
	for i := range 3 {
		e.nodes[i].fault.hold(true, "acquire")
	}
	time.AfterFunc(20*time.Millisecond, func() {
		for i := range 3 {
			e.nodes[i].fault.open()
		}
	})
	e.nodes[4].fault.hold(false, "release") // the roll-back to node 4 hangs
	_, err := c.TryLock(context.Background(), "rb")
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock with the key taken on 3 nodes = %v, want ErrNotAcquired", err)
	}
	if e.value(4, rkey("rb")) == "" {
		t.Fatal("node 4 does not hold the failed round's token: the test needs it there")
	}
	e.nodes[4].fault.open() // the node answers again
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if v := e.value(4, rkey("rb")); v != "" {
		t.Fatalf("after Close, node 4 still holds the failed round's token %q: the timed-out roll-back was not retried", v)
	}
	if v := e.value(3, rkey("rb")); v != "" {
		t.Fatalf("node 3 holds %q after the roll-back", v)
	}
}
