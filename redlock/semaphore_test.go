package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
)

// permitKey and countKey are the Redis keys of a semaphore under the
// default prefix.
func permitKey(name string, i int) string { return fmt.Sprintf("%s\x1fp%d", rkey(name), i) }
func countKey(name string) string         { return rkey(name) + "\x1fk" }

// landed waits until none of ls has an acquire command in flight.
func landed(t *testing.T, ls ...*Lock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, l := range ls {
		for l.landingNow() != nil {
			if time.Now().After(deadline) {
				t.Fatal("acquire commands still in flight after 10s")
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestSemaphoreAdmitsPermitsHolders: k permits go to k holders, each a
// different permit held on every node; the next attempt is refused after
// one round, and a released permit is taken again.
func TestSemaphoreAdmitsPermitsHolders(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(time.Minute))
	verifyAll(t, c)
	s, err := c.Semaphore("jobs", 3)
	if err != nil {
		t.Fatal(err)
	}
	var held []*Lock
	seen := map[int]bool{}
	for range 3 {
		l, err := s.TryAcquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if seen[l.Permit()] || l.Key() != "jobs" {
			t.Fatalf("permit %d (key %q) given twice or misnamed", l.Permit(), l.Key())
		}
		seen[l.Permit()] = true
		held = append(held, l)
	}
	landed(t, held...)
	for _, l := range held {
		if n := e.holders(permitKey("jobs", l.Permit()), l.Token()); n != 5 {
			t.Fatalf("permit %d held on %d nodes, want 5", l.Permit(), n)
		}
	}
	for i := range e.nodes {
		if got := e.value(i, countKey("jobs")); got != "3" {
			t.Fatalf("node %d declares %q permits, want 3", i, got)
		}
	}
	_, err = s.TryAcquire(context.Background())
	if !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "no permit free on a quorum: 1 of 3 permits tried, the nodes' answers showed the others taken on too many nodes") {
		t.Fatalf("fourth TryAcquire: %v, want ErrNotAcquired after one try", err)
	}
	freed := held[1].Permit()
	if err := held[1].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l, err := s.TryAcquire(context.Background())
	if err != nil || l.Permit() != freed {
		t.Fatalf("after a release: %v (permit %v), want permit %d", err, l, freed)
	}
}

// TestSemaphoreEverySubset takes a permit of a 2-permit semaphore whose
// permit 0 is taken on one subset of 5 nodes and permit 1 on another: it
// succeeds exactly when one permit is free on a quorum, and leaves nothing
// behind when it fails.
func TestSemaphoreEverySubset(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(time.Minute))
	verifyAll(t, c)
	for a := range 32 {
		for b := range 32 {
			name := fmt.Sprintf("sub-%d-%d", a, b)
			for i, n := range e.nodes {
				if a&(1<<i) != 0 {
					n.m.Set(permitKey(name, 0), "other-a")
				}
				if b&(1<<i) != 0 {
					n.m.Set(permitKey(name, 1), "other-b")
				}
			}
			s, err := c.Semaphore(name, 2)
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.TryAcquire(context.Background())
			want := bits.OnesCount(uint(31&^a)) >= 3 || bits.OnesCount(uint(31&^b)) >= 3
			if (err == nil) != want {
				t.Fatalf("taken %05b/%05b: %v, want success %v", a, b, err, want)
			}
			if err != nil {
				if !errors.Is(err, ErrNotAcquired) {
					t.Fatal(err)
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				c = e.scriptClient(WithTTL(time.Minute))
				for i := range e.nodes { // the rounds' stragglers and roll-backs are done (Close waits)
					for p, other := range []string{"other-a", "other-b"} {
						if v := e.value(i, permitKey(name, p)); v != "" && v != other {
							t.Fatalf("taken %05b/%05b: node %d permit %d holds %q after a failed acquire", a, b, i, p, v)
						}
					}
				}
				continue
			}
			landed(t, l)
			if n := e.holders(permitKey(name, l.Permit()), l.Token()); n < 3 {
				t.Fatalf("taken %05b/%05b: permit %d held on %d nodes", a, b, l.Permit(), n)
			}
			if err := l.Release(context.Background()); err != nil { // Close then has nothing to release
				t.Fatal(err)
			}
		}
	}
}

// TestSemaphoreCountMismatch: a Client that gives a name another count is
// refused with ErrPermitMismatch and takes nothing; once the other count's
// permits are gone and its declaration has lapsed, the new count works.
func TestSemaphoreCountMismatch(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(3 * time.Second))
	verifyAll(t, c)
	two, _ := c.Semaphore("mm", 2)
	three, _ := c.Semaphore("mm", 3)
	l, err := two.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	landed(t, l)
	_, err = three.TryAcquire(context.Background())
	if !errors.Is(err, ErrPermitMismatch) || errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "declares 2") {
		t.Fatalf("TryAcquire with 3 permits over 2: %v, want ErrPermitMismatch naming 2", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := three.Acquire(ctx); !errors.Is(err, ErrPermitMismatch) {
		t.Fatalf("Acquire with 3 permits over 2: %v, want ErrPermitMismatch at once", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range e.nodes {
		for p := range 3 {
			if v := e.value(i, permitKey("mm", p)); v != "" && v != l.Token() {
				t.Fatalf("node %d permit %d holds %q after the refused acquires", i, p, v)
			}
		}
	}
	for _, n := range e.nodes {
		n.m.FastForward(4 * time.Second) // the 2-permit holder's keys lapse
	}
	c = e.scriptClient(WithTTL(3 * time.Second))
	three, _ = c.Semaphore("mm", 3)
	if _, err := three.TryAcquire(context.Background()); err != nil {
		t.Fatalf("3 permits once the 2-permit declaration lapsed: %v", err)
	}
}

// TestSemaphoreMismatchEndsInOneEvent: a permit won on the nodes that
// declare no count, while one node declares another, is given back, and
// the call fails with ErrPermitMismatch: the Observer hears of the call
// once, as AcquireFailed, not of a permit that was never the caller's.
func TestSemaphoreMismatchEndsInOneEvent(t *testing.T) {
	e := newEnv(t, 5)
	rec := &recorder{}
	pools := make([]pool.Pool, len(e.nodes))
	for i, n := range e.nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		if i > 0 { // node 0's "another count" is counted before the others' yes decide the round
			rdb.AddHook(delayHook(50 * time.Millisecond))
		}
		pools[i], _ = pool.New(rdb, pool.WithName(fmt.Sprintf("node%d", i)))
	}
	c := New2(t, pools, WithObserver(rec))
	verifyAll(t, c)
	if err := e.nodes[0].m.Set(countKey("mm1"), "2"); err != nil {
		t.Fatal(err)
	}
	three, _ := c.Semaphore("mm1", 3)
	if _, err := three.TryAcquire(context.Background()); !errors.Is(err, ErrPermitMismatch) {
		t.Fatalf("TryAcquire of 3 permits where node 0 declares 2: %v, want ErrPermitMismatch", err)
	}
	if n := e.holders(countKey("mm1"), "3"); n < 3 { // a permit was won: the count it declared stays
		t.Fatalf("3 permits declared on %d nodes, want a quorum: no permit was won and given back", n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != 1 || rec.events[0].kind != "acquire-failed" || !errors.Is(rec.events[0].ev.Err, ErrPermitMismatch) {
		var kinds []string
		for _, r := range rec.events {
			kinds = append(kinds, r.kind)
		}
		t.Fatalf("events %v, want one acquire-failed with ErrPermitMismatch", kinds)
	}
}

// delayHook delays every command and pipeline by its duration.
type delayHook time.Duration

func (d delayHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d delayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(time.Duration(d))
		return next(ctx, cmd)
	}
}

func (d delayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(time.Duration(d))
		return next(ctx, cmds)
	}
}

// TestSemaphoreExtendKeepsCountDeclared: extending a permit makes the
// count key live as long as the permit, so that another count is refused
// for as long as a permit of this one is held.
func TestSemaphoreExtendKeepsCountDeclared(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(3 * time.Second))
	verifyAll(t, c)
	s, _ := c.Semaphore("ext", 2)
	l, err := s.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	landed(t, l)
	if err := l.Extend(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	for i, n := range e.nodes {
		if pk, ck := n.m.TTL(permitKey("ext", l.Permit())), n.m.TTL(countKey("ext")); pk == time.Minute && ck < pk {
			t.Fatalf("node %d: permit lives %v, count key %v", i, pk, ck)
		}
		n.m.FastForward(30 * time.Second)
	}
	other, _ := c.Semaphore("ext", 5)
	if _, err := other.TryAcquire(context.Background()); !errors.Is(err, ErrPermitMismatch) {
		t.Fatalf("another count while an extended permit is held: %v, want ErrPermitMismatch", err)
	}
}

// TestSemaphoreAcquireWaitsForRelease: Acquire on a full semaphore returns
// once a permit is released, with that permit.
func TestSemaphoreAcquireWaitsForRelease(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(time.Minute), WithRetryBackoff(10*time.Second, 10*time.Second))
	s, _ := c.Semaphore("wait", 1)
	l, err := s.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		w, err := s.Acquire(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		return
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Acquire returned %v after the release: the release did not wake it (retry delay 10 s)", took)
	}
	if err := w.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreDo runs fn under a permit and gives it back.
func TestSemaphoreDo(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient()
	s, _ := c.Semaphore("do", 2)
	var permit *Lock
	err := s.Do(context.Background(), func(ctx context.Context) error {
		l, err := s.TryAcquire(ctx) // the other permit
		if err != nil {
			return err
		}
		permit = l
		if _, err := s.TryAcquire(ctx); !errors.Is(err, ErrNotAcquired) {
			return fmt.Errorf("a third holder: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(context.Background()); err != nil {
		t.Fatalf("Do did not give its permit back: %v", err)
	}
	_ = permit.Release(context.Background())
	if err := s.Do(context.Background(), nil); err == nil {
		t.Fatal("Do with a nil fn: no error")
	}
}

// TestSemaphoreBadInput: refused before any I/O.
func TestSemaphoreBadInput(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient()
	for _, tc := range []struct {
		name    string
		permits int
		opts    []Option
		want    string
	}{
		{"", 1, nil, "name is empty"},
		{"s", 0, nil, "0 permits"},
		{"s", -1, nil, "-1 permits"},
		{"s", MaxPermits + 1, nil, "257 permits"},
		{"s", 2, []Option{WithFencing(true)}, "WithFencing"},
		{"s", 2, []Option{Shared()}, "Shared"},
		{"s", 2, []Option{WithTTL(-1)}, "TTL"},
		{"s", 2, []Option{WithQuorum(2)}, "more than half"}, // two permits' holders could share no node
	} {
		if _, err := c.Semaphore(tc.name, tc.permits, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Semaphore(%q, %d): %v, want an error about %q", tc.name, tc.permits, err, tc.want)
		}
	}
	plain := e.client() // fault-injecting pools: not package pool's
	if _, err := plain.Semaphore("s", 2); err == nil || !strings.Contains(err.Error(), "package pool") {
		t.Errorf("Semaphore over other Pools: %v", err)
	}
}

// TestInspectSemaphoreName: Inspect of a semaphore's name does not say
// "free" while permits are held: it refuses the name and points to
// Semaphore.Inspect, which shows each permit and its holder.
func TestInspectSemaphoreName(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient()
	ctx := context.Background()
	s, err := c.Semaphore("jobs", 3)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	landed(t, a, b)
	in, err := c.Inspect(ctx, "jobs")
	if err == nil || !strings.Contains(err.Error(), "Semaphore.Inspect") || !strings.Contains(err.Error(), "3 permits") {
		t.Fatalf("Inspect of a semaphore's name = %+v, %v; want an error that points to Semaphore.Inspect", in, err)
	}
	permits, err := s.Inspect(ctx)
	if err != nil || len(permits) != 3 {
		t.Fatalf("Semaphore.Inspect = %d permits, %v; want 3", len(permits), err)
	}
	held := map[string]int{a.Token(): a.Permit(), b.Token(): b.Permit()}
	for i, p := range permits {
		tok := p.Holder
		if want, ok := held[tok]; p.State == StateHeld && (!ok || want != i) {
			t.Errorf("permit %d held by %q, which holds permit %d", i, tok, want)
		}
		if p.State == StateHeld {
			delete(held, tok)
		} else if p.State != StateFree {
			t.Errorf("permit %d: state %v, want held or free", i, p.State)
		}
		if p.Key != "jobs" {
			t.Errorf("permit %d: Key %q, want the semaphore's name", i, p.Key)
		}
	}
	if len(held) != 0 {
		t.Errorf("permits not shown as held: %v", held)
	}
	if in, err := c.Inspect(ctx, "not-a-semaphore"); err != nil || in.State != StateFree {
		t.Errorf("Inspect of a free lock = %+v, %v", in, err)
	}
}
