package main

// The cluster scenario (issue 17): Pools that are each a Redis Cluster.
//
// It starts 3 Redis Clusters of 3 masters each (9 more redis-server
// processes, cluster-enabled, slots split evenly, no replicas) beside the 5
// standalone servers, and runs 16 workers on distinct keys (TryLock, then
// Release: runOne's distinct mode) with: quorumlock over 3 Pools, each from
// pool.New of a ClusterClient on one cluster; redsync over the same 3
// ClusterClients; quorumlock over 3 of the standalone masters (Dial),
// each one independent node of the quorum, as a cluster is; and the shard
// split (shards.go): 9 standalone masters, each shard's workers on their
// own 3. The runs are
// interleaved, their order rotated by the pass. The servers' CPU per cycle
// is that of the servers the run used (the 9 cluster nodes, the 3
// standalone masters, or the shard split's 9), from /proc/<pid>/stat.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
)

const (
	clusterID      = "cluster"
	clusterBegin   = "<!-- bench:cluster:begin -->"
	clusterEnd     = "<!-- bench:cluster:end -->"
	clusterHeading = "### Cluster pools (issue 17)"
	// clusters and clusterMasters shape the scenario: 3 pools of 3 masters.
	clusters, clusterMasters = 3, 3
)

var clusterScenario = scenario{clusterID, "16 workers, distinct keys, 3 pools that are each a 3-master Redis Cluster", 16, distinct, false}

// clusterRun is one run of the scenario: an implementation and the
// servers it uses.
type clusterRun struct {
	name  string // the report's key
	title string
	lib   string // oursName or base
}

const oursStandalone = "quorumlock, 3 standalone masters"

var clusterRuns = []clusterRun{
	{oursName, "quorumlock, 3 cluster pools", oursName},
	{base, "redsync, the same 3 cluster clients", base},
	{oursStandalone, "quorumlock, 3 standalone masters (Dial)", oursName},
	{oursShards, "quorumlock, shard split: 9 standalone masters, each shard's workers on their own 3", oursName},
}

// clusterBench runs the cluster scenario, pass by pass, and reports it.
type clusterBench struct {
	runs    []clusterRun
	nodes   [][]*server // per cluster
	shards  []*server   // the shard-split run's standalone masters
	dir     string      // the nodes' config files
	results map[string][]result
}

// newClusterBench returns nil when the scenario is off (-scenarios names
// others, or -impls leaves out quorumlock).
func newClusterBench(only string, libs []string) *clusterBench {
	if (only != "" && !slices.Contains(strings.Split(only, ","), clusterID)) || !slices.Contains(libs, oursName) {
		return nil
	}
	cb := &clusterBench{results: map[string][]result{}}
	for _, r := range clusterRuns {
		if slices.Contains(libs, r.lib) {
			cb.runs = append(cb.runs, r)
		}
	}
	return cb
}

// start starts the clusters and waits until every node reports
// cluster_state:ok. Their node config files go to a directory of their own.
func (cb *clusterBench) start(ctx context.Context, bin string) error {
	if cb == nil {
		return nil
	}
	dir, err := os.MkdirTemp("", "quorumlock-bench-cluster-")
	if err != nil {
		return err
	}
	cb.dir = dir
	for i := range clusters {
		cb.nodes = append(cb.nodes, nil) // close stops what started
		for j := range clusterMasters {
			s, err := startServer(ctx, bin, "--cluster-enabled", "yes", "--cluster-node-timeout", "5000",
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d-%d.conf", i, j)))
			if err != nil {
				return err
			}
			cb.nodes[i] = append(cb.nodes[i], s)
		}
		if err := formCluster(ctx, cb.nodes[i]); err != nil {
			return err
		}
	}
	cb.shards, err = startServers(ctx, bin, clusters*clusterMasters)
	return err
}

// close stops the clusters' servers and removes their config files.
func (cb *clusterBench) close() {
	if cb == nil {
		return
	}
	for _, srvs := range cb.nodes {
		stopServers(srvs)
	}
	stopServers(cb.shards)
	if cb.dir != "" {
		_ = os.RemoveAll(cb.dir)
	}
}

// formCluster gives each server an equal range of slots, joins them and
// waits until every one reports cluster_state:ok with all of them known.
func formCluster(ctx context.Context, srvs []*server) error {
	cs := make([]*redis.Client, len(srvs))
	for i, s := range srvs {
		cs[i] = redis.NewClient(&redis.Options{Addr: s.addr})
		defer cs[i].Close()
		lo, hi := i*16384/len(srvs), (i+1)*16384/len(srvs)-1
		if err := cs[i].ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE: %w", s.addr, err)
		}
	}
	for _, s := range srvs[1:] {
		host, port, _ := strings.Cut(s.addr, ":")
		if err := cs[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", s.addr, err)
		}
	}
	want := fmt.Sprintf("cluster_known_nodes:%d", len(srvs))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok := true
		for _, c := range cs {
			info, err := c.ClusterInfo(ctx).Result()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("cluster on %s: no cluster_state:ok on every node within 30 s", srvs[0].addr)
		}
	}
}

// clusterClients returns a ClusterClient per cluster, set up as pool.New
// asks (ContextTimeoutEnabled, no retries).
func (cb *clusterBench) clusterClients() []*redis.ClusterClient {
	var out []*redis.ClusterClient
	for _, srvs := range cb.nodes {
		var addrs []string
		for _, s := range srvs {
			addrs = append(addrs, s.addr)
		}
		out = append(out, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1}))
	}
	return out
}

// pass runs every implementation once, in an order rotated by the pass p;
// standalone are the standalone servers, of which it uses the first 3.
func (cb *clusterBench) pass(ctx context.Context, p int, standalone []*server, warm, dur time.Duration) error {
	if cb == nil {
		return nil
	}
	var all []*server
	for _, srvs := range cb.nodes {
		all = append(all, srvs...)
	}
	for j := range cb.runs {
		r := cb.runs[(j+p)%len(cb.runs)]
		mk, srvs := cb.newOurs, all
		switch r.name {
		case base:
			mk = cb.newRedsync
		case oursStandalone:
			mk, srvs = newOurs, standalone[:clusters]
		case oursShards:
			mk, srvs = newShards, cb.shards
		}
		var addrs []string
		for _, s := range srvs {
			addrs = append(addrs, s.addr)
		}
		res, err := runOne(ctx, clusterScenario, mk, addrs, srvs, warm, dur)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", clusterID, r.name, err)
		}
		cb.results[r.name] = append(cb.results[r.name], res)
		fmt.Fprintf(os.Stderr, "pass %d %-7s %-33s %8.0f cycles/s  cpu %v + servers %v  reads/cycle %.1f  fail %d err %d left %d\n",
			p+1, clusterID, r.name, res.tput, res.cpu.Round(100*time.Nanosecond), res.srvCPU.Round(100*time.Nanosecond), res.srvReads, res.failures, res.errs, res.leftover)
	}
	return nil
}

// clusterOurs is quorumlock over cluster pools: the pools do not close the
// ClusterClients given to pool.New, so close does.
type clusterOurs struct {
	ours
	ccs []*redis.ClusterClient
}

func (cb *clusterBench) newOurs([]string) (impl, error) {
	o := &clusterOurs{ccs: cb.clusterClients()}
	our, err := oursOf(len(o.ccs), func(i int) (pool.Pool, error) { return pool.New(o.ccs[i]) })
	if err != nil {
		o.close()
		return nil, err
	}
	o.ours = *our
	return o, nil
}

func (o *clusterOurs) close() {
	o.ours.close()
	for _, cc := range o.ccs {
		_ = cc.Close()
	}
}

// clusterRS is redsync over the same ClusterClients.
type clusterRS struct {
	rs
	ccs []*redis.ClusterClient
}

func (cb *clusterBench) newRedsync([]string) (impl, error) {
	r := &clusterRS{ccs: cb.clusterClients()}
	var pools []rsredis.Pool
	for _, cc := range r.ccs {
		pools = append(pools, rsgoredis.NewPool(cc))
	}
	r.rs.rs = redsync.New(pools...)
	return r, nil
}

func (r *clusterRS) close() {
	for _, cc := range r.ccs {
		_ = cc.Close()
	}
}

// report prints the scenario's medians after env and writes them where
// -md says.
func (cb *clusterBench) report(env string, passes int, dur time.Duration, md string) error {
	if cb == nil {
		return nil
	}
	return publish(env+"\n"+cb.markdown(medians(map[string]map[string][]result{clusterID: cb.results})[clusterID], passes, dur), md, clusterHeading, clusterBegin, clusterEnd)
}

// markdown renders a table of the runs' figures, then the ratios.
func (cb *clusterBench) markdown(meds map[string]result, passes int, dur time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#### %s (`%s`)\n\n", clusterScenario.title, clusterID)
	fmt.Fprintf(&b, "Medians of %d interleaved pass(es), %s measured per run. A cycle is a TryLock and a Release. "+
		"Servers' CPU is that of the servers the run used: the 9 cluster nodes, the 3 standalone masters, or the shard split's 9.\n\n", passes, human(dur))
	b.WriteString("| implementation | cycles/s | servers' CPU per cycle (µs) | client CPU per cycle (µs) | servers' reads per cycle | cycle p50 (ms) | cycle p99 (ms) | failed | errors | goroutines left |\n")
	b.WriteString("|---|" + strings.Repeat("---:|", 9) + "\n")
	for _, r := range cb.runs {
		x := meds[r.name]
		fmt.Fprintf(&b, "| %s | %.0f | %.1f | %.1f | %.1f | %s | %s | %d | %d | %d |\n", r.title, x.tput,
			float64(x.srvCPU)/1e3, float64(x.cpu)/1e3, x.srvReads, ms(x.cycleP50), ms(x.cycleP99), x.failures, x.errs, x.leftover)
	}
	ours, std, rs := meds[oursName], meds[oursStandalone], meds[base]
	b.WriteString("\n| ratio | cycles/s | servers' CPU per cycle | client CPU per cycle |\n|---|---:|---:|---:|\n")
	line := func(name string, a, z result) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, ratio(a.tput, z.tput), ratio(float64(a.srvCPU), float64(z.srvCPU)), ratio(float64(a.cpu), float64(z.cpu)))
	}
	line("quorumlock on clusters ÷ quorumlock on standalone masters (target: servers' CPU ≤ 1.50×)", ours, std)
	if split, ok := meds[oursShards]; ok {
		line("shard split ÷ quorumlock on standalone masters (per-shard writers, no cluster mode)", split, std)
		line("quorumlock on clusters ÷ shard split", ours, split)
	}
	if _, ok := meds[base]; ok {
		line("quorumlock on clusters ÷ redsync on clusters", ours, rs)
	}
	return b.String()
}
