package sim

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/simhook"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// outcome is what one schedule produced.
type outcome struct {
	report   *history.Report
	trace    *tracer
	failures []string // the simulator's own failures (a script error...)
	work     workload // what the clients played
	commands int      // commands the nodes ran
	// st is what ST found (stcheck.go): the stall workload's cases.
	st stResult
	// rd are RD's violations (deletes.go); wk WK's (work_turns.go).
	rd, wk []string
	// stalls counts the schedule's stalls.
	stalls int
	// resumed and resumeFailed count the Resume calls of abandoned locks
	// that returned a lock and that failed.
	resumed, resumeFailed int
	// several and severalHeld count the acquire calls of locks of several
	// keys and those that returned a lock.
	several, severalHeld int
	// shared and sharedHeld count the acquire calls of shared holders and
	// those that returned a lock.
	shared, sharedHeld int
	// permits and permitsHeld count the permit acquire calls and those
	// that returned a permit; campaigns and leaders the Campaign calls and
	// those that won; reads the leaders read (Leader, Observe); full the
	// semaphores of more than one permit that had them all held at once.
	permits, permitsHeld, campaigns, leaders, reads, full int
}

// violated reports whether the checker found a violation or the simulator
// failed.
func (o outcome) violated() bool {
	return o.report.Total() > 0 || len(o.failures) > 0 || len(o.st.violations) > 0 || len(o.rd) > 0 || len(o.wk) > 0
}

// run plays s: it must be called inside a testing/synctest bubble, whose
// virtual clock it runs on. With trace, the outcome carries the trace.
func (s schedule) run(trace bool) outcome {
	t0 := time.Now()
	tr := &tracer{on: trace, t0: t0}
	tr.add("%s", s)
	nodes := make([]*simNode, s.nodes)
	for i := range nodes {
		nodes[i] = newNode(i, s.rates[i], t0, tr)
		nodes[i].mutate = mutants[s.control]
		nodes[i].eng.bound(simLineMax, simSharedMax)
		go nodes[i].serve()
	}
	defer func() {
		for _, n := range nodes {
			close(n.exec)
			n.eng.release()
		}
	}()
	nw := &network{cfg: s.net, seed: s.seed, links: map[link]*linkState{}, d: newDispatcher(), t0: t0,
		cuts: spansOf(s.cuts), bgCuts: spansOf(s.bgCuts), gates: gatesOf(s, tr)}
	go nw.d.run()
	defer nw.d.stop()
	h := history.New()
	st, wk := &stProbes{}, &wkLog{}
	ws := make([]*worker, s.clients)
	for i := range ws {
		ws[i] = s.newWorker(i, nodes, nw, h, tr)
		ws[i].probes, ws[i].wk = st, wk
	}
	if s.prims { // the observer: a client of its own, as a follower of the election is
		ws = append(ws, s.newWorker(s.clients, nodes, nw, h, tr))
	}
	var own []*worker // the stall workload's second Client of each process (ownKeyPart)
	if s.work == stallWork {
		for i := range s.clients {
			w := s.newClient(i, fmt.Sprintf("c%d.own", i), 3000, nodes, nw, h, tr)
			w.probes = st
			own = append(own, w)
		}
	}
	end := s.startEvents(nodes)
	var wg sync.WaitGroup
	for _, w := range ws[:s.clients] {
		wg.Go(w.run)
	}
	for _, w := range own {
		wg.Go(w.ownKeyPart)
	}
	octx, ostop := context.WithCancel(context.Background())
	var og sync.WaitGroup
	for _, w := range ws[s.clients:] {
		og.Go(func() { w.observe(octx) })
	}
	stop := sweepEvery(nodes, h, s.ttl)
	wg.Wait()
	ostop()
	og.Wait()
	stop()
	// Heal: every node fault over, every late command landed, every
	// client's re-sends of releases over; then close the clients and scan.
	time.Sleep(max(time.Until(end), 0) + s.net.maxLate + 3*s.nodeTimeout + s.ttl + 2*time.Second)
	ws = append(ws, own...)
	for _, w := range ws {
		err := w.c.Close() // it releases the abandoned locks: their errors are expected
		w.trace("%s closed: %v", w.name, errOf(err))
	}
	time.Sleep(s.net.maxLate + s.ttl) // what Close sent lands
	for _, n := range nodes {
		h.AddLeftovers(n.leftovers(redlock.DefaultKeyPrefix, h.Now())...)
		h.AddSetSizes(n.setSizes(redlock.DefaultKeyPrefix, h.Now())...)
	}
	rep := history.Check(h, s.checkConfig())
	o := outcome{report: rep, trace: tr, failures: tr.failures(), work: s.work, st: st.check(s), rd: nw.rd.found(), wk: wk.all(), stalls: len(s.stalls)}
	o.count(nodes, ws)
	return o
}

// count adds up what the nodes ran and the workers did.
func (o *outcome) count(nodes []*simNode, ws []*worker) {
	for _, n := range nodes {
		o.commands += n.ran
	}
	for _, w := range ws {
		o.resumed += w.resumed
		o.resumeFailed += w.resumeFailed
		o.several += w.tried
		o.severalHeld += w.held
		o.shared += w.sharedTried
		o.sharedHeld += w.sharedHeld
		o.permits += w.permitTried
		o.permitsHeld += w.permitHeld
		o.campaigns += w.campaigns
		o.leaders += w.leaders
		o.reads += w.reads
	}
	for _, c := range o.report.MostHolders {
		if c.Permits > 1 && c.Most >= c.Permits {
			o.full++
		}
	}
}

// checkConfig is the checker's configuration for s: the library's bounds
// for s's TTL and node timeout; WF (but under the amnesia control, which
// breaks its premise that the nodes keep their data); ERR (the fault model
// injects no error reply); LV in calm schedules; LB against the bounds the
// schedules' nodes keep (simLineMax, simSharedMax).
func (s schedule) checkConfig() history.Config {
	horizon, recheck := history.RecheckBounds(s.ttl, s.nodeTimeout, s.sessions)
	// The clean-up bounds are the library's, stalls or not. A Client that
	// stands still removes nothing meanwhile, but what it cannot remove
	// goes by itself within them: a plain lock's key within its TTL, a
	// session lock's once its session has not been renewed for a TTL (a
	// stall longer than that ends it); a stall shorter than the TTL ends
	// within the clean-up bound (about 2 TTLs after the call returned),
	// and the Client then removes what it left (docs/chaos.md).
	c := history.Config{Nodes: s.nodes, NodeTimeout: s.nodeTimeout, Cleanup: history.CleanupBound(s.ttl, s.nodeTimeout),
		Horizon: horizon, Recheck: recheck, Fencing: s.fencing && !s.sessions, Replies: true,
		SessionKeyTTL: 10 * s.ttl, // redlock's; the default (10 × the longest TTL asked) counts the extends'
		WritersFirst:  s.control != amnesia, ErrorReplies: true, Calm: s.isCalm(), CalmLatency: s.calmLatency()}
	if bounded() {
		c.LineMax, c.SharedMax = simLineMax, simSharedMax
	}
	return c
}

// spansOf are the stretches of cuts by link.
func spansOf(cuts []linkCut) map[link][]span {
	m := map[link][]span{}
	for _, c := range cuts {
		l := link{fmt.Sprintf("c%d", c.client), c.node}
		m[l] = append(m[l], span{c.at, c.at + c.dur})
	}
	return m
}

// startEvents schedules the node faults and returns when the last ends,
// or the last stall if later.
func (s schedule) startEvents(nodes []*simNode) time.Time {
	end := time.Now()
	for _, st := range s.stalls {
		end = later(end, time.Now().Add(st.end()))
	}
	for _, e := range s.events {
		n := nodes[e.node]
		if e.kill {
			time.AfterFunc(e.at, n.kill)
			time.AfterFunc(e.at+e.dur, func() { n.restart(e.amnesia) })
		} else {
			time.AfterFunc(e.at, n.pause)
			time.AfterFunc(e.at+e.dur, n.resume)
		}
		end = later(end, time.Now().Add(e.at+e.dur))
	}
	return end
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sweepEvery reads every node's lock keys every ttl until stopped and records
// what it found (history.AddSweep): L2 judges, during the run, the keys of
// failed rounds and released locks still there once the clean-up bound has
// passed. It records the sizes of the sets beside the lock keys too
// (history.AddSetSizes), which LB judges against their bounds.
func sweepEvery(nodes []*simNode, h *history.History, every time.Duration) (stop func()) {
	t := time.NewTicker(every)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-t.C:
			case <-done:
				return
			}
			for _, n := range nodes {
				h.AddSweep(n.leftovers(redlock.DefaultKeyPrefix, h.Now())...)
				h.AddSetSizes(n.setSizes(redlock.DefaultKeyPrefix, h.Now())...)
			}
		}
	})
	return func() {
		t.Stop()
		close(done)
		wg.Wait()
	}
}

// leftovers lists the lock keys under prefix the node holds, as the
// end-of-run scan reads them (history.Scan).
func (n *simNode) leftovers(prefix string, at time.Duration) []history.Leftover {
	n.lock()
	defer n.unlock()
	now := n.now()
	var out []history.Leftover
	for k := range n.st.keys {
		v := n.st.live(k, now)
		if v == nil || v.zset != nil || !strings.HasPrefix(k, prefix) || !history.LockKey(prefix, k) {
			continue
		}
		l := history.Leftover{Node: n.id, Key: k, Token: v.str, PTTL: pttlOf(v, now), At: at}
		if _, _, sk, ok := node.ParseSession(k, v.str); ok {
			if sv := n.st.live(sk, now); sv != nil {
				l.SessionInc, l.SessionPTTL = sv.str, pttlOf(sv, now)
			} else {
				l.SessionPTTL = -2
			}
		}
		out = append(out, l)
	}
	return out
}

func pttlOf(v *value, now int64) int64 {
	if v.exp == 0 {
		return -1
	}
	return (v.exp - now) / 1e6
}

// newWorker makes client i (the observer, when i is s.clients): a
// redlock.Client over its own Pools of the nodes, whose yes-replies are
// recorded (S2 counts quorums), recorded in h.
// In a schedule of sessions its locks are auto-extended session locks with
// the library's tokens; otherwise plain locks with tokens that name the
// client, fenced when the schedule says so. Clients of odd seeds describe
// themselves (WithMetadata).
func (s schedule) newWorker(i int, nodes []*simNode, nw *network, h *history.History, tr *tracer) *worker {
	name := fmt.Sprintf("c%d", i)
	if i == s.clients {
		name = "obs"
	}
	return s.newClient(i, name, 0, nodes, nw, h, tr)
}

// newClient is newWorker for a client named name, in the process of client
// i (it stalls with it), whose generators are seeded stream apart from
// those of the other clients of that process.
func (s schedule) newClient(i int, name string, stream uint64, nodes []*simNode, nw *network, h *history.History, tr *tracer) *worker {
	sent := &history.SentTokens{}
	pools := make([]pool.Pool, len(nodes))
	for j, n := range nodes {
		p, err := h.RecordReplies(name, j, &simPool{client: name, n: n, net: nw, tr: tr, gate: nw.gates[i]}, sent)
		if err != nil {
			panic(err)
		}
		pools[j] = p
	}
	opts := []redlock.Option{redlock.WithTTL(s.ttl), redlock.WithNodeTimeout(s.nodeTimeout),
		redlock.WithLogger(slog.New(slog.DiscardHandler)),
		simhook.Random(rand.New(rand.NewPCG(s.seed, uint64(i)+2000+stream)).Uint64).(redlock.Option)}
	if s.work == turns {
		opts = append(opts, redlock.WithRetryBackoff(s.turnsPoll(), s.turnsPoll()))
	}
	if s.seed%2 == 1 { // the holder's description travels in the token
		opts = append(opts, redlock.WithMetadata("sim "+name))
	}
	recOpts := []history.RecorderOption{history.WithTTL(s.ttl)}
	if s.sessions {
		opts = append(opts, redlock.WithAutoExtend(true))
		recOpts = append(recOpts, history.WithTokens(sent), history.WithSessionKey(sent.SessionKey))
	} else {
		toks := &tokens{prefix: fmt.Sprintf("%s-%d", name, s.seed)}
		opts = append(opts, redlock.WithFencing(s.fencing), redlock.WithTokenGenerator(toks.Generate))
		recOpts = append(recOpts, history.WithTokens(toks))
	}
	c, err := redlock.New(pools, opts...)
	if err != nil {
		panic(fmt.Sprintf("sim: a schedule's client options are invalid: %v (%s)", err, s))
	}
	return &worker{name: name, id: i, nodes: nodes, s: s, c: c, h: h, rec: h.Recorder(name, c, recOpts...), tr: tr,
		r: rand.New(rand.NewPCG(s.seed, uint64(i)+1000+stream)), ctx: context.Background(), t0: nw.t0, stalls: s.stallsOf(i)}
}
