package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type mode int

const (
	distinct mode = iota // each worker locks its own keys
	tryOne               // every worker try-locks one key, retrying at once
	blockOne             // every worker waits for one key (Lock), holds it, then pauses
)

// In the blocking scenario a holder keeps the lock for holdTime, and after
// releasing it a worker does not ask again until another worker got the lock
// (or a second passed): the next holder is always one of the waiters, woken
// by its library, rather than the releaser barging in.
const holdTime = time.Millisecond

type scenario struct {
	id      string
	title   string
	workers int
	mode    mode
	slow    bool // node 0 is reached through a proxy that delays its replies
}

var scenarios = []scenario{
	{"w1", "1 worker, distinct keys", 1, distinct, false},
	{"w16", "16 workers, distinct keys", 16, distinct, false},
	{"try1", "16 workers try-locking one key", 16, tryOne, false},
	{"block1", "16 workers blocking on one key", 16, blockOne, false},
	{"slow", "16 workers, distinct keys, one node 2 ms slower", 16, distinct, true},
}

// result is what one run of one implementation in one scenario measured.
type result struct {
	cycles     int64   // completed lock+unlock cycles in the measured window
	failures   int64   // attempts that did not get the lock (or failed)
	tput       float64 // cycles/s
	cycleP50   time.Duration
	cycleP99   time.Duration
	acqP50     time.Duration
	acqP99     time.Duration
	handP50    time.Duration // blocking only: release call → next holder's acquisition
	handP99    time.Duration
	allocs     float64       // heap allocations per cycle (whole process)
	bytes      float64       // heap bytes per cycle
	cpu        time.Duration // user+system CPU of this process per cycle
	srvCPU     time.Duration // user+system CPU of the redis-server processes per cycle
	srvReads   float64       // reads the redis-server processes processed per cycle
	goroutines int           // most goroutines above the baseline during the window
	leftover   int           // goroutines above the baseline after close (settled)
	errs       int64
}

// sampler keeps a uniform sample of at most cap(buf) values (reservoir),
// allocation-free once created.
type sampler struct {
	buf []int64
	n   int64
	rng *rand.PCG
}

func newSampler(size int, seed uint64) *sampler {
	return &sampler{buf: make([]int64, 0, size), rng: rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)}
}

func (s *sampler) add(v int64) {
	s.n++
	if len(s.buf) < cap(s.buf) {
		s.buf = append(s.buf, v)
		return
	}
	if j := int64(s.rng.Uint64() % uint64(s.n)); j < int64(len(s.buf)) {
		s.buf[j] = v
	}
}

func percentiles(ss []*sampler) (p50, p99 time.Duration) {
	var all []int64
	for _, s := range ss {
		all = append(all, s.buf...)
	}
	if len(all) == 0 {
		return 0, 0
	}
	slices.Sort(all)
	at := func(q float64) time.Duration { return time.Duration(all[min(len(all)-1, int(q*float64(len(all))))]) }
	return at(0.50), at(0.99)
}

const (
	phaseWarm int32 = iota
	phaseMeasure
	phaseStop
)

type worker struct {
	cycles, failures, errs int64
	acq, cycle, hand       *sampler
}

var runSeq, debugErrs atomic.Int64

// measured records one cycle that began at start, acquired at acquired and
// ended at end, whose release failed with uerr (nil: it did not), when
// measure (the cycle ran in the measured window); what names the release
// in the first few errors -v prints.
func (wk *worker) measured(measure bool, start, acquired, end time.Time, uerr error, what string) {
	if !measure {
		return
	}
	if uerr != nil {
		wk.errs++
		if *verbose && debugErrs.Add(1) <= 3 {
			fmt.Fprintln(os.Stderr, what+":", uerr)
		}
	}
	wk.cycles++
	wk.acq.add(int64(acquired.Sub(start)))
	wk.cycle.add(int64(end.Sub(start)))
}

// publish prints a scenario's report and, when md is set, writes it into
// its section of that file.
func publish(text, md, heading, begin, end string) error {
	fmt.Println(text)
	if md == "" {
		return nil
	}
	return writeSection(md, heading, begin, end, text)
}

// medians is the median of each group's passes, per workload.
func medians(runs map[string]map[string][]result) map[string]map[string]result {
	meds := make(map[string]map[string]result, len(runs))
	for key, byGroup := range runs {
		meds[key] = make(map[string]result, len(byGroup))
		for name, rs := range byGroup {
			meds[key][name] = median(rs)
		}
	}
	return meds
}

// runOne runs one implementation in one scenario: warm-up, then the
// measured window, then close; it reports what the window measured (the
// servers' CPU too, from srvs).
func runOne(ctx context.Context, sc scenario, mk func([]string) (impl, error), addrs []string, srvs []*server, warm, dur time.Duration) (result, error) {
	runtime.GC()
	base := runtime.NumGoroutine()
	im, err := mk(addrs)
	if err != nil {
		return result{}, err
	}
	run := runSeq.Add(1)
	var phase atomic.Int32
	var handMu sync.Mutex // blocking: guards gen and lastAcq
	var gen int64         // acquisitions so far
	var lastAcq time.Time // when the last one returned
	ws := make([]*worker, sc.workers)
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	for w := range sc.workers {
		wk := &worker{acq: newSampler(1<<15, uint64(w)+1), cycle: newSampler(1<<15, uint64(w)+101), hand: newSampler(1<<14, uint64(w)+201)}
		ws[w] = wk
		keys := make([]string, 64)
		for k := range keys {
			keys[k] = fmt.Sprintf("bench%d-w%d-k%d", run, w, k)
		}
		one := fmt.Sprintf("bench%d-one", run)
		s := im.session()
		wg.Go(func() {
			for k := 0; ; k++ {
				p := phase.Load()
				if p == phaseStop {
					return
				}
				start := time.Now()
				var ok bool
				var err error
				switch sc.mode {
				case distinct:
					ok, err = s.tryLock(wctx, keys[k%len(keys)])
				case tryOne:
					ok, err = s.tryLock(wctx, one)
				case blockOne:
					err = s.lock(wctx, one)
					ok = err == nil
				}
				acquired := time.Now()
				if !ok {
					if p == phaseMeasure && wctx.Err() == nil {
						wk.failures++
						if err != nil && wctx.Err() == nil {
							wk.errs++
						}
						if err != nil && *verbose && debugErrs.Add(1) <= 3 {
							fmt.Fprintln(os.Stderr, "lock:", err)
						}
					}
					if err != nil && wctx.Err() == nil && sc.mode != blockOne {
						time.Sleep(time.Millisecond) // an error, not contention: do not spin
					}
					continue
				}
				var myGen int64
				if sc.mode == blockOne {
					handMu.Lock()
					gen++
					myGen, lastAcq = gen, acquired
					handMu.Unlock()
					time.Sleep(holdTime)
				}
				uerr := s.unlock(context.Background())
				end := time.Now()
				if sc.mode == blockOne && uerr == nil {
					// Wait for the next holder: the hand-off is from the
					// return of our release to the return of its Lock (0
					// when it got the lock before our release returned).
					for until := end.Add(time.Second); time.Now().Before(until) && phase.Load() != phaseStop; time.Sleep(50 * time.Microsecond) {
						handMu.Lock()
						g, at := gen, lastAcq
						handMu.Unlock()
						if g != myGen {
							if p == phaseMeasure {
								wk.hand.add(max(0, int64(at.Sub(end))))
							}
							break
						}
					}
				}
				wk.measured(p == phaseMeasure && phase.Load() == phaseMeasure, start, acquired, end, uerr, "unlock")
			}
		})
	}

	sleepCtx(ctx, warm)
	var m0, m1 runtime.MemStats
	var r0, r1 syscall.Rusage
	runtime.ReadMemStats(&m0)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	s0, serr0 := serversCPU(srvs)
	rd0, rerr0 := serversReads(srvs)
	begin := time.Now()
	phase.Store(phaseMeasure)
	maxG := 0
	for end := begin.Add(dur); time.Now().Before(end) && ctx.Err() == nil; {
		sleepCtx(ctx, min(50*time.Millisecond, time.Until(end)))
		maxG = max(maxG, runtime.NumGoroutine())
	}
	phase.Store(phaseStop)
	elapsed := time.Since(begin)
	s1, serr1 := serversCPU(srvs)
	rd1, rerr1 := serversReads(srvs)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	runtime.ReadMemStats(&m1)
	cancel()
	wg.Wait()
	im.close()
	left := runtime.NumGoroutine() - base
	for deadline := time.Now().Add(3 * time.Second); left > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		left = runtime.NumGoroutine() - base
	}

	var res result
	var acq, cyc, hand []*sampler
	for _, w := range ws {
		res.cycles += w.cycles
		res.failures += w.failures
		res.errs += w.errs
		acq, cyc, hand = append(acq, w.acq), append(cyc, w.cycle), append(hand, w.hand)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if err := errors.Join(serr0, serr1, rerr0, rerr1); err != nil {
		return res, err
	}
	res.tput = float64(res.cycles) / elapsed.Seconds()
	res.acqP50, res.acqP99 = percentiles(acq)
	res.cycleP50, res.cycleP99 = percentiles(cyc)
	res.handP50, res.handP99 = percentiles(hand)
	if res.cycles > 0 {
		c := float64(res.cycles)
		res.allocs = float64(m1.Mallocs-m0.Mallocs) / c
		res.bytes = float64(m1.TotalAlloc-m0.TotalAlloc) / c
		cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
		res.cpu = cpu / time.Duration(res.cycles)
		res.srvCPU = (s1 - s0) / time.Duration(res.cycles)
		res.srvReads = float64(rd1-rd0) / c
	}
	res.goroutines = maxG - base
	res.leftover = max(left, 0)
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
