package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// A stall of the chaos runs stops this whole test process (every client,
// the proxies, the faulter), for 200 ms–1 s or, half the time and always
// the first time, for 2.5–4 s: longer than any command's deadline and
// follow-up (the node timeout plus the clean-up timeout, 2 s here), so
// that every wait under way when it began ends past its deadline on the
// wall clock. It stands for a process starved
// of CPU, a long stop of the world or a paused VM stands still, while the
// nodes run on and the clients' keys expire. Two properties judge it
// (docs/chaos.md, "A stalled client"):
//   - ST-conn: no client's Pool closes a connection because a deadline
//     passed (pool.ConnStats.TimedOut) from the stall's start until the
//     probes below are done;
//   - ST: every live client's Pools serve an acquisition of a free key of
//     its own within stallRecover after the stall ends. (Its release is
//     not judged: right after a stall every client of the run catches up
//     at once, and on a loaded machine under the race detector a release
//     round may time out from plain CPU load; the background re-sends
//     then free the key, and it expires with its TTL.)
//
// A client whose worker lets it die (die) after it was chosen, during the
// stall or its probe, is judged by neither: its links are cut for good, so
// its probe fails and its connections time out. (Judged, it failed ST and
// ST-conn together: every node timed out for 2.8 s, and 15 connections
// closed after a deadline.)
//
// Other faults also close connections after deadlines, up to their
// commands' follow-up after they heal; so a stall waits until no fault
// has been active for stallQuiet, and the faulter injects nothing else
// until its probes are done.
const (
	stallRecover   = 2*time.Second + 4*chaosNodeTimeout
	stallQuiet     = 2500 * time.Millisecond // > a command's follow-up (cleanup timeout − node timeout)
	stallWaitQuiet = 15 * time.Second        // then it gives up, counted as "stall skipped"
)

// stall stops the process once, if the run is quiet enough (long: for
// 2.5–4 s), and judges ST-conn and ST.
func (f *faulter) stall(long bool) {
	if runtime.GOOS != "linux" || !f.waitQuiet() {
		f.count("stall skipped")
		return
	}
	clients := f.liveClients()
	before := make([]int64, len(clients)) // each client's timed-out closes so far
	for k, cc := range clients {
		before[k] = cc.connStats().TimedOut
	}
	dialsBefore := connStats(clients).Dials
	d := f.ms(200, 1000)
	if long || f.rng.IntN(2) == 0 {
		d = f.ms(2500, 4000)
	}
	span := f.open("stall", "", f.allNodes())
	f.count("stall")
	if err := stopProcess(d); err != nil {
		f.t.Errorf("chaos: stall for %v: %v", d, err)
	}
	f.close(span)
	if f.h != nil { // S2 does not judge a success whose deadline passed while all stood still
		f.h.AddStall(hist.Stall{Start: span.start, End: span.end})
	}
	ended := time.Now()
	pr := probeAll(clients, ended.Add(stallRecover))
	for _, err := range pr.errs {
		f.t.Errorf("chaos: property ST: after a %v stall: %v", d, err)
	}
	if n := timedOutAlive(clients, before); n > 0 {
		f.t.Errorf("chaos: property ST-conn: %d connections closed after a deadline passed, across a %v stall and the %v after it", n, d, time.Since(ended).Round(time.Millisecond))
	}
	f.t.Logf("chaos: stalled the process for %v; %d of %d clients locked again, the last %v after it ended, with %d connections dialled; %d died meanwhile (not judged); %d releases of those locks failed (%v)",
		d, len(clients)-len(pr.errs)-pr.died, len(clients), pr.last.Round(time.Millisecond), connStats(clients).Dials-dialsBefore, pr.died, len(pr.relErrs), pr.relErrs)
}

// stopProcess stops this process for d: a child sends it SIGSTOP, sleeps
// d and sends SIGCONT (the child does both, so that CONT always comes
// after STOP); it returns once the child is done.
func stopProcess(d time.Duration) error {
	pid := os.Getpid()
	script := fmt.Sprintf("kill -STOP %d; sleep %.3f; kill -CONT %d", pid, d.Seconds(), pid)
	return exec.Command("sh", "-c", script).Run()
}

// waitQuiet waits until no fault has been active for stallQuiet; false
// when that takes more than stallWaitQuiet, or the faulter stops.
func (f *faulter) waitQuiet() bool {
	give := time.Now().Add(stallWaitQuiet)
	for time.Now().Before(give) {
		f.mu.Lock()
		quiet := len(f.active) == 0 && time.Since(f.healed) >= stallQuiet
		f.mu.Unlock()
		if quiet {
			return true
		}
		select {
		case <-f.stop:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

func (f *faulter) liveClients() []*chaosClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*chaosClient
	for _, cc := range f.clients {
		if !cc.dead.Load() {
			out = append(out, cc)
		}
	}
	return out
}

func (f *faulter) allNodes() []int {
	nodes := make([]int, f.c.Len())
	for i := range nodes {
		nodes[i] = i
	}
	return nodes
}

// timedOutAlive sums, over the clients that have not died (their links cut
// for good: their connections time out), the connections their Pools closed
// after a deadline passed since before[k], client k's count then.
func timedOutAlive(clients []*chaosClient, before []int64) int64 {
	var n int64
	for k, cc := range clients {
		if !cc.dead.Load() {
			n += cc.connStats().TimedOut - before[k]
		}
	}
	return n
}

// connStats sums the clients' Pools' pool.ConnStats (the counts it reads).
func connStats(clients []*chaosClient) pool.ConnStats {
	var sum pool.ConnStats
	for _, cc := range clients {
		st := cc.connStats()
		sum.Dials += st.Dials
		sum.TimedOut += st.TimedOut
	}
	return sum
}

// connStats sums cc's Pools' pool.ConnStats (the counts it reads).
func (cc *chaosClient) connStats() pool.ConnStats {
	var sum pool.ConnStats
	for _, p := range cc.raw {
		if st, ok := pool.Stats(p); ok {
			sum.Dials += st.Dials
			sum.TimedOut += st.TimedOut
		}
	}
	return sum
}

// probes is what the probes of one stall found.
type probes struct {
	errs, relErrs []error       // the acquisitions and the releases that failed
	last          time.Duration // the latest acquisition, after the start of probeAll
	died          int           // clients that died (die) after they were chosen: not judged
}

// probeAll runs every client's probe at once, each by deadline.
func probeAll(clients []*chaosClient, deadline time.Time) probes {
	var mu sync.Mutex
	var pr probes
	var wg sync.WaitGroup
	start := time.Now()
	for _, cc := range clients {
		wg.Go(func() {
			relErr, err := cc.probe(deadline)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case cc.dead.Load(): // its worker let it die, its links cut, during the stall or the probe
				pr.died++
			case err != nil:
				pr.errs = append(pr.errs, fmt.Errorf("%s: %w", cc.name, err))
			case relErr != nil:
				pr.relErrs = append(pr.relErrs, fmt.Errorf("%s: %w", cc.name, relErr))
			}
			if err == nil {
				pr.last = max(pr.last, time.Since(start))
			}
		})
	}
	wg.Wait()
	return pr
}

// probeSeq numbers the probes' keys and tokens.
var probeSeq atomic.Int64

// probe locks a free key of its own by deadline, and releases it, through
// a Client of its own over cc's Pools (made on first use): the run's
// History does not see it, so that its tokens are never taken for the
// workload's, but its commands share the workload's connections. It
// returns the release's error and the acquisition's.
func (cc *chaosClient) probe(deadline time.Time) (relErr, err error) {
	cl, err := cc.prober()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	n := probeSeq.Add(1)
	gen := func() (string, error) { return fmt.Sprintf("probe-%s-%d-%d", cc.name, n, probeSeq.Add(1)), nil }
	l, err := cl.Lock(ctx, fmt.Sprintf("stall-probe:%s:%d", cc.name, n), redlock.WithTokenGenerator(gen), redlock.WithMaxWait(stallRecover))
	if err != nil {
		return nil, fmt.Errorf("no lock of a free key within %v of the stall's end: %w", stallRecover, err)
	}
	return l.Release(ctx), nil
}

// prober returns cc's probe Client, made on first use; the Client's close
// closes it before the Pools.
func (cc *chaosClient) prober() (*redlock.Client, error) {
	cc.probeMu.Lock()
	defer cc.probeMu.Unlock()
	if cc.probeCl == nil {
		cl, err := redlock.New(cc.raw, redlock.WithTTL(chaosTTL), redlock.WithNodeTimeout(chaosNodeTimeout), redlock.WithRetryBackoff(chaosRetryBase, chaosRetryMax))
		if err != nil {
			return nil, err
		}
		cc.probeCl = cl
	}
	return cc.probeCl, nil
}

// closeProber closes the probe Client, if one was made.
func (cc *chaosClient) closeProber() {
	cc.probeMu.Lock()
	defer cc.probeMu.Unlock()
	if cc.probeCl != nil {
		_ = cc.probeCl.Close()
	}
}
