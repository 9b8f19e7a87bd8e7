package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestRecorderLearnsTTL: a Recorder made without history.WithTTL records
// each lock's own TTL (the Client's default, or a per-call redlock.WithTTL),
// so Check finds no violation in a correct run of 100 ms locks.
func TestRecorderLearnsTTL(t *testing.T) {
	const ttl = 100 * time.Millisecond
	ctx := context.Background()
	addrs := memServers(t)
	cases := []struct {
		name       string
		clientOpts []redlock.Option
		callOpts   []redlock.Option
	}{
		{"client", []redlock.Option{redlock.WithTTL(ttl)}, nil},
		{"call", nil, []redlock.Option{redlock.WithTTL(ttl)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := history.New()
			// A node timeout well inside the 100 ms TTL (memClient's 400 ms would leave no validity).
			c := memClient(t, addrs, append([]redlock.Option{redlock.WithNodeTimeout(20 * time.Millisecond)}, tc.clientOpts...)...)
			rec := h.Recorder("a", c)
			for range 3 {
				l, op, err := rec.Acquire(ctx, "ttl-"+tc.name, 0, tc.callOpts...)
				if err != nil {
					t.Fatal(err)
				}
				if op.TTL != ttl {
					t.Errorf("acquire recorded TTL %v, want the lock's %v", op.TTL, ttl)
				}
				// Under make test's load a 20 ms node timeout can pass on
				// every node (the extend then fails, and is recorded as
				// such): what is checked is the TTL recorded, and Check.
				op, xerr := rec.Extend(ctx, l, 0)
				if op.TTL != ttl {
					t.Errorf("extend recorded TTL %v (err %v), want the lock's %v", op.TTL, xerr, ttl)
				}
				if _, err := rec.Release(ctx, l); err != nil && xerr == nil {
					t.Fatal(err)
				}
			}
			if r := history.Check(h, history.Config{Nodes: 5}); r.Total() != 0 {
				t.Fatalf("a correct run of %v locks, recorded without history.WithTTL:\n%v", ttl, r)
			}
		})
	}
}
