package main

// The multi scenarios: several keys as one lock.
//
// quorumlock's TryLockAll takes k keys as one lock: on each node one script
// takes every key or none, and Release is one script per node. redsync has
// no lock of several keys. What its users do instead, and what Redisson's
// RedissonMultiLock does inside, is one lock per key, taken in turn in a
// fixed order (sorted, so that two sets never wait for each other), a
// failed attempt at one key releasing those already taken, and every lock
// released in reverse order at the end. Both baselines do exactly that: one
// over redsync (a Mutex per key, TryLockContext), one over quorumlock's own
// TryLock (a Lock per key). All three get the same sorted key sets, for
// each k of -multi-k, in three workloads:
//
//   - multi-w1: one worker, on its own keys: latency, k rounds against one;
//   - multi-w16: 16 workers, each on its own keys: throughput;
//   - multi-ring: 16 workers on overlapping sets: worker w's set is the k
//     keys w, w+1, …, w+k−1 of a ring of 16 keys, and a failed attempt is
//     retried at once (as in try1).
//
// A cycle is a successful acquisition of the whole set and its release.
// The runs are interleaved like the other in-process scenarios' (the
// implementations' order rotated by the pass) and measured the same way
// (readUsage, perCycle); each lasts -multi-d (at most -d) after -warm.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

const (
	multiID      = "multi"
	multiRing    = 16 // keys in multi-ring's ring
	multiBegin   = "<!-- bench:multi:begin -->"
	multiEnd     = "<!-- bench:multi:end -->"
	multiHeading = "### Several keys as one lock"
)

// multiWorkload is one of the multi scenarios' workloads.
type multiWorkload struct {
	id, title string
	workers   int
	ring      bool // overlapping sets on a ring of multiRing keys
}

var multiWorkloads = []multiWorkload{
	{"multi-w1", "1 worker, its own keys", 1, false},
	{"multi-w16", "16 workers, each on its own keys", 16, false},
	{"multi-ring", "16 workers on overlapping sets", 16, true},
}

// multiLocker is one way of taking several keys as one lock, set up against
// the servers for one run.
type multiLocker interface {
	session() multiSession // one per worker
	close()
}

// multiSession is one worker's use of a multiLocker: it holds at most one
// set.
type multiSession interface {
	// tryLockAll makes one attempt at every key of keys (sorted); false
	// with a nil error means some key was taken, and nothing is held.
	tryLockAll(ctx context.Context, keys []string) (bool, error)
	unlock(ctx context.Context) error
}

// multiEntry names a multiLocker; lib is the implementation -impls selects
// it by.
type multiEntry struct {
	name, lib, title string
	new              func(addrs []string) (multiLocker, error)
}

const allName = "TryLockAll"

var multiImpls = []multiEntry{
	{allName, oursName, "quorumlock TryLockAll (one lock of k keys)", newAll},
	{"quorumlock-each", oursName, "quorumlock, a TryLock per key in sorted order", eachOf(newOurs)},
	{"redsync-each", base, "redsync, a Mutex per key in sorted order", eachOf(newRedsync)},
}

// ---- TryLockAll ----

type allLocker struct{ o *ours }

func newAll(addrs []string) (multiLocker, error) {
	im, err := newOurs(addrs)
	if err != nil {
		return nil, err
	}
	return allLocker{im.(*ours)}, nil
}

func (a allLocker) session() multiSession { return &allSession{c: a.o.c} }
func (a allLocker) close()                { a.o.close() }

type allSession struct {
	c *redlock.Client
	l *redlock.Lock
}

func (s *allSession) tryLockAll(ctx context.Context, keys []string) (bool, error) {
	l, err := s.c.TryLockAll(ctx, keys)
	if err != nil {
		if notAcquired(err) {
			return false, nil
		}
		return false, err
	}
	s.l = l
	return true, nil
}

func (s *allSession) unlock(ctx context.Context) error {
	err := s.l.Release(ctx)
	s.l = nil
	return err
}

// ---- a lock per key, in sorted order ----

type eachLocker struct{ im impl }

// eachOf takes several keys with one of mk's locks per key.
func eachOf(mk func([]string) (impl, error)) func([]string) (multiLocker, error) {
	return func(addrs []string) (multiLocker, error) {
		im, err := mk(addrs)
		if err != nil {
			return nil, err
		}
		return eachLocker{im}, nil
	}
}

func (e eachLocker) session() multiSession { return &eachSession{im: e.im} }
func (e eachLocker) close()                { e.im.close() }

type eachSession struct {
	im   impl
	ss   []session // one per key of the largest set so far
	held int       // ss[:held] hold a lock
}

func (s *eachSession) tryLockAll(ctx context.Context, keys []string) (bool, error) {
	for len(s.ss) < len(keys) {
		s.ss = append(s.ss, s.im.session())
	}
	for i, k := range keys {
		ok, err := s.ss[i].tryLock(ctx, k)
		if !ok {
			s.held = i
			return false, errors.Join(err, s.unlock(context.Background()))
		}
	}
	s.held = len(keys)
	return true, nil
}

// unlock releases the keys held, the last taken first.
func (s *eachSession) unlock(ctx context.Context) error {
	var errs []error
	for i := s.held - 1; i >= 0; i-- {
		if err := s.ss[i].unlock(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.held = 0
	return errors.Join(errs...)
}

// ---- the runs ----

type multiCfg struct {
	kList string
	dur   time.Duration
	ks    []int
}

// multiBench runs the multi scenarios, pass by pass, and reports them.
type multiBench struct {
	cfg   multiCfg
	wls   []multiWorkload
	impls []multiEntry
	runs  map[string]map[string][]result // workload/k → implementation → per pass
}

func multiKey(id string, k int) string { return id + "/" + strconv.Itoa(k) }

// newMultiBench checks the multi flags and picks the workloads (only: the
// -scenarios list; "multi" names them all) and the implementations (libs:
// those -impls selects). It returns nil when the scenarios are off.
func newMultiBench(only string, libs []string, cfg multiCfg, dur time.Duration) (*multiBench, error) {
	names := strings.Split(only, ",")
	mb := &multiBench{cfg: cfg, runs: map[string]map[string][]result{}}
	for _, wl := range multiWorkloads {
		if only == "" || slices.Contains(names, multiID) || slices.Contains(names, wl.id) {
			mb.wls = append(mb.wls, wl)
		}
	}
	for _, im := range multiImpls {
		if slices.Contains(libs, im.lib) {
			mb.impls = append(mb.impls, im)
		}
	}
	if len(mb.wls) == 0 || len(mb.impls) == 0 {
		return nil, nil
	}
	for f := range strings.SplitSeq(cfg.kList, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 || k > multiRing {
			return nil, fmt.Errorf("multi: -multi-k %q: want comma-separated numbers from 1 to %d", cfg.kList, multiRing)
		}
		mb.cfg.ks = append(mb.cfg.ks, k)
	}
	if mb.cfg.dur <= 0 || mb.cfg.dur > dur {
		mb.cfg.dur = dur
	}
	return mb, nil
}

// pass runs every workload and k with every implementation once, in an
// order rotated by the pass p, and prints a progress line per run.
func (mb *multiBench) pass(ctx context.Context, p int, addrs []string, srvs []*server, warm time.Duration) error {
	if mb == nil {
		return nil
	}
	for _, wl := range mb.wls {
		for _, k := range mb.cfg.ks {
			for j := range mb.impls {
				im := mb.impls[(j+p)%len(mb.impls)]
				r, err := runMulti(ctx, wl, k, im.new, addrs, srvs, warm, mb.cfg.dur)
				if err != nil {
					return fmt.Errorf("%s/k=%d/%s: %w", wl.id, k, im.name, err)
				}
				key := multiKey(wl.id, k)
				if mb.runs[key] == nil {
					mb.runs[key] = map[string][]result{}
				}
				mb.runs[key][im.name] = append(mb.runs[key][im.name], r)
				fmt.Fprintf(os.Stderr, "pass %d %-10s k=%-2d %-15s %8.0f cycles/s  acq p50 %-9v %5.0f allocs  cpu %v + servers %v  g+%d left %d  fail %d err %d\n",
					p+1, wl.id, k, im.name, r.tput, r.acqP50.Round(time.Microsecond), r.allocs, r.cpu.Round(time.Microsecond), r.srvCPU.Round(time.Microsecond),
					r.goroutines, r.leftover, r.failures, r.errs)
			}
		}
	}
	return nil
}

// multiSets returns worker w's key sets, each sorted: 64 keys of its own in
// sets of k (one set of its ring's keys for a ring workload).
func multiSets(run int64, wl multiWorkload, w, k int) [][]string {
	var sets [][]string
	if wl.ring {
		set := make([]string, k)
		for i := range set {
			set[i] = fmt.Sprintf("multi%d-ring%02d", run, (w+i)%multiRing)
		}
		slices.Sort(set)
		return append(sets, set)
	}
	for j := range 64 / k {
		set := make([]string, k)
		for i := range set {
			set[i] = fmt.Sprintf("multi%d-w%d-k%02d", run, w, j*k+i)
		}
		slices.Sort(set)
		sets = append(sets, set)
	}
	return sets
}

// runMulti runs one implementation in one workload with sets of k keys:
// warm-up, the measured window, then close.
func runMulti(ctx context.Context, wl multiWorkload, k int, mk func([]string) (multiLocker, error), addrs []string, srvs []*server, warm, dur time.Duration) (result, error) {
	runtime.GC()
	baseG := runtime.NumGoroutine()
	ml, err := mk(addrs)
	if err != nil {
		return result{}, err
	}
	run := runSeq.Add(1)
	var phase atomic.Int32
	ws := make([]*worker, wl.workers)
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := range wl.workers {
		wk := &worker{acq: newSampler(1<<15, uint64(w)+1), cycle: newSampler(1<<15, uint64(w)+101)}
		ws[w] = wk
		sets := multiSets(run, wl, w, k)
		s := ml.session()
		wg.Go(func() {
			for c := 0; ; c++ {
				p := phase.Load()
				if p == phaseStop {
					return
				}
				start := time.Now()
				ok, err := s.tryLockAll(wctx, sets[c%len(sets)])
				acquired := time.Now()
				if !ok {
					if p == phaseMeasure && wctx.Err() == nil {
						wk.failures++
						if err != nil {
							wk.errs++
							if *verbose && debugErrs.Add(1) <= 3 {
								fmt.Fprintln(os.Stderr, "lock:", err)
							}
						}
					}
					if err != nil && wctx.Err() == nil {
						time.Sleep(time.Millisecond) // an error, not contention: do not spin
					}
					continue
				}
				uerr := s.unlock(context.Background())
				end := time.Now()
				wk.measured(p == phaseMeasure && phase.Load() == phaseMeasure, start, acquired, end, uerr, "unlock")
			}
		})
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
	ml.close()

	var res result
	var acq, cyc []*sampler
	for _, w := range ws {
		res.cycles += w.cycles
		res.failures += w.failures
		res.errs += w.errs
		acq, cyc = append(acq, w.acq), append(cyc, w.cycle)
	}
	if err := errors.Join(ctx.Err(), err0, err1); err != nil {
		return res, err
	}
	res.perCycle(u0, u1)
	res.acqP50, res.acqP99 = percentiles(acq)
	res.cycleP50, res.cycleP99 = percentiles(cyc)
	res.goroutines = maxG - baseG
	res.leftover = settled(baseG)
	return res, nil
}

// ---- the report ----

// report prints the multi report after env and writes it where -md says.
func (mb *multiBench) report(env string, passes int, warm time.Duration, md string) error {
	if mb == nil {
		return nil
	}
	text := env + "\n" + mb.markdown(medians(mb.runs), passes, warm)
	return publish(text, md, multiHeading, multiBegin, multiEnd)
}

// markdown renders the description, the throughput table with its ratios,
// and the figures of every run.
func (mb *multiBench) markdown(meds map[string]map[string]result, passes int, warm time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#### Several keys as one lock (`%s`)\n\n", multiID)
	fmt.Fprintf(&b, "Medians of %d interleaved pass(es), %s measured per run after %s warm-up. "+
		"A cycle acquires a set of k keys and releases it. %s: one `TryLockAll` and one `Release`. "+
		"The baselines take one lock per key in sorted order (`TryLock`; redsync: `TryLockContext`), release those already taken when one is refused, "+
		"and release all of them, the last taken first. `multi-w1` and `multi-w16`: every worker on keys of its own (64, in sets of k). "+
		"`multi-ring`: worker w's set is the k keys w … w+k−1 of a ring of %d, a refused attempt retried at once; failed attempts are the attempts refused.\n\n",
		passes, human(mb.cfg.dur), human(warm), allName, multiRing)
	b.WriteString("| workload | keys |")
	for _, im := range mb.impls {
		fmt.Fprintf(&b, " %s cycles/s |", im.name)
	}
	rated := mb.impls[:0:0]
	if slices.ContainsFunc(mb.impls, func(im multiEntry) bool { return im.name == allName }) {
		for _, im := range mb.impls {
			if im.name != allName {
				rated = append(rated, im)
				fmt.Fprintf(&b, " %s ÷ %s |", allName, im.name)
			}
		}
	}
	b.WriteString("\n|---|---:|" + strings.Repeat("---:|", len(mb.impls)+len(rated)) + "\n")
	for _, wl := range mb.wls {
		for _, k := range mb.cfg.ks {
			m := meds[multiKey(wl.id, k)]
			fmt.Fprintf(&b, "| %s (`%s`) | %d |", wl.title, wl.id, k)
			for _, im := range mb.impls {
				fmt.Fprintf(&b, " %.0f |", m[im.name].tput)
			}
			for _, im := range rated {
				fmt.Fprintf(&b, " %s |", ratio(m[allName].tput, m[im.name].tput))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n| workload | keys | implementation | cycles/s | cycle p50 (ms) | cycle p99 (ms) | acquire p50 (ms) | acquire p99 (ms) | allocations per cycle | " +
		"client CPU per cycle (µs) | servers' CPU per cycle (µs, 5 redis-server) | servers' reads per cycle | failed attempts | errors | goroutines left after close |\n")
	b.WriteString("|---|---:|---|" + strings.Repeat("---:|", 12) + "\n")
	for _, wl := range mb.wls {
		for _, k := range mb.cfg.ks {
			m := meds[multiKey(wl.id, k)]
			for _, im := range mb.impls {
				r := m[im.name]
				fmt.Fprintf(&b, "| `%s` | %d | %s | %.0f | %s | %s | %s | %s | %.0f | %.0f | %.0f | %.2f | %d | %d | %d |\n",
					wl.id, k, im.title, r.tput, ms(r.cycleP50), ms(r.cycleP99), ms(r.acqP50), ms(r.acqP99), r.allocs,
					float64(r.cpu)/1e3, float64(r.srvCPU)/1e3, r.srvReads, r.failures, r.errs, r.leftover)
			}
		}
	}
	return b.String()
}
