package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
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
