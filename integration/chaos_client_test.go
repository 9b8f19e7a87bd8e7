package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// chaosClient is one independent client of the chaos runs: a lockClient
// through proxies of its own to the 5 nodes (so that faults can cut it off
// alone), whose pools record the nodes' yes-replies (RecordReplies) and
// whose lock calls rec records in h. It is driven by one goroutine at a
// time.
type chaosClient struct {
	*lockClient
	h       *hist.History
	rec     *hist.Recorder
	proxies []*testkit.Proxy

	// A session client (makeChaosClient with session) takes auto-extended locks with
	// the library's own tokens: it learns them from its pools (sent), and
	// watchers record the deadlines of its locks (leases).
	session bool
	sent    *hist.SentTokens
	leases  sync.WaitGroup
	dead    atomic.Bool // cut off from every node for good (die)

	sems map[string]*redlock.Semaphore // the run's semaphores (chaosSems), by name

	// raw are the node's Pools under the recording wrappers; a stall's
	// probe (chaos_stall_test.go) locks through probeCl, a Client over them.
	raw     []pool.Pool
	probeMu sync.Mutex
	probeCl *redlock.Client
	// lazyProbe: the probe Client is made, and checks the nodes'
	// identities, at the first stall's end (as a new Client then would),
	// not at warm-up.
	lazyProbe bool
}

// makeChaosClient makes a client through new proxies, with poolOpts and
// lockOpts; a t.Cleanup closes it (before the proxies, registered
// earlier). Its locks are fenced, with tokens from its token log, or with
// session true session locks: auto-extended, with the library's random
// tokens, no fencing. It returns an error rather than failing the test, so
// that a worker goroutine may call it.
func makeChaosClient(t *testing.T, c *cluster, h *hist.History, name string, ttl time.Duration, session bool, poolOpts []pool.Option, lockOpts ...redlock.Option) (*chaosClient, error) {
	return makeWrappedChaosClient(t, c, h, name, ttl, session, nil, poolOpts, lockOpts...)
}

// makeWrappedChaosClient is makeChaosClient with wrap, if not nil, around
// each node's recording Pool (the Client gets what wrap returns).
func makeWrappedChaosClient(t *testing.T, c *cluster, h *hist.History, name string, ttl time.Duration, session bool, wrap func(i int, p pool.Pool) (pool.Pool, error), poolOpts []pool.Option, lockOpts ...redlock.Option) (*chaosClient, error) {
	cc := &chaosClient{h: h, session: session, raw: make([]pool.Pool, c.Len())}
	proxies, viaProxy := c.proxyEach(t)
	cc.proxies = proxies
	o := clientOpts{pool: poolOpts, lock: []redlock.Option{redlock.WithTTL(ttl)}}
	recOpts := []hist.RecorderOption{hist.WithTTL(ttl)}
	if session {
		cc.sent = &hist.SentTokens{}
		o.libraryTokens = true
		o.lock = append(o.lock, redlock.WithAutoExtend(true))
		recOpts = append(recOpts, hist.WithTokens(cc.sent), hist.WithSessionKey(cc.sent.SessionKey))
	} else {
		o.lock = append(o.lock, redlock.WithFencing(true))
	}
	o.lock = append(o.lock, lockOpts...)
	o.wrap = func(i int, p pool.Pool) (pool.Pool, error) {
		cc.raw[i] = p
		rp, err := h.RecordReplies(name, i, p, cc.sent)
		if err != nil || wrap == nil {
			return rp, err
		}
		return wrap(i, rp)
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
	if err := cc.semaphores(); err != nil {
		return nil, err
	}
	return cc, nil
}

// shareRecorder gives cc a Recorder that many goroutines may share: one
// that does not read the Client's tokens. A Recorder given them
// (hist.WithTokens) takes every token made during an acquire call for one
// of its failed rounds (Op.Tried, judged by L2), which holds only while one
// goroutine at a time acquires: with several, a token another goroutine's
// call won would be judged a leftover. So the failed rounds of such a
// client are not judged by L2 (its released locks still are).
func (cc *chaosClient) shareRecorder(ttl time.Duration) {
	opts := []hist.RecorderOption{hist.WithTTL(ttl)}
	if cc.session {
		opts = append(opts, hist.WithSessionKey(cc.sent.SessionKey))
	}
	cc.rec = cc.h.Recorder(cc.name, cc.Client, opts...)
}

// close closes the Client (releasing what it still holds and joining its
// clean-up) and the pools; only the first call does anything. Release
// failures of Close are expected after faults and only logged. Closing
// ends every lock, so the lease watchers are joined after; the probe
// Client is closed before the pools too.
func (cc *chaosClient) close(t *testing.T) {
	cc.shutdown(t, func(err error) {
		if err != nil {
			t.Logf("%s: Close: %v", cc.name, err)
		}
		cc.closeProber()
		cc.leases.Wait()
	})
}

// warm makes the Client and, unless lazyProbe, its probe Client (prober)
// verify every node's identity, and the Pools set up their connections,
// with a generous node timeout; it is not recorded.
func (cc *chaosClient) warm(ctx context.Context) error {
	locks := []func(context.Context, string, ...redlock.Option) (*redlock.Lock, error){cc.Lock, cc.probeLock}
	if cc.lazyProbe {
		locks = locks[:1]
	}
	for _, lock := range locks {
		l, err := lock(ctx, "warm-"+cc.name, redlock.WithNodeTimeout(time.Second), redlock.WithMaxWait(10*time.Second))
		if err != nil {
			return fmt.Errorf("%s: warm-up: %w", cc.name, err)
		}
		if err := l.Release(ctx); err != nil {
			return fmt.Errorf("%s: warm-up release: %w", cc.name, err)
		}
	}
	// The connections a Pool sets up on its own a second after its first
	// answer: set up now, before any fault, not at the first stall's end.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second) // a node paused meanwhile
	defer cancel()
	for _, p := range cc.raw {
		_ = pool.Warm(wctx, p) // a node down: the commands that need one set it up
	}
	return nil
}

// probeLock is Lock on cc's probe Client (prober).
func (cc *chaosClient) probeLock(ctx context.Context, key string, opts ...redlock.Option) (*redlock.Lock, error) {
	cl, err := cc.prober()
	if err != nil {
		return nil, err
	}
	return cl.Lock(ctx, key, opts...)
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

// acquireShared is cc.acquire as a shared holder (unfenced: fences order
// writers); a session client's, which its own extends renew, is watched
// like its session locks (watch).
func (cc *chaosClient) acquireShared(ctx context.Context, key string, wait time.Duration) (*redlock.Lock, hist.Op, error) {
	l, op, err := cc.rec.Acquire(ctx, key, wait, redlock.Shared(), redlock.WithFencing(false))
	if err == nil && cc.session {
		cc.watch(l)
	}
	return l, op, err
}

// acquireAll is cc.rec.AcquireAll (TryLockAll with wait 0, else LockAll
// with WithMaxWait(wait)); a session client's lock of several keys, which
// its own extends renew, is watched like its session locks (watch).
func (cc *chaosClient) acquireAll(ctx context.Context, keys []string, wait time.Duration) (*redlock.Lock, hist.Op, error) {
	l, op, err := cc.rec.AcquireAll(ctx, keys, wait)
	if err == nil && cc.session {
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

// watch follows a session lock's deadline (or an auto-extended one's) until
// its Done closes, and
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
