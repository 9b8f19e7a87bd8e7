package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/quorumlock/quorumlock/drift"
)

// control names a fault the library does not claim to survive, injected
// on purpose: the checker must catch it (its violations are expected).
type control string

const (
	none     control = ""
	driftOut control = "drift"   // some nodes' clocks run faster than the drift factor allows
	amnesia  control = "amnesia" // nodes restart without their data
	// The nodes run a broken acquire_all.lua (see mutants): takeAll takes
	// every key whoever holds it; firstOnly checks only the first key.
	takeAll   control = "acquire-all-takes-all"
	firstOnly control = "acquire-all-first-only"
	// The nodes run a broken shared holders' script (see mutants):
	// joinHeld admits a shared holder while the key is held alone;
	// dropShared deletes the key at a release while holders remain.
	joinHeld   control = "acquire-shared-joins-held"
	dropShared control = "release-shared-drops-all"
	// The nodes run a broken semaphore or election script (see mutants):
	// takePermit takes a permit whoever holds it; sameTerm is
	// acquire_fenced.lua that does not increment the counter, so that
	// successive leaders (and fenced locks) get the same term. Their
	// schedules all play the semaphores and the election.
	takePermit control = "acquire-permit-takes-held"
	sameTerm   control = "acquire-fenced-same-term"
	// locksOnly breaks nothing either: its schedules play no semaphore
	// and no election (schedule.prims is false), so that each seed's
	// schedule is the one it was before they were added
	// (TestFindsTheOldExtendBug searches those).
	locksOnly control = "locks-only"
)

// schedule is everything a seed decides: the cluster, the clients'
// configuration and workload, the network's fault rates, the nodes' clock
// rates and the node faults' timeline.
type schedule struct {
	seed    uint64
	control control

	nodes       int
	ttl         time.Duration
	nodeTimeout time.Duration
	fencing     bool
	sessions    bool // auto-extended session locks (then no fencing)
	// prims: the workers also take permits of the semaphores, campaign in
	// the election and read its leader, and an observer client follows it
	// (primitives.go).
	prims   bool
	clients int
	keys    int
	ops     int // per client
	net     netConfig
	rates   []float64
	events  []nodeEvent
	cuts    []linkCut
	// work is the workload the clients play (kinds.go); bgCuts are the
	// stretches in which one client's background releases to one node
	// fail unwritten (the late-drop workload's).
	work   workload
	bgCuts []linkCut
	// stalls are the spans in which a client's process stands still
	// (stall.go): drawn in a share of the mixed schedules, and in every
	// schedule of the stall workload.
	stalls []clientStall
}

// linkCut partitions one client from one node for a while.
type linkCut struct {
	client, node int
	at, dur      time.Duration
}

func (c linkCut) String() string {
	return fmt.Sprintf("c%d-n%d cut at %v for %v", c.client, c.node, c.at, c.dur)
}

// nodeEvent is one node fault: a pause, or a kill followed by a restart.
type nodeEvent struct {
	at, dur time.Duration
	node    int
	kill    bool
	amnesia bool
}

func (e nodeEvent) String() string {
	what := "pause"
	if e.kill {
		what = "kill+restart"
		if e.amnesia {
			what += " (amnesia)"
		}
	}
	return fmt.Sprintf("n%d %s at %v for %v", e.node, what, e.at, e.dur)
}

// newSchedule draws seed's schedule.
func newSchedule(seed uint64, c control) schedule {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	s := schedule{seed: seed, control: c}
	s.nodes = []int{3, 3, 3, 5}[r.IntN(4)]
	s.ttl = time.Duration(100+r.IntN(400)) * time.Millisecond
	s.nodeTimeout = time.Duration(5+r.IntN(20)) * time.Millisecond
	s.fencing = r.IntN(2) == 0
	s.sessions = r.IntN(3) == 0
	s.clients = 2 + r.IntN(3)
	s.keys = 1 + r.IntN(2)
	s.ops = 2 + r.IntN(6)
	// Fault rates per command, skewed towards calm: most schedules have
	// a few faults, some are storms.
	rate := func(max float64) float64 { x := r.Float64(); return max * x * x }
	s.net = netConfig{
		latency:     time.Duration(100+r.IntN(2000)) * time.Microsecond,
		pSlow:       rate(0.1),
		pLate:       rate(0.15),
		maxLate:     2 * s.ttl,
		pDrop:       rate(0.05),
		pReset:      rate(0.05),
		pQueue:      rate(0.03),
		nodeTimeout: s.nodeTimeout,
	}
	s.rates = make([]float64, s.nodes)
	for i := range s.rates {
		s.rates[i] = 1 + (2*r.Float64()-1)*drift.DefaultFactor
	}
	if c == driftOut {
		for i := range (s.nodes + 1) / 2 {
			s.rates[i] = 1 + drift.DefaultFactor*(2+8*r.Float64()) // 2 to 10 times the factor
		}
	}
	s.events = drawEvents(r, s, c == amnesia)
	for range r.IntN(3) {
		s.cuts = append(s.cuts, linkCut{client: r.IntN(s.clients), node: r.IntN(s.nodes),
			at: time.Duration(r.Int64N(int64(s.span()))), dur: time.Duration(r.Int64N(int64(2 * s.ttl)))})
	}
	// Drawn last, so that the draws above are those of the schedules
	// before semaphores and elections were played.
	s.prims = r.IntN(2) == 0 && c != locksOnly || c == takePermit || c == sameTerm
	s.work = workOf(seed, c)
	s.shape()
	if s.work == mixed && (c == none || c == workControl(mixed)) {
		s.stalls = drawMixedStalls(s)
	}
	return s
}

// span is about how long the workload runs: the window node faults fall in.
func (s schedule) span() time.Duration { return time.Duration(s.ops) * s.ttl }

func drawEvents(r *rand.Rand, s schedule, amnesia bool) []nodeEvent {
	var evs []nodeEvent
	for range r.IntN(4) {
		e := nodeEvent{
			at:   time.Duration(r.Int64N(int64(s.span()))),
			dur:  time.Duration(r.Int64N(int64(2 * s.ttl))),
			node: r.IntN(s.nodes),
			kill: r.IntN(3) == 0,
		}
		e.amnesia = e.kill && amnesia
		evs = append(evs, e)
	}
	if amnesia { // at least one restart without data, while locks are held
		evs = append(evs, nodeEvent{at: time.Duration(r.Int64N(int64(s.span()))), dur: s.ttl / 10, node: r.IntN(s.nodes), kill: true, amnesia: true})
	}
	return evs
}

func (s schedule) String() string {
	work := "mixed"
	if s.work != mixed {
		work = string(s.work)
	}
	return fmt.Sprintf("seed %d: workload %s, %d nodes, %d clients × %d ops on %d keys, ttl %v, node timeout %v, fencing %v, sessions %v, semaphores and election %v; net %+v; clock rates %.4f; node faults %v; partitions %v; background releases failing %v; stalls %v",
		s.seed, work, s.nodes, s.clients, s.ops, s.keys, s.ttl, s.nodeTimeout, s.fencing && !s.sessions, s.sessions, s.prims, s.net, s.rates, s.events, s.cuts, s.bgCuts, s.stalls)
}
