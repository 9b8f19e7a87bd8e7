package redlock

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
)

type callerKey struct{}

// seenHook records, for every lock command it sees, the callerKey value of
// the context go-redis ran it with.
type seenHook struct {
	mu   sync.Mutex
	seen []string // "command=value"
}

func (h *seenHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *seenHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (h *seenHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.note(ctx, c)
		}
		return next(ctx, cmds)
	}
}

func (h *seenHook) note(ctx context.Context, cmd redis.Cmder) {
	name := cmd.Name()
	if name == "info" || name == "hello" || name == "client" || name == "ping" {
		return // connection set-up, not lock commands
	}
	v, _ := ctx.Value(callerKey{}).(string)
	h.mu.Lock()
	h.seen = append(h.seen, fmt.Sprint(cmd.Args())+"="+v)
	h.mu.Unlock()
}

func (h *seenHook) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seen
	h.seen = nil
	return s
}

// hookedClient is a Client over n miniredis servers, each reached by a
// Pool from pool.Dial with h added by pool.WithHooks.
func hookedClient(t *testing.T, n int, h redis.Hook, opts ...Option) *Client {
	t.Helper()
	var pools []pool.Pool
	for range n {
		m := miniredis.RunT(t)
		p, err := pool.Dial(&redis.Options{Addr: m.Addr()}, pool.WithHooks(h), pool.WithRestartGuard(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		pools = append(pools, p)
	}
	c, err := New(pools, append([]Option{testNodeTimeout}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestHooksSeeCallersContext: a go-redis hook added to pool.Dial's client
// sees the caller's context values on every lock command, plain and
// fenced, whether the Pool writes it alone or in a pipeline.
func TestHooksSeeCallersContext(t *testing.T) {
	h := &seenHook{}
	c := hookedClient(t, 3, h)
	for _, fenced := range []bool{false, true} {
		val := fmt.Sprintf("caller-fenced-%v", fenced)
		ctx := context.WithValue(context.Background(), callerKey{}, val)
		var opts []Option
		if fenced {
			opts = append(opts, WithFencing(true))
		}
		l, err := c.TryLock(ctx, "hooked", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Inspect(ctx, "hooked", opts...); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		seen := h.take()
		if len(seen) < 3*4 { // acquire, extend, inspect, release on 3 nodes
			t.Fatalf("fenced %v: the hook saw %d lock commands (%v), want at least 12", fenced, len(seen), seen)
		}
		for _, s := range seen {
			if !strings.HasSuffix(s, "="+val) {
				t.Fatalf("fenced %v: the hook saw %q, want every command with the caller's value %q (all: %v)", fenced, s, val, seen)
			}
		}
	}
}

// TestHooksSeeACallersContextInPipelines: concurrent callers whose
// commands share pipelines each reach the hook with a caller's values, never
// with none.
func TestHooksSeeACallersContextInPipelines(t *testing.T) {
	h := &seenHook{}
	c := hookedClient(t, 3, h)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			ctx := context.WithValue(context.Background(), callerKey{}, fmt.Sprintf("w%d", w))
			for i := range 20 {
				l, err := c.TryLock(ctx, fmt.Sprintf("k%d-%d", w, i))
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	seen := h.take()
	if len(seen) < 8*20*2*3 {
		t.Fatalf("the hook saw %d lock commands, want %d", len(seen), 8*20*2*3)
	}
	for _, s := range seen {
		if strings.HasSuffix(s, "=") {
			t.Fatalf("the hook saw %q: a lock command without any caller's values", s)
		}
	}
}

func TestWithHooksBadInput(t *testing.T) {
	if _, err := pool.Dial(&redis.Options{Addr: "127.0.0.1:1"}, pool.WithHooks(nil)); err == nil {
		t.Fatal("WithHooks(nil) accepted")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
	defer rdb.Close()
	if _, err := pool.New(rdb, pool.WithHooks(&seenHook{})); err == nil || !strings.Contains(err.Error(), "AddHook") {
		t.Fatalf("New with WithHooks: %v, want an error that points to AddHook", err)
	}
}
