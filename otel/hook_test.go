package qlotel_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestHookSpansAreChildrenOfCaller: the lock commands of TryLock and
// Release are client spans of the caller's span, naming the server; a call
// without a span makes no command span.
func TestHookSpansAreChildrenOfCaller(t *testing.T) {
	e := newEnv(t, 3)
	ctx, caller := e.tp.Tracer("test").Start(context.Background(), "caller")
	l, err := e.client.TryLock(ctx, "hooked")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()
	ports := map[int64]bool{}
	for _, m := range e.servers {
		p, _ := strconv.Atoi(m.Port())
		ports[int64(p)] = true
	}
	spans := e.settledSpans()
	parent := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		parent[s.SpanContext().SpanID()] = s
	}
	commands := 0
	for _, s := range spans {
		if s.SpanKind() != trace.SpanKindClient {
			continue
		}
		commands++
		// A connection's set-up (HELLO, ...) is a child of the command
		// that dialed; every chain of commands ends at the caller's span.
		p := s.Parent().SpanID()
		for parent[p] != nil && parent[p].SpanKind() == trace.SpanKindClient {
			p = parent[p].Parent().SpanID()
		}
		if p != caller.SpanContext().SpanID() {
			t.Fatalf("command span %s descends from %v, want the caller's span", s.Name(), p)
		}
		if attr(s, "db.system.name").AsString() != "redis" || attr(s, "server.address").AsString() != "127.0.0.1" || !ports[attr(s, "server.port").AsInt64()] {
			t.Fatalf("command span %s: attributes %v", s.Name(), s.Attributes())
		}
	}
	if commands < 2*2 { // a quorum of acquires and of releases at least
		t.Fatalf("%d command spans, want at least 4", commands)
	}

	l, err = e.client.TryLock(context.Background(), "unobserved")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range e.settledSpans() {
		if s.SpanKind() == trace.SpanKindClient && !s.Parent().IsValid() {
			t.Fatalf("command span %s without a caller's span", s.Name())
		}
	}
}

// TestHookPipelinesAndErrors: a pipeline is one span named after its
// commands, a missing key is no error, an error reply marks its span; with
// WithRootSpans a command without a parent has a span; a hook given no
// address learns it from the dial.
func TestHookPipelinesAndErrors(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	m := miniredis.RunT(t)
	hook, err := qlotel.NewHook("", qlotel.WithTracerProvider(tp), qlotel.WithRootSpans())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	rdb.AddHook(hook)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "a")
		p.Get(ctx, "b")
		return nil
	}); err != redis.Nil {
		t.Fatalf("pipeline of GETs of missing keys: %v", err)
	}
	if err := rdb.Do(ctx, "NOSUCHCOMMAND").Err(); err == nil {
		t.Fatal("an unknown command succeeded")
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		byName[s.Name()] = s
	}
	batch, bad := byName["BATCH GET"], byName["NOSUCHCOMMAND"]
	if batch == nil || batch.Status().Code == codes.Error || attr(batch, "db.operation.batch.size").AsInt64() != 2 || attr(batch, "server.port").AsInt64() == 0 {
		t.Fatalf("pipeline span %v, want BATCH GET of 2 without error, with the dialed port (spans: %v)", batch, byName)
	}
	if bad == nil || bad.Status().Code != codes.Error || attr(bad, "error.type").AsString() != "ERR" {
		t.Fatalf("failed command's span %v, want status Error, error.type ERR", bad)
	}
}

// TestHookLearnsTheDialedServer: a hook given no address names the server
// of the connection dialed last, not the address the client asked for: a
// Sentinel client asks for "FailoverClient" and dials the master it found,
// and after a failover, another. A dial that fails has error.type
// "net.dial", not a wrapper's Go type.
func TestHookLearnsTheDialedServer(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	hook, err := qlotel.NewHook("", qlotel.WithTracerProvider(tp), qlotel.WithRootSpans())
	if err != nil {
		t.Fatal(err)
	}
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	var target atomic.Pointer[string]
	target.Store(new(m1.Addr()))
	rdb := redis.NewClient(&redis.Options{Addr: "FailoverClient", MaxRetries: -1,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *target.Load())
		}})
	rdb.AddHook(hook)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	lastPort := func() int64 {
		ended := sr.Ended()
		return attr(ended[len(ended)-1], "server.port").AsInt64()
	}
	for i, m := range []*miniredis.Miniredis{m1, m2} {
		target.Store(new(m.Addr()))
		if i > 0 {
			m1.Close() // the failover: the old master's connections break
			_ = rdb.Ping(ctx).Err()
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING through master %d: %v", i, err)
		}
		if _, port, _ := net.SplitHostPort(m.Addr()); strconv.FormatInt(lastPort(), 10) != port {
			t.Fatalf("master %d at %s: the PING span has server.port %d", i, m.Addr(), lastPort())
		}
	}
	m2.Close()
	_ = rdb.Ping(ctx).Err() // the broken connection
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING with no master succeeded")
	}
	if ended := sr.Ended(); attr(ended[len(ended)-1], "error.type").AsString() != "net.dial" {
		t.Fatalf("a failed dial: error.type %q, want net.dial", attr(ended[len(ended)-1], "error.type").AsString())
	}
}

// TestHookOnClusterNodes: on Cluster pools, a hook per shard client
// (ClusterClient.OnNewNode, as docs/observability.md wires it) traces the
// lock commands under the caller's span, naming the shard. miniredis
// answers CLUSTER SLOTS as a one-master cluster.
func TestHookOnClusterNodes(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var pools []pool.Pool
	ports := map[int64]bool{}
	for range 3 {
		m := miniredis.RunT(t)
		p, _ := strconv.Atoi(m.Port())
		ports[int64(p)] = true
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}, ContextTimeoutEnabled: true, MaxRetries: -1})
		cc.OnNewNode(func(rdb *redis.Client) {
			hook, err := qlotel.NewHook(rdb.Options().Addr, qlotel.WithTracerProvider(tp))
			if err != nil {
				t.Error(err)
				return
			}
			rdb.AddHook(hook)
		})
		t.Cleanup(func() { _ = cc.Close() })
		pl, err := pool.New(cc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pl.Close() })
		pools = append(pools, pl)
	}
	c, err := redlock.New(pools)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
	l, err := c.TryLock(ctx, "sharded")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()
	scripts := 0
	for _, s := range sr.Ended() {
		if !strings.Contains(s.Name(), "EVAL") {
			continue
		}
		scripts++
		if s.Parent().SpanID() != caller.SpanContext().SpanID() || !ports[attr(s, "server.port").AsInt64()] {
			t.Fatalf("script span %s: parent %v (caller %v), attributes %v", s.Name(), s.Parent().SpanID(), caller.SpanContext().SpanID(), s.Attributes())
		}
	}
	if scripts < 2*2 { // a quorum of acquires and of releases at least
		t.Fatalf("%d script spans, want at least 4", scripts)
	}
}

// TestOptionErrors: bad options are errors, not panics.
func TestOptionErrors(t *testing.T) {
	for name, o := range map[string]qlotel.Option{
		"nil":              nil,
		"nil tracers":      qlotel.WithTracerProvider(nil),
		"nil meters":       qlotel.WithMeterProvider(nil),
		"zero holds":       qlotel.WithMaxHolds(0),
		"negative waiters": qlotel.WithMaxCalls(-1),
	} {
		if _, err := qlotel.NewObserver(o); err == nil {
			t.Errorf("NewObserver with %s option: no error", name)
		}
		if _, err := qlotel.NewHook("x:1", o); err == nil {
			t.Errorf("NewHook with %s option: no error", name)
		}
	}
}
