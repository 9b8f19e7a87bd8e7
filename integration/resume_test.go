package integration

// Client.Resume on real Redis (redlock/resume.go, internal/scripts/resume.lua):
// a lock taken up again from its token by another Client, with nodes killed,
// paused or cut off, and with resume commands that land late, after the
// caller moved on (the design brief's first rule):
//
//	TestResumeLateAfterRelease       a resume landing after the resumed lock's Release re-creates nothing
//	TestResumeLateAfterExpiry        resumes landing after the lock expired create nothing
//	TestResumeTwoOfFiveKilled        a quorum of live nodes suffices; the lock is then usable
//	TestResumeThreeOfFivePaused      too few nodes: ErrNotHeld, and no key appears, late landings included
//	TestResumeHandsLockAcrossClients a lock survives its holder's Client and passes to another by token
//	TestResumeRefusesSessionLock     a renewal-session lock's token is refused and its keys untouched

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

const (
	// resumedTTL is the TTL the resuming client asks for: long against the
	// tests, so that a key a resume wrongly made or lengthened stands out.
	resumedTTL = 10 * time.Second
	// resumerNodeTimeout is the node timeout of the resuming client, whose
	// commands the tests hold in its links.
	resumerNodeTimeout = 100 * time.Millisecond
)

// resumeRig is the set-up of most Resume tests: a cluster, its admin
// clients, a holder b connected directly, and a resumer a whose links pass
// through a fault proxy per node (ps, in node order); both have verified
// every node, and every node has the resume script cached (warmResume).
type resumeRig struct {
	c      *cluster
	ctx    context.Context
	admins []*redis.Client
	ps     []*testkit.Proxy
	a, b   *lockClient
}

func newResumeRig(t *testing.T) *resumeRig {
	t.Helper()
	r := &resumeRig{c: startCluster(t, resumedTTL, ""), ctx: ctxT(t, 90*time.Second)}
	r.admins = r.c.admins(t)
	var via func(int) *redis.Options
	r.ps, via = r.c.proxyEach(t)
	r.a = r.c.newLockClient(t, "a", via, redlock.WithTTL(resumedTTL), redlock.WithNodeTimeout(resumerNodeTimeout))
	r.b = r.c.newLockClient(t, "b", r.c.direct, redlock.WithTTL(resumedTTL), redlock.WithNodeTimeout(patient))
	warmResume(t, r.ctx, r.admins, r.b, r.a)
	return r
}

// warmResume has resumer resume a lock of holder's and release it, so that
// resumer has verified every node and every node has the resume script
// cached: a late EVALSHA of it then runs, instead of failing with NOSCRIPT
// (which would make a late-landing test pass without testing anything).
func warmResume(t *testing.T, ctx context.Context, admins []*redis.Client, holder, resumer *lockClient) {
	t.Helper()
	const key = "resume-warm-up"
	lb, err := holder.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("%s: warm-up TryLock: %v", holder.name, err)
	}
	l, err := resumer.Resume(ctx, key, lb.Token(), redlock.WithNodeTimeout(patient))
	if err != nil {
		t.Fatalf("%s: warm-up Resume: %v", resumer.name, err)
	}
	// Resume returned at a quorum. A release sent while the resume is still
	// on its way to a node goes there once it has answered, and is sent
	// again in the background for a TTL and more (a release of unknown
	// fate): commands of resumer's that a test's hold would catch instead
	// of the one it means to hold (see quiet).
	allAnswered(t, ctx, resumer)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("%s: warm-up Release of the resumed lock: %v", resumer.name, err)
	}
	// Two handles on one lock: releasing one released it for the other.
	if err := lb.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("%s: Release of a lock the resumed handle released: %v, want ErrNotHeld", holder.name, err)
	}
	sha := scripts.Resume.Hash()
	eventually(t, 10*time.Second, 10*time.Millisecond, "the resume script cached on every node", func() bool {
		for _, cl := range admins {
			if ok, err := cl.ScriptExists(ctx, sha).Result(); err != nil || !ok[0] {
				return false
			}
		}
		return true
	})
}

// hold makes b take key (with opts), or fails the test.
func (r *resumeRig) hold(t *testing.T, key string, opts ...redlock.Option) *redlock.Lock {
	t.Helper()
	l, err := r.b.TryLock(r.ctx, key, opts...)
	if err != nil {
		t.Fatalf("b: TryLock(%q): %v", key, err)
	}
	return l
}

// deliverLate delivers what the proxies of the nodes idx hold, and waits
// until each of those nodes has run a script more than before: the held
// resume has landed.
func (r *resumeRig) deliverLate(t *testing.T, idx ...int) {
	t.Helper()
	before := make([]int64, len(r.admins))
	for _, i := range idx {
		before[i] = scriptCalls(t, r.admins[i])
		if r.ps[i].Deliver() == 0 {
			t.Fatalf("node%d: nothing held in its link was delivered", i)
		}
	}
	eventually(t, 10*time.Second, 5*time.Millisecond, "the held resumes run", func() bool {
		return !slices.ContainsFunc(idx, func(i int) bool { return scriptCalls(t, r.admins[i]) == before[i] })
	})
}

// quiet returns once no command of a's is in flight, so that a hold
// applied next catches a's next command on the connection it is written
// on. HoldOpen holds only the connections open when it is applied, and a
// node's Pool writes a command on a new connection when the ones it has are
// busy: with an earlier command of a's caught in the link, the command the
// test means to hold went out on a new connection and landed at once (or
// waited behind the caught one and was never written), and the test passed
// without its scenario, or failed. Under load, a quarter of the runs of
// TestResumeLateAfterExpiry had such a command: a background re-send of
// the warm-up's release, which warmResume now leaves none of. Nothing else
// of a's runs in the background, and allAnswered waits out what is in
// flight.
func (r *resumeRig) quiet(t *testing.T) {
	t.Helper()
	allAnswered(t, r.ctx, r.a)
}

// allAnswered returns once lc has had an answer from every node to a
// command sent after all its earlier ones: an Inspect, which waits for
// every node, and whose command to a node is written once lc's command in
// flight there has answered.
func allAnswered(t *testing.T, ctx context.Context, lc *lockClient) {
	t.Helper()
	in, err := lc.Inspect(ctx, "resume-quiet", redlock.WithNodeTimeout(patient))
	if err != nil {
		t.Fatalf("%s: Inspect to let every earlier command answer: %v", lc.name, err)
	}
	for i, n := range in.Nodes {
		if n.Err != nil {
			t.Fatalf("premise: node%d did not answer %s's Inspect: %v", i, lc.name, n.Err)
		}
	}
}

// holdOpen holds what a writes on its open connections to the nodes idx
// (HoldOpen), checks that nothing of an earlier call of a's was caught,
// and returns how many connections each of those proxies had accepted.
func (r *resumeRig) holdOpen(t *testing.T, idx ...int) []int64 {
	t.Helper()
	dialled := make([]int64, len(r.ps))
	for _, i := range idx {
		dialled[i] = r.ps[i].Accepted()
		r.ps[i].Hold(testkit.HoldOpen)
	}
	for _, i := range idx {
		if n := r.ps[i].Held(); n != 0 {
			t.Fatalf("premise: node%d's link caught %d bytes of an earlier call of a's: a command was still in flight", i, n)
		}
	}
	return dialled
}

// heldOnOpenLinks checks that a dialled no connection to the nodes idx
// since holdOpen returned dialled: every command it wrote to them since
// went out on a connection the hold applies to, and is held.
func (r *resumeRig) heldOnOpenLinks(t *testing.T, dialled []int64, idx ...int) {
	t.Helper()
	for _, i := range idx {
		if n := r.ps[i].Accepted(); n != dialled[i] {
			t.Fatalf("premise: a dialled node%d %d times while its link was held: what it sent there on a new connection was not held", i, n-dialled[i])
		}
	}
}

// mustBeFree fails the test for every node that holds the lock key of key.
func mustBeFree(t *testing.T, admins []*redis.Client, key, why string) {
	t.Helper()
	for i, cl := range admins {
		if v := get(t, cl, rkey(key)); v != "" {
			t.Errorf("node%d: %s = %q (PTTL %dms) %s; want the key absent", i, rkey(key), v, pttl(t, cl, rkey(key)), why)
		}
	}
}

// TestResumeLateAfterRelease: a resume command that lands on a node after
// the resumed lock's Release has run there re-creates nothing.
//
// b holds the key; a resumes it by token while node0's link holds what a
// writes (HoldOpen): a wins on the four other nodes. a releases the lock:
// the delete reaches node0 on a new connection once the held call has
// failed, and node0 is free. a's Client is then closed, so that none of its
// clean-up is left to repair anything, and the held resume is delivered to
// node0: it must find the key free and leave it free, as on every node.
func TestResumeLateAfterRelease(t *testing.T) {
	r := newResumeRig(t)
	const key = "late-resume-release"
	lb := r.hold(t, key)
	r.quiet(t)
	dialled := r.holdOpen(t, 0)
	la, err := r.a.Resume(r.ctx, key, lb.Token(), redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatalf("a.Resume with node0's link held: %v; want it won on the four other nodes", err)
	}
	// Resume returns at a quorum: node0's command may still be on its way
	// to the link. The release below, sent once it has failed, is the
	// next command of a's to node0.
	eventually(t, 5*time.Second, time.Millisecond, "a's resume held in node0's link (premise)", func() bool { return r.ps[0].Held() > 0 })
	r.heldOnOpenLinks(t, dialled, 0)
	if err := la.Release(r.ctx); err != nil {
		t.Fatalf("a: Release of the resumed lock: %v", err)
	}
	took := eventually(t, 10*time.Second, 10*time.Millisecond, "a's release run on node0 (premise)", func() bool {
		return get(t, r.admins[0], rkey(key)) == ""
	})
	t.Logf("node0 free %v after the release returned; %d bytes of a's still held in its link", took.Round(time.Millisecond), r.ps[0].Held())
	if err := lb.Release(r.ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("b: Release of the lock a resumed and released: %v, want ErrNotHeld", err)
	}
	r.a.closeAndCheck(t)
	r.deliverLate(t, 0)
	mustBeFree(t, r.admins, key, "after a resume landed late, after the resumed lock's release")
}

// TestResumeLateAfterExpiry: resume commands that land after the lock
// expired create nothing.
//
// b holds the key for 1.5 s; a resumes it (for 10 s) while every link of
// a's holds what a writes: the resume times out on every node and fails
// with ErrNotHeld. Once b's key has expired on every node, the held resumes
// are delivered: no node may hold the key afterwards (a failed Resume
// cleans nothing up, so only the script keeps them from creating it), and
// another client acquires it at once.
func TestResumeLateAfterExpiry(t *testing.T) {
	r := newResumeRig(t)
	const key = "late-resume-expiry"
	lb := r.hold(t, key, redlock.WithTTL(1500*time.Millisecond))
	r.quiet(t)
	dialled := r.holdOpen(t, all()...)
	_, err := r.a.Resume(r.ctx, key, lb.Token())
	t.Logf("a.Resume with every link held: %v", err)
	if !errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrSessionToken) {
		t.Fatalf("a.Resume with every link held: %v; want ErrNotHeld (and no ErrSessionToken)", err)
	}
	for i, n := range asQuorumError(t, err).Nodes {
		if n.Outcome != redlock.OutcomeTimeout {
			t.Errorf("node%d: outcome %v, want timeout", i, n.Outcome)
		}
		if r.ps[i].Held() == 0 {
			t.Fatalf("premise: node%d's link holds nothing of a's: the resume was not held", i)
		}
	}
	r.heldOnOpenLinks(t, dialled, all()...)
	eventuallyGone(t, r.admins, key) // b's 1.5 s have run out
	r.deliverLate(t, all()...)
	mustBeFree(t, r.admins, key, "after resumes landed late, after the lock expired")
	l, err := r.b.TryLock(r.ctx, key)
	if err != nil {
		t.Fatalf("b: TryLock after the late resumes landed: %v", err)
	}
	if err := l.Release(r.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestResumeTwoOfFiveKilled: with two of five nodes killed, Resume confirms
// the token on the three live ones and lengthens the key there from the
// holder's 3 s to the resumer's 10 s; the resumed lock's deadline leaves
// the drift allowance before those copies expire. A second Resume asking
// for 1 s does not shorten them. The lock is usable: Held, Extend and
// Release succeed, and the live nodes are free after the release; the
// original handle then finds the lock gone (ErrNotHeld).
func TestResumeTwoOfFiveKilled(t *testing.T) {
	const holderTTL = 3 * time.Second
	r := newResumeRig(t)
	const key = "resume-two-killed"
	lb := r.hold(t, key, redlock.WithTTL(holderTTL))
	live := []int{0, 2, 4}
	for _, i := range []int{1, 3} {
		if err := r.c.Node(i).Kill(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	la, err := r.a.Resume(r.ctx, key, lb.Token(), redlock.WithNodeTimeout(patient))
	ret := time.Now()
	if err != nil {
		t.Fatalf("a.Resume with nodes 1 and 3 killed: %v", err)
	}
	if la.Key() != key || la.Token() != lb.Token() || la.Fence() != 0 || la.Err() != nil {
		t.Errorf("resumed lock: Key %q, Token %q, Fence %d, Err %v; want %q, b's token %q, 0, nil", la.Key(), la.Token(), la.Fence(), la.Err(), key, lb.Token())
	}
	checkDeadline(t, la, start, ret, resumedTTL, 0, r.admins, live)
	r.c.mustHoldAll(t, r.admins, live, key, lb.Token(), holderTTL.Milliseconds(), resumedTTL.Milliseconds())
	if _, err := r.a.Resume(r.ctx, key, lb.Token(), redlock.WithTTL(time.Second), redlock.WithNodeTimeout(patient)); err != nil {
		t.Fatalf("a.Resume for 1 s: %v", err)
	}
	r.c.mustHoldAll(t, r.admins, live, key, lb.Token(), (resumedTTL / 2).Milliseconds(), resumedTTL.Milliseconds())
	usable(t, r.ctx, la)
	for _, i := range live {
		if v := get(t, r.admins[i], rkey(key)); v != "" {
			t.Errorf("node%d: %s = %q after the resumed lock's release", i, rkey(key), v)
		}
	}
	if err := lb.Release(r.ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("b: Release of the lock a resumed and released: %v, want ErrNotHeld", err)
	}
}

// usable checks that the resumed lock l is held, extends and releases.
func usable(t *testing.T, ctx context.Context, l *redlock.Lock) {
	t.Helper()
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Fatalf("resumed lock: Held = %v, %v", ok, err)
	}
	before := l.Deadline()
	if err := l.Extend(ctx, 0); err != nil {
		t.Fatalf("resumed lock: Extend: %v", err)
	}
	if !l.Deadline().After(before) {
		t.Errorf("resumed lock: Extend did not move the deadline (%v, before %v)", l.Deadline(), before)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("resumed lock: Release: %v", err)
	}
}

// lockValues returns, per node, every lock key on it and its value.
func lockValues(t *testing.T, admins []*redis.Client) []map[string]string {
	t.Helper()
	out := make([]map[string]string, len(admins))
	for i, cl := range admins {
		out[i] = map[string]string{}
		for _, k := range lockKeys(t, cl) {
			out[i][k] = get(t, cl, k)
		}
	}
	return out
}

// pauseNodes pauses the nodes idx, and registers their resumption to run
// before the clean-up registered earlier (the clients' and the cluster's).
func pauseNodes(t *testing.T, c *cluster, idx ...int) {
	t.Helper()
	t.Cleanup(func() {
		for _, i := range idx {
			_ = c.Node(i).Resume()
		}
	})
	for _, i := range idx {
		if err := c.Node(i).Pause(); err != nil {
			t.Fatal(err)
		}
	}
}

// resumeCase is one Resume of TestResumeThreeOfFivePaused.
type resumeCase struct{ key, token, what string }

// TestResumeThreeOfFivePaused: with three of five nodes paused, Resume
// fails with ErrNotHeld (not ErrSessionToken), the paused nodes timing
// out, for a lock that is held, one that was released and a token never
// used. Once the nodes resume and have run the resume commands queued in
// their sockets (late landings), every node holds exactly the lock keys,
// with the values, it held before: no key appeared anywhere.
func TestResumeThreeOfFivePaused(t *testing.T) {
	r := newResumeRig(t)
	held := r.hold(t, "paused-held")
	gone := r.hold(t, "paused-released")
	if err := gone.Release(r.ctx); err != nil {
		t.Fatal(err)
	}
	eventuallyGone(t, r.admins, "paused-released")
	// The first resume is the one sure to be written to the paused nodes
	// (later ones may find the node's connections busy and never be sent):
	// it is the one whose late landing must not create a key.
	cases := []resumeCase{
		{"paused-released", gone.Token(), "a released lock"},
		{"paused-never", "never-a-lock-token", "a token never used"},
		{"paused-held", held.Token(), "a held lock"},
	}
	before := lockValues(t, r.admins)
	paused := []int{0, 2, 4}
	calls := make([]int64, len(r.admins))
	for _, i := range paused {
		calls[i] = scriptCalls(t, r.admins[i])
	}
	pauseNodes(t, r.c, paused...)
	for _, rc := range cases {
		r.failedResume(t, rc, paused)
	}
	for _, i := range paused {
		if err := r.c.Node(i).Resume(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, 10*time.Millisecond, "the queued resumes run on the resumed nodes", func() bool {
		return !slices.ContainsFunc(paused, func(i int) bool { return scriptCalls(t, r.admins[i]) == calls[i] })
	})
	after := lockValues(t, r.admins)
	for i := range r.admins {
		if !maps.Equal(before[i], after[i]) {
			t.Errorf("node%d: lock keys before the failed resumes %q, after %q; want them unchanged", i, before[i], after[i])
		}
	}
	if err := held.Release(r.ctx); err != nil {
		t.Fatalf("b: Release after the failed resumes: %v", err)
	}
}

// failedResume checks that a's Resume of rc fails with ErrNotHeld while
// the nodes paused are paused: each of them timed out (or failed), no
// other node failed.
func (r *resumeRig) failedResume(t *testing.T, rc resumeCase, paused []int) {
	t.Helper()
	_, err := r.a.Resume(r.ctx, rc.key, rc.token)
	t.Logf("a.Resume of %s with nodes %v paused: %v", rc.what, paused, err)
	if !errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrSessionToken) {
		t.Fatalf("a.Resume of %s with nodes %v paused: %v; want ErrNotHeld (and no ErrSessionToken)", rc.what, paused, err)
	}
	qe := asQuorumError(t, err)
	if qe.Op != "resume" || qe.Key != rc.key {
		t.Errorf("QuorumError Op %q, Key %q; want resume, %q", qe.Op, qe.Key, rc.key)
	}
	for i, n := range qe.Nodes {
		down := slices.Contains(paused, i)
		switch {
		case down && n.Outcome != redlock.OutcomeTimeout && n.Outcome != redlock.OutcomeError:
			t.Errorf("%s: paused node%d: outcome %v, want timeout or error", rc.what, i, n.Outcome)
		case !down && n.Outcome != redlock.OutcomeOK && n.Outcome != redlock.OutcomeNotHeld:
			t.Errorf("%s: live node%d: outcome %v (%v), want ok or not held", rc.what, i, n.Outcome, n.Err)
		}
	}
}

// TestResumeHandsLockAcrossClients: a lock outlives its holder's Client and
// passes to another Client by its token.
//
// A takes the key for 3 s with WithMetadata("host-a"); then every link of
// A's is cut and A's Client is closed (in the background: with its links
// cut, Close waits out its releases' bounds): its releases are lost, as
// when a holder's host dies. Meanwhile B resumes the lock by A's token (for
// 10 s): the resumed lock carries A's metadata, and a third client C
// cannot take the key. Past A's 3 s, C still cannot, every node holds the
// key, Inspect names A's token and "host-a" as holder, and B still holds
// it. After B's Release the key is free on every node, and C takes it.
func TestResumeHandsLockAcrossClients(t *testing.T) {
	const aTTL = 3 * time.Second
	r := newResumeRig(t)
	const key = "handed-over"
	la, err := r.a.TryLock(r.ctx, key, redlock.WithTTL(aTTL), redlock.WithMetadata("host-a"), redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatalf("A: TryLock: %v", err)
	}
	eventuallyAll(t, r.admins, key, la.Token()) // TryLock returned at a quorum
	for _, p := range r.ps {
		p.Blackhole(true)
	}
	closed := closeCutOff(t, r.a)
	lb, err := r.b.Resume(r.ctx, key, la.Token())
	if err != nil {
		t.Fatalf("B: Resume of A's lock: %v", err)
	}
	if lb.Metadata() != "host-a" || lb.Token() != la.Token() {
		t.Errorf("resumed lock: Metadata %q, Token %q; want host-a, A's token %q", lb.Metadata(), lb.Token(), la.Token())
	}
	third := r.c.warmClients(t, r.ctx, []redlock.Option{redlock.WithTTL(resumedTTL), redlock.WithNodeTimeout(patient)}, "C")[0]
	takenFrom(t, r.ctx, third, lb, "right after B's resume")
	// Past the end of A's lease: only B's resume keeps the key.
	time.Sleep(time.Until(la.Deadline().Add(drift.Allowance(aTTL, drift.DefaultFactor) + 500*time.Millisecond)))
	takenFrom(t, r.ctx, third, lb, "past A's lease")
	r.c.mustHoldAll(t, r.admins, all(), key, la.Token(), 0, resumedTTL.Milliseconds())
	handedInspection(t, r.ctx, third, key, la)
	if ok, err := lb.Held(r.ctx); !ok || err != nil {
		t.Fatalf("B: Held past A's lease = %v, %v", ok, err)
	}
	if err := lb.Release(r.ctx); err != nil {
		t.Fatalf("B: Release: %v", err)
	}
	eventuallyGone(t, r.admins, key)
	<-closed
	l, err := third.TryLock(r.ctx, key)
	if err != nil {
		t.Fatalf("C: TryLock after B's release: %v", err)
	}
	if err := l.Release(r.ctx); err != nil {
		t.Fatal(err)
	}
}

// closeCutOff closes lc, whose links are cut, on a goroutine, and returns
// a channel closed once it has: Close must report its lock's release as
// failed (ErrNotHeld).
func closeCutOff(t *testing.T, lc *lockClient) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		lc.shutdown(t, func(err error) {
			t.Logf("%s: Close with every link cut took %v: %v", lc.name, time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, redlock.ErrNotHeld) {
				t.Errorf("%s: Close with every link cut = %v; want its release failed (ErrNotHeld)", lc.name, err)
			}
		})
	}()
	t.Cleanup(func() { <-done })
	return done
}

// takenFrom checks, while lb is valid, that c cannot take its key.
func takenFrom(t *testing.T, ctx context.Context, c *lockClient, lb *redlock.Lock, when string) {
	t.Helper()
	if !time.Now().Before(lb.Deadline()) || lb.Err() != nil {
		t.Fatalf("premise: B's resumed lock is no longer valid %s (deadline %v ago, Err %v)", when, time.Since(lb.Deadline()), lb.Err())
	}
	if _, err := c.TryLock(ctx, lb.Key()); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("C: TryLock %s, while B holds the resumed lock: %v, want ErrNotAcquired", when, err)
	}
}

// handedInspection checks what c's Inspect says about key, which B holds
// by A's token la.Token(): held by A's token and A's description.
func handedInspection(t *testing.T, ctx context.Context, c *lockClient, key string, la *redlock.Lock) {
	t.Helper()
	in, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatalf("C: Inspect: %v", err)
	}
	own, meta := ownPart(la.Token())
	if in.State != redlock.StateHeld || in.Holder != own || in.Metadata != meta || meta != "host-a" {
		t.Errorf("C: Inspect: state %v, holder %q (%q); want held by %q (%q)", in.State, in.Holder, in.Metadata, own, "host-a")
	}
}

// TestResumeRefusesSessionLock: a renewal-session lock's token (a Client
// with WithAutoExtend(true), random tokens, Pools of package pool) is
// refused by Resume on real Redis, from another Client and from its own,
// with an error matching ErrSessionToken and ErrNotHeld, even when the
// resume asks for a minute; the lock key keeps its value and its TTL
// within the session lock's own (10 × TTL), the session key within the
// TTL, and the holder still holds the lock.
func TestResumeRefusesSessionLock(t *testing.T) {
	const ttl = 2 * time.Second
	c := startCluster(t, ttl, "")
	admins := c.admins(t)
	ctx := ctxT(t, 30*time.Second)
	s := sessionClient(t, c, c.direct, redlock.WithTTL(ttl))
	other := c.warmClients(t, ctx, []redlock.Option{redlock.WithNodeTimeout(patient)}, "other")[0]
	const key = "resume-session"
	l, err := s.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	was := make([]string, len(admins))
	for i, cl := range admins {
		was[i] = get(t, cl, rkey(key))
		if _, ok := sessionOf(rkey(key), was[i]); !ok {
			t.Fatalf("premise: node%d: %s = %q is no session lock's value", i, rkey(key), was[i])
		}
	}
	for _, who := range []struct {
		name string
		c    *redlock.Client
	}{{"another Client", other.Client}, {"the session's own Client", s}} {
		_, err := who.c.Resume(ctx, key, l.Token(), redlock.WithTTL(time.Minute))
		t.Logf("Resume of a session lock by %s: %v", who.name, err)
		if !errors.Is(err, redlock.ErrSessionToken) || !errors.Is(err, redlock.ErrNotHeld) {
			t.Errorf("Resume of a session lock by %s: %v; want ErrSessionToken and ErrNotHeld", who.name, err)
		}
	}
	for i, cl := range admins {
		v := get(t, cl, rkey(key))
		if v != was[i] {
			t.Errorf("node%d: %s = %q after the refused resumes, was %q", i, rkey(key), v, was[i])
		}
		sk, _ := sessionOf(rkey(key), v)
		if ms := pttl(t, cl, sk); ms <= 0 || ms > ttl.Milliseconds() {
			t.Errorf("node%d: session key %s PTTL %dms, want in (0, %d]", i, sk, ms, ttl.Milliseconds())
		}
		if ms := pttl(t, cl, rkey(key)); ms <= 0 || ms > 10*ttl.Milliseconds() {
			t.Errorf("node%d: session lock key PTTL %dms, want in (0, %d]: the refused resume lengthened it", i, ms, 10*ttl.Milliseconds())
		}
	}
	if ok, err := l.Held(ctx); !ok || err != nil || l.Err() != nil {
		t.Fatalf("the session lock after the refused resumes: Held = %v, %v; Err %v", ok, err, l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventuallyGone(t, admins, key)
}

// ownPart splits a lock token into its own part and the holder's
// description, which follows the byte 0x1d (redlock.Lock.Token).
func ownPart(token string) (own, meta string) {
	own, meta, _ = strings.Cut(token, "\x1d")
	return own, meta
}
