package sim

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/quorumlock/testkit/history"
)

var (
	seeds   = flag.Int("sim.seeds", defaultSeeds, "how many schedules TestSimulate runs")
	first   = flag.Uint64("sim.first", 1, "the first seed TestSimulate runs")
	replay  = flag.Uint64("sim.seed", 0, "replay this one seed with its trace (TestReplay)")
	ctlFlag = flag.String("sim.control", "", "TestReplay: the control the seed ran under (drift, amnesia, work:NAME)")
	work    = flag.String("sim.work", "", "TestSimulate: play only this workload on every seed (mixed, crowd, readers, raw-resume, gave-up, late-drop, stall, turns; kinds.go)")
)

// play runs seed's schedule in a synctest bubble of its own.
func play(t *testing.T, seed uint64, c control, trace bool) (o outcome) {
	synctest.Test(t, func(*testing.T) { o = newSchedule(seed, c).run(trace) })
	return o
}

// replayLine is the command that replays seed with its trace.
func replayLine(seed uint64, c control) string {
	ctl := ""
	if c != none {
		ctl = " -sim.control " + string(c)
	}
	return fmt.Sprintf("go test ./internal/sim -run 'TestReplay$' -v -sim.seed %d%s   (in testkit/)", seed, ctl)
}

// sweep plays seeds [from, from+n) on every core, calling bad (one call at
// a time) for each schedule that violated a property or failed the
// simulator, until bad says stop. It returns how many violated and how many
// were played.
func sweep(t *testing.T, from uint64, n int, c control, bad func(seed uint64, o outcome) (stop bool)) (found, played int) {
	return sweepAll(t, from, n, c, bad, nil)
}

// sweepAll is sweep, calling each (one call at a time) for every schedule.
func sweepAll(t *testing.T, from uint64, n int, c control, bad func(seed uint64, o outcome) (stop bool), each func(outcome)) (found, played int) {
	defer debug.SetGCPercent(debug.SetGCPercent(400)) // schedules allocate much and keep little
	var next, done atomic.Uint64
	next.Store(from)
	var stopped atomic.Bool
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) { // two per core: a schedule waits on its dispatcher at each instant
		wg.Go(func() {
			for !stopped.Load() {
				seed := next.Add(1) - 1
				if seed >= from+uint64(n) {
					return
				}
				o := play(t, seed, c, false)
				done.Add(1)
				mu.Lock()
				if each != nil {
					each(o)
				}
				if o.violated() {
					found++
					if bad(seed, o) {
						stopped.Store(true)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return found, int(done.Load())
}

// TestSimulate plays -sim.seeds schedules of the real Client against
// simulated nodes and checks each history: no violation is allowed.
func TestSimulate(t *testing.T) {
	start := time.Now()
	var sum totals
	c := none
	switch *work {
	case "":
	case "mixed":
		c = workControl(mixed)
	default:
		c = workControl(workload(*work))
	}
	found, played := sweepAll(t, *first, *seeds, c, func(seed uint64, o outcome) bool {
		t.Errorf("seed %d: %d violations, %d of ST, %d of RD, %d of WK, simulator failures %q:\n%s%s%s%s\nreplay: %s", seed, o.report.Total(), len(o.st.violations), len(o.rd), len(o.wk), o.failures, o.report, stLines(o.st), violationLines(o.rd), violationLines(o.wk), replayLine(seed, c))
		return false
	}, sum.add)
	d := time.Since(start)
	t.Logf("%d schedules in %v: %.0f schedules/s (%.0f per hour), %d violated", played, d.Round(time.Millisecond), float64(played)/d.Seconds(), float64(played)/d.Hours(), found)
	t.Logf("%s", sum.String())
	if played > 0 && c == none && sum.sharedHeld == 0 {
		t.Errorf("no shared holder was held in %d schedules (%d acquire calls)", played, sum.shared)
	}
	// ST must have judged cases, and, over a hundred of them, some in
	// which the Client had left something on the nodes (about one in six).
	if sum.works[stallWork] > 0 && (sum.st.checked == 0 || sum.st.checked >= 100 && sum.st.taken == 0) {
		t.Errorf("%d schedules of the stall workload judged %d cases of ST, %d of them with the key still held when the Lock began: ST was not exercised", sum.works[stallWork], sum.st.checked, sum.st.taken)
	}
	if played > 0 && c == none && (sum.permitsHeld == 0 || sum.leaders == 0 || sum.reads == 0) {
		t.Errorf("in %d schedules: %d permits held (of %d acquire calls), %d leaders (of %d campaigns), %d leaders read: the semaphores and the election were not played",
			played, sum.permitsHeld, sum.permits, sum.leaders, sum.campaigns, sum.reads)
	}
}

// totals sums what the schedules did and what the checker examined.
type totals struct {
	schedules, ops, acquired, failed, extends, releases, sections, commands int
	resumed, resumeFailed, several, severalHeld, shared, sharedHeld         int
	permits, permitsHeld, campaigns, leaders, reads, full                   int
	checked                                                                 map[history.Property]int
	works                                                                   map[workload]int // schedules per workload
	st                                                                      stResult         // ST's cases (stcheck.go)
	stalled                                                                 int              // schedules with a stall
}

func (s *totals) add(o outcome) {
	r := o.report
	s.schedules++
	if s.works == nil {
		s.works = map[workload]int{}
	}
	s.works[o.work]++
	s.ops += r.Ops
	s.acquired += r.Acquired
	s.failed += r.FailedAcquires
	s.extends += r.Extends
	s.releases += r.Releases
	s.sections += r.Sections
	s.commands += o.commands
	s.resumed += o.resumed
	s.resumeFailed += o.resumeFailed
	s.several += o.several
	s.severalHeld += o.severalHeld
	s.shared += o.shared
	s.sharedHeld += o.sharedHeld
	s.permits += o.permits
	s.permitsHeld += o.permitsHeld
	s.campaigns += o.campaigns
	s.leaders += o.leaders
	s.reads += o.reads
	s.full += o.full
	s.st.add(o.st)
	if o.stalls > 0 {
		s.stalled++
	}
	if s.checked == nil {
		s.checked = map[history.Property]int{}
	}
	for p, n := range r.Checked {
		s.checked[p] += n
	}
}

func (s *totals) String() string {
	if s.schedules == 0 {
		return "no schedules"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "per schedule: %.1f operations (%.1f acquisitions, %.1f failed acquire calls, %.1f extends, %.1f releases, %.1f critical sections), %.0f commands run on the nodes; %d abandoned locks resumed, %d resumes failed; %d locks of several keys held (of %d acquire calls); %d shared holders held (of %d acquire calls); %d permits held (of %d acquire calls; a semaphore of 2 permits had both held at once in %d schedules); %d leaders (of %d campaigns), %d leaders read; cases checked in all:",
		float64(s.ops)/float64(s.schedules), float64(s.acquired)/float64(s.schedules), float64(s.failed)/float64(s.schedules),
		float64(s.extends)/float64(s.schedules), float64(s.releases)/float64(s.schedules), float64(s.sections)/float64(s.schedules),
		float64(s.commands)/float64(s.schedules), s.resumed, s.resumeFailed, s.severalHeld, s.several, s.sharedHeld, s.shared,
		s.permitsHeld, s.permits, s.full, s.leaders, s.campaigns, s.reads)
	for _, p := range history.Properties {
		if n, ok := s.checked[p]; ok {
			fmt.Fprintf(&b, " %s %d", p, n)
		}
	}
	fmt.Fprintf(&b, " ST %d (%d with the key still held on a node when the Lock began, %d on a quorum; slowest %v against a bound of %v)",
		s.st.checked, s.st.taken, s.st.quorum, s.st.worst.Round(time.Microsecond), s.st.worstBound)
	fmt.Fprintf(&b, "; schedules per workload: mixed %d", s.works[mixed])
	for _, k := range workloads {
		fmt.Fprintf(&b, ", %s %d", k.w, s.works[k.w])
	}
	fmt.Fprintf(&b, "; %d schedules with stalls", s.stalled)
	return b.String()
}

// stLines lists ST's violations, one a line.
func stLines(r stResult) string { return violationLines(r.violations) }

// violationLines lists violations, one a line.
func violationLines(vs []string) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	return b.String()
}

// TestControlsAreCaught breaks the library's assumptions on purpose
// (docs/safety.md): clocks that run faster than the drift factor allows,
// and nodes that restart without their data. The checker must catch each
// within a few hundred schedules, or it could not catch a real bug either.
func TestControlsAreCaught(t *testing.T) {
	for _, c := range []control{driftOut, amnesia} {
		t.Run(string(c), func(t *testing.T) {
			first := uint64(0)
			var what string
			_, played := sweep(t, 1, 600, c, func(seed uint64, o outcome) bool {
				if first == 0 || seed < first {
					first, what = seed, o.report.String()
				}
				return true
			})
			if first == 0 {
				t.Fatalf("no violation in %d schedules with %s: the simulator cannot see what the control breaks", played, c)
			}
			t.Logf("caught after %d schedules (first at seed %d; replay: %s):\n%s", played, first, replayLine(first, c), what)
		})
	}
}

// TestReplay replays -sim.seed with its trace.
func TestReplay(t *testing.T) {
	if *replay == 0 {
		t.Skip("give -sim.seed")
	}
	c := control(*ctlFlag)
	o := play(t, *replay, c, true)
	t.Logf("trace:\n%s", o.trace)
	t.Logf("%s", o.report)
	if o.violated() {
		t.Errorf("seed %d violates: %d violations, %d of ST, %d of RD, %d of WK, simulator failures %q:\n%s%s%s", *replay, o.report.Total(), len(o.st.violations), len(o.rd), len(o.wk), o.failures, stLines(o.st), violationLines(o.rd), violationLines(o.wk))
	}
}
