package sim

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/pool"
)

// simPool is one client's Pool for one node: a node.Sender, as the Pools
// of package pool are, so that the client takes the same queued path. The
// fate of each command (how long it waits to be written, how long it
// travels each way, whether its reply is lost or its connection reset, how
// late it lands) is drawn from the client's seeded generator.
type simPool struct {
	client string
	n      *simNode
	net    *network
	tr     *tracer
	gate   *stallGate // the client's stalls (nil: it never stalls)
}

var (
	_ pool.Pool   = (*simPool)(nil)
	_ node.Sender = (*simPool)(nil)
)

// The errors a real Pool gives, as the library reads them: a refused
// connection (never written: a dial error), a reset one and a timeout (the
// command may have run).
var (
	errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	errReset   = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	errTimeout = &net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}
)

type timeoutError struct{}

func (timeoutError) Error() string { return "i/o timeout" }
func (timeoutError) Timeout() bool { return true }

// Send queues op as a real Pool does and answers rcv exactly once: with the
// node's reply, an error, or node.ErrNotSent when its deadline passed
// before it was written (then it never runs). Its fate is drawn when the
// instant's sends are dispatched (dispatcher), in an order that does not
// depend on which goroutine sent first.
func (p *simPool) Send(op *node.Op, deadline time.Time, rcv node.Receiver, tag int) {
	p.net.rd.sent(p.client, p.n.id, op)
	p.net.d.add(&call{p: p, op: op, rcv: rcv, tag: tag, deadline: deadline})
}

// start draws c's fate and sets it going.
func (p *simPool) start(c *call) {
	c.seq, c.fate = p.net.draw(p.client, p.n.id)
	if p.net.bgFailed(p.client, p.n.id, c.op) {
		p.unwritten(c)
		return
	}
	wait := time.Until(node.WriteBy(c.op, c.deadline))
	if c.fate.queue >= wait {
		p.tr.add("%s: not sent (queued past its deadline)", c)
		time.AfterFunc(max(wait, 0), func() { c.finish(node.Result{Err: node.ErrNotSent}) })
		return
	}
	if c.fate.queue == 0 {
		p.write(c, c.deadline)
		return
	}
	time.AfterFunc(c.fate.queue, func() { p.write(c, c.deadline) })
}

// write puts c on a connection: it lands after the fate's latency, and its
// caller stops waiting at deadline + op.Follow. While the client stands
// still, c waits for the stall's end (writeLate).
func (p *simPool) write(c *call, deadline time.Time) {
	if p.gate.hold(func() { p.writeLate(c, deadline) }) {
		p.tr.add("%s: waits (its client stands still)", c)
		return
	}
	p.writeNow(c, deadline)
}

// writeLate writes c, which waited for its client's stall to end, or,
// when its deadline passed meanwhile, answers it node.ErrNotSent without
// writing it, as a Pool of package pool does with a command queued past
// its deadline.
func (p *simPool) writeLate(c *call, deadline time.Time) {
	if !time.Now().Before(node.WriteBy(c.op, c.deadline)) {
		p.tr.add("%s: not sent (its deadline passed while its client stood still)", c)
		c.deliver(node.Result{Err: node.ErrNotSent})
		return
	}
	p.writeNow(c, deadline)
}

// writeNow is write, now.
func (p *simPool) writeNow(c *call, deadline time.Time) {
	if err := p.n.connect(c); err != nil {
		p.tr.add("%s: refused (node down)", c)
		c.finish(node.Result{Err: err})
		return
	}
	if p.tr.on {
		p.tr.add("%s: sent, lands in %v%s", c, c.fate.up, c.fate)
	}
	c.mu.Lock()
	c.landing = time.AfterFunc(c.fate.up, func() {
		if p.net.cut(p.client, p.n.id) {
			p.tr.add("%s: lost in a partition", c)
			return
		}
		p.n.land(c)
	})
	c.mu.Unlock()
	c.after(time.Until(deadline.Add(c.op.Follow)), func() { p.timeout(c) })
	if c.fate.reset > 0 {
		c.after(c.fate.reset, func() { c.reset(errReset) })
	}
}

// timeout ends the wait for c's reply; while the client stands still, it
// waits on for as long as the stall lasts: package pool moves a wait's
// bound later by what its process stood still (internal/stall), so that a
// reply that came meanwhile is read, not lost to the timeout.
func (p *simPool) timeout(c *call) {
	if d := p.gate.stalled(); d > 0 {
		c.after(d, func() { p.timeout(c) })
		return
	}
	if c.finish(node.Result{Err: errTimeout}) {
		p.tr.add("%s: timed out", c)
	}
}

func (p *simPool) Name() string { return p.n.name }

// do runs o through Send and waits for its answer: the synchronous
// methods, which the library does not use on a Pool that is a Sender.
func (p *simPool) do(ctx context.Context, o node.Op) node.Result {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Second)
	}
	r := make(waiter, 1)
	p.Send(node.New(o), deadline, r, 0)
	select {
	case res := <-r:
		return res
	case <-ctx.Done():
		return node.Result{Err: ctx.Err()}
	}
}

type waiter chan node.Result

func (w waiter) Deliver(_ int, r node.Result) { w <- r }

func (p *simPool) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	r := p.do(ctx, node.Op{Kind: node.Acquire, Key: key, Token: token, TTL: ttl})
	return r.Int == 1, r.Err
}

func (p *simPool) AcquireFenced(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (uint64, error) {
	r := p.do(ctx, node.Op{Kind: node.AcquireFenced, Key: key, FenceKey: fenceKey, Token: token, TTL: ttl})
	return uint64(max(r.Int, 0)), r.Err
}

func (p *simPool) RaiseFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error) {
	r := p.do(ctx, node.Op{Kind: node.RaiseFence, Key: key, FenceKey: fenceKey, Token: token, Fence: fence})
	return r.Int == 1, r.Err
}

func (p *simPool) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	r := p.do(ctx, node.Op{Kind: node.Extend, Key: key, Token: token, TTL: ttl})
	return r.Int == 1, r.Err
}

func (p *simPool) Release(ctx context.Context, key, token string) (bool, error) {
	r := p.do(ctx, node.Op{Kind: node.Release, Key: key, Token: token})
	return r.Int == 1, r.Err
}

func (p *simPool) Get(ctx context.Context, key string) (string, error) {
	r := p.do(ctx, node.Op{Kind: node.Get, Key: key})
	return r.Str, r.Err
}

// RunID names the node; it does not change on restart (the simulated
// restarts model a server whose restart the library is not told of).
func (p *simPool) RunID(context.Context) (string, error) { return "run-" + p.n.name, nil }

func (p *simPool) Close() error { return nil }

// fate is what happens to one command.
type fate struct {
	queue           time.Duration // waits this long to be written
	up, down        time.Duration // travels this long to the node, and back
	drop            bool          // the reply is lost (the command ran)
	reset           time.Duration // the connection breaks this long after the write (0: no)
	landsAfterReset bool          // the command lands even if the reset comes first
	late            bool          // drawn to land after its caller gave up
}

func (f fate) String() string {
	s := ""
	if f.late {
		s += " (late delivery)"
	}
	if f.drop {
		s += " (reply will be lost)"
	}
	if f.reset > 0 {
		s += " (reset after " + f.reset.String() + ")"
	}
	return s
}

// network draws the fates of commands from one generator per client and
// node, so that the draws for one link do not depend on how its commands
// interleave with those of other links.
type network struct {
	cfg  netConfig
	seed uint64
	d    *dispatcher
	t0   time.Time
	cuts map[link][]span // partitions of single links, from the schedule
	// bgCuts are the stretches in which a link's background releases
	// fail unwritten, from the schedule (bgFailed).
	bgCuts map[link][]span
	// gates hold what the clients that stall send and receive, by client
	// index (stall.go).
	gates map[int]*stallGate
	// rd follows the plain locks' acquires and deletes (RD, deletes.go).
	rd deleteLog

	mu    sync.Mutex
	links map[link]*linkState
}

type link struct {
	client string
	node   int
}

type linkState struct {
	r   *rand.Rand // the commands' fates
	sub *rand.Rand // the notifications' (notice)
	seq int        // commands sent on the link
}

// span is an interval of virtual time since the start.
type span struct{ from, to time.Duration }

// cut reports whether the link from client to node is partitioned now:
// what travels on it, either way, is lost.
func (nw *network) cut(client string, nodeID int) bool {
	return nw.within(nw.cuts[link{client, nodeID}])
}

// within reports whether now falls in one of spans.
func (nw *network) within(spans []span) bool {
	at := time.Since(nw.t0)
	for _, s := range spans {
		if at >= s.from && at < s.to {
			return true
		}
	}
	return false
}

// link returns a link's state, made on first use. nw.mu must be held.
func (nw *network) link(client string, nodeID int) *linkState {
	ls := nw.links[link{client, nodeID}]
	if ls == nil {
		ls = &linkState{r: rand.New(rand.NewPCG(nw.seed, hash(client, nodeID)))}
		nw.links[link{client, nodeID}] = ls
	}
	return ls
}

// netConfig is a schedule's network: probabilities per command.
type netConfig struct {
	latency     time.Duration // mean one-way latency
	pSlow       float64       // a latency up to 3 node timeouts
	pLate       float64       // lands after its caller gave up: up to maxLate
	maxLate     time.Duration
	pDrop       float64 // the reply is lost
	pReset      float64 // the connection is reset before the reply
	pQueue      float64 // waits in the queue up to 2 node timeouts
	nodeTimeout time.Duration
}

// draw numbers a command of client to node and draws its fate.
func (nw *network) draw(client string, nodeID int) (int, fate) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	ls := nw.link(client, nodeID)
	ls.seq++
	r := ls.r
	cfg := nw.cfg
	oneWay := func() time.Duration { return time.Duration(r.ExpFloat64()*float64(cfg.latency)) + 50*time.Microsecond }
	f := fate{up: oneWay(), down: oneWay()}
	if r.Float64() < cfg.pQueue {
		f.queue = time.Duration(r.Int64N(int64(2 * cfg.nodeTimeout)))
	}
	if r.Float64() < cfg.pSlow {
		f.up += time.Duration(r.Int64N(int64(3 * cfg.nodeTimeout)))
	}
	if r.Float64() < cfg.pLate {
		f.late = true
		f.up += cfg.nodeTimeout + time.Duration(r.Int64N(int64(cfg.maxLate)))
	}
	f.drop = r.Float64() < cfg.pDrop
	if r.Float64() < cfg.pReset {
		f.reset = time.Duration(r.Int64N(int64(2*f.up))) + time.Microsecond
		f.landsAfterReset = r.IntN(2) == 0
	}
	return ls.seq, f
}

// hash names a link's generator stream.
func hash(client string, nodeID int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(client))
	return h.Sum64() ^ uint64(nodeID)<<56
}
