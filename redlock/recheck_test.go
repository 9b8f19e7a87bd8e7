package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/pool"
)

// lateSetPool answers Acquire with a broken connection at once, while the
// SET is still on its way: it lands only after the first Release that
// reaches the node has run (and found nothing), as a command held in a
// proxy or the network lands after a release sent on another connection.
type lateSetPool struct {
	pool.Pool
	mu      sync.Mutex
	pending func() // the SET still on its way
}

var errReset = errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")

func (p *lateSetPool) Acquire(_ context.Context, key, token string, ttl time.Duration) (bool, error) {
	p.mu.Lock()
	p.pending = func() { _, _ = p.Pool.Acquire(context.Background(), key, token, ttl) }
	p.mu.Unlock()
	return false, errReset
}

func (p *lateSetPool) Release(ctx context.Context, key, token string) (bool, error) {
	ok, err := p.Pool.Release(ctx, key, token)
	p.mu.Lock()
	land := p.pending
	p.pending = nil
	p.mu.Unlock()
	if land != nil {
		land()
	}
	return ok, err
}

// TestRollbackOfSetLandingLate: a node whose acquire failed with a broken
// connection gets a release; when that release finds nothing and the SET
// lands after it, a second release after recheckDelay takes the token back,
// and Close waits for it. Before, the token stayed until its TTL.
func TestRollbackOfSetLandingLate(t *testing.T) {
	e := newEnv(t, 5)
	for i := range 3 { // another holder: the round fails
		if err := e.nodes[i].m.Set(rkey("late"), "other"); err != nil {
			t.Fatal(err)
		}
	}
	e.pools[4] = &lateSetPool{Pool: e.pools[4]}
	c := e.client(WithNodeTimeout(100*time.Millisecond), WithTTL(time.Hour))
	_, err := c.TryLock(context.Background(), "late")
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock = %v, want ErrNotAcquired", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if v := e.value(4, rkey("late")); v != "" {
		t.Fatalf("node 4 holds the failed round's token %q after Close: the SET that landed after the first release was not taken back", v)
	}
	if v := e.value(3, rkey("late")); v != "" {
		t.Fatalf("node 3 holds %q after the roll-back", v)
	}
}
