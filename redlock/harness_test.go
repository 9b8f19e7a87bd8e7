package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/pool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testNode is one in-process Redis server with the fault-injecting pool the
// Client under test talks to.
type testNode struct {
	m     *miniredis.Miniredis
	rdb   *redis.Client
	fault *faultPool
}

type env struct {
	t     *testing.T
	nodes []*testNode
	pools []pool.Pool
}

// newEnv starts n miniredis servers, each behind a faultPool.
func newEnv(t *testing.T, n int) *env {
	t.Helper()
	e := &env{t: t}
	for i := range n {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		p, err := pool.New(rdb, pool.WithName(fmt.Sprintf("node%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		fp := &faultPool{Pool: p}
		e.nodes = append(e.nodes, &testNode{m: m, rdb: rdb, fault: fp})
		e.pools = append(e.pools, fp)
	}
	return e
}

// testNodeTimeout is the node timeout of test clients unless a test sets
// its own: in-process servers answer in microseconds, but under -race with
// other test binaries on 2 cores a call can take longer than the 50 ms
// default, and a test about something else must not fail for that.
var testNodeTimeout = WithNodeTimeout(time.Second)

// client returns a Client over the env's pools, closed at the end of the test.
func (e *env) client(opts ...Option) *Client {
	e.t.Helper()
	c, err := New(e.pools, append([]Option{testNodeTimeout}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// rkey is the Redis key of lock key under the default prefix.
func rkey(key string) string { return DefaultKeyPrefix + "{" + key + "}" }

// value returns what node i stores under k ("" when absent).
func (e *env) value(i int, k string) string {
	v, err := e.nodes[i].m.Get(k)
	if err != nil {
		return ""
	}
	return v
}

// holders counts the nodes on which k holds token.
func (e *env) holders(k, token string) int {
	n := 0
	for i := range e.nodes {
		if e.value(i, k) == token {
			n++
		}
	}
	return n
}

// faultPool wraps a Pool and injects faults into its lock operations
// (Acquire, Extend, Release, Get). RunID is faulted only through runID/runIDErr.
type faultPool struct {
	pool.Pool

	mu       sync.Mutex
	err      error           // returned instead of running the call
	gate     *gate           // while non-nil, calls of the ops in gated pass through it
	gated    map[string]bool // ops that pass through the gate
	runID    *string         // overrides RunID's answer
	runIDErr error

	calls    atomic.Int64 // lock operations attempted
	inflight atomic.Int64 // lock operations under way
}

// gate holds calls back until it is opened; it stays open after that.
type gate struct {
	open     chan struct{}
	after    bool          // run the call first and hold back its reply
	entered  chan struct{} // closed when the first call reaches the gate
	returned chan struct{} // closed when the first call through the gate returns
	once     sync.Once
	in       sync.Once
}

// hold makes the given ops ("acquire", "extend", "release", "get") wait until
// open; with after set, they run first and hold back their reply.
func (f *faultPool) hold(after bool, ops ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate = &gate{open: make(chan struct{}), after: after, entered: make(chan struct{}), returned: make(chan struct{})}
	f.gated = map[string]bool{}
	for _, op := range ops {
		f.gated[op] = true
	}
}

// open lets held calls (and later ones) go on and returns a channel closed
// when the first call through the gate has returned.
func (f *faultPool) open() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.gate.open)
	return f.gate.returned
}

// entered returns a channel closed once a held call has reached the gate:
// a call a round started may reach its Pool after the round returned, and
// one that comes after setErr fails with that error instead.
func (f *faultPool) entered() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gate.entered
}

func (f *faultPool) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *faultPool) do(ctx context.Context, op string, call func() (bool, error)) (bool, error) {
	f.calls.Add(1)
	f.inflight.Add(1)
	defer f.inflight.Add(-1)
	f.mu.Lock()
	err, g := f.err, f.gate
	if !f.gated[op] {
		g = nil
	}
	f.mu.Unlock()
	if err != nil {
		return false, err
	}
	if g == nil {
		return call()
	}
	g.in.Do(func() { close(g.entered) })
	defer g.once.Do(func() { close(g.returned) })
	if g.after {
		ok, err := call()
		select {
		case <-g.open:
			return ok, err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	select {
	case <-g.open:
		return call()
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (f *faultPool) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return f.do(ctx, "acquire", func() (bool, error) { return f.Pool.Acquire(ctx, key, token, ttl) })
}

func (f *faultPool) AcquireFenced(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (uint64, error) {
	var n uint64
	_, err := f.do(ctx, "acquire", func() (bool, error) {
		var err error
		n, err = f.Pool.AcquireFenced(ctx, key, fenceKey, token, ttl)
		return n > 0, err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (f *faultPool) RaiseFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error) {
	return f.do(ctx, "raise", func() (bool, error) { return f.Pool.RaiseFence(ctx, key, fenceKey, token, fence) })
}

func (f *faultPool) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return f.do(ctx, "extend", func() (bool, error) { return f.Pool.Extend(ctx, key, token, ttl) })
}

func (f *faultPool) Release(ctx context.Context, key, token string) (bool, error) {
	return f.do(ctx, "release", func() (bool, error) { return f.Pool.Release(ctx, key, token) })
}

func (f *faultPool) Get(ctx context.Context, key string) (string, error) {
	var v string
	_, err := f.do(ctx, "get", func() (bool, error) {
		var err error
		v, err = f.Pool.Get(ctx, key)
		return false, err
	})
	return v, err
}

func (f *faultPool) RunID(ctx context.Context) (string, error) {
	f.mu.Lock()
	id, err := f.runID, f.runIDErr
	f.mu.Unlock()
	if err != nil {
		return "", err
	}
	if id != nil {
		return *id, nil
	}
	return f.Pool.RunID(ctx)
}

// errConnRefused stands for a node that cannot be reached: a failed dial,
// so the command was never written (no clean-up needed).
var errConnRefused = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}

// manualClock is an injected clock that moves only when told to.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
	// step is added after every reading, to model time passing during a round.
	step time.Duration
}

func newManualClock() *manualClock { return &manualClock{now: time.Unix(1_700_000_000, 0)} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// setStep sets the time every later reading adds; stragglers of an earlier
// round may read the clock at any time, so it takes the lock too.
func (c *manualClock) setStep(d time.Duration) {
	c.mu.Lock()
	c.step = d
	c.mu.Unlock()
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// quorumErr asserts that err is a *QuorumError and returns it.
func quorumErr(t *testing.T, err error) *QuorumError {
	t.Helper()
	var qe *QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("error %v (%T) is not a *QuorumError", err, err)
	}
	return qe
}

func outcomes(qe *QuorumError) []Outcome {
	out := make([]Outcome, len(qe.Nodes))
	for i, r := range qe.Nodes {
		out[i] = r.Outcome
	}
	return out
}

// waitGone waits until no node holds k: operations return once their
// outcome is certain, and the remaining nodes follow shortly after.
func (e *env) waitGone(k string) { e.waitHolders(k, "", len(e.nodes)) }

// waitHolders waits until n nodes hold token under k (token "" counts
// nodes without k) while no lock operation is under way on any node, so
// that no straggler can change it afterwards.
func (e *env) waitHolders(k, token string, n int) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.busy() || e.holders(k, token) != n || e.busy() {
		if time.Now().After(deadline) {
			e.t.Fatalf("%q: %d nodes hold %q after 10s, want %d", k, e.holders(k, token), token, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// busy reports whether a lock operation is under way on some node.
func (e *env) busy() bool {
	for _, n := range e.nodes {
		if n.fault.inflight.Load() != 0 {
			return true
		}
	}
	return false
}

// verifyAll waits until every node of c is verified (identities): a
// Client's first operation goes on once a quorum is, and a test that needs
// every node asked waits for the others.
func verifyAll(t *testing.T, c *Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !c.ids.AllVerified() {
		if time.Now().After(deadline) {
			var why []error
			for i := range c.pools {
				why = append(why, c.ids.Why(i))
			}
			t.Fatalf("nodes not verified after 10s: %v", why)
		}
		_, _ = c.Locked(context.Background(), "verify-all") // each call may start a check
		time.Sleep(time.Millisecond)
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
