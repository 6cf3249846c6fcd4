package record

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/deadlinekit/deadlinekit/criticality"
	"github.com/deadlinekit/deadlinekit/internal/metrictest"
	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// withSDK installs a span recorder and a manual metric reader for one test. Metrics
// go through instruments made from the test's own provider, so the global
// MeterProvider stays the API's no-op for TestNoSDKAllocs.
func withSDK(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	set := newInstruments(mp)
	old := instruments
	instruments = func() *instrumentSet { return set }
	t.Cleanup(func() { instruments = old; tp.Shutdown(context.Background()); mp.Shutdown(context.Background()) })
	return tp, rec, reader
}

func TestServerSide(t *testing.T) {
	tp, rec, reader := withSDK(t)
	ctx, span := tp.Tracer("test").Start(context.Background(), "server")
	Inbound(ctx, 250*time.Millisecond, "grpc-timeout", true)
	Guard(ctx, 4*time.Millisecond, 20*time.Millisecond)
	Overrun(ctx, 53*time.Millisecond)
	span.End()

	s := rec.Ended()[0]
	testkit.WantAttrs(t, s,
		otelattr.BudgetReceivedKey.Float64(250), otelattr.BudgetSourceKey.String("grpc-timeout"), otelattr.BudgetClampedKey.Bool(true),
		otelattr.ShortCircuitRejectedKey.Bool(true), otelattr.ShortCircuitFloorKey.Float64(20), otelattr.ShortCircuitRemainingKey.Float64(4),
		otelattr.ServerOverrunKey.Float64(53))
	if s.Status().Code.String() != "Error" {
		t.Errorf("short-circuited span status %v; want Error", s.Status())
	}
	metrictest.Want(t, reader, metricdata.Metrics{
		Name: "deadlinekit.shortcircuit.rejections", Description: "Requests refused before their handler ran, by reason and level.", Unit: "{request}",
		Data: metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: []metricdata.DataPoint[int64]{
			{Attributes: attribute.NewSet(otelattr.ShortCircuitReasonKey.String("below_floor"), otelattr.CriticalityKey.String("critical")), Value: 1},
		}},
	})
	for name, want := range map[string]float64{"deadlinekit.server.budget": 0.25, "deadlinekit.server.overrun": 0.053} {
		p := metrictest.Points(t, reader, name)
		if len(p) != 1 || p[0].Count != 1 || p[0].Sum < want-1e-9 || p[0].Sum > want+1e-9 {
			t.Errorf("metric %s: points %+v; want one of count 1, sum %v", name, p, want)
		}
	}
}

// A retried call: three attempts, the last one succeeds.
func TestRetriedCall(t *testing.T) {
	tp, rec, reader := withSDK(t)
	sctx, server := tp.Tracer("test").Start(context.Background(), "GET /orders", trace.WithSpanKind(trace.SpanKindServer))
	ctx, call := StartCall(sctx, HTTP, "GET")
	for n := 1; n <= 3; n++ {
		kind := KindPrimary
		if n > 1 {
			kind = KindRetry
		}
		actx, a := StartAttempt(ctx, HTTP, kind, n)
		BudgetSent(actx, time.Duration(300-n*50)*time.Millisecond)
		h := http.Header{}
		InjectHTTP(actx, h)
		if h.Get("Traceparent") != "" {
			t.Error("InjectHTTP wrote a header with no propagator installed")
		}
		if n < 3 {
			a.End(OutcomeFailure, errors.New("503 Service Unavailable"))
		} else {
			a.End(OutcomeSuccess, nil)
		}
	}
	RetryCall(ctx, 3, StopAnswered)
	call.End(nil)
	server.End()

	spans := rec.Ended()
	if len(spans) != 5 {
		t.Fatalf("%d spans; want 3 attempts, the call and the server's", len(spans))
	}
	if len(spans[4].Attributes()) != 0 {
		t.Errorf("the server span carries %v; want nothing of the call's", spans[4].Attributes())
	}
	for i, s := range spans[:3] {
		n := i + 1
		kind, outcome := "retry", "failure"
		if n == 1 {
			kind = "primary"
		}
		if n == 3 {
			outcome = "success"
		}
		if s.Parent().SpanID() != spans[3].SpanContext().SpanID() {
			t.Errorf("attempt %d is not a child of the call span", n)
		}
		if s.Name() != "attempt "+kind {
			t.Errorf("attempt %d named %q", n, s.Name())
		}
		testkit.WantAttrs(t, s, otelattr.AttemptNumberKey.Int(n), otelattr.AttemptKindKey.String(kind), otelattr.AttemptOutcomeKey.String(outcome),
			httpResendCountKey.Int(n-1), otelattr.BudgetSentKey.Float64(float64(300-n*50)))
	}
	if spans[3].Name() != "GET" || spans[3].SpanKind() != trace.SpanKindClient || spans[3].Parent().SpanID() != server.SpanContext().SpanID() {
		t.Errorf("call span %q kind %v parent %v; want GET, client, under the server span", spans[3].Name(), spans[3].SpanKind(), spans[3].Parent().SpanID())
	}
	testkit.WantAttrs(t, spans[3], otelattr.AttemptsKey.Int(3), otelattr.RetryCountKey.Int(2), otelattr.RetryStopReasonKey.String("answered"), otelattr.BudgetSentKey.Float64(250))
	if got := metrictest.Total(t, reader, "deadlinekit.retry.retries"); got != 2 {
		t.Errorf("retries counter %v; want 2", got)
	}
}

// A hedged gRPC call whose hedge wins.
func TestHedgedCall(t *testing.T) {
	tp, rec, reader := withSDK(t)
	sctx, server := tp.Tracer("test").Start(context.Background(), "server")
	defer server.End()
	ctx, call := StartCall(sctx, GRPC, "/svc/Get")
	_, primary := StartAttempt(ctx, GRPC, KindPrimary, 1)
	_, hedge := StartAttempt(ctx, GRPC, KindHedge, 2)
	hedge.End(OutcomeSuccess, nil)
	primary.End(OutcomeCanceled, nil) // another attempt answered first
	HedgeCall(ctx, 1, true, "")
	call.End(nil)

	spans := rec.Ended()
	testkit.WantAttrs(t, spans[0], otelattr.AttemptKindKey.String("hedge"), previousRPCAttemptsKey.Int(1), otelattr.AttemptOutcomeKey.String("success"))
	testkit.WantAttrs(t, spans[1], otelattr.AttemptKindKey.String("primary"), previousRPCAttemptsKey.Int(0), otelattr.AttemptOutcomeKey.String("canceled"))
	if spans[1].Status().Code.String() == "Error" {
		t.Error("a cancelled loser is marked as an error")
	}
	if ev := spans[1].Events(); len(ev) != 1 || ev[0].Name != canceledEvent {
		t.Errorf("the cancelled loser's events %v; want one saying it was cancelled", ev)
	}
	if spans[2].Name() != "Sent.svc.Get" {
		t.Errorf("call span named %q; want gRFC A72's Sent.svc.Get", spans[2].Name())
	}
	testkit.WantAttrs(t, spans[2], otelattr.AttemptsKey.Int(2), otelattr.HedgeCountKey.Int(1), otelattr.HedgeWonKey.Bool(true))
	if sent, wins := metrictest.Total(t, reader, "deadlinekit.hedge.sent"), metrictest.Total(t, reader, "deadlinekit.hedge.wins"); sent != 1 || wins != 1 {
		t.Errorf("hedge counters sent %v wins %v; want 1 and 1", sent, wins)
	}
}

// Hedging under retry: the hedging layer joins the retry layer's call; its primary
// is the retry layer's attempt, not an attempt of its own; its hedge is another
// attempt of the call, a child of the call's span numbered after the attempts
// before it. A primary under a span that is not an attempt span (the caller's own,
// inside the attempt) belongs to a call of its own.
func TestPrimaryInsideAttempt(t *testing.T) {
	tp, rec, _ := withSDK(t)
	sctx, server := tp.Tracer("test").Start(context.Background(), "server")
	ctx, call := StartCall(sctx, GRPC, "/svc/Get")
	actx, retryAttempt := StartAttempt(ctx, GRPC, KindPrimary, 1)
	hctx, joined := StartCall(actx, GRPC, "/svc/Get")
	if joined.Owner() || !joined.Recording() || hctx != actx {
		t.Fatal("the hedging layer under retry did not join the retry layer's call")
	}
	pctx, primary := StartAttempt(hctx, GRPC, KindPrimary, 1)
	if primary.Recording() || pctx != actx {
		t.Fatal("a primary inside an attempt started a span of its own")
	}
	_, hedge := StartAttempt(hctx, GRPC, KindHedge, 2)
	hedge.End(OutcomeSuccess, nil)
	HedgeCall(hctx, 1, true, "")
	joined.End(nil) // a joining layer's End does nothing
	inner, own := tp.Tracer("test").Start(actx, "the caller's")
	ictx, innerCall := StartCall(inner, GRPC, "/svc/Other")
	if !innerCall.Owner() {
		t.Error("a call under the caller's own span joined the outer call")
	}
	_, nested := StartAttempt(ictx, GRPC, KindPrimary, 1)
	if !nested.Recording() {
		t.Error("a primary under a span that is not an attempt has no span")
	}
	nested.End(OutcomeSuccess, nil)
	innerCall.End(nil)
	own.End()
	retryAttempt.End(OutcomeSuccess, nil)
	RetryCall(ctx, 1, StopAnswered)
	call.End(nil)
	server.End()

	spans := rec.Ended()
	if len(spans) != 7 {
		t.Fatalf("%d spans; want the server, the call, the attempt, its hedge, the caller's span, its call and primary", len(spans))
	}
	callSpan := spans[5]
	if spans[0].SpanKind() != trace.SpanKindInternal {
		t.Errorf("attempt span kind %v; want internal", spans[0].SpanKind())
	}
	if spans[0].Name() != "attempt hedge" || spans[0].Parent().SpanID() != callSpan.SpanContext().SpanID() {
		t.Errorf("hedge span %q has parent %v; want the call %v", spans[0].Name(), spans[0].Parent().SpanID(), callSpan.SpanContext().SpanID())
	}
	testkit.WantAttrs(t, spans[0], otelattr.AttemptNumberKey.Int(2), previousRPCAttemptsKey.Int(1))
	testkit.WantAttrs(t, callSpan, otelattr.AttemptsKey.Int(2), otelattr.RetryCountKey.Int(0), otelattr.HedgeCountKey.Int(1), otelattr.HedgeWonKey.Bool(true))
}

func TestBudgetRefusal(t *testing.T) {
	tp, rec, reader := withSDK(t)
	sctx, server := tp.Tracer("test").Start(context.Background(), "server")
	defer server.End()
	ctx, call := StartCall(sctx, HTTP, "GET")
	RetryCall(ctx, 1, StopBudgetEmpty)
	call.End(nil)
	testkit.WantAttrs(t, rec.Ended()[0], otelattr.AttemptsKey.Int(1), otelattr.RetryCountKey.Int(0), otelattr.RetryStopReasonKey.String("budget_empty"))
	if got := metrictest.Total(t, reader, "deadlinekit.retry.budget_refusals"); got != 1 {
		t.Errorf("budget refusals %v; want 1", got)
	}
}

func TestInjectHTTPParentsDownstreamOnAttempt(t *testing.T) {
	tp, _, _ := withSDK(t)
	ctx, call := tp.Tracer("test").Start(context.Background(), "call")
	defer call.End()
	actx, a := StartAttempt(ctx, HTTP, KindPrimary, 1)
	defer a.End(OutcomeSuccess, nil)
	h := http.Header{}
	// The global propagator is the user's choice; install one for this test only.
	prop := propagation.TraceContext{}
	prop.Inject(actx, propagation.HeaderCarrier(h))
	got := prop.Extract(context.Background(), propagation.HeaderCarrier(h))
	if trace.SpanContextFromContext(got).SpanID() != trace.SpanContextFromContext(actx).SpanID() {
		t.Fatal("the downstream would not be a child of the attempt span")
	}
}

// With no SDK, every function is a no-op that does not allocate.
func TestNoSDKAllocs(t *testing.T) {
	ctx := context.Background()
	h := http.Header{}
	allocs := testing.AllocsPerRun(100, func() {
		Inbound(ctx, time.Second, "grpc-timeout", false)
		Guard(ctx, time.Millisecond, 2*time.Millisecond)
		Overrun(ctx, time.Millisecond)
		BudgetSent(ctx, time.Second)
		actx, a := StartAttempt(ctx, HTTP, KindHedge, 2)
		InjectHTTP(actx, h)
		a.End(OutcomeFailure, context.Canceled)
		RetryCall(ctx, 3, StopBudgetEmpty)
		HedgeCall(ctx, 1, true, "")
		Admission(ctx, "cannot_finish", false, time.Millisecond, 2*time.Millisecond, 3*time.Millisecond, true, "")
		InFlight(ctx, 1)
		QueueLength(ctx, -1)
		Limit(ctx, 8)
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per run with no SDK; want 0", allocs)
	}
}

func BenchmarkRecordAttempt(b *testing.B) {
	b.Run("no-sdk", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			actx, a := StartAttempt(ctx, HTTP, KindRetry, 2)
			BudgetSent(actx, time.Second)
			a.End(OutcomeSuccess, nil)
		}
	})
	b.Run("recording", func(b *testing.B) {
		// Spans are sampled and recorded, then dropped: the cost measured is
		// the recording, not an exporter's.
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		defer tp.Shutdown(context.Background())
		ctx, call := tp.Tracer("bench").Start(context.Background(), "call")
		defer call.End()
		b.ReportAllocs()
		for b.Loop() {
			actx, a := StartAttempt(ctx, HTTP, KindRetry, 2)
			BudgetSent(actx, time.Second)
			a.End(OutcomeSuccess, nil)
		}
	})
}

// Hedging under retry: the primary is the retry layer's attempt. When it loses (a
// hedge answered first, or it failed while a hedge answered), its span ends that way,
// not with the call's answer, which the retry layer reports.
func TestJoinedPrimaryThatLost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lost   Outcome
		err    error
		status string
	}{
		{"canceled by a hedge", OutcomeCanceled, nil, "Unset"},
		{"failed, a hedge answered", OutcomeFailure, errors.New("503"), "Error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec, _ := withSDK(t)
			sctx, server := tp.Tracer("test").Start(context.Background(), "server")
			defer server.End()
			ctx, call := StartCall(sctx, HTTP, "GET")
			actx, retryAttempt := StartAttempt(ctx, HTTP, KindPrimary, 1)
			_, primary := StartAttempt(actx, HTTP, KindPrimary, 1)
			if primary.Recording() {
				t.Fatal("a primary inside an attempt has a span of its own")
			}
			_, hedge := StartAttempt(actx, HTTP, KindHedge, 2)
			hedge.End(OutcomeSuccess, nil)
			primary.End(tc.lost, tc.err)
			retryAttempt.End(OutcomeSuccess, nil) // the call's answer, the hedge's
			call.End(nil)
			var found bool
			for _, s := range rec.Ended() {
				if s.Name() == "attempt primary" {
					found = true
					testkit.WantAttrs(t, s, otelattr.AttemptOutcomeKey.String(string(tc.lost)))
					if got := s.Status().Code.String(); got != tc.status {
						t.Errorf("status %s; want %s", got, tc.status)
					}
				}
			}
			if !found {
				t.Fatal("no primary attempt span")
			}
		})
	}
}

// A joined primary that gave the call's answer leaves the outcome to the layer
// above.
func TestJoinedPrimaryThatWon(t *testing.T) {
	tp, rec, _ := withSDK(t)
	ctx, root := tp.Tracer("test").Start(context.Background(), "root")
	defer root.End()
	ctx, call := StartCall(ctx, HTTP, "GET")
	actx, retryAttempt := StartAttempt(ctx, HTTP, KindPrimary, 1)
	_, primary := StartAttempt(actx, HTTP, KindPrimary, 1)
	primary.End(OutcomeSuccess, nil)
	retryAttempt.End(OutcomeFailure, errors.New("HTTP 404, not retryable"))
	call.End(nil)
	testkit.WantAttrs(t, rec.Ended()[0], otelattr.AttemptOutcomeKey.String("failure"))
}

// A failed attempt is an error even when its failure came with no error value (an
// HTTP 503 answer).
func TestFailedAttemptWithoutAnErrorIsAnError(t *testing.T) {
	tp, rec, _ := withSDK(t)
	ctx, root := tp.Tracer("test").Start(context.Background(), "root")
	defer root.End()
	_, a := StartAttempt(ctx, HTTP, KindHedge, 2)
	a.End(OutcomeFailure, nil)
	if s := rec.Ended()[0]; s.Status().Code.String() != "Error" {
		t.Errorf("a failed attempt has status %v", s.Status())
	}
}

// A call whose caller cancelled it is no error, on the call span the toolkit started
// or on its attempt; a call that failed on its own is one.
func TestCallerCanceledCall(t *testing.T) {
	tp, rec, _ := withSDK(t)
	sctx, server := tp.Tracer("test").Start(context.Background(), "server", trace.WithSpanKind(trace.SpanKindServer))
	defer server.End()
	cctx, cancel := context.WithCancel(sctx)
	ctx, call := StartCall(cctx, GRPC, "/svc/Get")
	_, a := StartAttempt(ctx, GRPC, KindPrimary, 1)
	cancel()
	a.End(Cut(ctx, OutcomeFailure), context.Canceled)
	call.End(context.Canceled)
	for _, s := range rec.Ended() {
		if s.Status().Code.String() == "Error" {
			t.Errorf("span %q of a call its caller cancelled is an error: %v", s.Name(), s.Status())
		}
		if ev := s.Events(); len(ev) != 1 || ev[0].Name != callerCanceledEvent {
			t.Errorf("span %q events %v; want one saying the caller gave up", s.Name(), ev)
		}
	}
	testkit.WantAttrs(t, rec.Ended()[0], otelattr.AttemptOutcomeKey.String("canceled"))

	dctx, stop := context.WithTimeout(sctx, 0)
	defer stop()
	<-dctx.Done()
	if Cut(dctx, OutcomeFailure) != OutcomeFailure {
		t.Error("a call whose deadline passed is taken for a cancel")
	}
	_, call = StartCall(dctx, GRPC, "/svc/Get")
	call.End(context.DeadlineExceeded)
	if s := rec.Ended()[2]; s.Status().Code.String() != "Error" {
		t.Errorf("a call that ran out of time has status %v; want Error", s.Status())
	}
}

// The guard's refusals are errors on the server's span; a caller that left while
// queued is not.
func TestAdmissionCanceledIsNotAnError(t *testing.T) {
	tp, rec, _ := withSDK(t)
	for _, d := range []string{"cannot_finish", "canceled"} {
		ctx, s := tp.Tracer("test").Start(context.Background(), d, trace.WithSpanKind(trace.SpanKindServer))
		Admission(ctx, d, true, time.Millisecond, 0, 0, false, "")
		s.End()
	}
	spans := rec.Ended()
	if spans[0].Status().Code.String() != "Error" || spans[1].Status().Code.String() == "Error" {
		t.Errorf("statuses %v (cannot_finish) and %v (canceled); want Error and not Error", spans[0].Status(), spans[1].Status())
	}
}

// A refusal on arrival says what did not fit: the predicted wait, the work and the
// time left; it has no queue wait, since it never queued. A queued request's wait is
// the one it had.
func TestAdmissionRefusalSaysWhatDidNotFit(t *testing.T) {
	tp, rec, _ := withSDK(t)
	ctx, s := tp.Tracer("test").Start(context.Background(), "refused", trace.WithSpanKind(trace.SpanKindServer))
	Admission(ctx, "cannot_finish", false, 73*time.Millisecond, 125*time.Millisecond, 193*time.Millisecond, true, "")
	s.End()
	ctx, s = tp.Tracer("test").Start(context.Background(), "queued", trace.WithSpanKind(trace.SpanKindServer))
	Admission(ctx, "admitted", true, 4*time.Millisecond, 10*time.Millisecond, 90*time.Millisecond, true, "")
	s.End()
	spans := rec.Ended()
	got := func(i int) map[attribute.Key]attribute.Value {
		m := map[attribute.Key]attribute.Value{}
		for _, kv := range spans[i].Attributes() {
			m[kv.Key] = kv.Value
		}
		return m
	}
	r, q := got(0), got(1)
	if r[otelattr.ShortCircuitPredictedWaitKey].AsFloat64() != 73 || r[otelattr.ShortCircuitWorkKey].AsFloat64() != 125 ||
		r[otelattr.ShortCircuitRemainingKey].AsFloat64() != 193 {
		t.Errorf("refusal's attributes %v; want predicted wait 73, work 125, remaining 193", r)
	}
	if _, ok := r[otelattr.ShortCircuitQueueWaitKey]; ok {
		t.Errorf("a refusal on arrival has a queue wait: %v", r)
	}
	if q[otelattr.ShortCircuitQueueWaitKey].AsFloat64() != 4 {
		t.Errorf("queued request's attributes %v; want a queue wait of 4", q)
	}
	if _, ok := q[otelattr.ShortCircuitWorkKey]; ok {
		t.Errorf("an admitted request has the refusal's work: %v", q)
	}
}

// A refusal counts under the refused request's level; one displaced from the queue
// says by which level on its span.
func TestAdmissionCountsTheLevel(t *testing.T) {
	tp, rec, reader := withSDK(t)
	ctx, s := tp.Tracer("test").Start(criticality.With(context.Background(), criticality.Sheddable), "displaced",
		trace.WithSpanKind(trace.SpanKindServer))
	Admission(ctx, "overloaded", true, 30*time.Millisecond, 0, 0, true, "critical_plus")
	s.End()
	Admission(context.Background(), "overloaded", false, 30*time.Millisecond, 0, 0, true, "")
	testkit.WantAttrs(t, rec.Ended()[0], otelattr.ShortCircuitDisplacedByKey.String("critical_plus"))
	metrictest.Want(t, reader, metricdata.Metrics{
		Name: "deadlinekit.shortcircuit.rejections", Description: "Requests refused before their handler ran, by reason and level.", Unit: "{request}",
		Data: metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: []metricdata.DataPoint[int64]{
			{Attributes: attribute.NewSet(otelattr.ShortCircuitReasonKey.String("overloaded"), otelattr.CriticalityKey.String("sheddable")), Value: 1},
			{Attributes: attribute.NewSet(otelattr.ShortCircuitReasonKey.String("overloaded"), otelattr.CriticalityKey.String("critical")), Value: 1},
		}},
	})
}

// The attempt spans' start options made once are those built per attempt.
func TestAttemptStartKept(t *testing.T) {
	for _, p := range []Protocol{HTTP, GRPC, 0} {
		for _, kind := range append(attemptKinds[:], "other") {
			for n := 1; n <= maxKeptAttempt+2; n++ {
				gc, wc := trace.NewSpanStartConfig(attemptStart(p, kind, n)...), trace.NewSpanStartConfig(buildAttemptStart(p, kind, n)...)
				got, want := attribute.NewSet(gc.Attributes()...), attribute.NewSet(wc.Attributes()...)
				if !got.Equals(&want) || got.Len() != 3 && (p == HTTP || p == GRPC) {
					t.Errorf("attemptStart(%d, %s, %d) = %v; want %v", p, kind, n, got, want)
				}
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = attemptStart(GRPC, KindPrimary, 1) }); n != 0 {
		t.Errorf("attemptStart of a first attempt: %v allocations; want 0", n)
	}
	for _, o := range []Outcome{OutcomeSuccess, OutcomeFailure, OutcomeCanceled, "other"} {
		if got := outcomeAttr(o); len(got) != 1 || got[0] != otelattr.AttemptOutcomeKey.String(string(o)) {
			t.Errorf("outcomeAttr(%s) = %v", o, got)
		}
	}
}
