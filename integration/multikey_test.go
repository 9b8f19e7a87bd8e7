package integration

// Locks of several keys (Client.TryLockAll, LockAll, DoAll; redlock/multi.go
// and internal/scripts/*_all.lua) on real Redis, with commands that land
// late, nodes killed and paused, and contention under faults. TestLockAll
// runs them on one cluster (starting one takes seconds on a loaded machine),
// as subtests, the one that kills nodes last:
//
//	LateSetAfterFailedRound    late acquires of a failed round, after its roll-back
//	LateSetOutlivesRelease     late acquires of a won round, after its Release
//	LateExtendAfterRelease     a late extend, after Release and the next holder's acquire
//	AutoExtendThroughPause     auto-extension through a node paused longer than the TTL
//	OverlappingSetsUnderFaults overlapping sets and single keys: progress, one holder per key
//	NodesKilled                two of five killed: works; three: fails, leaves nothing
//
// Each uses keys of its own. Besides its property, every subtest checks the
// rule a lock of several keys adds: a node holds a set whole or not at all
// (read with one MGET, which runs between scripts, never inside one).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/redlock"
)

// multiLeftover is the leftover bound for a command of unknown fate that
// lands within the re-send horizon (docs/design.md, "The leftover bound",
// case 2): the background release is re-sent at least every second
// (maxRecheck in redlock/cleanup.go), and each send may take up to the
// clean-up budget (cleanupTimeout: 2 s for these node timeouts).
const multiLeftover = time.Second + 2*time.Second

// multiKeys returns the three keys of the set named name.
func multiKeys(name string) []string { return []string{name + "-x", name + "-y", name + "-z"} }

// multiTry is lc.TryLockAll, noting a won token in lc's token log as
// lc.TryLock does (tokens not noted count as failed rounds' in the checks of
// closeAndCheck).
func multiTry(ctx context.Context, lc *lockClient, keys []string, opts ...redlock.Option) (*redlock.Lock, error) {
	l, err := lc.TryLockAll(ctx, keys, opts...)
	lc.won(l, err)
	return l, err
}

// multiLock is lc.LockAll, noting a won token like multiTry.
func multiLock(ctx context.Context, lc *lockClient, keys []string, opts ...redlock.Option) (*redlock.Lock, error) {
	l, err := lc.LockAll(ctx, keys, opts...)
	lc.won(l, err)
	return l, err
}

// multiValues returns the values of the lock keys of keys on the node of cl
// ("" where absent), read with one MGET: a script's writes are seen whole or
// not at all.
func multiValues(t *testing.T, cl *redis.Client, keys []string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rks := make([]string, len(keys))
	for i, k := range keys {
		rks[i] = rkey(k)
	}
	vs, err := cl.MGet(ctx, rks...).Result()
	if err != nil {
		t.Fatalf("MGET %v on %s: %v", rks, cl.Options().Addr, err)
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		if s, ok := v.(string); ok {
			out[i] = s
		}
	}
	return out
}

// multiHolders returns the nodes among admins (node numbers idx; nil: all)
// where some key of keys holds token, as "node<i>", and fails the test for
// every node where some but not all of them do: a node admits a set whole
// or not at all, and releases it whole.
func multiHolders(t *testing.T, admins []*redis.Client, idx []int, keys []string, token string) []string {
	t.Helper()
	if idx == nil {
		idx = all()
	}
	var out []string
	for _, i := range idx {
		vs := multiValues(t, admins[i], keys)
		n := 0
		for _, v := range vs {
			if v == token {
				n++
			}
		}
		switch {
		case n == 0:
		case n < len(keys):
			t.Errorf("node%d holds %d of the %d keys %v with the token %q (values %q): a node holds a set whole or not at all", i, n, len(keys), keys, token, vs)
			fallthrough
		default:
			out = append(out, fmt.Sprintf("node%d", i))
		}
	}
	return out
}

// multiWarm takes a lock of several keys with lc, extends, checks and
// releases it, and loads the scripts of a lock of several keys on every
// node: a late EVALSHA of them then runs, instead of failing with NOSCRIPT
// (which would make a late-landing test pass without testing anything).
// (The lock's own rounds need not reach every node: a round returns at its
// quorum, and an extend or check held back behind a node's acquire may
// never be sent there.)
func multiWarm(t *testing.T, ctx context.Context, lc *lockClient, admins []*redis.Client) {
	t.Helper()
	l, err := multiTry(ctx, lc, multiKeys("warm-all"), redlock.WithNodeTimeout(patient))
	if err != nil {
		t.Fatalf("%s: warm-up TryLockAll: %v", lc.name, err)
	}
	if err := l.Extend(ctx, 0); err != nil {
		t.Fatalf("%s: warm-up Extend: %v", lc.name, err)
	}
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Fatalf("%s: warm-up Held = %v, %v", lc.name, ok, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("%s: warm-up Release: %v", lc.name, err)
	}
	for i, cl := range admins {
		for _, s := range []*redis.Script{scripts.AcquireAll, scripts.ReleaseAll, scripts.ExtendMany, scripts.HeldAll} {
			if err := s.Load(ctx, cl).Err(); err != nil {
				t.Fatalf("node%d: SCRIPT LOAD: %v", i, err)
			}
		}
	}
}

// multiRig is the set-up TestLockAll's subtests share: a cluster (whose
// clean-up checks the keys' TTLs against lateTTL, the longest of any lock
// here) and a lateRig on it (made as newLateRig makes one: a proxied, with
// a node timeout of 100 ms, and b direct), with the scripts of a lock of
// several keys warmed up (multiWarm).
type multiRig struct {
	*lateRig
	c *cluster
}

func newMultiRig(t *testing.T) *multiRig {
	t.Helper()
	c := startCluster(t, lateTTL, "")
	r := &lateRig{ctx: ctxT(t, 3*time.Minute), admins: c.admins(t)}
	r.a, r.ps, r.drainers = c.proxied(t, r.ctx, "a", redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(lateNodeTimeout))
	r.b = c.warmClients(t, r.ctx, []redlock.Option{redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(patient)}, "b")[0]
	multiWarm(t, r.ctx, r.a, r.admins)
	return &multiRig{lateRig: r, c: c}
}

// TestLockAll runs the subtests above on one multiRig. a and b are closed,
// and their failed rounds checked on every node, before nodes are killed.
func TestLockAll(t *testing.T) {
	r := newMultiRig(t)
	t.Run("LateSetAfterFailedRound", r.lateSetAfterFailedRound)
	t.Run("LateSetOutlivesRelease", r.lateSetOutlivesRelease)
	t.Run("LateExtendAfterRelease", r.lateExtendAfterRelease)
	t.Run("AutoExtendThroughPause", r.autoExtendThroughPause)
	t.Run("OverlappingSetsUnderFaults", r.overlappingSetsUnderFaults)
	r.closeAndCheck(t)
	t.Run("NodesKilled", r.nodesKilled)
}

// multiDelayedTry is delayedTryLock for the set keys.
func (r *lateRig) multiDelayedTry(t *testing.T, keys []string, slow []int) (*lateDelayed, *redlock.Lock, error) {
	t.Helper()
	settle()
	d := r.delay(t, slow)
	l, err := multiTry(r.ctx, r.a, keys)
	return d, l, err
}

// multiFailedToken returns the one token of a's log that failed and is not
// in before.
func (r *lateRig) multiFailedToken(t *testing.T, before map[string]bool) string {
	t.Helper()
	for tok := range r.a.tokens.failed() {
		if !before[tok] {
			return tok
		}
	}
	t.Fatal("the failed round's token is not in a's token log")
	return ""
}

// multiGoneWithin waits until no node holds token on any key of keys,
// checking at every look that each node holds the set whole or not at all;
// it fails the test if the token is still somewhere multiLeftover after at.
func multiGoneWithin(t *testing.T, admins []*redis.Client, keys []string, token, what string, at time.Time) {
	t.Helper()
	for end := at.Add(multiLeftover); ; time.Sleep(20 * time.Millisecond) {
		left := multiHolders(t, admins, nil, keys, token)
		if len(left) == 0 {
			t.Logf("%s: gone from every node %v after the late commands landed", what, time.Since(at).Round(time.Millisecond))
			return
		}
		if time.Now().After(end) {
			t.Errorf("%v after the late commands landed (the leftover bound), %s is still on %s", multiLeftover, what, strings.Join(left, ", "))
			return
		}
	}
}

// multiBefore polls cond until it returns true, and reports whether it did
// before the time due.
func multiBefore(due time.Time, cond func() bool) bool {
	for {
		if cond() {
			return time.Now().Before(due)
		}
		if time.Now().After(due) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// multiTakesEach checks that lc acquires the set keys as one lock, and then
// each key alone, and releases each lock.
func multiTakesEach(t *testing.T, ctx context.Context, lc *lockClient, keys []string) {
	t.Helper()
	l, err := multiTry(ctx, lc, keys)
	if err != nil {
		t.Fatalf("%s: TryLockAll(%v): %v", lc.name, keys, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("%s: Release of %v: %v", lc.name, keys, err)
	}
	for _, k := range keys {
		l, err := lc.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("%s: TryLock(%q): %v", lc.name, k, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: Release of %q: %v", lc.name, k, err)
		}
	}
}

// LateSetAfterFailedRound (TestLockAll): the acquire commands of a failed
// TryLockAll round that land after its roll-back leave nothing of its token
// within the leftover bound, and never part of a set on a node.
//
// Slow majority: a's TryLockAll of {x,y,z} has its commands to nodes 0, 1
// and 2 delayed by the transient delay (400 ms, node timeout 100 ms): the
// two fast nodes take the set, the round fails with the slow nodes timing
// out and is rolled back. The delayed commands then land on the three
// nodes, where the keys are free: within the leftover bound after that, the
// token is gone from every key on every node, and b takes the set and each
// key.
//
// Taken on two: z is held by another token on nodes 3 and 4, and the
// commands to nodes 0 and 1 are delayed: node 2 takes the set, nodes 3 and
// 4 say "taken" (and must write none of x, y), nodes 0 and 1 time out. Their
// late commands land on free keys; the token must go as above, and the
// other token's z stays as it was.
//
// Mutations it catches (each checked): redlock's releaseUnsure passing nil
// keys (the background release of the late acquire then deletes nothing:
// "still on node0, node1, node2"); release_all.lua not deleting; and
// acquire_all.lua skipping its "taken" check (the second round wins).
func (r *multiRig) lateSetAfterFailedRound(t *testing.T) {
	t.Run("slow majority", func(t *testing.T) {
		slow := []int{0, 1, 2}
		lateAttempts(t, func(key string) bool {
			keys := multiKeys("failed-" + key)
			before := r.a.tokens.failed()
			delayed, _, err := r.multiDelayedTry(t, keys, slow)
			t.Logf("a.TryLockAll(%v) with nodes %v delayed: %v", keys, slow, err)
			checkFailedRound(t, err, slow, redlock.OutcomeTimeout)
			token := r.multiFailedToken(t, before)
			at := delayed.landed()
			t.Logf("the delayed acquires have landed; the failed token on the nodes: %v", multiHolders(t, r.admins, nil, keys, token))
			multiGoneWithin(t, r.admins, keys, token, "the failed round's token", at)
			multiTakesEach(t, r.ctx, r.b, keys)
			return true
		})
	})
	t.Run("taken on two", func(t *testing.T) {
		slow, taken := []int{0, 1}, []int{3, 4}
		lateAttempts(t, func(key string) bool {
			keys := multiKeys("taken-" + key)
			z := rkey(keys[2])
			for _, i := range taken {
				if err := r.admins[i].Set(r.ctx, z, "someone-else", lateTTL).Err(); err != nil {
					t.Fatal(err)
				}
			}
			before := r.a.tokens.failed()
			delayed, _, err := r.multiDelayedTry(t, keys, slow)
			t.Logf("a.TryLockAll(%v) with nodes %v delayed and %s taken on nodes %v: %v", keys, slow, keys[2], taken, err)
			qe := checkFailedRound(t, err, slow, redlock.OutcomeTimeout)
			for _, i := range taken { // (a loaded machine may miss the node timeout)
				if o := qe.Nodes[i].Outcome; o != redlock.OutcomeTaken && o != redlock.OutcomeTimeout {
					t.Errorf("node%d, where %s is taken: outcome %v, want taken", i, keys[2], o)
				}
			}
			token := r.multiFailedToken(t, before)
			at := delayed.landed()
			multiGoneWithin(t, r.admins, keys, token, "the failed round's token", at)
			for _, i := range taken {
				if vs := multiValues(t, r.admins[i], keys); vs[0] != "" || vs[1] != "" || vs[2] != "someone-else" {
					t.Errorf("node%d: the set's values %q; want x and y absent, z the other token's", i, vs)
				}
				if ms := pttl(t, r.admins[i], z); ms <= 0 || ms > lateTTL.Milliseconds() {
					t.Errorf("node%d: the other token's %s has PTTL %dms; want it untouched, in (0, %d]", i, z, ms, lateTTL.Milliseconds())
				}
			}
			// z is free on nodes 0, 1 and 2: b takes the set there.
			l, err := multiTry(r.ctx, r.b, keys)
			if err != nil {
				t.Fatalf("b: TryLockAll(%v) with %s taken on nodes %v only: %v", keys, keys[2], taken, err)
			}
			if err := l.Release(r.ctx); err != nil {
				t.Fatalf("b: Release: %v", err)
			}
			for _, i := range taken {
				r.admins[i].Del(r.ctx, z)
			}
			return true
		})
	})
}

// LateSetOutlivesRelease (TestLockAll): the acquire commands of a won
// TryLockAll that land after its Release do not keep the released token on
// their nodes beyond the leftover bound.
//
// a's TryLockAll of {x,y,z} has its commands to nodes 0 and 1 delayed by
// the transient delay: it wins on the three fast nodes, and the two slow
// calls time out (their fate unknown). 150 ms later a releases the lock
// (Release returns nil, nodes 0 and 1 finding nothing yet). Then the
// delayed commands land on nodes 0 and 1, where the keys are free, and take
// the whole set there. Within the leftover bound after that, the token must
// be gone from every key on every node, and b takes the set and each key.
//
// Mutations it catches (each checked): redlock's releaseUnsure passing nil
// keys (Release's re-sent release for a node of unknown fate deletes
// nothing: "still on node0, node1"), and release_all.lua not deleting.
func (r *multiRig) lateSetOutlivesRelease(t *testing.T) {
	slow := []int{0, 1}
	lateAttempts(t, func(key string) bool {
		keys := multiKeys("released-" + key)
		delayed, l, err := r.multiDelayedTry(t, keys, slow)
		if err != nil {
			t.Logf("premise: a.TryLockAll(%v) with nodes %v delayed: %v; want it to win on the three fast nodes", keys, slow, err)
			delayed.landed()
			return false
		}
		if h := multiHolders(t, r.admins, slow, keys, l.Token()); len(h) != 0 {
			t.Fatalf("%v hold the set right after TryLockAll returned: the commands were not delayed", h)
		}
		time.Sleep(150 * time.Millisecond)
		if err := l.Release(r.ctx); err != nil {
			t.Logf("premise: a.Release 150 ms after TryLockAll: %v", err)
			delayed.landed()
			return false
		}
		t.Logf("released; the token on the nodes: %v", multiHolders(t, r.admins, nil, keys, l.Token()))
		at := delayed.landed()
		t.Logf("the delayed acquires have landed; the token on the nodes: %v", multiHolders(t, r.admins, nil, keys, l.Token()))
		multiGoneWithin(t, r.admins, keys, l.Token(), "the released lock's token", at)
		multiTakesEach(t, r.ctx, r.b, keys)
		return true
	})
}

// LateExtendAfterRelease (TestLockAll): an extend of a lock of several keys
// that lands after the lock's Release, and after another holder took some
// of its keys, re-creates no key and leaves the other holder's keys alone.
//
// a holds {x,y,z} on every node. a.Extend(10 s) has its commands to nodes 0
// and 1 delayed by the transient delay: it succeeds on the three fast
// nodes. a releases the lock; b takes {x,y} with a TTL of 3 s, and z stays
// free. Then the delayed extends land on nodes 0 and 1 (the test checks
// that those nodes ran a script more). Afterwards a's token is on no key
// of any node, z exists nowhere, and x and y hold b's token everywhere with
// at most b's 3 s.
//
// Mutations it catches (each checked): extend_many.lua extending a key
// whatever token it holds (b's keys get a's 10 s), and extend_many.lua
// creating a missing key with the token (z appears on nodes 0 and 1).
func (r *multiRig) lateExtendAfterRelease(t *testing.T) {
	const bTTL = 3 * time.Second
	slow := []int{0, 1}
	lateAttempts(t, func(key string) bool {
		keys := multiKeys("extended-" + key)
		l, err := multiTry(r.ctx, r.a, keys)
		if err != nil {
			t.Logf("premise: a.TryLockAll(%v): %v", keys, err)
			return false
		}
		defer func() { _ = l.Release(r.ctx) }() // a broken premise
		settle()
		if h := multiHolders(t, r.admins, nil, keys, l.Token()); len(h) != nodes {
			t.Logf("premise: a's set is only on %v", h)
			return false
		}
		on := time.Now()
		delayed := r.delay(t, slow)
		if err := l.Extend(r.ctx, lateTTL); err != nil {
			t.Logf("premise: a.Extend(%v) with nodes %v delayed: %v; want it confirmed by the three fast nodes", lateTTL, slow, err)
			delayed.landed()
			return false
		}
		delayed.off()
		if err := l.Release(r.ctx); err != nil {
			t.Logf("premise: a.Release after the extend: %v", err)
			delayed.landed()
			return false
		}
		// Release returned at a quorum; the other nodes follow.
		due := on.Add(lateDelay) // the delayed extends land after it
		if !multiBefore(due, func() bool { return len(multiHolders(t, r.admins, nil, keys, l.Token())) == 0 }) {
			t.Logf("premise: a's set was not gone from every node before the delayed extends were due")
			delayed.landed()
			return false
		}
		lb, err := multiTry(r.ctx, r.b, keys[:2], redlock.WithTTL(bTTL))
		if err != nil {
			t.Logf("premise: b.TryLockAll(%v) after a's release: %v", keys[:2], err)
			delayed.landed()
			return false
		}
		defer func() { _ = lb.Release(r.ctx) }()
		calls := make([]int64, nodes)
		if !multiBefore(due, func() bool {
			for _, i := range slow {
				calls[i] = scriptCalls(t, r.admins[i])
			}
			return len(multiHolders(t, r.admins, nil, keys[:2], lb.Token())) == nodes
		}) {
			t.Logf("premise: b's keys were not on every node before the delayed extends were due")
			delayed.landed()
			return false
		}
		delayed.landed()
		for _, i := range slow {
			if n := scriptCalls(t, r.admins[i]); n == calls[i] {
				t.Logf("premise: node%d ran no script after b took the keys: the delayed extend did not land late", i)
				return false
			}
		}
		if h := multiHolders(t, r.admins, nil, keys, l.Token()); len(h) != 0 {
			t.Errorf("a's released token is back on %v after its late extend landed", h)
		}
		mustBeFree(t, r.admins, keys[2], "after a late extend of the released lock landed")
		for i, cl := range r.admins {
			for _, k := range keys[:2] {
				if v := get(t, cl, rkey(k)); v != lb.Token() {
					t.Errorf("node%d: %s = %q after a's late extend landed; want b's token %q", i, rkey(k), v, lb.Token())
				}
				if ms := pttl(t, cl, rkey(k)); ms > bTTL.Milliseconds() {
					t.Errorf("node%d: b's %s has PTTL %dms, above b's TTL %v: a's late extend lengthened another holder's key", i, rkey(k), ms, bTTL)
				}
			}
		}
		if ok, err := lb.Held(r.ctx); !ok || err != nil {
			t.Errorf("b: Held after a's late extend landed = %v, %v", ok, err)
		}
		t.Logf("a's extend landed on nodes %v after a's release and b's acquire of %v; b's keys on node0: PTTL %dms", slow, keys[:2], pttl(t, r.admins[0], rkey(keys[0])))
		return true
	})
}

// NodesKilled (TestLockAll): a lock of several keys needs a quorum of live
// nodes, nothing more. With nodes 1 and 3 killed, TryLockAll wins and every
// live node holds the whole set; Held, Extend and Release work, and the live
// nodes are free after the release. With node 0 killed too, TryLockAll fails
// with ErrNotAcquired naming the dead nodes, LockAll gives up within its
// wait budget, and the live nodes keep nothing of the failed rounds' tokens
// (the roll-back; checked within the leftover bound, and again after Close).
//
// Mutation it catches (checked): release_all.lua not deleting (the live
// nodes keep the released set, and the rolled-back one).
func (r *multiRig) nodesKilled(t *testing.T) {
	const (
		ttl         = 2 * time.Second
		nodeTimeout = 100 * time.Millisecond
	)
	c, admins, ctx := r.c, r.admins, ctxT(t, time.Minute)
	lc := c.newLockClient(t, "killed", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout))
	warm(t, ctx, lc)
	multiWarm(t, ctx, lc, admins)
	kill := func(idx ...int) {
		for _, i := range idx {
			if err := c.Node(i).Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}

	kill(1, 3)
	live := []int{0, 2, 4}
	keys := multiKeys("two-killed")
	// Every live node must answer each call: a node timeout that a loaded
	// machine does not miss.
	l, err := multiTry(ctx, lc, keys, redlock.WithNodeTimeout(patient))
	if err != nil {
		t.Fatalf("TryLockAll(%v) with nodes 1 and 3 killed: %v", keys, err)
	}
	for _, k := range keys {
		c.mustHoldAll(t, admins, live, k, l.Token(), 0, ttl.Milliseconds())
	}
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Fatalf("Held with nodes 1 and 3 killed = %v, %v", ok, err)
	}
	if err := l.Extend(ctx, 0); err != nil {
		t.Fatalf("Extend with nodes 1 and 3 killed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with nodes 1 and 3 killed: %v", err)
	}
	// Release returned once a quorum confirmed: all three live nodes.
	if h := multiHolders(t, admins, live, keys, l.Token()); len(h) != 0 {
		t.Errorf("the released set is still on %v", h)
	}

	kill(0)
	dead, live := []int{0, 1, 3}, []int{2, 4}
	keys = multiKeys("three-killed")
	before := lc.tokens.failed()
	_, err = multiTry(ctx, lc, keys)
	t.Logf("TryLockAll(%v) with nodes %v killed: %v", keys, dead, err)
	qe := checkFailedRound(t, err, dead, redlock.OutcomeError, redlock.OutcomeTimeout)
	if qe.Agreed() > len(live) {
		t.Errorf("%d nodes agreed, but only %d live: %v", qe.Agreed(), len(live), err)
	}
	start := time.Now()
	_, err = multiLock(ctx, lc, keys, redlock.WithMaxWait(300*time.Millisecond))
	t.Logf("LockAll(%v) with WithMaxWait(300ms) gave up after %v: %v", keys, time.Since(start).Round(time.Millisecond), err)
	checkFailedRound(t, err, dead, redlock.OutcomeError, redlock.OutcomeTimeout)
	failed := 0
	for tok := range lc.tokens.failed() {
		if before[tok] {
			continue
		}
		failed++
		eventually(t, multiLeftover, 10*time.Millisecond, "the failed round's token gone from the live nodes", func() bool {
			return len(multiHolders(t, admins, live, keys, tok)) == 0
		})
	}
	if failed < 2 {
		t.Errorf("%d failed rounds in the token log, want at least 2 (TryLockAll and LockAll's)", failed)
	}
	lc.closeAndCheck(t) // the failed tokens again, after Close joined its clean-up
}

// AutoExtendThroughPause (TestLockAll): an auto-extended lock of several
// keys outlives node 0 paused for longer than its TTL (4/3 of it).
// Throughout the pause, the lock stays held (Err nil) and every key holds
// its token on a quorum of the live nodes, each such copy expiring no
// earlier than the lock's deadline.
// After node 0 resumes, its copies (expired meanwhile) are not re-created by
// the extends queued in its socket or by later renewals, the lock is still
// held, and its Release frees every key on every node.
//
// Mutation it catches (checked): Lock.Extend sending only the first key of
// a lock of several keys (the other keys expire on every node after one
// TTL while the lock believes it is held).
func (r *multiRig) autoExtendThroughPause(t *testing.T) {
	const (
		ttl         = time.Second
		nodeTimeout = 250 * time.Millisecond // a renewal's quorum answers well within it, even on a loaded machine
		pause       = ttl + ttl/3            // longer than the TTL: node0's copies expire meanwhile
	)
	c, admins, ctx := r.c, r.admins, ctxT(t, time.Minute)
	lc := c.newLockClient(t, "auto", c.direct, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout))
	warm(t, ctx, lc)
	multiWarm(t, ctx, lc, admins)
	keys := multiKeys("paused")
	l, err := multiLock(ctx, lc, keys, redlock.WithAutoExtend(true))
	if err != nil {
		t.Fatalf("LockAll(%v): %v", keys, err)
	}
	eventually(t, 5*time.Second, 5*time.Millisecond, "the set on every node", func() bool {
		return len(multiHolders(t, admins, nil, keys, l.Token())) == nodes
	})

	pauseNodes(t, c, 0)
	live := []int{1, 2, 3, 4}
	looks := 0
	for end := time.Now().Add(pause); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		looks++
		if err := l.Err(); err != nil {
			t.Fatalf("%d looks into the pause of node0, the auto-extended lock was lost: %v", looks, err)
		}
		for _, k := range keys {
			var seen []string
			good := 0
			for _, i := range live {
				// The deadline is read first (a renewal only moves it
				// later); the copy expires at or before the PTTL's reply
				// plus the PTTL (plus 1 ms for Redis' rounding): a copy
				// that expires before the deadline even so is short. (The
				// machine is noisy: a round trip can take tens of ms.)
				d := l.Deadline()
				ms := pttl(t, admins[i], rkey(k))
				expiry := time.Now().Add(time.Duration(ms+1) * time.Millisecond)
				ours := get(t, admins[i], rkey(k)) == l.Token()
				seen = append(seen, fmt.Sprintf("node%d: expires %v before the deadline (ours: %v)", i, d.Sub(expiry).Round(time.Millisecond), ours))
				if ours && !expiry.Before(d) {
					good++
				}
			}
			if good < nodes/2+1 {
				t.Fatalf("%d looks into the pause of node0, only %d live nodes keep %s until the lock's deadline, fewer than a quorum: %s",
					looks, good, rkey(k), strings.Join(seen, ", "))
			}
		}
	}
	if err := c.Node(0).Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("node0 resumed after %v paused (%d looks); the lock's deadline is %v ahead", pause, looks, time.Until(l.Deadline()).Round(time.Millisecond))
	// Two renewals after the resumption, node0 still holds none of the
	// keys: they expired while it was paused, and an extend creates none.
	renewals, last := 0, l.Deadline()
	eventually(t, 10*ttl, 5*time.Millisecond, "two renewals after node0 resumed", func() bool {
		if d := l.Deadline(); d.After(last) {
			renewals, last = renewals+1, d
		}
		return renewals >= 2
	})
	if h := multiHolders(t, admins, []int{0}, keys, l.Token()); len(h) != 0 {
		t.Errorf("node0 holds the set again after it resumed: its copies expired while it was paused, and an extend must not re-create them")
	}
	if ok, err := l.Held(ctx); !ok || err != nil || l.Err() != nil {
		t.Fatalf("after node0 resumed: Held = %v, %v; Err %v", ok, err, l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !errors.Is(l.Err(), redlock.ErrReleased) {
		t.Errorf("Err after Release = %v, want ErrReleased", l.Err())
	}
	for _, k := range keys {
		eventuallyGone(t, admins, k)
	}
}

// multiSections records the critical sections of
// overlappingSetsUnderFaults: which were in one key at once, and whether
// each one's lock was still valid when it left (then it was valid
// throughout: a lock lost stays lost). Safe for concurrent use.
type multiSections struct {
	mu    sync.Mutex
	in    map[string]map[int]bool // per key: the sections in it now
	who   []string                // per section: the worker and its keys
	valid []bool                  // per section: its lock valid when it left
	pairs [][2]int                // sections in one key at once
}

// enter records that who entered a section over keys and returns its id.
func (s *multiSections) enter(who string, keys []string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := len(s.who)
	s.who = append(s.who, fmt.Sprintf("%s %v", who, keys))
	s.valid = append(s.valid, false)
	if s.in == nil {
		s.in = map[string]map[int]bool{}
	}
	for _, k := range keys {
		if s.in[k] == nil {
			s.in[k] = map[int]bool{}
		}
		for other := range s.in[k] {
			s.pairs = append(s.pairs, [2]int{other, id})
		}
		s.in[k][id] = true
	}
	return id
}

// leave records that the section id left keys.
func (s *multiSections) leave(id int, keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.in[k], id)
	}
}

// judge records whether the section id's lock was valid after it left.
func (s *multiSections) judge(id int, valid bool) {
	s.mu.Lock()
	s.valid[id] = valid
	s.mu.Unlock()
}

// report returns the overlaps of two sections whose locks were both valid
// throughout (a safety violation), and how many sections ran past their
// lock's validity (not a violation: the holder was told).
func (s *multiSections) report() (violations []string, pastValidity int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[[2]int]bool{} // a pair that shares two keys is recorded twice
	for _, p := range s.pairs {
		if s.valid[p[0]] && s.valid[p[1]] && !seen[p] {
			seen[p] = true
			violations = append(violations, fmt.Sprintf("%s and %s", s.who[p[0]], s.who[p[1]]))
		}
	}
	for _, v := range s.valid {
		if !v {
			pastValidity++
		}
	}
	return violations, pastValidity
}

// OverlappingSetsUnderFaults (TestLockAll): Clients contending for overlapping
// sets ({a,b}, {b,c}, {c,a} with DoAll, {a,b,c} with LockAll) and for single
// keys (Lock of a and of c), while node 4 is paused and resumed every 250 ms
// and the LockAll client's link to node 3 swings between no delay and a
// delay above the node timeout (commands land late), all make progress and
// never share a key.
//
// Every worker must complete its sections within a generous deadline (a
// minute; a worker that cannot finish is a deadlock or a starvation). Each
// section records, in-process, which other sections were in one of its keys
// at once, and whether its lock was still valid when it left (DoAll did not
// report ErrLockLost; Err nil and the deadline ahead for the others); two
// sections in one key at once whose locks were both valid throughout are
// two holders, and fail the test. Short TTLs with auto-extension keep the
// sections within their validity.
//
// Mutation it catches (checked): acquire_all.lua skipping its "taken"
// check (a set is taken over another holder's keys).
func (r *multiRig) overlappingSetsUnderFaults(t *testing.T) {
	const (
		ttl         = time.Second
		nodeTimeout = 100 * time.Millisecond
		rounds      = 12
		paused      = 4 // the node paused and resumed
		slowLink    = 3 // the LockAll client's delayed link
	)
	c, admins, ctx := r.c, r.admins, ctxT(t, time.Minute)
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout), redlock.WithRetryBackoff(time.Millisecond, 20*time.Millisecond)}
	type worker struct {
		name string
		keys []string
		run  func(ctx context.Context, fn func(valid func() bool)) error // one section
	}
	var workers []worker
	// The DoAll clients make their own tokens: DoAll does not show the
	// lock, so its tokens could not be noted as won.
	for _, set := range [][]string{{"ov-a", "ov-b"}, {"ov-b", "ov-c"}, {"ov-c", "ov-a"}} {
		name := "do-" + strings.Join(set, "")
		lc, err := c.dialClient(name, c.direct, clientOpts{libraryTokens: true, lock: opts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lc.closeAndCheck(t) })
		multiWarm(t, ctx, lc, admins)
		workers = append(workers, worker{name, set, func(ctx context.Context, fn func(valid func() bool)) error {
			return lc.DoAll(ctx, set, func(context.Context) error { fn(func() bool { return true }); return nil })
		}})
	}
	all3, ps, drainers := c.proxied(t, ctx, "lockall-abc", opts...)
	multiWarm(t, ctx, all3, admins)
	held := func(l *redlock.Lock) func() bool {
		return func() bool { return l.Err() == nil && time.Now().Before(l.Deadline()) }
	}
	workers = append(workers, worker{all3.name, []string{"ov-a", "ov-b", "ov-c"}, func(ctx context.Context, fn func(valid func() bool)) error {
		l, err := multiLock(ctx, all3, []string{"ov-a", "ov-b", "ov-c"}, redlock.WithAutoExtend(true))
		if err != nil {
			return err
		}
		fn(held(l))
		return l.Release(ctx)
	}})
	for _, k := range []string{"ov-a", "ov-c"} {
		lc := c.warmClients(t, ctx, opts, "lock-"+k)[0]
		workers = append(workers, worker{lc.name, []string{k}, func(ctx context.Context, fn func(valid func() bool)) error {
			l, err := lc.Lock(ctx, k, redlock.WithAutoExtend(true))
			if err != nil {
				return err
			}
			fn(held(l))
			return l.Release(ctx)
		}})
	}

	// The faults, until the workers are done.
	t.Cleanup(func() { _ = c.Node(paused).Resume() })
	stop := make(chan struct{})
	faults := make(chan error, 1)
	go func() {
		var err error
		defer func() { faults <- err }()
		for step := 0; ; step++ {
			switch {
			case step%2 == 0:
				err = c.Node(paused).Pause()
				ps[slowLink].SetLatency(3 * nodeTimeout / 2)
			default:
				err = c.Node(paused).Resume()
				ps[slowLink].SetLatency(0)
			}
			if err != nil {
				return
			}
			select {
			case <-stop:
				ps[slowLink].SetLatency(0)
				err = c.Node(paused).Resume()
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()

	var log multiSections
	var wg sync.WaitGroup
	lost := make([]int, len(workers))
	start := time.Now()
	for w, wk := range workers {
		wg.Go(func() {
			for done := 0; done < rounds; {
				id, valid := -1, false
				err := wk.run(ctx, func(still func() bool) {
					id = log.enter(wk.name, wk.keys)
					time.Sleep(2 * time.Millisecond)
					log.leave(id, wk.keys)
					valid = still()
				})
				// DoAll tells a lock lost while fn ran by its error.
				valid = valid && !errors.Is(err, redlock.ErrLockLost)
				switch {
				case id < 0:
					t.Errorf("%s: section %d of %d not entered within the deadline: %v", wk.name, done+1, rounds, err)
					return
				case !valid:
					log.judge(id, false)
					lost[w]++ // the section ran past its lock's validity: again
				default:
					log.judge(id, true)
					if err != nil { // a failed Release does not undo the section
						t.Logf("%s: section %d: %v", wk.name, done+1, err)
					}
					done++
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-faults; err != nil {
		t.Fatalf("pausing and resuming node%d: %v", paused, err)
	}
	t.Logf("%d workers completed %d sections each in %v under the faults; lost locks per worker: %v", len(workers), rounds, time.Since(start).Round(time.Millisecond), lost)
	violations, past := log.report()
	for _, v := range violations {
		t.Errorf("two holders of one key at once, both locks valid throughout: %s", v)
	}
	if past > 0 {
		t.Logf("%d sections ran past their lock's validity (not counted as overlaps)", past)
	}
	// What the LockAll client sent through its delayed link has landed, and
	// node 4 runs what its socket held: the failed rounds' re-sent
	// releases (and Close's last one) then find what those rounds left.
	drain(t, drainers, 10*time.Second)
	if err := admins[paused].Ping(ctx).Err(); err != nil {
		t.Fatalf("node%d after its last resumption: %v", paused, err)
	}
}
