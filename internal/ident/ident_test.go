package ident

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leakcheck"
	"github.com/quorumlock/quorumlock/internal/stall"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

// TestCheckSpansAStandStill: the process stands still for longer than an
// identity check's bound while every node's INFO is on its way; the
// answers come 50 ms after it runs again. Bounded by stall.WithTimeout (a
// Client's whose Pools keep the stall clock), the check does not count
// the stand-still: it waits for them, and the nodes are verified. With a
// bound on the wall clock, the check ended as the process ran again, and
// the nodes stayed out of votes (the chaos suite saw a new Client's nodes
// unverified for the 2.8 s after a stall).
func TestCheckSpansAStandStill(t *testing.T) {
	b := Bounds{Quorum: 2, NodeTimeout: 50 * time.Millisecond, Recheck: time.Hour}
	freeze := idTimeout(b) + 200*time.Millisecond
	answerAt := make(chan time.Time, 1)
	v := New(Config{
		Names: []string{"a", "b", "c"},
		RunID: func(ctx context.Context, i int) (string, error) {
			at := <-answerAt
			answerAt <- at
			select {
			case <-time.After(time.Until(at)):
				return fmt.Sprintf("id-%d", i), nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		},
		Go:    func(f func()) { go f() },
		Bound: stall.WithTimeout,
	})
	stall.Hold() // as a Client's operation does, before its check
	defer stall.Done()
	start := time.Now()
	stall.Freeze(freeze)
	answerAt <- start.Add(freeze + 50*time.Millisecond)
	if err := v.Check(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, v)
	for i := range 3 {
		if !v.Verified(i) {
			t.Errorf("node %d not verified after a stand-still of %v: %v", i, freeze, v.Why(i))
		}
	}
}

// waitEnded waits until no check of v runs.
func waitEnded(t *testing.T, v *Nodes) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		v.mu.Lock()
		running := v.running != nil
		v.mu.Unlock()
		if !running {
			return
		}
	}
	t.Fatal("the check did not end")
}
