package integration

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/testkit"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// faulter injects faults at random until stopped, and heals each after a
// while: node kills (restarted with their data after more than the TTL),
// pauses, per-client partitions (blackholes), connection resets, latency
// and late delivery (what a client wrote to a node is held past the node
// timeout, then lands). It never has more than maxNodeFaults nodes killed,
// paused or kept out by the clients' restart guard at once. Every fault
// runs on a goroutine that heals it when its time is up, or at once when
// the faulter stops.
type faulter struct {
	t           *testing.T
	c           *cluster
	clients     []*chaosClient
	ttl         time.Duration
	nodeTimeout time.Duration // the clients' per-node timeout
	guard       time.Duration // the clients' restart guard
	rng         *rand.Rand
	stop        chan struct{}
	wg          sync.WaitGroup
	// After a late delivery, sweeps read keys on the nodes it went to
	// through admins and record what they find in h (L2), for sweepFor
	// (0: until every key it can have set has expired, TTL + allowance).
	admins   []*redis.Client
	h        *hist.History
	keys     []string
	sweepFor time.Duration

	mu        sync.Mutex
	healed    time.Time    // when the last fault healed (a reset: when it was made)
	spans     []*faultSpan // every fault, on h's clock (faultSpans)
	nodeBusy  map[int]bool
	linkBusy  map[[2]int]bool // (client, node) with a blackhole, latency or late delivery
	held      map[[2]int]bool // (client, node) with late delivery: resets spare them
	active    map[int]string
	next      int
	counts    map[string]int
	maxFaults int
	lateBytes int   // bytes held by late faults and delivered
	only      []int // the kinds drawn from (EnvChaosFaults); nil: all
}

const maxNodeFaults = 2 // a quorum of 3 of 5 nodes stays up

func newFaulter(t *testing.T, c *cluster, clients []*chaosClient, ttl, nodeTimeout, guard time.Duration, seed uint64) *faulter {
	return &faulter{
		t: t, c: c, clients: clients, ttl: ttl, nodeTimeout: nodeTimeout, guard: guard, rng: rand.New(rand.NewPCG(seed, 7)), stop: make(chan struct{}),
		nodeBusy: map[int]bool{}, linkBusy: map[[2]int]bool{}, held: map[[2]int]bool{}, active: map[int]string{}, counts: map[string]int{},
		only: onlyFaults(t),
	}
}

// run injects a fault every 1–3 s until stop is closed, then waits until
// every fault is healed. The first fault is a stall of the process (while
// the run is still quiet) and the second a late delivery, so that even the
// short run of `make test` (15 s, about 6 faults drawn from 7 kinds)
// always has both; the others are drawn at random.
func (f *faulter) run() {
	defer f.wg.Wait()
	for n := 0; ; n++ {
		gap := time.Second + time.Duration(f.rng.IntN(2000))*time.Millisecond
		select {
		case <-f.stop:
			return
		case <-time.After(gap):
		}
		kind := f.rng.IntN(faultKinds)
		switch {
		case n == 0:
			kind = faultStall
		case n == 1:
			kind = faultLate
		case len(f.only) > 0:
			kind = f.only[f.rng.IntN(len(f.only))]
		}
		f.inject(kind, n == 0)
	}
}

// The kinds of fault inject draws from, by name (faultSummary's); faultLate
// is late delivery, faultStall a stall of the whole process.
const (
	faultKinds = 7
	faultLate  = 5
	faultStall = 6
)

var faultNames = []string{"kill", "pause", "partition", "reset", "latency", "late", "stall"}

// EnvChaosFaults, a comma-separated list of fault kinds (faultNames), makes
// the chaos runs draw only those after the first two faults (a stall and a
// late delivery): to hunt one kind's failure at a higher rate.
const EnvChaosFaults = "QUORUMLOCK_CHAOS_FAULTS"

// onlyFaults returns the kinds EnvChaosFaults names (nil when it is unset).
func onlyFaults(t *testing.T) []int {
	var kinds []int
	for name := range strings.SplitSeq(os.Getenv(EnvChaosFaults), ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		k := slices.Index(faultNames, name)
		if k < 0 {
			t.Fatalf("%s: no fault kind %q; the kinds are %v", EnvChaosFaults, name, faultNames)
		}
		kinds = append(kinds, k)
	}
	if kinds != nil {
		t.Logf("chaos: %s=%s: after a stall and a late delivery, only these faults", EnvChaosFaults, os.Getenv(EnvChaosFaults))
	}
	return kinds
}

// inject starts one fault of the given kind (0 to faultKinds-1), on a
// client drawn at random for the kinds that need one; first is true for
// the run's first fault.
func (f *faulter) inject(kind int, first bool) {
	k := f.rng.IntN(len(f.clients))
	switch kind {
	case 0:
		f.kill()
	case 1:
		f.pause()
	case 2:
		f.partition(k)
	case 3:
		f.reset(k)
	case 4:
		f.latency(k)
	case faultLate:
		f.late(k)
	case faultStall:
		f.stall(first)
	}
}

// ms draws a duration in [lo, hi) milliseconds.
func (f *faulter) ms(lo, hi int) time.Duration {
	return time.Duration(lo+f.rng.IntN(hi-lo)) * time.Millisecond
}

// kill kills a node and restarts it with its data after more than the TTL.
func (f *faulter) kill() {
	f.nodeDown("kill", (*testkit.Node).Kill, func(i int) {
		span := f.open("kill", "", []int{i})
		f.holdFor(fmt.Sprintf("node%d killed, then guarded", i), f.ttl+f.ms(500, 1500), true, func() {
			defer f.close(span)
			if err := f.c.Node(i).Restart(false); err != nil {
				f.t.Errorf("chaos: restart node%d: %v", i, err)
			}
			// The clients' restart guard keeps the node out a while
			// longer: it is not free for another fault until then.
			select {
			case <-time.After(f.guard):
			case <-f.stop:
			}
			f.freeNodeDone(i)
		})
	})
}

// pause pauses a node for 200–900 ms.
func (f *faulter) pause() {
	f.nodeDown("pause", (*testkit.Node).Pause, func(i int) {
		span := f.open("pause", "", []int{i})
		f.hold(fmt.Sprintf("node%d paused", i), f.ms(200, 900), func() {
			defer f.close(span)
			if err := f.c.Node(i).Resume(); err != nil {
				f.t.Errorf("chaos: resume node%d: %v", i, err)
			}
			f.freeNodeDone(i)
		})
	})
}

// nodeDown takes a free node down with down (Node.Kill or Node.Pause),
// counts the fault as kind and calls held with the node, which must
// schedule its healing and free it (freeNodeDone). It does nothing when
// maxNodeFaults nodes are down already.
func (f *faulter) nodeDown(kind string, down func(*testkit.Node) error, held func(i int)) {
	i, ok := f.freeNode()
	if !ok {
		return
	}
	if err := down(f.c.Node(i)); err != nil {
		f.t.Errorf("chaos: %s node%d: %v", kind, i, err)
		f.freeNodeDone(i)
		return
	}
	f.count(kind)
	held(i)
}

// partition cuts client k from 1–3 nodes.
func (f *faulter) partition(k int) {
	nodes := f.links(k, 1+f.rng.IntN(3))
	if len(nodes) == 0 {
		return
	}
	cc := f.client(k)
	span := f.open("partition", cc.name, nodes)
	cc.partition(true, nodes...)
	f.count("partition")
	f.hold(fmt.Sprintf("%s cut from nodes %v", cc.name, nodes), f.ms(500, 2500), func() {
		defer f.close(span)
		cc.partition(false, nodes...)
		f.linksDone(k, nodes)
	})
}

// reset resets client k's connections to 1–5 nodes.
func (f *faulter) reset(k int) {
	cc := f.client(k)
	var reset []int
	for _, i := range f.rng.Perm(f.c.Len())[:1+f.rng.IntN(f.c.Len())] {
		if !f.isHeld(k, i) { // a reset would lose the held bytes: they must land
			cc.proxies[i].Reset()
			reset = append(reset, i)
		}
	}
	f.close(f.open("reset", cc.name, reset))
	f.count("reset")
	f.mu.Lock()
	f.healed = time.Now()
	f.mu.Unlock()
}

// latency adds 5–40 ms to 1–2 of client k's links.
func (f *faulter) latency(k int) {
	nodes := f.links(k, 1+f.rng.IntN(2))
	if len(nodes) == 0 {
		return
	}
	cc := f.client(k)
	d := f.ms(5, 40)
	span := f.open("latency", cc.name, nodes)
	for _, i := range nodes {
		cc.proxies[i].SetLatency(d)
	}
	f.count("latency")
	f.hold(fmt.Sprintf("%s +%v to nodes %v", cc.name, d, nodes), f.ms(1000, 3000), func() {
		defer f.close(span)
		for _, i := range nodes {
			cc.proxies[i].SetLatency(0)
		}
		f.linksDone(k, nodes)
	})
}

// late holds what client k writes on 1–3 of its links past the node
// timeout, then delivers it, and sweeps those nodes for leftovers.
func (f *faulter) late(k int) {
	nodes := f.links(k, 1+f.rng.IntN(3))
	if len(nodes) == 0 {
		return
	}
	cc := f.client(k)
	// HoldOpen: what is in flight, and what the client writes on its open
	// connections until it drops them, lands late; its new connections
	// work (a retried command or a roll-back overtakes the late one).
	// HoldAll: nothing it writes lands before the end.
	scope := testkit.HoldOpen
	if f.rng.IntN(2) == 0 {
		scope = testkit.HoldAll
	}
	f.setHeld(k, nodes, true)
	span := f.open("late", cc.name, nodes)
	for _, i := range nodes {
		cc.proxies[i].Hold(scope)
	}
	f.count("late")
	f.count("late " + scope.String())
	d := f.lateFor()
	f.hold(fmt.Sprintf("%s late (%s) to nodes %v for %v", cc.name, scope, nodes, d), d, func() {
		n := 0
		for _, i := range nodes {
			n += cc.proxies[i].Deliver()
		}
		f.mu.Lock()
		f.lateBytes += n
		if n > 0 {
			f.counts["late landed"]++
		}
		f.mu.Unlock()
		f.close(span)
		f.t.Logf("chaos: %s late (%s) to nodes %v: %d bytes held for up to %v landed", cc.name, scope, nodes, n, d)
		f.setHeld(k, nodes, false)
		f.linksDone(k, nodes)
		f.sweep(nodes)
	})
}

// lateFor draws how long a late delivery holds: always past the node
// timeout, so that what was held timed out. Half the time it lands within
// 1.5 s, while the client may still be cleaning up after it; half the time
// after 3.5–7 s, when the clean-up is over: a sweep judges a key only once
// the clean-up bound (4.3 s here) has passed since its call returned, and
// the key expires a TTL after it landed, so only a landing more than 2.3 s
// after the call can be judged during the run.
func (f *faulter) lateFor() time.Duration {
	d := f.ms(int((f.nodeTimeout+100*time.Millisecond)/time.Millisecond), 1500)
	if f.rng.IntN(2) == 0 {
		d = f.ms(3500, 7000)
	}
	return d
}

// hold keeps a fault for d (or until stop), then heals it.
func (f *faulter) hold(desc string, d time.Duration, heal func()) { f.holdFor(desc, d, false, heal) }

// holdFor is hold; with full, the end of the run does not cut d short:
// a killed node comes back with its data only after more than the TTL even
// then, as the scenario promises. Back sooner, it would still hold keys of
// failed rounds whose clean-up it missed while dead, and the final scan
// would report them (L2) although they expire with their TTL.
func (f *faulter) holdFor(desc string, d time.Duration, full bool, heal func()) {
	f.mu.Lock()
	id := f.next
	f.next++
	f.active[id] = desc
	f.maxFaults = max(f.maxFaults, len(f.active))
	f.mu.Unlock()
	f.wg.Go(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		stop := f.stop
		if full {
			stop = nil
		}
		select {
		case <-t.C:
		case <-stop:
		}
		heal()
		f.mu.Lock()
		delete(f.active, id)
		f.healed = time.Now()
		f.mu.Unlock()
	})
}

// client returns the client in slot k.
func (f *faulter) client(k int) *chaosClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clients[k]
}

// replace puts cc in slot k (a client that died is replaced by a new one).
func (f *faulter) replace(k int, cc *chaosClient) {
	f.mu.Lock()
	f.clients[k] = cc
	f.mu.Unlock()
}

func (f *faulter) count(kind string) {
	f.mu.Lock()
	f.counts[kind]++
	f.mu.Unlock()
}

// freeNode picks a node that is neither killed nor paused, if fewer than
// maxNodeFaults are; it marks it busy.
func (f *faulter) freeNode() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.nodeBusy) >= maxNodeFaults {
		return 0, false
	}
	var free []int
	for i := range f.c.Len() {
		if !f.nodeBusy[i] {
			free = append(free, i)
		}
	}
	i := free[f.rng.IntN(len(free))]
	f.nodeBusy[i] = true
	return i, true
}

func (f *faulter) freeNodeDone(i int) {
	f.mu.Lock()
	delete(f.nodeBusy, i)
	f.mu.Unlock()
}

// links picks up to n of client k's links that carry no other fault and
// marks them busy.
func (f *faulter) links(k, n int) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, i := range f.rng.Perm(f.c.Len()) {
		if len(out) < n && !f.linkBusy[[2]int{k, i}] {
			f.linkBusy[[2]int{k, i}] = true
			out = append(out, i)
		}
	}
	return out
}

func (f *faulter) linksDone(k int, nodes []int) {
	f.mu.Lock()
	for _, i := range nodes {
		delete(f.linkBusy, [2]int{k, i})
	}
	f.mu.Unlock()
}

// setHeld marks client k's links to nodes as held (late delivery) or not.
func (f *faulter) setHeld(k int, nodes []int, on bool) {
	f.mu.Lock()
	for _, i := range nodes {
		if on {
			f.held[[2]int{k, i}] = true
		} else {
			delete(f.held, [2]int{k, i})
		}
	}
	f.mu.Unlock()
}

func (f *faulter) isHeld(k, i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[[2]int{k, i}]
}

// faultSpan is one fault as the properties judged beside the checker's
// see it (WF: a judgement is skipped where a fault touched a node or a
// link it rests on): a node fault (kill, pause) of nodes, or a fault of
// client's links to nodes (partition, reset, latency, late delivery),
// from start to end on the History's clock. A kill lasts until the
// restart guard lets the node in again; a late delivery until what was
// held landed; a reset is an instant. end is 0 while the fault lasts.
type faultSpan struct {
	kind       string
	client     string // "" for a node fault
	nodes      []int
	start, end time.Duration
}

// now reads the clock the spans are on: the History's, when the run gave
// the faulter one.
func (f *faulter) now() time.Duration {
	if f.h == nil {
		return 0
	}
	return f.h.Now()
}

// open records the start of a fault of kind on nodes (of client's links,
// or client "" for the nodes themselves); close records its end.
func (f *faulter) open(kind, client string, nodes []int) *faultSpan {
	s := &faultSpan{kind: kind, client: client, nodes: slices.Clone(nodes), start: f.now()}
	f.mu.Lock()
	f.spans = append(f.spans, s)
	f.mu.Unlock()
	return s
}

func (f *faulter) close(s *faultSpan) {
	f.mu.Lock()
	s.end = f.now()
	f.mu.Unlock()
}

// faultSpans returns a copy of every fault injected so far; one still
// active ends at until.
func (f *faulter) faultSpans(until time.Duration) []faultSpan {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]faultSpan, len(f.spans))
	for i, s := range f.spans {
		out[i] = *s
		if out[i].end == 0 {
			out[i].end = until
		}
	}
	return out
}

// status describes the faults now active and the counts so far.
func (f *faulter) status() (active []string, counts map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.active {
		active = append(active, d)
	}
	slices.Sort(active)
	return active, maps.Clone(f.counts)
}

func faultSummary(counts map[string]int) string {
	var parts []string
	total := 0
	for _, k := range []string{"kill", "pause", "partition", "reset", "latency", "stall", "late"} {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		if n := counts["stall skipped"]; k == "stall" && n > 0 {
			parts[len(parts)-1] += fmt.Sprintf(" (%d skipped: never quiet)", n)
		}
		total += counts[k]
	}
	parts[len(parts)-1] += fmt.Sprintf(" (%d open, %d all; %d delivered something)", counts["late open"], counts["late all"], counts["late landed"])
	return fmt.Sprintf("%d faults: %s", total, strings.Join(parts, ", "))
}
