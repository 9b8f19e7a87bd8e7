package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/fence"
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

// controlCheck is the checker configuration of the control runs.
func controlCheck(h *hist.History) *hist.Report {
	return hist.Check(h, hist.Config{Nodes: nodes, NodeTimeout: controlNodeTimeout, Fencing: true, Replies: true})
}

// holdOnABC makes a holder client that cannot reach D and E and has it take
// key, which then lives on A, B and C only (checked on the nodes). Before,
// it takes and releases `before` other keys there: their fencing tokens
// raise A's, B's and C's shared counter above D's and E's.
func holdOnABC(t *testing.T, ctx context.Context, c *cluster, h *hist.History, key string, before int) (*chaosClient, *redlock.Lock) {
	t.Helper()
	holder := newChaosClient(t, c, h, "holder", controlTTL, []pool.Option{pool.WithRestartGuard(0)}, redlock.WithNodeTimeout(controlNodeTimeout))
	if err := holder.warm(ctx); err != nil {
		t.Fatal(err)
	}
	holder.partition(true, 3, 4)
	// Heal before the Client closes (t.Cleanup is LIFO): its background
	// releases to the cut-off nodes then fail at once instead of waiting.
	t.Cleanup(func() { holder.partition(false, 3, 4) })
	for i := range before {
		l, _, err := holder.acquire(ctx, fmt.Sprintf("%s-before-%d", key, i), 2*time.Second)
		if err != nil {
			t.Fatalf("holder: acquire on A, B, C before %s: %v", key, err)
		}
		_, _ = holder.release(ctx, l)
	}
	l, _, err := holder.acquire(ctx, key, 2*time.Second)
	if err != nil {
		t.Fatalf("holder: acquire %s on A, B, C: %v", key, err)
	}
	admins := c.admins(t)
	for i := range nodes {
		v := get(t, admins[i], rkey(key))
		if (i < 3) != (v == l.Token()) {
			t.Fatalf("setup: node%d holds %q; want the holder's token on node0..2 only", i, v)
		}
	}
	t.Logf("holder has %s on node0..2 with fence %d", key, l.Fence())
	return holder, l
}

// rivalOnCDE makes a client that cannot reach A and B, after it has met
// every node (so its pools know each server's run_id, as a long-running
// client's would).
func rivalOnCDE(t *testing.T, ctx context.Context, c *cluster, h *hist.History, poolOpts []pool.Option) *chaosClient {
	t.Helper()
	rival := newChaosClient(t, c, h, "rival", controlTTL, poolOpts, redlock.WithNodeTimeout(controlNodeTimeout))
	if err := rival.warm(ctx); err != nil {
		t.Fatal(err)
	}
	rival.partition(true, 0, 1)
	t.Cleanup(func() { rival.partition(false, 0, 1) })
	return rival
}

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

	t.Run("guard-off", func(t *testing.T) {
		h := hist.New()
		// The rival warms up first: its warm-up would carry A's, B's and
		// C's counter to D and E.
		rival := rivalOnCDE(t, ctx, c, h, []pool.Option{pool.WithRestartGuard(0)})
		holder, l1 := holdOnABC(t, ctx, c, h, "amnesia-off", 5)
		if err := c.Node(2).Restart(true); err != nil {
			t.Fatal(err)
		}
		l2, _, err := rival.acquire(ctx, "amnesia-off", 2*time.Second)
		if err != nil {
			t.Fatalf("control did not happen: the rival could not acquire on C (forgotten), D, E: %v", err)
		}
		t.Logf("rival acquired too, fence %d (holder's: %d)", l2.Fence(), l1.Fence())
		_, _ = rival.release(ctx, l2)
		_, _ = holder.release(ctx, l1)
		r := controlCheck(h)
		t.Logf("checker report:\n%s", r)
		if r.Count(hist.S1) == 0 || r.Count(hist.LIN) == 0 {
			t.Errorf("two holders at once, but the checker reports %d S1 and %d LIN violations", r.Count(hist.S1), r.Count(hist.LIN))
		}
		if r.Count(hist.S4) == 0 {
			t.Errorf("C's counter was lost (fences %d then %d), but the checker reports no S4 violation", l1.Fence(), l2.Fence())
		}
	})

	t.Run("guard-on", func(t *testing.T) {
		h := hist.New()
		holder, l1 := holdOnABC(t, ctx, c, h, "amnesia-on", 0)
		rival := rivalOnCDE(t, ctx, c, h, nil) // pool.DefaultRestartGuard
		if err := c.Node(2).Restart(true); err != nil {
			t.Fatal(err)
		}
		_, _, err := rival.acquire(ctx, "amnesia-on", time.Second)
		if err == nil {
			t.Fatal("the rival acquired with a freshly restarted C, although its restart guard is on")
		}
		qe := asQuorumError(t, err)
		if n := qe.Nodes[2]; !errors.Is(n.Err, pool.ErrRestarted) {
			t.Errorf("node2 (C): outcome %v, error %v; want an error matching pool.ErrRestarted", n.Outcome, n.Err)
		}
		t.Logf("rival refused: %v", err)
		_, _ = holder.release(ctx, l1)
		r := controlCheck(h)
		t.Logf("checker report:\n%s", r)
		if r.Total() != 0 {
			t.Errorf("%d violations with the restart guard on", r.Total())
		}
	})
}

// TestChaosControlClockJump emulates a forward clock jump on C by expiring
// the holder's key there early (PEXPIRE 1, sent directly to C): the rival
// acquires on C, D and E while the holder's window is open (S1). Fencing
// still holds (S4): C's counter survived, so the rival's token is greater,
// and the fenced register refuses the holder's next write. Without the
// jump, the same rival cannot acquire and nothing is violated.
func TestChaosControlClockJump(t *testing.T) {
	c := startCluster(t, controlTTL, "")
	dropFenceCounters(t, c)
	ctx := ctxT(t, 60*time.Second)
	audit, stopAudit := startAudit(t, c, true)
	register := c.admin(t, 3) // the fenced register, on node3, written directly by both clients

	t.Run("no-jump", func(t *testing.T) {
		h := hist.New()
		holder, l1 := holdOnABC(t, ctx, c, h, "jump-no", 0)
		rival := rivalOnCDE(t, ctx, c, h, nil)
		if _, _, err := rival.acquire(ctx, "jump-no", time.Second); err == nil {
			t.Fatal("the rival acquired a lock that C still holds")
		}
		_, _ = holder.release(ctx, l1)
		if r := controlCheck(h); r.Total() != 0 {
			t.Errorf("violations without a clock jump:\n%s", r)
		}
	})

	t.Run("jump", func(t *testing.T) {
		h := hist.New()
		holder, l1 := holdOnABC(t, ctx, c, h, "jump", 0)
		rival := rivalOnCDE(t, ctx, c, h, nil)
		cl := c.admin(t, 2)
		if err := cl.PExpire(ctx, rkey("jump"), time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, time.Millisecond, "the key expired on C", func() bool { return get(t, cl, rkey("jump")) == "" })
		l2, _, err := rival.acquire(ctx, "jump", 2*time.Second)
		if err != nil {
			t.Fatalf("control did not happen: the rival could not acquire on C (expired early), D, E: %v", err)
		}
		t.Logf("rival acquired too, fence %d (holder's: %d)", l2.Fence(), l1.Fence())
		// Both write the fenced register: the rival first, then the holder,
		// still inside its window, whose write must be refused.
		for _, w := range []struct {
			cc *chaosClient
			l  *redlock.Lock
		}{{rival, l2}, {holder, l1}} {
			s := hist.Section{Client: w.cc.name, Key: w.l.Key(), Token: w.l.Token(), Fence: w.l.Fence(), Start: h.Now()}
			switch err := fence.Write(ctx, register, registerKey("jump"), w.l.Fence(), w.cc.name); {
			case err == nil:
				s.Fenced = hist.Accepted
			case errors.Is(err, fence.ErrStale):
				s.Fenced = hist.Refused
			default:
				t.Fatalf("%s: fence.Write: %v", w.cc.name, err)
			}
			s.End = h.Now()
			h.AddSection(s)
			if want := map[bool]hist.FenceResult{true: hist.Accepted, false: hist.Refused}[w.cc == rival]; s.Fenced != want {
				t.Errorf("%s (fence %d): fenced write %v, want %v", w.cc.name, w.l.Fence(), s.Fenced, want)
			}
		}
		_, _ = rival.release(ctx, l2)
		_, _ = holder.release(ctx, l1)
		stopAudit()
		r := controlCheck(h)
		t.Logf("checker report:\n%s", r)
		if r.Count(hist.S1) == 0 || r.Count(hist.LIN) == 0 {
			t.Errorf("two holders at once, but the checker reports %d S1 and %d LIN violations", r.Count(hist.S1), r.Count(hist.LIN))
		}
		if r.Count(hist.S4) != 0 {
			t.Errorf("a clock jump must not break fencing: %d S4 violations", r.Count(hist.S4))
		}
		if !strings.Contains(strings.Join(r.Notes, "\n"), "refused 1 writes of holders inside their windows") {
			t.Errorf("the refused write of the holder is not noted: %q", r.Notes)
		}
		if st := audit.Stats(); st.External != 1 {
			t.Errorf("the MONITOR audit saw %d writes from outside the lock scripts, want 1 (the injected PEXPIRE)", st.External)
		}
	})
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
func TestChaosControlSessionJump(t *testing.T) {
	c := startCluster(t, controlTTL, "")
	ctx := ctxT(t, 60*time.Second)
	audit, stopAudit := startAudit(t, c, true)
	check := func(h *hist.History) *hist.Report {
		return hist.Check(h, hist.Config{Nodes: nodes, NodeTimeout: controlNodeTimeout, Replies: true})
	}
	// holder takes key on A, B and C only, as a session lock.
	holder := func(h *hist.History, key string) (*chaosClient, *redlock.Lock) {
		cc, err := newSessionClient(t, c, h, "holder-"+key, controlTTL, []pool.Option{pool.WithRestartGuard(0)}, redlock.WithNodeTimeout(controlNodeTimeout))
		if err != nil {
			t.Fatal(err)
		}
		if err := cc.warm(ctx); err != nil {
			t.Fatal(err)
		}
		cc.partition(true, 3, 4)
		t.Cleanup(func() { cc.partition(false, 3, 4) })
		l, op, err := cc.acquire(ctx, key, 2*time.Second)
		if err != nil {
			t.Fatalf("holder: acquire %s on A, B, C: %v", key, err)
		}
		if op.Session == "" {
			t.Fatalf("holder: %s is not a session lock", key)
		}
		admins := c.admins(t)
		for i := range nodes {
			tok, _, _, _ := node.ParseSession(rkey(key), get(t, admins[i], rkey(key)))
			if (i < 3) != (tok == l.Token()) {
				t.Fatalf("setup: node%d holds token %q; want the holder's session lock on node0..2 only", i, tok)
			}
		}
		return cc, l
	}
	rival := func(h *hist.History, key string) *chaosClient {
		cc, err := newSessionClient(t, c, h, "rival-"+key, controlTTL, nil, redlock.WithNodeTimeout(controlNodeTimeout))
		if err != nil {
			t.Fatal(err)
		}
		if err := cc.warm(ctx); err != nil {
			t.Fatal(err)
		}
		cc.partition(true, 0, 1)
		t.Cleanup(func() { cc.partition(false, 0, 1) })
		return cc
	}

	// closeHealed closes the clients, which joins their lease watchers
	// (the history is complete only then), after healing their links:
	// cut off, their Close would wait for the clean-up of every round.
	closeHealed := func(ccs ...*chaosClient) {
		for _, cc := range ccs {
			cc.partition(false, 0, 1, 2, 3, 4)
			cc.close(t)
		}
	}

	t.Run("no-jump", func(t *testing.T) {
		h := hist.New()
		hc, l1 := holder(h, "sjump-no")
		rc := rival(h, "sjump-no")
		if _, _, err := rc.acquire(ctx, "sjump-no", time.Second); err == nil {
			t.Fatal("the rival acquired a session lock that C still holds")
		}
		_, _ = hc.release(ctx, l1)
		closeHealed(hc, rc)
		if r := check(h); r.Total() != 0 {
			t.Errorf("violations without a jump:\n%s", r)
		}
	})

	t.Run("jump", func(t *testing.T) {
		h := hist.New()
		hc, l1 := holder(h, "sjump")
		rc := rival(h, "sjump")
		cl := c.admin(t, 2)
		_, _, sk, ok := node.ParseSession(rkey("sjump"), get(t, cl, rkey("sjump")))
		if !ok {
			t.Fatal("C holds no session lock's value")
		}
		if err := cl.Del(ctx, sk).Err(); err != nil {
			t.Fatal(err)
		}
		l2, _, err := rc.acquire(ctx, "sjump", 2*time.Second)
		if err != nil {
			t.Fatalf("control did not happen: the rival could not acquire on C (session ended early), D, E: %v", err)
		}
		t.Logf("rival acquired too, while the holder's deadline is %v ahead", time.Until(l1.Deadline()).Round(time.Millisecond))
		// The holder's next renewal finds the incarnation gone on C: with
		// A and B only, it has no quorum, and its lock is lost.
		jumped := time.Now()
		select {
		case <-l1.Done():
			t.Logf("holder lost its lock %v after the rival acquired: %v", time.Since(jumped).Round(time.Millisecond), l1.Err())
		case <-time.After(controlTTL/3 + 2*controlNodeTimeout + time.Second):
			t.Errorf("the holder still holds its lock a renewal interval after its session ended on C")
		}
		_, _ = rc.release(ctx, l2)
		_, _ = hc.release(ctx, l1)
		closeHealed(hc, rc)
		stopAudit()
		r := check(h)
		t.Logf("checker report:\n%s", r)
		if r.Count(hist.S1) == 0 || r.Count(hist.LIN) == 0 {
			t.Errorf("two holders at once, but the checker reports %d S1 and %d LIN violations", r.Count(hist.S1), r.Count(hist.LIN))
		}
		if r.Count(hist.S2) != 0 {
			t.Errorf("every deadline was backed by its session's confirmations, but S2 reports %d violations", r.Count(hist.S2))
		}
		if st := audit.Stats(); st.External != 1 {
			t.Errorf("the MONITOR audit saw %d writes from outside the lock scripts, want 1 (the injected DEL)", st.External)
		}
	})
}
