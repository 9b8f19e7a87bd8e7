package pool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// testCluster is one Redis Cluster of local redis-server processes (no
// replicas), each master serving an equal range of slots.
type testCluster struct {
	srvs []*redisproc.Server
	ids  []string        // node ids, by server
	cs   []*redis.Client // a direct client per server
}

// clusterFormed bounds the wait for a new cluster to agree on its slots.
const clusterFormed = 30 * time.Second

// startClusters starts n clusters of masters nodes each, in parallel, and
// returns once every node reports cluster_state:ok. A t.Cleanup stops every
// process (by its own pid) and removes its directory.
func startClusters(t testing.TB, n, masters int) []*testCluster {
	t.Helper()
	bin, err := redisproc.FindBinary()
	if err != nil {
		t.Fatalf("redisproc: %v (%s)", err, redisproc.InstallHint())
	}
	dir, err := redisproc.TempDir()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*testCluster, n)
	t.Cleanup(func() {
		for _, tc := range out {
			tc.remove(t)
		}
		_ = os.RemoveAll(dir)
	})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		out[i] = &testCluster{}
		wg.Go(func() { errs[i] = out[i].start(bin, filepath.Join(dir, fmt.Sprint("c", i)), masters) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("cluster %d: %v", i, err)
		}
	}
	return out
}

// start launches the nodes, gives each its range of slots, joins them and
// waits until every node sees the whole cluster.
func (tc *testCluster) start(bin, dir string, masters int) error {
	extra := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000", "--appendonly", "no"}
	ctx := context.Background()
	for i := range masters {
		s, _, err := redisproc.StartOnFreePort(func(port int) (*redisproc.Server, error) {
			return redisproc.New(bin, filepath.Join(dir, fmt.Sprint("node", i)), port, redisproc.Args("", extra))
		}, "")
		if err != nil {
			return err
		}
		tc.srvs = append(tc.srvs, s)
		c := redisproc.NewClient(s.Addr(), "")
		tc.cs = append(tc.cs, c)
		id, err := c.ClusterMyID(ctx).Result()
		if err != nil {
			return err
		}
		tc.ids = append(tc.ids, id)
		lo, hi := i*16384/masters, (i+1)*16384/masters-1
		if err := c.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return err
		}
	}
	for _, s := range tc.srvs[1:] {
		host, port, _ := strings.Cut(s.Addr(), ":")
		if err := tc.cs[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			return err
		}
	}
	return tc.waitOK(masters)
}

// waitOK polls every node until it reports cluster_state:ok with all the
// masters known.
func (tc *testCluster) waitOK(masters int) error {
	want := fmt.Sprintf("cluster_known_nodes:%d", masters)
	for end := time.Now().Add(clusterFormed); ; time.Sleep(20 * time.Millisecond) {
		ok := true
		for _, c := range tc.cs {
			info, err := c.ClusterInfo(context.Background()).Result()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want)
		}
		if ok {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("no cluster_state:ok on every node within %v", clusterFormed)
		}
	}
}

// moveSlot moves an empty slot from server from to server to as a
// resharding does (IMPORTING, MIGRATING, then NODE on every node, the new
// owner first, which bumps its config epoch) and waits until every node
// names the new owner.
func (tc *testCluster) moveSlot(t testing.TB, slot, from, to int) {
	t.Helper()
	ctx := context.Background()
	steps := []struct {
		node int
		args []any
	}{
		{to, []any{"importing", tc.ids[from]}},
		{from, []any{"migrating", tc.ids[to]}},
		{to, []any{"node", tc.ids[to]}},
		{from, []any{"node", tc.ids[to]}},
	}
	for i := range tc.cs {
		if i != from && i != to {
			steps = append(steps, struct {
				node int
				args []any
			}{i, []any{"node", tc.ids[to]}})
		}
	}
	for _, s := range steps {
		if err := tc.cs[s.node].Do(ctx, append([]any{"cluster", "setslot", slot}, s.args...)...).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d %v on node %d: %v", slot, s.args, s.node, err)
		}
	}
	for end := time.Now().Add(clusterFormed); !tc.owns(slot, to); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("slot %d: not every node names node %d its owner within %v", slot, to, clusterFormed)
		}
	}
}

// owns reports whether every node names server to the owner of slot.
func (tc *testCluster) owns(slot, to int) bool {
	for _, c := range tc.cs {
		shards, err := c.ClusterShards(context.Background()).Result()
		if err != nil || owner(shards, int64(slot)) != tc.ids[to] {
			return false
		}
	}
	return true
}

// owner returns the id of the master that serves slot in shards.
func owner(shards []redis.ClusterShard, slot int64) string {
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start <= slot && slot <= r.End {
				for _, n := range sh.Nodes {
					if n.Role == "master" {
						return n.ID
					}
				}
			}
		}
	}
	return ""
}

func (tc *testCluster) remove(t testing.TB) {
	for _, c := range tc.cs {
		_ = c.Close()
	}
	for _, s := range tc.srvs {
		if err := s.Remove(); err != nil {
			t.Errorf("removing %s: %v", s.Addr(), err)
		}
	}
}

func (tc *testCluster) addrs() []string {
	out := make([]string, len(tc.srvs))
	for i, s := range tc.srvs {
		out[i] = s.Addr()
	}
	return out
}

// client returns a Cluster client of tc set up as pool.New asks
// (ContextTimeoutEnabled, no retries), closed by a t.Cleanup; before is
// called on it before its first command.
func (tc *testCluster) client(t testing.TB, before func(*redis.ClusterClient)) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                      tc.addrs(),
		ContextTimeoutEnabled:      true,
		MaxRetries:                 -1,
		ClusterStateReloadInterval: time.Hour, // only redirects reload the slot map
	})
	if before != nil {
		before(cc)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// StartTestClusters starts n Redis Clusters of 3 masters each for the
// external tests of this package and returns Cluster clients on them, set
// up as New asks; t.Cleanup closes the clients and stops the servers.
func StartTestClusters(t testing.TB, n int) []*redis.ClusterClient {
	t.Helper()
	var out []*redis.ClusterClient
	for _, tc := range startClusters(t, n, 3) {
		out = append(out, tc.client(t, nil))
	}
	return out
}
