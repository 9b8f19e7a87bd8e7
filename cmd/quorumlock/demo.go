package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// demoStats is what the workers did; every field is updated atomically.
type demoStats struct {
	acquired   atomic.Int64 // critical sections entered
	completed  atomic.Int64 // critical sections finished
	contended  atomic.Int64 // attempts that found the lock held
	noQuorum   atomic.Int64 // attempts that could not reach a quorum of nodes
	overlaps   atomic.Int64 // times two workers were inside at once
	inside     atomic.Int64
	releaseErr atomic.Int64
}

const demoSynopsis = `usage: quorumlock demo [flags]

Start 5 Redis servers inside this process, run workers that contend for one
lock while nodes are killed and revived, and print what happened. Needs
nothing but Go.
`

// demo runs the self-contained demonstration and returns the exit status.
func demo(ctx context.Context, e *env, args []string) int {
	out := e.stdout
	fs := newFlagSet("demo", demoSynopsis, "")
	duration := fs.Duration("duration", 10*time.Second, "how long the demo runs")
	workers := fs.Int("workers", 8, "contending workers")
	nodeTimeout := fs.Duration("node-timeout", redlock.DefaultNodeTimeout, "per-node timeout of every lock operation")
	if code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(e, "demo", fmt.Errorf("unexpected arguments %q: demo takes flags only", fs.Args()))
	}
	if *duration < time.Second || *workers < 1 {
		return usageError(e, "demo", errors.New("-duration must be at least 1s and -workers at least 1"))
	}

	// go-redis logs every failed dial; killed nodes are the point of the demo.
	redis.SetLogger(quiet{})

	const n = 5
	servers := make([]*miniredis.Miniredis, n)
	pools := make([]pool.Pool, n)
	for i := range n {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			fmt.Fprintln(out, "quorumlock demo: starting an embedded Redis server:", err)
			return 1
		}
		defer m.Close()
		p, err := pool.Dial(&redis.Options{Addr: m.Addr()}, pool.WithName(fmt.Sprintf("node%d", i+1)))
		if err != nil {
			fmt.Fprintln(out, "quorumlock demo:", err)
			return 1
		}
		defer p.Close()
		servers[i], pools[i] = m, p
	}
	client, err := redlock.New(pools, redlock.WithTTL(2*time.Second), redlock.WithNodeTimeout(*nodeTimeout))
	if err != nil {
		fmt.Fprintln(out, "quorumlock demo:", err)
		return 1
	}
	defer client.Close()

	fmt.Fprintf(out, "quorumlock demo: %d workers contend for one lock on %d embedded Redis servers for %v.\n", *workers, n, *duration)
	fmt.Fprintln(out, "Nodes are killed one by one (1, 2, then 3 down: no quorum), then all revived.")

	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var (
		st      demoStats
		counter int64        // guarded by the lock alone
		revived atomic.Int64 // critical sections completed when the nodes came back
		up      = make([]atomic.Bool, n)
		wg      sync.WaitGroup
	)
	for i := range up {
		up[i].Store(true)
	}
	// Embedded servers expire keys only when told that time passed. Time
	// passes for stopped servers too: a real Redis stores absolute expiry
	// times, so keys that expired while it was down are gone when it returns.
	var clockMu sync.Mutex // keeps the revival in the schedule apart from the clock
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for ctx.Err() == nil {
			<-tick.C
			now := time.Now()
			clockMu.Lock()
			for _, m := range servers {
				m.FastForward(now.Sub(last))
			}
			clockMu.Unlock()
			last = now
		}
	})
	for range *workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := client.Lock(ctx, "demo:counter", redlock.WithMaxWait(200*time.Millisecond))
				if err != nil {
					var qe *redlock.QuorumError
					switch {
					case ctx.Err() != nil:
					case errors.As(err, &qe) && reachable(qe) < qe.Quorum:
						st.noQuorum.Add(1)
					default:
						st.contended.Add(1)
					}
					continue
				}
				st.acquired.Add(1)
				if st.inside.Add(1) > 1 {
					st.overlaps.Add(1)
				}
				v := counter // read, pause, write: a second holder would lose an update
				time.Sleep(2 * time.Millisecond)
				counter = v + 1
				st.inside.Add(-1)
				st.completed.Add(1)
				if err := l.Release(context.Background()); err != nil {
					st.releaseErr.Add(1)
				}
			}
		})
	}

	kill := func(i int) {
		clockMu.Lock()
		defer clockMu.Unlock()
		up[i].Store(false)
		servers[i].Close()
	}
	// The fault schedule: kill node 1, 2, 3 at 20 %, 35 % and 50 % of the run,
	// revive all three at 70 %.
	step := *duration / 20
	schedule := []struct {
		at   time.Duration
		what string
		do   func()
	}{
		{4 * step, "kill node1", func() { kill(0) }},
		{7 * step, "kill node2", func() { kill(1) }},
		{10 * step, "kill node3 (3 of 5 down: no quorum)", func() { kill(2) }},
		{14 * step, "revive node1, node2, node3 (with their data)", func() {
			clockMu.Lock()
			defer clockMu.Unlock()
			for i := range 3 {
				if err := servers[i].Restart(); err == nil {
					up[i].Store(true)
				}
			}
			revived.Store(st.completed.Load())
		}},
	}
	start := time.Now()
	tick := time.NewTicker(*duration / 10)
	defer tick.Stop()
	next := 0
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			nodesUp := 0
			for i := range up {
				if up[i].Load() {
					nodesUp++
				}
			}
			fmt.Fprintf(out, "%5.1fs  nodes up %d/5  acquisitions %4d  contended %4d  no quorum %4d  overlaps %d\n",
				time.Since(start).Seconds(), nodesUp, st.acquired.Load(), st.contended.Load(), st.noQuorum.Load(), st.overlaps.Load())
		case <-time.After(time.Until(start.Add(schedule[min(next, len(schedule)-1)].at))):
			if next < len(schedule) {
				fmt.Fprintf(out, "%5.1fs  %s\n", time.Since(start).Seconds(), schedule[next].what)
				schedule[next].do()
				next++
			}
		}
	}
	wg.Wait()

	lost := st.completed.Load() - counter
	fmt.Fprintln(out, "\nsummary")
	fmt.Fprintf(out, "  critical sections:      %d\n", st.completed.Load())
	fmt.Fprintf(out, "  counter:                %d\n", counter)
	fmt.Fprintf(out, "  after the revival:      %d\n", st.completed.Load()-revived.Load())
	fmt.Fprintf(out, "  lost updates:           %d\n", lost)
	fmt.Fprintf(out, "  overlapping holders:    %d\n", st.overlaps.Load())
	fmt.Fprintf(out, "  attempts, lock held:    %d\n", st.contended.Load())
	fmt.Fprintf(out, "  attempts, no quorum:    %d\n", st.noQuorum.Load())
	fmt.Fprintf(out, "  releases not confirmed: %d\n", st.releaseErr.Load())
	if lost != 0 || st.overlaps.Load() != 0 {
		fmt.Fprintln(out, "FAILED: the lock let two holders in")
		return 1
	}
	return 0
}

// reachable counts the nodes that answered in a failed acquisition.
func reachable(qe *redlock.QuorumError) int {
	n := 0
	for _, r := range qe.Nodes {
		if r.Outcome != redlock.OutcomeError && r.Outcome != redlock.OutcomeTimeout {
			n++
		}
	}
	return n
}
