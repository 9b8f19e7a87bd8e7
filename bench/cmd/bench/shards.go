package main

// The cluster scenario's shard-split run: what the same load costs when
// each shard gets its own pipelined writers and no cluster mode.
//
// A Cluster pool's master holds only its own slots' keys, so with 16
// workers a shard's pipeline can gather only the commands of the workers
// whose current key is in its slots: about a third of them, where a
// standalone master can gather all 16. The shard-split run keeps that
// split and removes everything else: 9 standalone masters (no cluster
// mode) as 3 shards of 3 pools, and the workers split evenly by shard for
// the whole run: shard j's workers lock through a quorumlock Client over
// masters j, j+3 and j+6, each a pool.Dial with its own pipelined writer,
// which is what a per-shard batcher of Cluster pools would be at best
// without holding commands back. Its servers' CPU per cycle against the 3
// standalone masters' shows what spreading the load over 3 times the
// masters costs by itself; the cluster runs' against it, what go-redis'
// Cluster pipeline and cluster mode add.

import (
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
)

// oursShards names the shard-split run.
const oursShards = "quorumlock, shard split"

// shardedOurs is a quorumlock Client per shard; session gives the workers
// to the shards in turn.
type shardedOurs struct {
	shards []*ours
	next   atomic.Int64
}

// newShards sets up one Client per shard over addrs, clusters × clusterMasters
// standalone masters in cluster order: shard j's pools are masters j,
// j+clusterMasters, ...
func newShards(addrs []string) (impl, error) {
	so := &shardedOurs{}
	for j := range clusterMasters {
		o, err := oursOf(clusters, func(i int) (pool.Pool, error) {
			return pool.Dial(&redis.Options{Addr: addrs[i*clusterMasters+j]})
		})
		if err != nil {
			so.close()
			return nil, err
		}
		so.shards = append(so.shards, o)
	}
	return so, nil
}

func (so *shardedOurs) session() session {
	return so.shards[int(so.next.Add(1)-1)%len(so.shards)].session()
}

func (so *shardedOurs) close() {
	for _, o := range so.shards {
		o.close()
	}
}
