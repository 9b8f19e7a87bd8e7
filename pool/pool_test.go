package pool

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newPool(t *testing.T) (*miniredis.Miniredis, *redis.Client, Pool) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	p, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	return m, rdb, p
}

func TestLockOperations(t *testing.T) {
	m, _, p := newPool(t)
	ctx := context.Background()
	if p.Name() != m.Addr() {
		t.Fatalf("name %q, want the address %q", p.Name(), m.Addr())
	}
	ok, err := p.Acquire(ctx, "k", "t1", 1500*time.Millisecond)
	if !ok || err != nil {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	if got := m.TTL("k"); got != 1500*time.Millisecond {
		t.Fatalf("TTL %v, want 1.5s", got)
	}
	if ok, err := p.Acquire(ctx, "k", "t2", time.Second); ok || err != nil {
		t.Fatalf("second Acquire = %v, %v; want false, nil", ok, err)
	}
	if v, err := p.Get(ctx, "k"); v != "t1" || err != nil {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if ok, err := p.Extend(ctx, "k", "t2", time.Minute); ok || err != nil || m.TTL("k") != 1500*time.Millisecond {
		t.Fatalf("Extend with a foreign token = %v, %v, ttl %v; want false, nil, unchanged", ok, err, m.TTL("k"))
	}
	if ok, err := p.Extend(ctx, "k", "t1", time.Minute); !ok || err != nil || m.TTL("k") != time.Minute {
		t.Fatalf("Extend = %v, %v, ttl %v", ok, err, m.TTL("k"))
	}
	if ok, err := p.Release(ctx, "k", "t2"); ok || err != nil || !m.Exists("k") {
		t.Fatalf("Release with a foreign token = %v, %v; the key must stay", ok, err)
	}
	if ok, err := p.Release(ctx, "k", "t1"); !ok || err != nil || m.Exists("k") {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if v, err := p.Get(ctx, "k"); v != "" || err != nil {
		t.Fatalf("Get after release = %q, %v; want \"\", nil", v, err)
	}
	// Extend never re-creates a missing key.
	if ok, err := p.Extend(ctx, "k", "t1", time.Minute); ok || err != nil || m.Exists("k") {
		t.Fatalf("Extend of a missing key = %v, %v, exists %v", ok, err, m.Exists("k"))
	}
}

func TestReleasePublishes(t *testing.T) {
	_, rdb, p := newPool(t)
	ctx := context.Background()
	sub := rdb.Subscribe(ctx, "k")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // subscription confirmed
		t.Fatal(err)
	}
	if _, err := p.Acquire(ctx, "k", "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Release(ctx, "k", "t"); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Channel != "k" || msg.Payload != "t" {
		t.Fatalf("message %+v, %v", msg, err)
	}
}

// TestScriptFlush: after SCRIPT FLUSH (or a restart) the scripts are sent
// again with EVAL instead of failing with NOSCRIPT.
func TestScriptFlush(t *testing.T) {
	_, rdb, p := newPool(t)
	ctx := context.Background()
	if _, err := p.Acquire(ctx, "k", "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Extend(ctx, "k", "t", time.Minute); !ok || err != nil { // caches the script
		t.Fatal(ok, err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Extend(ctx, "k", "t", time.Minute); !ok || err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH = %v, %v", ok, err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Release(ctx, "k", "t"); !ok || err != nil {
		t.Fatalf("Release after SCRIPT FLUSH = %v, %v", ok, err)
	}
}

func TestErrorReplies(t *testing.T) {
	m, _, p := newPool(t)
	ctx := context.Background()
	m.SetError("READONLY You can't write against a read only replica.")
	_, err := p.Acquire(ctx, "k", "t", time.Second)
	var rerr redis.Error
	if !errors.As(err, &rerr) || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Fatalf("Acquire error %v (%T), want the READONLY reply", err, err)
	}
	// A server that answers INFO with an error reply has no run_id to compare.
	if id, err := p.RunID(ctx); id != "" || err != nil {
		t.Fatalf("RunID = %q, %v; want \"\", nil", id, err)
	}
	m.SetError("LOADING Redis is loading the dataset in memory")
	if _, err := p.RunID(ctx); err == nil {
		t.Fatal("RunID during LOADING returned no error: the node would never be checked")
	}
	m.SetError("")
	if err := m.Set("k", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lpush("l", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Release(ctx, "l", "t"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Release of a list: %v, want WRONGTYPE", err)
	}
}

func TestRunIDUnreachable(t *testing.T) {
	m := miniredis.RunT(t)
	p, err := Dial(&redis.Options{Addr: m.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := p.RunID(ctx); err == nil {
		t.Fatal("RunID of a stopped server returned no error")
	}
}

func TestConstructors(t *testing.T) {
	if _, err := New(nil); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Fatalf("New(nil) = %v", err)
	}
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	if _, err := New(rdb, WithName("")); err == nil {
		t.Fatal("WithName(\"\") accepted")
	}
	if _, err := New(rdb, nil); err == nil {
		t.Fatal("a nil option accepted")
	}
	if p, err := New(rdb, WithName("a")); err != nil || p.Name() != "a" {
		t.Fatalf("WithName: %v %v", p, err)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}})
	defer cc.Close()
	if p, err := New(cc); err != nil || p.Name() != "127.0.0.1:1,127.0.0.1:2" {
		t.Fatalf("cluster pool: %v %v", p, err)
	}
	if _, err := Dial(nil); err == nil {
		t.Fatal("Dial(nil) accepted")
	}
	if _, err := Dial(&redis.Options{}); err == nil || !strings.Contains(err.Error(), "address") {
		t.Fatalf("Dial without an address = %v", err)
	}
	if _, err := DialURL("127.0.0.1:17001"); err == nil || !strings.Contains(err.Error(), "redis://127.0.0.1:17001") {
		t.Fatalf("DialURL of host:port: %v; want an error that suggests redis://127.0.0.1:17001", err)
	}
	if _, err := DialURL("http://x"); err == nil {
		t.Fatal("DialURL accepted a non-redis URL")
	}
}

// TestDialSetsUpForLocking: Dial switches on per-call deadlines and off
// retries, whatever the caller's options say, without changing them.
func TestDialSetsUpForLocking(t *testing.T) {
	m := miniredis.RunT(t)
	opt := &redis.Options{Addr: m.Addr(), MaxRetries: 5}
	p, err := Dial(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got := p.(*redisPool).c.(*redis.Client).Options()
	// go-redis normalises MaxRetries −1 to 0: no retries.
	if !got.ContextTimeoutEnabled || got.MaxRetries != 0 || got.DialerRetries != 1 {
		t.Fatalf("ContextTimeoutEnabled %v, MaxRetries %d, DialerRetries %d; want true, 0, 1", got.ContextTimeoutEnabled, got.MaxRetries, got.DialerRetries)
	}
	if opt.MaxRetries != 5 || opt.ContextTimeoutEnabled {
		t.Fatal("Dial changed the caller's options")
	}
	if ok, err := p.Acquire(context.Background(), "k", "t", time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	u, err := DialURL("redis://user:secret@" + m.Addr() + "/0")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if u.Name() != m.Addr() || strings.Contains(u.Name(), "secret") {
		t.Fatalf("DialURL name %q, want the address without the password", u.Name())
	}
}

// TestNewNeverClosesCallersClient: Close on a pool from New leaves the
// caller's client usable.
func TestNewNeverClosesCallersClient(t *testing.T) {
	_, rdb, p := newPool(t)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the caller's client was closed: %v", err)
	}
}

// TestDeadlineBoundsCall: a pool from Dial gives up at the context deadline
// on a server that never answers, not after go-redis' default 3 s read
// timeout and retries.
func TestDeadlineBoundsCall(t *testing.T) {
	ln := newSilentServer(t)
	p, err := Dial(&redis.Options{Addr: ln})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = p.Acquire(ctx, "k", "t", time.Second)
	if err == nil {
		t.Fatal("Acquire on a silent server succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Fatalf("error %v, want a timeout", err)
	}
	if time.Since(start) >= 3*time.Second { // go-redis' own read timeout: the deadline was ignored
		t.Fatalf("Acquire took %v", time.Since(start))
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func TestFencedOperations(t *testing.T) {
	m, _, p := newPool(t)
	ctx := context.Background()
	n, err := p.AcquireFenced(ctx, "k", "k:fence", "t1", time.Minute)
	if n != 1 || err != nil {
		t.Fatalf("first AcquireFenced = %d, %v; want 1", n, err)
	}
	if n, err := p.AcquireFenced(ctx, "k", "k:fence", "t2", time.Minute); n != 0 || err != nil {
		t.Fatalf("AcquireFenced of a held key = %d, %v; want 0, nil", n, err)
	}
	if got, _ := m.Get("k:fence"); got != "1" {
		t.Fatalf("counter %q after a refused acquire, want 1", got)
	}
	if ok, err := p.RaiseFence(ctx, "k", "k:fence", "t2", 50); ok || err != nil {
		t.Fatalf("RaiseFence with a foreign token = %v, %v", ok, err)
	}
	if ok, err := p.RaiseFence(ctx, "k", "k:fence", "t1", 50); !ok || err != nil {
		t.Fatalf("RaiseFence = %v, %v", ok, err)
	}
	if ok, err := p.RaiseFence(ctx, "k", "k:fence", "t1", 7); !ok || err != nil { // never lowers
		t.Fatalf("RaiseFence lower = %v, %v", ok, err)
	}
	if got, _ := m.Get("k:fence"); got != "50" {
		t.Fatalf("counter %q, want 50", got)
	}
	if _, err := p.Release(ctx, "k", "t1"); err != nil {
		t.Fatal(err)
	}
	if n, err := p.AcquireFenced(ctx, "k", "k:fence", "t3", time.Minute); n != 51 || err != nil {
		t.Fatalf("next AcquireFenced = %d, %v; want 51", n, err)
	}
	if m.TTL("k:fence") != 0 || !m.Exists("k:fence") {
		t.Fatal("the counter must stay, without a TTL")
	}
}
