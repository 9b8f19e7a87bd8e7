package qlotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/quorumlock/quorumlock/redlock"
)

var (
	outcomeIs = func(s string) attribute.KeyValue { return attribute.String("quorumlock.outcome", s) }
	opIs      = func(s string) attribute.KeyValue { return attribute.String("quorumlock.operation", s) }
)

// TestContendedAcquisitionTrace: a Lock that waits for a held key is one
// span under the caller's, with a child span per refused attempt (inside
// the call's time, each with every node's answer as an event), and its
// Release a span linked to it; the metrics count the attempts and both
// locks' hold times. The test logs the caller's trace as text.
func TestContendedAcquisitionTrace(t *testing.T) {
	e := newEnv(t, 3, redlock.WithRetryBackoff(2*time.Millisecond, 10*time.Millisecond))
	holder, err := e.client.TryLock(context.Background(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	ctx, caller := e.tp.Tracer("test").Start(context.Background(), "caller")
	released := make(chan error, 1)
	go func() { // release the holder once the waiter was refused twice
		if !e.tee.waitCtx(t.Context(), "contended", 2) {
			released <- errors.New("no contention seen")
			return
		}
		released <- holder.Release(context.Background())
	}()
	l, err := e.client.Lock(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()
	spans := e.spans.Ended()
	t.Logf("a contended acquisition's trace (+start from the caller's span, length; · events):\n%s", tree(spans, caller.SpanContext().SpanID()))

	var call sdktrace.ReadOnlySpan
	for _, s := range named(spans, "quorumlock.acquire") {
		if s.Parent().SpanID() == caller.SpanContext().SpanID() {
			if call != nil {
				t.Fatal("two acquire spans under the caller's span")
			}
			call = s
		}
	}
	if call == nil || attr(call, "quorumlock.outcome").AsString() != "acquired" || attr(call, "quorumlock.key").AsString() != "busy" || len(call.Events()) != 3 {
		t.Fatalf("the call's span: %v, want one under the caller's span, acquired, key busy, 3 node events", call)
	}
	var attempts []sdktrace.ReadOnlySpan
	for _, s := range named(spans, "quorumlock.acquire.attempt") {
		if s.Parent().SpanID() != call.SpanContext().SpanID() {
			t.Fatalf("attempt span %v is not a child of the call's span", s.Parent())
		}
		attempts = append(attempts, s)
	}
	if len(attempts) < 2 || attr(call, "quorumlock.attempts").AsInt64() != int64(len(attempts)+1) {
		t.Fatalf("%d attempt spans, call's attempts %v: want at least 2, and one fewer than the call's attempts", len(attempts), attr(call, "quorumlock.attempts"))
	}
	for _, a := range attempts {
		if a.StartTime().Before(call.StartTime()) || a.EndTime().After(call.EndTime()) {
			t.Fatalf("attempt %v..%v outside its call %v..%v", a.StartTime(), a.EndTime(), call.StartTime(), call.EndTime())
		}
		taken := 0
		for _, ev := range a.Events() {
			if has(attribute.NewSet(ev.Attributes...), []attribute.KeyValue{outcomeIs("taken")}) {
				taken++
			}
		}
		if attr(a, "quorumlock.outcome").AsString() != "taken" || len(a.Events()) != 3 || taken < 2 || a.Status().Code == codes.Error {
			t.Fatalf("attempt %v: outcome %v, %d events (%d taken), status %v: want taken, 3 node events, a quorum taken, no error", attr(a, "quorumlock.attempts"), attr(a, "quorumlock.outcome"), len(a.Events()), taken, a.Status())
		}
	}
	var rel sdktrace.ReadOnlySpan
	for _, s := range named(spans, "quorumlock.release") {
		if s.Parent().SpanID() == caller.SpanContext().SpanID() {
			rel = s
		}
	}
	if rel == nil || len(rel.Links()) != 1 || rel.Links()[0].SpanContext.SpanID() != call.SpanContext().SpanID() {
		t.Fatalf("release span %v: want one under the caller's span, linked to the call's span", rel)
	}

	rm := e.collect()
	if got := sum(rm, "quorumlock.acquire.attempts", outcomeIs("taken")); got != int64(len(attempts)) {
		t.Fatalf("%d taken attempts counted, want %d", got, len(attempts))
	}
	if got := sum(rm, "quorumlock.acquire.attempts", outcomeIs("acquired")); got != 2 {
		t.Fatalf("%d acquired attempts counted, want 2", got)
	}
	if n, _, _ := points(rm, "quorumlock.hold.duration", outcomeIs("released")); n != 2 {
		t.Fatalf("%d hold times of released locks, want 2", n)
	}
	if n, _, _ := points(rm, "quorumlock.acquire.duration", outcomeIs("acquired")); n != 2 {
		t.Fatalf("%d acquire durations, want 2", n)
	}
}

// TestMetricsCountOperations: an acquire, a refusal and an unavailable
// acquire (3 of 5 nodes gone) are counted by outcome; the gone nodes' errors
// by node; the unavailable round shows a negative spare; the release, a
// hold time.
func TestMetricsCountOperations(t *testing.T) {
	e := newEnv(t, 5)
	ctx := context.Background()
	l, err := e.client.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.TryLock(ctx, "k"); !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("TryLock of a held key: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range e.servers[:3] {
		m.Close()
	}
	if _, err := e.client.TryLock(ctx, "k2"); !errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("TryLock with 3 of 5 nodes gone: %v, want ErrUnavailable", err)
	}
	rm := e.collect()
	t.Logf("metrics:\n%s", summary(rm))
	for _, oc := range []string{"acquired", "taken", "unavailable"} {
		if got := sum(rm, "quorumlock.acquire.attempts", outcomeIs(oc)); got != 1 {
			t.Errorf("attempts %s: %d, want 1", oc, got)
		}
		if n, _, _ := points(rm, "quorumlock.acquire.duration", outcomeIs(oc)); n != 1 {
			t.Errorf("acquire durations %s: %d, want 1", oc, n)
		}
	}
	if got := sum(rm, "quorumlock.acquire.attempts"); got != 3 {
		t.Errorf("%d attempts in all, want 3", got)
	}
	for i, node := range []string{"n0", "n1", "n2", "n3", "n4"} {
		want := int64(0)
		if i < 3 {
			want = 1
		}
		if got := sum(rm, "quorumlock.node.errors", attribute.String("quorumlock.node", node), opIs("acquire")); got != want {
			t.Errorf("node %s: %d errors, want %d", node, got, want)
		}
	}
	if n, _, _ := points(rm, "quorumlock.hold.duration", outcomeIs("released")); n != 1 {
		t.Errorf("%d hold times, want 1", n)
	}
	if got := sum(rm, "quorumlock.acquire.degraded"); got != 0 {
		t.Errorf("%d degraded wins, want 0", got)
	}
	n, bounds, buckets := points(rm, "quorumlock.round.spare", opIs("acquire"))
	if n != 3 || bounds[0] != -1 || buckets[0] != 1 {
		t.Errorf("spare of acquire rounds: %d rounds, buckets %v over %v: want 3, one at most -1", n, buckets, bounds)
	}
	if n, _, _ := points(rm, "quorumlock.round.agreed", opIs("release")); n != 1 {
		t.Errorf("%d release rounds, want 1", n)
	}
	if n, _, _ := points(rm, "quorumlock.node.duration", opIs("acquire"), outcomeIs("ok")); n < 3 {
		t.Errorf("%d latencies of ok answers to acquires, want at least 3 (the first round's quorum)", n)
	}
}

// TestConcurrentWaitersSameContext: waiting calls that share one context
// and key each get their own span, with their own refused attempts as
// children (the waiters start one refusal apart).
func TestConcurrentWaitersSameContext(t *testing.T) {
	e := newEnv(t, 3, redlock.WithRetryBackoff(2*time.Millisecond, 10*time.Millisecond))
	holder, err := e.client.TryLock(context.Background(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	ctx, caller := e.tp.Tracer("test").Start(context.Background(), "caller")
	const waiters = 3
	errs := make(chan error, waiters)
	for i := range waiters {
		go func() {
			l, err := e.client.Lock(ctx, "busy")
			if err == nil {
				err = l.Release(ctx)
			}
			errs <- err
		}()
		e.tee.wait(t, "contended", i+1) // the next waiter starts after this one was refused
	}
	e.tee.wait(t, "contended", waiters+3)
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	caller.End()
	spans := e.spans.Ended()
	calls := 0
	for _, call := range named(spans, "quorumlock.acquire") {
		if call.Parent().SpanID() != caller.SpanContext().SpanID() {
			continue
		}
		calls++
		kids := 0
		for _, a := range named(spans, "quorumlock.acquire.attempt") {
			if a.Parent().SpanID() == call.SpanContext().SpanID() {
				kids++
			}
		}
		if attr(call, "quorumlock.outcome").AsString() != "acquired" || int64(kids) != attr(call, "quorumlock.attempts").AsInt64()-1 {
			t.Errorf("a call with %v attempts, outcome %v, has %d refused attempts as children", attr(call, "quorumlock.attempts"), attr(call, "quorumlock.outcome"), kids)
		}
	}
	if calls != waiters {
		t.Fatalf("%d call spans under the caller's, want %d", calls, waiters)
	}
	if t.Failed() {
		t.Logf("trace:\n%s", tree(spans, caller.SpanContext().SpanID()))
	}
}
