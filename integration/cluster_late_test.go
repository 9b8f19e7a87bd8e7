package integration

// Late landings on Cluster pools: the first rule of the design brief (a
// command that timed out may still run later) where each node of the quorum
// is a whole Redis Cluster of three masters (pool.New over a
// *redis.ClusterClient), as TestClusterPools runs them. Client a reaches
// every cluster node through a fault proxy of its own; client b connects
// directly. In each scenario a's command to the master that owns the lock
// key's slot in cluster 0 is held in that master's proxy (a SET with every
// connection open, Hold(HoldOpen); an extend or a release with the one it
// is written on, HoldWrite) past a's node timeout, the lock changes hands,
// and then the held command is delivered and runs:
//
//	late SET, lock retaken      a won round's SET lands on b's key
//	late SET, lock released     a won round's SET lands on a key released meanwhile
//	late extend, lock retaken   a's extend lands on b's key
//	late release, lock retaken  a's release lands on b's key
//
// Each checks that b's copies keep b's token and TTL (neither shortened nor
// lengthened) and that a's token is gone from every cluster within 3 s of
// the landing, the bound of late_landing_test.go.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/redisproc"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

// clusterLateBTTL is the TTL of b's locks: shorter than a's lateTTL, so
// that a's late extend to lateTTL, were it applied to b's key, would show
// as a lengthened PTTL.
const clusterLateBTTL = 5 * time.Second

// clusterRig is the set-up of the cluster late-landing tests: three Redis
// Clusters, a direct Cluster client per cluster (admins), a's fault proxy
// per cluster node by the node's address, and the clients a (node timeout
// lateNodeTimeout, through the proxies) and b (direct), both warmed up.
type clusterRig struct {
	ctx     context.Context
	admins  []*redis.ClusterClient
	proxies map[string]*testkit.Proxy
	a, b    *redlock.Client
}

// TestClusterLateLandings runs the scenarios of the file comment over three
// Redis Clusters of three masters, each one Pool: a late command to one
// cluster's shard master never alters the next holder's key there, and
// never leaves a's token behind for longer than the late-landing bound.
func TestClusterLateLandings(t *testing.T) {
	clusters := redisproc.StartClusters(t, 3, 3)
	r := &clusterRig{ctx: ctxT(t, 90*time.Second), proxies: map[string]*testkit.Proxy{}}
	for _, ss := range clusters {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: ss.Addrs(), MaxRetries: -1})
		t.Cleanup(func() { _ = cc.Close() })
		r.admins = append(r.admins, cc)
		for _, addr := range ss.Addrs() {
			r.proxies[addr] = testkit.NewProxy(t, addr)
		}
	}
	r.a = clusterPoolsClient(t, clusters, func(o *redis.ClusterOptions) { o.Dialer = r.viaProxy },
		redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(lateNodeTimeout))
	r.b = clusterPoolsClient(t, clusters, func(*redis.ClusterOptions) {},
		redlock.WithTTL(clusterLateBTTL), redlock.WithNodeTimeout(patient))
	for _, c := range []*redlock.Client{r.a, r.b} {
		if !r.cycle(t, c, "warm-up") {
			t.Fatal("warm-up failed")
		}
	}
	for _, sc := range []struct {
		name, prefix string
		run          func(t *testing.T, key string) bool
	}{
		{"late SET, lock retaken", "set-retaken", r.lateSetRetaken},
		{"late SET, lock released", "set-released", r.lateSetReleased},
		{"late extend, lock retaken", "extend-retaken", r.lateExtendRetaken},
		{"late release, lock retaken", "release-retaken", r.lateReleaseRetaken},
	} {
		t.Run(sc.name, func(t *testing.T) {
			lateAttempts(t, func(key string) bool { return sc.run(t, sc.prefix+"/"+key) })
		})
	}
}

// viaProxy is a's Dialer: it reaches a cluster node, whose real address the
// Cluster client learnt from its seeds or CLUSTER SLOTS, through a's proxy.
func (r *clusterRig) viaProxy(ctx context.Context, network, addr string) (net.Conn, error) {
	p, ok := r.proxies[addr]
	if !ok {
		return nil, fmt.Errorf("no proxy for the cluster node %s", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, p.Addr())
}

// cycle takes key with c, extends and releases it, so that the masters of
// key's slot have c's connections open and every script loaded (a held
// EVALSHA of a script a master lacks would land as NOSCRIPT and do
// nothing), then waits until no reply is on its way (settle).
func (r *clusterRig) cycle(t *testing.T, c *redlock.Client, key string) bool {
	l, err := c.TryLock(r.ctx, key)
	if err == nil {
		err = l.Extend(r.ctx, lateTTL)
		if rerr := l.Release(r.ctx); err == nil {
			err = rerr
		}
	}
	if err != nil {
		t.Logf("premise: lock cycle of %q: %v", key, err)
		return false
	}
	settle()
	return true
}

// master returns a direct client of the master that owns key's slot in
// cluster c and a's proxy to it.
func (r *clusterRig) master(t *testing.T, c int, key string) (*redis.Client, *testkit.Proxy) {
	t.Helper()
	cl, err := r.admins[c].MasterForKey(r.ctx, rkey(key))
	if err != nil {
		t.Fatalf("cluster %d: the master of %s: %v", c, rkey(key), err)
	}
	return cl, r.proxies[cl.Options().Addr]
}

// lateSetRetaken: a wins key while its SET to cluster 0 is held; a
// releases, b takes the key on every cluster, and the held SET then lands
// on b's key. It must find the key taken (acquire.lua sets only a free
// key): b's copies keep their token and TTL, a's token is on no cluster.
func (r *clusterRig) lateSetRetaken(t *testing.T, key string) bool {
	la, m, p, ok := r.heldTryLock(t, key)
	defer p.Deliver()
	if !ok || !r.released(t, la) {
		return false
	}
	return r.retakeAndLand(t, key, la.Token(), m, p)
}

// released releases la, and says whether it did (a premise of the
// scenarios that release a's lock while a command of it is held).
func (r *clusterRig) released(t *testing.T, la *redlock.Lock) bool {
	if err := la.Release(r.ctx); err != nil {
		t.Logf("premise: a.Release: %v", err)
		return false
	}
	return true
}

// lateSetReleased: a wins key while its SET to cluster 0 is held and
// releases it; the held SET then lands on the free key and sets it. a must
// release it on the late reply: a's token is gone from every cluster
// within 3 s of the landing, not left for its 10 s TTL.
func (r *clusterRig) lateSetReleased(t *testing.T, key string) bool {
	la, m, p, ok := r.heldTryLock(t, key)
	defer p.Deliver()
	if !ok || !r.released(t, la) {
		return false
	}
	if v := get(t, m, rkey(key)); v != "" {
		t.Logf("premise: cluster 0 holds %q before the held SET lands; want the key free", v)
		return false
	}
	at := r.land(t, m, p)
	r.goneWithin(t, key, la.Token(), at)
	return true
}

// lateExtendRetaken: a holds key; its Extend(lateTTL) to cluster 0 is
// held (it succeeds on clusters 1 and 2); a releases, b takes the key with
// a 5 s TTL on every cluster, and the held extend then lands on b's key.
// It must leave it alone (extend.lua checks the token): a PEXPIRE there
// would lengthen b's TTL to 10 s.
func (r *clusterRig) lateExtendRetaken(t *testing.T, key string) bool {
	la, m, p, ok := r.takenThenHeld(t, key)
	if !ok {
		return false
	}
	defer p.Deliver()
	err := la.Extend(r.ctx, lateTTL)
	if err == nil && r.held(t, p) {
		err = la.Release(r.ctx)
	}
	if err != nil || !r.left(t, m, key, la.Token(), time.Second) {
		t.Logf("premise: a's extend held on cluster 0 and its release through: %v", err)
		_ = la.Release(r.ctx)
		return false
	}
	return r.retakeAndLand(t, key, la.Token(), m, p)
}

// lateReleaseRetaken: a holds key with a 600 ms TTL; its release to
// cluster 0 is held (it succeeds on clusters 1 and 2); a's copy there
// expires, b takes the key on every cluster, and the held release then
// lands on b's key. It must leave it alone (release.lua deletes only its
// own token).
func (r *clusterRig) lateReleaseRetaken(t *testing.T, key string) bool {
	const aTTL = 600 * time.Millisecond
	la, m, p, ok := r.takenThenHeld(t, key, redlock.WithTTL(aTTL))
	if !ok {
		return false
	}
	defer p.Deliver()
	if err := la.Release(r.ctx); err != nil || !r.held(t, p) {
		t.Logf("premise: a.Release with cluster 0 held: %v", err)
		return false
	}
	if !r.left(t, m, key, la.Token(), aTTL+time.Second) {
		return false
	}
	return r.retakeAndLand(t, key, la.Token(), m, p)
}

// heldTryLock warms key up (cycle), holds a's link to the master of key's
// slot in cluster 0, and calls a.TryLock(key); ok says whether a won with
// its SET to cluster 0 held (the premise of the late-SET scenarios).
func (r *clusterRig) heldTryLock(t *testing.T, key string) (la *redlock.Lock, m *redis.Client, p *testkit.Proxy, ok bool) {
	t.Helper()
	m, p = r.master(t, 0, key)
	if !r.cycle(t, r.a, key) {
		return nil, m, p, false
	}
	p.Hold(testkit.HoldOpen)
	la, err := r.a.TryLock(r.ctx, key)
	if err != nil {
		t.Logf("premise: a.TryLock(%q) with cluster 0 held: %v; want it won on clusters 1 and 2", key, err)
		return nil, m, p, false
	}
	if !r.held(t, p) {
		_ = la.Release(r.ctx)
		return nil, m, p, false
	}
	if v := get(t, m, rkey(key)); v != "" {
		t.Logf("premise: cluster 0 holds %q right after a's TryLock: its SET was not held", v)
		_ = la.Release(r.ctx)
		return nil, m, p, false
	}
	return la, m, p, true
}

// held waits up to a second for p to hold what a wrote (a round may return
// at its quorum before its command to the held node was read).
func (r *clusterRig) held(t *testing.T, p *testkit.Proxy) bool {
	t.Helper()
	if soon(time.Second, func() bool { return p.Held() > 0 }) {
		return true
	}
	t.Log("premise: nothing held: a's command went out on a connection opened after the hold")
	return false
}

// left waits up to bound for cluster 0's master m to no longer hold token
// under key's lock key (a's copy released or expired).
func (r *clusterRig) left(t *testing.T, m *redis.Client, key, token string, bound time.Duration) bool {
	t.Helper()
	if soon(bound, func() bool { return get(t, m, rkey(key)) != token }) {
		return true
	}
	t.Logf("premise: cluster 0 still holds a's token %v later", bound)
	return false
}

// soon polls cond every 5 ms until it holds or bound passes, and reports
// whether it held.
func soon(bound time.Duration, cond func() bool) bool {
	for end := time.Now().Add(bound); ; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// retakeAndLand has b take key, which a no longer holds, on every cluster;
// then it lands what a's proxy p to cluster 0's master m holds, and checks
// that b's copies are untouched, right after the landing and once a's
// follow-up commands have run, and that a's token (aToken) is gone from
// every cluster within 3 s. It returns false if b's TryLock missed a
// cluster (the premise).
func (r *clusterRig) retakeAndLand(t *testing.T, key, aToken string, m *redis.Client, p *testkit.Proxy) bool {
	t.Helper()
	lb, err := r.b.TryLock(r.ctx, key)
	if err != nil {
		t.Logf("premise: b.TryLock(%q) after a let go: %v", key, err)
		return false
	}
	defer func() {
		if err := lb.Release(r.ctx); err != nil {
			t.Errorf("b: Release: %v", err)
		}
	}()
	// b's TryLock returns at its quorum: its SET to the third cluster may
	// still be on its way.
	var before []keyCopy
	if !soon(time.Second, func() bool {
		before = r.copies(t, key)
		return !slices.ContainsFunc(before, func(kc keyCopy) bool { return kc.val != lb.Token() })
	}) {
		for c, kc := range before {
			if kc.val != lb.Token() {
				t.Logf("premise: cluster %d holds %q, not b's token, before the landing", c, kc.val)
			}
		}
		return false
	}
	at := r.land(t, m, p)
	r.untouched(t, key, before)
	r.goneWithin(t, key, aToken, at)
	settle() // what a sends once the late reply is in (a chained release) has run
	r.untouched(t, key, before)
	return true
}

// land delivers what p holds to m and waits until m has run it (one script
// call more), returning the time it had.
func (r *clusterRig) land(t *testing.T, m *redis.Client, p *testkit.Proxy) time.Time {
	t.Helper()
	calls := scriptCalls(t, m)
	if p.Deliver() == 0 {
		t.Fatal("nothing held was delivered")
	}
	eventually(t, 5*time.Second, 5*time.Millisecond, "the held command run on cluster 0", func() bool {
		return scriptCalls(t, m) > calls
	})
	return time.Now()
}

// keyCopy is one cluster's copy of a lock key: its value and PTTL (ms),
// read between from and to.
type keyCopy struct {
	val      string
	ms       int64
	from, to time.Time
}

func (k keyCopy) String() string { return fmt.Sprintf("%q PTTL %dms", k.val, k.ms) }

// copies reads the lock key of key on the master of its slot in every
// cluster, value and PTTL at one instant (MULTI).
func (r *clusterRig) copies(t *testing.T, key string) []keyCopy {
	t.Helper()
	out := make([]keyCopy, len(r.admins))
	for c := range out {
		m, _ := r.master(t, c, key)
		var val *redis.StringCmd
		var ms *redis.Cmd
		out[c].from = time.Now()
		_, err := m.TxPipelined(r.ctx, func(tx redis.Pipeliner) error {
			val, ms = tx.Get(r.ctx, rkey(key)), tx.Do(r.ctx, "PTTL", rkey(key))
			return nil
		})
		out[c].to = time.Now()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("cluster %d: GET and PTTL %s: %v", c, rkey(key), err)
		}
		out[c].val = val.Val()
		if out[c].ms, err = ms.Int64(); err != nil {
			t.Fatalf("cluster %d: PTTL %s: %v", c, rkey(key), err)
		}
	}
	return out
}

// untouched fails the test unless every cluster's copy of key still holds
// the value it held in before, and expires when it did: its PTTL has not
// grown (beyond Redis' 1 ms rounding) and has not shrunk by more than the
// time between the two reads.
func (r *clusterRig) untouched(t *testing.T, key string, before []keyCopy) {
	t.Helper()
	for c, now := range r.copies(t, key) {
		was := before[c]
		elapsed := now.to.Sub(was.from).Milliseconds()
		switch {
		case now.val != was.val:
			t.Errorf("cluster %d: the late command changed b's key: %v before, %v after", c, was, now)
		case now.ms > was.ms+1:
			t.Errorf("cluster %d: the late command lengthened b's key: %v before, %v after", c, was, now)
		case now.ms < was.ms-elapsed-2:
			t.Errorf("cluster %d: the late command shortened b's key: %v before, %v after, %d ms apart", c, was, now, elapsed)
		}
	}
}

// goneWithin fails the test unless token has left every cluster's copy of
// key within 3 s after at, the bound of late_landing_test.go.
func (r *clusterRig) goneWithin(t *testing.T, key, token string, at time.Time) {
	t.Helper()
	for end := at.Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var left []string
		for c, kc := range r.copies(t, key) {
			if kc.val == token {
				left = append(left, fmt.Sprintf("cluster %d (%v)", c, kc))
			}
		}
		if len(left) == 0 {
			t.Logf("a's token was gone from every cluster %v after the landing", time.Since(at).Round(time.Millisecond))
			return
		}
		if time.Now().After(end) {
			t.Errorf("3 s after the held command landed, a's token is still on %s", strings.Join(left, ", "))
			return
		}
	}
}

// takenThenHeld has a take key with opts (after a warm-up cycle on it),
// then holds the connection on which a next writes key to the master of
// key's slot in cluster 0: it returns a's lock, a direct client of that master and a's
// proxy to it, the hold on. ok is false when a could not take the key.
func (r *clusterRig) takenThenHeld(t *testing.T, key string, opts ...redlock.Option) (_ *redlock.Lock, _ *redis.Client, _ *testkit.Proxy, ok bool) {
	if !r.cycle(t, r.a, key) {
		return nil, nil, nil, false
	}
	la, err := r.a.TryLock(r.ctx, key, opts...)
	if err != nil {
		t.Logf("premise: a.TryLock(%q): %v", key, err)
		return nil, nil, nil, false
	}
	settle()
	m, p := r.master(t, 0, key)
	// Only the connection a's next command on key goes out on: a's
	// commands after it go on others, as they would past a stalled TCP
	// path. (Holding every connection open, HoldOpen, held whichever
	// pooled connection the release took too, for its 2 s clean-up bound.)
	p.HoldWrite(rkey(key))
	return la, m, p, true
}
