package integration

// The targeted scenarios of the chaos suite (issue 6): each puts the lock
// under one kind of fault, on 5 real Redis servers, and checks the safety
// properties of the design brief directly (S1 no overlapping holders, S2
// success only with a quorum and validity, S3 release and extend never
// touch another token, S4 increasing fencing tokens, S5 no lost update,
// L1/L2 nothing left behind). Scenarios that can share a cluster run as
// subtests of one test, each with its own clients and keys:
//
//	asymmetric partition            TestAsymmetricPartition
//	minority killed while held      TestNodeFaults/minority-killed-while-held
//	replies delayed past the TTL    TestSlowLinks/replies-delayed-past-TTL
//	holder paused past validity     TestStaleWriterRejected (fence_test.go), and
//	                                TestNodeFaults/late-commands-after-resume/frozen-link
//	stampede                        TestLiveNodes/stampede
//	paused majority                 TestNodeFaults/paused-majority (and TestPause)
//	late execution after unpause    TestNodeFaults/late-commands-after-resume
//	extend racing expiry            TestSlowLinks/extend-racing-expiry
//	release misuse                  TestLiveNodes/release-misuse (and TestOperations, TestExpiry)
//	script cache loss               TestLiveNodes/script-cache-loss (and TestScriptFlush)
//	error replies on 1-5 nodes      TestLiveNodes/error-replies (and TestACLWithoutScripts)
//	cancellation                    TestSlowLinks/cancellation
//
// The helpers they share live here.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

// patient is the node timeout of the clients (or calls) whose success is a
// scenario's premise rather than its subject: on the shared 2-core test
// machine, with -race and other Docker tests running, a live local node
// sometimes misses 100-200 ms. It costs nothing where a quorum answers
// quickly: rounds decide at the quorum. (TTLs must exceed it plus the drift
// allowance.)
const patient = 500 * time.Millisecond

// proxyEach starts one fault proxy per node, for one client (closed at the
// end of the test, after the clients registered later), and returns them
// with the redis options that reach node i through proxies[i].
func (c *cluster) proxyEach(t *testing.T) ([]*testkit.Proxy, func(i int) *redis.Options) {
	t.Helper()
	ps := make([]*testkit.Proxy, c.Len())
	for i := range ps {
		ps[i] = c.Node(i).Proxy(t)
	}
	return ps, func(i int) *redis.Options {
		return &redis.Options{Addr: ps[i].Addr(), Password: c.password}
	}
}

// proxied returns a client named name with opts whose links to the nodes
// pass through a fault proxy per node (ps, in node order; see proxyEach),
// warmed up (warm), and a ready drainer per proxy (see drain).
func (c *cluster) proxied(t *testing.T, ctx context.Context, name string, opts ...redlock.Option) (lc *lockClient, ps []*testkit.Proxy, drainers []*redis.Client) {
	t.Helper()
	ps, via := c.proxyEach(t)
	drainers = c.drainers(t, ps)
	lc = c.newLockClient(t, name, via, opts...)
	warm(t, ctx, lc)
	return lc, ps, drainers
}

// drainers returns one client per proxy, connected through it and ready
// (its connection set up and used once), for drain. Ready matters: a new
// connection's handshake would cross a delayed proxy several times.
func (c *cluster) drainers(t *testing.T, ps []*testkit.Proxy) []*redis.Client {
	t.Helper()
	out := make([]*redis.Client, len(ps))
	for i, p := range ps {
		out[i] = testkit.NewClient(p.Addr(), c.password)
		t.Cleanup(func() { _ = out[i].Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := out[i].Ping(ctx).Err()
		cancel()
		if err != nil {
			t.Fatalf("PING through the proxy of node%d: %v", i, err)
		}
	}
	return out
}

// drain returns once everything sent through the proxies of the drainers
// before the call has reached its node and been run there: it sends PING
// through each (on the drainer's ready connection) and waits for the
// answer. A proxy delays all data by the same latency, from the moment it
// read it, so the PING arrives after what was read before it, and Redis has
// run those commands by the time it answers. (Commands that a client
// abandoned at its timeout still arrive: the proxy delivers what it read
// before the connection closed.)
func drain(t *testing.T, drainers []*redis.Client, bound time.Duration) {
	t.Helper()
	var g errgroup.Group
	for i, cl := range drainers {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			if err := cl.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("PING through the proxy of node%d: %w", i, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// keyState is what every node stores under one Redis key at one moment.
type keyState struct {
	key    string
	vals   []string    // "" where absent
	pttls  []int64     // milliseconds; -2 where absent
	sentAt []time.Time // before the PTTL request was sent
}

// snapshot reads key (value, then PTTL) on every node.
func snapshot(t *testing.T, admins []*redis.Client, key string) keyState {
	t.Helper()
	s := keyState{key: key}
	for _, cl := range admins {
		s.vals = append(s.vals, get(t, cl, key))
		s.sentAt = append(s.sentAt, time.Now())
		s.pttls = append(s.pttls, pttl(t, cl, key))
	}
	return s
}

// checkIntact fails the test unless every node whose copy of the key held
// token in before still holds it, with the TTL it had then less the time
// passed: not raised (a foreign extend), not cut (a foreign PEXPIRE), not
// deleted (a foreign release), unless it may have expired meanwhile. It
// returns the nodes that held token. Other nodes may hold anything now.
func checkIntact(t *testing.T, admins []*redis.Client, before keyState, token, after string) []int {
	t.Helper()
	var held []int
	for i, cl := range admins {
		if before.vals[i] != token {
			continue
		}
		held = append(held, i)
		v := get(t, cl, before.key)
		ms := pttl(t, cl, before.key)
		recv := time.Now()
		// The key expired or lost PTTL at most as fast as time passed
		// (+2 ms: Redis reports whole milliseconds, rounded each time).
		passed := recv.Sub(before.sentAt[i]).Milliseconds() + 2
		switch {
		case v == "" && passed >= before.pttls[i]:
			// expired meanwhile: allowed
		case v != token:
			t.Errorf("%s: node%d: %s = %q, was %q: a foreign operation changed it", after, i, before.key, v, token)
		case ms > before.pttls[i]:
			t.Errorf("%s: node%d: %s has PTTL %dms, was %dms: a foreign extend raised it", after, i, before.key, ms, before.pttls[i])
		case ms < before.pttls[i]-passed:
			t.Errorf("%s: node%d: %s has PTTL %dms, was %dms %dms ago: a foreign operation cut it", after, i, before.key, ms, before.pttls[i], passed)
		}
	}
	return held
}

// getTTL returns the value of key on cl ("" when absent) and its PTTL in
// milliseconds (-2 absent, -1 no TTL), read atomically (MULTI), so that no
// command of another client can run between the two.
func getTTL(t *testing.T, cl *redis.Client, key string) (string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var v *redis.StringCmd
	var ms *redis.DurationCmd
	_, err := cl.TxPipelined(ctx, func(p redis.Pipeliner) error {
		v = p.Get(ctx, key)
		ms = p.PTTL(ctx, key)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("GET+PTTL %s on %s: %v", key, cl.Options().Addr, err)
	}
	d := ms.Val()
	if d < 0 { // go-redis passes -1 and -2 through as nanoseconds
		return v.Val(), int64(d)
	}
	return v.Val(), d.Milliseconds()
}

// tokensOn returns the nodes whose copy of key holds token.
func tokensOn(t *testing.T, admins []*redis.Client, key, token string) []int {
	t.Helper()
	var on []int
	for i, cl := range admins {
		if get(t, cl, key) == token {
			on = append(on, i)
		}
	}
	return on
}

// tokensIn returns the nodes whose copy of key holds one of tokens.
func tokensIn(t *testing.T, admins []*redis.Client, key string, tokens map[string]bool) []int {
	t.Helper()
	var on []int
	for i, cl := range admins {
		if tokens[get(t, cl, key)] {
			on = append(on, i)
		}
	}
	return on
}

// valuesOn returns, per value stored under key, the nodes that hold it.
func valuesOn(t *testing.T, admins []*redis.Client, key string) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for i, cl := range admins {
		if v := get(t, cl, key); v != "" {
			out[v] = append(out[v], i)
		}
	}
	return out
}

// soleHolder waits until the nodes hold no token of key but token, on a
// quorum at least, and returns those nodes. (A node whose copy of the
// previous holder's key had not expired yet when the winning round reached
// it said "taken" and stays empty: Redlock does not retry it.)
func soleHolder(t *testing.T, admins []*redis.Client, key, token string) []int {
	t.Helper()
	var on []int
	eventually(t, 2*time.Second, 5*time.Millisecond, "other tokens gone and "+token+" on a quorum", func() bool {
		on = on[:0]
		for i, cl := range admins {
			switch get(t, cl, rkey(key)) {
			case token:
				on = append(on, i)
			case "":
			default:
				return false
			}
		}
		return len(on) >= nodes/2+1
	})
	return on
}

// heldAndReleased fails the test unless who's lock l is still held (Held
// says so and an Extend succeeds), and releases it.
func heldAndReleased(t *testing.T, ctx context.Context, who string, l *redlock.Lock) {
	t.Helper()
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Fatalf("%s: Held = %v, %v; want true", who, ok, err)
	}
	if err := l.Extend(ctx, 0); err != nil {
		t.Fatalf("%s: Extend: %v", who, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("%s: Release: %v", who, err)
	}
}

// lockAsync calls lc.Lock(ctx, key, opts...) on a goroutine and delivers
// its result (a lockResult, api_test.go) on the channel it returns.
func lockAsync(ctx context.Context, lc *lockClient, key string, opts ...redlock.Option) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		l, err := lc.Lock(ctx, key, opts...)
		got <- lockResult{l, err, time.Now()}
	}()
	return got
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
