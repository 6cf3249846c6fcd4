package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit/internal/record"
	"github.com/deadlinekit/deadlinekit/otelattr"
)

// TestDemo runs the whole demo as a user would and checks the table's rows.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, options{verbose: true}); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"wasted work", "how C's work ended", "deadline propagated", "short-circuit", "retry amplification", "hedging", "circuit breaker", "C back → circuit closed", "overload", "C's work for callers already gone", "the answer was lost"} {
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
	if ind.hops[2].canceled || !ind.hops[2].reached() {
		t.Fatalf("independent timeouts: C reached %v, cancelled %v; want it to run to the end", ind.hops[2].reached(), ind.hops[2].canceled)
	}
	// With the deadline propagated, C is cancelled at the deadline; on a machine so
	// loaded that A and B overrun the budget, it is not reached at all. Either way it
	// does not finish its work.
	if c := prop.hops[2]; c.reached() && !c.canceled {
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

// TestBreaker checks the direction of the breaker scenario's readings, with margins
// wide enough for a loaded machine: without the breaker the calls B starts while C
// hangs reach C and fail at their timeout; with it the circuit opens, far fewer calls
// reach C, a call started while it is open fails at once (not at a timeout), and
// once C is back B succeeds again and the circuit closes. The run with the breaker is
// traced: the refused call and the probe the demo prints carry the breaker's
// attributes on B's spans.
func TestBreaker(t *testing.T) {
	e := &env{tel: &telemetry{}, out: io.Discard, verbose: io.Discard}
	without, err := runBreakerOnce(e, false)
	if err != nil {
		t.Fatal(err)
	}
	tel, rec := recordingTelemetry(t)
	e = &env{tel: tel, out: io.Discard, verbose: io.Discard}
	with, err := runBreakerOnce(e, true)
	if err != nil {
		t.Fatal(err)
	}
	woFail, woFailed := without.failTime()
	openFail, openFailed := with.failTimeOpen()
	t.Logf("without: %d of %d calls reached C, median failure %v over %d", without.whileDown, len(without.during()), woFail, woFailed)
	t.Logf("with: %d of %d calls reached C, median failure while open %v over %d; the circuit went %s", with.whileDown, len(with.during()), openFail, openFailed, with.describeChanges())

	if sent := len(without.during()); without.whileDown < sent/2 {
		t.Errorf("without the breaker %d of the %d calls B started reached C; want most", without.whileDown, sent)
	}
	if woFail < brBudget/2 {
		t.Errorf("without the breaker B failed a call in %v (median); want about its %v timeout", woFail, brBudget)
	}
	if _, ok := without.firstSuccess(); !ok {
		t.Error("without the breaker B never succeeded after C came back")
	}
	if with.whileDown*3 > without.whileDown*2 {
		t.Errorf("%d calls reached C with the breaker, %d without; want far fewer with it", with.whileDown, without.whileDown)
	}
	if _, ok := with.firstChange(string(record.BreakerOpen), with.downAt); !ok {
		t.Fatalf("the circuit never opened (it went %s)", with.describeChanges())
	}
	// Microseconds on an idle machine, half a millisecond traced under -race on two
	// busy cores: the bound only says "not a timeout", measured against the timeouts
	// of the run without the breaker (at least half of B's budget, checked above).
	if openFailed == 0 || openFail*10 >= woFail {
		t.Errorf("while the circuit was open B failed %d calls in %v (median); want under a tenth of the %v a timeout took without it", openFailed, openFail, woFail)
	}
	success, ok := with.firstSuccess()
	if !ok {
		t.Fatal("with the breaker B never succeeded after C came back")
	}
	if closed, ok := with.firstChange(string(record.BreakerClosed), with.upAt); !ok {
		t.Errorf("the circuit did not close after C came back (it went %s)", with.describeChanges())
	} else if closed.Before(with.upAt) || success.Before(with.upAt) {
		t.Errorf("C back at %v, first success at %v, closed at %v", with.upAt, success, closed)
	}

	// The traces the demo prints, and what B's spans say in them.
	byTrace := map[trace.TraceID][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byTrace[s.SpanContext().TraceID()] = append(byTrace[s.SpanContext().TraceID()], s)
	}
	noted := map[string]trace.TraceID{}
	for _, line := range e.traces {
		id, label, _ := strings.Cut(strings.TrimPrefix(line, "trace "), "  ")
		tid, err := trace.TraceIDFromHex(id)
		if err != nil {
			t.Fatalf("noted %q: %v", line, err)
		}
		noted[label] = tid
	}
	attrs := func(tid trace.TraceID, service string) map[attribute.Key]attribute.Value {
		out := map[attribute.Key]attribute.Value{}
		for _, s := range byTrace[tid] {
			if serviceOf(s) == service {
				for _, kv := range s.Attributes() {
					out[kv.Key] = kv.Value
				}
			}
		}
		return out
	}
	refused, ok := noted["circuit breaker: a call refused, circuit open"]
	if !ok {
		t.Fatalf("no refused call noted: %v", e.traces)
	}
	if a := attrs(refused, svcB); !a[otelattr.BreakerRefusedKey].AsBool() || a[otelattr.BreakerStateKey].AsString() != string(record.BreakerOpen) {
		t.Errorf("the refused call's spans in B say refused %v, state %q; want true, open", a[otelattr.BreakerRefusedKey].AsBool(), a[otelattr.BreakerStateKey].AsString())
	}
	if len(attrs(refused, svcC)) != 0 {
		t.Error("the refused call reached C")
	}
	probe, ok := noted["circuit breaker: the probe that found C back"]
	if !ok {
		t.Fatalf("no probe noted: %v", e.traces)
	}
	if a := attrs(probe, svcB); !a[otelattr.BreakerProbeKey].AsBool() {
		t.Error("the probe's spans in B do not say probe")
	}
	if len(attrs(probe, svcC)) == 0 {
		t.Error("the probe did not reach C")
	}
}

// TestOverload checks the direction of the overload scenario's readings, with margins
// for a loaded machine: with C's concurrency limit, C answers in time at least half of
// what its slots can serve and works for nobody; without it, C answers far fewer in
// time and most of its work is for callers already gone.
//
// The test's shape is the demo's slowed down four times (40 ms of work, a 400 ms
// budget, 200 arrivals a second): at the demo's 800 a second, under -race and beside
// other packages' tests on two cores, the machine rather than C's slots was the
// bottleneck, and the readings measured the machine.
func TestOverload(t *testing.T) {
	e := &env{tel: &telemetry{}, out: io.Discard, verbose: io.Discard}
	shape := olShape{slots: 4, work: 40 * time.Millisecond, budget: 400 * time.Millisecond, duration: 2 * time.Second}
	without, err := runOverloadOnce(e, shape, false)
	if err != nil {
		t.Fatal(err)
	}
	with, err := runOverloadOnce(e, shape, true)
	if err != nil {
		t.Fatal(err)
	}
	// The capacity C had in this run: its slots over the time each request held one.
	// A loaded machine stretches that time (a 40 ms sleep ends late), and the
	// capacity with it.
	capacity := int(shape.capacity() * shape.duration.Seconds())
	if with.c.worked > 0 && with.c.busy > 0 {
		held := with.c.busy / time.Duration(with.c.worked)
		capacity = min(capacity, int(float64(shape.slots)*shape.duration.Seconds()/held.Seconds()))
	}
	t.Logf("without: %d of %d in time, %d of %d handled late, %d refused by B's breaker", without.inTime, without.offered, without.c.overdone, without.c.worked, without.circuitOpen)
	t.Logf("with: %d of %d in time, %d of %d handled late, C refused %d; C's capacity in the run %d", with.inTime, with.offered, with.c.overdone, with.c.worked, with.guard.Refused(), capacity)
	// The two runs follow each other, each under the machine's load of its moment:
	// on an idle machine the limit answers 4 times more in time, on a loaded one
	// under -race 2.5 times; without its guard C answers the same either way.
	if with.inTime < capacity/2 || with.inTime < 2*without.inTime {
		t.Errorf("answers in time: %d with the limit, %d without, of a capacity of %d; want at least half the capacity, and twice as many", with.inTime, without.inTime, capacity)
	}
	if with.c.overdone*10 > with.c.worked || without.c.overdone*2 < without.c.worked {
		t.Errorf("requests handled after their deadline: with %d of %d, without %d of %d; want few with, most without",
			with.c.overdone, with.c.worked, without.c.overdone, without.c.worked)
	}
	if with.guard.Refused() == 0 {
		t.Error("C refused nothing at twice its capacity")
	}
}
