package pool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestRedlockOverClusters: a redlock Client over 3 Pools that are each a
// 3-master Redis Cluster takes, extends and releases locks with fencing, from
// concurrent goroutines on keys of every shard; a held key is refused, and
// the next holder's fencing token is higher.
func TestRedlockOverClusters(t *testing.T) {
	t.Parallel()
	var pools []pool.Pool
	for _, cc := range pool.StartTestClusters(t, 3) {
		p, err := pool.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		pools = append(pools, p)
	}
	c, err := redlock.New(pools, redlock.WithFencing(true), redlock.WithTTL(5*time.Second), redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for k := range 3 {
				if err := cycle(ctx, c, fmt.Sprintf("cluster-%d-%d", g, k)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// cycle takes key, checks that a second TryLock is refused, extends and
// releases it, and takes it again with a higher fencing token.
func cycle(ctx context.Context, c *redlock.Client, key string) error {
	l, err := c.TryLock(ctx, key)
	if err != nil {
		return fmt.Errorf("%s: TryLock: %w", key, err)
	}
	if l.Fence() == 0 {
		return fmt.Errorf("%s: no fencing token", key)
	}
	if _, err := c.TryLock(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
		return fmt.Errorf("%s: TryLock of a held key = %v, want ErrNotAcquired", key, err)
	}
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		return fmt.Errorf("%s: Extend: %w", key, err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("%s: Release: %w", key, err)
	}
	next, err := c.TryLock(ctx, key)
	if err != nil {
		return fmt.Errorf("%s: TryLock after Release: %w", key, err)
	}
	defer func() { _ = next.Release(ctx) }()
	if next.Fence() <= l.Fence() {
		return fmt.Errorf("%s: fencing token %d after %d, want higher", key, next.Fence(), l.Fence())
	}
	return nil
}
