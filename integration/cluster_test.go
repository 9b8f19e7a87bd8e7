package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/redisproc"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestClusterPools runs locks over three Redis Clusters of three masters
// each, one Pool per cluster (pool.New over a *redis.ClusterClient), as
// docs/deployments.md describes: a fenced TryLock refused to a second
// Client, Extend, Held and Release, a next holder's greater fence, keys
// with braces (their lock key, counter and line of waiters share a slot, or
// the scripts would fail with CROSSSLOT), a key beginning with '}' refused
// before any I/O, and a Lock waiting for a held key that a release
// notification wakes (its retry delay is a minute, the holder's TTL too).
// Client b connects as a user with exactly docs/deployments.md's ACL line,
// which must cover what a Cluster client sends (CLUSTER SLOTS).
func TestClusterPools(t *testing.T) {
	clusters := redisproc.StartClusters(t, 3, 3)
	rules := documentedACL(t)
	cmd := append([]any{"ACL", "SETUSER", "locker", "reset", "on", ">pw"}, anys(rules)...)
	for _, ss := range clusters {
		for _, s := range ss {
			cl := redisproc.NewClient(s.Addr(), "")
			err := cl.Do(context.Background(), cmd...).Err()
			_ = cl.Close()
			if err != nil {
				t.Fatalf("%s: ACL SETUSER: %v", s.Addr(), err)
			}
		}
	}
	a, b := clusterClient(t, clusters, ""), clusterClient(t, clusters, "locker")
	ctx := ctxT(t, 30*time.Second)
	for _, key := range []string{"orders", "a{b}c", "x}y", "{", "a}"} {
		t.Run(fmt.Sprintf("key %q", key), func(t *testing.T) { clusterLockCycle(t, ctx, a, b, key) })
	}
	_, err := a.TryLock(ctx, "}x", redlock.WithFencing(true))
	var qe *redlock.QuorumError
	if err == nil || errors.As(err, &qe) {
		t.Errorf("TryLock(\"}x\") = %v; want a plain error before any I/O", err)
	}
	clusterWaitWoken(t, ctx, clusters, a, b)
}

// clusterClient returns a Client over one Pool per cluster, each with a
// Cluster client of its own set up as pool.New's doc asks, connecting as
// user (password "pw") unless user is ""; Client, Pools and clients close
// at the end of the test.
func clusterClient(t *testing.T, clusters []redisproc.Servers, user string) *redlock.Client {
	t.Helper()
	pools := make([]pool.Pool, len(clusters))
	for i, ss := range clusters {
		o := &redis.ClusterOptions{Addrs: ss.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1}
		if user != "" {
			o.Username, o.Password = user, "pw"
		}
		cc := redis.NewClusterClient(o)
		t.Cleanup(func() { _ = cc.Close() })
		p, err := pool.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		pools[i] = p
	}
	c, err := redlock.New(pools, redlock.WithNodeTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// clusterLockCycle: a takes key fenced, b is refused; a extends, holds and
// releases; then b takes it with a greater fence and releases.
func clusterLockCycle(t *testing.T, ctx context.Context, a, b *redlock.Client, key string) {
	la, err := a.TryLock(ctx, key, redlock.WithFencing(true))
	if err != nil {
		t.Fatalf("a: TryLock: %v", err)
	}
	if la.Fence() == 0 {
		t.Error("a: fence 0 with fencing on")
	}
	if _, err := b.TryLock(ctx, key, redlock.WithFencing(true)); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Errorf("b: TryLock of a held key = %v, want ErrNotAcquired", err)
	}
	if err := la.Extend(ctx, 20*time.Second); err != nil {
		t.Errorf("a: Extend: %v", err)
	}
	if held, err := la.Held(ctx); !held || err != nil {
		t.Errorf("a: Held = %v, %v; want true, nil", held, err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("a: Release: %v", err)
	}
	lb, err := b.TryLock(ctx, key, redlock.WithFencing(true))
	if err != nil {
		t.Fatalf("b: TryLock after the release: %v", err)
	}
	if lb.Fence() <= la.Fence() {
		t.Errorf("b's fence %d is not above a's %d", lb.Fence(), la.Fence())
	}
	if err := lb.Release(ctx); err != nil {
		t.Errorf("b: Release: %v", err)
	}
}

// clusterWaitWoken: b's Lock of a key a holds for a minute, retrying only
// every minute, subscribes on every cluster and is woken by a's release.
func clusterWaitWoken(t *testing.T, ctx context.Context, clusters []redisproc.Servers, a, b *redlock.Client) {
	const key = "wait"
	la, err := a.TryLock(ctx, key, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("a: TryLock: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		lb, err := b.Lock(ctx, key, redlock.WithRetryBackoff(time.Minute, time.Minute))
		if err == nil {
			err = lb.Release(context.Background())
		}
		got <- err
	}()
	eventually(t, 10*time.Second, 5*time.Millisecond, "b subscribed to "+rkey(key)+" on every cluster", func() bool {
		for _, ss := range clusters {
			if subscribers(ss, rkey(key)) < 1 {
				return false
			}
		}
		return true
	})
	if err := la.Release(ctx); err != nil {
		t.Fatalf("a: Release: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("b: Lock woken by the release: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("b's Lock was not woken by the release notification")
	}
}

// subscribers counts the subscribers of channel on the servers of one
// cluster (PUBSUB NUMSUB counts a node's own).
func subscribers(ss redisproc.Servers, channel string) int64 {
	var n int64
	for _, s := range ss {
		cl := redisproc.NewClient(s.Addr(), "")
		m, err := cl.PubSubNumSub(context.Background(), channel).Result()
		_ = cl.Close()
		if err == nil {
			n += m[channel]
		}
	}
	return n
}

// anys returns ss as command arguments.
func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
