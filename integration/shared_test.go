package integration

// Shared holders (redlock.Shared, a read/write lock) on real Redis servers,
// with the fault proxy, killed and paused nodes (docs/design.md and
// docs/safety.md, "Shared holders"). On a node, a key with shared holders
// holds 0x1c and a token, and its holders are the sorted set <key>\x1fr,
// each scored by the instant it lapses. The late-landing tests follow the
// design brief's first rule with the transient delay of late_landing_test.go:
//
//	TestSharedLateAcquireAfterFailedRound late joins of a failed round, landing after its roll-back, are taken back
//	TestSharedLateAcquireAfterRelease     late joins of a won round, landing after its Release, are taken back
//	TestSharedLateExtendAfterRelease      a late extend, landing after Release and an exclusive acquire, changes nothing
//	TestSharedWriterFirstAcrossClients    a waiting writer holds new readers back and gets the key alone
//	TestSharedNodesKilledAndPaused        holders alternate with 2 nodes killed; a renewed holder outlives a pause; 3 killed: nothing left
//	TestSharedNeverWithExclusive          mixed holders under a delayed link and a paused node: an exclusive holder overlaps no one
//
// Each test's doc comment names a mutation of the library it was seen to
// catch (applied by hand to a copy of the repository, never committed).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

// sharedLeftover bounds how long a token of ours stays among a key's
// holders after a late join landed: the leftover bound of docs/design.md (a
// round trip after the join's reply when it is seen; 1 s, the longest wait
// between two re-sent releases, and a round trip when its fate stayed
// unknown), with the 2 s cleanup budget of a client whose node timeout is
// 100 ms as slack for the busy test machine.
const sharedLeftover = 3 * time.Second

// holdersKey is the Redis key of the sorted set of key's shared holders.
func holdersKey(key string) string { return rkey(key) + "\x1fr" }

// inHolders returns "node<i> (...)" for every node of idx (nil: all nodes)
// whose shared holders of key include token, lapsed or not.
func inHolders(t *testing.T, admins []*redis.Client, idx []int, key, token string) []string {
	t.Helper()
	if idx == nil {
		idx = all()
	}
	var out []string
	for _, i := range idx {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := admins[i].ZScore(ctx, holdersKey(key), token).Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			t.Fatalf("ZSCORE %q on node%d: %v", holdersKey(key), i, err)
		default:
			out = append(out, fmt.Sprintf("node%d (key PTTL %dms)", i, pttl(t, admins[i], rkey(key))))
		}
	}
	return out
}

// holdersOn returns the shared holders of key on the node of cl, lapsed
// or not.
func holdersOn(t *testing.T, cl *redis.Client, key string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hs, err := cl.ZRange(ctx, holdersKey(key), 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %q on %s: %v", holdersKey(key), cl.Options().Addr, err)
	}
	return hs
}

// traces describes what the node of cl keeps of key: its lock key's value
// and its shared holders; "" when it keeps neither.
func traces(t *testing.T, cl *redis.Client, key string) string {
	t.Helper()
	hs := holdersOn(t, cl, key)
	v := get(t, cl, rkey(key))
	if v == "" && len(hs) == 0 {
		return ""
	}
	return fmt.Sprintf("%s = %q (PTTL %dms), holders %q", rkey(key), v, pttl(t, cl, rkey(key)), hs)
}

// eventuallyNoTraces waits until no node of idx (nil: all nodes) keeps
// anything of key, and fails the test with what is left if that takes
// longer than bound. (It also keeps the end-of-test checks of the harness,
// which read every lock key with GET, from meeting a sorted set.)
func eventuallyNoTraces(t *testing.T, admins []*redis.Client, idx []int, key string, bound time.Duration, why string) time.Duration {
	t.Helper()
	if idx == nil {
		idx = all()
	}
	start := time.Now()
	for {
		var left []string
		for _, i := range idx {
			if tr := traces(t, admins[i], key); tr != "" {
				left = append(left, fmt.Sprintf("node%d: %s", i, tr))
			}
		}
		if len(left) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			t.Fatalf("%s: %v later, the nodes still keep %s", why, bound, strings.Join(left, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// warmShared has lc take, extend, check and release a shared hold, and
// loads the four shared scripts on every node with SCRIPT LOAD (a round
// asks only the nodes its Client has verified so far, so the hold alone
// need not reach them all): a late EVALSHA of one then runs where it
// lands, instead of failing with NOSCRIPT (which would make a late-landing
// test pass without testing anything).
func warmShared(t *testing.T, ctx context.Context, admins []*redis.Client, lc *lockClient) {
	t.Helper()
	const key = "shared-warm-up"
	l, err := lc.TryLock(ctx, key, redlock.Shared(), redlock.WithNodeTimeout(patient))
	if err != nil {
		t.Fatalf("%s: warm-up shared TryLock: %v", lc.name, err)
	}
	if err := l.Extend(ctx, 0); err != nil {
		t.Fatalf("%s: warm-up shared Extend: %v", lc.name, err)
	}
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Fatalf("%s: warm-up shared Held = %v, %v", lc.name, ok, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("%s: warm-up shared Release: %v", lc.name, err)
	}
	for i, cl := range admins {
		for _, s := range []*redis.Script{scripts.AcquireShared, scripts.ExtendShared, scripts.ReleaseShared, scripts.HeldShared} {
			if err := s.Load(ctx, cl).Err(); err != nil {
				t.Fatalf("node%d: SCRIPT LOAD of a shared script: %v", i, err)
			}
		}
	}
	eventuallyNoTraces(t, admins, nil, key, 5*time.Second, "after the warm-up hold's release")
}

// newSharedLateRig is newLateRig with a patient warm-up: a's first
// rounds (identity checks, a shared hold, the lock scripts) may take a
// node timeout of patient on the busy test machine, and its delayed
// rounds then use lateNodeTimeout; b is warmed up alike.
func newSharedLateRig(t *testing.T) *lateRig {
	t.Helper()
	c := startCluster(t, lateTTL, "")
	r := &lateRig{ctx: ctxT(t, 60*time.Second), admins: c.admins(t)}
	var via func(int) *redis.Options
	r.ps, via = c.proxyEach(t)
	r.drainers = c.drainers(t, r.ps)
	r.a = c.newLockClient(t, "a", via, redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(lateNodeTimeout))
	r.b = c.newLockClient(t, "b", c.direct, redlock.WithTTL(lateTTL), redlock.WithNodeTimeout(patient))
	for _, lc := range []*lockClient{r.a, r.b} {
		l, err := lc.TryLock(r.ctx, "warm-up", redlock.WithNodeTimeout(patient))
		if err != nil {
			t.Fatalf("%s: warm-up TryLock: %v", lc.name, err)
		}
		if err := l.Release(r.ctx); err != nil {
			t.Fatalf("%s: warm-up Release: %v", lc.name, err)
		}
		warmShared(t, r.ctx, r.admins, lc)
	}
	eventuallyGone(t, r.admins, "warm-up")
	return r
}

// scriptsRun waits until every node of idx has run at least n scripts
// more than before (scriptCalls, indexed by node).
func scriptsRun(t *testing.T, admins []*redis.Client, idx []int, before []int64, n int64, what string) {
	t.Helper()
	eventually(t, 10*time.Second, 5*time.Millisecond, what, func() bool {
		return !slices.ContainsFunc(idx, func(i int) bool { return scriptCalls(t, admins[i]) < before[i]+n })
	})
}

// callsOn returns scriptCalls of every node (indexed by node).
func callsOn(t *testing.T, admins []*redis.Client) []int64 {
	t.Helper()
	out := make([]int64, len(admins))
	for i, cl := range admins {
		out[i] = scriptCalls(t, cl)
	}
	return out
}

// newFailedToken returns the one token lc's log made, and no acquisition
// won, since before (a failed round's), or fails the test.
func newFailedToken(t *testing.T, lc *lockClient, before map[string]bool) string {
	t.Helper()
	var token string
	for tok := range lc.tokens.failed() {
		if !before[tok] {
			token = tok
		}
	}
	if token == "" {
		t.Fatalf("%s: the failed round's token is not in the token log", lc.name)
	}
	return token
}

// watchLanding polls, until what the proxies of the nodes slow read while
// delayed was on is due, which of those nodes count token among key's
// holders at some point, and returns them: a late join is seen unless a
// re-sent release takes it out at once (so it is logged, not required).
func (r *lateRig) watchLanding(t *testing.T, delayed *lateDelayed, slow []int, key, token string) []int {
	t.Helper()
	delayed.off()
	seen := map[int]bool{}
	for due := delayed.offAt.Add(lateDelay + lateSlack); time.Now().Before(due); time.Sleep(5 * time.Millisecond) {
		for _, i := range slow {
			if !seen[i] && len(inHolders(t, r.admins, []int{i}, key, token)) > 0 {
				seen[i] = true
			}
		}
	}
	var out []int
	for _, i := range slow {
		if seen[i] {
			out = append(out, i)
		}
	}
	return out
}

// sharedUnblocked checks that, within sharedLeftover after at (when the
// late joins had landed), no node counts token among key's holders and b
// takes key alone; then that the nodes keep nothing of key.
func (r *lateRig) sharedUnblocked(t *testing.T, key, token string, at time.Time) {
	t.Helper()
	var (
		won     bool
		lastErr error
	)
	for end := at.Add(sharedLeftover); ; time.Sleep(20 * time.Millisecond) {
		left := inHolders(t, r.admins, nil, key, token)
		if !won {
			lb, err := r.b.TryLock(r.ctx, key)
			if err == nil {
				won = true
				t.Logf("b acquired %q alone %v after the late joins landed", key, time.Since(at).Round(time.Millisecond))
				if err := lb.Release(r.ctx); err != nil {
					t.Errorf("b: Release: %v", err)
				}
			} else {
				lastErr = err
			}
		}
		if won && len(left) == 0 {
			t.Logf("the token was among no node's holders %v after the late joins landed", time.Since(at).Round(time.Millisecond))
			break
		}
		if time.Now().After(end) {
			if len(left) > 0 {
				t.Errorf("%v after the late joins landed, the token is still a shared holder of %q on %s", sharedLeftover, key, strings.Join(left, ", "))
			}
			if !won {
				t.Errorf("%v after the late joins landed, b still cannot take %q alone: the late joins keep it shared; b's last TryLock: %v", sharedLeftover, key, lastErr)
			}
			return
		}
	}
	eventuallyNoTraces(t, r.admins, nil, key, sharedLeftover, "after the late joins were taken back and b released")
}

// TestSharedLateAcquireAfterFailedRound: the joins of a failed shared round
// that land after its roll-back are taken back within the leftover bound.
//
// A's shared TryLock has its commands to nodes 0, 1 and 2 delayed by the
// transient delay (400 ms, node timeout 100 ms): only the two fast nodes say
// yes, and it fails with the slow nodes timing out. The round is rolled back
// (release_shared), and then the delayed acquire_shared commands land on the
// three slow nodes, where the key is free: each makes the key shared with
// the failed token as its holder, a majority. Within sharedLeftover after
// they landed, the failed token (from a's token generator) must be among no
// node's holders (<key>\x1fr), and another client B must take the key
// alone.
//
// Caught mutation: refOf in redlock/cleanup.go returning opRelease for
// shared acquires (the roll-back and the re-sent releases run release.lua,
// which finds 0x1c+token, not the token, and leaves every join for the TTL).
func TestSharedLateAcquireAfterFailedRound(t *testing.T) {
	r := newSharedLateRig(t)
	slow := []int{0, 1, 2}
	lateAttempts(t, func(key string) bool {
		before := r.a.tokens.failed()
		settle()
		delayed := r.delay(t, slow)
		_, err := r.a.TryLock(r.ctx, key, redlock.Shared())
		t.Logf("a: shared TryLock(%q) with nodes %v delayed: %v", key, slow, err)
		checkFailedRound(t, err, slow, redlock.OutcomeTimeout)
		token := newFailedToken(t, r.a, before)
		seen := r.watchLanding(t, delayed, slow, key, token)
		at := delayed.landed()
		t.Logf("the delayed joins have landed (seen among the holders of nodes %v meanwhile); the failed token is a holder on %v", seen, inHolders(t, r.admins, nil, key, token))
		r.sharedUnblocked(t, key, token, at)
		return true
	})
	r.closeAndCheck(t)
}

// TestSharedLateAcquireAfterRelease: the joins of a won shared round that
// land after its Release are taken back within the leftover bound.
//
// A's shared TryLock has its commands to nodes 0 and 1 delayed by the
// transient delay: it wins on the three fast nodes, and its calls to the
// slow ones stop waiting at the node timeout (their replies are still
// followed). 150 ms later A releases the lock, and Release returns nil.
// Then the delayed acquire_shared commands land on nodes 0 and 1, where the
// key is free, and make A's token a holder there.
// Within sharedLeftover after that, the token must be among no node's
// holders, and another client B must take the key alone.
//
// The library takes such a join back twice over: A's release to a node
// whose acquire has not answered is held back until it does (Lock.chain),
// and the late "yes" itself is released (Lock.late). Caught mutation: both
// off for shared holders (Client.run in redlock/round.go holding nothing back
// when l.shared, and Lock.late releasing nothing when l.shared): the late
// joins then live their TTL. Either one alone is covered by the other.
func TestSharedLateAcquireAfterRelease(t *testing.T) {
	r := newSharedLateRig(t)
	slow := []int{0, 1}
	lateAttempts(t, func(key string) bool {
		settle()
		calls := callsOn(t, r.admins)
		delayed := r.delay(t, slow)
		l, err := r.a.TryLock(r.ctx, key, redlock.Shared())
		if err != nil {
			t.Logf("premise: a: shared TryLock(%q) with nodes %v delayed: %v; want it won on the three fast nodes", key, slow, err)
			delayed.landed()
			return false
		}
		if h := inHolders(t, r.admins, slow, key, l.Token()); len(h) != 0 {
			t.Fatalf("a's token is a holder on %v right after TryLock returned: its joins were not delayed", h)
		}
		time.Sleep(150 * time.Millisecond) // the slow nodes' calls time out meanwhile
		if err := l.Release(r.ctx); err != nil {
			t.Logf("premise: a: Release 150 ms after TryLock: %v", err)
			delayed.landed()
			return false
		}
		delayed.off()
		if due := delayed.offAt.Add(lateDelay); time.Now().After(due) {
			t.Logf("premise: a's Release returned %v after the delayed joins were due", time.Since(due))
			delayed.landed()
			return false
		}
		t.Logf("released; a's token is a holder on %v", inHolders(t, r.admins, nil, key, l.Token()))
		seen := r.watchLanding(t, delayed, slow, key, l.Token())
		at := delayed.landed()
		// On each slow node: the late join, and the release that follows it.
		scriptsRun(t, r.admins, slow, calls, 2, "the delayed joins and their releases run on the slow nodes")
		t.Logf("the delayed joins have landed (seen among the holders of nodes %v meanwhile); a's token is a holder on %v", seen, inHolders(t, r.admins, nil, key, l.Token()))
		r.sharedUnblocked(t, key, l.Token(), at)
		return true
	})
	r.closeAndCheck(t)
}

// TestSharedLateExtendAfterRelease: an extend of a shared holder that lands
// after the holder's Release, and after an exclusive holder took the key,
// changes nothing.
//
// A holds the key as a shared holder on all five nodes (TTL 10 s). With the
// transient delay on nodes 0 and 1, A.Extend(10s) wins on the three fast
// nodes; A then releases, and B takes the key alone with a 2 s TTL, on the
// slow nodes too, before the delayed extend_shared commands land there.
// Once they have landed, every node must hold B's token with a PTTL within
// B's 2 s, and no node may have shared holders (A's or any).
//
// Caught mutation: extend_shared.lua without its guard (place(): the key
// holds the shared mark and the token is among its holders, live), a naive
// "ZADD the holder, lengthen the key": the late extend then puts A back
// among the holders and lengthens B's key to 10 s.
func TestSharedLateExtendAfterRelease(t *testing.T) {
	const bTTL = 2 * time.Second
	r := newSharedLateRig(t)
	slow := []int{0, 1}
	lateAttempts(t, func(key string) bool {
		l, err := r.a.TryLock(r.ctx, key, redlock.Shared())
		if err != nil {
			t.Logf("premise: a: shared TryLock(%q): %v", key, err)
			return false
		}
		if !r.joinedEverywhere(t, l) {
			_ = l.Release(r.ctx)
			eventuallyNoTraces(t, r.admins, nil, key, sharedLeftover, "after a's release")
			return false
		}
		settle()
		calls := callsOn(t, r.admins)
		delayed := r.delay(t, slow)
		if err := l.Extend(r.ctx, lateTTL); err != nil {
			t.Logf("premise: a: Extend(%v) with nodes %v delayed: %v; want it won on the three fast nodes", lateTTL, slow, err)
			_ = l.Release(r.ctx)
			delayed.landed()
			eventuallyNoTraces(t, r.admins, nil, key, sharedLeftover, "after a's release")
			return false
		}
		if err := l.Release(r.ctx); err != nil {
			t.Fatalf("a: Release after the extend: %v", err)
		}
		lb, ok := r.takeAloneBeforeDue(t, delayed, key, slow, bTTL)
		if !ok {
			delayed.landed()
			eventuallyNoTraces(t, r.admins, nil, key, sharedLeftover+bTTL, "after the broken premise")
			return false
		}
		delayed.landed()
		// On each slow node: a's release, b's acquire and a's late extend.
		scriptsRun(t, r.admins, slow, calls, 3, "a's release, b's acquire and a's late extend run on the slow nodes")
		for i, cl := range r.admins {
			if v := get(t, cl, rkey(key)); v != lb.Token() {
				t.Errorf("node%d: %s = %q after a's late extend landed; want b's token %q", i, rkey(key), v, lb.Token())
			} else if ms := pttl(t, cl, rkey(key)); ms > bTTL.Milliseconds() {
				t.Errorf("node%d: b's key has PTTL %dms after a's late extend landed, above b's TTL %v: the late extend lengthened it", i, ms, bTTL)
			}
			if hs := holdersOn(t, cl, key); len(hs) != 0 {
				t.Errorf("node%d: shared holders %q re-appeared after a's late extend landed", i, hs)
			}
		}
		if err := lb.Release(r.ctx); err != nil {
			t.Errorf("b: Release: %v", err)
		}
		eventuallyNoTraces(t, r.admins, nil, key, sharedLeftover, "after b's release")
		return true
	})
	r.closeAndCheck(t)
}

// joinedEverywhere waits, for a short while, until every node counts l's
// token among its key's holders (TryLock returned at a quorum); false, and
// logged, if they do not.
func (r *lateRig) joinedEverywhere(t *testing.T, l *redlock.Lock) bool {
	t.Helper()
	for end := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		h := inHolders(t, r.admins, nil, l.Key(), l.Token())
		if len(h) == nodes {
			return true
		}
		if time.Now().After(end) {
			t.Logf("premise: a's token is a holder only on %v", h)
			return false
		}
	}
}

// takeAloneBeforeDue has b take key alone with ttl once the key is free on
// every node, and waits until b's token is on the nodes slow; it reports
// false (after logging why, and releasing) when that happened only after the
// commands delayed were due.
func (r *lateRig) takeAloneBeforeDue(t *testing.T, delayed *lateDelayed, key string, slow []int, ttl time.Duration) (*redlock.Lock, bool) {
	t.Helper()
	delayed.off()
	due := delayed.offAt.Add(lateDelay)
	for slices.ContainsFunc(r.admins, func(cl *redis.Client) bool { return traces(t, cl, key) != "" }) {
		if time.Now().After(due) {
			t.Logf("premise: a's release had not reached every node when its late extend was due")
			return nil, false
		}
		time.Sleep(2 * time.Millisecond)
	}
	lb, err := r.b.TryLock(r.ctx, key, redlock.WithTTL(ttl))
	if err != nil {
		t.Logf("premise: b: TryLock(%q) after a's release: %v", key, err)
		return nil, false
	}
	for {
		on := 0
		for _, i := range slow {
			if get(t, r.admins[i], rkey(key)) == lb.Token() {
				on++
			}
		}
		if on == len(slow) {
			break
		}
		if time.Now().After(due) {
			t.Logf("premise: b's key reached the nodes %v only after a's late extend was due", slow)
			_ = lb.Release(r.ctx)
			return nil, false
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("b took %q alone %v before a's late extend was due", key, time.Until(due).Round(time.Millisecond))
	return lb, true
}

// rwBook is the readers' and the writer's bookkeeping in
// TestSharedWriterFirstAcrossClients: what each believes it holds.
type rwBook struct {
	mu          sync.Mutex
	shared      int  // shared holds now: from the acquisition's return to the Release call
	writer      bool // the writer holds the key
	writerDone  bool // the writer has released it
	afterWriter int  // shared holds taken after the writer released
	bad         []string
}

func (b *rwBook) begin(l *redlock.Lock) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.writer {
		b.bad = append(b.bad, fmt.Sprintf("a shared hold (token %q) began while the writer held the key", l.Token()))
	}
	b.shared++
	if b.writerDone {
		b.afterWriter++
	}
}

func (b *rwBook) end() {
	b.mu.Lock()
	b.shared--
	b.mu.Unlock()
}

// TestSharedWriterFirstAcrossClients: readers in two Clients hold the key
// hand over hand, so that it would stay shared for ever; a writer in a third
// Client that waits with Lock must hold new shared holders back and get the
// key alone, within a bound derived from the readers' TTL.
//
// Each of four readers (two per reader Client) takes a new shared hold with
// TryLock before it releases the one it has, and, when refused, releases and
// waits with Lock. Once two holds overlap, the writer calls Lock with
// WithMaxWait(2 × (reader TTL + retry max + node timeout)): the shared
// holders of the moment leave within their TTL even if they never release.
// When its Lock returns, the readers' own bookkeeping must show no shared
// hold, and none may begin while it holds the key; after its release the
// readers go on.
//
// Caught mutation: acquire_shared.lua without `or waiting(k)` (new shared
// holders admitted while a writer waits in the key's line): the writer
// starves until its budget runs out.
func TestSharedWriterFirstAcrossClients(t *testing.T) {
	const (
		key       = "doc"
		readerTTL = 2 * time.Second
		retryMax  = 50 * time.Millisecond
	)
	c := startCluster(t, readerTTL, "")
	admins := c.admins(t)
	ctx := ctxT(t, 60*time.Second)
	opts := []redlock.Option{redlock.WithTTL(readerTTL), redlock.WithNodeTimeout(patient), redlock.WithRetryBackoff(5*time.Millisecond, retryMax)}
	lcs := c.warmClients(t, ctx, opts, "reader1", "reader2", "writer")
	warmShared(t, ctx, admins, lcs[0])
	bound := 2 * (readerTTL + retryMax + patient)

	book := &rwBook{}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for _, lc := range []*lockClient{lcs[0], lcs[0], lcs[1], lcs[1]} {
		wg.Go(func() { handOverHand(t, rctx, lc, key, book) })
	}
	eventually(t, bound, 5*time.Millisecond, "two shared holds at once", func() bool {
		book.mu.Lock()
		defer book.mu.Unlock()
		return book.shared >= 2
	})
	start := time.Now()
	w, err := lcs[2].Lock(ctx, key, redlock.WithMaxWait(bound))
	waited := time.Since(start)
	if err != nil {
		stop()
		wg.Wait()
		t.Fatalf("the writer waited %v for the key the readers hold hand over hand (budget %v) and did not get it: %v", waited.Round(time.Millisecond), bound, err)
	}
	book.mu.Lock()
	n := book.shared
	book.writer = true
	book.mu.Unlock()
	t.Logf("the writer got the key after %v (budget %v)", waited.Round(time.Millisecond), bound)
	if n != 0 {
		t.Errorf("the writer got the key while the readers counted %d shared holds", n)
	}
	time.Sleep(20 * time.Millisecond) // the readers try meanwhile
	if w.Err() != nil || !time.Now().Before(w.Deadline()) {
		t.Fatalf("premise: the writer's lock ended after 20 ms (Err %v, deadline %v ago)", w.Err(), time.Since(w.Deadline()))
	}
	book.mu.Lock()
	book.writer, book.writerDone = false, true
	book.mu.Unlock()
	if err := w.Release(ctx); err != nil {
		t.Errorf("writer: Release: %v", err)
	}
	eventually(t, bound, 5*time.Millisecond, "a shared hold after the writer released", func() bool {
		book.mu.Lock()
		defer book.mu.Unlock()
		return book.afterWriter > 0
	})
	stop()
	wg.Wait()
	for _, b := range book.bad {
		t.Error(b)
	}
	eventuallyNoTraces(t, admins, nil, key, bound, "after every reader released")
}

// handOverHand is one reader of TestSharedWriterFirstAcrossClients: until
// ctx ends, it takes a new shared hold of key before it releases the last
// (TryLock), and when refused releases and waits (Lock).
func handOverHand(t *testing.T, ctx context.Context, lc *lockClient, key string, book *rwBook) {
	cur, err := lc.Lock(ctx, key, redlock.Shared())
	if err != nil {
		return // ctx ended
	}
	book.begin(cur)
	drop := func(l *redlock.Lock) {
		book.end()
		if err := l.Release(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("%s: Release of a shared hold: %v", lc.name, err)
		}
	}
	for ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
		next, err := lc.TryLock(ctx, key, redlock.Shared())
		if err == nil {
			book.begin(next)
		}
		drop(cur)
		if err != nil {
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Errorf("%s: shared TryLock: %v", lc.name, err)
			}
			if next, err = lc.Lock(ctx, key, redlock.Shared()); err != nil {
				return // ctx ended
			}
			book.begin(next)
		}
		cur = next
	}
	drop(cur)
}

// TestSharedNodesKilledAndPaused: shared holders on nodes that die or
// freeze.
//
//   - A shared holder with WithAutoExtend (TTL 1.2 s) keeps its hold while
//     node 0 is paused (SIGSTOP) for 1.5 TTLs: Done stays open, Held is true
//     after the node resumes, Release returns nil, and no node keeps anything
//     of the key afterwards (the commands queued in the paused node's
//     sockets included).
//   - With nodes 1 and 3 killed, shared holders and a writer alternate on
//     the three live nodes: two shared holders exclude an exclusive TryLock;
//     a writer's Lock waits in the line and holds a new shared holder back;
//     the last shared release hands it the key (with no shared hold left);
//     while it holds the key, shared holders are refused; after its release
//     they are admitted.
//   - With node 4 killed as well, a shared TryLock (TTL 10 s) fails with
//     ErrNotAcquired naming the dead nodes, and the two living nodes keep
//     nothing of the key within 2 s of running its joins and their
//     releases (the round may fail before the living nodes answer).
//
// Caught mutations: renew.go renewing shared holders in the batched
// ExtendMany (a kind that batches shared holders): extend.lua finds 0x1c+token, and the
// paused-node holder is lost; acquire_shared.lua without `or waiting(k)`:
// the shared holder is admitted while the writer waits; refOf returning
// opRelease for shared acquires: the failed round's holders stay on the
// living nodes.
func TestSharedNodesKilledAndPaused(t *testing.T) {
	const (
		ttl         = 1200 * time.Millisecond
		nodeTimeout = 200 * time.Millisecond
		retryMax    = 50 * time.Millisecond
		failTTL     = 10 * time.Second
	)
	c := startCluster(t, failTTL, "")
	admins := c.admins(t)
	ctx := ctxT(t, 60*time.Second)
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout), redlock.WithRetryBackoff(10*time.Millisecond, retryMax)}
	lcs := c.warmClients(t, ctx, opts, "reader1", "reader2", "writer")
	warmShared(t, ctx, admins, lcs[0])

	pausedHolderSurvives(t, ctx, c, admins, lcs[0], ttl)

	for _, i := range []int{1, 3} {
		if err := c.Node(i).Kill(); err != nil {
			t.Fatal(err)
		}
	}
	// The shared holders of the moment leave within their TTL even if
	// they never release; the writer polls at retryMax, each attempt
	// taking up to the node timeout.
	bound := 2 * (ttl + retryMax + nodeTimeout)
	alternateOnThree(t, ctx, admins, []int{0, 2, 4}, lcs[0], lcs[1], lcs[2], bound)

	if err := c.Node(4).Kill(); err != nil {
		t.Fatal(err)
	}
	r := lcs[0]
	const key = "three-killed"
	live := []int{0, 2}
	before := r.tokens.failed()
	calls := make([]int64, len(admins))
	for _, i := range live {
		calls[i] = scriptCalls(t, admins[i])
	}
	_, err := r.TryLock(ctx, key, redlock.Shared(), redlock.WithTTL(failTTL))
	t.Logf("shared TryLock with nodes 1, 3 and 4 killed: %v", err)
	checkFailedRound(t, err, []int{1, 3, 4}, redlock.OutcomeError, redlock.OutcomeTimeout)
	token := newFailedToken(t, r, before)
	// The round may fail before the living nodes answer: their joins and
	// the releases that take them back are two scripts on each.
	scriptsRun(t, admins, live, calls, 2, "the failed round's join and its release run on the living nodes")
	took := eventuallyNoTraces(t, admins, live, key, 2*time.Second, "after a shared TryLock failed with 3 of 5 nodes killed")
	t.Logf("the living nodes kept nothing of the failed round %v after it returned", took.Round(time.Millisecond))
	if h := inHolders(t, admins, live, key, token); len(h) != 0 {
		t.Errorf("the failed round's token is a holder on %v", h)
	}
}

// pausedHolderSurvives is the first part of TestSharedNodesKilledAndPaused:
// an auto-extended shared holder of lc's outlives a pause of node 0 longer
// than its TTL, and releases cleanly.
func pausedHolderSurvives(t *testing.T, ctx context.Context, c *cluster, admins []*redis.Client, lc *lockClient, ttl time.Duration) {
	t.Helper()
	const key = "paused"
	l, err := lc.TryLock(ctx, key, redlock.Shared(), redlock.WithAutoExtend(true))
	if err != nil {
		t.Fatalf("%s: shared TryLock with auto-extension: %v", lc.name, err)
	}
	first := l.Deadline()
	pauseNodes(t, c, 0)
	select {
	case <-l.Done():
		t.Fatalf("the auto-extended shared holder was lost while node0 was paused: %v", l.Err())
	case <-time.After(ttl * 3 / 2):
	}
	if err := c.Node(0).Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("node0 was paused for %v; the holder's deadline moved %v later meanwhile", ttl*3/2, l.Deadline().Sub(first).Round(time.Millisecond))
	if ok, err := l.Held(ctx); !ok || err != nil || l.Err() != nil {
		t.Fatalf("the auto-extended shared holder after node0 resumed: Held = %v, %v; Err %v", ok, err, l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release of the auto-extended shared holder: %v", err)
	}
	eventuallyNoTraces(t, admins, nil, key, 5*time.Second, "after the auto-extended shared holder's release")
}

// alternateOnThree is the second part of TestSharedNodesKilledAndPaused:
// with only the nodes live alive, shared holders of r1 and r2 and the
// writer w alternate.
func alternateOnThree(t *testing.T, ctx context.Context, admins []*redis.Client, live []int, r1, r2, w *lockClient, bound time.Duration) {
	t.Helper()
	const key = "two-killed"
	var holding atomic.Int32 // shared holds, as their holders count them
	take := func(lc *lockClient, why string) *redlock.Lock {
		t.Helper()
		l, err := lc.TryLock(ctx, key, redlock.Shared())
		if err != nil {
			t.Fatalf("%s: shared TryLock %s: %v", lc.name, why, err)
		}
		holding.Add(1)
		return l
	}
	refused := func(lc *lockClient, why string) {
		t.Helper()
		l, err := lc.TryLock(ctx, key, redlock.Shared())
		if err == nil {
			_ = l.Release(ctx)
			t.Fatalf("%s: a shared TryLock %s succeeded; want ErrNotAcquired", lc.name, why)
		}
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("%s: shared TryLock %s: %v; want ErrNotAcquired", lc.name, why, err)
		}
	}
	s1 := take(r1, "with nodes 1 and 3 killed")
	s2 := take(r2, "beside another shared holder")
	if l, err := w.TryLock(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
		if err == nil {
			_ = l.Release(ctx)
		}
		t.Fatalf("writer: TryLock while two shared holders hold: %v; want ErrNotAcquired", err)
	}
	type outcome struct {
		l       *redlock.Lock
		err     error
		holding int32
	}
	got := make(chan outcome, 1)
	go func() {
		l, err := w.Lock(ctx, key, redlock.WithMaxWait(bound))
		got <- outcome{l, err, holding.Load()}
	}()
	eventually(t, bound, 5*time.Millisecond, "the writer in the line of every live node", func() bool {
		return !slices.ContainsFunc(live, func(i int) bool { return len(waiters(t, ctx, admins[i], key)) == 0 })
	})
	refused(r1, "while a writer waits")
	for _, l := range []*redlock.Lock{s1, s2} {
		holding.Add(-1)
		if err := l.Release(ctx); err != nil {
			t.Errorf("release of a shared holder: %v", err)
		}
	}
	o := <-got
	if o.err != nil {
		t.Fatalf("writer: Lock after the shared holders released: %v", o.err)
	}
	if o.holding != 0 {
		t.Errorf("the writer got the key while %d shared holds were counted", o.holding)
	}
	refused(r2, "while the writer holds the key")
	if err := o.l.Release(ctx); err != nil {
		t.Errorf("writer: Release: %v", err)
	}
	s3 := take(r1, "after the writer released")
	if err := s3.Release(ctx); err != nil {
		t.Errorf("release of a shared holder: %v", err)
	}
	eventuallyNoTraces(t, admins, live, key, 5*time.Second, "after the last shared holder's release")
}

// holdBook is the in-process bookkeeping of TestSharedNeverWithExclusive:
// the critical sections in progress, and every pair of sections of which
// one is exclusive that were in progress at once.
type holdBook struct {
	mu        sync.Mutex
	in        map[*section]bool
	conflicts [][2]*section
	exclusive int // sections run, held alone
	shared    int // sections run, shared
	maxShared int // the most shared sections at once
}

// section is one critical section: valid reports whether its lock is still
// valid (not lost, deadline ahead); overstayed is set when it was not at
// the section's end, and then the section counts for no conflict (a holder
// past its deadline may legitimately meet the next one).
type section struct {
	who        string
	exclusive  bool
	valid      func() bool
	overstayed bool
}

func (b *holdBook) enter(s *section) {
	b.mu.Lock()
	defer b.mu.Unlock()
	nShared := 0
	for o := range b.in {
		if (s.exclusive || o.exclusive) && o.valid() {
			b.conflicts = append(b.conflicts, [2]*section{o, s})
		}
		if !o.exclusive {
			nShared++
		}
	}
	b.in[s] = true
	if s.exclusive {
		b.exclusive++
	} else {
		b.shared++
		b.maxShared = max(b.maxShared, nShared+1)
	}
}

func (b *holdBook) leave(s *section) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s.overstayed = !s.valid()
	delete(b.in, s)
}

// TestSharedNeverWithExclusive: shared holders overlap only each other.
// Four Clients, two workers each, take one key for 2.5 s by a random mix of
// shared and exclusive Lock (auto-extended or not) and Do, while every
// Client's link to node 0 switches between no delay and 150 ms each way
// (round trips past the 200 ms node timeout: commands land late) and node 1
// is paused and resumed every 400 ms. In each critical section (1 to 20 ms),
// in-process bookkeeping records which sections are in progress: no
// exclusive section may ever be in progress beside any other section while
// both locks are valid (a section whose lock is no longer valid at its end
// counts for nothing). Afterwards the nodes keep nothing of the key.
//
// Caught mutation: release_shared.lua deleting the key and its holders even
// when live holders remain (`if last > 0` made false): an exclusive Lock
// then takes the key beside a live shared holder.
func TestSharedNeverWithExclusive(t *testing.T) {
	const (
		key         = "mixed"
		ttl         = 2 * time.Second
		nodeTimeout = 200 * time.Millisecond
		run         = 2500 * time.Millisecond
		clients     = 4
		workers     = 2 // per Client
	)
	c := startCluster(t, ttl, "")
	admins := c.admins(t)
	ctx := ctxT(t, 60*time.Second)
	var slow []*testkit.Proxy // every Client's link to node 0
	lcs := make([]*lockClient, clients)
	for i := range lcs {
		ps, via := c.proxyEach(t)
		slow = append(slow, ps[0])
		lcs[i] = c.newLockClient(t, fmt.Sprintf("c%d", i), via, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout),
			redlock.WithRetryBackoff(5*time.Millisecond, 50*time.Millisecond))
		warm(t, ctx, lcs[i])
	}
	warmShared(t, ctx, admins, lcs[0])
	t.Cleanup(func() { _ = c.Node(1).Resume() })

	book := &holdBook{in: map[*section]bool{}}
	rctx, stop := context.WithTimeout(ctx, run)
	defer stop()
	var wg sync.WaitGroup
	var lost, relErrs atomic.Int64
	wg.Go(func() { faultLoop(t, rctx, c, slow) })
	for ci, lc := range lcs {
		for w := range workers {
			rng := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
			who := fmt.Sprintf("%s/%d", lc.name, w)
			wg.Go(func() {
				for rctx.Err() == nil {
					mixedTurn(t, rctx, lc, key, who, rng, book, &lost, &relErrs)
				}
			})
		}
	}
	wg.Wait()
	for _, p := range slow {
		p.SetLatency(0)
	}
	if err := c.Node(1).Resume(); err != nil {
		t.Fatal(err)
	}
	violations := 0
	for _, pair := range book.conflicts {
		a, b := pair[0], pair[1]
		if a.overstayed || b.overstayed {
			continue
		}
		violations++
		if violations <= 5 {
			t.Errorf("two holders at once, one of them exclusive: %s (exclusive %v) and %s (exclusive %v), both valid", a.who, a.exclusive, b.who, b.exclusive)
		}
	}
	t.Logf("%d exclusive and %d shared critical sections, at most %d shared at once; %d conflicts recorded, %d between valid holders; %d locks lost, %d releases failed",
		book.exclusive, book.shared, book.maxShared, len(book.conflicts), violations, lost.Load(), relErrs.Load())
	if book.exclusive == 0 || book.shared == 0 {
		t.Errorf("premise: %d exclusive and %d shared critical sections ran; want some of each", book.exclusive, book.shared)
	}
	eventuallyNoTraces(t, admins, nil, key, ttl+sharedLeftover, "after the mixed run ended")
}

// faultLoop switches the links slow between no delay and 150 ms each way
// every 250 ms, and pauses and resumes node 1 every 400 ms, until ctx ends.
func faultLoop(t *testing.T, ctx context.Context, c *cluster, slow []*testkit.Proxy) {
	delayed, paused := false, false
	nextDelay, nextPause := time.Now(), time.Now().Add(200*time.Millisecond)
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(nextDelay) {
			delayed = !delayed
			d := time.Duration(0)
			if delayed {
				d = 150 * time.Millisecond
			}
			for _, p := range slow {
				p.SetLatency(d)
			}
			nextDelay = now.Add(250 * time.Millisecond)
		}
		if !now.Before(nextPause) {
			paused = !paused
			var err error
			if paused {
				err = c.Node(1).Pause()
			} else {
				err = c.Node(1).Resume()
			}
			if err != nil {
				t.Errorf("node1: pause %v: %v", paused, err)
			}
			nextPause = now.Add(400 * time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mixedTurn is one turn of a worker of TestSharedNeverWithExclusive: a
// shared or exclusive Lock or Do, chosen by rng, around a critical section
// of 1 to 4 ms (exclusive) or 5 to 20 ms (shared).
func mixedTurn(t *testing.T, ctx context.Context, lc *lockClient, key, who string, rng *rand.Rand, book *holdBook, lost, relErrs *atomic.Int64) {
	exclusive := rng.IntN(2) == 0
	var opts []redlock.Option
	kind := "exclusive"
	if !exclusive {
		opts = append(opts, redlock.Shared())
		kind = "shared"
	}
	// Shared sections last longer, so that shared holders overlap and an
	// exclusive holder wrongly admitted beside one meets it.
	hold := time.Duration(1+rng.IntN(4)) * time.Millisecond
	if !exclusive {
		hold = time.Duration(5+rng.IntN(16)) * time.Millisecond
	}
	critical := func(valid func() bool) {
		s := &section{who: fmt.Sprintf("%s (%s)", who, kind), exclusive: exclusive, valid: valid}
		book.enter(s)
		time.Sleep(hold)
		book.leave(s)
	}
	if rng.IntN(2) == 0 {
		err := lc.Do(ctx, key, func(lctx context.Context) error {
			critical(func() bool { return lctx.Err() == nil })
			return nil
		}, opts...)
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.Is(err, redlock.ErrLockLost):
			lost.Add(1)
		case errors.Is(err, redlock.ErrNotHeld):
			relErrs.Add(1)
		default:
			t.Errorf("%s: %s Do: %v", who, kind, err)
		}
		return
	}
	l, err := lc.Lock(ctx, key, append(opts, redlock.WithAutoExtend(rng.IntN(2) == 0))...)
	if err != nil {
		if ctx.Err() == nil {
			t.Errorf("%s: %s Lock: %v", who, kind, err)
		}
		return
	}
	critical(func() bool { return l.Err() == nil && time.Now().Before(l.Deadline()) })
	if l.Err() != nil {
		lost.Add(1)
	}
	if err := l.Release(context.WithoutCancel(ctx)); err != nil {
		relErrs.Add(1)
	}
}
