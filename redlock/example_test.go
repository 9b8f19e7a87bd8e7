package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// servers starts n in-process Redis servers for the examples and returns a
// pool for each and a function that stops them. Real programs use
// pool.Dial or pool.DialURL with the addresses of their Redis masters.
func servers(n int) ([]pool.Pool, func()) {
	var pools []pool.Pool
	var stops []func()
	for range n {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			panic(err)
		}
		p, err := pool.Dial(&redis.Options{Addr: m.Addr()})
		if err != nil {
			panic(err)
		}
		pools = append(pools, p)
		stops = append(stops, func() { _ = p.Close(); m.Close() })
	}
	return pools, func() {
		for _, stop := range stops {
			stop()
		}
	}
}

func Example() {
	pools, stop := servers(5)
	defer stop()

	client, err := redlock.New(pools, redlock.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	lock, err := client.Lock(ctx, "orders:42")
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	fmt.Println("holding", lock.Key(), "with time left:", time.Until(lock.Deadline()) > 29*time.Second)
	// ... the critical section: finish before lock.Deadline() ...
	if err := lock.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	// Output: holding orders:42 with time left: true
}

func ExampleClient_TryLock() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()
	ctx := context.Background()

	first, _ := client.TryLock(ctx, "report")
	_, err := client.TryLock(ctx, "report") // held by first: fails at once
	fmt.Println(errors.Is(err, redlock.ErrNotAcquired))

	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		fmt.Println("nodes needed:", qe.Quorum, "of", len(qe.Nodes))
	}
	_ = first.Release(ctx)
	// Output:
	// true
	// nodes needed: 3 of 5
}

func ExampleClient_Lock_timeout() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()

	holder, _ := client.TryLock(context.Background(), "nightly-job")
	defer holder.Release(context.Background())

	// Wait at most 100 ms for the lock.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := client.Lock(ctx, "nightly-job")
	fmt.Println(errors.Is(err, redlock.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}

func ExampleLock_Extend() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools, redlock.WithTTL(5*time.Second))
	defer client.Close()
	ctx := context.Background()

	lock, _ := client.Lock(ctx, "migration")
	defer lock.Release(ctx)
	before := lock.Deadline()
	// Work that needs more time: extend before the deadline.
	if err := lock.Extend(ctx, 10*time.Second); err != nil {
		fmt.Println("lost the lock, stop working:", err)
		return
	}
	fmt.Println("deadline moved later:", lock.Deadline().After(before))
	// Output: deadline moved later: true
}

func ExampleLock_Release() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()
	ctx := context.Background()

	lock, _ := client.Lock(ctx, "invoice:7")
	fmt.Println(lock.Release(ctx))
	fmt.Println(errors.Is(lock.Release(ctx), redlock.ErrReleased))
	// Output:
	// <nil>
	// true
}

func ExampleClient_Locked() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()
	ctx := context.Background()

	lock, _ := client.Lock(ctx, "cache-rebuild")
	held, _ := client.Locked(ctx, "cache-rebuild")
	fmt.Println(held)
	_ = lock.Release(ctx)
	// Output: true
}

func ExampleClient_Do() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()

	err := client.Do(context.Background(), "nightly-report", func(ctx context.Context) error {
		// The lock is renewed while this runs; ctx ends if it is lost.
		fmt.Println("working under the lock")
		return nil
	})
	fmt.Println(err)
	// Output:
	// working under the lock
	// <nil>
}

func ExampleLock_Context() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()
	ctx := context.Background()

	lock, _ := client.Lock(ctx, "import", redlock.WithAutoExtend(true))
	work, cancel := lock.Context(ctx)
	defer cancel()
	_ = lock.Release(ctx)
	<-work.Done() // also ends, with ErrLockLost, if the lock is lost
	fmt.Println(context.Cause(work))
	// Output: redlock: lock already released
}

// A job scheduler keeps a lock's token beside the job; after a restart, a
// new Client takes the lock back from it (and WithMetadata says who holds
// it, for people who look).
func ExampleClient_Resume() {
	pools, stop := servers(5)
	defer stop()
	ctx := context.Background()

	before, _ := redlock.New(pools, redlock.WithTTL(time.Minute), redlock.WithMetadata("scheduler-1"))
	defer before.Close() // in the story, this process died holding the lock
	lock, err := before.TryLock(ctx, "job:nightly")
	if err != nil {
		panic(err)
	}
	saved := lock.Token() // persisted with the job
	// ... the process restarts: its Client is gone, its lock is not ...

	after, _ := redlock.New(pools, redlock.WithTTL(time.Minute))
	defer after.Close()
	resumed, err := after.Resume(ctx, "job:nightly", saved)
	if err != nil {
		fmt.Println("the lock is gone:", errors.Is(err, redlock.ErrNotHeld))
		return
	}
	fmt.Println("resumed", resumed.Key(), "held by", resumed.Metadata())
	_ = resumed.Release(ctx)
	_, err = after.Resume(ctx, "job:nightly", saved)
	fmt.Println("after release:", errors.Is(err, redlock.ErrNotHeld))
	// Output:
	// resumed job:nightly held by scheduler-1
	// after release: true
}

func ExampleClient_Inspect() {
	pools, stop := servers(5)
	defer stop()
	ctx := context.Background()
	client, _ := redlock.New(pools, redlock.WithMetadata("host-a pid 4242"))
	defer client.Close()
	lock, _ := client.TryLock(ctx, "reports")

	in, err := client.Inspect(ctx, "reports")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s by %q on %d of %d nodes\n", in.State, in.Metadata, in.Agreed, len(in.Nodes))
	_ = lock.Release(ctx)
	in, _ = client.Inspect(ctx, "reports")
	fmt.Println(in.State)
	// Output:
	// held by "host-a pid 4242" on 5 of 5 nodes
	// free
}

// A transfer locks both accounts as one lock: each master takes both keys or
// neither, so a transfer the other way round cannot deadlock with it.
func ExampleClient_TryLockAll() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools, redlock.WithFencing(true))
	defer client.Close()
	ctx := context.Background()

	lock, err := client.TryLockAll(ctx, []string{"account:alice", "account:bob"})
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", lock.Keys(), "fence", lock.Fence() > 0)
	_, err = client.TryLock(ctx, "account:bob")
	fmt.Println("bob alone:", errors.Is(err, redlock.ErrNotAcquired))
	_, err = client.TryLockAll(ctx, []string{"account:bob", "account:carol"})
	fmt.Println("bob and carol:", errors.Is(err, redlock.ErrNotAcquired))
	_ = lock.Release(ctx)
	// Output:
	// holding [account:alice account:bob] fence true
	// bob alone: true
	// bob and carol: true
}

func ExampleClient_DoAll() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()

	err := client.DoAll(context.Background(), []string{"stock:42", "orders:42"}, func(ctx context.Context) error {
		// Both keys are held, and renewed, while this runs.
		fmt.Println("moving stock to the order")
		return nil
	})
	fmt.Println(err)
	// Output:
	// moving stock to the order
	// <nil>
}

// Readers share a key; a writer waits for them, and new readers wait for
// the writer.
func ExampleShared() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()
	ctx := context.Background()

	r1, _ := client.Lock(ctx, "catalog", redlock.Shared())
	r2, err := client.TryLock(ctx, "catalog", redlock.Shared())
	fmt.Println("two readers:", err == nil)
	_, err = client.TryLock(ctx, "catalog")
	fmt.Println("a writer meanwhile:", errors.Is(err, redlock.ErrNotAcquired))
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := client.TryLock(ctx, "catalog")
	fmt.Println("the writer after them:", err == nil)
	_ = w.Release(ctx)
	// Output:
	// two readers: true
	// a writer meanwhile: true
	// the writer after them: true
}

func ExampleClient_Semaphore() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()
	ctx := context.Background()

	// At most 2 exports at once, across every process that uses the name
	// with the same count.
	exports, err := client.Semaphore("exports", 2)
	if err != nil {
		panic(err)
	}
	a, _ := exports.TryAcquire(ctx)
	b, _ := exports.TryAcquire(ctx)
	_, err = exports.TryAcquire(ctx) // both permits are held
	fmt.Println("permits", a.Permit()+b.Permit(), "third:", errors.Is(err, redlock.ErrNotAcquired))

	// Another count for the same name is refused on the nodes.
	other, _ := client.Semaphore("exports", 3)
	_, err = other.TryAcquire(ctx)
	fmt.Println("count mismatch:", errors.Is(err, redlock.ErrPermitMismatch))
	_ = a.Release(ctx)
	_ = b.Release(ctx)
	// Output:
	// permits 1 third: true
	// count mismatch: true
}

func ExampleSemaphore_Do() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()

	exports, _ := client.Semaphore("exports", 4)
	// Do waits for a permit, keeps it renewed while fn runs, and gives it back.
	err := exports.Do(context.Background(), func(ctx context.Context) error {
		fmt.Println("exporting under one of", exports.Permits(), "permits")
		return nil // ctx ends with cause ErrLockLost if the permit is lost
	})
	fmt.Println("err:", err)
	// Output:
	// exporting under one of 4 permits
	// err: <nil>
}

func ExampleClient_Campaign() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()
	ctx := context.Background()

	// Campaign blocks until this caller leads; leadership is renewed until
	// Release (resign) or until it is lost (Done, Err, Context).
	lead, err := client.Campaign(ctx, "scheduler", "host-a:8080")
	if err != nil {
		panic(err)
	}
	term := lead.Fence() // hand the term to what the leader writes
	value, current, _ := client.Leader(ctx, "scheduler")
	fmt.Println("leader:", value, "term matches:", current == term)
	_ = lead.Release(ctx) // resign
	_, _, err = client.Leader(ctx, "scheduler")
	fmt.Println("after resigning:", errors.Is(err, redlock.ErrNoLeader))
	// Output:
	// leader: host-a:8080 term matches: true
	// after resigning: true
}

func ExampleClient_Observe() {
	pools, stop := servers(5)
	defer stop()
	client, _ := redlock.New(pools)
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	first, _ := client.Campaign(ctx, "scheduler", "host-a")
	changes := client.Observe(ctx, "scheduler") // closed when ctx ends
	fmt.Println("leads:", (<-changes).Value)

	_ = first.Release(ctx) // host-a resigns; host-b takes over with a higher term
	second, _ := client.Campaign(ctx, "scheduler", "host-b")
	next := <-changes
	fmt.Println("leads:", next.Value, "term is second's:", next.Term == second.Fence())
	_ = second.Release(ctx)
	// Output:
	// leads: host-a
	// leads: host-b term is second's: true
}
