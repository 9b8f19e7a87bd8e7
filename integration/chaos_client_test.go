package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// chaosClient is one independent client of the chaos runs: a lockClient
// through proxies of its own to the 5 nodes (so that faults can cut it off
// alone), whose pools record the nodes' yes-replies (recPool) and whose lock
// calls rec records in h. It is driven by one goroutine at a time.
type chaosClient struct {
	*lockClient
	h       *hist.History
	rec     *hist.Recorder
	proxies []*testkit.Proxy

	// A session client (makeChaosClient with session) takes auto-extended locks with
	// the library's own tokens: it learns them from its pools (sent), and
	// watchers record the deadlines of its locks (leases).
	session bool
	sent    *sentTokens
	leases  sync.WaitGroup
	dead    atomic.Bool // cut off from every node for good (die)
}

// makeChaosClient makes a client through new proxies, with poolOpts and
// lockOpts; a t.Cleanup closes it (before the proxies, registered
// earlier). Its locks are fenced, with tokens from its token log, or with
// session true session locks: auto-extended, with the library's random
// tokens, no fencing. It returns an error rather than failing the test, so
// that a worker goroutine may call it.
func makeChaosClient(t *testing.T, c *cluster, h *hist.History, name string, ttl time.Duration, session bool, poolOpts []pool.Option, lockOpts ...redlock.Option) (*chaosClient, error) {
	cc := &chaosClient{h: h, session: session}
	proxies, viaProxy := c.proxyEach(t)
	cc.proxies = proxies
	o := clientOpts{pool: poolOpts, lock: []redlock.Option{redlock.WithTTL(ttl)}}
	recOpts := []hist.RecorderOption{hist.WithTTL(ttl)}
	if session {
		cc.sent = &sentTokens{kinds: map[string]node.Kind{}}
		o.libraryTokens = true
		o.lock = append(o.lock, redlock.WithAutoExtend(true))
		recOpts = append(recOpts, hist.WithTokens(cc.sent), hist.WithSessionKey(cc.sessionKey))
	} else {
		o.lock = append(o.lock, redlock.WithFencing(true))
	}
	o.lock = append(o.lock, lockOpts...)
	o.wrap = func(i int, p pool.Pool) (pool.Pool, error) {
		if _, ok := p.(node.Sender); !ok {
			return nil, fmt.Errorf("pool.Dial returned a %T, which does not queue commands (node.Sender): recPool records only that path", p)
		}
		return &recPool{Pool: p, h: h, client: name, node: i, sent: cc.sent}, nil
	}
	// Small buffers: the lock scripts' replies are tiny, and with go-redis'
	// 32 KiB defaults the connections that every timed-out call replaces
	// dominate the test's allocations (and, on a loaded machine, its
	// garbage collection).
	lc, err := c.dialClient(name, func(i int) *redis.Options {
		ro := viaProxy(i)
		ro.ReadBufferSize, ro.WriteBufferSize = 4<<10, 4<<10
		return ro
	}, o)
	if err != nil {
		return nil, err
	}
	cc.lockClient = lc
	if !session {
		recOpts = append(recOpts, hist.WithTokens(lc.tokens))
	}
	cc.rec = h.Recorder(name, lc.Client, recOpts...)
	t.Cleanup(func() { cc.close(t) })
	return cc, nil
}

// close closes the Client (releasing what it still holds and joining its
// clean-up) and the pools; only the first call does anything. Release
// failures of Close are expected after faults and only logged. Closing
// ends every lock, so the lease watchers are joined after.
func (cc *chaosClient) close(t *testing.T) {
	cc.shutdown(t, func(err error) {
		if err != nil {
			t.Logf("%s: Close: %v", cc.name, err)
		}
		cc.leases.Wait()
	})
}

// warm makes the Client verify every node's identity and open connections,
// with a generous node timeout; it is not recorded.
func (cc *chaosClient) warm(ctx context.Context) error {
	l, err := cc.Lock(ctx, "warm-"+cc.name, redlock.WithNodeTimeout(time.Second), redlock.WithMaxWait(10*time.Second))
	if err != nil {
		return fmt.Errorf("%s: warm-up: %w", cc.name, err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("%s: warm-up release: %w", cc.name, err)
	}
	return nil
}

// acquire is cc.rec.Acquire (TryLock with wait 0, else Lock with
// WithMaxWait(wait)); a session lock it takes is watched (watch).
func (cc *chaosClient) acquire(ctx context.Context, key string, wait time.Duration) (*redlock.Lock, hist.Op, error) {
	l, op, err := cc.rec.Acquire(ctx, key, wait)
	if err == nil && op.Session != "" {
		cc.watch(l)
	}
	return l, op, err
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

// sessionKey returns the session key of l if it is a session lock (its
// acquire command was the session script), else "".
func (cc *chaosClient) sessionKey(l *redlock.Lock) string {
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
		cc.lease(l, d, false)
	}
	return d
}

func (cc *chaosClient) lease(l *redlock.Lock, d time.Time, done bool) {
	cc.h.AddLease(hist.Lease{Client: cc.name, Key: l.Key(), Token: l.Token(), At: cc.h.Now(), Deadline: cc.h.Since(d), Done: done})
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
				cc.lease(l, l.Deadline(), true)
				return
			case <-tick.C:
			}
			if d := l.Deadline(); !d.Equal(last) {
				last = d
				cc.lease(l, d, false)
			}
		}
	})
}

// sentTokens notes the tokens of the acquire commands a Client sends, in
// the order they are first sent, with the command's kind: the tokens of a
// Client that makes its own (a session's) are known this way. It is the
// hist.Tokens of a session client's Recorder. Safe for concurrent use.
type sentTokens struct {
	mu    sync.Mutex
	order []string
	kinds map[string]node.Kind
}

var _ hist.Tokens = (*sentTokens)(nil)

func (s *sentTokens) add(tok string, k node.Kind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.kinds[tok]; !ok {
		s.kinds[tok] = k
		s.order = append(s.order, tok)
	}
}

// Count returns how many tokens were sent.
func (s *sentTokens) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.order)
}

// Since returns the tokens sent after the first n, in order.
func (s *sentTokens) Since(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order[min(n, len(s.order)):])
}

// kind returns the kind of the acquire command tok was sent with.
func (s *sentTokens) kind(tok string) (node.Kind, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.kinds[tok]
	return k, ok
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

var _ node.Sender = (*recPool)(nil)

func (p *recPool) record(k hist.ReplyKind, key, token string, start time.Duration) {
	p.h.AddReply(hist.Reply{Client: p.client, Node: p.node, Kind: k, Key: key, Token: token, Start: start, End: p.h.Now()})
}

// recordIf records a yes to a synchronous call that started at start.
func (p *recPool) recordIf(yes bool, err error, k hist.ReplyKind, key, token string, start time.Duration) {
	if yes && err == nil {
		p.record(k, key, token, start)
	}
}

func (p *recPool) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	start := p.h.Now()
	ok, err := p.Pool.Acquire(ctx, key, token, ttl)
	p.recordIf(ok, err, hist.ReplyAcquire, key, token, start)
	return ok, err
}

func (p *recPool) AcquireFenced(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (uint64, error) {
	start := p.h.Now()
	n, err := p.Pool.AcquireFenced(ctx, key, fenceKey, token, ttl)
	p.recordIf(n > 0, err, hist.ReplyAcquire, key, token, start)
	return n, err
}

func (p *recPool) RaiseFence(ctx context.Context, key, fenceKey, token string, f uint64) (bool, error) {
	start := p.h.Now()
	ok, err := p.Pool.RaiseFence(ctx, key, fenceKey, token, f)
	p.recordIf(ok, err, hist.ReplyRaise, key, token, start)
	return ok, err
}

func (p *recPool) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	start := p.h.Now()
	ok, err := p.Pool.Extend(ctx, key, token, ttl)
	p.recordIf(ok, err, hist.ReplyExtend, key, token, start)
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
