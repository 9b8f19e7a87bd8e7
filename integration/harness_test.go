package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// nodes is the size of every test cluster.
const nodes = 5

// cluster is a redistest cluster plus what the checks need to reach it.
type cluster struct {
	*testkit.Cluster
	password string
	// poolOpts are added to every pool.Dial of newLockClient.
	poolOpts []pool.Option
}

// keepsData turns the pools' restart guard off for a test whose restarted
// servers keep their data: redistest runs them with appendfsync always, the
// one configuration under which a restarted server may count at once
// (docs/safety.md). The guard itself is tested in package pool and by the
// chaos control runs.
func (c *cluster) keepsData() { c.poolOpts = append(c.poolOpts, pool.WithRestartGuard(0)) }

// startCluster starts 5 real Redis servers and registers, to run after the
// test and every clean-up registered later (t.Cleanup is LIFO), the check
// that no lock key is left on a reachable node without a TTL or with a TTL
// longer than maxTTL, the longest TTL the test gives any lock.
func startCluster(t *testing.T, maxTTL time.Duration, password string, opts ...testkit.Option) *cluster {
	t.Helper()
	if password != "" {
		opts = append(opts, testkit.WithPassword(password))
	}
	c := &cluster{Cluster: testkit.Start(t, nodes, opts...), password: password}
	t.Cleanup(func() { c.checkKeyTTLs(t, maxTTL) })
	return c
}

// rkey is the Redis key of the lock named key under the default prefix
// (documented in redlock.WithKeyPrefix).
func rkey(key string) string { return redlock.DefaultKeyPrefix + "{" + key + "}" }

// admins returns a direct admin client per node (see admin).
func (c *cluster) admins(t *testing.T) []*redis.Client {
	out := make([]*redis.Client, c.Len())
	for i := range out {
		out[i] = c.admin(t, i)
	}
	return out
}

// admin returns a client connected directly to node i with the cluster's
// password, closed at the end of the test.
func (c *cluster) admin(t *testing.T, i int) *redis.Client {
	cl := testkit.NewClient(c.Node(i).Addr(), c.password)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// reachable calls fn with a direct client for every node that answers PING
// within a short bound; killed and paused nodes are skipped (and logged).
func (c *cluster) reachable(t *testing.T, what string, fn func(i int, cl *redis.Client)) {
	t.Helper()
	for i := range c.Len() {
		cl := testkit.NewClient(c.Node(i).Addr(), c.password)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := cl.Ping(ctx).Err()
		cancel()
		if err != nil {
			t.Logf("%s: node%d (%s) not reachable, skipped: %v", what, i, c.Node(i).Addr(), err)
		} else {
			fn(i, cl)
		}
		_ = cl.Close()
	}
}

// lockKeys returns every key with the lock prefix on the node but the
// sorted sets beside lock keys (lineKeys).
func lockKeys(t *testing.T, cl *redis.Client) []string {
	return prefixed(t, cl, false)
}

// lineKeys returns the sorted sets beside lock keys on the node: a lock
// key's name, 0x1f and q or x (lines of waiters; docs/design.md,
// "Hand-off") or r (shared holders; "Shared holders").
func lineKeys(t *testing.T, cl *redis.Client) []string {
	return prefixed(t, cl, true)
}

func prefixed(t *testing.T, cl *redis.Client, lines bool) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var keys []string
	iter := cl.Scan(ctx, 0, redlock.DefaultKeyPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		line := strings.HasSuffix(k, "\x1fq") || strings.HasSuffix(k, "\x1fx") || strings.HasSuffix(k, "\x1fg") || strings.HasSuffix(k, "\x1fr")
		if line == lines {
			keys = append(keys, k)
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("SCAN %s: %v", cl.Options().Addr, err)
	}
	return keys
}

// pttl returns PTTL of key on cl in milliseconds (-2 absent, -1 no TTL).
func pttl(t *testing.T, cl *redis.Client, key string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ms, err := cl.Do(ctx, "PTTL", key).Int64()
	if err != nil {
		t.Fatalf("PTTL %s on %s: %v", key, cl.Options().Addr, err)
	}
	return ms
}

// get returns the value of key on cl, "" when absent.
func get(t *testing.T, cl *redis.Client, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := cl.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s on %s: %v", key, cl.Options().Addr, err)
	}
	return v
}

// checkKeyTTLs fails the test if a reachable node holds a lock key that will
// not expire, or that lives longer than maxTTL (L1: a lock whose holder is
// gone is free again within its TTL). A session lock's key lives longer
// (its own TTL only collects it): the session key it names must then not
// outlive maxTTL, and the lock key its garbage-collection TTL (10 × its TTL).
// The sessions' incarnation sequence is a counter, like fencing's.
func (c *cluster) checkKeyTTLs(t *testing.T, maxTTL time.Duration) {
	t.Helper()
	c.reachable(t, "key TTL check", func(i int, cl *redis.Client) {
		for _, k := range lockKeys(t, cl) {
			if k == sessionSeq {
				continue
			}
			if sk, ok := sessionOf(k, get(t, cl, k)); ok {
				if ms := pttl(t, cl, sk); ms > maxTTL.Milliseconds() || ms == -1 {
					t.Errorf("node%d: session key %q of lock key %q has PTTL %dms, longer than the longest lock TTL of this test (%v)", i, sk, k, ms, maxTTL)
				}
				if ms := pttl(t, cl, k); ms > 10*maxTTL.Milliseconds() || ms == -1 {
					t.Errorf("node%d: session lock key %q has PTTL %dms, longer than 10 x the longest lock TTL of this test (%v)", i, k, ms, maxTTL)
				}
				continue
			}
			switch ms := pttl(t, cl, k); {
			case ms == -1:
				t.Errorf("node%d: lock key %q has no TTL: it would block its lock forever", i, k)
			case ms > maxTTL.Milliseconds():
				t.Errorf("node%d: lock key %q has PTTL %dms, longer than the longest lock TTL of this test (%v)", i, k, ms, maxTTL)
			}
		}
		for _, k := range lineKeys(t, cl) {
			if pttl(t, cl, k) == -1 {
				t.Errorf("node%d: sorted set %q beside a lock key has no TTL: it would stay forever", i, k)
			}
		}
	})
}

// checkNoTokens fails the test if a reachable node holds a lock key whose
// value is one of tokens (L2: after a failed acquire nothing of it remains).
func (c *cluster) checkNoTokens(t *testing.T, who string, tokens map[string]bool) {
	t.Helper()
	if len(tokens) == 0 {
		return
	}
	found := 0
	c.reachable(t, who+": failed-token check", func(i int, cl *redis.Client) {
		for _, k := range lockKeys(t, cl) {
			if v := get(t, cl, k); tokens[v] {
				found++
				t.Errorf("%s: node%d still holds %q = %q, the token of a FAILED acquisition (PTTL %dms)", who, i, k, v, pttl(t, cl, k))
			}
		}
		for _, k := range lineKeys(t, cl) {
			if !strings.HasSuffix(k, "\x1fr") {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			holders, err := cl.ZRange(ctx, k, 0, -1).Result()
			cancel()
			if err != nil {
				t.Errorf("%s: node%d: ZRANGE %q: %v", who, i, k, err)
			}
			for _, h := range holders {
				if tokens[h] {
					found++
					t.Errorf("%s: node%d still has %q among the shared holders %q, the token of a FAILED acquisition (PTTL %dms)", who, i, h, k, pttl(t, cl, k))
				}
			}
		}
	})
	t.Logf("%s: %d failed acquisitions, none left a key on a reachable node: %v", who, len(tokens), found == 0)
}

// tokenLog is a lockClient's token generator: a history.TokenLog (every
// token it made, in order) that also notes which tokens won a lock, so that
// the tokens of failed attempts are known (everything made minus everything
// that won). Safe for concurrent use.
type tokenLog struct {
	hist.TokenLog
	mu  sync.Mutex
	won map[string]bool
}

func newTokenLog(prefix string) *tokenLog {
	return &tokenLog{TokenLog: hist.TokenLog{Prefix: prefix}, won: map[string]bool{}}
}

// attempts is the number of tokens made: one per acquisition round.
func (g *tokenLog) attempts() int64 { return int64(g.Count()) }

func (g *tokenLog) markWon(tok string) {
	g.mu.Lock()
	g.won[tok] = true
	g.mu.Unlock()
}

func (g *tokenLog) failed() map[string]bool {
	made := g.Since(0)
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]bool, len(made)-len(g.won))
	for _, tok := range made {
		if !g.won[tok] {
			out[tok] = true
		}
	}
	return out
}

// lockClient is a redlock.Client over pools of its own, with a token log
// (unless the library makes its tokens). Its TryLock and Lock record the
// tokens that won. dialClient makes it (for newLockClient and the chaos
// clients alike); shutdown closes the Client (joining its late-reply
// clean-up) and then the pools; closeAndCheck (run by t.Cleanup for a client
// from newLockClient) also checks that no failed attempt left its token on a
// reachable node.
type lockClient struct {
	*redlock.Client
	name   string
	c      *cluster
	pools  []pool.Pool
	tokens *tokenLog // nil: the library makes the tokens
	once   sync.Once
}

// direct returns the options of a go-redis client connected straight to
// node i with the cluster's password.
func (c *cluster) direct(i int) *redis.Options {
	return &redis.Options{Addr: c.Node(i).Addr(), Password: c.password}
}

// newLockClient dials one pool per node with redisOpts(i) (see dialClient)
// and returns a Client over them with opts, a token log and closeAndCheck
// registered with t.Cleanup.
func (c *cluster) newLockClient(t *testing.T, name string, redisOpts func(i int) *redis.Options, opts ...redlock.Option) *lockClient {
	t.Helper()
	lc, err := c.dialClient(name, redisOpts, clientOpts{lock: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.closeAndCheck(t) })
	return lc
}

// clientOpts says how dialClient makes a lockClient.
type clientOpts struct {
	pool []pool.Option // after the cluster's poolOpts
	// wrap, if set, wraps node i's pool before the Client gets it; on an
	// error, dialClient closes p.
	wrap func(i int, p pool.Pool) (pool.Pool, error)
	// libraryTokens: no token log; the library makes the tokens.
	libraryTokens bool
	lock          []redlock.Option
}

// dialClient makes a lockClient through the kit's DialClient: one pool
// per node with redisOpts(i), named "node<i>", with the cluster's poolOpts
// and o.pool, wrapped by o.wrap, and a Client with o.lock (after the token
// log's generator). On an error it closes what it dialed. It registers no
// clean-up: the caller closes the client.
func (c *cluster) dialClient(name string, redisOpts func(i int) *redis.Options, o clientOpts) (*lockClient, error) {
	lc := &lockClient{name: name, c: c}
	lockOpts := o.lock
	if !o.libraryTokens {
		lc.tokens = newTokenLog(name)
		lockOpts = append([]redlock.Option{redlock.WithTokenGenerator(lc.tokens.Generate)}, lockOpts...)
	}
	cl, pools, err := c.DialClient(testkit.ClientOptions{
		Redis: func(i int, ro *redis.Options) { *ro = *redisOpts(i) },
		Pool:  slices.Concat(c.poolOpts, o.pool),
		Wrap:  o.wrap,
		Lock:  lockOpts,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	lc.Client, lc.pools = cl, pools
	return lc, nil
}

func (lc *lockClient) TryLock(ctx context.Context, key string, opts ...redlock.Option) (*redlock.Lock, error) {
	l, err := lc.Client.TryLock(ctx, key, opts...)
	lc.won(l, err)
	return l, err
}

func (lc *lockClient) Lock(ctx context.Context, key string, opts ...redlock.Option) (*redlock.Lock, error) {
	l, err := lc.Client.Lock(ctx, key, opts...)
	lc.won(l, err)
	return l, err
}

func (lc *lockClient) won(l *redlock.Lock, err error) {
	if err == nil && lc.tokens != nil {
		lc.tokens.markWon(l.Token())
	}
}

// shutdown closes the Client (unless the test did: ErrClosed is no error
// then), calls closed with Close's error, and closes the pools; only the
// first call does anything.
func (lc *lockClient) shutdown(t *testing.T, closed func(err error)) {
	lc.once.Do(func() {
		err := lc.Close()
		if errors.Is(err, redlock.ErrClosed) {
			err = nil
		}
		closed(err)
		lc.closePools(t)
	})
}

// closeAndCheck closes the Client (unless the test did), checks the failed
// tokens on the nodes reachable now, and closes the pools; only the first
// call does anything.
func (lc *lockClient) closeAndCheck(t *testing.T) {
	t.Helper()
	lc.shutdown(t, func(err error) {
		if err != nil {
			t.Errorf("%s: Close: %v", lc.name, err)
		}
		if lc.tokens != nil {
			lc.c.checkNoTokens(t, lc.name, lc.tokens.failed())
		}
	})
}

// closePools closes the pools; with t, it reports their errors.
func (lc *lockClient) closePools(t *testing.T) {
	for _, p := range lc.pools {
		if err := p.Close(); err != nil && t != nil {
			t.Errorf("%s: closing pool %s: %v", lc.name, p.Name(), err)
		}
	}
}

// ctxT returns a context that ends after d or at the end of the test.
func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every interval until it returns true, and fails the
// test if that does not happen within bound. It returns how long it took.
func eventually(t *testing.T, bound, interval time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			t.Fatalf("%s: not true within %v", what, bound)
		}
		time.Sleep(interval)
	}
}

// asQuorumError returns the *QuorumError in err or fails the test.
func asQuorumError(t *testing.T, err error) *redlock.QuorumError {
	t.Helper()
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("error %v (%T) carries no *redlock.QuorumError", err, err)
	}
	return qe
}

// mustHoldAll fails the test unless every node i in idx stores token under
// the lock key of key with a PTTL in (minMS, maxMS].
func (c *cluster) mustHoldAll(t *testing.T, admins []*redis.Client, idx []int, key, token string, minMS, maxMS int64) {
	t.Helper()
	for _, i := range idx {
		if v := get(t, admins[i], rkey(key)); v != token {
			t.Errorf("node%d: %s = %q, want the token %q", i, rkey(key), v, token)
			continue
		}
		if ms := pttl(t, admins[i], rkey(key)); ms <= minMS || ms > maxMS {
			t.Errorf("node%d: PTTL %s = %dms, want in (%d, %d]", i, rkey(key), ms, minMS, maxMS)
		}
	}
}

func all() []int { return []int{0, 1, 2, 3, 4} }

// durations summarises measured times as min/median/max.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("min %v / median %v / max %v over %d attempts", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]), len(s))
}

// checkFailedRound checks a failed acquisition's error: it matches
// ErrNotAcquired, carries a *QuorumError whose message names every node of
// bad with one of the outcomes in want, and no node in bad is reported OK.
func checkFailedRound(t *testing.T, err error, bad []int, want ...redlock.Outcome) *redlock.QuorumError {
	t.Helper()
	if err == nil {
		t.Fatal("acquisition succeeded, want a failure")
	}
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("error %v does not match ErrNotAcquired", err)
	}
	qe := asQuorumError(t, err)
	msg := err.Error()
	for _, i := range bad {
		name := fmt.Sprintf("node%d", i)
		if qe.Nodes[i].Node != name {
			t.Errorf("QuorumError.Nodes[%d].Node = %q, want %q", i, qe.Nodes[i].Node, name)
		}
		if !slices.Contains(want, qe.Nodes[i].Outcome) {
			t.Errorf("%s: outcome %v, want one of %v (error: %v)", name, qe.Nodes[i].Outcome, want, err)
		}
		if !strings.Contains(msg, name+" ") {
			t.Errorf("error message does not name %s: %s", name, msg)
		}
	}
	return qe
}

// checkDeadline checks the deadline of a lock that an acquisition call
// returned: the call started at start (read just before it) and returned at
// ret. The library anchors validity at T1, read just before its first
// request, so start ≤ T1 ≤ ret brackets the deadline:
//
//	start + TTL − allowance ≤ Deadline ≤ ret − minRound + TTL − allowance
//
// where minRound is a lower bound the test knows for the round's duration
// (0 if none), and Deadline > ret (validity left). It also compares the
// deadline with the servers: on every node in idx the key holds the token
// and expires no earlier than Deadline + allowance (within Redis' 1 ms
// precision), so the client stops believing in the lock before any of
// those copies can expire. With idx nil, the nodes are those that hold the
// token, and there must be a quorum of them: the call returned after a
// quorum had stored it.
func checkDeadline(t *testing.T, l *redlock.Lock, start, ret time.Time, ttl, minRound time.Duration, admins []*redis.Client, idx []int) {
	t.Helper()
	allowance := drift.Allowance(ttl, drift.DefaultFactor)
	d := l.Deadline()
	if !d.After(ret) {
		t.Errorf("%s: Deadline is %v before the call returned: no validity left", l.Key(), ret.Sub(d))
	}
	if lo := start.Add(ttl - allowance); d.Before(lo) {
		t.Errorf("%s: Deadline is %v after the call started, below TTL − allowance = %v", l.Key(), d.Sub(start), ttl-allowance)
	}
	if hi := ret.Add(-minRound).Add(ttl - allowance); d.After(hi) {
		t.Errorf("%s: Deadline is %v after the call returned (which took %v, the round at least %v): more than TTL − allowance − round = %v; the time spent was not deducted",
			l.Key(), d.Sub(ret), ret.Sub(start), minRound, ttl-allowance-minRound)
	}
	if idx == nil {
		for i, cl := range admins {
			if get(t, cl, rkey(l.Key())) == l.Token() {
				idx = append(idx, i)
			}
		}
		if len(idx) < nodes/2+1 {
			t.Errorf("%s: only nodes %v hold the token right after the call returned, fewer than a quorum", l.Key(), idx)
		}
	}
	for _, i := range idx {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v, err := admins[i].Get(ctx, rkey(l.Key())).Result()
		if err != nil || v != l.Token() {
			cancel()
			t.Errorf("node%d: %s = %q, %v; want the token %q", i, rkey(l.Key()), v, err, l.Token())
			continue
		}
		ms, err := admins[i].Do(ctx, "PTTL", rkey(l.Key())).Int64()
		q1 := time.Now()
		cancel()
		if err != nil || ms < 0 {
			t.Errorf("node%d: PTTL %s = %d, %v", i, rkey(l.Key()), ms, err)
			continue
		}
		// The key expires at or before q1 + ms (+1 ms for Redis' rounding).
		if expiry := q1.Add(time.Duration(ms+1) * time.Millisecond); d.Add(allowance).After(expiry.Add(time.Millisecond)) {
			t.Errorf("node%d: the key expires %v after the call returned, but Deadline + allowance is %v after it",
				i, expiry.Sub(ret), d.Add(allowance).Sub(ret))
		}
	}
}

// eventuallyGone waits until no node holds the lock key of key: Release
// returns once a quorum confirmed, the other nodes follow shortly.
func eventuallyGone(t *testing.T, admins []*redis.Client, key string) {
	t.Helper()
	eventuallyAll(t, admins, key, "")
}

// eventuallyAll waits until every node holds token under the lock key of
// key ("": no node holds it): a call returns at a quorum, and late replies
// land shortly after.
func eventuallyAll(t *testing.T, admins []*redis.Client, key, token string) {
	t.Helper()
	what := fmt.Sprintf("%s = %q on all nodes", rkey(key), token)
	if token == "" {
		what = "lock key " + rkey(key) + " gone from all nodes"
	}
	eventually(t, 5*time.Second, 5*time.Millisecond, what, func() bool {
		for _, cl := range admins {
			if get(t, cl, rkey(key)) != token {
				return false
			}
		}
		return true
	})
}
