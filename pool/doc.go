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
// They need Redis 7.0 or later (SET with both NX and GET, PEXPIRE ... GT).
//
// The lock coordinator does not call a Pool of this package once per node
// and operation: it queues its commands, and one writer goroutine per node
// writes what concurrent rounds queued as one pipeline. A pipeline whose
// replies are late is left to read them on its own connection (their
// commands may still have run, and only the replies tell), while the next
// ones go out on others. Pools also serve one pub/sub subscription per
// redlock.Client for release notifications.
//
// Dial and DialURL check every new connection before use: the restart guard
// (WithRestartGuard) refuses a server that restarted less than the guard's
// duration ago, and the eviction check (WithEvictionCheck) warns about, or
// refuses, a maxmemory-policy that can evict lock keys. Both use one INFO
// per connection; OnConnect gives the same hook to clients used with New.
//
// All Pools are safe for concurrent use by multiple goroutines.
package pool
