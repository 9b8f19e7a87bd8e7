package qlotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestHoldsBounded: with WithMaxHolds(2), a third lock held at once is not
// tracked (its release records no hold time); a lock whose deadline passed
// long ago is forgotten to make room; tracked locks' hold times are
// recorded once.
func TestHoldsBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := qlotel.NewObserver(qlotel.WithMaxHolds(2), qlotel.WithTracerProvider(noop.NewTracerProvider()),
		qlotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	holds := func() uint64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		n, _, _ := points(rm, "quorumlock.hold.duration")
		return n
	}
	future := time.Now().Add(time.Hour)
	for _, tok := range []string{"a", "b", "c"} {
		obs.Acquired(redlock.Event{Key: "k" + tok, Token: tok, Deadline: future, Attempts: 1})
	}
	for _, tok := range []string{"c", "a", "a"} {
		obs.Released(redlock.Event{Key: "k" + tok, Token: tok})
	}
	if n := holds(); n != 1 {
		t.Fatalf("%d hold times, want 1 (a's; c was not tracked, a's second release is not a hold)", n)
	}
	// b and a stale d fill the table; e makes the sweep forget d.
	obs.Acquired(redlock.Event{Key: "kd", Token: "d", Deadline: time.Now().Add(-2 * time.Minute), Attempts: 1})
	obs.Acquired(redlock.Event{Key: "ke", Token: "e", Deadline: future, Attempts: 1})
	for _, tok := range []string{"b", "d", "e"} {
		obs.Lost(redlock.Event{Key: "k" + tok, Token: tok})
	}
	if n := holds(); n != 3 {
		t.Fatalf("%d hold times, want 3 (a's, b's and e's)", n)
	}
}

// TestEventCostIsSmall: a renewal's event allocates nothing in the
// Observer, a round's event little, with the SDK's meter and no tracing.
func TestEventCostIsSmall(t *testing.T) {
	obs, err := qlotel.NewObserver(qlotel.WithTracerProvider(noop.NewTracerProvider()),
		qlotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	if err != nil {
		t.Fatal(err)
	}
	ev := redlock.Event{Key: "k", Token: "t", Took: time.Millisecond, Quorum: 3}
	for i := range 5 {
		ev.Nodes = append(ev.Nodes, redlock.NodeResult{Node: fmt.Sprint("n", i), Outcome: redlock.OutcomeOK, Latency: time.Millisecond})
	}
	ev.Nodes[4].Outcome = redlock.OutcomeTimeout
	renewal := func() { obs.Extended(ev) }
	contended := func() { obs.Contended(ev) }
	renewal()
	contended()
	if n := testing.AllocsPerRun(100, renewal); n != 0 {
		t.Errorf("Extended: %v allocations per event, want 0", n)
	}
	n := testing.AllocsPerRun(100, contended)
	t.Logf("Contended over 5 nodes, no tracing: %v allocations per event", n)
}
