package qlotel_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlock/quorumlock/otel"
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
	spans := e.spans.Ended()
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
	for _, s := range e.spans.Ended() {
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
