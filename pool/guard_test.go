package pool_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/redisproc"
	"github.com/quorumlock/quorumlock/internal/testlog"
	"github.com/quorumlock/quorumlock/pool"
)

func logger() (*slog.Logger, *testlog.Buffer) {
	buf := &testlog.Buffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

func dial(t *testing.T, addr string, opts ...pool.Option) pool.Pool {
	t.Helper()
	p, err := pool.Dial(&redis.Options{Addr: addr}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func acquire(p pool.Pool, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ok, err := p.Acquire(ctx, key, "token", time.Minute)
	if err == nil && !ok {
		return errors.New("key taken")
	}
	return err
}

// firstRefusal acquires fresh keys until an attempt fails with ErrRestarted
// and returns that error. Attempts before it may fail otherwise (a pooled
// connection of the old server that go-redis had not yet found dead), but
// none may succeed: a success would be a restarted server counted unguarded.
func firstRefusal(t *testing.T, p pool.Pool, what string) error {
	t.Helper()
	for i := range 5 {
		err := acquire(p, "after-restart-"+what+string(rune('a'+i)))
		if err == nil {
			t.Fatalf("%s: attempt %d after the restart succeeded: the guard let a restarted server answer", what, i)
		}
		if errors.Is(err, pool.ErrRestarted) {
			var re *pool.RestartError
			if !errors.As(err, &re) || re.Uptime >= re.Guard || re.Remaining() <= 0 || re.Pool == "" {
				t.Fatalf("%s: the refusal %v carries %+v; want a RestartError with an uptime below the guard", what, err, re)
			}
			return err
		}
		t.Logf("%s: attempt %d: %v", what, i, err)
	}
	t.Fatalf("%s: no attempt was refused by the restart guard", what)
	return nil
}

// TestRestartGuard: a Pool that saw a server before refuses it after a
// restart while its uptime is below the guard, logs the run_id change, and
// uses it again once the guard has passed; with the guard off the restarted
// server is used at once.
func TestRestartGuard(t *testing.T) {
	c := redisproc.Start(t, 1)
	addr := c.Node(0).Addr()
	log, buf := logger()
	guarded := dial(t, addr, pool.WithRestartGuard(time.Hour), pool.WithLogger(log), pool.WithName("guarded"))
	short := dial(t, addr, pool.WithRestartGuard(2*time.Second), pool.WithName("short"))
	off := dial(t, addr, pool.WithRestartGuard(0), pool.WithName("off"))
	for _, p := range []pool.Pool{guarded, short, off} {
		if err := acquire(p, "before-"+p.Name()); err != nil { // first contact: a fresh server is used
			t.Fatalf("%s before the restart: %v", p.Name(), err)
		}
	}
	if err := c.Node(0).Restart(true); err != nil {
		t.Fatal(err)
	}

	err := firstRefusal(t, guarded, "guarded")
	for _, want := range []string{"guarded", "restart guard of 1h0m0s", "WithRestartGuard"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not mention %q", err, want)
		}
	}
	if !strings.Contains(buf.String(), "run_id changed") {
		t.Errorf("no restart logged; log:\n%s", buf)
	}

	firstRefusal(t, short, "short")
	var last error
	for range 100 { // the server is up for 2 s at most ~1 s after Restart returned...
		if last = acquire(short, "back"); last == nil {
			break
		}
		if !errors.Is(last, pool.ErrRestarted) {
			t.Logf("short guard: %v", last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("the 2s guard still refuses after 10s: %v", last)
	}

	for i := range 3 { // ...while with the guard off it is used at once
		if last = acquire(off, "off"+string(rune('a'+i))); last == nil {
			break
		}
		if errors.Is(last, pool.ErrRestarted) {
			t.Fatalf("guard off, yet refused: %v", last)
		}
	}
	if last != nil {
		t.Fatalf("guard off: %v", last)
	}
}

// TestStrictRestartGuard: in strict mode a server met for the first time is
// refused while young; a plain guard uses it.
func TestStrictRestartGuard(t *testing.T) {
	c := redisproc.Start(t, 1)
	addr := c.Node(0).Addr()
	if err := acquire(dial(t, addr, pool.WithRestartGuard(time.Hour), pool.WithStrictRestartGuard()), "k1"); !errors.Is(err, pool.ErrRestarted) {
		t.Fatalf("strict guard on a fresh server: %v, want ErrRestarted", err)
	}
	if err := acquire(dial(t, addr, pool.WithRestartGuard(time.Hour)), "k2"); err != nil {
		t.Fatalf("plain guard on a fresh server: %v", err)
	}

	// The same hook on a client the caller owns, through pool.New.
	hook, err := pool.OnConnect(pool.WithRestartGuard(time.Hour), pool.WithStrictRestartGuard(), pool.WithName("own"))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, OnConnect: hook, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	p, err := pool.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := acquire(p, "k3"); !errors.Is(err, pool.ErrRestarted) || !strings.Contains(err.Error(), "own") {
		t.Fatalf("OnConnect hook: %v, want ErrRestarted naming the pool", err)
	}
}

// TestEvictionCheck: a server whose maxmemory-policy can evict lock keys is
// refused in EvictionRefuse mode, logged once per pool in EvictionWarn mode
// (the default) and passed over in silence in EvictionIgnore mode.
func TestEvictionCheck(t *testing.T) {
	c := redisproc.Start(t, 1)
	addr := c.Node(0).Addr()
	admin := redisproc.NewClient(addr, "")
	defer admin.Close()
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}

	err := acquire(dial(t, addr, pool.WithEvictionCheck(pool.EvictionRefuse)), "k")
	if !errors.Is(err, pool.ErrEvictionPolicy) || !strings.Contains(err.Error(), "volatile-lru") || !strings.Contains(err.Error(), "noeviction") {
		t.Fatalf("refuse mode: %v, want ErrEvictionPolicy naming the policy and the fix", err)
	}

	log, buf := logger()
	warn := dial(t, addr, pool.WithLogger(log))
	var wg sync.WaitGroup
	for i := range 8 { // concurrent calls open several connections
		wg.Go(func() {
			if err := acquire(warn, "w"+string(rune('a'+i))); err != nil {
				t.Errorf("warn mode: %v", err)
			}
		})
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "maxmemory_policy=volatile-lru"); n != 1 {
		t.Fatalf("warn mode logged %d warnings, want 1:\n%s", n, buf)
	}

	log, buf = logger()
	if err := acquire(dial(t, addr, pool.WithLogger(log), pool.WithEvictionCheck(pool.EvictionIgnore)), "i"); err != nil || strings.Contains(buf.String(), "maxmemory") {
		t.Fatalf("ignore mode: %v, log %q", err, buf)
	}

	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := acquire(dial(t, addr, pool.WithEvictionCheck(pool.EvictionRefuse)), "n"); err != nil {
		t.Fatalf("noeviction refused: %v", err)
	}
}

// TestGuardWithoutInfo: a server that does not report its uptime cannot be
// guarded; it is used, and that is logged once.
func TestGuardWithoutInfo(t *testing.T) {
	m := miniredis.RunT(t)
	log, buf := logger()
	p := dial(t, m.Addr(), pool.WithStrictRestartGuard(), pool.WithLogger(log))
	for _, k := range []string{"a", "b"} {
		if err := acquire(p, k); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(buf.String(), "cannot check"); n != 1 {
		t.Fatalf("logged %d times, want 1:\n%s", n, buf)
	}
}

func TestGuardOptionErrors(t *testing.T) {
	for name, o := range map[string]pool.Option{
		"negative guard": pool.WithRestartGuard(-time.Second),
		"unknown mode":   pool.WithEvictionCheck(pool.EvictionCheck(9)),
		"nil logger":     pool.WithLogger(nil),
	} {
		if _, err := pool.Dial(&redis.Options{Addr: "127.0.0.1:1"}, o); err == nil {
			t.Errorf("%s: Dial accepted it", name)
		}
		if _, err := pool.OnConnect(o); err == nil {
			t.Errorf("%s: OnConnect accepted it", name)
		}
	}
}
