package session

import (
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// member counts what a Session tells it.
type member struct {
	mu                sync.Mutex
	rearms, won, lost int
}

func (m *member) Rearm() { m.mu.Lock(); m.rearms++; m.mu.Unlock() }

func (m *member) Renewed(_ time.Duration, won bool, _, _, _ int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if won {
		m.won++
	} else {
		m.lost++
	}
}

// rig is a Session over 3 nodes whose renewals are answered at once by
// answer (per node), on a clock the test moves.
type rig struct {
	s      *Session
	now    time.Time
	answer []node.Result
	wg     sync.WaitGroup
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{now: time.Unix(1000, 0), answer: make([]node.Result, 3)}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	env := Env{
		Send: func(o node.Op, _ time.Time, n int, rcv node.Receiver) {
			r.wg.Add(1)
			rcv.Deliver(n, r.answer[n])
		},
		Done:     r.wg.Done,
		Go:       func(func()) {}, // no background renewals: the test renews
		Stop:     stop,
		Verified: func(int) bool { return true },
	}
	cfg := Config{TTL: time.Second, Every: time.Second / 3, NodeTimeout: 50 * time.Millisecond, MaxWait: time.Second,
		Drift: 0.01, Now: func() time.Time { return r.now }, Quorum: 2}
	r.s = New(cfg, env, "sid", "p:s:sid", "p:s:seq", 3)
	return r
}

// TestNewIncarnationDropsGeneration: a node whose session key holds a new
// incarnation starts a new generation, and the members are told that
// their deadlines may have moved earlier; an older incarnation's reply,
// while the node's confirmation vouches, counts for nothing.
func TestNewIncarnationDropsGeneration(t *testing.T) {
	r := newRig(t)
	m := &member{}
	gens := make([]uint64, 3)
	for n := range gens {
		gens[n] = r.s.Accepted(n, 5, r.now)
	}
	r.s.Add(m, true)
	if g := r.s.Accepted(0, 4, r.now); g != 0 {
		t.Fatalf("an older incarnation got generation %d", g)
	}
	if g := r.s.Accepted(0, 6, r.now); g == 0 || g == gens[0] {
		t.Fatalf("a new incarnation got generation %d (was %d)", g, gens[0])
	}
	if m.rearms != 1 {
		t.Fatalf("members told %d times of a dropped generation, want 1", m.rearms)
	}
	keys := []time.Time{r.now.Add(time.Hour), r.now.Add(time.Hour), r.now.Add(time.Hour)}
	if d := r.s.Deadline(gens, keys, time.Time{}, 2); d.IsZero() {
		t.Fatal("nodes 1 and 2 still vouch, yet no deadline")
	}
	if d := r.s.Deadline(gens, keys, time.Time{}, 3); !d.IsZero() {
		t.Fatalf("node 0's old generation still counts: deadline %v", d)
	}
}

// TestRenewalTellsWatchedMembersOnce: a background renewal confirmed by a
// quorum tells each watched member once that it won; one refused by every
// node drops every generation and tells them once that it failed.
func TestRenewalTellsWatchedMembersOnce(t *testing.T) {
	r := newRig(t)
	watched, unwatched := &member{}, &member{}
	for n := range 3 {
		r.s.Accepted(n, 1, r.now)
	}
	r.s.Add(watched, true)
	r.s.Add(unwatched, false)
	for n := range r.answer {
		r.answer[n] = node.Result{Int: 1}
	}
	r.now = r.now.Add(300 * time.Millisecond)
	if sent := r.s.Renew(r.now, nil); sent != 3 {
		t.Fatalf("renewal sent to %d nodes, want 3", sent)
	}
	if watched.won != 1 || watched.lost != 0 || unwatched.won+unwatched.lost != 0 {
		t.Fatalf("after a confirmed renewal: watched %+v, unwatched %+v", watched, unwatched)
	}
	for n := range r.answer {
		r.answer[n] = node.Result{Int: 0}
	}
	r.s.Renew(r.now, nil)
	if watched.won != 1 || watched.lost != 1 {
		t.Fatalf("after a refused renewal: watched %+v", watched)
	}
	for n := range 3 {
		if g := r.s.Node(n).Gen; g != 0 {
			t.Fatalf("node %d keeps generation %d after its session ended there", n, g)
		}
	}
	if sent := r.s.Renew(r.now, nil); sent != 0 {
		t.Fatalf("renewal sent to %d nodes where the session lives nowhere", sent)
	}
	r.wg.Wait()
}
