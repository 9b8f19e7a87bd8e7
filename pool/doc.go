// Package pool connects the lock coordinator to independent Redis masters.
//
// A [Pool] stands for one node of the lock's quorum, which fails
// independently of the others: one Redis master, or one whole Redis Cluster,
// go-redis Ring or Sentinel-managed master (anything go-redis reaches as one
// redis.UniversalClient). Redlock needs several of them; see package
// redlock. Its safety argument assumes that a node keeps the writes it
// acknowledged: a replica failover (Sentinel's, or inside a Cluster) and a
// Ring that moves a dead shard's keys elsewhere can lose them, and in the
// worst case one such loss lets a second client take a held lock
// (docs/safety.md, "Replica failover"; docs/deployments.md compares the
// kinds of node).
//
// [New] wraps a go-redis client the caller owns and never closes it. [Dial],
// [DialURL] and [DialFailover] (a Sentinel-managed master) create a client
// set up for locking: the lock's per-node timeout bounds each network call,
// and go-redis' automatic command and dial retries, which would spend that
// time several times over, are off.
//
// The lock operations need Redis 7.0 or later. A server that lost its script
// cache (a restart, SCRIPT FLUSH) costs them one more round trip, not a
// failure. Package redlock pipelines the commands of concurrent rounds to the
// Pools of this package and subscribes to their release notifications
// (docs/design.md, "Fan-out" and "Waiting"); other Pools it calls through
// the Pool methods.
//
// Dial and DialURL check every new connection before use: the restart guard
// (WithRestartGuard) refuses a server that restarted less than the guard's
// duration ago, and the eviction check (WithEvictionCheck) warns about, or
// refuses, a maxmemory-policy that can evict lock keys. Both cost one INFO
// per new connection and none per lock operation; OnConnect gives the same
// checks to clients used with New.
//
// All Pools are safe for concurrent use by multiple goroutines.
package pool
