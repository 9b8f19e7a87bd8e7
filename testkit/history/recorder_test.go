package history_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// memServers starts five in-memory servers and returns their addresses.
func memServers(t *testing.T) []string {
	var addrs []string
	for range 5 {
		addrs = append(addrs, miniredis.RunT(t).Addr())
	}
	return addrs
}

// memClient returns a Client over the servers at addrs with opts.
func memClient(t *testing.T, addrs []string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return wrappedMemClient(t, addrs, nil, opts...)
}

// wrappedMemClient is memClient with node i's Pool wrapped by wrap (if not
// nil) before the Client gets it.
func wrappedMemClient(t *testing.T, addrs []string, wrap func(i int, p pool.Pool) (pool.Pool, error), opts ...redlock.Option) *redlock.Client {
	t.Helper()
	var pools []pool.Pool
	for i, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		p, err := pool.New(rdb, pool.WithName(fmt.Sprint("mem", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close(); _ = rdb.Close() })
		var wrapped pool.Pool = p
		if wrap != nil {
			if wrapped, err = wrap(i, p); err != nil {
				t.Fatal(err)
			}
		}
		pools = append(pools, wrapped)
	}
	// A generous node timeout (opts may set another): the race detector
	// and a loaded machine (make test runs the packages in parallel) slow
	// the in-memory servers far beyond the default's 50 ms.
	c, err := redlock.New(pools, slices.Concat([]redlock.Option{redlock.WithNodeTimeout(400 * time.Millisecond)}, opts)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRecorder: a Recorder's operations land in the History as the calls
// went: a won acquire with its token, fence and deadline, a refused one
// with the tokens of its rounds, an extend, a section and a release.
func TestRecorder(t *testing.T) {
	ctx := context.Background()
	h := history.New()
	log := &history.TokenLog{Prefix: "b"}
	addrs := memServers(t)
	a := h.Recorder("a", memClient(t, addrs, redlock.WithFencing(true), redlock.WithTTL(time.Second)), history.WithTTL(time.Second))
	b := h.Recorder("b", memClient(t, addrs, redlock.WithTokenGenerator(log.Generate)), history.WithTokens(log))

	l, op, err := a.Acquire(ctx, "k", 0)
	if err != nil || op.Outcome != history.OK || op.Token != l.Token() || op.Fence == 0 || op.Deadline != h.Since(l.Deadline()) || op.TTL != time.Second {
		t.Fatalf("won acquire recorded as %+v (err %v)", op, err)
	}
	_, op, err = b.Acquire(ctx, "k", 0)
	if !errors.Is(err, redlock.ErrNotAcquired) || op.Outcome != history.Failed || len(op.Tried) != 1 || !strings.HasPrefix(op.Tried[0], "b-1-") || op.Agreed != 0 || op.Quorum != 3 {
		t.Fatalf("refused acquire recorded as %+v (err %v)", op, err)
	}
	if op, err := a.Extend(ctx, l, 0); err != nil || op.Kind != history.Extend || op.Outcome != history.OK {
		t.Fatalf("extend recorded as %+v (err %v)", op, err)
	}
	if err := a.Section(l, func() error { return errors.New("job failed") }); err == nil {
		t.Fatal("Section lost fn's error")
	}
	if op, err := a.Release(ctx, l); err != nil || op.Kind != history.Release || op.Token != l.Token() {
		t.Fatalf("release recorded as %+v (err %v)", op, err)
	}
	if err := b.Do(ctx, "k", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	r := history.Check(h, history.Config{Nodes: 5})
	if r.Total() != 0 || r.Acquired != 2 || r.FailedAcquires != 1 || r.Extends != 1 || r.Releases != 2 || r.Sections != 2 {
		t.Fatalf("report:\n%v", r)
	}
}

// ExampleCheck: a hand-written history in which b's critical section
// began before a's had ended.
func ExampleCheck() {
	h := history.New()
	ms := time.Millisecond
	h.Add(history.Op{Client: "a", Key: "k", Kind: history.Acquire, Outcome: history.OK, Token: "ta",
		TTL: time.Second, Start: 0, End: 2 * ms, Deadline: 989 * ms})
	h.Add(history.Op{Client: "a", Key: "k", Kind: history.Release, Outcome: history.OK, Token: "ta",
		Start: 50 * ms, End: 52 * ms})
	h.Add(history.Op{Client: "b", Key: "k", Kind: history.Acquire, Outcome: history.OK, Token: "tb",
		TTL: time.Second, Start: 10 * ms, End: 51 * ms, Deadline: 1030 * ms})
	h.AddSection(history.Section{Client: "a", Key: "k", Token: "ta", Start: 3 * ms, End: 49 * ms})
	h.AddSection(history.Section{Client: "b", Key: "k", Token: "tb", Start: 48 * ms, End: 60 * ms})
	r := history.Check(h, history.Config{Nodes: 5})
	fmt.Println(r.Count(history.S1), r.Count(history.SEC))
	for _, v := range r.Violations {
		fmt.Println(v.Property)
	}
	// Output:
	// 0 1
	// SEC
}

// TestRecorderDo: Do records the lock's acquisition, its section (also when
// fn panics: the lock is released and the panic goes on) and its release,
// and the lock is not auto-extended even on a Client that extends.
func TestRecorderDo(t *testing.T) {
	ctx := context.Background()
	h := history.New()
	addrs := memServers(t)
	rec := h.Recorder("a", memClient(t, addrs, redlock.WithAutoExtend(true)))
	err := rec.Do(ctx, "k", func(ctx context.Context) error {
		// A session lock's value names its session after a 0x1f. The lock
		// is on a quorum; a node may not be asked (a Client's first
		// operation goes on without a node not verified yet) or not have
		// answered yet.
		held := 0
		for _, addr := range addrs {
			node := redis.NewClient(&redis.Options{Addr: addr})
			v := node.Get(ctx, "quorumlock:{k}").Val()
			_ = node.Close()
			if strings.Contains(v, "\x1f") {
				t.Errorf("the lock's value on %s is %q: not a plain lock's", addr, v)
			}
			if v != "" {
				held++
			}
		}
		if held < 3 {
			t.Errorf("the lock is on %d nodes, fewer than a quorum", held)
		}
		return errors.New("job failed")
	})
	if err == nil || err.Error() != "job failed" {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not go on")
			}
		}()
		_ = rec.Do(ctx, "k", func(ctx context.Context) error { panic("boom") })
	}()
	if err := rec.Do(ctx, "k", nil); err == nil {
		t.Fatal("Do with a nil fn: no error")
	}
	r := history.Check(h, history.Config{Nodes: 5})
	if r.Total() != 0 || r.Acquired != 2 || r.Releases != 2 || r.Sections != 2 {
		t.Fatalf("report:\n%v", r)
	}
	if _, err := rec.TryLock(ctx, "k"); err != nil { // released after the panic
		t.Fatalf("TryLock after the panicking Do: %v", err)
	}
}
