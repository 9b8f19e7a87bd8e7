package testkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

// t stands for the *testing.T of the test that runs the example.
var t = &testing.T{}

// A lock held while a minority of the masters die and come back empty.
func ExampleStart() {
	cluster := testkit.Start(t, 5) // five independent Redis masters, removed when t ends
	client := cluster.LockClient(t, redlock.WithTTL(5*time.Second))
	ctx := context.Background()
	l, err := client.TryLock(ctx, "orders:42")
	if err != nil {
		t.Fatal(err)
	}
	_ = cluster.Node(0).Kill()        // SIGKILL: the server is gone
	_ = cluster.Node(1).Restart(true) // back, without its data
	if err := l.Extend(ctx, 0); err != nil {
		t.Fatal(err) // three of five still hold it: the lock survives
	}
}

// Faults between one client and one node: the other clients' links are
// untouched.
func ExampleCluster_ProxiedLockClient() {
	cluster := testkit.Start(t, 5)
	client, proxies := cluster.ProxiedLockClient(t, redlock.WithNodeTimeout(100*time.Millisecond))
	proxies[0].SetLatency(300 * time.Millisecond) // node 0 answers after the node timeout
	proxies[1].Blackhole(true)                    // node 1 is cut off from this client
	proxies[2].Hold(testkit.HoldAll)              // node 2 gets nothing until Deliver...
	_, err := client.TryLock(context.Background(), "k")
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatal(err) // only nodes 3 and 4 answered in time: 2 of 5 is no quorum
	}
	proxies[2].Deliver() // ...then receives the SET it was sent, late: the
	// client must take that key back (check the nodes with cluster.Clients)
}
