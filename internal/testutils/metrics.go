package testutils

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// MetricReader reads back the metrics recorded through its MeterProvider
// (an OpenTelemetry SDK provider with a ManualReader).
type MetricReader struct {
	// Provider is the MeterProvider to give to the code under test.
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// NewMetricReader returns a reader whose provider is shut down at cleanup.
func NewMetricReader(t testing.TB) *MetricReader {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return &MetricReader{Provider: mp, reader: r}
}

// Point is one data point of an int64 sum or gauge.
type Point struct {
	Attrs map[string]string
	Value int64
}

// Points collects the metric called name and returns its int64 data points
// (none if it was not recorded); an int64 histogram's point has its sum as
// its value. It fails the test if collection fails or the metric is not an
// int64 sum, gauge or histogram.
func (r *MetricReader) Points(t testing.TB, name string) []Point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collecting metrics: %v", err)
	}
	var out []Point
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			var dps []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				dps = d.DataPoints
			case metricdata.Gauge[int64]:
				dps = d.DataPoints
			case metricdata.Histogram[int64]:
				for _, hp := range d.DataPoints {
					dps = append(dps, metricdata.DataPoint[int64]{Attributes: hp.Attributes, Value: hp.Sum})
				}
			default:
				t.Fatalf("metric %q has data of type %T, want an int64 sum, gauge or histogram", name, m.Data)
			}
			for _, dp := range dps {
				attrs := make(map[string]string)
				for _, kv := range dp.Attributes.ToSlice() {
					attrs[string(kv.Key)] = kv.Value.Emit()
				}
				out = append(out, Point{Attrs: attrs, Value: dp.Value})
			}
		}
	}
	return out
}

// Value returns the sum of the points of name whose attributes include
// every one of attrs, and whether any point matched.
func (r *MetricReader) Value(t testing.TB, name string, attrs ...attribute.KeyValue) (int64, bool) {
	t.Helper()
	var sum int64
	found := false
	for _, p := range r.Points(t, name) {
		if matches(p.Attrs, attrs) {
			sum += p.Value
			found = true
		}
	}
	return sum, found
}

// WaitForValue polls Value until it equals want or ctx ends, and fails the
// test then, listing the points it saw.
func (r *MetricReader) WaitForValue(ctx context.Context, t testing.TB, name string, want int64, attrs ...attribute.KeyValue) {
	t.Helper()
	WaitFor(ctx, t, fmt.Sprintf("metric %s%v = %d", name, attrs, want), func() error {
		got, ok := r.Value(t, name, attrs...)
		if ok && got == want {
			return nil
		}
		return fmt.Errorf("got %d (recorded: %v); points: %s", got, ok, r.describe(t, name))
	})
}

func (r *MetricReader) describe(t testing.TB, name string) string {
	var lines []string
	for _, p := range r.Points(t, name) {
		lines = append(lines, fmt.Sprintf("%v=%d", p.Attrs, p.Value))
	}
	sort.Strings(lines)
	return strings.Join(lines, ", ")
}

func matches(got map[string]string, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := got[string(kv.Key)]; !ok || v != kv.Value.Emit() {
			return false
		}
	}
	return true
}

// HistogramCount returns how many values the float64 histogram name has
// recorded, over all its points (0 if it was not recorded). It fails the
// test if collection fails or the metric is not a float64 histogram.
func (r *MetricReader) HistogramCount(t testing.TB, name string) uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collecting metrics: %v", err)
	}
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("metric %q has data of type %T, want a float64 histogram", name, m.Data)
			}
			for _, p := range h.DataPoints {
				n += p.Count
			}
		}
	}
	return n
}
