package integration

// Counting semaphores (Client.Semaphore; redlock/semaphore.go,
// internal/scripts/acquire_permit.lua and extend_permit.lua) on real Redis:
// k holders across Clients and never more, permit acquires that land late
// (held in the link, delivered after the permit was released, or while
// another Client holds it), nodes killed and paused, Clients that disagree
// on the count, and an auto-extended permit that keeps its count declared.
// TestSemaphore runs them on one cluster, as subtests, the one that kills
// nodes last:
//
//	Holders        k holders across Clients, the next refused, woken by a release
//	LateAcquire    a held permit acquire delivered after release / under another holder
//	CountMismatch  another count refused while a permit is held, nothing taken
//	AutoExtend     an auto-extended permit keeps the count declared past the TTL
//	Nodes          3 of 5 paused: fails, nothing left; 2 of 5 killed: works

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

const (
	// semTTL is the TTL of the permits here (the cluster's key TTL bound).
	semTTL = 2 * time.Second
	// semNodeTimeout is the node timeout of the clients whose commands are
	// held or whose nodes are paused.
	semNodeTimeout = 100 * time.Millisecond
)

// permitKey is the Redis key of permit i of semaphore name (default
// prefix), countKey its count key.
func permitKey(name string, i int) string { return rkey(name) + "\x1fp" + strconv.Itoa(i) }
func countKey(name string) string         { return rkey(name) + "\x1fk" }

// semTry is s.TryAcquire, noting a won token in lc's token log (tokens not
// noted count as failed rounds' in closeAndCheck).
func semTry(ctx context.Context, lc *lockClient, s *redlock.Semaphore) (*redlock.Lock, error) {
	l, err := s.TryAcquire(ctx)
	lc.won(l, err)
	return l, err
}

// semaphore returns lc's semaphore name of k permits or fails the test.
func semaphore(t *testing.T, lc *lockClient, name string, k int, opts ...redlock.Option) *redlock.Semaphore {
	t.Helper()
	s, err := lc.Semaphore(name, k, opts...)
	if err != nil {
		t.Fatalf("%s: Semaphore(%q, %d): %v", lc.name, name, k, err)
	}
	return s
}

// permitHolders returns, per permit of name (k of them), the nodes whose
// permit key holds token.
func permitHolders(t *testing.T, admins []*redis.Client, name string, k int, token string) map[int][]int {
	t.Helper()
	out := map[int][]int{}
	for p := range k {
		for i, cl := range admins {
			if get(t, cl, permitKey(name, p)) == token {
				out[p] = append(out[p], i)
			}
		}
	}
	return out
}

// semNoToken waits until no node holds token on any permit key of name,
// and fails the test if that takes longer than bound after at.
func semNoToken(t *testing.T, admins []*redis.Client, name string, k int, token, what string, at time.Time, bound time.Duration) {
	t.Helper()
	for {
		left := permitHolders(t, admins, name, k, token)
		if len(left) == 0 {
			t.Logf("%s: gone from every node %v after it landed", what, time.Since(at).Round(time.Millisecond))
			return
		}
		if time.Since(at) > bound {
			t.Fatalf("%s: still on nodes %v (permit: nodes) %v after it landed, beyond the leftover bound %v", what, left, time.Since(at).Round(time.Millisecond), bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countBounded fails the test unless the count key of name is absent or
// declares want and expires within ttl on every node in idx.
func countBounded(t *testing.T, admins []*redis.Client, idx []int, name, want string, ttl time.Duration) {
	t.Helper()
	for _, i := range idx {
		v, ms := getTTL(t, admins[i], countKey(name))
		if v == "" {
			continue
		}
		if v != want || ms <= 0 || ms > ttl.Milliseconds() {
			t.Errorf("node%d: count key of %s = %q with PTTL %dms; want %q expiring within %v", i, name, v, ms, want, ttl)
		}
	}
}

// newFailedToken returns the one token of lc's log that failed and is not
// in before.
func semFailedToken(t *testing.T, lc *lockClient, before map[string]bool) string {
	t.Helper()
	var out []string
	for tok := range lc.tokens.failed() {
		if !before[tok] {
			out = append(out, tok)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%s: %d new failed tokens (%v), want the one of the failed round", lc.name, len(out), out)
	}
	return out[0]
}

type semRig struct {
	c      *cluster
	ctx    context.Context
	admins []*redis.Client
}

// TestSemaphore runs the subtests above on one cluster.
func TestSemaphore(t *testing.T) {
	c := startCluster(t, semTTL, "")
	r := &semRig{c: c, ctx: ctxT(t, 2*time.Minute), admins: c.admins(t)}
	t.Run("Holders", r.holders)
	t.Run("LateAcquire", r.lateAcquire)
	t.Run("CountMismatch", r.countMismatch)
	t.Run("AutoExtend", r.autoExtend)
	t.Run("Nodes", r.nodes)
}

// Holders: k = 3 permits over four Clients. Three take distinct permits,
// each on every node, with the count declared; the fourth is refused
// (ErrNotAcquired, not a mismatch). A release lets the fourth take the
// released permit. An Acquire started while all are held returns only
// after a release began, with the released permit: never a (k+1)th holder.
func (r *semRig) holders(t *testing.T) {
	const k, name = 3, "sem-holders"
	lcs := r.c.warmClients(t, r.ctx, []redlock.Option{redlock.WithTTL(semTTL)}, numbered("holder", k+1)...)
	sems := make([]*redlock.Semaphore, len(lcs))
	for i, lc := range lcs {
		sems[i] = semaphore(t, lc, name, k)
	}
	held := make([]*redlock.Lock, k)
	seen := map[int]bool{}
	for i := range k {
		l, err := semTry(r.ctx, lcs[i], sems[i])
		if err != nil {
			t.Fatalf("%s: TryAcquire with %d of %d permits held: %v", lcs[i].name, i, k, err)
		}
		if p := l.Permit(); p < 0 || p >= k || seen[p] {
			t.Fatalf("%s: permit %d; taken so far %v", lcs[i].name, p, seen)
		}
		if l.Key() != name {
			t.Errorf("Key() = %q, want %q", l.Key(), name)
		}
		seen[l.Permit()] = true
		held[i] = l
		// Before the next holder tries: a round is decided once a quorum
		// answered, and a permit command still on its way to a node can
		// be overtaken there by the next holder's try of the same permit,
		// which then holds it on that node until its roll-back.
		eventuallyAllKey(t, r.admins, permitKey(name, l.Permit()), l.Token())
	}
	countBounded(t, r.admins, all(), name, strconv.Itoa(k), semTTL)
	for i := range r.admins {
		if v := get(t, r.admins[i], countKey(name)); v != strconv.Itoa(k) {
			t.Errorf("node%d: count key = %q with %d permits held, want %d", i, v, k, k)
		}
	}
	last := lcs[k]
	_, err := semTry(r.ctx, last, sems[k])
	if !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrPermitMismatch) {
		t.Fatalf("%s: TryAcquire with all %d permits held: %v, want ErrNotAcquired", last.name, k, err)
	}
	freed := held[1].Permit()
	if err := held[1].Release(r.ctx); err != nil {
		t.Fatal(err)
	}
	l, err := semTry(r.ctx, last, sems[k])
	if err != nil {
		t.Fatalf("%s: TryAcquire after permit %d was released: %v", last.name, freed, err)
	}
	if l.Permit() != freed {
		t.Fatalf("%s: took permit %d, but only %d was free", last.name, l.Permit(), freed)
	}
	held[1] = l

	// Acquire waits while all k are held, and is woken by a release.
	type result struct {
		l   *redlock.Lock
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		l, err := sems[1].Acquire(r.ctx)
		lcs[1].won(l, err)
		done <- result{l, err, time.Now()}
	}()
	select {
	case res := <-done:
		t.Fatalf("Acquire returned (%v, %v) while all %d permits were held", res.l, res.err, k)
	case <-time.After(300 * time.Millisecond):
	}
	freed = held[0].Permit()
	relAt := time.Now()
	if err := held[0].Release(r.ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatalf("Acquire after a release: %v", res.err)
	}
	if res.at.Before(relAt) || res.l.Permit() != freed {
		t.Fatalf("Acquire took permit %d %v after the release of %d began: a (k+1)th holder", res.l.Permit(), res.at.Sub(relAt), freed)
	}
	t.Logf("Acquire took permit %d %v after its release began", freed, res.at.Sub(relAt).Round(time.Millisecond))
	held[0] = res.l
	for _, l := range held {
		if ok, err := l.Held(r.ctx); !ok || err != nil {
			t.Errorf("permit %d: Held = %v, %v", l.Permit(), ok, err)
		}
		if err := l.Release(r.ctx); err != nil {
			t.Errorf("permit %d: Release: %v", l.Permit(), err)
		}
	}
}

// eventuallyAllKey waits until every node holds token under the Redis key
// rk.
func eventuallyAllKey(t *testing.T, admins []*redis.Client, rk, token string) {
	t.Helper()
	eventually(t, 5*time.Second, 5*time.Millisecond, fmt.Sprintf("%q = %q on all nodes", rk, token), func() bool {
		for _, cl := range admins {
			if get(t, cl, rk) != token {
				return false
			}
		}
		return true
	})
}

// LateAcquire: a's TryAcquire of a 1-permit semaphore has its commands to
// nodes 0, 1 and 2 held in the links (HoldOpen): it fails, and its roll-back
// (on new connections) finds nothing there. Then, while the commands are
// still held:
//
//   - taken: b takes the permit (on every node) and holds it while they are
//     delivered: they find b's token and change nothing; b's permit and the
//     count stay as they were, and a's token is nowhere.
//   - released: b takes the permit and releases it before they are
//     delivered: they take the free permit on a quorum (a holder nobody
//     knows of); its token must be gone from every node within the leftover
//     bound (docs/design.md, case 2), and the count key written with it must
//     expire within its TTL. b then takes the permit again.
//
// With k = 1 the failed TryAcquire tries no other permit (with k ≥ 2 it
// would try one on new connections, which HoldOpen lets through).
func (r *semRig) lateAcquire(t *testing.T) {
	opts := []redlock.Option{redlock.WithTTL(semTTL), redlock.WithNodeTimeout(semNodeTimeout)}
	a, ps, _ := r.c.proxied(t, r.ctx, "a", opts...)
	b := r.c.warmClients(t, r.ctx, []redlock.Option{redlock.WithTTL(semTTL)}, "b")[0]
	slow := []int{0, 1, 2}
	for _, released := range []bool{false, true} {
		name := fmt.Sprintf("sem-late-%v", map[bool]string{false: "taken", true: "released"}[released])
		sa, sb := semaphore(t, a, name, 1, opts...), semaphore(t, b, name, 1)
		// Warm a's scripts and links, and let every command of it land
		// before the hold (a command still in flight on a held link makes
		// the pool dial a new connection, which HoldOpen lets through).
		l, err := semTry(r.ctx, a, sa)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(r.ctx); err != nil {
			t.Fatal(err)
		}
		eventuallyGoneKey(t, r.admins, permitKey(name, 0))
		before := a.tokens.failed()
		for _, i := range slow {
			ps[i].Hold(testkit.HoldOpen)
		}
		_, err = semTry(r.ctx, a, sa)
		checkFailedRound(t, err, slow, redlock.OutcomeTimeout)
		token := semFailedToken(t, a, before)
		for _, i := range slow {
			if ps[i].Held() == 0 {
				t.Fatalf("node%d: nothing of a's held", i)
			}
		}
		lb, err := semTry(r.ctx, b, sb)
		if err != nil {
			t.Fatalf("b: TryAcquire while a's acquire is held: %v", err)
		}
		eventuallyAllKey(t, r.admins, permitKey(name, 0), lb.Token())
		if released {
			if err := lb.Release(r.ctx); err != nil {
				t.Fatal(err)
			}
			eventuallyGoneKey(t, r.admins, permitKey(name, 0))
		}
		pttlBefore := make([]int64, nodes)
		for i, cl := range r.admins {
			pttlBefore[i] = pttl(t, cl, permitKey(name, 0))
		}
		for _, i := range slow {
			ps[i].Deliver()
		}
		landed := time.Now()
		on := permitHolders(t, r.admins, name, 1, token)[0]
		t.Logf("%s: a's late acquire on nodes %v right after its delivery", name, on)
		if !released {
			time.Sleep(2 * semNodeTimeout) // the delivered commands run (their replies go nowhere)
			for i, cl := range r.admins {
				if v := get(t, cl, permitKey(name, 0)); v != lb.Token() {
					t.Errorf("node%d: permit 0 = %q after a's late acquire landed, want b's %q", i, v, lb.Token())
				}
				if ms := pttl(t, cl, permitKey(name, 0)); ms <= 0 || ms > pttlBefore[i] {
					t.Errorf("node%d: b's permit has PTTL %dms after a's late acquire landed (%dms before)", i, ms, pttlBefore[i])
				}
				if v := get(t, cl, countKey(name)); v != "1" {
					t.Errorf("node%d: count key = %q while b holds the permit", i, v)
				}
			}
			if ok, err := lb.Held(r.ctx); !ok || err != nil {
				t.Fatalf("b: Held = %v, %v after a's late acquire landed", ok, err)
			}
			if len(on) > 0 {
				t.Fatalf("a's token of a failed acquire is on nodes %v, where b held the permit", on)
			}
			if err := lb.Release(r.ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		semNoToken(t, r.admins, name, 1, token, "a's late permit", landed, multiLeftover)
		countBounded(t, r.admins, all(), name, "1", semTTL)
		l, err = semTry(r.ctx, b, sb)
		if err != nil {
			t.Fatalf("b: TryAcquire after a's late acquire was cleaned up: %v", err)
		}
		if err := l.Release(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// eventuallyGoneKey waits until no node has the Redis key rk.
func eventuallyGoneKey(t *testing.T, admins []*redis.Client, rk string) {
	t.Helper()
	eventually(t, 5*time.Second, 5*time.Millisecond, fmt.Sprintf("%q gone from all nodes", rk), func() bool {
		for _, cl := range admins {
			if get(t, cl, rk) != "" {
				return false
			}
		}
		return true
	})
}

// CountMismatch: a holds one permit of a 2-permit semaphore on nodes 0, 1
// and 2 only (its links to 3 and 4 cut while it takes it), so only a bare
// quorum declares the count. b, with 3 permits, is refused with
// ErrPermitMismatch although nodes 3 and 4 would admit it (quorums
// intersect), and leaves no permit of its own anywhere; a's permit and the
// count "2" are intact where they were. Once a released and the count key
// it declared lapsed (within the TTL), b's count is admitted.
func (r *semRig) countMismatch(t *testing.T) {
	const name = "sem-count"
	opts := []redlock.Option{redlock.WithTTL(semTTL), redlock.WithNodeTimeout(semNodeTimeout)}
	a, ps, _ := r.c.proxied(t, r.ctx, "a", opts...)
	b := r.c.warmClients(t, r.ctx, opts, "b")[0]
	sa, sb := semaphore(t, a, name, 2, opts...), semaphore(t, b, name, 3, opts...)
	for _, i := range []int{3, 4} {
		ps[i].Blackhole(true)
	}
	la, err := semTry(r.ctx, a, sa)
	for _, i := range []int{3, 4} {
		ps[i].Blackhole(false)
	}
	if err != nil {
		t.Fatalf("a: TryAcquire with 3 of 5 links: %v", err)
	}
	aOn := permitHolders(t, r.admins, name, 2, la.Token())[la.Permit()]
	if len(aOn) != 3 {
		t.Fatalf("a's permit on nodes %v, want exactly 0, 1, 2", aOn)
	}
	before := b.tokens.failed()
	for try := range 3 {
		_, err := semTry(r.ctx, b, sb)
		if !errors.Is(err, redlock.ErrPermitMismatch) {
			t.Fatalf("b (3 permits) TryAcquire %d while a holds one of 2 on a quorum: %v, want ErrPermitMismatch", try, err)
		}
	}
	_, err = sb.Acquire(ctxT(t, time.Second))
	if !errors.Is(err, redlock.ErrPermitMismatch) {
		t.Fatalf("b: Acquire: %v, want ErrPermitMismatch", err)
	}
	t.Logf("b: %v", err)
	failed := map[string]bool{}
	for tok := range b.tokens.failed() {
		if !before[tok] {
			failed[tok] = true
		}
	}
	// Nothing of b's on any node (a round that won anyway is given back).
	eventually(t, multiLeftover, 10*time.Millisecond, "b's permits gone", func() bool {
		for tok := range failed {
			if len(permitHolders(t, r.admins, name, 3, tok)) > 0 {
				return false
			}
		}
		return true
	})
	for _, i := range aOn {
		if v := get(t, r.admins[i], permitKey(name, la.Permit())); v != la.Token() {
			t.Errorf("node%d: a's permit = %q after b's attempts", i, v)
		}
		if v := get(t, r.admins[i], countKey(name)); v != "2" {
			t.Errorf("node%d: count key = %q after b's attempts, want a's 2", i, v)
		}
	}
	// Nodes 3 and 4 had no count: b's refused attempts may have declared
	// 3 there, for at most the TTL.
	countBounded(t, r.admins, []int{3, 4}, name, "3", semTTL)
	if ok, err := la.Held(r.ctx); !ok || err != nil {
		t.Fatalf("a: Held = %v, %v", ok, err)
	}
	if err := la.Release(r.ctx); err != nil {
		t.Fatal(err)
	}
	_, err = semTry(r.ctx, b, sb)
	t.Logf("b right after a's release: %v", err)
	took := eventually(t, semTTL+time.Second, 20*time.Millisecond, "b's count admitted once a's declaration lapsed", func() bool {
		l, err := semTry(r.ctx, b, sb)
		if err == nil {
			_ = l.Release(r.ctx)
		}
		return err == nil
	})
	t.Logf("b admitted %v after a's release", took.Round(time.Millisecond))
}

// AutoExtend: a permit acquired WithAutoExtend with a short TTL is held
// for several TTLs; its extends keep the count key alive with it, so
// another count is still refused then, and the permit is still held.
func (r *semRig) autoExtend(t *testing.T) {
	const name, ttl = "sem-auto", time.Second
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(semNodeTimeout)}
	lcs := r.c.warmClients(t, r.ctx, opts, "a", "b")
	sa := semaphore(t, lcs[0], name, 2, append(opts, redlock.WithAutoExtend(true))...)
	sb := semaphore(t, lcs[1], name, 1, opts...)
	l, err := semTry(r.ctx, lcs[0], sa)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl)
	if err := l.Err(); err != nil {
		t.Fatalf("auto-extended permit after 3 TTLs: %v", err)
	}
	_, err = semTry(r.ctx, lcs[1], sb)
	if !errors.Is(err, redlock.ErrPermitMismatch) {
		t.Fatalf("another count 3 TTLs after the permit was taken: %v, want ErrPermitMismatch", err)
	}
	n := 0
	for i, cl := range r.admins {
		// One transaction: an extend between two reads would skew them.
		var cv, pv *redis.StringCmd
		var cms, pms *redis.DurationCmd
		_, err := cl.TxPipelined(r.ctx, func(p redis.Pipeliner) error {
			cv, cms = p.Get(r.ctx, countKey(name)), p.PTTL(r.ctx, countKey(name))
			pv, pms = p.Get(r.ctx, permitKey(name, l.Permit())), p.PTTL(r.ctx, permitKey(name, l.Permit()))
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("node%d: %v", i, err)
		}
		if pv.Val() == l.Token() {
			n++
			if cv.Val() != "2" || cms.Val() < pms.Val() {
				t.Errorf("node%d: count key %q PTTL %v, permit PTTL %v: the count must live as long as the permit", i, cv.Val(), cms.Val(), pms.Val())
			}
		}
	}
	if n < nodes/2+1 {
		t.Errorf("the auto-extended permit is on %d nodes", n)
	}
	if ok, err := l.Held(r.ctx); !ok || err != nil {
		t.Fatalf("Held = %v, %v", ok, err)
	}
	if err := l.Release(r.ctx); err != nil {
		t.Fatal(err)
	}
}

// Nodes: with nodes 0, 1 and 2 paused, TryAcquire fails (ErrNotAcquired)
// and leaves no permit on the reachable nodes; when they resume, the
// commands queued in their sockets run, and the failed token is gone from
// every node within the leftover bound. With nodes 3 and 4 killed (the
// others resumed), TryAcquire, Held and Release work.
func (r *semRig) nodes(t *testing.T) {
	const name = "sem-nodes"
	opts := []redlock.Option{redlock.WithTTL(semTTL), redlock.WithNodeTimeout(semNodeTimeout)}
	a := r.c.warmClients(t, r.ctx, opts, "a")[0]
	s := semaphore(t, a, name, 2, opts...)
	before := a.tokens.failed()
	paused := []int{0, 1, 2}
	for _, i := range paused {
		if err := r.c.Node(i).Pause(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := semTry(r.ctx, a, s)
	if err == nil || !errors.Is(err, redlock.ErrNotAcquired) && !errors.Is(err, redlock.ErrUnavailable) {
		t.Errorf("TryAcquire with 3 of 5 nodes paused: %v, want ErrNotAcquired or ErrUnavailable", err)
	}
	t.Logf("with 3 of 5 paused: %v", err)
	failed := map[string]bool{}
	for tok := range a.tokens.failed() {
		if !before[tok] {
			failed[tok] = true
		}
	}
	live := []*redis.Client{r.admins[3], r.admins[4]}
	eventually(t, multiLeftover, 10*time.Millisecond, "no failed permit on the running nodes", func() bool {
		for tok := range failed {
			if len(permitHolders(t, live, name, 2, tok)) > 0 {
				return false
			}
		}
		return true
	})
	countBounded(t, r.admins, []int{3, 4}, name, "2", semTTL)
	for _, i := range paused {
		if err := r.c.Node(i).Resume(); err != nil {
			t.Fatal(err)
		}
	}
	resumed := time.Now()
	for tok := range failed {
		semNoToken(t, r.admins, name, 2, tok, "a failed acquire's permit", resumed, multiLeftover)
	}
	countBounded(t, r.admins, all(), name, "2", semTTL)

	for _, i := range []int{3, 4} {
		if err := r.c.Node(i).Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for try := range 2 {
		l, err := semTry(r.ctx, a, s)
		if err != nil {
			t.Fatalf("TryAcquire %d with 2 of 5 nodes killed: %v", try, err)
		}
		if ok, err := l.Held(r.ctx); !ok || err != nil {
			t.Fatalf("Held = %v, %v with 2 of 5 nodes killed", ok, err)
		}
		if err := l.Release(r.ctx); err != nil {
			t.Fatalf("Release with 2 of 5 nodes killed: %v", err)
		}
	}
}
