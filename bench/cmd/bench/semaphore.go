package main

// The semaphore scenario: a counting semaphore's acquire/release throughput.
//
// For each k of -sem-k, 2k workers in one process, on one Client, cycle
// Semaphore.Acquire, a hold of -sem-hold, and Release on a semaphore of k
// permits (sem-k), against the same workers cycling Client.Lock, the hold
// and Release on one key (sem-lock-k: a semaphore of one permit built the
// plain way), and, for k = 1, redsync's Mutex (LockContext, its own
// retries). Every worker waits for its turn; the library's wake-up decides
// who goes next. The runs are interleaved (their order rotated by the
// pass) and measured like the other in-process scenarios (readUsage,
// perCycle); each lasts -sem-d (at most -d) after -warm. Each run also
// counts the holders at once, which must never exceed k.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/quorumlock/quorumlock/redlock"
)

const (
	semID      = "semaphore"
	semBegin   = "<!-- bench:semaphore:begin -->"
	semEnd     = "<!-- bench:semaphore:end -->"
	semHeading = "### Counting semaphores"
)

var (
	semKList = flag.String("sem-k", "1,4,16", "semaphore: comma-separated numbers of permits (2k workers each)")
	semHold  = flag.Duration("sem-hold", time.Millisecond, "semaphore: how long each cycle holds its permit or lock")
	semDur   = flag.Duration("sem-d", 2*time.Second, "semaphore: measured duration of each run (at most -d)")
)

// semImpl is one way of limiting holders in the semaphore scenario.
type semImpl struct {
	name  string
	title string
	onlyK int // runs only for this k (0: every k)
	lib   string
}

const semName = "Semaphore"

var semImpls = []semImpl{
	{semName, "quorumlock `Semaphore(k).Acquire`", 0, oursName},
	{"Lock", "quorumlock `Lock`, one key", 0, oursName},
	{"redsync", "redsync `Mutex.LockContext`, one key", 1, base},
}

// semBench runs the semaphore scenario, pass by pass, and reports it.
type semBench struct {
	ks    []int
	hold  time.Duration
	dur   time.Duration
	impls []semImpl
	runs  map[string][]semResult // impl/k → per pass
}

// semResult is one run's result and the most holders it saw at once.
type semResult struct {
	result
	most int64
}

func semKey(name string, k int) string { return name + "/" + strconv.Itoa(k) }

// newSemBench checks the semaphore flags; only is the -scenarios list, libs
// the implementations -impls selects. It returns nil when the scenario is
// off.
func newSemBench(only string, libs []string, dur time.Duration) (*semBench, error) {
	if (only != "" && !slices.Contains(strings.Split(only, ","), semID)) || !slices.Contains(libs, oursName) {
		return nil, nil
	}
	sb := &semBench{hold: *semHold, dur: *semDur, runs: map[string][]semResult{}}
	for f := range strings.SplitSeq(*semKList, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 || k > 64 {
			return nil, fmt.Errorf("semaphore: -sem-k %q: want comma-separated numbers from 1 to 64", *semKList)
		}
		sb.ks = append(sb.ks, k)
	}
	if sb.hold < 0 || sb.hold > time.Second {
		return nil, fmt.Errorf("semaphore: -sem-hold %v: want 0 to 1s", sb.hold)
	}
	if sb.dur <= 0 || sb.dur > dur {
		sb.dur = dur
	}
	for _, im := range semImpls {
		if slices.Contains(libs, im.lib) {
			sb.impls = append(sb.impls, im)
		}
	}
	return sb, nil
}

type semRun struct {
	im semImpl
	k  int
}

func (sb *semBench) plan() []semRun {
	var rs []semRun
	for _, k := range sb.ks {
		for _, im := range sb.impls {
			if im.onlyK == 0 || im.onlyK == k {
				rs = append(rs, semRun{im, k})
			}
		}
	}
	return rs
}

// pass runs every implementation for every k once, in an order rotated by
// the pass p.
func (sb *semBench) pass(ctx context.Context, p int, addrs []string, srvs []*server, warm time.Duration) error {
	if sb == nil {
		return nil
	}
	plan := sb.plan()
	for j := range plan {
		r := plan[(j+p)%len(plan)]
		res, err := runSem(ctx, r.im, r.k, sb.hold, addrs, srvs, warm, sb.dur)
		if err != nil {
			return fmt.Errorf("%s/%s/k=%d: %w", semID, r.im.name, r.k, err)
		}
		sb.runs[semKey(r.im.name, r.k)] = append(sb.runs[semKey(r.im.name, r.k)], res)
		fmt.Fprintf(os.Stderr, "pass %d %-9s k=%-2d %-9s %8.0f cycles/s  acq p50 %-9v p99 %-9v most held %d  cpu %v + servers %v  left %d  fail %d err %d\n",
			p+1, semID, r.k, r.im.name, res.tput, res.acqP50.Round(time.Microsecond), res.acqP99.Round(time.Microsecond), res.most,
			res.cpu.Round(time.Microsecond), res.srvCPU.Round(time.Microsecond), res.leftover, res.failures, res.errs)
	}
	return nil
}

// semAcquirer takes and gives back one permit (or the lock) per cycle.
type semAcquirer interface {
	acquire(ctx context.Context) error
	release(ctx context.Context) error
}

type permitSession struct {
	s *redlock.Semaphore
	l *redlock.Lock
}

func (p *permitSession) acquire(ctx context.Context) (err error) {
	p.l, err = p.s.Acquire(ctx)
	return err
}

func (p *permitSession) release(ctx context.Context) error { return p.l.Release(ctx) }

// lockSession adapts a session's lock and unlock to semAcquirer.
type lockSession struct {
	s   session
	key string
}

func (l lockSession) acquire(ctx context.Context) error { return l.s.lock(ctx, l.key) }
func (l lockSession) release(ctx context.Context) error { return l.s.unlock(ctx) }

// runSem runs one implementation with k permits: warm-up, the measured
// window, then close.
func runSem(ctx context.Context, im semImpl, k int, hold time.Duration, addrs []string, srvs []*server, warm, dur time.Duration) (semResult, error) {
	runtime.GC()
	baseG := runtime.NumGoroutine()
	mk := newOurs
	if im.lib == base {
		mk = newRedsync
	}
	lib, err := mk(addrs)
	if err != nil {
		return semResult{}, err
	}
	defer func() {
		if lib != nil {
			lib.close()
		}
	}()
	run := runSeq.Add(1)
	name := fmt.Sprintf("sem%d", run)
	var sem *redlock.Semaphore
	if im.name == semName {
		if sem, err = lib.(*ours).c.Semaphore(name, k, redlock.WithTTL(ttl)); err != nil {
			return semResult{}, err
		}
	}
	var phase atomic.Int32
	var held, most atomic.Int64
	ws := make([]*worker, 2*k)
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := range ws {
		wk := &worker{acq: newSampler(1<<15, uint64(w)+1), cycle: newSampler(1<<15, uint64(w)+101)}
		ws[w] = wk
		var a semAcquirer = lockSession{lib.session(), name}
		if sem != nil {
			a = &permitSession{s: sem}
		}
		wg.Go(func() { semLoop(wctx, a, hold, wk, &phase, &held, &most) })
	}

	sleepCtx(ctx, warm)
	u0, err0 := readUsage(srvs)
	most.Store(held.Load())
	phase.Store(phaseMeasure)
	sleepCtx(ctx, time.Until(u0.at.Add(dur)))
	phase.Store(phaseStop)
	u1, err1 := readUsage(srvs)
	cancel()
	wg.Wait()
	lib.close()
	lib = nil
	left := settled(baseG)

	var res semResult
	var acq, cyc []*sampler
	for _, wk := range ws {
		res.cycles += wk.cycles
		res.failures += wk.failures
		res.errs += wk.errs
		acq, cyc = append(acq, wk.acq), append(cyc, wk.cycle)
	}
	res.acqP50, res.acqP99 = percentiles(acq)
	res.cycleP50, res.cycleP99 = percentiles(cyc)
	res.leftover, res.most = left, most.Load()
	if err := errors.Join(ctx.Err(), err0, err1); err != nil {
		return res, err
	}
	res.perCycle(u0, u1)
	if res.most > int64(k) {
		return res, fmt.Errorf("%d holders at once with %d permits", res.most, k)
	}
	return res, nil
}

// semLoop is one worker: acquire, hold, release until the phase says
// stop; held counts the holders at once and most keeps the largest count
// seen in the measured window.
func semLoop(ctx context.Context, a semAcquirer, hold time.Duration, wk *worker, phase *atomic.Int32, held, most *atomic.Int64) {
	for {
		p := phase.Load()
		if p == phaseStop {
			return
		}
		start := time.Now()
		err := a.acquire(ctx)
		acquired := time.Now()
		if err != nil {
			if p == phaseMeasure && ctx.Err() == nil {
				wk.failures++
				if !errors.Is(err, redlock.ErrNotAcquired) && !errors.Is(err, redsync.ErrFailed) {
					wk.errs++
				}
				if *verbose && debugErrs.Add(1) <= 3 {
					fmt.Fprintln(os.Stderr, "acquire:", err)
				}
				time.Sleep(time.Millisecond) // do not spin on errors
			}
			continue
		}
		n := held.Add(1)
		if phase.Load() == phaseMeasure {
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
		}
		if hold > 0 {
			time.Sleep(hold)
		}
		held.Add(-1)
		uerr := a.release(context.Background())
		end := time.Now()
		wk.measured(p == phaseMeasure && phase.Load() == phaseMeasure, start, acquired, end, uerr, "release")
	}
}

// ---- the report ----

// report prints the semaphore report after env and writes it where -md
// says.
func (sb *semBench) report(env string, passes int, warm time.Duration, md string) error {
	if sb == nil {
		return nil
	}
	meds := map[string]semResult{}
	for key, rs := range sb.runs {
		plain := make([]result, len(rs))
		var most int64
		for i, r := range rs {
			plain[i], most = r.result, max(most, r.most)
		}
		meds[key] = semResult{median(plain), most}
	}
	return publish(env+"\n"+sb.markdown(meds, passes, warm), md, semHeading, semBegin, semEnd)
}

// markdown renders the description, the throughput table with its ratios,
// and the figures of every run.
func (sb *semBench) markdown(meds map[string]semResult, passes int, warm time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#### Counting semaphores (`%s`)\n\n", semID)
	fmt.Fprintf(&b, "Medians of %d interleaved pass(es), %s measured per run after %s warm-up, TTL %s. "+
		"2k workers on one Client; a cycle waits for a permit (`Acquire`) or the lock (`Lock`), holds it %s and releases it. "+
		"Lock and redsync take one key: the semaphore of one permit built the plain way. "+
		"Most held at once is the largest number of workers between their acquisition and their release in any pass (never above k).\n\n",
		passes, human(sb.dur), human(warm), human(ttl), human(sb.hold))
	b.WriteString("| k | workers |")
	for _, im := range sb.impls {
		fmt.Fprintf(&b, " %s cycles/s |", im.name)
	}
	var rated []semImpl
	if slices.ContainsFunc(sb.impls, func(im semImpl) bool { return im.name == semName }) {
		for _, im := range sb.impls {
			if im.name != semName {
				rated = append(rated, im)
				fmt.Fprintf(&b, " %s ÷ %s |", semName, im.name)
			}
		}
	}
	b.WriteString("\n|---:|---:|" + strings.Repeat("---:|", len(sb.impls)+len(rated)) + "\n")
	for _, k := range sb.ks {
		fmt.Fprintf(&b, "| %d | %d |", k, 2*k)
		for _, im := range sb.impls {
			if r, ok := meds[semKey(im.name, k)]; ok {
				fmt.Fprintf(&b, " %.0f |", r.tput)
			} else {
				b.WriteString(" – |")
			}
		}
		for _, im := range rated {
			fmt.Fprintf(&b, " %s |", ratio(meds[semKey(semName, k)].tput, meds[semKey(im.name, k)].tput))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| k | implementation | cycles/s | acquire p50 (ms) | acquire p99 (ms) | cycle p50 (ms) | cycle p99 (ms) | most held at once | allocations per cycle | " +
		"client CPU per cycle (µs) | servers' CPU per cycle (µs, 5 redis-server) | failed acquisitions | errors | goroutines left after close |\n")
	b.WriteString("|---:|---|" + strings.Repeat("---:|", 12) + "\n")
	for _, r := range sb.plan() {
		x := meds[semKey(r.im.name, r.k)]
		fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s | %s | %s | %d | %.0f | %.0f | %.0f | %d | %d | %d |\n",
			r.k, r.im.title, x.tput, ms(x.acqP50), ms(x.acqP99), ms(x.cycleP50), ms(x.cycleP99), x.most, x.allocs,
			float64(x.cpu)/1e3, float64(x.srvCPU)/1e3, x.failures, x.errs, x.leftover)
	}
	return b.String()
}
