package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

const demoSynopsis = `usage: quorumlock demo [flags]

Start 5 Redis servers inside this process, and run workers that contend for
one lock. Each holder reads a counter kept on a sixth server, pauses, and
writes it back incremented, with its fencing token: a second holder at the
same time would lose an update, and a stale holder's write is refused.
Meanwhile nodes are killed one by one (1, 2, then 3 of 5 down: no quorum, no
holder) and all revived. A line per second shows what happens; the summary
counts acquisitions, failures, lost updates and checks that the fencing
tokens of successive holders strictly increase. Needs nothing but Go.

Exit status: 0 when no update was lost and the tokens increased, 1 otherwise,
2 on bad usage.

Example:
  quorumlock demo -duration 20s
`

// demoStats is what the workers did; every field is updated atomically.
type demoStats struct {
	acquired   atomic.Int64 // locks acquired
	written    atomic.Int64 // increments the counter accepted
	held       atomic.Int64 // failed attempts: another worker held the lock
	noQuorum   atomic.Int64 // failed attempts: too few nodes answered
	stale      atomic.Int64 // writes refused for a stale fencing token
	resErr     atomic.Int64 // writes that failed for another reason
	overlaps   atomic.Int64 // times two workers were inside at once
	inside     atomic.Int64 // workers inside now
	mostInside atomic.Int64 // most workers inside at once since the last progress line
	releaseErr atomic.Int64 // releases no quorum confirmed
}

// enter records a worker entering the critical section.
func (st *demoStats) enter() {
	n := st.inside.Add(1)
	if n > 1 {
		st.overlaps.Add(1)
	}
	for {
		m := st.mostInside.Load()
		if n <= m || st.mostInside.CompareAndSwap(m, n) {
			return
		}
	}
}

// fenceLog records the fencing tokens of successive holders, in the order
// they wrote.
type fenceLog struct {
	mu     sync.Mutex
	tokens []uint64
}

func (f *fenceLog) add(tok uint64) {
	f.mu.Lock()
	f.tokens = append(f.tokens, tok)
	f.mu.Unlock()
}

// check returns the number of tokens that were not greater than the one
// before them, and the first and last token.
func (f *fenceLog) check() (bad int, first, last uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 1; i < len(f.tokens); i++ {
		if f.tokens[i] <= f.tokens[i-1] {
			bad++
		}
	}
	if len(f.tokens) > 0 {
		first, last = f.tokens[0], f.tokens[len(f.tokens)-1]
	}
	return bad, first, last
}

const (
	demoNodes   = 5
	demoKey     = "demo:counter" // the lock's key, and the counter's
	demoTTL     = 2 * time.Second
	demoMaxWait = 200 * time.Millisecond // each attempt's wait, so that progress stays visible
)

// demo runs the self-contained demonstration and returns the exit status.
func demo(ctx context.Context, e *env, args []string) int {
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
	if *duration < time.Second || *workers < 1 || *nodeTimeout <= 0 {
		return usageError(e, "demo", errors.New("-duration must be at least 1s, -workers at least 1, -node-timeout positive"))
	}
	out := e.stdout

	// go-redis logs every failed dial; killed nodes are the point of the demo.
	redis.SetLogger(quiet{})

	nodes := make([]*demoNode, demoNodes)
	pools := make([]pool.Pool, demoNodes)
	for i := range demoNodes {
		n, err := startDemoNode()
		if err != nil {
			fmt.Fprintln(e.stderr, "quorumlock demo: starting an embedded Redis server:", err)
			return exitFailed
		}
		defer n.close()
		p, err := pool.Dial(&redis.Options{Addr: n.addr}, pool.WithName(fmt.Sprintf("node%d", i+1)))
		if err != nil {
			fmt.Fprintln(e.stderr, "quorumlock demo:", err)
			return exitFailed
		}
		defer p.Close()
		nodes[i], pools[i] = n, p
	}
	// The resource the lock protects: a counter on a server of its own,
	// written only with a fencing token that is not older than the last.
	resource, err := miniredis.Run()
	if err != nil {
		fmt.Fprintln(e.stderr, "quorumlock demo: starting an embedded Redis server:", err)
		return exitFailed
	}
	defer resource.Close()
	res := redis.NewClient(&redis.Options{Addr: resource.Addr()})
	defer res.Close()

	client, err := redlock.New(pools, redlock.WithTTL(demoTTL), redlock.WithNodeTimeout(*nodeTimeout), redlock.WithFencing(true))
	if err != nil {
		fmt.Fprintln(e.stderr, "quorumlock demo:", err)
		return exitFailed
	}
	defer client.Close()

	fmt.Fprintf(out, "quorumlock demo: %d workers contend for one lock on %d embedded Redis servers for %v;\n", *workers, demoNodes, *duration)
	fmt.Fprintln(out, "each holder increments a counter, with its fencing token. Nodes are killed one by one")
	fmt.Fprintln(out, "(1, 2, then 3 down: no quorum), then all revived.")
	fmt.Fprintf(out, "Each second: failed: lock held = attempts that gave up after %v while another worker held the lock (waiting, not an error).\n", demoMaxWait)
	fmt.Fprintln(out)

	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var (
		st      demoStats
		fences  fenceLog
		revived atomic.Int64 // acquisitions when the nodes came back; -1 before
		up      = make([]atomic.Bool, demoNodes)
		wg      sync.WaitGroup
	)
	revived.Store(-1)
	for i := range up {
		up[i].Store(true)
	}
	// Embedded servers expire keys only when told that time passed. Time
	// passes for killed nodes too: a real Redis stores absolute expiry
	// times, so keys that expired while it was down are gone when it returns.
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
			now := time.Now()
			for _, n := range nodes {
				n.srv.FastForward(now.Sub(last))
			}
			last = now
		}
	})
	for range *workers {
		wg.Go(func() { demoWorker(ctx, client, res, &st, &fences) })
	}

	kill := func(i int) {
		up[i].Store(false)
		nodes[i].kill()
	}
	// The fault schedule: kill node 1, 2, 3 at 20 %, 35 % and 50 % of the run,
	// revive all three at 70 %.
	step := *duration / 20
	schedule := []struct {
		at   time.Duration
		what string
		do   func()
	}{
		{4 * step, "kill node1 (4 of 5 up)", func() { kill(0) }},
		{7 * step, "kill node2 (3 of 5 up: still a quorum)", func() { kill(1) }},
		{10 * step, "kill node3 (2 of 5 up: no quorum, nobody can hold the lock)", func() { kill(2) }},
		{14 * step, "revive node1, node2, node3 (with their data)", func() {
			for i := range 3 {
				if err := nodes[i].revive(); err != nil {
					fmt.Fprintf(e.stderr, "quorumlock demo: reviving node%d: %v\n", i+1, err)
					continue
				}
				up[i].Store(true)
			}
			revived.Store(st.acquired.Load())
		}},
	}
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	event := time.NewTimer(schedule[0].at)
	defer event.Stop()
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
			fmt.Fprintf(out, "%5.1fs  nodes up %d/5  max holders %d  acquisitions %5d  failed: lock held %5d  no quorum %5d  stale writes %d\n",
				time.Since(start).Seconds(), nodesUp, st.mostInside.Swap(st.inside.Load()), st.acquired.Load(),
				st.held.Load(), st.noQuorum.Load(), st.stale.Load())
		case <-event.C:
			fmt.Fprintf(out, "%5.1fs  %s\n", time.Since(start).Seconds(), schedule[next].what)
			schedule[next].do()
			if next++; next < len(schedule) {
				event.Reset(time.Until(start.Add(schedule[next].at)))
			}
		}
	}
	wg.Wait()

	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	value, _, err := fence.Read(rctx, res, demoKey)
	if err != nil {
		fmt.Fprintln(e.stderr, "quorumlock demo: reading the counter:", err)
		return exitFailed
	}
	counter, _ := strconv.ParseInt(value, 10, 64)
	lost := st.written.Load() - counter
	bad, first, last := fences.check()
	order := fmt.Sprintf("strictly increasing (%d tokens, %d ... %d); the range is wider than the count:\n"+
		"                           the counter also counts acquisitions that failed or wrote nothing", st.written.Load(), first, last)
	if bad > 0 {
		order = fmt.Sprintf("NOT increasing: %d tokens not above the one before", bad)
	}
	after := "the nodes were not revived"
	if r := revived.Load(); r >= 0 {
		after = strconv.FormatInt(st.acquired.Load()-r, 10)
	}
	fmt.Fprintln(out, "\nsummary")
	fmt.Fprintf(out, "  acquisitions:            %d\n", st.acquired.Load())
	fmt.Fprintf(out, "  increments written:      %d\n", st.written.Load())
	fmt.Fprintf(out, "  counter:                 %d\n", counter)
	fmt.Fprintf(out, "  lost updates:            %d\n", lost)
	fmt.Fprintf(out, "  fence order:             %s\n", order)
	fmt.Fprintf(out, "  overlapping holders:     %d\n", st.overlaps.Load())
	fmt.Fprintf(out, "  quorum failures:         %d (attempts while too few nodes answered)\n", st.noQuorum.Load())
	fmt.Fprintf(out, "  attempts, lock held:     %d\n", st.held.Load())
	fmt.Fprintf(out, "  stale writes refused:    %d\n", st.stale.Load())
	fmt.Fprintf(out, "  other write errors:      %d\n", st.resErr.Load())
	fmt.Fprintf(out, "  after the revival:       %s\n", after)
	fmt.Fprintf(out, "  releases not confirmed:  %d (no quorum answered the release, as while 3 nodes were down: the lock expired with its TTL)\n", st.releaseErr.Load())
	if lost != 0 || st.overlaps.Load() != 0 || bad != 0 {
		fmt.Fprintln(out, "FAILED: the lock let two holders in")
		return exitFailed
	}
	return exitOK
}

// demoWorker takes the lock again and again until ctx ends; each time it
// increments the counter with a read, a pause and a fenced write, which
// loses an update if another holder is inside at the same time.
func demoWorker(ctx context.Context, client *redlock.Client, res *redis.Client, st *demoStats, fences *fenceLog) {
	for ctx.Err() == nil {
		l, err := client.Lock(ctx, demoKey, redlock.WithMaxWait(demoMaxWait))
		if err != nil {
			_, down := unreachable(err)
			switch {
			case ctx.Err() != nil:
			case down:
				st.noQuorum.Add(1)
			default:
				st.held.Add(1)
			}
			continue
		}
		st.acquired.Add(1)
		st.enter()
		// The resource's calls must not be cut short by the end of the
		// demo: a write that lands unseen would count as a lost update.
		wctx := context.WithoutCancel(ctx)
		value, _, err := fence.Read(wctx, res, demoKey)
		if err == nil {
			v, _ := strconv.ParseInt(value, 10, 64)
			time.Sleep(2 * time.Millisecond)
			err = fence.Write(wctx, res, demoKey, l.Fence(), strconv.FormatInt(v+1, 10))
		}
		switch {
		case err == nil:
			st.written.Add(1)
			fences.add(l.Fence())
		case errors.Is(err, fence.ErrStale):
			st.stale.Add(1)
		default:
			st.resErr.Add(1)
		}
		st.inside.Add(-1)
		if err := l.Release(context.Background()); err != nil {
			st.releaseErr.Add(1)
		}
	}
}
