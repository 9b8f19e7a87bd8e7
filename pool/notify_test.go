package pool

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// TestSubscription: a subscription delivers the release of a subscribed key
// with the released token, nothing for other keys, and Close joins its
// goroutine (TestMain checks for leaks).
func TestSubscription(t *testing.T) {
	m, _, p := newPool(t)
	ctx := context.Background()
	got := make(chan [2]string, 16)
	s := p.(node.Subscriber).Subscribe(func(channel, message string) { got <- [2]string{channel, message} })
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
