package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestDemo runs the whole demo as a user would and checks the table's rows.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, options{verbose: true}); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"wasted work", "how C's work ended", "deadline propagated", "short-circuit", "retry amplification", "hedging"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if err := run(io.Discard, options{scenario: "nonsense"}); err == nil {
		t.Error("an unknown scenario was accepted")
	}
}

// TestWasted checks what the services recorded, not the figures' size: without the
// toolkit C runs to the end after the client gave up; with it C is cancelled, and
// every hop's budget is less than the one before.
func TestWasted(t *testing.T) {
	e := &env{tel: &telemetry{}, out: io.Discard, verbose: io.Discard}
	ind, err := runWastedOnce(e, false)
	if err != nil {
		t.Fatal(err)
	}
	prop, err := runWastedOnce(e, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("C's work after the client gave up: independent %v, propagated %v", ind.wasted(), prop.wasted())
	if ind.hops[2].cancelled || !ind.hops[2].reached() {
		t.Fatalf("independent timeouts: C reached %v, cancelled %v; want it to run to the end", ind.hops[2].reached(), ind.hops[2].cancelled)
	}
	// With the deadline propagated, C is cancelled at the deadline; on a machine so
	// loaded that A and B overrun the budget, it is not reached at all. Either way it
	// does not finish its work.
	if c := prop.hops[2]; c.reached() && !c.cancelled {
		t.Fatalf("propagated deadline: C finished its work after the client gave up")
	}
	if ind.wasted() <= prop.wasted() {
		t.Fatalf("wasted work independent %v <= propagated %v", ind.wasted(), prop.wasted())
	}
	for i := 1; i < 3 && prop.hops[i].reached(); i++ {
		if prop.hops[i].budget >= prop.hops[i-1].budget {
			t.Errorf("hop %d received %v, not less than hop %d's %v", i, prop.hops[i].budget, i-1, prop.hops[i-1].budget)
		}
	}
}

// recordingTelemetry traces each service into one span recorder, as newTelemetry does
// into Jaeger.
func recordingTelemetry(t *testing.T) (*telemetry, *tracetest.SpanRecorder) {
	t.Helper()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	rec := tracetest.NewSpanRecorder()
	tel := &telemetry{providers: map[string]*sdktrace.TracerProvider{}}
	for _, name := range []string{svcClient, svcA, svcB, svcC} {
		tel.providers[name] = sdktrace.NewTracerProvider(
			sdktrace.WithSpanProcessor(rec),
			sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", name))),
		)
	}
	t.Cleanup(func() { tel.shutdown(context.Background()) })
	return tel, rec
}

func serviceOf(s sdktrace.ReadOnlySpan) string {
	v, _ := s.Resource().Set().Value("service.name")
	return v.AsString()
}

// TestWastedOneTrace checks that the run without the toolkit carries the trace, if
// not the deadline: C's span is in the trace the demo prints, and ends after the
// client gave up; the root span is named after what the client saw.
func TestWastedOneTrace(t *testing.T) {
	tel, rec := recordingTelemetry(t)
	e := &env{tel: tel, out: io.Discard, verbose: io.Discard}
	if _, err := runWastedOnce(e, false); err != nil {
		t.Fatal(err)
	}
	if len(e.traces) != 1 {
		t.Fatalf("the run noted %d traces; want 1", len(e.traces))
	}
	var root sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if serviceOf(s) == svcClient && !s.Parent().IsValid() {
			root = s
		}
	}
	if root == nil {
		t.Fatal("no root span of the client")
	}
	if !strings.Contains(e.traces[0], root.SpanContext().TraceID().String()) {
		t.Fatalf("printed %q; the root's trace is %s", e.traces[0], root.SpanContext().TraceID())
	}
	if want := "the client gave up at its deadline"; !strings.HasSuffix(root.Name(), want) {
		t.Errorf("root span %q; want it to end with %q", root.Name(), want)
	}
	var c sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if serviceOf(s) == svcC && s.SpanContext().TraceID() == root.SpanContext().TraceID() {
			c = s
		}
	}
	if c == nil {
		t.Fatal("C's span is not in the root's trace")
	}
	if !c.EndTime().After(root.EndTime()) {
		t.Errorf("C's span ended at %v, the client's root at %v; want C after", c.EndTime(), root.EndTime())
	}
}
