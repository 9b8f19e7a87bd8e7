package owed

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// TestDeleteSentAgainUntilAnswered: a delete that fails unwritten is sent
// again, after 100 ms, 200 ms, ...; an unsure one also while it finds
// nothing; one that is answered, or refused, is not; the health log hears
// of the last answer.
func TestDeleteSentAgainUntilAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		var lt Later
		var mu sync.Mutex
		var sends []time.Duration
		replies := []node.Result{{Err: errors.New("not sent")}, {Int: 0}, {Int: 1}}
		failed, answered := 0, 0
		start := time.Now()
		env := &Env{WG: &wg, Later: &lt,
			Send: func(o node.Op, _ time.Duration, n int, r node.Receiver) {
				mu.Lock()
				k := len(sends)
				sends = append(sends, time.Since(start))
				mu.Unlock()
				wg.Add(1)
				go r.Deliver(n, replies[min(k, len(replies)-1)])
			},
			Failed:   func(int, error) { failed++ },
			Answered: func(int) { answered++ },
		}
		d := &Delete{Env: env, Op: node.Op{Kind: node.Release}, Bound: time.Second, Unsure: true,
			Again: Policy{Wait: 100 * time.Millisecond, Horizon: start.Add(time.Minute)}}
		d.Send(0)
		synctest.Wait()
		time.Sleep(time.Second)
		wg.Wait()
		want := []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond}
		if len(sends) != len(want) {
			t.Fatalf("sent at %v, want at %v", sends, want)
		}
		for i := range want {
			if sends[i] != want[i] {
				t.Fatalf("sent at %v, want at %v", sends, want)
			}
		}
		if failed != 0 || answered != 1 {
			t.Fatalf("health log: %d failures, %d answers; want 0 and 1", failed, answered)
		}
	})
}

// TestStopSendsPendingOnceInOrder: Stop runs the pending re-sends at once,
// in the order they were scheduled; a re-send asked for after Stop runs at
// once, with no policy left.
func TestStopSendsPendingOnceInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		var lt Later
		var got []int
		for i := range 5 {
			lt.Again(&wg, Policy{Wait: time.Duration(5-i) * time.Second, Horizon: time.Now().Add(time.Hour)}, func(Policy) { got = append(got, i) })
		}
		lt.Stop(&wg)
		wg.Wait()
		if len(got) != 5 || got[0] != 0 || got[4] != 4 {
			t.Fatalf("ran %v at Stop, want [0 1 2 3 4]", got)
		}
		var last Policy
		ran := lt.Again(&wg, Policy{Wait: time.Second, Horizon: time.Now().Add(time.Hour)}, func(p Policy) { last = p })
		if !ran || last != (Policy{}) {
			t.Fatalf("after Stop: ran %v with policy %+v, want at once with none", ran, last)
		}
		if lt.Again(&wg, Policy{}, func(Policy) { t.Fatal("sent with no policy") }) {
			t.Fatal("a policy of no wait sends again")
		}
	})
}

// fakeSender answers every op it is given with reply(node), on a goroutine,
// and records what it was given.
type fakeSender struct {
	mu    *sync.Mutex
	ops   *[]*node.Op
	reply func() node.Result
}

func (s fakeSender) Send(op *node.Op, _ time.Time, rcv node.Receiver, tag int) {
	s.mu.Lock()
	*s.ops = append(*s.ops, op)
	s.mu.Unlock()
	go rcv.Deliver(tag, s.reply())
}

// TestLeaveSentAgainOnlyWhenNeverWritten: a leave goes to the nodes asked,
// one op for all; with a wait it goes as a round's command (followed, not
// in the background) and SendAll returns once they answered; it is sent
// again, in the background and unfollowed, only to the node where it was
// never written, not to the one that timed out (it may have run) or the
// one that refused it.
func TestLeaveSentAgainOnlyWhenNeverWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		var lt Later
		var mu sync.Mutex
		var first []*node.Op
		replies := []node.Result{{Int: 1}, {Err: node.ErrNotSent}, {Err: context.DeadlineExceeded}, {Err: refusal("ERR refused")}, {}}
		senders := make([]node.Sender, len(replies))
		for i := range senders {
			senders[i] = fakeSender{&mu, &first, func() node.Result { return replies[i] }}
		}
		var again []int
		env := &Env{Senders: senders, WG: &wg, Later: &lt,
			Send: func(o node.Op, _ time.Duration, n int, r node.Receiver) {
				if !o.Background || o.Follow != 0 {
					t.Errorf("re-sent to node %d with Background %v, Follow %v; want in the background, unfollowed", n, o.Background, o.Follow)
				}
				mu.Lock()
				again = append(again, n)
				mu.Unlock()
				wg.Add(1)
				go r.Deliver(n, node.Result{Int: 1})
			},
		}
		lv := &Leave{Env: env, Op: node.Op{Kind: node.Leave, Background: true}, Bound: time.Second,
			Again: Policy{Wait: 100 * time.Millisecond, Horizon: time.Now().Add(time.Minute)}}
		wg.Add(1) // the caller's count
		lv.SendAll(func(i int) bool { return i < 4 }, time.Now().Add(time.Second), 50*time.Millisecond, 2*time.Second)
		if len(first) != 4 || first[0] != first[3] {
			t.Fatalf("sent %d ops (shared: %v), want one op to nodes 0-3", len(first), len(first) > 0 && first[0] == first[len(first)-1])
		}
		if o := first[0]; o.Background || o.Follow != 2*time.Second {
			t.Fatalf("the waited-for leave went with Background %v, Follow %v; want a round's command followed 2s", o.Background, o.Follow)
		}
		wg.Done()
		wg.Wait()
		if len(again) != 1 || again[0] != 1 {
			t.Fatalf("sent again to nodes %v, want [1] (the one it was never written to)", again)
		}
	})
}

// refusal is a node's error reply (node.Refused).
type refusal string

func (r refusal) Error() string { return string(r) }
func (refusal) RedisError()     {}
