// Package redlock implements the Redlock distributed lock over N independent
// Redis masters, for code that must never run a critical section twice at
// once.
//
// A lock is held when a quorum of the masters (a majority by default) agreed
// to it within the part of its TTL that is left after the time the
// acquisition took and a clock-drift allowance (see package drift). Every
// operation asks all masters in parallel, bounds its wait for each by a
// per-node timeout (WithNodeTimeout), and returns as soon as its outcome is
// certain; an acquisition that misses its quorum takes its token back from
// every master that may hold it. docs/design.md describes the mechanism.
//
//	var pools []pool.Pool // one per independent Redis master
//	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
//		p, err := pool.Dial(&redis.Options{Addr: addr})
//		if err != nil {
//			return err
//		}
//		defer p.Close()
//		pools = append(pools, p)
//	}
//	c, err := redlock.New(pools)
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	err = c.Do(ctx, "orders:42", func(ctx context.Context) error {
//		// ... work; ctx ends (cause ErrLockLost) if the lock is lost ...
//		return nil
//	})
//
// Do is the recommended way: it waits for the lock, renews it while the
// function runs, cancels the function's context the moment the lock is lost
// (a local timer: it fires even when no node answers), and releases the lock
// when the function returns or panics. Lock and TryLock return a *Lock for
// the rest: Extend, Release, Held, and the lease's Done, Err and Context.
//
// # Errors
//
// Failures to reach a quorum are *QuorumError values that list every node's
// outcome (ok, taken, not held, error, timeout, not asked, or pending: not
// waited for once the outcome was certain), its error and its latency. They
// match ErrNotAcquired (acquire) or ErrNotHeld (extend, release, held) with
// errors.Is. When the caller's context ends, the error also matches
// ctx.Err(). ErrUnavailable tells that too few nodes answered, and ErrAuth
// that too many refused the pools' credentials or rights (a wrong or missing
// password, an ACL user without a needed command): Lock and Do return that
// one at once rather than retry. Bad input (an empty key, an option out of
// range, pools that are nil, duplicated, or reach the same server) is
// reported before any I/O, or at first use for servers reached under two
// names, with an error that says what to change; it never matches
// ErrNotAcquired, so Lock does not retry it.
//
// # Safety
//
// Redlock's guarantee holds while clocks advance at rates within the drift
// factor of each other and a holder stops working by Lock.Deadline. A node
// that restarts without persistence may forget a lock while its TTL still
// runs. Tokens are unique per attempt, so a release or extend never touches
// a key held by anyone else.
//
// # Concurrency
//
// Every method of Client, Lock and Semaphore is safe for concurrent use.
// Client.Close releases the locks still held and waits for every goroutine
// the Client started, auto-extenders included.
package redlock
