package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	t.Run("auto-extended locks renewed together", func(t *testing.T) { clusterRenewMany(t, ctx, a) })
}

// clusterRenewMany: locks of keys in different slots, due for renewal at
// once, stay held for several TTLs: their renewals are batched per slot
// (one command over keys of several slots fails with CROSSSLOT).
func clusterRenewMany(t *testing.T, ctx context.Context, c *redlock.Client) {
	var ls []*redlock.Lock
	for i := range 12 {
		l, err := c.TryLock(ctx, fmt.Sprintf("renewed-%d", i), redlock.WithTTL(2*time.Second), redlock.WithAutoExtend(true))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	time.Sleep(5 * time.Second) // 2.5 TTLs: every lock renewed at least twice
	for i, l := range ls {
		if held, err := l.Held(ctx); !held || err != nil || l.Err() != nil {
			t.Errorf("lock %d: Held = %v, %v; Err = %v: an auto-extended lock on Cluster pools was not renewed", i, held, err, l.Err())
		}
		_ = l.Release(ctx)
	}
}

// clusterClient returns a Client (node timeout patient) over one Pool per
// cluster, as clusterPoolsClient makes them, authenticated as user ("":
// the default user, else with password "pw").
func clusterClient(t *testing.T, clusters []redisproc.Servers, user string) *redlock.Client {
	return clusterPoolsClient(t, clusters, func(o *redis.ClusterOptions) {
		if user != "" {
			o.Username, o.Password = user, "pw"
		}
	}, redlock.WithNodeTimeout(patient))
}

// clusterPoolsClient returns a Client with opts over one Pool per cluster,
// each over a Cluster client of its own seeded with the cluster's addresses,
// set up as pool.New's doc asks and then by set. Client, Pools and Cluster
// clients close at the end of the test.
func clusterPoolsClient(t *testing.T, clusters []redisproc.Servers, set func(*redis.ClusterOptions), opts ...redlock.Option) *redlock.Client {
	t.Helper()
	pools := make([]pool.Pool, len(clusters))
	for i, ss := range clusters {
		o := &redis.ClusterOptions{Addrs: ss.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1}
		set(o)
		cc := redis.NewClusterClient(o)
		t.Cleanup(func() { _ = cc.Close() })
		p, err := pool.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		pools[i] = p
	}
	c, err := redlock.New(pools, opts...)
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

// TestSentinelPools: three Sentinel-managed masters as three Pools. A Pool
// over redis.NewFailoverClient without a name is refused with advice (every
// such client calls itself "FailoverClient"); pool.DialFailover names each
// Pool after its master, redlock.New accepts the three, and a fenced lock
// is taken on the masters the Sentinel names and released. The restart
// guard checks the masters' connections, not the Sentinel's (whose run_id
// would read as a restart of the master): the default guard lets the fresh
// masters in, and a strict one refuses them.
func TestSentinelPools(t *testing.T) {
	masters := redisproc.Start(t, 3)
	sentinel := redisproc.StartSentinel(t, masters)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "master0", SentinelAddrs: []string{sentinel}})
	t.Cleanup(func() { _ = fc.Close() })
	if _, err := pool.New(fc); err == nil || !strings.Contains(err.Error(), "DialFailover") {
		t.Errorf("pool.New(failover client) = %v, want advice to use DialFailover or WithName", err)
	}
	ctx := ctxT(t, 10*time.Second)
	strict := sentinelClient(t, len(masters), sentinel, pool.WithStrictRestartGuard())
	_, err := strict.TryLock(ctx, "sentinel")
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("TryLock with a strict restart guard on masters up for seconds = %v, want a *QuorumError", err)
	}
	for _, n := range qe.Nodes {
		if !errors.Is(n.Err, pool.ErrRestarted) {
			t.Errorf("strict restart guard: %s: %v, want pool.ErrRestarted", n.Node, n.Err)
		}
	}
	c := sentinelClient(t, len(masters), sentinel)
	l, err := c.TryLock(ctx, "sentinel", redlock.WithFencing(true))
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	held := 0
	for _, cl := range masters.Clients(t) {
		if v, _ := cl.Get(ctx, rkey("sentinel")).Result(); v == l.Token() {
			held++
		}
	}
	if held < 2 {
		t.Errorf("the token is on %d of the 3 masters, want a quorum", held)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// sentinelClient returns a Client over one pool.DialFailover Pool per
// master the Sentinel at sentinel names (master0 ...), with opts; Client and
// Pools close at the end of the test.
func sentinelClient(t *testing.T, n int, sentinel string, opts ...pool.Option) *redlock.Client {
	t.Helper()
	pools := make([]pool.Pool, n)
	for i := range n {
		p, err := pool.DialFailover(&redis.FailoverOptions{MasterName: fmt.Sprintf("master%d", i), SentinelAddrs: []string{sentinel}}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		if want := fmt.Sprintf("sentinel:master%d", i); p.Name() != want {
			t.Errorf("pool %d is named %q, want %q", i, p.Name(), want)
		}
		pools[i] = p
	}
	c, err := redlock.New(pools, redlock.WithNodeTimeout(patient))
	if err != nil {
		t.Fatalf("redlock.New over %d Sentinel pools: %v", n, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
