package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/pool"
)

// sendPool is a memPool that queues commands (node.Sender), as the Pools of
// package pool do, and counts them by kind. Each command answers after the
// pool's delay for its kind, or with an error at its deadline + Follow if
// that comes first; the next drop commands of a kind get no reply (an error
// at deadline + Follow, as a Pool reports a lost reply).
type sendPool struct {
	*memPool
	mu    sync.Mutex
	sent  map[node.Kind]int
	keys  map[node.Kind]int // keys carried, for ExtendMany
	leave map[node.Kind]int // commands that take a waiter out of the line
	wait  map[node.Kind]time.Duration
	drop  map[node.Kind]int
	begun chan struct{} // if not nil, told of every ExtendMany sent
}

var _ node.Sender = (*sendPool)(nil)

func newSendPools(n int) []*sendPool {
	ps := make([]*sendPool, n)
	for i, m := range newMemPools(n) {
		ps[i] = &sendPool{memPool: m, sent: map[node.Kind]int{}, keys: map[node.Kind]int{}, leave: map[node.Kind]int{}, wait: map[node.Kind]time.Duration{}, drop: map[node.Kind]int{}}
	}
	return ps
}

func (p *sendPool) Send(op *node.Op, deadline time.Time, rcv node.Receiver, tag int) {
	p.mu.Lock()
	p.sent[op.Kind]++
	p.keys[op.Kind] += max(1, len(op.Keys))
	if op.Waiter != "" {
		p.leave[op.Kind]++
	}
	wait, drop, begun := p.wait[op.Kind], p.drop[op.Kind] > 0, p.begun
	if drop {
		p.drop[op.Kind]--
	}
	p.mu.Unlock()
	if begun != nil && op.Kind == node.ExtendMany {
		begun <- struct{}{}
	}
	go func() {
		if drop {
			time.Sleep(time.Until(deadline.Add(op.Follow)))
			rcv.Deliver(tag, node.Result{Err: context.DeadlineExceeded})
			return
		}
		if end := deadline.Add(op.Follow); time.Now().Add(wait).After(end) {
			// As a Pool does: a reply that does not come by the deadline
			// and the follow budget is an error then.
			time.Sleep(time.Until(end))
			rcv.Deliver(tag, node.Result{Err: context.DeadlineExceeded})
			return
		}
		time.Sleep(wait)
		rcv.Deliver(tag, p.run(op))
	}()
}

func (p *sendPool) count(k node.Kind) (cmds, keys int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[k], p.keys[k]
}

// set makes commands of kind k answer after wait, and the next drop of them
// get no reply; begun, if not nil, is told of every ExtendMany sent.
func (p *sendPool) set(k node.Kind, wait time.Duration, drop int, begun chan struct{}) {
	p.mu.Lock()
	p.wait[k], p.drop[k], p.begun = wait, drop, begun
	p.mu.Unlock()
}

// perKey makes auto-extended locks renew key by key (ExtendMany batches)
// rather than through a renewal session, as locks with a generated token
// are: the path these tests are about (session_test.go has the sessions').
var perKey = WithTokenGenerator(randomToken)

func sendEnv(t *testing.T, opts ...Option) ([]*sendPool, *Client, *recorder) {
	t.Helper()
	return sendEnvWith(t, append([]Option{perKey}, opts...)...)
}

func sendEnvWith(t *testing.T, opts ...Option) ([]*sendPool, *Client, *recorder) {
	t.Helper()
	ps := newSendPools(5)
	pools := make([]pool.Pool, len(ps))
	for i, p := range ps {
		pools[i] = p
	}
	rec := &recorder{}
	c, err := New(pools, append([]Option{WithObserver(rec), WithTTL(3 * time.Second), WithAutoExtend(true)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return ps, c, rec
}

func lockMany(t *testing.T, c *Client, n int) []*Lock {
	t.Helper()
	ls := make([]*Lock, n)
	for i := range ls {
		l, err := c.TryLock(t.Context(), fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	return ls
}

func memHolders(ps []*sendPool, l *Lock) int {
	n := 0
	for _, p := range ps {
		p.memPool.mu.Lock()
		if e, ok := p.get(l.id.rkey); ok && p.owner(l.id.rkey, e.val) == l.id.token {
			n++
		}
		p.memPool.mu.Unlock()
	}
	return n
}

// TestRenewalBatches: many auto-extended locks are renewed by a few
// ExtendMany commands per node, none by a command of its own, and all stay
// held far past their TTL.
func TestRenewalBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, rec := sendEnv(t)
		ls := lockMany(t, c, 2000)
		time.Sleep(10 * time.Second) // 3.3 TTLs
		renewals := len(rec.of("extended"))
		if renewals < 2000*9 {
			t.Fatalf("%d renewals of 2000 locks in 10s, want at least 9 each", renewals)
		}
		for _, p := range ps {
			cmds, keys := p.count(node.ExtendMany)
			if single, _ := p.count(node.Extend); single != 0 || cmds == 0 || keys/cmds < 100 {
				t.Fatalf("%s: %d single extends, %d ExtendMany for %d keys: want batches of at least 100", p.name, single, cmds, keys)
			}
		}
		for _, l := range ls {
			if l.Err() != nil || memHolders(ps, l) != 5 {
				t.Fatalf("%s: Err %v, %d holders", l.id.key, l.Err(), memHolders(ps, l))
			}
		}
	})
}

// TestRenewalReleaseMidBatch: a lock released while its renewal batch is in
// flight is released once the batch has answered (never two commands of one
// lock at once), is not renewed again, and the batch's other locks stay held.
func TestRenewalReleaseMidBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, rec := sendEnv(t)
		ls := lockMany(t, c, 50)
		begun := make(chan struct{}, 100)
		for _, p := range ps {
			p.set(node.ExtendMany, 200*time.Millisecond, 0, begun)
		}
		<-begun // a batch is on its way
		victim := ls[0]
		if err := victim.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			p.set(node.ExtendMany, 200*time.Millisecond, 0, nil)
		}
		time.Sleep(10 * time.Second)
		for _, e := range rec.of("extended") {
			if e.ev.Key == victim.id.key && e.at.After(released(t, rec, victim)) {
				t.Fatalf("renewed %v after its Release", e.at.Sub(released(t, rec, victim)))
			}
		}
		if memHolders(ps, victim) != 0 || !errors.Is(victim.Err(), ErrReleased) {
			t.Fatalf("released lock: %d holders, Err %v", memHolders(ps, victim), victim.Err())
		}
		for _, l := range ls[1:] {
			if l.Err() != nil || memHolders(ps, l) != 5 {
				t.Fatalf("%s: Err %v, %d holders", l.id.key, l.Err(), memHolders(ps, l))
			}
		}
	})
}

func released(t *testing.T, rec *recorder, l *Lock) time.Time {
	t.Helper()
	for _, e := range rec.of("released") {
		if e.ev.Key == l.id.key {
			return e.at
		}
	}
	t.Fatalf("%s was not released", l.id.key)
	return time.Time{}
}

// TestRenewalNodeDropsBatch: a node that never answers one batch costs that
// batch nothing (four nodes confirm); three nodes that drop one batch fail
// it, and the renewal is retried in time: no lock is lost.
func TestRenewalNodeDropsBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, droppers := range []int{1, 3} {
			ps, c, rec := sendEnv(t)
			ls := lockMany(t, c, 600) // two chunks per batch
			for _, p := range ps[:droppers] {
				p.set(node.ExtendMany, 0, 1, nil)
				p.set(node.Extend, 0, 1, nil)
			}
			time.Sleep(10 * time.Second)
			if droppers == 3 && len(rec.of("extend-failed")) == 0 {
				t.Fatal("no renewal failed with 3 of 5 nodes dropping a batch")
			}
			for _, l := range ls {
				if l.Err() != nil {
					t.Fatalf("%d droppers: %s lost: %v", droppers, l.id.key, l.Err())
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestRenewalSlowerThanNodeTimeout: a batch that takes a node far longer
// than the node timeout to answer (a big batch on a busy server) still
// renews: a renewal waits as long as its locks have validity to spare, where
// a round of its own would time out and be retried until the locks lapse.
func TestRenewalSlowerThanNodeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, rec := sendEnv(t, WithNodeTimeout(50*time.Millisecond))
		ls := lockMany(t, c, 100)
		for _, p := range ps {
			p.set(node.ExtendMany, 400*time.Millisecond, 0, nil)
			p.set(node.Extend, 400*time.Millisecond, 0, nil)
		}
		time.Sleep(15 * time.Second)
		if f := len(rec.of("extend-failed")); f != 0 {
			t.Fatalf("%d renewals failed", f)
		}
		for _, l := range ls {
			if l.Err() != nil {
				t.Fatalf("%s lost: %v", l.id.key, l.Err())
			}
		}
	})
}

// TestCloseCutsRenewalWait: Close does not wait out a renewal that waits
// for nodes that do not answer (its wait may be seconds long): the renewal
// stops waiting, and Close releases the locks on the nodes that answer.
func TestCloseCutsRenewalWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sendEnv(t, WithTTL(30*time.Second))
		ls := lockMany(t, c, 10)
		begun := make(chan struct{}, 100)
		for _, p := range ps[:3] {
			p.set(node.ExtendMany, 0, 100, begun) // silent until deadline + Follow
		}
		<-begun
		start := time.Now()
		_ = c.Close() // the 3 silent nodes cannot confirm the releases
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("Close took %v with a renewal waiting on 3 silent nodes", took)
		}
		for _, l := range ls {
			if !errors.Is(l.Err(), ErrReleased) {
				t.Fatalf("%s after Close: %v", l.id.key, l.Err())
			}
		}
	})
}

// TestCloseWithinOneBound: Close returns within one cleanup budget plus the
// node timeout after it begins, whatever the nodes do: here two of five
// never answer a release, so Close's releases, the re-sends of the deletes
// that got no reply, and their last sends all meet silent nodes. Before,
// each of those steps could take a whole budget after the one before (6 s
// with the defaults, in virtual time).
func TestCloseWithinOneBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sendEnv(t, WithTTL(30*time.Second), WithAutoExtend(false))
		lockMany(t, c, 10)
		for _, p := range ps[3:] {
			p.set(node.Release, time.Hour, 0, nil)
		}
		start := time.Now()
		_ = c.Close()
		bound := c.cfg.CleanupTimeout() + c.cfg.NodeTimeout
		if took := time.Since(start); took > bound {
			t.Fatalf("Close took %v with 2 of 5 nodes silent; the bound is %v", took, bound)
		}
	})
}
