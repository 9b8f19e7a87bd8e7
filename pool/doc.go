// Package pool connects the lock coordinator to independent Redis masters.
//
// A [Pool] stands for one Redis master (or one Redis Cluster, Ring or
// Sentinel-managed master: anything go-redis reaches as one
// redis.UniversalClient) that fails independently of the others. Redlock
// needs several of them; see package redlock.
//
// [New] wraps a go-redis client the caller owns and never closes it. [Dial]
// and [DialURL] create a client set up for locking: go-redis' per-call
// context deadlines switched on (ContextTimeoutEnabled), so that the per-node
// timeout of the lock really bounds each call, and automatic command and
// dial retries switched off (MaxRetries −1, DialerRetries 1), which would
// otherwise spend the per-node time budget several times over.
//
// The lock operations run as single commands or as Lua scripts sent with
// EVALSHA that fall back to EVAL when the server answers NOSCRIPT, so a
// restarted server or SCRIPT FLUSH costs one extra round trip, not a failure.
//
// All Pools are safe for concurrent use by multiple goroutines.
package pool
