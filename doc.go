// Package quorumlock is the root of a library of distributed locks over N
// independent Redis masters (the Redlock algorithm), built on go-redis v9.
// It holds no code: start with package redlock, which takes one Pool per
// master from package pool.
//
//	pools := make([]pool.Pool, 0, len(addrs)) // one per independent Redis master
//	for _, addr := range addrs {
//		p, err := pool.Dial(&redis.Options{Addr: addr})
//		if err != nil {
//			return err
//		}
//		defer p.Close()
//		pools = append(pools, p)
//	}
//	client, err := redlock.New(pools)
//	if err != nil {
//		return err
//	}
//	defer client.Close()
//	err = client.Do(ctx, "orders:42", func(ctx context.Context) error {
//		return work(ctx) // ctx ends if the lock is lost
//	})
//
// The packages:
//   - redlock: the Client and its locks (Do, Lock, TryLock, shared
//     holders, several keys, semaphores, elections, fencing).
//   - pool: a Pool per Redis master (Dial, DialURL, DialFailover, New),
//     with the restart guard and connection statistics.
//   - fence: fencing-token checks for resources kept in Redis.
//   - drift: the clock-drift allowance that validity subtracts.
//   - testkit (a module of its own): real Redis masters to kill, pause and
//     cut off in tests, and a checker of the recorded history.
//   - cmd/quorumlock: the command-line tool (exec, hold, status, release, demo).
//
// docs/design.md, docs/safety.md and docs/performance.md in the repository
// say how it works, what it guarantees and what it costs.
package quorumlock
