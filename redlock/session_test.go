package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/wake"
	"github.com/quorumlock/quorumlock/pool"
)

// Renewal sessions on in-memory queued pools (memsession_test.go models the
// scripts), in virtual time. The scripts themselves run against real Redis
// in integration/session_test.go.

// sessionEnv is sendEnv with renewal sessions (the default for auto-extended
// locks with random tokens over queued pools).
func sessionEnv(t *testing.T, opts ...Option) ([]*sendPool, *Client, *recorder) {
	t.Helper()
	return sendEnvWith(t, opts...)
}

// TestSessionRenewalCostIsPerNode: 2,000 auto-extended locks stay held for
// 3.3 TTLs through one session renewal per node per interval; their keys
// are refreshed at most once each (every half key TTL), never renewed one by
// one.
func TestSessionRenewalCostIsPerNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t)
		ls := lockMany(t, c, 2000)
		time.Sleep(10 * time.Second)
		for _, l := range ls {
			if err := l.Err(); err != nil || memHolders(ps, l) < 3 {
				t.Fatalf("%s: err %v, held on %d nodes", l.id.key, err, memHolders(ps, l))
			}
		}
		for i, p := range ps {
			renewals, _ := p.count(node.RenewSession)
			_, refreshed := p.count(node.ExtendMany)
			extends, _ := p.count(node.Extend)
			if renewals < 9 || renewals > 11 || refreshed > len(ls) || extends != 0 {
				t.Fatalf("node %d: %d session renewals in 10s (want 9-11), %d keys refreshed (want <= %d), %d extends", i, renewals, refreshed, len(ls), extends)
			}
		}
	})
}

// TestSessionDeathLosesEveryLock: when a quorum of nodes stop answering the
// session's renewals, every lock of the session is lost by its deadline,
// though no node said so, and another client can take each key once the
// session keys have expired there.
func TestSessionDeathLosesEveryLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t)
		ls := lockMany(t, c, 50)
		for _, p := range ps[:3] {
			p.set(node.RenewSession, 0, 1000, nil)
		}
		deadline := ls[0].Deadline()
		for _, l := range ls {
			<-l.Done()
			if !errors.Is(l.Err(), ErrLockLost) {
				t.Fatalf("%s: Err %v after Done, want ErrLockLost", l.id.key, l.Err())
			}
		}
		if late := time.Since(deadline); late > time.Second+time.Millisecond {
			t.Fatalf("locks lost %v after the first one's deadline at acquisition", late)
		}
		time.Sleep(3 * time.Second) // the session keys expire on the nodes
		c2 := clientOver(t, ps)
		for _, l := range ls {
			if _, err := c2.TryLock(t.Context(), l.id.key); err != nil {
				t.Fatalf("%s after its session ended: %v", l.id.key, err)
			}
		}
	})
}

// TestSessionNoLosesNodeAtOnce: a node that says the session's incarnation
// has ended (its session key was lost) stops counting for every lock at
// once; with a quorum gone that way the locks are lost at the next renewal,
// long before their deadline.
func TestSessionNoLosesNodeAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t)
		ls := lockMany(t, c, 20)
		synctest.Wait() // the acquires' late replies
		s := ls[0].hold.Session()
		for _, p := range ps[:3] {
			p.memPool.mu.Lock()
			delete(p.memPool.keys, s.Key())
			p.memPool.mu.Unlock()
		}
		start := time.Now()
		for _, l := range ls {
			<-l.Done()
		}
		if took := time.Since(start); took > c.cfg.RenewInterval()+time.Millisecond {
			t.Fatalf("lost %v after the session keys went, want within one renewal interval (%v)", took, c.cfg.RenewInterval())
		}
	})
}

// TestSessionIncarnationNeverComesBack: a session key that expired on a node
// and was created again by a later acquire has a new incarnation there: the
// locks of the old one no longer count that node (another client's acquire
// finds their keys free), the new lock does.
func TestSessionIncarnationNeverComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t)
		old := lockMany(t, c, 1)[0]
		synctest.Wait() // the acquire's late replies
		s := old.hold.Session()
		ps[0].memPool.mu.Lock()
		delete(ps[0].memPool.keys, s.Key()) // node 0 lost the session
		ps[0].memPool.mu.Unlock()
		fresh, err := c.TryLock(t.Context(), "fresh")
		if err != nil {
			t.Fatal(err)
		}
		if g := genOn(fresh, 0); g == 0 {
			t.Fatal("the new lock does not count node 0")
		}
		ps[0].memPool.mu.Lock()
		v := ps[0].memPool.keys[old.id.rkey].val
		owner := ps[0].owner(old.id.rkey, v)
		ps[0].memPool.mu.Unlock()
		if owner != "" || !strings.HasPrefix(v, old.id.token) {
			t.Fatalf("node 0: old lock's key %q reads as held by %q after its incarnation ended", v, owner)
		}
		if genOn(old, 0) == s.Node(0).Gen {
			t.Fatal("the old lock still counts node 0")
		}
		if err := old.Err(); err != nil {
			t.Fatalf("old lock (4 nodes left): %v", err)
		}
	})
}

// TestSessionReleaseMidSession: releasing one lock of a session deletes its
// keys and leaves the others held and renewed.
func TestSessionReleaseMidSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t)
		ls := lockMany(t, c, 10)
		time.Sleep(2 * time.Second)
		if err := ls[0].Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the deletes the round did not wait for
		if n := memHolders(ps, ls[0]); n != 0 {
			t.Fatalf("released lock still on %d nodes", n)
		}
		time.Sleep(5 * time.Second)
		for _, l := range ls[1:] {
			if err := l.Err(); err != nil {
				t.Fatalf("%s: %v", l.id.key, err)
			}
		}
	})
}

// TestSessionExtend: Extend on a session lock renews its session and moves
// its deadline; a TTL other than the session's is refused before any I/O.
func TestSessionExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t)
		l := lockMany(t, c, 1)[0]
		time.Sleep(500 * time.Millisecond)
		before := l.Deadline()
		if err := l.Extend(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
		if !l.Deadline().After(before) {
			t.Fatalf("deadline %v not after %v", l.Deadline(), before)
		}
		n, _ := ps[0].count(node.RenewSession)
		if err := l.Extend(t.Context(), time.Minute); err == nil {
			t.Fatal("Extend to another TTL than the session's succeeded")
		}
		if m, _ := ps[0].count(node.RenewSession); m != n {
			t.Fatalf("a refused Extend sent %d renewals", m-n)
		}
	})
}

// clientOver is another Client over the pools of a sendEnv.
func clientOver(t *testing.T, ps []*sendPool, opts ...Option) *Client {
	t.Helper()
	pools := make([]pool.Pool, len(ps))
	for i, p := range ps {
		pools[i] = p
	}
	c, err := New(pools, append([]Option{WithTTL(3 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// genOn is the session generation lock l holds on node n.
func genOn(l *Lock, n int) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hold.Gen(n)
}

// TestSessionDegradesNotCollapses: renewals that every node drops once, and
// renewals answered far slower than the node timeout (a busy server), lose
// no lock that still had validity: a session renewal waits for as long as
// its node's confirmation can still use an answer, and a missed one is
// followed by the next a renewal interval later.
func TestSessionDegradesNotCollapses(t *testing.T) {
	for _, tc := range []struct {
		name       string
		wait       time.Duration
		drop       int
		nodeTimout time.Duration
	}{
		{"one renewal dropped on every node", 0, 1, 50 * time.Millisecond},
		{"renewals 6 node timeouts slow", 300 * time.Millisecond, 0, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ps, c, _ := sessionEnv(t, WithNodeTimeout(tc.nodeTimout))
				ls := lockMany(t, c, 200)
				synctest.Wait()
				for _, p := range ps {
					p.set(node.RenewSession, tc.wait, tc.drop, nil)
				}
				time.Sleep(10 * time.Second)
				for _, l := range ls {
					if err := l.Err(); err != nil {
						t.Fatalf("%s: %v", l.id.key, err)
					}
				}
				if n, _ := ps[0].count(node.RenewSession); n < 5 {
					t.Fatalf("%d session renewals on node 0 in 10s", n)
				}
				_ = c.Close()
				time.Sleep(time.Second) // the fake pools' last, slow replies
			})
		})
	}
}

// TestSessionOlderIncarnationIgnored: an acquire reply that names an
// incarnation older than the one a node vouches for now (a reply processed
// late, after the session was re-created there) does not replace the live
// one: the locks of the live incarnation keep the node, and the late lock
// does not count it.
func TestSessionOlderIncarnationIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c, _ := sessionEnv(t)
		l := lockMany(t, c, 1)[0]
		synctest.Wait()
		s := l.hold.Session()
		before := s.Node(0)
		inc, gen := before.Inc, before.Gen
		if g := s.Accepted(0, inc-1, time.Now()); g != 0 {
			t.Fatalf("an older incarnation got generation %d", g)
		}
		after := s.Node(0)
		if after.Inc != inc || after.Gen != gen || genOn(l, 0) != gen {
			t.Fatalf("node 0 after an older reply: inc %d gen %d (was %d, %d); the lock's generation %d", after.Inc, after.Gen, inc, gen, genOn(l, 0))
		}
	})
}

// TestSessionDeadlineNeverComesBack: a renewal sent while the nodes still
// vouched but read after they stopped (its goroutine stalled) does not
// bring a lock whose deadline was seen to pass back: the generation is
// dropped and the lock stays lost.
func TestSessionDeadlineNeverComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t)
		l := lockMany(t, c, 1)[0]
		synctest.Wait()
		for _, p := range ps {
			p.set(node.RenewSession, 0, 1000, nil) // no renewal answers from now on
		}
		time.Sleep(1500 * time.Millisecond) // the renewals sent from here on stall
		s := l.hold.Session()
		var stalled []node.Receiver
		for n := range ps {
			c.wg.Add(1) // as sendOwn does for each command
			stalled = append(stalled, s.Begin(n, time.Now()))
		}
		deadline := l.Deadline()
		time.Sleep(time.Until(deadline) + time.Millisecond)
		if d := l.Deadline(); d.After(time.Now()) {
			t.Fatalf("deadline %v after it passed at %v", d, deadline)
		}
		for n, sr := range stalled { // the nodes said yes at start
			sr.Deliver(n, node.Result{Int: 1})
		}
		if d := l.Deadline(); d.After(time.Now()) {
			t.Fatalf("deadline came back to %v after a late confirmation", d)
		}
		if !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("Err %v, want ErrLockLost", l.Err())
		}
	})
}

// unansweredLiveSession has the nodes leave l's session renewals unanswered
// from now on while its session key lives on (for an hour), as renewals
// that ran on the nodes but whose replies came too late would keep it.
func unansweredLiveSession(ps []*sendPool, l *Lock) {
	for _, p := range ps {
		p.set(node.RenewSession, 0, 1000, nil)
		p.memPool.mu.Lock()
		e := p.memPool.keys[l.hold.Session().Key()]
		e.exp = time.Now().Add(time.Hour)
		p.memPool.keys[l.hold.Session().Key()] = e
		p.memPool.mu.Unlock()
	}
}

// lostSessionLock acquires a session lock, has its renewals go unanswered
// while its session lives (unansweredLiveSession), and returns once it is
// lost and the loss's background deletes were answered. In a bubble.
func lostSessionLock(t *testing.T) ([]*sendPool, *Lock) {
	ps, c, _ := sessionEnv(t)
	l := lockMany(t, c, 1)[0]
	synctest.Wait()
	unansweredLiveSession(ps, l)
	<-l.Done()
	synctest.Wait()
	return ps, l
}

// TestSessionLostLockReleased: a session lock lost on the client while its
// session still lives on the nodes (kept alive here by hand, as renewals
// that ran on the nodes but whose replies came too late would) has its key
// deleted: it does not keep others out for its key's whole 10 × TTL.
func TestSessionLostLockReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, l := lostSessionLock(t)
		if n := memHolders(ps, l); n != 0 {
			t.Fatalf("a lost session lock still held on %d nodes", n)
		}
		if _, err := clientOver(t, ps).TryLock(t.Context(), l.id.key); err != nil {
			t.Fatalf("another client, after the loss: %v", err)
		}
	})
}

// TestSessionLostLockReleasedOnce: a session lock lost while its session
// lives on the nodes has its key deleted once per node: a Release after the
// loss does not send its delete again where the loss's already went.
func TestSessionLostLockReleasedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, l := lostSessionLock(t)
		err := l.Release(t.Context())
		if !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("Release after the loss: %v, want ErrNotHeld, not ErrUnavailable", err)
		}
		synctest.Wait()
		for i, p := range ps {
			if n, _ := p.count(node.Release); n != 1 {
				t.Errorf("node %d was sent %d deletes of the lost lock, want 1", i, n)
			}
		}
	})
}

// holdLost is an Observer whose Lost waits until let is closed: what a
// Release does between a loss and the loss's own clean-up.
type holdLost struct {
	NopObserver
	lost chan struct{}
	let  chan struct{}
}

func (h *holdLost) Lost(Event) { close(h.lost); <-h.let }

// TestSessionReleaseRightAfterLoss: a Release that runs after a session
// lock was found lost but before the loss's background deletes were sent
// (here: while the Observer hears of the loss) deletes the key once per
// node: the loss sends none where the Release round went.
func TestSessionReleaseRightAfterLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &holdLost{lost: make(chan struct{}), let: make(chan struct{})}
		ps, c, _ := sessionEnv(t, WithObserver(h))
		l := lockMany(t, c, 1)[0]
		_ = l.Done() // its lease's timer finds the loss, holding no operation slot
		synctest.Wait()
		unansweredLiveSession(ps, l)
		<-h.lost
		err := l.Release(t.Context()) // the keys are still there: it may well delete them
		close(h.let)
		if err != nil && !errors.Is(err, ErrNotHeld) {
			t.Errorf("Release after the loss: %v, want nil or ErrNotHeld", err)
		}
		synctest.Wait()
		for i, p := range ps {
			if n, _ := p.count(node.Release); n != 1 {
				t.Errorf("node %d was sent %d deletes of the lost lock, want 1", i, n)
			}
		}
	})
}

// TestSessionLostReleaseLeavesLine: the Release of a lost session lock
// whose waiter may still be in the key's line takes it out of the line on
// every node, those whose key the loss's deletes already freed too: only
// the release round carries the waiter.
func TestSessionLostReleaseLeavesLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, l := lostSessionLock(t)
		l.mu.Lock()
		l.place = wake.Spot{Waiter: "w1", InLine: true} // as a Lock that waited, told "taken", leaves it
		l.mu.Unlock()
		_ = l.Release(t.Context())
		synctest.Wait()
		for i, p := range ps {
			p.mu.Lock()
			n := p.leave[node.Release]
			p.mu.Unlock()
			if n != 1 {
				t.Errorf("node %d: %d releases took the waiter out of the line, want 1", i, n)
			}
		}
	})
}

// TestSessionExtendFails: Extend on a session lock whose renewals a quorum
// of nodes leave unanswered returns a *QuorumError matching ErrNotHeld
// that names those nodes as timed out, and leaves the deadline where it
// was.
func TestSessionExtendFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t)
		l := lockMany(t, c, 1)[0]
		synctest.Wait()
		for _, p := range ps[:3] {
			p.set(node.RenewSession, 0, 1000, nil)
		}
		time.Sleep(100 * time.Millisecond)
		before := l.Deadline()
		err := l.Extend(t.Context(), 0)
		var qe *QuorumError
		if !errors.Is(err, ErrNotHeld) || !errors.As(err, &qe) {
			t.Fatalf("Extend with 3 of 5 nodes silent: %v, want a *QuorumError matching ErrNotHeld", err)
		}
		timedOut := 0
		for _, r := range qe.Nodes {
			if r.Outcome == OutcomeTimeout || r.Outcome == OutcomeError {
				timedOut++
			}
		}
		if timedOut < 3 || l.Deadline().After(before) {
			t.Fatalf("%d nodes failed in %v; deadline %v, was %v", timedOut, qe, l.Deadline(), before)
		}
	})
}

// TestSessionCloseJoinsRenewals: Close returns only once every session
// renewal it found in flight has been answered or has failed.
func TestSessionCloseJoinsRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t, WithNodeTimeout(50*time.Millisecond))
		l := lockMany(t, c, 1)[0]
		synctest.Wait()
		for _, p := range ps {
			p.set(node.RenewSession, 400*time.Millisecond, 0, nil)
		}
		time.Sleep(c.cfg.RenewInterval() + 10*time.Millisecond) // a renewal is in flight on every node
		s := l.hold.Session()
		if s.Node(0).Busy == 0 {
			t.Fatal("no renewal in flight")
		}
		_ = c.Close()
		for n := range ps {
			if busy := s.Node(n).Busy; busy != 0 {
				t.Fatalf("node %d: %d renewals still in flight after Close", n, busy)
			}
		}
	})
}

// TestLockedSessionValueThroughWrappedPools: a Client over Pools that do not
// queue (wrappers) cannot tell whether a session lock's value is held (only
// the pool's script can): Locked says it cannot tell, naming the reason,
// rather than guessing "free".
func TestLockedSessionValueThroughWrappedPools(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	v := "0123456789abcdefg\x1f1\x1f11" // a session lock's value (prefix "quorumlock:")
	for _, n := range e.nodes {
		if err := n.m.Set(rkey("wrapped"), v); err != nil {
			t.Fatal(err)
		}
	}
	locked, err := c.Locked(t.Context(), "wrapped")
	var qe *QuorumError
	if locked || !errors.As(err, &qe) || !strings.Contains(err.Error(), "session lock's value") {
		t.Fatalf("Locked = %v, %v; want a *QuorumError saying it cannot tell", locked, err)
	}
}

// TestSessionsBounded: a Client asked for auto-extended locks of ever new
// TTLs keeps at most maxSessions renewal sessions; the locks of the kinds
// beyond them are renewed key by key and held all the same. Before, every
// distinct TTL made a session kept until Close (issue 31).
func TestSessionsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c, _ := sessionEnv(t)
		ctx := context.Background()
		var ls []*Lock
		for i := range 2 * maxSessions {
			l, err := c.TryLock(ctx, fmt.Sprint("k", i), WithAutoExtend(true), WithTTL(time.Second+time.Duration(i)*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		c.sessMu.Lock()
		n := len(c.sessions)
		c.sessMu.Unlock()
		if n != maxSessions {
			t.Fatalf("%d sessions after %d TTLs; want %d", n, 2*maxSessions, maxSessions)
		}
		time.Sleep(3 * time.Second)
		for _, l := range ls {
			if err := l.Err(); err != nil {
				t.Fatalf("%s with TTL %v: %v", l.id.key, l.cfg.TTL, err)
			}
		}
	})
}
