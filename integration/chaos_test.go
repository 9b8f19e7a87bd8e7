package integration

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// EnvChaosDuration sets how long TestChaosMixed runs (a Go duration, such as
// "10m"); the default keeps `make test` short.
const EnvChaosDuration = "QUORUMLOCK_CHAOS_DURATION"

const defaultChaosDuration = 15 * time.Second

func chaosDuration(t *testing.T) time.Duration {
	t.Helper()
	s := strings.TrimSpace(os.Getenv(EnvChaosDuration))
	if s == "" {
		return defaultChaosDuration
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration such as 90s or 10m (%v)", EnvChaosDuration, s, err)
	}
	return d
}

// recPool records every yes a node gives a client to an acquire, a fencing
// write-back, an extend or a session renewal (S2: success only with a
// quorum of them before the call returned; a session lock's deadline only
// with a quorum of its session's confirmations), on both paths the library
// uses: the queued one (Send) and the synchronous methods. With sent set,
// it also notes the token of every acquire command it is given.
type recPool struct {
	pool.Pool
	h      *hist.History
	client string
	node   int
	sent   *sentTokens
}

func (p *recPool) record(k hist.ReplyKind, key, token string, start time.Duration) {
	p.h.AddReply(hist.Reply{Client: p.client, Node: p.node, Kind: k, Key: key, Token: token, Start: start, End: p.h.Now()})
}

func (p *recPool) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	start := p.h.Now()
	ok, err := p.Pool.Acquire(ctx, key, token, ttl)
	if ok && err == nil {
		p.record(hist.ReplyAcquire, key, token, start)
	}
	return ok, err
}

func (p *recPool) AcquireFenced(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (uint64, error) {
	start := p.h.Now()
	n, err := p.Pool.AcquireFenced(ctx, key, fenceKey, token, ttl)
	if n > 0 && err == nil {
		p.record(hist.ReplyAcquire, key, token, start)
	}
	return n, err
}

func (p *recPool) RaiseFence(ctx context.Context, key, fenceKey, token string, f uint64) (bool, error) {
	start := p.h.Now()
	ok, err := p.Pool.RaiseFence(ctx, key, fenceKey, token, f)
	if ok && err == nil {
		p.record(hist.ReplyRaise, key, token, start)
	}
	return ok, err
}

func (p *recPool) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	start := p.h.Now()
	ok, err := p.Pool.Extend(ctx, key, token, ttl)
	if ok && err == nil {
		p.record(hist.ReplyExtend, key, token, start)
	}
	return ok, err
}

// Send passes op to the wrapped Pool's queue (pool.Dial's Pools implement
// node.Sender: the path the library takes for them, pipelined) and records
// the node's yes when it is delivered.
func (p *recPool) Send(op *node.Op, deadline time.Time, rcv node.Receiver, tag int) {
	if p.sent != nil {
		switch op.Kind {
		case node.Acquire, node.AcquireFenced, node.AcquireSession:
			p.sent.add(op.Token, op.Kind)
		}
	}
	p.Pool.(node.Sender).Send(op, deadline, &recReceiver{p: p, op: op, start: p.h.Now(), rcv: rcv}, tag)
}

// recReceiver records a yes to one Send, then delivers the result.
type recReceiver struct {
	p     *recPool
	op    *node.Op
	start time.Duration
	rcv   node.Receiver
}

func (r *recReceiver) Deliver(tag int, res node.Result) {
	if res.Err == nil {
		switch k := r.op.Kind; {
		case k == node.AcquireFenced && res.Int > 0, k == node.Acquire && res.Int == 1:
			r.p.record(hist.ReplyAcquire, r.op.Key, r.op.Token, r.start)
		case k == node.RaiseFence && res.Int == 1:
			r.p.record(hist.ReplyRaise, r.op.Key, r.op.Token, r.start)
		case k == node.Extend && res.Int == 1:
			r.p.record(hist.ReplyExtend, r.op.Key, r.op.Token, r.start)
		case k == node.AcquireSession && res.Int > 0: // the session's incarnation on the node
			r.p.h.AddReply(hist.Reply{Client: r.p.client, Node: r.p.node, Kind: hist.ReplyAcquire, Key: r.op.Key, Token: r.op.Token,
				Start: r.start, End: r.p.h.Now(), Session: r.op.Session, Inc: res.Int})
		case k == node.RenewSession && res.Int == 1: // Key: the session key; Token: the incarnation
			r.p.record(hist.ReplyRenew, r.op.Key, r.op.Token, r.start)
		}
	}
	r.rcv.Deliver(tag, res)
}

var _ node.Sender = (*recPool)(nil)

// tokGen makes a Client's tokens and remembers them in order, so that the
// tokens of one call's failed rounds are known (L2). Safe for concurrent
// use; a Client driven by one goroutine at a time attributes tokens exactly.
type tokGen struct {
	prefix string
	mu     sync.Mutex
	made   []string
}

func (g *tokGen) gen() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tok := fmt.Sprintf("%s-%d-%08x", g.prefix, len(g.made)+1, rand.Uint32())
	g.made = append(g.made, tok)
	return tok, nil
}

func (g *tokGen) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.made)
}

func (g *tokGen) since(n int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.made[n:])
}

// sentTokens notes the tokens of the acquire commands a Client sends, in
// the order they are first sent, with the command's kind: the tokens of a
// Client that makes its own (a session's) are known this way. Safe for
// concurrent use.
type sentTokens struct {
	mu    sync.Mutex
	order []string
	kinds map[string]node.Kind
}

func (s *sentTokens) add(tok string, k node.Kind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.kinds[tok]; !ok {
		s.kinds[tok] = k
		s.order = append(s.order, tok)
	}
}

func (s *sentTokens) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.order)
}

func (s *sentTokens) since(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order[n:])
}

// kind returns the kind of the acquire command tok was sent with.
func (s *sentTokens) kind(tok string) (node.Kind, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.kinds[tok]
	return k, ok
}

// chaosClient is one independent client: its own proxies to the 5 nodes (so
// that faults can cut it off alone), recording pools and redlock.Client.
// Each of its lock operations is recorded in h. It is driven by one
// goroutine at a time.
type chaosClient struct {
	name    string
	h       *hist.History
	ttl     time.Duration
	proxies []*testkit.Proxy
	pools   []pool.Pool
	cl      *redlock.Client
	gen     *tokGen // fenced clients' tokens
	once    sync.Once

	// A session client (newSessionClient) takes auto-extended locks with
	// the library's own tokens: it learns them from its pools (sent), and
	// watchers record the deadlines of its locks (leases).
	session bool
	sent    *sentTokens
	leases  sync.WaitGroup
	dead    atomic.Bool // cut off from every node for good (die)
}

// newChaosClient dials one pool per node through a new proxy, with
// poolOpts, and makes a fenced Client with lockOpts; a t.Cleanup closes it
// (before the proxies, registered earlier).
func newChaosClient(t *testing.T, c *cluster, h *hist.History, name string, ttl time.Duration, poolOpts []pool.Option, lockOpts ...redlock.Option) *chaosClient {
	t.Helper()
	cc, err := makeChaosClient(t, c, h, name, ttl, false, poolOpts, lockOpts...)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// newSessionClient is newChaosClient for a Client whose locks are session
// locks: auto-extended, with the library's random tokens, no fencing. It
// returns an error rather than failing the test, so that a worker
// goroutine may call it.
func newSessionClient(t *testing.T, c *cluster, h *hist.History, name string, ttl time.Duration, poolOpts []pool.Option, lockOpts ...redlock.Option) (*chaosClient, error) {
	return makeChaosClient(t, c, h, name, ttl, true, poolOpts, lockOpts...)
}

func makeChaosClient(t *testing.T, c *cluster, h *hist.History, name string, ttl time.Duration, session bool, poolOpts []pool.Option, lockOpts ...redlock.Option) (*chaosClient, error) {
	cc := &chaosClient{name: name, h: h, ttl: ttl, session: session}
	var sent *sentTokens
	if session {
		sent = &sentTokens{kinds: map[string]node.Kind{}}
		cc.sent = sent
	} else {
		cc.gen = &tokGen{prefix: name}
	}
	for i := range c.Len() {
		px := c.Node(i).Proxy(t)
		cc.proxies = append(cc.proxies, px)
		// Small buffers: the lock scripts' replies are tiny, and with
		// go-redis' 32 KiB defaults the connections that every timed-out
		// call replaces dominate the test's allocations (and, on a loaded
		// machine, its garbage collection).
		p, err := pool.Dial(&redis.Options{Addr: px.Addr(), Password: c.password, ReadBufferSize: 4 << 10, WriteBufferSize: 4 << 10},
			append([]pool.Option{pool.WithName(fmt.Sprintf("node%d", i))}, poolOpts...)...)
		if err != nil {
			cc.closePools(t)
			return nil, fmt.Errorf("%s: pool.Dial node%d: %w", name, i, err)
		}
		if _, ok := p.(node.Sender); !ok {
			cc.closePools(t)
			_ = p.Close()
			return nil, fmt.Errorf("%s: pool.Dial returned a %T, which does not queue commands (node.Sender): recPool records only that path", name, p)
		}
		cc.pools = append(cc.pools, &recPool{Pool: p, h: h, client: name, node: i, sent: sent})
	}
	opts := []redlock.Option{redlock.WithTTL(ttl)}
	if session {
		opts = append(opts, redlock.WithAutoExtend(true))
	} else {
		opts = append(opts, redlock.WithFencing(true), redlock.WithTokenGenerator(cc.gen.gen))
	}
	cl, err := redlock.New(cc.pools, append(opts, lockOpts...)...)
	if err != nil {
		cc.closePools(t)
		return nil, fmt.Errorf("%s: redlock.New: %w", name, err)
	}
	cc.cl = cl
	t.Cleanup(func() { cc.close(t) })
	return cc, nil
}

func (cc *chaosClient) closePools(t *testing.T) {
	for _, p := range cc.pools {
		if err := p.Close(); err != nil {
			t.Errorf("%s: closing pool %s: %v", cc.name, p.Name(), err)
		}
	}
}

// close closes the Client (releasing what it still holds and joining its
// clean-up) and the pools; only the first call does anything. Release
// failures of Close are expected after faults and only logged. Closing
// ends every lock, so the lease watchers are joined after.
func (cc *chaosClient) close(t *testing.T) {
	cc.once.Do(func() {
		if err := cc.cl.Close(); err != nil && !errors.Is(err, redlock.ErrClosed) {
			t.Logf("%s: Close: %v", cc.name, err)
		}
		cc.leases.Wait()
		cc.closePools(t)
	})
}

// warm makes the Client verify every node's identity and open connections,
// with a generous node timeout; it is not recorded.
func (cc *chaosClient) warm(ctx context.Context) error {
	l, err := cc.cl.Lock(ctx, "warm-"+cc.name, redlock.WithNodeTimeout(time.Second), redlock.WithMaxWait(10*time.Second))
	if err != nil {
		return fmt.Errorf("%s: warm-up: %w", cc.name, err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("%s: warm-up release: %w", cc.name, err)
	}
	return nil
}

// partition blackholes (on) or restores (off) this client's links to nodes;
// a dead client's links stay cut.
func (cc *chaosClient) partition(on bool, nodes ...int) {
	if !on && cc.dead.Load() {
		return
	}
	for _, i := range nodes {
		cc.proxies[i].Blackhole(on)
	}
}

// die emulates the death of the client's process: from now on nothing it
// writes reaches a node (held and delayed bytes included: the proxies drop
// them), and no reply reaches it. Its Client keeps running, cut off, until
// the end of the test, as a process that stopped would keep its keys.
func (cc *chaosClient) die() {
	cc.dead.Store(true)
	for _, px := range cc.proxies {
		px.Blackhole(true)
	}
}

// tokens are the tokens the client's acquire calls have used so far.
func (cc *chaosClient) tokens() interface {
	count() int
	since(int) []string
} {
	if cc.sent != nil {
		return cc.sent
	}
	return cc.gen
}

// sessionKey returns the session key of l if it is a session lock (its
// acquire command was the session script), else "".
func (cc *chaosClient) sessionKey(l *redlock.Lock) string {
	if cc.sent == nil {
		return ""
	}
	if k, ok := cc.sent.kind(l.Token()); !ok || k != node.AcquireSession || len(l.Token()) < 16 {
		return ""
	}
	return redlock.DefaultKeyPrefix + "s:" + l.Token()[:16]
}

// deadline reads l's Deadline; for a session lock it records what it read
// (hist.Lease): a session lock's deadline moves with its session.
func (cc *chaosClient) deadline(l *redlock.Lock) time.Time {
	d := l.Deadline()
	if cc.session {
		cc.h.AddLease(hist.Lease{Client: cc.name, Key: l.Key(), Token: l.Token(), At: cc.h.Now(), Deadline: cc.h.Since(d)})
	}
	return d
}

// watch follows a session lock's deadline until its Done closes, and
// records every change it reads (the moments a holder that reads Deadline
// may believe it holds the lock), then, once Done has closed, the deadline
// its lease ended at and that it ended (a holder that saw its lock lost
// stops acting under it). The client's close joins it.
func (cc *chaosClient) watch(l *redlock.Lock) {
	done := l.Done()
	cc.leases.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var last time.Time
		for {
			select {
			case <-done:
				d := l.Deadline()
				cc.h.AddLease(hist.Lease{Client: cc.name, Key: l.Key(), Token: l.Token(), At: cc.h.Now(), Deadline: cc.h.Since(d), Done: true})
				return
			case <-tick.C:
			}
			if d := l.Deadline(); !d.Equal(last) {
				last = d
				cc.h.AddLease(hist.Lease{Client: cc.name, Key: l.Key(), Token: l.Token(), At: cc.h.Now(), Deadline: cc.h.Since(d)})
			}
		}
	})
}

func outcomeOf(err error, ctx context.Context) hist.Outcome {
	switch {
	case err == nil:
		return hist.OK
	case ctx.Err() != nil:
		return hist.Indefinite
	case errors.Is(err, redlock.ErrLockLost):
		return hist.Lost
	case errors.Is(err, redlock.ErrNotAcquired), errors.Is(err, redlock.ErrNotHeld):
		return hist.Failed
	}
	return hist.Indefinite
}

// acquire calls TryLock (wait 0) or Lock with WithMaxWait(wait), records
// the call and returns the lock (nil on failure) and the record.
func (cc *chaosClient) acquire(ctx context.Context, key string, wait time.Duration) (*redlock.Lock, hist.Op, error) {
	n0 := cc.tokens().count()
	op := hist.Op{Client: cc.name, Key: key, Kind: hist.Acquire, TTL: cc.ttl, Start: cc.h.Now()}
	var l *redlock.Lock
	var err error
	if wait > 0 {
		l, err = cc.cl.Lock(ctx, key, redlock.WithMaxWait(wait))
	} else {
		l, err = cc.cl.TryLock(ctx, key)
	}
	var deadline time.Time
	if err == nil && cc.session {
		// A session lock's deadline moves with its session's renewals:
		// read it as the call returned, before a renewal can move it.
		deadline = l.Deadline()
	}
	op.End = cc.h.Now()
	op.Outcome = outcomeOf(err, ctx)
	tried := cc.tokens().since(n0)
	if err == nil {
		if !cc.session {
			deadline = l.Deadline()
		}
		op.Token, op.Fence, op.Deadline = l.Token(), l.Fence(), cc.h.Since(deadline)
		op.Session = cc.sessionKey(l)
		if op.Session != "" {
			cc.watch(l)
		}
		tried = slices.DeleteFunc(tried, func(s string) bool { return s == op.Token })
	} else {
		op.Err = err.Error()
		var qe *redlock.QuorumError
		if errors.As(err, &qe) {
			op.Quorum, op.Agreed = qe.Quorum, qe.Agreed()
		}
	}
	op.Tried = tried
	cc.h.Add(op)
	cc.h.Forget(tried)
	return l, op, err
}

// extend calls l.Extend with the lock's TTL and records it.
func (cc *chaosClient) extend(ctx context.Context, l *redlock.Lock) (hist.Op, error) {
	op := hist.Op{Client: cc.name, Key: l.Key(), Kind: hist.Extend, TTL: cc.ttl, Token: l.Token(), Fence: l.Fence(), Start: cc.h.Now(), Session: cc.sessionKey(l)}
	err := l.Extend(ctx, 0)
	var deadline time.Time
	if cc.session {
		deadline = l.Deadline() // as the call returned (see acquire)
	}
	op.End = cc.h.Now()
	op.Outcome = outcomeOf(err, ctx)
	if !cc.session {
		deadline = l.Deadline()
	}
	op.Deadline = cc.h.Since(deadline)
	if err != nil {
		op.Err = err.Error()
	}
	cc.h.Add(op)
	return op, err
}

// release calls l.Release and records it.
func (cc *chaosClient) release(ctx context.Context, l *redlock.Lock) (hist.Op, error) {
	op := hist.Op{Client: cc.name, Key: l.Key(), Kind: hist.Release, Token: l.Token(), Fence: l.Fence(), Start: cc.h.Now()}
	err := l.Release(ctx)
	op.End = cc.h.Now()
	op.Outcome = outcomeOf(err, ctx)
	if err != nil {
		op.Err = err.Error()
	}
	cc.h.Add(op)
	return op, err
}

// resource is the state the locks protect, on a Redis server of its own that
// no fault touches: per key, a counter read and written in two steps (S5)
// and a fenced register written with fence.Write.
type resource struct {
	cl *redis.Client
	h  *hist.History
}

func counterKey(key string) string  { return "chaos:counter:" + key }
func registerKey(key string) string { return "chaos:register:" + key }

// section runs one critical section under l for cc: read the counter, work
// briefly, and, if the deadline is not near, write it back incremented and
// write the fenced register. It records the section and returns false if it
// found too little validity left to start.
func (res *resource) section(ctx context.Context, cc *chaosClient, l *redlock.Lock, rng *rand.Rand) bool {
	const (
		startMargin = 500 * time.Millisecond // validity needed to start
		writeMargin = 250 * time.Millisecond // validity needed to write: a stall shorter than this cannot push the write past the deadline
	)
	if time.Until(cc.deadline(l)) < startMargin {
		return false
	}
	key := l.Key()
	s := hist.Section{Client: cc.name, Key: key, Token: l.Token(), Fence: l.Fence(), Start: res.h.Now()}
	defer func() {
		s.End = res.h.Now()
		res.h.AddSection(s)
	}()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	v, err := res.cl.Get(rctx, counterKey(key)).Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil
	}
	if err != nil {
		s.Err = "read: " + err.Error()
		return true
	}
	s.Read, s.Counted = v, true
	time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) // the work
	// Read again: a session lock's deadline moves with its session, later
	// or, when a node drops out, earlier.
	if time.Until(cc.deadline(l)) < writeMargin {
		return true // too late to write: stop, as a careful holder does
	}
	if err := res.cl.Set(rctx, counterKey(key), v+1, 0).Err(); err != nil {
		s.Err, s.Unsure = "write: "+err.Error(), true
		return true
	}
	s.Wrote = true
	if l.Fence() == 0 {
		return true // no fencing token: nothing to write to the fenced register
	}
	switch err := fence.Write(rctx, res.cl, registerKey(key), l.Fence(), fmt.Sprint(v+1)); {
	case err == nil:
		s.Fenced = hist.Accepted
	case errors.Is(err, fence.ErrStale):
		s.Fenced = hist.Refused
	default:
		s.Err = "fenced write: " + err.Error()
	}
	return true
}

// probe reads the dead lock's key on every node, directly (L1). For a
// session lock, the node holds it while the key names its token and the
// session key holds the incarnation the key names, until the earlier of
// the two keys' expiries.
func probe(ctx context.Context, admins []*redis.Client, h *hist.History, l *redlock.Lock, ttl, died, lastTouch time.Duration) hist.Probe {
	p := hist.Probe{Key: l.Key(), Token: l.Token(), TTL: ttl, Died: died, LastTouch: lastTouch, Nodes: make([]hist.ProbeNode, len(admins))}
	var wg sync.WaitGroup
	for i, cl := range admins {
		wg.Go(func() {
			pn := hist.ProbeNode{Node: i, At: h.Now()}
			pctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			defer cancel()
			v, ms, err := getPTTL(pctx, cl, rkey(l.Key()))
			if err == nil {
				pn.Reached = true
				pn.Holds = v == l.Token()
				pn.PTTL = ms
				if tok, inc, sk, ok := node.ParseSession(rkey(l.Key()), v); ok && tok == l.Token() {
					sv, sms, err := getPTTL(pctx, cl, sk)
					pn.Reached = err == nil
					pn.Holds = sv == inc
					if sms >= 0 && (ms < 0 || sms < ms) {
						pn.PTTL = sms
					}
				}
			}
			p.Nodes[i] = pn
		})
	}
	wg.Wait()
	return p
}

// getPTTL reads key's value ("" when absent) and PTTL in one transaction.
func getPTTL(ctx context.Context, cl *redis.Client, key string) (string, int64, error) {
	var get *redis.StringCmd
	var pttl *redis.Cmd
	_, err := cl.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.Do(ctx, "PTTL", key)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, err
	}
	ms, _ := pttl.Int64()
	return get.Val(), ms, nil
}

// addSessionState fills in, for each key found that holds a session lock's
// value, what its session key holds and its PTTL (read right after, in one
// transaction: a session key only moves on by renewals, which make a held
// lock look held a little longer, never the reverse).
func addSessionState(ctx context.Context, cl *redis.Client, found []hist.Leftover) error {
	idx, keys := []int{}, []string{}
	for j, l := range found {
		if _, _, sk, ok := node.ParseSession(l.Key, l.Token); ok {
			idx, keys = append(idx, j), append(keys, sk)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	gets := make([]*redis.StringCmd, len(keys))
	pttls := make([]*redis.Cmd, len(keys))
	_, err := cl.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for j, k := range keys {
			gets[j] = p.Get(ctx, k)
			pttls[j] = p.Do(ctx, "PTTL", k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for j, i := range idx {
		found[i].SessionInc = gets[j].Val()
		found[i].SessionPTTL, _ = pttls[j].Int64()
	}
	return nil
}

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
	nodeBusy  map[int]bool
	linkBusy  map[[2]int]bool // (client, node) with a blackhole, latency or late delivery
	held      map[[2]int]bool // (client, node) with late delivery: resets spare them
	active    map[int]string
	next      int
	counts    map[string]int
	maxFaults int
	lateBytes int // bytes held by late faults and delivered
}

const maxNodeFaults = 2 // a quorum of 3 of 5 nodes stays up

func newFaulter(t *testing.T, c *cluster, clients []*chaosClient, ttl, nodeTimeout, guard time.Duration, seed uint64) *faulter {
	return &faulter{
		t: t, c: c, clients: clients, ttl: ttl, nodeTimeout: nodeTimeout, guard: guard, rng: rand.New(rand.NewPCG(seed, 7)), stop: make(chan struct{}),
		nodeBusy: map[int]bool{}, linkBusy: map[[2]int]bool{}, held: map[[2]int]bool{}, active: map[int]string{}, counts: map[string]int{},
	}
}

// run injects a fault every 1–3 s until stop is closed, then waits until
// every fault is healed. The first fault is a late delivery, so that even
// the short run of `make test` (15 s, about 7 faults drawn from 6 kinds)
// always has one; the others are drawn at random.
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
		if n == 0 {
			kind = faultLate
		}
		f.inject(kind)
	}
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

// sweep reads our lock keys on nodes, directly, right after a late
// delivery and then every 200 ms until every key it can have set has
// expired (TTL + allowance), or the faulter stops (the final scan takes
// over), and records what it finds (L2).
func (f *faulter) sweep(nodes []int) {
	d := f.sweepFor
	if d == 0 {
		d = f.ttl + drift.Allowance(f.ttl, drift.DefaultFactor) + 100*time.Millisecond
	}
	until := time.Now().Add(d)
	for {
		for _, i := range nodes {
			if found, ok := readLockKeys(f.admins[i], f.h, i, f.keys); ok {
				f.h.AddSweep(found...)
			}
		}
		if time.Now().After(until) {
			return
		}
		select {
		case <-f.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readLockKeys reads keys' lock keys on node i through cl (GET and PTTL in
// one transaction, so that they agree), stamped with the time of the read;
// ok is false when the node did not answer in time (killed or paused).
func readLockKeys(cl *redis.Client, h *hist.History, i int, keys []string) (found []hist.Leftover, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	at := h.Now()
	gets := make([]*redis.StringCmd, len(keys))
	pttls := make([]*redis.Cmd, len(keys))
	_, err := cl.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for j, k := range keys {
			gets[j] = p.Get(ctx, rkey(k))
			pttls[j] = p.Do(ctx, "PTTL", rkey(k))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, false
	}
	for j, k := range keys {
		if tok := gets[j].Val(); tok != "" {
			ms, _ := pttls[j].Int64()
			found = append(found, hist.Leftover{Node: i, Key: rkey(k), Token: tok, PTTL: ms, At: at})
		}
	}
	if addSessionState(ctx, cl, found) != nil {
		return nil, false
	}
	return found, true
}

// The kinds of fault inject draws from; faultLate is late delivery.
const (
	faultKinds = 6
	faultLate  = 5
)

// inject starts one fault of the given kind (0 to faultKinds-1).
func (f *faulter) inject(kind int) {
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+f.rng.IntN(hi-lo)) * time.Millisecond }
	k := f.rng.IntN(len(f.clients))
	cc := f.client(k)
	switch kind {
	case 0: // kill, restart with the data after more than the TTL
		i, ok := f.freeNode()
		if !ok {
			return
		}
		if err := f.c.Node(i).Kill(); err != nil {
			f.t.Errorf("chaos: kill node%d: %v", i, err)
			f.freeNodeDone(i)
			return
		}
		f.count("kill")
		d := f.ttl + ms(500, 1500)
		f.holdFor(fmt.Sprintf("node%d killed, then guarded", i), d, true, func() {
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
	case 1: // pause
		i, ok := f.freeNode()
		if !ok {
			return
		}
		if err := f.c.Node(i).Pause(); err != nil {
			f.t.Errorf("chaos: pause node%d: %v", i, err)
			f.freeNodeDone(i)
			return
		}
		f.count("pause")
		f.hold(fmt.Sprintf("node%d paused", i), ms(200, 900), func() {
			if err := f.c.Node(i).Resume(); err != nil {
				f.t.Errorf("chaos: resume node%d: %v", i, err)
			}
			f.freeNodeDone(i)
		})
	case 2: // partition one client from 1–3 nodes
		nodes := f.links(k, 1+f.rng.IntN(3))
		if len(nodes) == 0 {
			return
		}
		cc.partition(true, nodes...)
		f.count("partition")
		f.hold(fmt.Sprintf("%s cut from nodes %v", cc.name, nodes), ms(500, 2500), func() {
			cc.partition(false, nodes...)
			f.linksDone(k, nodes)
		})
	case 3: // reset one client's connections to 1–5 nodes
		for _, i := range f.rng.Perm(f.c.Len())[:1+f.rng.IntN(f.c.Len())] {
			if !f.isHeld(k, i) { // a reset would lose the held bytes: they must land
				cc.proxies[i].Reset()
			}
		}
		f.count("reset")
	case 4: // latency on 1–2 of one client's links
		nodes := f.links(k, 1+f.rng.IntN(2))
		if len(nodes) == 0 {
			return
		}
		d := ms(5, 40)
		for _, i := range nodes {
			cc.proxies[i].SetLatency(d)
		}
		f.count("latency")
		f.hold(fmt.Sprintf("%s +%v to nodes %v", cc.name, d, nodes), ms(1000, 3000), func() {
			for _, i := range nodes {
				cc.proxies[i].SetLatency(0)
			}
			f.linksDone(k, nodes)
		})
	case faultLate: // late delivery on 1–3 of one client's links
		nodes := f.links(k, 1+f.rng.IntN(3))
		if len(nodes) == 0 {
			return
		}
		// HoldOpen: what is in flight, and what the client writes on its
		// open connections until it drops them, lands late; its new
		// connections work (a retried command or a roll-back overtakes
		// the late one). HoldAll: nothing it writes lands before the end.
		scope := testkit.HoldOpen
		if f.rng.IntN(2) == 0 {
			scope = testkit.HoldAll
		}
		f.setHeld(k, nodes, true)
		for _, i := range nodes {
			cc.proxies[i].Hold(scope)
		}
		f.count("late")
		f.count("late " + scope.String())
		// Always past the node timeout, so that what was held timed out.
		// Half the time it lands within 1.5 s, while the client may still
		// be cleaning up after it; half the time after 3.5–7 s, when the
		// clean-up is over: a sweep judges a key only once the clean-up
		// bound (4.3 s here) has passed since its call returned, and the
		// key expires a TTL after it landed, so only a landing more than
		// 2.3 s after the call can be judged during the run.
		d := ms(int((f.nodeTimeout+100*time.Millisecond)/time.Millisecond), 1500)
		if f.rng.IntN(2) == 0 {
			d = ms(3500, 7000)
		}
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
			f.t.Logf("chaos: %s late (%s) to nodes %v: %d bytes held for up to %v landed", cc.name, scope, nodes, n, d)
			f.setHeld(k, nodes, false)
			f.linksDone(k, nodes)
			f.sweep(nodes)
		})
	}
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
	for _, k := range []string{"kill", "pause", "partition", "reset", "latency", "late"} {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		total += counts[k]
	}
	parts[len(parts)-1] += fmt.Sprintf(" (%d open, %d all; %d delivered something)", counts["late open"], counts["late all"], counts["late landed"])
	return fmt.Sprintf("%d faults: %s", total, strings.Join(parts, ", "))
}

// scanLeftovers records every lock key and session key (not the counters of
// fencing and of session incarnations) on every node (L1, L2); all nodes
// must be up.
func scanLeftovers(t *testing.T, admins []*redis.Client, h *hist.History) {
	t.Helper()
	for i, cl := range admins {
		var found []hist.Leftover
		for _, k := range lockKeys(t, cl) {
			if strings.HasSuffix(k, ":fence") || k == sessionSeq {
				continue // counters, without a TTL by design
			}
			found = append(found, hist.Leftover{Node: i, Key: k, Token: get(t, cl, k), PTTL: pttl(t, cl, k), At: h.Now()})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := addSessionState(ctx, cl, found); err != nil {
			t.Errorf("node%d: reading session keys: %v", i, err)
		}
		cancel()
		h.AddLeftovers(found...)
	}
}

// startAudit follows every node's MONITOR stream; the returned function
// stops the monitors and reports their parse errors.
func startAudit(t *testing.T, c *cluster, allowExternal bool) (*hist.Audit, func()) {
	t.Helper()
	a := hist.NewAudit(hist.AuditConfig{Prefix: redlock.DefaultKeyPrefix, AllowExternal: allowExternal})
	var ms []*hist.Monitor
	for i := range c.Len() {
		ms = append(ms, hist.StartMonitor(i, c.Node(i).Addr(), c.password, a))
	}
	eventually(t, 10*time.Second, 5*time.Millisecond, "MONITOR attached on every node", func() bool {
		for _, m := range ms {
			if m.Attached() == 0 {
				return false
			}
		}
		return true
	})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for i, m := range ms {
				m.Stop()
				if n, err := m.Errors(); n > 0 {
					t.Errorf("node%d MONITOR: %d lines not parsed (last: %v)", i, n, err)
				}
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

// cleanupBound is the bound docs/design.md states for the clean-up of a
// failed acquire call or a Release ("Deciding early, cleaning up late"): a
// node's reply may come up to one node timeout after the call returned; its
// background release gets min(TTL, max(10 × node timeout, 2 s)); when that
// release finds nothing, it is sent once more after min(node timeout,
// 100 ms), with the same time. After this, no key of the call may be left
// (L2 sweeps).
// recheckBounds are the library's statement about late SETs of a token it
// no longer wants (docs/design.md, the leftover bound): it re-sends the
// release at least once a second for TTL + the background budget after the
// SET's fate became unknown, which is after the call returned (for session
// locks, 10 × TTL, their keys' own TTL, instead of TTL); a SET that lands
// within that horizon is gone a re-send (and its round trip) later.
func recheckBounds(ttl, nodeTimeout time.Duration, sessions bool) (horizon, recheck time.Duration) {
	bg := min(ttl, max(10*nodeTimeout, 2*time.Second))
	if sessions {
		return 10*ttl + bg, time.Second + 4*nodeTimeout
	}
	return ttl + bg, time.Second + 4*nodeTimeout
}

func cleanupBound(ttl, nodeTimeout time.Duration) time.Duration {
	bg := min(ttl, max(10*nodeTimeout, 2*time.Second))
	return nodeTimeout + bg + min(nodeTimeout, 100*time.Millisecond) + bg
}

// TestChaosMixed runs 16 independent clients, each behind its own proxies,
// contending for 3 keys with fencing, a guarded counter and a fenced
// register, while nodes are killed (and restarted with their data after more
// than the TTL), paused, cut off from single clients, reset and slowed, and
// single clients' commands are held past the node timeout and then land
// (late delivery, swept for leftovers afterwards).
// Holders extend, release, and sometimes die. Every operation is recorded,
// every node's MONITOR stream is audited, and at the end the history is
// checked for S1–S5, L1, L2 and linearizability. QUORUMLOCK_CHAOS_DURATION
// sets how long it runs (default 15 s; `make chaos` runs 10 minutes).
func TestChaosMixed(t *testing.T) { runChaos(t, false) }

// TestChaosSessions is TestChaosMixed with session locks (docs/safety.md,
// "Renewal sessions"): the clients take auto-extended locks with the
// library's random tokens and no fencing, so that each Client's locks hang
// on one renewal session per node. A session lock's deadline moves with
// its session's renewals: watchers record every deadline the holders could
// read (hist.Lease), which the checker takes as the end of their windows
// (S1, LIN) and backs with the session's recorded confirmations (S2). A
// holder that dies takes its whole Client with it (the process stops: its
// links are cut for good, and its session is no longer renewed), and a new
// client takes its place. QUORUMLOCK_CHAOS_DURATION sets how long it runs
// (default 15 s).
func TestChaosSessions(t *testing.T) { runChaos(t, true) }

// runChaos runs the mixed chaos scenario, with fenced locks or, with
// sessions, with session locks.
func runChaos(t *testing.T, sessions bool) {
	const (
		ttl         = 2 * time.Second
		nodeTimeout = 200 * time.Millisecond
		nclients    = 16
		guard       = 3 * time.Second // restart guard: above TTL + allowance
	)
	dur := chaosDuration(t)
	keys := []string{"chaos-a", "chaos-b", "chaos-c"}
	progressEvery := 3 * time.Second
	if dur > 2*time.Minute {
		progressEvery = 5 * time.Second
	}

	c := startCluster(t, ttl, "")
	dropFenceCounters(t, c)
	resCluster := testkit.Start(t, 1)
	res := &resource{cl: resCluster.Clients(t)[0]}
	admins := c.admins(t)
	h := hist.New()
	res.h = h
	audit, stopAudit := startAudit(t, c, false)

	// The history and the connections that faults replace allocate a lot;
	// collect garbage less often (memory is plentiful, CPU is not).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	// go-redis logs every failed dial to a killed node: count them instead.
	quiet := &countingLogger{}
	redis.SetLogger(quiet)
	defer redis.SetLogger(stderrLogger{})
	poolOpts := []pool.Option{pool.WithRestartGuard(guard), pool.WithLogger(slog.New(slog.DiscardHandler))}
	lockOpts := []redlock.Option{redlock.WithNodeTimeout(nodeTimeout), redlock.WithRetryBackoff(5*time.Millisecond, 100*time.Millisecond)}
	newClient := func(name string) (*chaosClient, error) {
		if sessions {
			return newSessionClient(t, c, h, name, ttl, poolOpts, lockOpts...)
		}
		return newChaosClient(t, c, h, name, ttl, poolOpts, lockOpts...), nil
	}
	clients := make([]*chaosClient, nclients)
	var all struct { // every client made, the dead ones too
		sync.Mutex
		list []*chaosClient
	}
	for k := range clients {
		cc, err := newClient(fmt.Sprintf("c%02d", k))
		if err != nil {
			t.Fatal(err)
		}
		clients[k] = cc
		all.list = append(all.list, cc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Warm up: every Client verifies the nodes' identities and opens its
	// connections before faults, with time to spare (not recorded).
	var wg sync.WaitGroup
	for _, cc := range clients {
		wg.Go(func() {
			if err := cc.warm(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	f := newFaulter(t, c, clients, ttl, nodeTimeout, guard, uint64(time.Now().UnixNano()))
	f.admins, f.h, f.keys = admins, h, keys
	if sessions {
		// A session lock's key that landed late may be held as long as its
		// session lives: follow it longer than a plain key's TTL.
		f.sweepFor = 3 * ttl
	}
	allow := drift.Allowance(ttl, drift.DefaultFactor)
	var lat latencies
	var deaths atomic.Int64
	why := newTally()
	for k := range clients {
		rng := rand.New(rand.NewPCG(uint64(k), 99))
		cc := clients[k]
		wg.Go(func() {
			for ctx.Err() == nil {
				key := keys[rng.IntN(len(keys))]
				wait := time.Duration(0)
				if rng.IntN(3) > 0 {
					wait = time.Duration(200+rng.IntN(800)) * time.Millisecond
				}
				l, op, err := cc.acquire(ctx, key, wait)
				lat.add(err == nil, op.End-op.Start)
				if err != nil {
					why.add(err)
					if wait == 0 { // TryLock fails fast: do not spin
						time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
					}
					continue
				}
				lastTouch := h.Since(l.Deadline()) - (ttl - allow) // the winning round's start
				for range 1 + rng.IntN(3) {
					if !res.section(ctx, cc, l, rng) {
						break
					}
					if rng.IntN(2) == 0 {
						op, err := cc.extend(ctx, l)
						lastTouch = op.Start
						if err != nil {
							break
						}
					}
				}
				if rng.IntN(40) != 0 {
					_, _ = cc.release(ctx, l)
					continue
				}
				// The holder dies: no release.
				if !sessions {
					died := h.Now()
					h.Add(hist.Op{Client: cc.name, Key: key, Kind: hist.Abandon, Token: l.Token(), Fence: l.Fence(), Start: died, End: died})
					h.AddProbe(probe(ctx, admins, h, l, ttl, died, lastTouch))
					continue
				}
				// A session lock lives as long as its Client renews the
				// session: the holder's death is its process's. From the
				// cut on, nothing of it lands, so the session ends a TTL
				// after its last renewal landed, by the cut.
				cc.die()
				died := h.Now()
				h.Add(hist.Op{Client: cc.name, Key: key, Kind: hist.Abandon, Token: l.Token(), Start: died, End: died})
				h.Add(hist.Op{Client: cc.name, Kind: hist.Crash, Start: died, End: died})
				h.AddProbe(probe(ctx, admins, h, l, ttl, died, died))
				n := deaths.Add(1)
				next, err := newClient(fmt.Sprintf("c%02d-%d", k, n))
				if err != nil {
					t.Errorf("replacing dead client %s: %v", cc.name, err)
					return
				}
				all.Lock()
				all.list = append(all.list, next)
				all.Unlock()
				if err := next.warm(ctx); err != nil && ctx.Err() == nil {
					t.Logf("%s (replacing %s): %v", next.name, cc.name, err)
				}
				f.replace(k, next)
				cc = next
			}
		})
	}

	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); f.run() }()

	begin := time.Now()
	tick := time.NewTicker(progressEvery)
	var last hist.Stats
	for time.Since(begin) < dur {
		<-tick.C
		st := h.Stats()
		active, counts := f.status()
		as := audit.Stats()
		t.Logf("chaos %4.0fs: %d ops, %d acquisitions, %d sections, %d audited changes, %d deadlines read; %s; active: %s; node answers in failed attempts: %s",
			time.Since(begin).Seconds(), st.Ops, st.Acquired, st.Sections, as.Checked, st.Leases, faultSummary(counts), strings.Join(active, "; "), why.take())
		if st.Acquired == last.Acquired && st.Ops > last.Ops {
			t.Logf("chaos: no acquisition in the last %v; last failure: %s", progressEvery, why.lastErr())
		}
		last = st
	}
	tick.Stop()

	cancel()
	wg.Wait()
	close(f.stop)
	<-faultsDone
	// Close every client, the dead ones too (cut off, they release
	// nothing), at once: each may wait for its clean-up.
	for _, cc := range all.list {
		wg.Go(func() { cc.close(t) })
	}
	wg.Wait()
	scanLeftovers(t, admins, h)
	for _, key := range keys {
		v, err := res.cl.Get(context.Background(), counterKey(key)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("reading counter %s: %v", key, err)
		}
		h.SetCounter(key, v)
	}
	stopAudit()

	start := time.Now()
	horizon, recheck := recheckBounds(ttl, nodeTimeout, sessions)
	r := hist.Check(h, hist.Config{Nodes: nodes, NodeTimeout: nodeTimeout, Cleanup: cleanupBound(ttl, nodeTimeout), Horizon: horizon, Recheck: recheck, Fencing: !sessions, Replies: true, Audit: audit})
	_, counts := f.status()
	t.Logf("checked in %v:\n%s", time.Since(start).Round(time.Millisecond), r)
	for _, v := range r.Violations {
		t.Errorf("%s", v)
	}
	t.Logf("chaos summary (max %d faults at once; %d bytes delivered late; go-redis logged %d failed dials; %d clients died)", f.maxFaults, f.lateBytes, quiet.n.Load(), deaths.Load())
	t.Logf("acquire calls that won: %s", durations(lat.get(true)))
	t.Logf("acquire calls that failed: %s; their last rounds' node answers: %s", durations(lat.get(false)), why.all())
	scenario := fmt.Sprintf("mixed: %d clients, %d keys, %v", nclients, len(keys), dur)
	if sessions {
		scenario = fmt.Sprintf("sessions: %d clients, %d keys, %v", nclients, len(keys), dur)
	}
	t.Logf("| scenario | faults | properties checked | operations | violations |")
	t.Logf("| %s | %s | %s | %s | %s |", scenario, faultSummary(counts),
		checkedList(r), fmt.Sprintf("%d (%d acquisitions, %d failed attempts, %d extends, %d releases, %d deaths, %d sections)", r.Ops, r.Acquired, r.FailedAcquires, r.Extends, r.Releases, r.Abandoned, r.Sections),
		violationList(r))
	if r.Checked[hist.S3] == 0 {
		t.Errorf("the MONITOR audit checked no change: S3 was not verified")
	}
	// Liveness is not asserted (a loaded machine can stall every client for
	// a while: each timed-out call costs a new connection), but a run with
	// almost nothing to check proves nothing.
	if r.Acquired < 10 {
		t.Errorf("only %d acquisitions in %v: the scenario did not exercise the lock", r.Acquired, dur)
	}
	if sessions {
		st := h.Stats()
		t.Logf("session locks: %d deadlines read and checked against %d recorded node replies", st.Leases, st.Replies)
		if st.Leases == 0 {
			t.Errorf("no session lock deadline was recorded: the clients' locks were not session locks")
		}
	}
}

// tally counts, over failed acquire calls, what each node answered in the
// last round (from the *redlock.QuorumError), to tell contention from
// timeouts, errors and restart-guard refusals in the progress lines.
type tally struct {
	mu    sync.Mutex
	delta map[string]int
	total map[string]int
	last  string
}

func newTally() *tally { return &tally{delta: map[string]int{}, total: map[string]int{}} }

func (t *tally) add(err error) {
	var qe *redlock.QuorumError
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = err.Error()
	if !errors.As(err, &qe) {
		t.delta["no round"]++
		t.total["no round"]++
		return
	}
	for _, n := range qe.Nodes {
		k := n.Outcome.String()
		if errors.Is(n.Err, pool.ErrRestarted) {
			k = "restart guard"
		}
		t.delta[k]++
		t.total[k]++
	}
}

// format lists m's counts, largest first.
func format(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return m[b] - m[a] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// take returns the counts since the last call.
func (t *tally) take() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := format(t.delta)
	clear(t.delta)
	return s
}

func (t *tally) all() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return format(t.total)
}

func (t *tally) lastErr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// latencies collects call durations from many goroutines.
type latencies struct {
	mu       sync.Mutex
	won, not []time.Duration
}

func (l *latencies) add(won bool, d time.Duration) {
	l.mu.Lock()
	if won {
		l.won = append(l.won, d)
	} else {
		l.not = append(l.not, d)
	}
	l.mu.Unlock()
}

func (l *latencies) get(won bool) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if won {
		return slices.Clone(l.won)
	}
	return slices.Clone(l.not)
}

// countingLogger counts go-redis' log lines instead of printing them.
type countingLogger struct{ n atomic.Int64 }

func (l *countingLogger) Printf(context.Context, string, ...any) { l.n.Add(1) }

// stderrLogger prints like go-redis' default logger.
type stderrLogger struct{}

func (stderrLogger) Printf(_ context.Context, format string, v ...any) {
	_ = log.New(os.Stderr, "redis: ", log.LstdFlags|log.Lshortfile).Output(2, fmt.Sprintf(format, v...))
}

// checkedList names the properties checked, with their case counts.
func checkedList(r *hist.Report) string {
	var parts []string
	for _, p := range hist.Properties {
		if _, skipped := r.Skipped[p]; !skipped {
			parts = append(parts, fmt.Sprintf("%s (%d)", p, r.Checked[p]))
		}
	}
	return strings.Join(parts, ", ")
}

// violationList gives the number of violations, per property when any.
func violationList(r *hist.Report) string {
	if r.Total() == 0 {
		return "0"
	}
	var parts []string
	for _, p := range hist.Properties {
		if n := r.Count(p); n > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", p, n))
		}
	}
	return strings.Join(parts, ", ")
}
