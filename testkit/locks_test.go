package testkit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

// TestDialClientFailures: DialClient returns each failure, naming the node
// where there is one, and closes every Pool it made before it.
func TestDialClientFailures(t *testing.T) {
	c := testkit.Start(t, 3)
	var made []pool.Pool
	keep := func(_ int, p pool.Pool) (pool.Pool, error) { made = append(made, p); return p, nil }
	wantClosed := func(what string) {
		t.Helper()
		for i, p := range made {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := p.Acquire(ctx, "k", "t", time.Second)
			cancel()
			if err == nil {
				t.Errorf("%s: pool %d is still open", what, i)
			}
		}
		made = nil
	}

	refuse := errors.New("no")
	_, _, err := c.DialClient(testkit.ClientOptions{Wrap: func(i int, p pool.Pool) (pool.Pool, error) {
		if i == 2 {
			return nil, refuse
		}
		return keep(i, p)
	}})
	if !errors.Is(err, refuse) || !contains(err, "node2") {
		t.Fatalf("a Wrap error: %v", err)
	}
	wantClosed("Wrap failed")

	_, _, err = c.DialClient(testkit.ClientOptions{Wrap: keep, Lock: []redlock.Option{redlock.WithQuorum(1)}})
	if err == nil || !contains(err, "redlock.New") {
		t.Fatalf("a quorum redlock.New refuses: %v", err)
	}
	wantClosed("redlock.New failed")

	cl, pools, err := c.DialClient(testkit.ClientOptions{Wrap: keep})
	if err != nil || len(pools) != 3 {
		t.Fatalf("DialClient: %v (%d pools)", err, len(pools))
	}
	if _, err := cl.TryLock(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	_ = cl.Close()
	for _, p := range pools {
		_ = p.Close()
	}
}

// contains reports whether err says s.
func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }
