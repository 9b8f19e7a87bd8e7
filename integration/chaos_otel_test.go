package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/redlock"
)

// chaosMetrics is the OpenTelemetry Observer every client of a chaos run
// reports to, and the in-memory reader its metrics go to (no tracing: a
// run makes too many spans to keep). It only watches: the checker never
// reads it.
type chaosMetrics struct {
	reader *sdkmetric.ManualReader
	obs    *qlotel.Observer
}

func newChaosMetrics(t *testing.T) *chaosMetrics {
	t.Helper()
	m := &chaosMetrics{reader: sdkmetric.NewManualReader()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(m.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := qlotel.NewObserver(qlotel.WithMeterProvider(mp), qlotel.WithTracerProvider(noop.NewTracerProvider()))
	if err != nil {
		t.Fatal(err)
	}
	m.obs = obs
	return m
}

// option attaches the Observer to a Client.
func (m *chaosMetrics) option() redlock.Option { return redlock.WithObserver(m.obs) }

// log logs every instrument's points, one line per attribute set: a
// counter's sum, a histogram's count and mean.
func (m *chaosMetrics) log(t *testing.T) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Errorf("collecting the run's metrics: %v", err)
		return
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, in := range sm.Metrics {
			switch d := in.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", in.Name, attrList(p.Attributes), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} n=%d mean=%.4g%s", in.Name, attrList(p.Attributes), p.Count, p.Sum/float64(max(p.Count, 1)), in.Unit))
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} n=%d mean=%.3g", in.Name, attrList(p.Attributes), p.Count, float64(p.Sum)/float64(max(p.Count, 1))))
				}
			}
		}
	}
	sort.Strings(lines)
	t.Logf("OpenTelemetry metrics of the run (docs/observability.md):\n\t%s", strings.Join(lines, "\n\t"))
}

func attrList(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, strings.TrimPrefix(string(kv.Key), "quorumlock.")+"="+kv.Value.String())
	}
	return strings.Join(parts, ",")
}
