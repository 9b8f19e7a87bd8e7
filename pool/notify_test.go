package pool

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

// TestSubscription: a subscription delivers the release of a subscribed key
// with the released token, nothing for other keys, and Close joins its
// goroutine (TestMain checks for leaks).
func TestSubscription(t *testing.T) {
	m, _, p := newPool(t)
	ctx := context.Background()
	got := make(chan [2]string, 16)
	s := p.(node.Subscriber).Subscribe(node.Handler{Published: func(channel, message string) { got <- [2]string{channel, message} }, Subscribed: func(string) {}}, time.Second)
	defer s.Close()
	if err := s.Add(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	for until := time.Now().Add(5 * time.Second); m.PubSubNumSub("k")["k"] == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(until) {
			t.Fatal("the subscription never reached the server")
		}
	}
	for _, kt := range [][2]string{{"other", "x"}, {"k", "t1"}} {
		if _, err := p.Acquire(ctx, kt[0], kt[1], time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Release(ctx, kt[0], kt[1]); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case msg := <-got:
		if msg != [2]string{"k", "t1"} {
			t.Fatalf("message %q, want [k t1]", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	if err := s.Remove(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSubscriptionSetupBudget: a connection setup that gets no answer (a
// server that accepts and stays silent) is given up after the setup budget
// and tried again, however long the client's read timeout, on a Pool made
// by Dial and on one from New over a client that honours context deadlines.
func TestSubscriptionSetupBudget(t *testing.T) {
	slow := func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, ReadTimeout: time.Minute, ContextTimeoutEnabled: true, MaxRetries: -1}
	}
	for _, tc := range []struct {
		name string
		pool func(t *testing.T, addr string) Pool
	}{
		{"Dial", func(t *testing.T, addr string) Pool {
			p, err := Dial(slow(addr))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			return p
		}},
		{"New", func(t *testing.T, addr string) Pool {
			rdb := redis.NewClient(slow(addr))
			t.Cleanup(func() { _ = rdb.Close() })
			p, err := New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, accepted := newCountingSilentServer(t)
			s := tc.pool(t, addr).(node.Subscriber).Subscribe(nopHandler, 50*time.Millisecond)
			defer s.Close()
			waitUntil(t, 10*time.Second, "three connection setups", func() bool { return accepted.Load() >= 3 })
		})
	}
}

// TestSubscriptionCloseEndsSetup: Close of a subscription of a Pool made by
// Dial does not wait for a connection setup in progress, even one that only
// a minute would end (the read timeout and the setup budget): it closes the
// connection, and a subscription change waiting behind the setup returns
// too. Both must return well within a safety bound of 20 s.
func TestSubscriptionCloseEndsSetup(t *testing.T) {
	addr, accepted := newCountingSilentServer(t)
	p, err := Dial(&redis.Options{Addr: addr, ReadTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := p.(node.Subscriber).Subscribe(nopHandler, time.Minute)
	waitUntil(t, 10*time.Second, "the subscription dialled", func() bool { return accepted.Load() > 0 })
	added := make(chan error, 1)
	go func() { added <- s.Add(context.Background(), "k") }() // waits for the setup
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	safety := time.After(20 * time.Second)
	for _, c := range []struct {
		what string
		ch   chan error
	}{{"Close", closed}, {"Add", added}} {
		select {
		case err := <-c.ch:
			if c.what == "Close" && err != nil {
				t.Errorf("Close: %v", err)
			}
		case <-safety:
			t.Fatalf("%s did not return within 20 s: it waits for the connection setup", c.what)
		}
	}
}

// waitUntil polls cond every millisecond until it holds, and fails the
// test if it does not within bound.
func waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(bound); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, bound)
		}
	}
}

var nopHandler = node.Handler{Published: func(string, string) {}, Subscribed: func(string) {}}
