package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// TestCloseWhileSubscriptionRedials checks that Client.Close does not wait
// for a release-notice subscription that is setting up a new connection to
// a node that accepts connections but never answers (issue 11, item 6).
//
// A Lock call waits for a held key, so the Client subscribes to the key on
// every node. Then node0's proxy is blackholed and its connections reset:
// the subscription's connection breaks and go-redis redials at once; the
// new connection is accepted but its handshake (HELLO, then the restart
// guard's INFO) is never answered. The pools' go-redis ReadTimeout is a
// minute, so that nothing but the library's own bounds can end that
// handshake before the test's safety bound (with go-redis' default of 3 s
// a stuck handshake only makes Close slow, 4.8 s in the issue, rather than
// observably stuck). Close must return while the blackhole is still on: it
// is lifted only after Close returned, or after a safety bound of 20 s, and
// then the test fails.
func TestCloseWhileSubscriptionRedials(t *testing.T) {
	const (
		ttl    = 30 * time.Second
		key    = "close-while-redialling"
		safety = 20 * time.Second
	)
	c := startCluster(t, ttl, "")
	ps, via := c.proxyEach(t)
	admins := c.admins(t)
	holder := c.newLockClient(t, "holder", c.direct, redlock.WithTTL(ttl))
	waiter := c.newLockClient(t, "waiter", func(i int) *redis.Options {
		o := via(i)
		o.ReadTimeout = time.Minute
		return o
	}, redlock.WithTTL(ttl), redlock.WithNodeTimeout(patient))

	if _, err := holder.TryLock(ctxT(t, 10*time.Second), key); err != nil {
		t.Fatalf("holder: TryLock: %v", err)
	}
	// One failed attempt, then a wait of at least 30 s: the waiter is
	// subscribed, and no attempt of it is in flight when node0 goes silent.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locked := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, key, redlock.WithRetryBackoff(time.Minute, time.Minute))
		locked <- err
	}()
	eventually(t, 10*time.Second, 5*time.Millisecond, "the waiter subscribed to "+rkey(key)+" on every node", func() bool {
		for _, a := range admins {
			n, err := a.PubSubNumSub(context.Background(), rkey(key)).Result()
			if err != nil || n[rkey(key)] != 1 {
				return false
			}
		}
		return true
	})

	// Nothing else of the waiter talks to node0 now: a connection accepted
	// after the reset is the subscription's redial.
	ps[0].Blackhole(true)
	before := ps[0].Accepted()
	ps[0].Reset() // breaks the subscription's connection: go-redis redials
	eventually(t, 10*time.Second, time.Millisecond, "the subscription redialled node0 through the blackhole", func() bool {
		return ps[0].Accepted() > before
	})

	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- waiter.Close() }()
	select {
	case err := <-closed:
		took := time.Since(start)
		ps[0].Blackhole(false)
		if err != nil {
			t.Errorf("Close: %v", err)
		}
		t.Logf("Close returned after %v, node0 still blackholed", took.Round(10*time.Microsecond))
	case <-time.After(safety):
		ps[0].Blackhole(false) // ends the handshake: the proxy closes the connection
		err := <-closed
		t.Errorf("Close did not return within %v while the subscription's handshake with node0 hung; it returned (err %v) %v after the blackhole was lifted",
			safety, err, (time.Since(start) - safety).Round(time.Millisecond))
	}
	cancel()
	if err := <-locked; !errors.Is(err, context.Canceled) && !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("waiter: Lock returned %v, want an error matching context.Canceled or ErrClosed", err)
	}
}
