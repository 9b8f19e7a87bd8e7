package main

// The shared scenarios: shared holders (a read/write lock).
//
// quorumlock's Shared option takes a key as one of its shared holders: any
// number at once, no exclusive holder meanwhile, and a waiting exclusive
// holder (a writer) holds new shared ones back until it has had the key.
// redsync has no read/write lock, and Redisson's RReadWriteLock is a
// single-master Java lock, so neither gives a baseline; what a redsync user
// has for readers is its exclusive Mutex, which shared-redsync measures.
//
// For each hold of -shared-hold, 16 workers in one process:
//
//   - shared-read: TryLock(Shared) on one key, on one Client;
//   - shared-clients: the same with a Client per worker (as 16 processes
//     would), so that this Client's turns on the key do not order the
//     readers' rounds (a Client runs one acquisition round per key at a
//     time);
//   - shared-excl: TryLock on one key, on one Client (try1's workload);
//   - shared-redsync: the same with redsync's Mutex (TryLockContext);
//   - shared-own: TryLock, each worker on its own keys (w16's workload):
//     the uncontended ceiling.
//
// A refused attempt is retried at once; a cycle is a successful acquisition
// and its release, with the hold between them. And a writer against
// readers:
//
//   - shared-mixed: 15 readers (Lock(Shared) on one Client, each holding the
//     key holdTime) and a writer on a Client of its own (Lock of the key
//     alone, at most sharedMaxWait, holding it holdTime, then pausing
//     sharedPause);
//   - shared-writer: the writer alone, its latency without readers.
//
// The runs are interleaved like the other in-process scenarios' (the
// workloads' order rotated by the pass) and measured the same way
// (readUsage, perCycle); each lasts -shared-d (at most -d) after -warm.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

const (
	sharedID      = "shared"
	sharedBegin   = "<!-- bench:shared:begin -->"
	sharedEnd     = "<!-- bench:shared:end -->"
	sharedHeading = "### Shared holders"
	// The writer of shared-mixed and shared-writer: Lock gives up after
	// sharedMaxWait (counted as a failed attempt: a starved writer), and
	// the writer pauses sharedPause after each release.
	sharedMaxWait = time.Second
	sharedPause   = 5 * time.Millisecond
)

// sharedRole is what a group of workers does in a cycle.
type sharedRole int

const (
	tryShared  sharedRole = iota // TryLock(Shared), retried at once
	tryAlone                     // TryLock, retried at once
	waitShared                   // Lock(Shared)
	writeAlone                   // Lock within sharedMaxWait, then a pause
)

// sharedGroup is a group of workers of one role in a workload; each group
// gets a result of its own.
type sharedGroup struct {
	name    string // "readers", "workers", "writer"
	role    sharedRole
	n       int
	redsync bool // redsync's Mutex (tryAlone only)
	each    bool // a Client per worker, not one for the group
	own     bool // each worker on its own keys, not the one key
}

// sharedWorkload is one of the shared scenarios' workloads.
type sharedWorkload struct {
	id, title string
	groups    []sharedGroup
	fixedHold bool // holds holdTime, whatever -shared-hold says
}

var sharedWorkloads = []sharedWorkload{
	{"shared-read", "16 readers, one key (`TryLock(Shared)`)", []sharedGroup{{"readers", tryShared, 16, false, false, false}}, false},
	{"shared-clients", "16 readers, one key, a Client each", []sharedGroup{{"readers", tryShared, 16, false, true, false}}, false},
	{"shared-excl", "16 workers, one key (`TryLock`)", []sharedGroup{{"workers", tryAlone, 16, false, false, false}}, false},
	{"shared-redsync", "16 workers, one key (redsync `TryLockContext`)", []sharedGroup{{"workers", tryAlone, 16, true, false, false}}, false},
	{"shared-own", "16 workers, each on its own keys (`TryLock`)", []sharedGroup{{"workers", tryAlone, 16, false, false, true}}, false},
	{"shared-mixed", "15 readers (`Lock(Shared)`) and a writer (`Lock`), one key", []sharedGroup{
		{"readers", waitShared, 15, false, false, false}, {"writer", writeAlone, 1, false, false, false}}, true},
	{"shared-writer", "the writer alone", []sharedGroup{{"writer", writeAlone, 1, false, false, false}}, true},
}

func (wl sharedWorkload) usesRedsync() bool {
	return slices.ContainsFunc(wl.groups, func(g sharedGroup) bool { return g.redsync })
}

// optSession is a quorumlock session whose acquisitions take opts.
type optSession struct {
	c    *redlock.Client
	opts []redlock.Option
	l    *redlock.Lock
}

func (s *optSession) tryLock(ctx context.Context, key string) (bool, error) {
	l, err := s.c.TryLock(ctx, key, s.opts...)
	if err != nil {
		if notAcquired(err) {
			return false, nil
		}
		return false, err
	}
	s.l = l
	return true, nil
}

func (s *optSession) lock(ctx context.Context, key string) error {
	l, err := s.c.Lock(ctx, key, s.opts...)
	if err != nil {
		return err
	}
	s.l = l
	return nil
}

func (s *optSession) unlock(ctx context.Context) error {
	err := s.l.Release(ctx)
	s.l = nil
	return err
}

// sessionFor returns a worker's session of group g over im.
func (g sharedGroup) sessionFor(im impl) session {
	o, ok := im.(*ours)
	if !ok {
		return im.session()
	}
	switch g.role {
	case tryShared, waitShared:
		return &optSession{c: o.c, opts: []redlock.Option{redlock.Shared()}}
	case writeAlone:
		return &optSession{c: o.c, opts: []redlock.Option{redlock.WithMaxWait(sharedMaxWait)}}
	}
	return &optSession{c: o.c}
}

// ---- the runs ----

type sharedCfg struct {
	holdList string
	dur      time.Duration
	holds    []time.Duration
}

// sharedBench runs the shared scenarios, pass by pass, and reports them.
type sharedBench struct {
	cfg     sharedCfg
	wls     []sharedWorkload
	redsync bool
	runs    map[string]map[string][]result // workload/hold → group → per pass
}

func sharedKey(id string, hold time.Duration) string { return id + "/" + hold.String() }

// newSharedBench checks the shared flags and picks the workloads (only: the
// -scenarios list; "shared" names them all); libs are the implementations
// -impls selects. It returns nil when the scenarios are off.
func newSharedBench(only string, libs []string, cfg sharedCfg, dur time.Duration) (*sharedBench, error) {
	if !slices.Contains(libs, oursName) {
		return nil, nil
	}
	names := strings.Split(only, ",")
	sb := &sharedBench{cfg: cfg, redsync: slices.Contains(libs, base), runs: map[string]map[string][]result{}}
	for _, wl := range sharedWorkloads {
		if wl.usesRedsync() && !sb.redsync {
			continue
		}
		if only == "" || slices.Contains(names, sharedID) || slices.Contains(names, wl.id) {
			sb.wls = append(sb.wls, wl)
		}
	}
	if len(sb.wls) == 0 {
		return nil, nil
	}
	for f := range strings.SplitSeq(cfg.holdList, ",") {
		h, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || h < 0 || h > time.Second {
			return nil, fmt.Errorf("shared: -shared-hold %q: want comma-separated durations from 0 to 1s", cfg.holdList)
		}
		sb.cfg.holds = append(sb.cfg.holds, h)
	}
	if sb.cfg.dur <= 0 || sb.cfg.dur > dur {
		sb.cfg.dur = dur
	}
	return sb, nil
}

// sharedRun is one run of a pass: a workload with a hold.
type sharedRun struct {
	wl   sharedWorkload
	hold time.Duration
}

func (sb *sharedBench) plan() []sharedRun {
	var rs []sharedRun
	for _, wl := range sb.wls {
		if wl.fixedHold {
			rs = append(rs, sharedRun{wl, holdTime})
			continue
		}
		for _, h := range sb.cfg.holds {
			rs = append(rs, sharedRun{wl, h})
		}
	}
	return rs
}

// pass runs every workload with every hold once, in an order rotated by the
// pass p, and prints a progress line per group of a run.
func (sb *sharedBench) pass(ctx context.Context, p int, addrs []string, srvs []*server, warm time.Duration) error {
	if sb == nil {
		return nil
	}
	plan := sb.plan()
	for j := range plan {
		r := plan[(j+p)%len(plan)]
		rs, err := runShared(ctx, r.wl, r.hold, addrs, srvs, warm, sb.cfg.dur)
		if err != nil {
			return fmt.Errorf("%s/hold=%v: %w", r.wl.id, r.hold, err)
		}
		key := sharedKey(r.wl.id, r.hold)
		if sb.runs[key] == nil {
			sb.runs[key] = map[string][]result{}
		}
		for i, g := range r.wl.groups {
			res := rs[i]
			sb.runs[key][g.name] = append(sb.runs[key][g.name], res)
			fmt.Fprintf(os.Stderr, "pass %d %-14s hold %-5v %-7s %8.0f cycles/s  acq p50 %-9v p99 %-9v %5.0f allocs  cpu %v + servers %v  g+%d left %d  fail %d err %d\n",
				p+1, r.wl.id, r.hold, g.name, res.tput, res.acqP50.Round(time.Microsecond), res.acqP99.Round(time.Microsecond), res.allocs,
				res.cpu.Round(time.Microsecond), res.srvCPU.Round(time.Microsecond), res.goroutines, res.leftover, res.failures, res.errs)
		}
	}
	return nil
}

// runShared runs one workload, each cycle holding the lock for hold:
// warm-up, the measured window, then close. It returns a result per group;
// the costs per cycle (allocations, CPU) are the whole process's and the
// servers' divided by the cycles of all groups.
func runShared(ctx context.Context, wl sharedWorkload, hold time.Duration, addrs []string, srvs []*server, warm, dur time.Duration) ([]result, error) {
	runtime.GC()
	baseG := runtime.NumGoroutine()
	var ims []impl
	defer func() {
		for _, im := range ims {
			im.close()
		}
	}()
	newImpl := func(g sharedGroup) (impl, error) {
		mk := newOurs
		if g.redsync {
			mk = newRedsync
		}
		im, err := mk(addrs)
		if err == nil {
			ims = append(ims, im)
		}
		return im, err
	}
	run := runSeq.Add(1)
	one := fmt.Sprintf("shared%d-one", run)
	var phase atomic.Int32
	ws := make([][]*worker, len(wl.groups))
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := 0
	for gi, g := range wl.groups {
		var im impl
		for range g.n {
			if im == nil || g.each {
				var err error
				if im, err = newImpl(g); err != nil {
					phase.Store(phaseStop)
					cancel()
					wg.Wait()
					return nil, err
				}
			}
			wk := &worker{acq: newSampler(1<<15, uint64(w)+1), cycle: newSampler(1<<15, uint64(w)+101)}
			ws[gi] = append(ws[gi], wk)
			keys := []string{one}
			if g.own {
				keys = make([]string, 64)
				for k := range keys {
					keys[k] = fmt.Sprintf("shared%d-w%d-k%d", run, w, k)
				}
			}
			s := g.sessionFor(im)
			wg.Go(func() { g.loop(wctx, s, keys, hold, wk, &phase) })
			w++
		}
	}

	sleepCtx(ctx, warm)
	u0, err0 := readUsage(srvs)
	phase.Store(phaseMeasure)
	maxG := 0
	for end := u0.at.Add(dur); time.Now().Before(end) && ctx.Err() == nil; {
		sleepCtx(ctx, min(50*time.Millisecond, time.Until(end)))
		maxG = max(maxG, runtime.NumGoroutine())
	}
	phase.Store(phaseStop)
	u1, err1 := readUsage(srvs)
	cancel()
	wg.Wait()
	for _, im := range ims {
		im.close()
	}
	ims = nil
	left := settled(baseG)

	res := make([]result, len(wl.groups))
	var total int64
	for gi := range wl.groups {
		var acq, cyc []*sampler
		for _, wk := range ws[gi] {
			res[gi].cycles += wk.cycles
			res[gi].failures += wk.failures
			res[gi].errs += wk.errs
			acq, cyc = append(acq, wk.acq), append(cyc, wk.cycle)
		}
		total += res[gi].cycles
		res[gi].acqP50, res[gi].acqP99 = percentiles(acq)
		res[gi].cycleP50, res[gi].cycleP99 = percentiles(cyc)
		res[gi].goroutines, res[gi].leftover = maxG-baseG, left
	}
	if err := errors.Join(ctx.Err(), err0, err1); err != nil {
		return res, err
	}
	var all result
	all.cycles = total
	all.perCycle(u0, u1)
	for gi := range res {
		r := &res[gi]
		r.tput = float64(r.cycles) / u1.at.Sub(u0.at).Seconds()
		r.allocs, r.bytes, r.cpu, r.srvCPU, r.srvReads = all.allocs, all.bytes, all.cpu, all.srvCPU, all.srvReads
	}
	return res, nil
}

// loop is one worker of group g on keys (taken in turn) until the phase
// says stop.
func (g sharedGroup) loop(ctx context.Context, s session, keys []string, hold time.Duration, wk *worker, phase *atomic.Int32) {
	for c := 0; ; c++ {
		p := phase.Load()
		if p == phaseStop {
			return
		}
		key := keys[c%len(keys)]
		start := time.Now()
		var ok bool
		var err error
		switch g.role {
		case tryShared, tryAlone:
			ok, err = s.tryLock(ctx, key)
		case waitShared, writeAlone:
			err = s.lock(ctx, key)
			ok = err == nil
			if errors.Is(err, redlock.ErrNotAcquired) && ctx.Err() == nil {
				err = nil // the writer's wait ran out: a failed attempt, not an error
			}
		}
		acquired := time.Now()
		if !ok {
			if p == phaseMeasure && ctx.Err() == nil {
				wk.failures++
				if err != nil {
					wk.errs++
					if *verbose && debugErrs.Add(1) <= 3 {
						fmt.Fprintln(os.Stderr, "lock:", err)
					}
				}
			}
			if err != nil && ctx.Err() == nil {
				time.Sleep(time.Millisecond) // an error, not contention: do not spin
			}
			continue
		}
		if hold > 0 {
			time.Sleep(hold)
		}
		uerr := s.unlock(context.Background())
		end := time.Now()
		wk.measured(p == phaseMeasure && phase.Load() == phaseMeasure, start, acquired, end, uerr, "unlock")
		if g.role == writeAlone {
			time.Sleep(sharedPause)
		}
	}
}

// ---- the report ----

// report prints the shared report after env and writes it where -md says.
func (sb *sharedBench) report(env string, passes int, warm time.Duration, md string) error {
	if sb == nil {
		return nil
	}
	text := env + "\n" + sb.markdown(medians(sb.runs), passes, warm)
	return publish(text, md, sharedHeading, sharedBegin, sharedEnd)
}

// tput is the median throughput of the only group of workload id with
// hold h (0 when it did not run).
func tput(meds map[string]map[string]result, id string, h time.Duration) float64 {
	return meds[sharedKey(id, h)][sharedGroupOf(id)].tput
}

// markdown renders the description, the two summary tables with their
// ratios, and the figures of every run.
func (sb *sharedBench) markdown(meds map[string]map[string]result, passes int, warm time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#### Shared holders (`%s`)\n\n", sharedID)
	fmt.Fprintf(&b, "Medians of %d interleaved pass(es), %s measured per run after %s warm-up. "+
		"A cycle is a successful acquisition, the hold, and the release; a refused `TryLock` is retried at once. "+
		"The writer takes the key alone with `Lock` (giving up after %s: a failed attempt), holds it %s and pauses %s after each release; "+
		"its Client is not the readers'. redsync has no read/write lock (`shared-redsync` is its exclusive Mutex, what its users have for readers); "+
		"Redisson's `RReadWriteLock` is a single-master Java lock and does not run here.\n\n",
		passes, human(sb.cfg.dur), human(warm), human(sharedMaxWait), human(holdTime), human(sharedPause))

	var cols []string // the workloads run with each hold
	for _, wl := range sb.wls {
		if !wl.fixedHold {
			cols = append(cols, wl.id)
		}
	}
	if len(cols) > 0 {
		b.WriteString("| hold |")
		for _, id := range cols {
			fmt.Fprintf(&b, " `%s` cycles/s |", id)
		}
		rates := [][2]string{{"shared-read", "shared-excl"}, {"shared-read", "shared-own"}, {"shared-read", "shared-redsync"}, {"shared-clients", "shared-own"}}
		var shown [][2]string
		for _, r := range rates {
			if slices.Contains(cols, r[0]) && slices.Contains(cols, r[1]) {
				shown = append(shown, r)
				fmt.Fprintf(&b, " %s ÷ %s |", r[0], r[1])
			}
		}
		b.WriteString("\n|---:|" + strings.Repeat("---:|", len(cols)+len(shown)) + "\n")
		for _, h := range sb.cfg.holds {
			fmt.Fprintf(&b, "| %s |", human(h))
			for _, id := range cols {
				fmt.Fprintf(&b, " %.0f |", tput(meds, id, h))
			}
			for _, r := range shown {
				fmt.Fprintf(&b, " %s |", ratio(tput(meds, r[0], h), tput(meds, r[1], h)))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}

	mixed, okM := meds[sharedKey("shared-mixed", holdTime)]
	alone, okA := meds[sharedKey("shared-writer", holdTime)]
	if okM && okA {
		mw, aw := mixed["writer"], alone["writer"]
		fmt.Fprintf(&b, "| writer | writer cycles/s | writer acquire p50 (ms) | writer acquire p99 (ms) | writer's `Lock` calls given up (%s) | reader cycles/s | reader acquire p50 (ms) | reader acquire p99 (ms) |\n", human(sharedMaxWait))
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
		mr := mixed["readers"]
		fmt.Fprintf(&b, "| beside 15 readers (`shared-mixed`) | %.0f | %s | %s | %d | %.0f | %s | %s |\n",
			mw.tput, ms(mw.acqP50), ms(mw.acqP99), mw.failures, mr.tput, ms(mr.acqP50), ms(mr.acqP99))
		fmt.Fprintf(&b, "| alone (`shared-writer`) | %.0f | %s | %s | %d | – | – | – |\n", aw.tput, ms(aw.acqP50), ms(aw.acqP99), aw.failures)
		fmt.Fprintf(&b, "| beside readers ÷ alone | %s | %s | %s | – | – | – | – |\n\n",
			ratio(mw.tput, aw.tput), ratio(float64(mw.acqP50), float64(aw.acqP50)), ratio(float64(mw.acqP99), float64(aw.acqP99)))
	}

	b.WriteString("| workload | hold | group | cycles/s | cycle p50 (ms) | cycle p99 (ms) | acquire p50 (ms) | acquire p99 (ms) | allocations per cycle | " +
		"client CPU per cycle (µs) | servers' CPU per cycle (µs, 5 redis-server) | servers' reads per cycle | failed attempts | errors | goroutines left after close |\n")
	b.WriteString("|---|---:|---|" + strings.Repeat("---:|", 12) + "\n")
	for _, r := range sb.plan() {
		m := meds[sharedKey(r.wl.id, r.hold)]
		for _, g := range r.wl.groups {
			x := m[g.name]
			fmt.Fprintf(&b, "| `%s`: %s | %s | %s | %.0f | %s | %s | %s | %s | %.0f | %.0f | %.0f | %.2f | %d | %d | %d |\n",
				r.wl.id, r.wl.title, human(r.hold), g.name, x.tput, ms(x.cycleP50), ms(x.cycleP99), ms(x.acqP50), ms(x.acqP99), x.allocs,
				float64(x.cpu)/1e3, float64(x.srvCPU)/1e3, x.srvReads, x.failures, x.errs, x.leftover)
		}
	}
	b.WriteString("\nAllocations, CPU and reads per cycle are the whole run's divided by the cycles of all its groups.\n")
	return b.String()
}

// sharedGroupOf is the name of the only group of workload id.
func sharedGroupOf(id string) string {
	for _, wl := range sharedWorkloads {
		if wl.id == id {
			return wl.groups[0].name
		}
	}
	return ""
}
