package wake

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestGatesOneAtATime: rounds for one key never overlap; other keys do not
// wait; the entries go when the last round leaves.
func TestGatesOneAtATime(t *testing.T) {
	var g Gates
	var in, most atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if err := g.Enter(context.Background(), "k"); err != nil {
					t.Error(err)
					return
				}
				if n := in.Add(1); n > most.Load() {
					most.Store(n)
				}
				if err := g.Enter(context.Background(), "other"); err != nil { // another key: no wait
					t.Error(err)
				}
				g.Exit("other")
				in.Add(-1)
				g.Exit("k")
			}
		})
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d rounds of one key at once", most.Load())
	}
	if len(g.refs) != 0 || len(g.turns) != 0 {
		t.Fatalf("entries left: %v %v", g.refs, g.turns)
	}
}

// TestGatesCancel: a waiter whose context ends returns its error and does
// not take the turn from the next waiter.
func TestGatesCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Gates
		if err := g.Enter(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- g.Enter(ctx, "k") }()
		got := make(chan struct{})
		go func() {
			if err := g.Enter(t.Context(), "k"); err != nil {
				t.Error(err)
			}
			close(got)
		}()
		time.Sleep(2 * time.Second)
		if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled waiter: %v", err)
		}
		select {
		case <-got:
			t.Fatal("a waiter got the turn while it was held")
		default:
		}
		g.Exit("k")
		<-got
		g.Exit("k")
		if len(g.refs) != 0 || len(g.turns) != 0 {
			t.Fatalf("entries left: %v %v", g.refs, g.turns)
		}
	})
}
