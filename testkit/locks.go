package testkit

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// ClientOptions says how DialClient makes a redlock.Client over a Cluster.
// Every field may be left zero.
type ClientOptions struct {
	// Redis adjusts node i's go-redis options after DialClient has set the
	// node's address and the cluster's password: to reach the node
	// through a Proxy (set Addr to the proxy's), as another ACL user, with
	// other buffer sizes...
	Redis func(i int, o *redis.Options)
	// Pool holds the options of every pool.Dial, after the name "node<i>"
	// (so a pool.WithName here wins).
	Pool []pool.Option
	// Wrap, if set, wraps node i's Pool before the Client gets it (for
	// example with history.RecordReplies); on its error the Pool is closed.
	Wrap func(i int, p pool.Pool) (pool.Pool, error)
	// Lock holds the options of redlock.New.
	Lock []redlock.Option
}

// DialClient makes a redlock.Client over the cluster's nodes as o says and
// returns it with its Pools, in node order. It fails no test and registers
// no clean-up, so any goroutine may call it: the caller closes the Client,
// then the Pools. On an error (pool.Dial, Wrap or redlock.New rejected
// their options) it closes what it made and returns the error, naming the
// node. It does not contact the servers.
func (c *Cluster) DialClient(o ClientOptions) (*redlock.Client, []pool.Pool, error) {
	pools, err := c.dialPools(o)
	if err != nil {
		return nil, nil, err
	}
	cl, err := redlock.New(pools, o.Lock...)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("testkit: redlock.New: %w", err), closeAll(pools))
	}
	return cl, pools, nil
}

// dialPools dials one Pool per node as o says (all but o.Lock).
func (c *Cluster) dialPools(o ClientOptions) ([]pool.Pool, error) {
	var pools []pool.Pool
	for i := range c.Len() {
		ro := &redis.Options{Addr: c.Node(i).Addr(), Password: c.password}
		if o.Redis != nil {
			o.Redis(i, ro)
		}
		p, err := pool.Dial(ro, slices.Concat([]pool.Option{pool.WithName(fmt.Sprintf("node%d", i))}, o.Pool)...)
		if err == nil && o.Wrap != nil {
			w, werr := o.Wrap(i, p)
			if werr != nil {
				_ = p.Close()
			}
			p, err = w, werr
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("testkit: pool of node%d: %w", i, err), closeAll(pools))
		}
		pools = append(pools, p)
	}
	return pools, nil
}

func closeAll(pools []pool.Pool) error {
	var errs []error
	for _, p := range pools {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Pools returns one quorumlock Pool per node, in node order, connected
// directly to the nodes (no proxy) with the cluster's password and named
// "node0", "node1"...; opts come after those names and win. A t.Cleanup
// closes them. It does not contact the servers; it fails the test with
// t.Fatalf if pool.Dial rejects opts.
func (c *Cluster) Pools(t testing.TB, opts ...pool.Option) []pool.Pool {
	t.Helper()
	pools, err := c.dialPools(ClientOptions{Pool: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeAll(pools) })
	return pools
}

// LockClient returns a redlock.Client over the cluster's nodes with opts,
// made by DialClient; a t.Cleanup closes it (releasing what it still holds)
// and then its Pools. It fails the test with t.Fatalf if redlock.New rejects
// opts. Each call returns a Client with connections of its own, as a
// separate process would have.
func (c *Cluster) LockClient(t testing.TB, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return c.lockClient(t, ClientOptions{Lock: opts})
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
	via := func(i int, o *redis.Options) { o.Addr = proxies[i].Addr() }
	return c.lockClient(t, ClientOptions{Redis: via, Lock: opts}), proxies
}

func (c *Cluster) lockClient(t testing.TB, o ClientOptions) *redlock.Client {
	t.Helper()
	cl, pools, err := c.DialClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Close()
		_ = closeAll(pools)
	})
	return cl
}
