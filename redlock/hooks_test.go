package redlock

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

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
	if ctx.Value(ownWorkKey{}) != nil {
		v = "(own work)" // a background release: no caller's values, by design
	}
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
func hookedClient(t *testing.T, n int, h redis.Hook, opts ...Option) (*Client, []*miniredis.Miniredis) {
	t.Helper()
	var pools []pool.Pool
	var ms []*miniredis.Miniredis
	for range n {
		m := miniredis.RunT(t)
		ms = append(ms, m)
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
	return c, ms
}

// TestHooksSeeCallersContext: a go-redis hook added to pool.Dial's client
// sees the caller's context values on every lock command, plain and
// fenced, whether the Pool writes it alone or in a pipeline.
func TestHooksSeeCallersContext(t *testing.T) {
	h := &seenHook{}
	c, ms := hookedClient(t, 3, h)
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
		// The release of a node the round did not wait for is still on
		// its way: let it land before reading what the hook saw.
		for _, m := range ms {
			for i := 0; i < 200 && m.Exists(rkey("hooked")); i++ {
				time.Sleep(5 * time.Millisecond)
			}
		}
		seen := h.take()
		if len(seen) < 3*4 { // acquire, extend, inspect, release on 3 nodes
			t.Fatalf("fenced %v: the hook saw %d lock commands (%v), want at least 12", fenced, len(seen), seen)
		}
		for _, s := range seen {
			if !strings.HasSuffix(s, "="+val) && !strings.HasSuffix(s, "=(own work)") {
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
	c, _ := hookedClient(t, 3, h)
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

// evalHook records, for each EVAL (the NOSCRIPT fallback, run one command
// at a time), whether the caller value it saw belongs to the command's key.
type evalHook struct {
	mu       sync.Mutex
	evals    int
	mismatch []string
}

func (h *evalHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *evalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *evalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "eval" && ctx.Value(ownWorkKey{}) == nil {
			v, _ := ctx.Value(callerKey{}).(string)
			key := fmt.Sprint(cmd.Args()[3])
			h.mu.Lock()
			h.evals++
			if !strings.Contains(key, "{"+v+"-") {
				h.mismatch = append(h.mismatch, key+" seen with "+v)
			}
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// TestHooksSeeTheirCallerOnScriptReload: after SCRIPT FLUSH, the commands of
// a shared pipeline run again one by one with EVAL, each with its own
// caller's values (found by the adversarial review: they carried the
// pipeline's first caller's).
func TestHooksSeeTheirCallerOnScriptReload(t *testing.T) {
	h := &evalHook{}
	c, ms := hookedClient(t, 3, h)
	var admins []*redis.Client
	for _, m := range ms {
		a := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = a.Close() })
		admins = append(admins, a)
	}
	stop := make(chan struct{})
	var fl sync.WaitGroup
	fl.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, a := range admins {
				a.ScriptFlush(context.Background())
			}
			time.Sleep(200 * time.Microsecond)
		}
	})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			ctx := context.WithValue(context.Background(), callerKey{}, fmt.Sprintf("w%d", w))
			for i := range 40 {
				if l, err := c.TryLock(ctx, fmt.Sprintf("w%d-%d", w, i)); err == nil {
					_ = l.Release(ctx)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	fl.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.evals == 0 {
		t.Fatal("no command ran again with EVAL: the test did not flush the scripts in time")
	}
	if len(h.mismatch) > 0 {
		t.Errorf("%d of %d EVALs carried another caller's values, e.g. %v", len(h.mismatch), h.evals, h.mismatch[:min(3, len(h.mismatch))])
	}
}
