package testkit

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// Pools returns one quorumlock Pool per node, in node order, connected
// directly to the nodes (no proxy) with the cluster's password and named
// "node0", "node1"...; opts come after those names and win. A t.Cleanup
// closes them. It does not contact the servers; it fails the test with
// t.Fatalf if pool.Dial rejects opts.
func (c *Cluster) Pools(t testing.TB, opts ...pool.Option) []pool.Pool {
	t.Helper()
	addrs := c.Addrs()
	return dialPools(t, len(addrs), func(i int) string { return addrs[i] }, c.password, opts)
}

// LockClient returns a redlock.Client over the cluster's nodes, through
// Pools, with opts; a t.Cleanup closes it (releasing what it still holds)
// before its Pools. It fails the test with t.Fatalf if redlock.New rejects
// opts. Each call returns a Client with connections of its own, as a
// separate process would have.
func (c *Cluster) LockClient(t testing.TB, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return newLockClient(t, c.Pools(t), opts)
}

// ProxiedLockClient is LockClient through a new Proxy per node, returned in
// node order: faults set on proxies[i] affect this Client's link to node i
// alone.
func (c *Cluster) ProxiedLockClient(t testing.TB, opts ...redlock.Option) (*redlock.Client, []*Proxy) {
	t.Helper()
	proxies := make([]*Proxy, c.Len())
	for i := range proxies {
		proxies[i] = c.Node(i).Proxy(t)
	}
	pools := dialPools(t, len(proxies), func(i int) string { return proxies[i].Addr() }, c.password, nil)
	return newLockClient(t, pools, opts), proxies
}

func dialPools(t testing.TB, n int, addr func(int) string, password string, opts []pool.Option) []pool.Pool {
	t.Helper()
	pools := make([]pool.Pool, n)
	for i := range pools {
		p, err := pool.Dial(&redis.Options{Addr: addr(i), Password: password},
			append([]pool.Option{pool.WithName(fmt.Sprintf("node%d", i))}, opts...)...)
		if err != nil {
			t.Fatalf("testkit: pool.Dial node%d: %v", i, err)
		}
		t.Cleanup(func() { _ = p.Close() })
		pools[i] = p
	}
	return pools
}

func newLockClient(t testing.TB, pools []pool.Pool, opts []redlock.Option) *redlock.Client {
	t.Helper()
	cl, err := redlock.New(pools, opts...)
	if err != nil {
		t.Fatalf("testkit: redlock.New: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() }) // registered after the pools': runs first
	return cl
}
