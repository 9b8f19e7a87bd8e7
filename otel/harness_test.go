package qlotel_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// env is a Client over n miniredis servers named n0, n1, ..., observed by a
// qlotel Observer (through tee) into an in-memory span recorder and a
// manual metric reader, each pool with a qlotel Hook.
type env struct {
	t       *testing.T
	spans   *tracetest.SpanRecorder
	tp      *sdktrace.TracerProvider
	reader  *sdkmetric.ManualReader
	obs     *qlotel.Observer
	tee     *tee
	servers []*miniredis.Miniredis
	client  *redlock.Client
}

func newEnv(t *testing.T, n int, opts ...redlock.Option) *env {
	t.Helper()
	e := &env{t: t, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = e.tp.Shutdown(context.Background()) })
	obs, err := qlotel.NewObserver(qlotel.WithTracerProvider(e.tp), qlotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	e.obs, e.tee = obs, newTee(obs)
	var pools []pool.Pool
	for i := range n {
		m := miniredis.RunT(t)
		e.servers = append(e.servers, m)
		hook, err := qlotel.NewHook(m.Addr(), qlotel.WithTracerProvider(e.tp))
		if err != nil {
			t.Fatal(err)
		}
		p, err := pool.Dial(&redis.Options{Addr: m.Addr(), MaxRetries: -1},
			pool.WithName(fmt.Sprintf("n%d", i)), pool.WithHooks(hook), pool.WithRestartGuard(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		pools = append(pools, p)
	}
	c, err := redlock.New(pools, append([]redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithObserver(e.tee)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e.client = c
	return e
}

// tee passes events on to an Observer and counts them by kind, for tests
// to wait for (without sleeping).
type tee struct {
	next    redlock.Observer
	mu      sync.Mutex
	counts  map[string]int
	changed chan struct{} // closed and replaced on every event
}

func newTee(next redlock.Observer) *tee {
	return &tee{next: next, counts: map[string]int{}, changed: make(chan struct{})}
}

func (t *tee) note(kind string) {
	t.mu.Lock()
	t.counts[kind]++
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// wait returns once kind has been seen n times; it fails tb when tb's
// context ends first. For the test's goroutine only.
func (t *tee) wait(tb testing.TB, kind string, n int) {
	tb.Helper()
	if !t.waitCtx(tb.Context(), kind, n) {
		tb.Fatalf("%s seen %d times, want %d", kind, t.count(kind), n)
	}
}

// waitCtx returns true once kind has been seen n times, false if ctx ends
// first.
func (t *tee) waitCtx(ctx context.Context, kind string, n int) bool {
	for {
		t.mu.Lock()
		got, ch := t.counts[kind], t.changed
		t.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (t *tee) count(kind string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[kind]
}

func (t *tee) Acquired(e redlock.Event)      { t.next.Acquired(e); t.note("acquired") }
func (t *tee) Contended(e redlock.Event)     { t.next.Contended(e); t.note("contended") }
func (t *tee) AcquireFailed(e redlock.Event) { t.next.AcquireFailed(e); t.note("acquire-failed") }
func (t *tee) Extended(e redlock.Event)      { t.next.Extended(e); t.note("extended") }
func (t *tee) ExtendFailed(e redlock.Event)  { t.next.ExtendFailed(e); t.note("extend-failed") }
func (t *tee) Lost(e redlock.Event)          { t.next.Lost(e); t.note("lost") }
func (t *tee) Released(e redlock.Event)      { t.next.Released(e); t.note("released") }

// collect reads the metrics recorded so far.
func (e *env) collect() metricdata.ResourceMetrics {
	e.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		e.t.Fatal(err)
	}
	return rm
}

// has reports whether set holds every one of kv.
func has(set attribute.Set, kv []attribute.KeyValue) bool {
	for _, want := range kv {
		if v, ok := set.Value(want.Key); !ok || v != want.Value {
			return false
		}
	}
	return true
}

// sum adds up the counter name's points whose attributes include kv.
func sum(rm metricdata.ResourceMetrics, name string, kv ...attribute.KeyValue) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, p := range s.DataPoints {
					if has(p.Attributes, kv) {
						n += p.Value
					}
				}
			}
		}
	}
	return n
}

// points returns the float or int histogram name's points whose attributes
// include kv, as their counts and bucket counts (bounds, counts).
func points(rm metricdata.ResourceMetrics, name string, kv ...attribute.KeyValue) (count uint64, bounds []float64, buckets []uint64) {
	add := func(c uint64, b []float64, bc []uint64) {
		count += c
		bounds = b
		if buckets == nil {
			buckets = make([]uint64, len(bc))
		}
		for i, v := range bc {
			buckets[i] += v
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch h := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range h.DataPoints {
					if has(p.Attributes, kv) {
						add(p.Count, p.Bounds, p.BucketCounts)
					}
				}
			case metricdata.Histogram[int64]:
				for _, p := range h.DataPoints {
					if has(p.Attributes, kv) {
						add(p.Count, p.Bounds, p.BucketCounts)
					}
				}
			}
		}
	}
	return count, bounds, buckets
}

// summary prints every instrument's points, one line per attribute set:
// a counter's sum, a histogram's count (and its sum).
func summary(rm metricdata.ResourceMetrics) string {
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} = %d", m.Name, attrString(p.Attributes), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d sum=%.4g%s", m.Name, attrString(p.Attributes), p.Count, p.Sum, m.Unit))
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d sum=%d", m.Name, attrString(p.Attributes), p.Count, p.Sum))
				}
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func attrString(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, fmt.Sprintf("%s=%s", strings.TrimPrefix(string(kv.Key), "quorumlock."), kv.Value.String()))
	}
	return strings.Join(parts, ",")
}

// tree prints the spans under root as an indented tree, children by start
// time, each with its start relative to root's, its length, its
// attributes, and its events (the nodes' answers).
func tree(spans []sdktrace.ReadOnlySpan, root trace.SpanID) string {
	kids := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var t0 time.Time
	for _, s := range spans {
		kids[s.Parent().SpanID()] = append(kids[s.Parent().SpanID()], s)
		if s.SpanContext().SpanID() == root {
			t0 = s.StartTime()
		}
	}
	var b strings.Builder
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }
	var walk func(id trace.SpanID, depth int)
	walk = func(id trace.SpanID, depth int) {
		list := kids[id]
		slices.SortStableFunc(list, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
		for _, s := range list {
			pad := strings.Repeat("  ", depth)
			fmt.Fprintf(&b, "%s%s  +%s %s", pad, s.Name(), ms(s.StartTime().Sub(t0)), ms(s.EndTime().Sub(s.StartTime())))
			if s.Status().Code != 0 {
				fmt.Fprintf(&b, " status=%s", s.Status().Code)
			}
			if len(s.Links()) > 0 {
				fmt.Fprintf(&b, " links=%d", len(s.Links()))
			}
			fmt.Fprintf(&b, " [%s]\n", attrString(attribute.NewSet(s.Attributes()...)))
			for _, ev := range s.Events() {
				fmt.Fprintf(&b, "%s  · %s +%s [%s]\n", pad, ev.Name, ms(ev.Time.Sub(t0)), attrString(attribute.NewSet(ev.Attributes...)))
			}
			walk(s.SpanContext().SpanID(), depth+1)
		}
	}
	for _, s := range spans {
		if s.SpanContext().SpanID() == root {
			fmt.Fprintf(&b, "%s  +0.00ms %s\n", s.Name(), ms(s.EndTime().Sub(s.StartTime())))
		}
	}
	walk(root, 1)
	return b.String()
}

// named returns the spans called name.
func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attr returns span's attribute k.
func attr(s sdktrace.ReadOnlySpan, k string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// settledSpans waits until every span started so far has ended and returns
// the ended spans. A call returns at a quorum of replies, so the commands it
// did not wait for (the last node's release) may still be open when it
// returns; a test that judges the tree of spans reads it once they closed.
func (e *env) settledSpans() []sdktrace.ReadOnlySpan {
	e.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		started, ended := e.spans.Started(), e.spans.Ended()
		if len(started) == len(ended) {
			return ended
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d spans started, %d ended after 10 s", len(started), len(ended))
		}
	}
}
