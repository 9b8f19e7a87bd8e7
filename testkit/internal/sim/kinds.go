package sim

import (
	"math/rand/v2"
	"strings"
	"time"
)

// workload names what a schedule's clients play. Most schedules play the
// mixed workload (worker.run); a minority play one aimed at a part of the
// library that the mixed one reaches rarely (the lines of waiters, shared
// holders at scale, Resume of raw values, releases whose sends fail), each
// drawn in its own share of the seeds (workOf). A control named "work:"
// and a workload's name plays that workload on every seed (the searches
// for restored defects do: bug_*_test.go), with no fault of its own.
type workload string

const (
	mixed workload = ""
	// crowd: dozens of clients each make short Lock calls (or shared
	// acquires) of one held key, beside waiters of a lock of several keys
	// and of a semaphore named after the key (work_crowd.go).
	crowd workload = "crowd"
	// readers: shared holders follow each other on a key while a writer
	// waits for it with Lock (work_readers.go).
	readers workload = "readers"
	// rawResume: shared holders, locks held alone, and Resume of the raw
	// values read from the nodes (work_resume.go).
	rawResume workload = "raw-resume"
	// gaveUp: a calm schedule in which a writer's Lock gives up on a key
	// held by readers, and its Client then asks for the key shared
	// (work_gaveup.go).
	gaveUp workload = "gave-up"
	// lateDrop: session locks, slow nodes whose yes come after their round
	// was decided, background releases whose sends fail unwritten for a
	// while, and one client's process standing still once, so that yes
	// arrive after the lock's validity ran out (work_latedrop.go).
	lateDrop workload = "late-drop"
	// stallWork: calm, quick links; every client's process stands still
	// once or twice (stall.go), each time with its own key in a drawn
	// state, and asks for that key when the stall ends (ST,
	// work_stall.go).
	stallWork workload = "stall"
	// turns: calm; two or three clients take turns on one key with Lock,
	// polling seldom, so that each turn comes from a wake-up (WK,
	// work_turns.go).
	turns workload = "turns"
)

// workloads lists the aimed workloads with their shares of the seeds
// played under no control, in thousandths (workOf): 8.1 % in all. They
// cost more than a mixed schedule (in CPU, a crowd schedule about 8 times
// as much, turns about 3.5 times, readers and late-drop about 1.7 times,
// gave-up 1.35, stall 1.1, raw-resume the same), so their shares keep the
// average cost of a schedule within about 6 % of the mixed one's
// (TestSimulate's rate, docs/chaos.md). The stall workload took its seeds from the mixed ones
// (the others kept theirs).
var workloads = []struct {
	w     workload
	share int
}{{crowd, 1}, {readers, 10}, {rawResume, 25}, {gaveUp, 10}, {lateDrop, 10}, {stallWork, 15}, {turns, 10}}

// workControl is the control that plays w on every seed.
func workControl(w workload) control { return control("work:" + string(w)) }

// workOf is the workload seed plays under control c: the control's, for a
// "work:" control; else, under no control, the one seed's hash falls in
// (most seeds: mixed, whose schedules are the ones they were before the
// aimed workloads were added); mixed under every other control.
func workOf(seed uint64, c control) workload {
	if w, ok := strings.CutPrefix(string(c), "work:"); ok {
		return workload(w)
	}
	if c != none {
		return mixed
	}
	x := int(rand.New(rand.NewPCG(seed, 0x3017)).Uint64() % 1000)
	for _, k := range workloads {
		if x < k.share {
			return k.w
		}
		x -= k.share
	}
	return mixed
}

// shape fits s, drawn as a mixed schedule, to its workload, with draws of
// its own (so that the mixed schedules keep theirs).
func (s *schedule) shape() {
	if s.work == mixed {
		return
	}
	r := rand.New(rand.NewPCG(s.seed, 0x5ba9e))
	s.prims = false
	switch s.work {
	case crowd:
		s.nodes, s.rates = 3, s.rates[:3]
		s.keys, s.clients, s.ops = 2, crowdFixed+34+r.IntN(7), 3+r.IntN(3)
		s.cuts, s.events = nil, nil
	case readers:
		s.keys, s.clients, s.ops = 1, 4, 5+r.IntN(4)
	case rawResume:
		s.clients, s.ops = 3+r.IntN(2), 4+r.IntN(5)
	case gaveUp:
		s.keys, s.clients, s.ops = 1, 3+r.IntN(2), 3+r.IntN(3)
		s.calm()
		// Quick links: every command lands within calmLatency (5 ms) and
		// is answered within a node timeout, so that a Lock call that
		// gives up has its leave answered before it returns.
		s.net.latency = 100 * time.Microsecond
		s.nodeTimeout = max(s.nodeTimeout, 12*time.Millisecond)
		s.net.nodeTimeout = s.nodeTimeout
	case lateDrop:
		s.sessions, s.fencing = true, false
		s.keys, s.clients, s.ops = 2, 3+r.IntN(2), 5+r.IntN(4)
		// Yes that come after their round was decided, from slow nodes,
		// and background releases that fail unwritten; no other fault:
		// the leftover bound is the library's for reachable nodes, and a
		// release that a partition, a restart or a late delivery holds up
		// besides can outlast it.
		s.calm()
		s.net.pSlow = 0.15 + 0.25*r.Float64()
		s.bgCuts = drawBgCuts(r, *s)
		// Drawn last, so that the draws above are those of the schedules
		// before it had stalls.
		s.stalls = []clientStall{drawStall(r, r.IntN(s.clients), time.Duration(r.Int64N(int64(s.span()))))}
	case stallWork:
		s.keys, s.clients, s.ops = 1+r.IntN(2), 2+r.IntN(3), 3+r.IntN(4)
		s.sessions = r.IntN(2) == 0
		// TTLs longer than the mixed schedules' (0.3 to 2 s): stalls of
		// 0.2 to 3 s then end both before and after what a Client left
		// on the nodes expired by itself.
		s.ttl = time.Duration(300+r.IntN(1700)) * time.Millisecond
		s.net.maxLate = 2 * s.ttl
		// No fault but the stalls, and quick links (as gave-up's): a
		// round that nothing holds up wins at once, so that ST's bound
		// is the library's recovery, not the network's.
		s.calm()
		s.net.latency = 100 * time.Microsecond
		s.nodeTimeout = max(s.nodeTimeout, 12*time.Millisecond)
		s.net.nodeTimeout = s.nodeTimeout
		s.stalls = drawWorkStalls(r, *s)
	case turns:
		s.keys, s.clients, s.ops = 1, 2+r.IntN(2), 15+r.IntN(16)
		s.calm()
	}
}

// calm takes every fault out of s: no node fault, no partition, no
// command slow, late, lost, reset or queued (history.Config.Calm).
func (s *schedule) calm() {
	s.events, s.cuts, s.bgCuts, s.stalls = nil, nil, nil, nil
	s.net.pSlow, s.net.pLate, s.net.pDrop, s.net.pReset, s.net.pQueue = 0, 0, 0, 0, 0
}

// isCalm reports whether s has no fault at all.
func (s schedule) isCalm() bool {
	n := s.net
	return len(s.events)+len(s.cuts)+len(s.bgCuts)+len(s.stalls) == 0 && n.pSlow+n.pLate+n.pDrop+n.pReset+n.pQueue == 0
}

// calmLatency bounds how long after it is sent a command lands in a calm
// schedule: its one-way latency is exponential around s.net.latency, and
// 40 times the mean is exceeded once in 10^17 commands.
func (s schedule) calmLatency() time.Duration { return 40*s.net.latency + time.Millisecond }

// drawBgCuts draws, for about half of the links, one stretch of up to half
// a TTL in which the background releases sent on it fail unwritten (see
// network.bgFailed).
func drawBgCuts(r *rand.Rand, s schedule) []linkCut {
	var cuts []linkCut
	for c := range s.clients {
		for n := range s.nodes {
			if r.IntN(2) == 0 {
				cuts = append(cuts, linkCut{client: c, node: n, at: time.Duration(r.Int64N(int64(s.span()))),
					dur: s.ttl/8 + time.Duration(r.Int64N(int64(s.ttl*3/8)))})
			}
		}
	}
	return cuts
}
