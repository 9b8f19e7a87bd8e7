package main

// The procs scenario: N separate OS processes blocking on one key.
//
// For each N of -procs-n and each implementation (quorumlock, redsync), the
// parent starts N child processes (this command re-exec'd with
// -procs-child), each with one client of its own (the same set-up as the
// in-process scenarios) and one goroutine that loops: Lock the shared key
// (the implementation's blocking call and retry policy), hold it for
// holdTime, Release it, and ask again once another process got the lock (or
// a second passed), as in block1 (turns, procsturn.go). The parent hands every child
// the same three instants on CLOCK_MONOTONIC, which all processes on the
// machine share: go (start looping), from (the measured window opens: the
// warm-up is from − go) and to (it closes: the child cancels a Lock still
// waiting and stops). Each child records, for every cycle since go, when
// its Lock returned, when it called Release and when Release returned, and
// reports them on stdout at the end.
//
// The parent merges the cycles of all children by the Lock returns. An
// acquisition counts in the window when its Lock returned in [from, to).
// Its hand-off is its Lock return less the previous holder's Release
// return when the previous holder is another process (0 when the Lock
// returned first: the servers had deleted the key before the releaser's
// last reply came back); an acquisition by the process that held it last
// has none. A mutual-exclusion overlap is a Lock that returned before an
// earlier holder called Release: both held the lock at once. That is a bug
// in the library, and it is counted over the whole run, warm-up included.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	procsID = "procs"
	// procsStart is the time the children get to start before go, per
	// child on top of a base.
	procsStartBase, procsStartPer = 500 * time.Millisecond, 50 * time.Millisecond

	procsBegin   = "<!-- bench:procs:begin -->"
	procsEnd     = "<!-- bench:procs:end -->"
	procsHeading = "### N processes blocking on one key"
)

// procsTargetNs are the process counts the targets name.
var procsTargetNs = []int{2, 4, 16}

// mono reads CLOCK_MONOTONIC in nanoseconds, a clock every process on the
// machine shares.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux with a valid clock and pointer
	}
	return ts.Nano()
}

// procsOut is what one child reports: one entry per cycle since go in each
// of Lock, Call and Rel, and its errors in the window.
type procsOut struct {
	Lock     []int64 `json:"lock"` // CLOCK_MONOTONIC ns: Lock returned
	Call     []int64 `json:"call"` // Release called
	Rel      []int64 `json:"rel"`  // Release returned
	LockErrs int64   `json:"lockErrs"`
	RelErrs  int64   `json:"relErrs"`
}

// procsTimes are the instants the parent hands its children.
type procsTimes struct{ start, from, to int64 }

func (t procsTimes) in(at int64) bool { return at >= t.from && at < t.to }

// procsChild is one child: it loops Lock, hold, Release on key from
// t.start until t.to, then writes its procsOut as JSON to outPath and
// prints "result".
func procsChild(name, addrList, key, outPath string, t procsTimes) error {
	var mk func([]string) (impl, error)
	for _, im := range impls {
		if im.name == name && (name == oursName || name == base) {
			mk = im.new
		}
	}
	if mk == nil {
		return fmt.Errorf("procs child: no implementation %q", name)
	}
	im, err := mk(strings.Split(addrList, ","))
	if err != nil {
		return err
	}
	defer im.close()
	tn, err := openTurns(filepath.Dir(outPath))
	if err != nil {
		return err
	}
	defer tn.close()
	s := im.session()
	if now := mono(); now > t.from {
		return fmt.Errorf("procs child: ready %v after the measured window opened; start fewer processes", time.Duration(now-t.from))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(t.to-mono()))
	defer cancel()
	time.Sleep(time.Duration(t.start - mono()))
	var out procsOut
	for mono() < t.to {
		err := s.lock(ctx, key)
		at := mono()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if t.in(at) {
				out.LockErrs++
			}
			if *verbose && debugErrs.Add(1) <= 3 {
				fmt.Fprintln(os.Stderr, "procs lock:", err)
			}
			time.Sleep(time.Millisecond) // an error, not contention: do not spin
			continue
		}
		mine := tn.took()
		time.Sleep(holdTime)
		call := mono()
		uerr := s.unlock(context.Background())
		out.Lock, out.Call, out.Rel = append(out.Lock, at), append(out.Call, call), append(out.Rel, mono())
		if uerr != nil && t.in(at) {
			out.RelErrs++
		}
		tn.waitOther(mine, t.to)
	}
	b, err := json.Marshal(&out)
	if err != nil {
		return err
	}
	if err := os.WriteFile(outPath, b, 0o600); err != nil {
		return err
	}
	_, err = fmt.Println("result")
	return err
}

// procsRun is what one run (one N, one implementation) measured.
type procsRun struct {
	impl          string
	n             int
	acqPerSec     float64
	acqs          int              // acquisitions in the window
	hand          [3]time.Duration // p50, p90, p99
	minAcq        int              // fewest acquisitions of one process in the window
	maxAcq        int              // most
	jain          float64          // Jain's fairness index of the per-process acquisitions
	handoffs      int              // acquisitions that followed another process's release
	early         int              // of which the Lock returned before that Release returned
	errs          int64            // Lock and Release errors in the window
	overlaps      int              // Locks that returned before an earlier holder called Release
	firstOverlaps []string         // the first few, described
	srvCPU        time.Duration    // the servers' CPU in the window per acquisition
}

// procsCycle is one cycle of one child.
type procsCycle struct {
	proc            int
	lock, call, rel int64
}

// analyzeProcs merges the children's cycles and computes a run's figures.
func analyzeProcs(outs []procsOut, t procsTimes) procsRun {
	var cs []procsCycle
	r := procsRun{n: len(outs)}
	for p, o := range outs {
		for i := range o.Lock {
			cs = append(cs, procsCycle{p, o.Lock[i], o.Call[i], o.Rel[i]})
		}
		r.errs += o.LockErrs + o.RelErrs
	}
	slices.SortFunc(cs, func(a, b procsCycle) int { return cmp.Compare(a.lock, b.lock) })
	per := make([]int, len(outs))
	var hand []int64
	lastCall := int64(math.MinInt64)
	for i, c := range cs {
		if c.lock < lastCall {
			r.overlaps++
			if len(r.firstOverlaps) < 5 {
				r.firstOverlaps = append(r.firstOverlaps, fmt.Sprintf("process %d's Lock returned %v before an earlier holder called Release (cycle %d)", c.proc, time.Duration(lastCall-c.lock), i))
			}
		}
		lastCall = max(lastCall, c.call)
		if !t.in(c.lock) {
			continue
		}
		per[c.proc]++
		if i > 0 && cs[i-1].proc != c.proc {
			h := c.lock - cs[i-1].rel
			if h < 0 {
				r.early++
				h = 0
			}
			hand = append(hand, h)
		}
	}
	r.handoffs = len(hand)
	r.hand = quantiles(hand)
	r.acqs = sum(per)
	r.acqPerSec = float64(r.acqs) / time.Duration(t.to-t.from).Seconds()
	r.minAcq, r.maxAcq, r.jain = fairness(per)
	return r
}

// quantiles returns the p50, p90 and p99 of v (zero when v is empty); it
// sorts v.
func quantiles(v []int64) [3]time.Duration {
	var q [3]time.Duration
	if len(v) == 0 {
		return q
	}
	slices.Sort(v)
	for i, p := range []float64{0.50, 0.90, 0.99} {
		q[i] = time.Duration(v[min(len(v)-1, int(p*float64(len(v))))])
	}
	return q
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

// fairness returns the fewest and most acquisitions of one process and
// Jain's index, (Σx)² / (n Σx²): 1 when all got the same, 1/n when one got
// them all.
func fairness(per []int) (lo, hi int, jain float64) {
	if len(per) == 0 {
		return 0, 0, 0
	}
	lo, hi = slices.Min(per), slices.Max(per)
	var s, s2 float64
	for _, x := range per {
		s += float64(x)
		s2 += float64(x) * float64(x)
	}
	if s2 == 0 {
		return lo, hi, 0
	}
	return lo, hi, s * s / (float64(len(per)) * s2)
}

// procsOne runs one implementation with n child processes.
func procsOne(ctx context.Context, name string, n int, srvs []*server, warm, dur time.Duration) (procsRun, error) {
	start := mono() + int64(procsStartBase+time.Duration(n)*procsStartPer)
	t := procsTimes{start: start, from: start + int64(warm), to: start + int64(warm+dur)}
	dir, err := os.MkdirTemp("", "bench-procs-")
	if err != nil {
		return procsRun{}, err
	}
	defer os.RemoveAll(dir)
	if err := createTurns(dir); err != nil {
		return procsRun{}, err
	}
	ps, err := startProcsChildren(name, n, srvs, dir, t)
	defer func() { // on any early return: kill the children by pid and reap them
		for _, p := range ps {
			p.stop()
		}
	}()
	if err != nil {
		return procsRun{}, err
	}
	sleepCtx(ctx, time.Duration(t.from-mono()))
	cpu0, err0 := serversCPU(srvs)
	sleepCtx(ctx, time.Duration(t.to-mono()))
	cpu1, err1 := serversCPU(srvs)
	outs, err := readProcsOuts(ctx, ps, dir, t)
	if err := errors.Join(err, err0, err1); err != nil {
		return procsRun{}, err
	}
	r := analyzeProcs(outs, t)
	r.impl = name
	if r.acqs > 0 {
		r.srvCPU = (cpu1 - cpu0) / time.Duration(r.acqs)
	}
	return r, nil
}

// startProcsChildren starts n children of implementation name on one key,
// each writing its result into dir. On error it returns those started.
func startProcsChildren(name string, n int, srvs []*server, dir string, t procsTimes) ([]*heldProc, error) {
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.addr
	}
	key := fmt.Sprintf("procs-%d-%d", os.Getpid(), runSeq.Add(1))
	var ps []*heldProc
	for i := range n {
		p, err := startHeldChild("-procs-child", "-procs-impl", name, "-procs-addrs", strings.Join(addrs, ","),
			"-procs-key", key, "-procs-out", filepath.Join(dir, strconv.Itoa(i)+".json"), "-procs-start", strconv.FormatInt(t.start, 10),
			"-procs-from", strconv.FormatInt(t.from, 10), "-procs-to", strconv.FormatInt(t.to, 10))
		if err != nil {
			return ps, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// readProcsOuts waits for every child's "result" line and exit, and reads
// its result from dir.
func readProcsOuts(ctx context.Context, ps []*heldProc, dir string, t procsTimes) ([]procsOut, error) {
	outs := make([]procsOut, len(ps))
	wait := time.Duration(t.to-mono()) + 30*time.Second
	for i, p := range ps {
		if _, err := p.expect(ctx, wait, "result"); err != nil {
			return nil, fmt.Errorf("child %d: %w", i, err)
		}
		if err := p.finish(ctx); err != nil {
			return nil, fmt.Errorf("child %d: %w", i, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)+".json"))
		if err != nil {
			return nil, err
		}
		o := &outs[i]
		if err := json.Unmarshal(b, o); err != nil {
			return nil, fmt.Errorf("child %d's result: %w", i, err)
		}
		if len(o.Call) != len(o.Lock) || len(o.Rel) != len(o.Lock) {
			return nil, fmt.Errorf("child %d: %d Lock, %d Release call and %d Release return times", i, len(o.Lock), len(o.Call), len(o.Rel))
		}
	}
	return outs, nil
}

// procsCfg is the procs scenario's load.
type procsCfg struct {
	nList string // -procs-n
	ns    []int
}

// procsBench runs the procs scenario within the passes of the other
// scenarios and keeps its runs. A nil *procsBench runs and reports nothing.
type procsBench struct {
	cfg   procsCfg
	impls []string // quorumlock and redsync, among those -impls names
	png   string
	runs  map[int]map[string][]procsRun // N → implementation → per pass
}

// newProcsBench checks the procs flags and picks the implementations and
// the chart's path (png, or png's name ending in -procs.png when others
// draw there too). It returns nil when the scenario is off.
func newProcsBench(on bool, cfg procsCfg, names []string, png string, others bool) (*procsBench, error) {
	if !on {
		return nil, nil
	}
	for f := range strings.SplitSeq(cfg.nList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("procs: -procs-n %q: want comma-separated positive numbers", cfg.nList)
		}
		cfg.ns = append(cfg.ns, n)
	}
	pb := &procsBench{cfg: cfg, runs: map[int]map[string][]procsRun{}}
	for _, n := range names {
		if n == oursName || n == base {
			pb.impls = append(pb.impls, n)
		}
	}
	if len(pb.impls) == 0 {
		return nil, fmt.Errorf("procs: -impls names neither %s nor %s", oursName, base)
	}
	if png != "" && others {
		png = strings.TrimSuffix(png, ".png") + "-procs.png"
	}
	pb.png = png
	return pb, nil
}

// pass runs every N with every implementation once, the implementations in
// an order rotated by the pass p, and prints a progress line per run.
func (pb *procsBench) pass(ctx context.Context, p int, srvs []*server, warm, dur time.Duration) error {
	if pb == nil {
		return nil
	}
	for _, n := range pb.cfg.ns {
		for k := range pb.impls {
			name := pb.impls[(k+p)%len(pb.impls)]
			r, err := procsOne(ctx, name, n, srvs, warm, dur)
			if err != nil {
				return fmt.Errorf("%s/%s/N=%d: %w", procsID, name, n, err)
			}
			if pb.runs[n] == nil {
				pb.runs[n] = map[string][]procsRun{}
			}
			pb.runs[n][name] = append(pb.runs[n][name], r)
			fmt.Fprintf(os.Stderr, "pass %d %-7s N=%-3d %-10s %8.0f acq/s  hand-off p50 %-9v p90 %-9v p99 %-9v (%d, %d early)  per process %d..%d Jain %.3f  servers %v/acq  err %d  overlaps %d\n",
				p+1, procsID, n, name, r.acqPerSec, r.hand[0].Round(time.Microsecond), r.hand[1].Round(time.Microsecond), r.hand[2].Round(time.Microsecond),
				r.handoffs, r.early, r.minAcq, r.maxAcq, r.jain, r.srvCPU.Round(time.Microsecond), r.errs, r.overlaps)
			for _, o := range r.firstOverlaps {
				fmt.Fprintf(os.Stderr, "!!! MUTUAL-EXCLUSION OVERLAP (%s, N=%d): %s\n", name, n, o)
			}
		}
	}
	return nil
}

// medianProcs takes each figure's median over the passes, but the worst
// errors and the overlaps of all passes together.
func medianProcs(rs []procsRun) procsRun {
	med := func(f func(procsRun) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	m := procsRun{impl: rs[0].impl, n: rs[0].n}
	m.acqPerSec = med(func(r procsRun) float64 { return r.acqPerSec })
	for i := range m.hand {
		m.hand[i] = time.Duration(med(func(r procsRun) float64 { return float64(r.hand[i]) }))
	}
	m.minAcq = int(med(func(r procsRun) float64 { return float64(r.minAcq) }))
	m.maxAcq = int(med(func(r procsRun) float64 { return float64(r.maxAcq) }))
	m.jain = med(func(r procsRun) float64 { return r.jain })
	m.handoffs = int(med(func(r procsRun) float64 { return float64(r.handoffs) }))
	m.early = int(med(func(r procsRun) float64 { return float64(r.early) }))
	m.acqs = int(med(func(r procsRun) float64 { return float64(r.acqs) }))
	m.srvCPU = time.Duration(med(func(r procsRun) float64 { return float64(r.srvCPU) }))
	for _, r := range rs {
		m.errs = max(m.errs, r.errs)
		m.overlaps += r.overlaps
	}
	return m
}

// medians returns the median run per N and implementation.
func (pb *procsBench) medians() map[int]map[string]procsRun {
	meds := map[int]map[string]procsRun{}
	for n, byImpl := range pb.runs {
		meds[n] = map[string]procsRun{}
		for name, rs := range byImpl {
			meds[n][name] = medianProcs(rs)
		}
	}
	return meds
}

// report prints the procs report after env and writes it where -md says,
// and the chart where -png says.
func (pb *procsBench) report(env string, passes int, warm, dur time.Duration, md string) error {
	if pb == nil {
		return nil
	}
	meds := pb.medians()
	text := env + "\n" + pb.markdown(meds, passes, warm, dur)
	fmt.Println(text)
	if md != "" {
		if err := writeProcsMD(md, text); err != nil {
			return err
		}
	}
	if pb.png != "" {
		return pb.chart(meds, pb.png)
	}
	return nil
}

// writeProcsMD writes text between the procs markers, opening the section
// first when the file has none.
func writeProcsMD(path, text string) error {
	return writeSection(path, procsHeading, procsBegin, procsEnd, text)
}

// markdown renders the description, the targets and the table.
func (pb *procsBench) markdown(meds map[int]map[string]procsRun, passes int, warm, dur time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#### N processes blocking on one key (`%s`)\n\n", procsID)
	fmt.Fprintf(&b, "Medians of %d interleaved pass(es), %s measured per run after %s warm-up. "+
		"Each of N child processes runs one client with one goroutine that loops: Lock one shared key (the blocking call), hold it %s, Release, and ask again once another process got the lock (or a second passed). "+
		"Hand-off: the next holder's Lock return less the previous holder's Release return (CLOCK_MONOTONIC, shared by the processes), "+
		"when the next holder is another process; 0 when its Lock returned first; in brackets the number of hand-offs the quantiles are of. "+
		"Fairness: the fewest and most acquisitions of one process in the window, and Jain's index (1: all the same; 1/N: one process got them all). "+
		"Overlaps (a Lock that returned before an earlier holder called Release) are counted over all passes, warm-ups included; errors are the worst pass's.\n\n",
		passes, human(dur), human(warm), human(holdTime))
	b.WriteString(pb.targets(meds))
	b.WriteString("\n| processes |")
	for _, name := range []string{oursName, base} {
		fmt.Fprintf(&b, " %s acq/s |", name)
	}
	fmt.Fprintf(&b, " ratio | %[1]s hand-off p50/p90/p99 (ms) | %[2]s hand-off p50/p90/p99 (ms) | %[1]s fairness min/max/Jain | %[2]s fairness min/max/Jain | "+
		"acquisitions handed to another process (%[1]s / %[2]s) | servers' CPU per acquisition, µs (%[1]s / %[2]s) | errors (%[1]s / %[2]s) | overlaps (%[1]s / %[2]s) |\n", oursName, base)
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range pb.cfg.ns {
		o, okO := meds[n][oursName]
		r, okR := meds[n][base]
		cell := func(ok bool, s string) string {
			if !ok {
				return "–"
			}
			return s
		}
		hand := func(x procsRun) string {
			return fmt.Sprintf("%s / %s / %s (%d)", ms(x.hand[0]), ms(x.hand[1]), ms(x.hand[2]), x.handoffs)
		}
		fair := func(x procsRun) string { return fmt.Sprintf("%d / %d / %.3f", x.minAcq, x.maxAcq, x.jain) }
		share := func(x procsRun) string {
			return fmt.Sprintf("%.0f %%", 100*float64(x.handoffs)/float64(max(x.acqs, 1)))
		}
		srv := func(x procsRun) string { return fmt.Sprintf("%.0f", float64(x.srvCPU)/1e3) }
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s / %s | %s / %s |\n", n,
			cell(okO, fmt.Sprintf("%.0f", o.acqPerSec)), cell(okR, fmt.Sprintf("%.0f", r.acqPerSec)), ratio(o.acqPerSec, r.acqPerSec),
			cell(okO, hand(o)), cell(okR, hand(r)), cell(okO, fair(o)), cell(okR, fair(r)),
			cell(okO, share(o)), cell(okR, share(r)), cell(okO, srv(o)), cell(okR, srv(r)), cell(okO, strconv.FormatInt(o.errs, 10)), cell(okR, strconv.FormatInt(r.errs, 10)),
			cell(okO, strconv.Itoa(o.overlaps)), cell(okR, strconv.Itoa(r.overlaps)))
	}
	return b.String()
}

// targets checks the procs targets against the medians.
func (pb *procsBench) targets(meds map[int]map[string]procsRun) string {
	var b strings.Builder
	b.WriteString("| target | measured | met |\n|---|---:|:---:|\n")
	line := func(name string, known bool, got func() string, ok func() bool) {
		mark, g := "–", "not run"
		if known {
			g, mark = got(), "NOT met"
			if ok() {
				mark = "met"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, g, mark)
	}
	ours := func(n int) (procsRun, bool) { r, ok := meds[n][oursName]; return r, ok }
	allNs := true
	var p99s []string
	worst := time.Duration(0)
	for _, n := range procsTargetNs {
		r, ok := ours(n)
		allNs = allNs && ok
		p99s = append(p99s, ms(r.hand[2]))
		worst = max(worst, r.hand[2])
	}
	line("hand-off p99 ≤ 3 ms at 2, 4 and 16 processes", allNs,
		func() string { return strings.Join(p99s, " / ") + " ms" }, func() bool { return worst <= 3*time.Millisecond })
	o16, ok16 := ours(16)
	o4, ok4 := ours(4)
	line("acq/s at 16 processes ≥ 0.9× that at 4", ok16 && ok4,
		func() string {
			return fmt.Sprintf("%.2f× (%.0f vs %.0f)", o16.acqPerSec/o4.acqPerSec, o16.acqPerSec, o4.acqPerSec)
		},
		func() bool { return o16.acqPerSec >= 0.9*o4.acqPerSec })
	r16, okR := meds[16][base]
	line("acq/s at 16 ≥ 3× redsync", ok16 && okR,
		func() string {
			return fmt.Sprintf("%s (%.0f vs %.0f)", ratio(o16.acqPerSec, r16.acqPerSec), o16.acqPerSec, r16.acqPerSec)
		},
		func() bool { return o16.acqPerSec >= 3*r16.acqPerSec })
	overlaps, known := 0, false
	for _, byImpl := range meds {
		if r, ok := byImpl[oursName]; ok {
			overlaps, known = overlaps+r.overlaps, true
		}
	}
	line("no mutual-exclusion overlaps (all N, all passes)", known,
		func() string { return strconv.Itoa(overlaps) }, func() bool { return overlaps == 0 })
	return b.String()
}

// chart draws two panels of grouped bars, one group per N: acquisitions/s
// and hand-off p99, quorumlock vs redsync.
func (pb *procsBench) chart(meds map[int]map[string]procsRun, path string) error {
	const w, h = 1000, 440
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text(img, 10, 16, fmt.Sprintf("N processes blocking on one key (Lock, hold %s, Release, again): medians, 5 local Redis servers", human(holdTime)), color.Black)
	acq := func(r procsRun) float64 { return r.acqPerSec }
	p99 := func(r procsRun) float64 { return float64(r.hand[2]) / 1e6 }
	pb.panel(img, meds, "acquisitions/s (higher is better)", acq, "%.0f", 20, 460)
	pb.panel(img, meds, "hand-off p99, ms (lower is better)", p99, "%.2f", 520, 460)
	for k, im := range pb.impls { // legend
		x := 20 + k*140
		fill(img, image.Rect(x, h-22, x+12, h-10), palette[im])
		text(img, x+16, h-11, im, color.Black)
	}
	return writePNG(img, path)
}

// panel draws one panel of the procs chart, width wide from left.
func (pb *procsBench) panel(img *image.RGBA, meds map[int]map[string]procsRun, title string, val func(procsRun) float64, format string, left, width int) {
	top, bottom := 70, img.Bounds().Dy()-50
	text(img, left, 44, title, color.Black)
	maxV := 0.0
	for _, byImpl := range meds {
		for _, r := range byImpl {
			maxV = max(maxV, val(r))
		}
	}
	if maxV == 0 || len(pb.cfg.ns) == 0 {
		return
	}
	fill(img, image.Rect(left, bottom, left+width, bottom+1), color.Black)
	groupW := width / len(pb.cfg.ns)
	barW := min((groupW-12)/len(pb.impls), 80)
	for g, n := range pb.cfg.ns {
		gx := left + g*groupW + 6
		for k, im := range pb.impls {
			r, ok := meds[n][im]
			if !ok {
				continue
			}
			bh := int(float64(bottom-top) * val(r) / maxV)
			x := gx + k*barW
			fill(img, image.Rect(x+2, bottom-bh, x+barW-2, bottom), palette[im])
			text(img, x, bottom-bh-4, fmt.Sprintf(format, val(r)), color.Black)
		}
		label := fmt.Sprintf("N = %d", n)
		text(img, gx+len(pb.impls)*barW/2-7*len(label)/2, bottom+16, label, color.Black)
	}
}
