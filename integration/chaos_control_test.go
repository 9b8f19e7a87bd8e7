package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// The control runs break one assumption of docs/safety.md on purpose, in a
// way that makes a second holder certain, and pass only when the checker of
// TestChaosMixed reports the violation: they show that the checker can fail.
// Each also runs the same setup with the protection that closes the hole,
// and there the checker must report nothing.
//
// Layout, for 5 nodes A..E (node0..node4): the holder cannot reach D and E,
// so its lock lives on exactly A, B and C; the rival cannot reach A and B,
// so it sees only C, D and E. The two quorums meet only in C; once C
// forgets the holder's key, the rival's SETs all succeed.

const (
	controlTTL         = 10 * time.Second // nothing expires during a control run
	controlNodeTimeout = 200 * time.Millisecond
)

// TestChaosControlAmnesia restarts C without its data while the holder's
// lock is valid. With the restart guard off, the rival acquires on C, D and
// E: two holders at once (S1), and, since C's fencing counter started again
// from 0, a fence that does not increase (S4): the counters are shared by
// all keys, so the holder first takes 5 other keys on A, B and C, whose
// write-backs D and E never see. With the guard on
// (the default), the rival's pools refuse the freshly restarted C, the
// rival gets 2 of 5 nodes, and nothing is violated.
func TestChaosControlAmnesia(t *testing.T) {
	c := startCluster(t, controlTTL, "")
	dropFenceCounters(t, c)
	ctx := ctxT(t, 60*time.Second)
	t.Run("guard-off", func(t *testing.T) { amnesiaGuardOff(t, ctx, c) })
	t.Run("guard-on", func(t *testing.T) { amnesiaGuardOn(t, ctx, c) })
}

func amnesiaGuardOff(t *testing.T, ctx context.Context, c *cluster) {
	const key = "amnesia-off"
	h := hist.New()
	// The rival warms up first: its warm-up would carry A's, B's and C's
	// counter to D and E.
	rival := rivalOnCDE(t, ctx, c, h, key, false, []pool.Option{pool.WithRestartGuard(0)})
	holder, l1 := holdOnABC(t, ctx, c, h, key, false, 5)
	if err := c.Node(2).Restart(true); err != nil {
		t.Fatal(err)
	}
	l2, _, err := rival.acquire(ctx, key, 2*time.Second)
	if err != nil {
		t.Fatalf("control did not happen: the rival could not acquire on C (forgotten), D, E: %v", err)
	}
	t.Logf("rival acquired too, fence %d (holder's: %d)", l2.Fence(), l1.Fence())
	_, _ = rival.rec.Release(ctx, l2)
	_, _ = holder.rec.Release(ctx, l1)
	r := controlCheck(h, true)
	checkTwoHolders(t, r)
	if r.Count(hist.S4) == 0 {
		t.Errorf("C's counter was lost (fences %d then %d), but the checker reports no S4 violation", l1.Fence(), l2.Fence())
	}
}

func amnesiaGuardOn(t *testing.T, ctx context.Context, c *cluster) {
	const key = "amnesia-on"
	h := hist.New()
	holder, l1 := holdOnABC(t, ctx, c, h, key, false, 0)
	rival := rivalOnCDE(t, ctx, c, h, key, false, nil) // pool.DefaultRestartGuard
	if err := c.Node(2).Restart(true); err != nil {
		t.Fatal(err)
	}
	_, _, err := rival.acquire(ctx, key, time.Second)
	if err == nil {
		t.Fatal("the rival acquired with a freshly restarted C, although its restart guard is on")
	}
	qe := asQuorumError(t, err)
	if n := qe.Nodes[2]; !errors.Is(n.Err, pool.ErrRestarted) {
		t.Errorf("node2 (C): outcome %v, error %v; want an error matching pool.ErrRestarted", n.Outcome, n.Err)
	}
	t.Logf("rival refused: %v", err)
	_, _ = holder.rec.Release(ctx, l1)
	checkClean(t, controlCheck(h, true), "with the restart guard on")
}

// TestChaosControlClockJump emulates a forward clock jump on C by expiring
// the holder's key there early (PEXPIRE 1, sent directly to C): the rival
// acquires on C, D and E while the holder's window is open (S1). Fencing
// still holds (S4): C's counter survived, so the rival's token is greater,
// and the fenced register refuses the holder's next write. Without the
// jump, the same rival cannot acquire and nothing is violated.
func TestChaosControlClockJump(t *testing.T) { jumpControls(t, false, clockJump) }

func clockJump(t *testing.T, ctx context.Context, j *jumpRun) {
	if err := j.nodeC.PExpire(ctx, rkey(j.key), time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, time.Millisecond, "the key expired on C", func() bool { return get(t, j.nodeC, rkey(j.key)) == "" })
	l2, _, err := j.rival.acquire(ctx, j.key, 2*time.Second)
	if err != nil {
		t.Fatalf("control did not happen: the rival could not acquire on C (expired early), D, E: %v", err)
	}
	t.Logf("rival acquired too, fence %d (holder's: %d)", l2.Fence(), j.l1.Fence())
	// Both write the fenced register (on node3, written directly): the
	// rival first, then the holder, still inside its window, whose write
	// must be refused.
	register := j.c.admin(t, 3)
	controlWrite(t, ctx, j.h, register, j.rival, l2, hist.Accepted)
	controlWrite(t, ctx, j.h, register, j.holder, j.l1, hist.Refused)
	j.end(t, ctx, l2)
	r := controlCheck(j.h, true)
	checkTwoHolders(t, r)
	if r.Count(hist.S4) != 0 {
		t.Errorf("a clock jump must not break fencing: %d S4 violations", r.Count(hist.S4))
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "refused 1 writes of holders inside their windows") {
		t.Errorf("the refused write of the holder is not noted: %q", r.Notes)
	}
	checkOneExternal(t, j.audit, "PEXPIRE")
}

// TestChaosControlSessionJump is TestChaosControlClockJump for session
// locks: the holder's session key on C is deleted (its session expired
// early there, as after a forward clock jump), so C no longer holds the
// holder's lock, and the rival takes the key on C, D and E while the
// holder's deadline lies ahead: the checker must report the overlap (S1,
// LIN) from what the chaos clients record (the acquisitions, and the
// deadlines the holder's watcher read). The holder's client notices at its
// next renewal, when C answers that the incarnation is gone, and loses the
// lock. Without the jump, the rival cannot acquire and nothing is reported.
func TestChaosControlSessionJump(t *testing.T) { jumpControls(t, true, sessionJump) }

func sessionJump(t *testing.T, ctx context.Context, j *jumpRun) {
	_, _, sk, ok := node.ParseSession(rkey(j.key), get(t, j.nodeC, rkey(j.key)))
	if !ok {
		t.Fatal("C holds no session lock's value")
	}
	if err := j.nodeC.Del(ctx, sk).Err(); err != nil {
		t.Fatal(err)
	}
	l2, _, err := j.rival.acquire(ctx, j.key, 2*time.Second)
	if err != nil {
		t.Fatalf("control did not happen: the rival could not acquire on C (session ended early), D, E: %v", err)
	}
	t.Logf("rival acquired too, while the holder's deadline is %v ahead", time.Until(j.l1.Deadline()).Round(time.Millisecond))
	// The holder's next renewal finds the incarnation gone on C: with
	// A and B only, it has no quorum, and its lock is lost.
	jumped := time.Now()
	select {
	case <-j.l1.Done():
		t.Logf("holder lost its lock %v after the rival acquired: %v", time.Since(jumped).Round(time.Millisecond), j.l1.Err())
	case <-time.After(controlTTL/3 + 2*controlNodeTimeout + time.Second):
		t.Errorf("the holder still holds its lock a renewal interval after its session ended on C")
	}
	j.end(t, ctx, l2)
	r := controlCheck(j.h, false)
	checkTwoHolders(t, r)
	if r.Count(hist.S2) != 0 {
		t.Errorf("every deadline was backed by its session's confirmations, but S2 reports %d violations", r.Count(hist.S2))
	}
	checkOneExternal(t, j.audit, "DEL")
}

// jumpRun is the set-up of a clock-jump control on key: a holder with l1
// on A, B and C, a rival on C, D and E, an admin client of C, and the
// MONITOR audit of the cluster c.
type jumpRun struct {
	c             *cluster
	key           string
	session       bool // session locks, else fenced ones
	h             *hist.History
	holder, rival *chaosClient
	l1            *redlock.Lock
	nodeC         *redis.Client
	audit         *hist.Audit
	stopAudit     func()
}

// jumpControls runs a clock-jump control (jump) and its twin without the
// jump, each on a jumpRun of its own, on one cluster whose MONITOR audit
// accepts writes from outside the lock scripts (the jump is one).
func jumpControls(t *testing.T, session bool, jump func(t *testing.T, ctx context.Context, j *jumpRun)) {
	c := startCluster(t, controlTTL, "")
	dropFenceCounters(t, c)
	ctx := ctxT(t, 60*time.Second)
	audit, stopAudit := startAudit(t, c, true)
	key := map[bool]string{false: "jump", true: "sjump"}[session]
	setUp := func(t *testing.T, key string) *jumpRun {
		j := &jumpRun{c: c, key: key, session: session, h: hist.New(), audit: audit, stopAudit: stopAudit}
		j.holder, j.l1 = holdOnABC(t, ctx, c, j.h, key, session, 0)
		j.rival = rivalOnCDE(t, ctx, c, j.h, key, session, nil)
		j.nodeC = c.admin(t, 2)
		return j
	}
	t.Run("no-jump", func(t *testing.T) { noJump(t, ctx, setUp(t, key+"-no")) })
	t.Run("jump", func(t *testing.T) { jump(t, ctx, setUp(t, key)) })
}

// noJump: without a jump, the rival cannot take the key, which C still
// holds for the holder, and the checker reports nothing.
func noJump(t *testing.T, ctx context.Context, j *jumpRun) {
	if _, _, err := j.rival.acquire(ctx, j.key, time.Second); err == nil {
		t.Fatal("the rival acquired a lock that C still holds")
	}
	j.end(t, ctx, nil)
	checkClean(t, controlCheck(j.h, !j.session), "without a jump")
}

// end releases the rival's lock l2 (if any) and the holder's, closes both
// clients (closeHealed: the history is complete then), and, after a jump,
// stops the audit.
func (j *jumpRun) end(t *testing.T, ctx context.Context, l2 *redlock.Lock) {
	if l2 != nil {
		_, _ = j.rival.rec.Release(ctx, l2)
	}
	_, _ = j.holder.rec.Release(ctx, j.l1)
	closeHealed(t, j.holder, j.rival)
	if l2 != nil {
		j.stopAudit()
	}
}

// controlClient makes a client (with fenced locks, or with session locks)
// that meets every node (so that its pools know each server's run_id, as a
// long-running client's would) and is then cut off from the nodes in cut,
// until the end of the test.
func controlClient(t *testing.T, ctx context.Context, c *cluster, h *hist.History, name string, session bool, poolOpts []pool.Option, cut ...int) *chaosClient {
	t.Helper()
	cc, err := makeChaosClient(t, c, h, name, controlTTL, session, poolOpts, redlock.WithNodeTimeout(controlNodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if err := cc.warm(ctx); err != nil {
		t.Fatal(err)
	}
	cc.partition(true, cut...)
	// Heal before the Client closes (t.Cleanup is LIFO): its background
	// releases to the cut-off nodes then fail at once instead of waiting.
	t.Cleanup(func() { cc.partition(false, cut...) })
	return cc
}

// holdOnABC makes a holder client that cannot reach D and E and has it take
// key (a session lock, with session), which then lives on A, B and C only
// (checked on the nodes). Before, it takes and releases `before` other keys
// there: their fencing tokens raise A's, B's and C's shared counter above
// D's and E's.
func holdOnABC(t *testing.T, ctx context.Context, c *cluster, h *hist.History, key string, session bool, before int) (*chaosClient, *redlock.Lock) {
	t.Helper()
	holder := controlClient(t, ctx, c, h, "holder-"+key, session, []pool.Option{pool.WithRestartGuard(0)}, 3, 4)
	for i := range before {
		l, _, err := holder.acquire(ctx, fmt.Sprintf("%s-before-%d", key, i), 2*time.Second)
		if err != nil {
			t.Fatalf("holder: acquire on A, B, C before %s: %v", key, err)
		}
		_, _ = holder.rec.Release(ctx, l)
	}
	l, op, err := holder.acquire(ctx, key, 2*time.Second)
	if err != nil {
		t.Fatalf("holder: acquire %s on A, B, C: %v", key, err)
	}
	if session && op.Session == "" {
		t.Fatalf("holder: %s is not a session lock", key)
	}
	admins := c.admins(t)
	for i := range nodes {
		tok := get(t, admins[i], rkey(key))
		if st, _, _, ok := node.ParseSession(rkey(key), tok); ok {
			tok = st
		}
		if (i < 3) != (tok == l.Token()) {
			t.Fatalf("setup: node%d holds token %q; want the holder's on node0..2 only", i, tok)
		}
	}
	t.Logf("holder has %s on node0..2 with fence %d", key, l.Fence())
	return holder, l
}

// rivalOnCDE makes a rival client for key that cannot reach A and B.
func rivalOnCDE(t *testing.T, ctx context.Context, c *cluster, h *hist.History, key string, session bool, poolOpts []pool.Option) *chaosClient {
	t.Helper()
	return controlClient(t, ctx, c, h, "rival-"+key, session, poolOpts, 0, 1)
}

// closeHealed closes the clients, which joins their lease watchers (the
// history is complete only then), after healing their links: cut off,
// their Close would wait for the clean-up of every round.
func closeHealed(t *testing.T, ccs ...*chaosClient) {
	for _, cc := range ccs {
		cc.partition(false, 0, 1, 2, 3, 4)
		cc.close(t)
	}
}

// controlWrite writes the fenced register of l's key for cc's lock l,
// records the write as a critical section, and fails the test unless the
// register did want.
func controlWrite(t *testing.T, ctx context.Context, h *hist.History, register *redis.Client, cc *chaosClient, l *redlock.Lock, want hist.FenceResult) {
	t.Helper()
	s := hist.Section{Client: cc.name, Key: l.Key(), Token: l.Token(), Fence: l.Fence(), Start: h.Now()}
	fenced, msg := fencedWrite(ctx, register, l.Key(), l.Fence(), cc.name)
	if msg != "" {
		t.Fatalf("%s: %s", cc.name, msg)
	}
	s.Fenced, s.End = fenced, h.Now()
	h.AddSection(s)
	if s.Fenced != want {
		t.Errorf("%s (fence %d): fenced write %v, want %v", cc.name, l.Fence(), s.Fenced, want)
	}
}

// controlCheck checks a control run's history, with fencing for fenced
// locks.
func controlCheck(h *hist.History, fencing bool) *hist.Report {
	return hist.Check(h, hist.Config{Nodes: nodes, NodeTimeout: controlNodeTimeout, Fencing: fencing, Replies: true})
}

// checkTwoHolders logs the report of a run that had two holders at once
// and fails the test unless it reports them (S1 and LIN).
func checkTwoHolders(t *testing.T, r *hist.Report) {
	t.Helper()
	t.Logf("checker report:\n%s", r)
	if r.Count(hist.S1) == 0 || r.Count(hist.LIN) == 0 {
		t.Errorf("two holders at once, but the checker reports %d S1 and %d LIN violations", r.Count(hist.S1), r.Count(hist.LIN))
	}
}

// checkClean logs the report and fails the test if it names any violation.
func checkClean(t *testing.T, r *hist.Report, what string) {
	t.Helper()
	t.Logf("checker report:\n%s", r)
	if r.Total() != 0 {
		t.Errorf("%d violations %s:\n%s", r.Total(), what, r)
	}
}

// checkOneExternal fails the test unless the audit saw exactly one write
// from outside the lock scripts: the one the test injected (cmd).
func checkOneExternal(t *testing.T, a *hist.Audit, cmd string) {
	t.Helper()
	if st := a.Stats(); st.External != 1 {
		t.Errorf("the MONITOR audit saw %d writes from outside the lock scripts, want 1 (the injected %s)", st.External, cmd)
	}
}
