// Package metrictest reads the toolkit's metrics in tests: one reader installed as
// OTel's global MeterProvider, and one way to read what it collected, on the SDK's
// metricdata and metricdatatest. It is for tests only, the one package of the
// module besides the examples that imports the OTel SDK.
package metrictest

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
)

var global = sync.OnceValue(func() *sdkmetric.ManualReader {
	r := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)))
	return r
})

// Global installs, the first time, a MeterProvider with a manual reader as OTel's
// global one, and returns that reader. The toolkit makes its instruments once from
// the global provider, so the tests of one binary share it: call Global before the
// first instrument is used, and read differences (a total before and after).
func Global() *sdkmetric.ManualReader { return global() }

// Collect returns the metrics r has, by name.
func Collect(t testing.TB, r sdkmetric.Reader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collecting metrics: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// Point is one data point, whatever its instrument: a sum's or a gauge's value, or
// a histogram's count and sum.
type Point struct {
	Attributes attribute.Set
	Value      float64
	Count      uint64
	Sum        float64
}

// Points returns the data points of the metric named name whose attributes include
// every one of attrs; none when r has no such metric.
func Points(t testing.TB, r sdkmetric.Reader, name string, attrs ...attribute.KeyValue) []Point {
	t.Helper()
	var all []Point
	switch d := Collect(t, r)[name].Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			all = append(all, Point{Attributes: p.Attributes, Value: float64(p.Value)})
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			all = append(all, Point{Attributes: p.Attributes, Value: float64(p.Value)})
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			all = append(all, Point{Attributes: p.Attributes, Count: p.Count, Sum: p.Sum})
		}
	case nil:
	default:
		t.Fatalf("metric %s: data of type %T, which metrictest does not read", name, d)
	}
	var out []Point
	for _, p := range all {
		if has(p.Attributes, attrs) {
			out = append(out, p)
		}
	}
	return out
}

func has(s attribute.Set, attrs []attribute.KeyValue) bool {
	for _, a := range attrs {
		if v, ok := s.Value(a.Key); !ok || v != a.Value {
			return false
		}
	}
	return true
}

// Total is the sum of the values of the metric's points that carry attrs (for a
// histogram, of their counts): a counter's total, 0 when nothing was recorded.
func Total(t testing.TB, r sdkmetric.Reader, name string, attrs ...attribute.KeyValue) float64 {
	t.Helper()
	var n float64
	for _, p := range Points(t, r, name, attrs...) {
		n += p.Value + float64(p.Count)
	}
	return n
}

// Want checks the metric named want.Name against want with metricdatatest, leaving
// out timestamps and exemplars, and any further opts.
func Want(t *testing.T, r sdkmetric.Reader, want metricdata.Metrics, opts ...metricdatatest.Option) {
	t.Helper()
	got, ok := Collect(t, r)[want.Name]
	if !ok {
		t.Errorf("no metric %s recorded", want.Name)
		return
	}
	opts = append([]metricdatatest.Option{metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars()}, opts...)
	metricdatatest.AssertEqual(t, want, got, opts...)
}
