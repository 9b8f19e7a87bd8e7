package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestLiveNodes runs, on one cluster whose nodes all stay up, the scenarios
// that stress the lock without taking nodes away (each with its own clients
// and keys): a stampede on one key, misuse of release and extend, the
// servers' script caches flushed under contention, and error replies from
// one to five nodes.
func TestLiveNodes(t *testing.T) {
	c := startCluster(t, 5*time.Second, "")
	dropFenceCounters(t, c)
	t.Run("stampede", func(t *testing.T) { stampede(t, c) })
	t.Run("release-misuse", func(t *testing.T) { releaseMisuse(t, c) })
	t.Run("script-cache-loss", func(t *testing.T) { scriptCacheLoss(t, c) })
	t.Run("error-replies", func(t *testing.T) { errorReplies(t, c) })
}

// stampede: 50 goroutines on 5 Clients call Lock on one key at the same
// moment, each once. Every one of them gets the lock, and the history
// checker finds them holding it one at a time (S1, SEC) with deadlines
// within their bounds (S2), and the counter they increment under it (a
// non-atomic read-modify-write) at 50 (S5, LIN).
func stampede(t *testing.T, c *cluster) {
	const (
		ttl         = 2 * time.Second
		nodeTimeout = patient
		clients     = 5
		perClient   = 10
		key         = "stampede"
	)
	ctx := ctxT(t, 60*time.Second)
	lcs := c.warmClients(t, ctx, []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout)}, numbered("client", clients)...)
	h := history.New()
	counter := new(atomic.Int64)
	var (
		tl    workerTally
		wg    sync.WaitGroup
		ready sync.WaitGroup
		gate  = make(chan struct{})
	)
	for w := range clients * perClient {
		lc := lcs[w%clients]
		wk := newWorker(h, lc, fmt.Sprintf("goroutine%d/%s", w, lc.name), ttl, w, 0, -1)
		ready.Add(1)
		wg.Go(func() {
			ready.Done()
			<-gate
			// A release short of a quorum is legitimate only when a node
			// failed (a timeout on a loaded machine) where the lock
			// needed it: a lock won on exactly 3 nodes cannot confirm its
			// release on 3 without that one; its copy there is deleted in
			// the background or expires with the TTL.
			wk.turn(t, ctx, key, counter, time.Millisecond, &tl, releaseFailedByNode)
		})
	}
	ready.Wait()
	begin := time.Now()
	close(gate)
	wg.Wait()
	took := time.Since(begin)
	h.SetCounter(key, counter.Load())
	r := checkHistory(t, h, history.Config{NodeTimeout: nodeTimeout})
	if n := clients * perClient; tl.done() != n || r.Acquired != n || r.Checked[history.S5] != n || counter.Load() != int64(n) {
		t.Errorf("%d of %d goroutines got the lock (%d failed, %d acquisitions recorded, %d sections checked by S5); the guarded counter is %d",
			tl.done(), n, tl.failed.Load(), r.Acquired, r.Checked[history.S5], counter.Load())
	}
	var rounds int64
	for _, lc := range lcs {
		rounds += lc.tokens.attempts() - 2 // less the warm-up's
	}
	t.Logf("%d goroutines each got the lock once in %v, in %d acquisition rounds; %d releases short of a quorum (a node timed out)",
		clients*perClient, took.Round(time.Millisecond), rounds, tl.relFailed.Load())
}

// releaseMisuse covers the misuse of release and extend that the API tests
// do not: two Releases at once, a Release after the lock expired with
// nobody else holding it, the handle of a lock whose Client was closed (and
// whose key another client holds now), and copies of another holder on some
// nodes, which neither Extend nor Release of the lock may touch.
func releaseMisuse(t *testing.T, c *cluster) {
	opts := []redlock.Option{redlock.WithTTL(2 * time.Second), redlock.WithNodeTimeout(patient)}
	m := &misuseTest{c: c, ctx: ctxT(t, 30*time.Second), admins: c.admins(t), opts: opts}
	m.a = c.newLockClient(t, "a", c.direct, opts...)
	m.b = c.newLockClient(t, "b", c.direct, opts...)
	t.Run("concurrent-releases", m.concurrentReleases)
	t.Run("release-after-expiry", m.releaseAfterExpiry)
	t.Run("closed-client", m.closedClient)
	t.Run("foreign-copies", m.foreignCopies)
}

// misuseTest is what releaseMisuse's subtests share: two clients a and b
// with options opts.
type misuseTest struct {
	c      *cluster
	ctx    context.Context
	admins []*redis.Client
	opts   []redlock.Option
	a, b   *lockClient
}

// concurrentReleases: two Releases and an Extend of one lock at once, five
// times: one Release returns nil, the other ErrReleased, the Extend nil or
// ErrReleased; the key is gone and no later Extend brings it back.
func (m *misuseTest) concurrentReleases(t *testing.T) {
	ctx, admins, a := m.ctx, m.admins, m.a
	const key = "misuse-concurrent"
	for round := range 5 {
		l, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		errs := make([]error, 3)
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i := range errs {
			wg.Go(func() {
				<-gate
				if i == 2 {
					errs[i] = l.Extend(ctx, 0) // racing the releases
					return
				}
				errs[i] = l.Release(ctx)
			})
		}
		close(gate)
		wg.Wait()
		if nils := btoi(errs[0] == nil) + btoi(errs[1] == nil); nils != 1 ||
			!errors.Is(errs[0], redlock.ErrReleased) && !errors.Is(errs[1], redlock.ErrReleased) {
			t.Errorf("round %d: two concurrent Releases returned %v and %v; want one nil and one ErrReleased", round, errs[0], errs[1])
		}
		if errs[2] != nil && !errors.Is(errs[2], redlock.ErrReleased) {
			t.Errorf("round %d: Extend racing the releases = %v; want nil or ErrReleased", round, errs[2])
		}
		// Whatever the order, the key is gone, and no Extend brings
		// it back.
		eventuallyGone(t, admins, key)
		if err := l.Extend(ctx, 0); !errors.Is(err, redlock.ErrReleased) {
			t.Errorf("round %d: Extend after Release = %v, want ErrReleased", round, err)
		}
		for i, cl := range admins {
			if v := get(t, cl, rkey(key)); v != "" {
				t.Errorf("round %d: node%d holds %q after the releases", round, i, v)
			}
		}
	}
}

// releaseAfterExpiry: the Release of a lock that expired with nobody else
// holding it matches ErrNotHeld with no node confirming, a second one
// ErrReleased, and nothing is left on the nodes.
func (m *misuseTest) releaseAfterExpiry(t *testing.T) {
	ctx, admins, a := m.ctx, m.admins, m.a
	const key = "misuse-expired"
	l, err := a.TryLock(ctx, key, redlock.WithTTL(300*time.Millisecond), redlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	eventuallyGone(t, admins, key) // expired on the servers too
	err = l.Release(ctx)
	if !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("Release after expiry = %v, want ErrNotHeld", err)
	}
	if qe := asQuorumError(t, err); qe.Agreed() != 0 {
		t.Errorf("Release after expiry: %d nodes confirmed: %v", qe.Agreed(), err)
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrReleased) {
		t.Errorf("second Release = %v, want ErrReleased", err)
	}
	if err := l.Extend(ctx, 0); !errors.Is(err, redlock.ErrReleased) && !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("Extend after expiry and Release = %v, want ErrReleased or ErrLockLost", err)
	}
	for i, cl := range admins {
		if v := get(t, cl, rkey(key)); v != "" {
			t.Errorf("node%d holds %q after a Release of an expired lock", i, v)
		}
	}
}

// closedClient: the handle of a lock whose Client was closed (and whose
// key b holds now) can neither release nor extend anything of b's.
func (m *misuseTest) closedClient(t *testing.T) {
	ctx, admins, b, c, opts := m.ctx, m.admins, m.b, m.c, m.opts
	const key = "misuse-closed"
	x := c.newLockClient(t, "closing", c.direct, opts...)
	l, err := x.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatalf("Close with a held lock: %v", err)
	}
	lb, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after the holder's Client closed: %v", err)
	}
	eventuallyAll(t, admins, key, lb.Token())
	before := snapshot(t, admins, rkey(key))
	closed := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, redlock.ErrReleased) && !errors.Is(err, redlock.ErrClosed) {
			t.Errorf("%s of a lock of a closed Client = %v, want ErrReleased or ErrClosed", op, err)
		}
	}
	closed("Release", l.Release(ctx))
	closed("Extend", l.Extend(ctx, 0))
	if ok, err := l.Held(ctx); ok || (err != nil && !errors.Is(err, redlock.ErrClosed)) {
		t.Errorf("Held of a lock of a closed Client = %v, %v; want false", ok, err)
	}
	if on := checkIntact(t, admins, before, lb.Token(), "the closed Client's lock handle"); len(on) != nodes {
		t.Errorf("b's token was on nodes %v, want all", on)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// foreignCopies: the lock's copies on nodes 3 and 4 are replaced by another
// token, as if they had expired there and another client had taken them (a
// minority: it does not hold the lock). The lock still holds a quorum; its
// Extend and Release must leave the other copies exactly as they are.
func (m *misuseTest) foreignCopies(t *testing.T) {
	ctx, admins, a := m.ctx, m.admins, m.a
	const key = "misuse-foreign"
	rk := rkey(key)
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	eventuallyAll(t, admins, key, l.Token())
	const foreign = "another-holder"
	for _, i := range []int{3, 4} {
		if err := admins[i].Set(ctx, rk, foreign, 4*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, i := range []int{3, 4} {
			_ = admins[i].Del(context.Background(), rk).Err()
		}
	})
	before := snapshot(t, admins, rk)
	if err := l.Extend(ctx, 0); err != nil {
		t.Fatalf("Extend with the token on 3 nodes: %v", err)
	}
	checkIntact(t, admins, before, foreign, "Extend")
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Fatalf("Held with the token on 3 nodes = %v, %v", ok, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with the token on 3 nodes: %v", err)
	}
	if on := checkIntact(t, admins, before, foreign, "Release"); !slices.Equal(on, []int{3, 4}) {
		t.Errorf("the foreign token was on nodes %v, want [3 4]", on)
	}
	if on := tokensOn(t, admins, rk, l.Token()); len(on) != 0 {
		t.Errorf("the released token is still on nodes %v", on)
	}
}

// scriptCacheLoss: 4 goroutines on 2 Clients take one key with fencing (so
// that the acquisition itself is a script), extend and release it, while
// SCRIPT FLUSH (SYNC and ASYNC) empties the script caches of random sets of
// nodes every few milliseconds. Every call on every node must succeed or
// say "taken" (no NOSCRIPT or other error reply leaks out of go-redis'
// EVALSHA-then-EVAL fallback), and the history checker finds the holders
// never overlapping (S1, SEC), their deadlines within bounds (S2), their
// fencing tokens increasing (S4), and the guarded counter losing nothing
// (S5, LIN). The servers' command statistics show that EVAL, which is only
// sent after a NOSCRIPT, ran.
func scriptCacheLoss(t *testing.T, c *cluster) {
	const (
		ttl         = 2 * time.Second
		nodeTimeout = 200 * time.Millisecond
		clients     = 2
		perClient   = 2
		want        = 30
		key         = "script-flush"
	)
	ctx := ctxT(t, 60*time.Second)
	admins := c.admins(t)
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout), redlock.WithFencing(true)}
	lcs := c.warmClients(t, ctx, opts, numbered("client", clients)...)
	for i, cl := range admins {
		if err := cl.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT node%d: %v", i, err)
		}
	}
	h := history.New()
	var (
		counter atomic.Int64
		done    atomic.Int64
		flushes atomic.Int64
		wg      sync.WaitGroup
	)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() { flushScripts(t, wctx, admins, &flushes) })
	for w := range clients * perClient {
		lc := lcs[w%clients]
		wk := newWorker(h, lc, fmt.Sprintf("worker%d/%s", w, lc.name), ttl, w, 11, 0)
		wg.Go(func() {
			for wctx.Err() == nil && done.Load() < want {
				if flushedTurn(t, wctx, wk, key, &counter) {
					done.Add(1)
				}
			}
		})
	}
	took := eventually(t, 40*time.Second, 10*time.Millisecond, "critical sections under SCRIPT FLUSH", func() bool {
		return done.Load() >= want
	})
	stop()
	wg.Wait()

	h.SetCounter(key, counter.Load())
	r := checkHistory(t, h, history.Config{NodeTimeout: nodeTimeout, Fencing: true})
	if n := int(done.Load()); r.Sections != n || r.Checked[history.S5] != n || r.Checked[history.S4] != r.Acquired-1 {
		t.Errorf("%d critical sections, but the report counts %d, S5 checked %d, S4 checked %d successive holders of %d",
			n, r.Sections, r.Checked[history.S5], r.Checked[history.S4], r.Acquired)
	}
	evals, evalshas := scriptStats(t, ctx, admins)
	if evals == 0 {
		t.Errorf("no EVAL ran on any node (%d EVALSHA): the fallback after NOSCRIPT was not exercised", evalshas)
	}
	t.Logf("%d critical sections in %v with %d SCRIPT FLUSHes; the nodes ran %d EVALSHA and %d EVAL (after NOSCRIPT)",
		done.Load(), took.Round(time.Millisecond), flushes.Load(), evalshas, evals)
}

// flushedTurn is one turn of scriptCacheLoss' worker wk: TryLock, Extend,
// the counted critical section and Release, none of them failing with an
// error reply. It reports whether the critical section ran.
func flushedTurn(t *testing.T, ctx context.Context, wk *lockWorker, key string, counter *atomic.Int64) bool {
	l, _, err := wk.acquire(ctx, key, 0)
	if err != nil {
		if ctx.Err() == nil {
			noErrorReplies(t, wk.name, "TryLock", err)
		}
		time.Sleep(time.Duration(2+wk.rng.IntN(8)) * time.Millisecond)
		return false
	}
	if err := wk.extend(ctx, l); err != nil && ctx.Err() == nil {
		noErrorReplies(t, wk.name, "Extend", err)
	}
	wk.increment(l, counter, 200*time.Microsecond)
	if err := wk.release(t, context.Background(), l); err != nil {
		noErrorReplies(t, wk.name, "Release", err)
	}
	return true
}

// noErrorReplies fails the test for an error reply (or any error but a
// timeout, which a loaded machine can cause) from a node.
func noErrorReplies(t *testing.T, who, op string, err error) {
	t.Helper()
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		t.Errorf("%s: %s: %v", who, op, err)
		return
	}
	for _, r := range qe.Nodes {
		if r.Outcome == redlock.OutcomeError {
			t.Errorf("%s: %s: %s failed: %v", who, op, r.Node, r.Err)
		}
	}
}

// flushScripts empties the script caches of random sets of nodes (SCRIPT
// FLUSH SYNC or ASYNC) every few milliseconds until ctx ends, counting the
// flushes.
func flushScripts(t *testing.T, ctx context.Context, admins []*redis.Client, flushes *atomic.Int64) {
	rng := rand.New(rand.NewPCG(10, 10))
	for ctx.Err() == nil {
		mode := []string{"SYNC", "ASYNC"}[rng.IntN(2)]
		for _, i := range rng.Perm(nodes)[:1+rng.IntN(nodes)] {
			if err := admins[i].Do(ctx, "SCRIPT", "FLUSH", mode).Err(); err != nil && ctx.Err() == nil {
				t.Errorf("SCRIPT FLUSH %s on node%d: %v", mode, i, err)
			}
			flushes.Add(1)
		}
		time.Sleep(time.Duration(2+rng.IntN(6)) * time.Millisecond)
	}
}

// scriptStats returns how many EVAL and EVALSHA calls the nodes ran in all.
func scriptStats(t *testing.T, ctx context.Context, admins []*redis.Client) (evals, evalshas int64) {
	t.Helper()
	for _, cl := range admins {
		info, err := cl.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		evals += statCalls(info, "cmdstat_eval:")
		evalshas += statCalls(info, "cmdstat_evalsha:")
	}
	return evals, evalshas
}

// statCalls returns the calls= figure of the INFO commandstats line that
// starts with prefix (0 if none).
func statCalls(info, prefix string) int64 {
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(strings.TrimSpace(rest), ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// refused checks a failed acquisition of a user that may not run SET on
// nodes 0..k-1, given how often each node's ACL log had counted a refused
// SET of that user before the call (before) and after it (after): enough
// of those nodes to make the failure certain report an error reply (not a
// transport error) that their ACL log counted during the call, the error
// names each of them, and no other node reports an error. Refusing nodes
// whose answer was not needed may still be pending. The reply's text is not
// checked: it differs between servers and versions (NOPERM for a plain SET;
// from inside a script, Redis 7.0's "can't run this command", Valkey 8's
// "ACL failure in script").
func refused(t *testing.T, what string, err error, k int, before, after []int64) {
	t.Helper()
	qe := checkFailedRound(t, err, nil)
	refusals := 0
	for i, r := range qe.Nodes {
		var reply redis.Error
		switch {
		case r.Outcome != redlock.OutcomeError:
		case i >= k:
			t.Errorf("%s: node%d, which allows SET, failed: %v", what, i, r.Err)
		case !errors.As(r.Err, &reply):
			t.Errorf("%s: node%d: error %v, want the server's error reply", what, i, r.Err)
		case after[i] <= before[i]:
			t.Errorf("%s: node%d: error %v, but its ACL log counted no refused SET during the call (%d before, %d after)",
				what, i, r.Err, before[i], after[i])
		case !strings.Contains(err.Error(), r.Node+" error"):
			t.Errorf("%s: the error does not name %s: %v", what, r.Node, err)
		default:
			refusals++
		}
	}
	if refusals < nodes-nodes/2 {
		t.Errorf("%s: %d nodes reported the refusal, too few to decide the round: %v", what, refusals, err)
	}
}

// setDenials returns, per node, how many refused SET commands of user its
// ACL log has counted (ACL LOG: the counts of the entries for that user and
// command, whatever the context, plain or script).
func setDenials(t *testing.T, ctx context.Context, admins []*redis.Client, user string) []int64 {
	t.Helper()
	out := make([]int64, len(admins))
	for i, cl := range admins {
		entries, err := cl.Do(ctx, "ACL", "LOG", "1000").Slice()
		if err != nil {
			t.Fatalf("ACL LOG on node%d: %v", i, err)
		}
		for _, e := range entries {
			f := aclLogFields(e)
			if f["username"] == user && f["object"] == "set" {
				n, ok := f["count"].(int64)
				if !ok {
					t.Fatalf("ACL LOG on node%d: entry %v has no integer count", i, e)
				}
				out[i] += n
			}
		}
	}
	return out
}

// aclLogFields returns the fields of an ACL LOG entry: a map in RESP3, a
// flat list of names and values in RESP2.
func aclLogFields(e any) map[string]any {
	f := map[string]any{}
	switch e := e.(type) {
	case map[any]any:
		for k, v := range e {
			f[fmt.Sprint(k)] = v
		}
	case []any:
		for j := 0; j+1 < len(e); j += 2 {
			f[fmt.Sprint(e[j])] = e[j+1]
		}
	}
	return f
}

// errorReplies connects, for k = 1..5, as a Redis user that may not run SET
// on the first k nodes (an ACL: every such command gets an error reply,
// plain or from inside the acquire script, and the node's ACL log counts
// it). With 1 or 2 such nodes,
// locks work on the others, with and without fencing; with 3 to 5,
// acquisition fails with a *QuorumError that names the refusing nodes and
// their error, and leaves nothing behind. Last, a user without pub/sub
// permissions releases: the release notification is refused, the release
// must still succeed.
func errorReplies(t *testing.T, c *cluster) {
	ctx := ctxT(t, 30*time.Second)
	admins := c.admins(t)
	for k := 1; k <= nodes; k++ {
		setRefused(t, ctx, c, admins, k)
	}
	releaseWithoutChannels(t, ctx, c, admins)
}

// aclClient creates the Redis user on every node (password "pw", every key,
// and rules(i) on node i), deleted at the end of the test, and returns a
// client that connects as it.
func aclClient(t *testing.T, ctx context.Context, c *cluster, admins []*redis.Client, user string, rules func(i int) []any) *lockClient {
	t.Helper()
	for i, cl := range admins {
		cmd := append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw", "~*"}, rules(i)...)
		if err := cl.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("ACL SETUSER %s on node%d: %v", user, i, err)
		}
	}
	t.Cleanup(func() {
		for _, cl := range admins {
			_ = cl.Do(context.Background(), "ACL", "DELUSER", user).Err()
		}
	})
	return c.newLockClient(t, user, func(i int) *redis.Options {
		return &redis.Options{Addr: c.Node(i).Addr(), Username: user, Password: "pw"}
	}, redlock.WithTTL(2*time.Second), redlock.WithNodeTimeout(patient))
}

// setRefused connects as a user that may not run SET on nodes 0..k-1. With
// fewer than a quorum of them, locks work on the others, with and without
// fencing; else acquisitions fail (refused) and leave nothing behind.
func setRefused(t *testing.T, ctx context.Context, c *cluster, admins []*redis.Client, k int) {
	t.Helper()
	user := fmt.Sprintf("noset%d", k)
	lc := aclClient(t, ctx, c, admins, user, func(i int) []any {
		if i < k {
			return []any{"&*", "+@all", "-set"}
		}
		return []any{"&*", "+@all"}
	})
	denied := make([]int, k)
	for i := range denied {
		denied[i] = i
	}
	for _, fencing := range []bool{false, true} {
		key := fmt.Sprintf("noset%d-fencing-%v", k, fencing)
		what := fmt.Sprintf("SET refused on nodes %v, fencing %v", denied, fencing)
		before := setDenials(t, ctx, admins, user)
		l, err := lc.TryLock(ctx, key, redlock.WithFencing(fencing))
		if k <= nodes-nodes/2-1 {
			if err != nil {
				t.Fatalf("%s: TryLock: %v", what, err)
			}
			if on := tokensOn(t, admins, rkey(key), l.Token()); len(on) < nodes/2+1 || slices.ContainsFunc(on, func(i int) bool { return i < k }) {
				t.Errorf("%s: the token is on nodes %v", what, on)
			}
			heldAndReleased(t, ctx, what, l)
			eventuallyGone(t, admins, key)
			continue
		}
		refused(t, what, err, k, before, setDenials(t, ctx, admins, user))
		if k == 3 {
			t.Logf("%s: %v", what, err)
		}
		before = setDenials(t, ctx, admins, user)
		_, err = lc.Lock(ctx, key, redlock.WithFencing(fencing), redlock.WithMaxWait(100*time.Millisecond))
		refused(t, what+", Lock", err, k, before, setDenials(t, ctx, admins, user))
	}
	// Close joins every roll-back; then none of the failed tokens may be
	// on any node.
	lc.closeAndCheck(t)
}

// releaseWithoutChannels: a user without pub/sub channel permissions (Redis
// 7's default for new users, acl-pubsub-default resetchannels): the release
// script's notification (PUBLISH) is refused with an error reply, after its
// DEL ran. The release did happen, and must be reported so; and Close
// releases a held lock just as well.
func releaseWithoutChannels(t *testing.T, ctx context.Context, c *cluster, admins []*redis.Client) {
	const user, key = "nochannels", "nochannels"
	lc := aclClient(t, ctx, c, admins, user, func(int) []any { return []any{"resetchannels", "+@all"} })
	l, err := lc.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("%s: TryLock: %v", user, err)
	}
	if err := l.Extend(ctx, 0); err != nil {
		t.Errorf("%s: Extend: %v", user, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("%s: Release = %v; want nil: the key was deleted, only the release notification was refused", user, err)
	}
	eventuallyGone(t, admins, key)
	if _, err := lc.TryLock(ctx, key); err != nil {
		t.Fatalf("%s: TryLock: %v", user, err)
	}
	if err := lc.Close(); err != nil {
		t.Errorf("%s: Close with a held lock = %v; want nil", user, err)
	}
	eventuallyGone(t, admins, key)
}
