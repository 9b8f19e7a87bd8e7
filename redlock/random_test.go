package redlock

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/simhook"
)

// TestSimhookRandomRepeats: a Client given a seeded generator through
// internal/simhook (the simulator's) draws the same retry delays, waiter
// names and tokens on every run; the default draws stay in range.
func TestSimhookRandomRepeats(t *testing.T) {
	draw := func(seed uint64) (delays []time.Duration, waiter string) {
		c, err := New(asPools(newMemPools(3)), simhook.Random(rand.New(rand.NewPCG(seed, 1)).Uint64).(Option))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for a := range 8 {
			delays = append(delays, c.cfg.RetryDelay(a))
		}
		names, _ := newNotifier(c.cfg, c.pools, true) // as a Client over queued Pools names its waiters
		tok, err := c.cfg.Token()
		if err != nil || len(tok) != 22 {
			t.Fatalf("token %q, %v: want 22 characters, as randomToken's", tok, err)
		}
		return delays, names.Client() + " " + tok
	}
	d1, w1 := draw(7)
	d2, w2 := draw(7)
	d3, w3 := draw(8)
	if w1 != w2 || !slices.Equal(d1, d2) {
		t.Fatalf("one seed, two runs: waiters %q and %q, delays %v and %v", w1, w2, d1, d2)
	}
	if w1 == w3 || slices.Equal(d1, d3) {
		t.Fatalf("two seeds drew the same: waiter %q, delays %v", w1, d1)
	}
	cfg := defaultConfig()
	for range 100 {
		if d := cfg.Jitter(100 * time.Millisecond); d < 50*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("default jitter(100ms) = %v, want within [50ms, 100ms]", d)
		}
	}
}
