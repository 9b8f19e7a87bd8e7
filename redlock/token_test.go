package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestSameTokenIsNoSecondHolder: with a token generator that repeats a
// token, a TryLock of a key a live Lock of the same Client holds with that
// token fails with ErrNotAcquired instead of becoming a second holder (the
// nodes answer yes to the token they hold, so that a command sent again
// finds its own key), also for a key among a held TryLockAll's and for
// attempts that run at once; once the first Lock is released, the token
// may be used again.
func TestSameTokenIsNoSecondHolder(t *testing.T) {
	e := newEnv(t, 5)
	ctx := context.Background()
	same := WithTokenGenerator(func() (string, error) { return "same", nil })
	c := e.scriptClient(same)
	first, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := c.TryLock(ctx, "k"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second TryLock with the held token: %v, %v; want ErrNotAcquired", l, err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock after the holder released: %v", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}

	all, err := c.TryLockAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := c.TryLock(ctx, "b"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock of a key a TryLockAll holds with the token: %v, %v; want ErrNotAcquired", l, err)
	}
	if err := all.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	won := make(chan *Lock, 8)
	for range 8 {
		wg.Go(func() {
			if l, err := c.TryLock(ctx, "race"); err == nil {
				won <- l
			}
		})
	}
	wg.Wait()
	close(won)
	if n := len(won); n != 1 {
		t.Fatalf("%d of 8 concurrent TryLocks with one token won; want 1", n)
	}
}

// TestQuorumErrorCarriesTTL: a failed acquire's QuorumError says the TTL
// its command set, the per-call WithTTL's or the Client's, so that a
// caller (the test kit's Recorder) can tell how long a key it may have
// left lives.
func TestQuorumErrorCarriesTTL(t *testing.T) {
	e := newEnv(t, 5)
	ctx := context.Background()
	c := e.client(WithTTL(2 * time.Second))
	for _, n := range e.nodes[:3] {
		n.m.Set(rkey("taken"), "someone-else")
	}
	for _, tc := range []struct {
		opts []Option
		want time.Duration
	}{{nil, 2 * time.Second}, {[]Option{WithTTL(5 * time.Second)}, 5 * time.Second}} {
		_, err := c.TryLock(ctx, "taken", tc.opts...)
		var qe *QuorumError
		if !errors.As(err, &qe) || qe.TTL != tc.want {
			t.Fatalf("TryLock of a taken key: %v (TTL %v); want a QuorumError with TTL %v", err, qe, tc.want)
		}
	}
}
