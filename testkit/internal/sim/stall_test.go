package sim

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// TestStallGate: while a client stands still, nothing it sends is written
// and nothing reaches it. A reply that came during the stall is delivered
// at its end (its Pool's wait, which ran out during the stall, was moved
// later by the stall); a command sent during the stall is written at its
// end when its deadline has not passed, else answered node.ErrNotSent then
// and never run; a subscription's event waits too; afterwards everything
// goes by at once.
func TestStallGate(t *testing.T) {
	const stall = 200 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		tr := &tracer{t0: t0}
		n := newNode(0, 1, t0, tr)
		go n.serve()
		defer func() { close(n.exec); n.eng.release() }()
		s := schedule{stalls: []clientStall{{client: 0, at: 10 * time.Millisecond, dur: stall}}}
		nw := &network{cfg: netConfig{nodeTimeout: 20 * time.Millisecond}, seed: 1, links: map[link]*linkState{}, d: newDispatcher(), t0: t0, gates: gatesOf(s, tr)}
		go nw.d.run()
		defer nw.d.stop()
		p := &simPool{client: "c0", n: n, net: nw, tr: tr, gate: nw.gates[0]}
		rec := &deliveries{t0: t0, at: map[int]time.Duration{}, res: map[int]node.Result{}}
		send := func(tag int, key string, at time.Duration) {
			time.Sleep(at - time.Since(t0))
			op := node.New(node.Op{Kind: node.Acquire, Key: key, Token: "t", TTL: time.Minute})
			p.Send(op, time.Now().Add(20*time.Millisecond), rec, tag) // each way 50 µs: no fault drawn
		}
		held := func(key string) bool {
			n.lock()
			defer n.unlock()
			return n.st.live(key, n.now()) != nil
		}
		end := 10*time.Millisecond + stall
		send(1, "before", 9970*time.Microsecond) // lands during the stall; its reply waits
		send(2, "expires", 50*time.Millisecond)  // deadline 70 ms: never written
		send(3, "fresh", 205*time.Millisecond)   // deadline 225 ms: written at the end
		var event atomic.Int64
		p.handle(func() { event.Store(int64(time.Since(t0))) })
		if !held("before") {
			t.Fatalf("the command written before the stall did not run on the node")
		}
		if held("expires") || held("fresh") {
			t.Fatalf("a command sent during the stall ran before its end")
		}
		if _, _, ok := rec.get(1); ok || event.Load() != 0 {
			t.Fatalf("something reached the stalled client during the stall")
		}
		time.Sleep(end + time.Millisecond - time.Since(t0))
		at1, res1, _ := rec.get(1)
		at2, res2, _ := rec.get(2)
		at3, res3, _ := rec.get(3)
		soon := func(at time.Duration) bool { return at > end && at < end+time.Microsecond } // one a nanosecond, in order
		if !soon(at1) {
			t.Errorf("the reply that came during the stall was delivered at %v, want just after the stall's end %v", at1, end)
		}
		if res1.Err != nil || res1.Int != 1 {
			t.Errorf("the reply that came during the stall: %+v, want the node's yes", res1)
		}
		if !soon(at2) || at2 <= at1 || !errors.Is(res2.Err, node.ErrNotSent) {
			t.Errorf("the command whose deadline passed during the stall: %+v at %v, want node.ErrNotSent just after the stall's end %v, after the reply", res2, at2, end)
		}
		if held("expires") {
			t.Errorf("the command whose deadline passed during the stall ran")
		}
		if !held("fresh") || res3.Int != 1 || at3 <= end {
			t.Errorf("the command sent just before the stall's end: ran %v, answered %+v at %v, want it run and answered after %v", held("fresh"), res3, at3, end)
		}
		if got := time.Duration(event.Load()); !soon(got) || got <= at2 {
			t.Errorf("the subscription's event reached the client at %v, want just after %v, in order", got, end)
		}
		if p.gate.stalled() != 0 || p.gate.hold(func() {}) {
			t.Errorf("the gate still holds after the stall")
		}
	})
}

// deliveries records when each tag's answer came, and what it was.
type deliveries struct {
	t0  time.Time
	mu  sync.Mutex
	at  map[int]time.Duration
	res map[int]node.Result
}

// get returns when tag's answer came and what it was, ok false before.
func (d *deliveries) get(tag int) (time.Duration, node.Result, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.at[tag]
	return at, d.res[tag], ok
}

func (d *deliveries) Deliver(tag int, r node.Result) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at[tag], d.res[tag] = time.Since(d.t0), r
}

// TestStallReplayIsDeterministic is TestReplayIsDeterministic for mixed
// schedules with a stall: the first four such seeds, each played twice.
func TestStallReplayIsDeterministic(t *testing.T) {
	found := 0
	for seed := uint64(1); found < 4 && seed < 200; seed++ {
		if s := newSchedule(seed, none); s.work != mixed || len(s.stalls) == 0 {
			continue
		}
		found++
		a := ranLines(play(t, seed, none, true).trace)
		b := ranLines(play(t, seed, none, true).trace)
		if i := firstDiff(a, b); i >= 0 {
			t.Errorf("seed %d replayed differently from line %d of %d:\n%s\n%s", seed, i, len(a), at(a, i), at(b, i))
		}
	}
	if found == 0 {
		t.Fatal("no mixed schedule with a stall among the first 200 seeds")
	}
}
