package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/pool"
)

// stuckIDPool is a Pool whose RunID does not answer until unstuck is
// closed, whatever its context says: a node that accepts connections but
// never answers (paused).
type stuckIDPool struct {
	pool.Pool
	unstuck chan struct{}
}

func (p *stuckIDPool) RunID(context.Context) (string, error) {
	<-p.unstuck
	return "late-run-id", nil
}

// TestFirstCheckDoesNotWaitForSilentNode: a Client's first operation needs
// a quorum of verified nodes, not every node's answer: with one node that
// never answers its identity check, TryLock goes on once 4 are verified
// (and a node timeout has passed), instead of waiting for the silent one.
// The silent node is not asked meanwhile, and counts once it answers.
func TestFirstCheckDoesNotWaitForSilentNode(t *testing.T) {
	e := newEnv(t, 5)
	stuck := &stuckIDPool{Pool: e.pools[4], unstuck: make(chan struct{})}
	pools := append(append([]pool.Pool(nil), e.pools[:4]...), stuck)
	c, err := New(pools, WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(context.Background(), "silent")
		if err == nil && e.value(4, rkey("silent")) != "" {
			t.Error("the unverified node was asked")
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second): // a hang detector, not a speed bound
		t.Fatal("TryLock waits for the identity of a node that does not answer")
	}
	close(stuck.unstuck)
	for !c.ids.Verified(4) {
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
