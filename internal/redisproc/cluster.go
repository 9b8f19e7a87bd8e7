package redisproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// StartClusters starts n independent Redis Clusters of masters masters each
// (no replicas), as redis-server processes with cluster-enabled yes on
// 127.0.0.1, and returns each cluster's servers once every node reports
// cluster_state:ok and knows every other. The slots are split into equal
// ranges, one per master (CLUSTER ADDSLOTSRANGE), and the first master
// introduces the others (CLUSTER MEET). A t.Cleanup kills every process it
// started, by its own pid, and removes their directory, also when the start
// fails; a failure fails the test with t.Fatalf.
func StartClusters(t testing.TB, n, masters int) []Servers {
	t.Helper()
	bin, dir := binAndDir(t)
	out := make([]Servers, n)
	t.Cleanup(func() {
		for _, ss := range out {
			for _, s := range ss {
				if err := s.Remove(); err != nil {
					t.Errorf("redisproc: removing %s: %v", s.Addr(), err)
				}
			}
		}
		_ = os.RemoveAll(dir)
	})
	buses := map[*Server]int{}
	for c := range n {
		for m := range masters {
			s, bus, err := startClusterNode(bin, filepath.Join(dir, fmt.Sprintf("cluster%d-node%d", c, m)))
			if err != nil {
				t.Fatalf("redisproc: cluster %d, node %d: %v", c, m, err)
			}
			out[c] = append(out[c], s)
			buses[s] = bus
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	for c, ss := range out {
		if err := formCluster(ctx, ss, buses); err != nil {
			t.Fatalf("redisproc: cluster %d: %v", c, err)
		}
	}
	for c, ss := range out {
		if err := waitClusterOK(ctx, ss); err != nil {
			t.Fatalf("redisproc: cluster %d: %v", c, err)
		}
	}
	return out
}

// startClusterNode starts one cluster-enabled server under dir (a directory
// per port it tries) with a cluster bus port of its own (cluster-port: the
// default, port + 10000, may be taken or out of range), and returns it and
// its bus port.
func startClusterNode(bin, dir string) (*Server, int, error) {
	var bus int
	s, _, err := StartOnFreePort(func(port int) (*Server, error) {
		var err error
		if bus, err = PickPort(); err != nil {
			return nil, err
		}
		return New(bin, fmt.Sprintf("%s-port%d", dir, port), port, Args("", []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "5000",
		}))
	}, "")
	return s, bus, err
}

// formCluster gives each server of ss an equal range of the slots and has
// the first meet the others.
func formCluster(ctx context.Context, ss Servers, buses map[*Server]int) error {
	first := NewClient(ss[0].Addr(), "")
	defer first.Close()
	for i, s := range ss {
		cl := NewClient(s.Addr(), "")
		lo, hi := i*clusterSlots/len(ss), (i+1)*clusterSlots/len(ss)-1
		err := cl.Do(ctx, "cluster", "addslotsrange", lo, hi).Err()
		_ = cl.Close()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", s.Addr(), lo, hi, err)
		}
		if i == 0 {
			continue
		}
		if err := first.Do(ctx, "cluster", "meet", "127.0.0.1", s.port, buses[s]).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER MEET %s: %w", ss[0].Addr(), s.Addr(), err)
		}
	}
	return nil
}

// waitClusterOK polls CLUSTER INFO on every server of ss until each reports
// cluster_state:ok and knows all of ss, or ctx ends; the error then names
// the last server that was not ready and what it said.
func waitClusterOK(ctx context.Context, ss Servers) error {
	clients := make([]*redis.Client, len(ss))
	for i, s := range ss {
		clients[i] = NewClient(s.Addr(), "")
		defer clients[i].Close()
	}
	want := fmt.Sprintf("cluster_known_nodes:%d", len(ss))
	for {
		var notReady error
		for i, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && (!strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want)) {
				err = fmt.Errorf("not formed yet:\n%s", info)
			}
			if err != nil {
				notReady = fmt.Errorf("%s: %w\n--- log tail ---\n%s", ss[i].Addr(), err, ss[i].LogTail())
				break
			}
		}
		if notReady == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no cluster_state:ok within %v: %w", ReadyTimeout, notReady)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StartSentinel starts one Sentinel (redis-server --sentinel) on 127.0.0.1
// that monitors each server of masters under the name "master<i>" (quorum
// 1), and returns its address once it names every master. A t.Cleanup
// kills it, by its own pid, and removes its directory; a failure fails the
// test with t.Fatalf. One Sentinel is enough to name masters for tests; it
// is not a failover setup.
func StartSentinel(t testing.TB, masters Servers) string {
	t.Helper()
	bin, dir := binAndDir(t)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	port, err := PickPort()
	if err != nil {
		t.Fatalf("redisproc: %v", err)
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "port %d\nbind 127.0.0.1\ndir %s\n", port, dir)
	for i, m := range masters {
		fmt.Fprintf(&conf, "sentinel monitor master%d 127.0.0.1 %d 1\n", i, m.port)
	}
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
		t.Fatalf("redisproc: %v", err)
	}
	logf, err := os.Create(filepath.Join(dir, "sentinel.log"))
	if err != nil {
		t.Fatalf("redisproc: %v", err)
	}
	cmd := exec.Command(bin, path, "--sentinel")
	cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = logf, logf, procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("redisproc: starting a Sentinel: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	addr := Addr(port)
	if err := waitSentinel(addr, len(masters)); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
		t.Fatalf("redisproc: Sentinel %s: %v\n--- log tail ---\n%s", addr, err, Tail(string(b), 20))
	}
	return addr
}

// waitSentinel polls the Sentinel at addr until it names the address of
// master0 to master<n-1>, or ReadyTimeout passes.
func waitSentinel(addr string, n int) error {
	deadline := time.Now().Add(ReadyTimeout)
	for { // PING first: go-redis logs every refused dial
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := Ping(ctx, addr, "")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PING answer within %v: %w", ReadyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer s.Close()
	for i := 0; i < n; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := s.GetMasterAddrByName(ctx, fmt.Sprintf("master%d", i)).Result()
		cancel()
		switch {
		case err == nil:
			i++
		case time.Now().After(deadline):
			return fmt.Errorf("no address for master%d within %v: %w", i, ReadyTimeout, err)
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// binAndDir returns the server binary and a new directory for a test's
// servers, or fails the test.
func binAndDir(t testing.TB) (bin, dir string) {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		t.Fatalf("redisproc: %v (apt-get install redis-server)", err)
	}
	if dir, err = TempDir(); err != nil {
		t.Fatalf("redisproc: %v", err)
	}
	return bin, dir
}
