package chaintest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/deadlinekit/deadlinekit/hedge"
	"github.com/deadlinekit/deadlinekit/propagate"
	"github.com/deadlinekit/deadlinekit/retry"
	"github.com/deadlinekit/deadlinekit/shortcircuit"
)

type chainB struct {
	testgrpc.UnimplementedTestServiceServer
	c    *http.Client
	cURL string
}

func (b *chainB) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.cURL, nil)
	resp, err := b.c.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return &testgrpc.SimpleResponse{}, nil
}

// TestChainSpans runs client → A (HTTP) → B (gRPC) → C (HTTP) on loopback with the
// user's otelhttp / otelgrpc instrumentation outermost and the toolkit beneath, as the
// README shows. C fails its first request, so B's call to C is retried. Every span
// shares one trace, and the toolkit's attributes are where a user looks for them.
func TestChainSpans(t *testing.T) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	tp, rec := recorder(t)
	withTP := otelhttp.WithTracerProvider(tp)

	server := func(name string, h http.Handler) *httptest.Server {
		return httptest.NewServer(otelhttp.NewHandler(
			propagate.NewMiddleware()(shortcircuit.NewMiddleware(shortcircuit.WithFloor(time.Millisecond))(h)), name, withTP))
	}
	client := func() *http.Client {
		return &http.Client{Transport: otelhttp.NewTransport(retry.NewTransport(propagate.NewTransport(nil)), withTP)}
	}

	var cCalls atomic.Int32
	c := server("C", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cCalls.Add(1) == 1 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
		}
	}))
	defer c.Close()
	bToC := client()
	defer bToC.CloseIdleConnections()

	gs := grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))),
		grpc.ChainUnaryInterceptor(propagate.UnaryServerInterceptor(), shortcircuit.UnaryServerInterceptor()))
	testgrpc.RegisterTestServiceServer(gs, &chainB{c: bToC, cURL: c.URL})
	conn := dial(t, serveGRPC(t, gs), grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))),
		grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(), propagate.UnaryClientInterceptor()))
	bClient := testgrpc.NewTestServiceClient(conn)

	a := server("A", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := bClient.UnaryCall(r.Context(), &testgrpc.SimpleRequest{}); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
		}
	}))
	defer a.Close()
	toA := client()
	defer toA.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	resp, err := toA.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chain answered %s", resp.Status)
	}
	// End every server span before reading them: the client can have its answer
	// before a server's stats handler or middleware has ended its span.
	a.Close()
	gs.GracefulStop()
	c.Close()

	spans := rec.Ended()
	traceID := spans[0].SpanContext().TraceID()
	for _, s := range spans {
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %q is in trace %s, not %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
	}

	// Server spans (otelhttp / otelgrpc) carry the budget each hop received.
	var received []float64
	for _, s := range spans {
		if v, ok := value(s, "deadlinekit.budget.received_ms"); ok {
			received = append(received, v.AsFloat64())
			if src, _ := value(s, "deadlinekit.budget.source"); src.AsString() != "grpc-timeout" {
				t.Errorf("span %q: budget source %q; want grpc-timeout", s.Name(), src.AsString())
			}
			if _, ok := value(s, "deadlinekit.server.overrun_ms"); !ok {
				t.Errorf("server span %q has no overrun", s.Name())
			}
		}
	}
	// A, B, and C twice (the first attempt and the retry).
	if len(received) != 4 {
		t.Fatalf("%d server spans carry a received budget; want 4 (A, B, C, C)", len(received))
	}

	// B's outbound HTTP call was retried once: two attempt spans under otelhttp's
	// client span, each the parent of one of C's server spans.
	var attempts []sdktrace.ReadOnlySpan
	var call sdktrace.ReadOnlySpan
	for _, s := range spans {
		if _, isHTTPAttempt := value(s, "http.request.resend_count"); isHTTPAttempt {
			attempts = append(attempts, s)
		}
		if n, ok := value(s, "deadlinekit.retry.count"); ok && n.AsInt64() == 1 {
			call = s
		}
	}
	if call == nil {
		t.Fatal("no call span records one retry")
	}
	if v, _ := value(call, "deadlinekit.attempts"); v.AsInt64() != 2 {
		t.Errorf("call span attempts %v; want 2", v.AsInt64())
	}
	if v, _ := value(call, "deadlinekit.retry.stop_reason"); v.AsString() != "answered" {
		t.Errorf("call span stop reason %q; want answered", v.AsString())
	}
	var bAttempts int
	for _, s := range attempts {
		if s.Parent().SpanID() != call.SpanContext().SpanID() {
			continue
		}
		bAttempts++
		if _, ok := value(s, "deadlinekit.budget.sent_ms"); !ok {
			t.Errorf("attempt %q has no budget sent", s.Name())
		}
		found := false
		for _, child := range spans {
			if child.Parent().SpanID() == s.SpanContext().SpanID() {
				found = true
			}
		}
		if !found {
			t.Errorf("attempt %q is the parent of no downstream span", s.Name())
		}
	}
	if bAttempts != 2 {
		t.Errorf("%d attempt spans under B's call to C; want 2", bAttempts)
	}
}

// hedgeB answers a hedge at once and holds a primary until its call is cancelled.
type hedgeB struct {
	testgrpc.UnimplementedTestServiceServer
}

func (hedgeB) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "grpc-previous-rpc-attempts")) == 0 {
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
	return &testgrpc.SimpleResponse{}, nil
}

// TestRetryOverHedgeSpans: with hedging under retry (the order DESIGN.md gives) and
// otelgrpc beneath both, a call whose hedge wins shows one call span (the toolkit's,
// under the caller's span, since otelgrpc starts none per call) carrying the call's
// totals, two attempt spans under it (retry's first attempt, which hedge's primary
// shares, and the hedge), and each of otelgrpc's client spans under the attempt that
// sent it.
func TestRetryOverHedgeSpans(t *testing.T) {
	tp, rec := recorder(t)
	const method = "/grpc.testing.TestService/UnaryCall"

	gs := grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))))
	testgrpc.RegisterTestServiceServer(gs, hedgeB{})
	conn := dial(t, serveGRPC(t, gs), grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))),
		grpc.WithChainUnaryInterceptor(
			retry.UnaryClientInterceptor(),
			hedge.UnaryClientInterceptor(hedge.WithIdempotentMethods(method), hedge.WithDelay(hedge.Delay{Initial: 20 * time.Millisecond})),
			propagate.UnaryClientInterceptor()))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx, handle := tp.Tracer("test").Start(ctx, "handle")
	if _, err := testgrpc.NewTestServiceClient(conn).UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	handle.End()
	gs.GracefulStop()

	var attempts, rpcs, calls []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch {
		case s.Name() == "attempt primary" || s.Name() == "attempt hedge" || s.Name() == "attempt retry":
			attempts = append(attempts, s)
		case s.Name() == "grpc.testing.TestService/UnaryCall" && s.SpanKind().String() == "client":
			rpcs = append(rpcs, s)
		case s.Name() == "Sent.grpc.testing.TestService.UnaryCall":
			calls = append(calls, s)
		}
	}
	if len(attempts) != 2 || len(rpcs) != 2 || len(calls) != 1 {
		t.Fatalf("%d attempt spans, %d client RPC spans, %d call spans; want 2, 2 and 1", len(attempts), len(rpcs), len(calls))
	}
	call := calls[0]
	primary, hedged := attempts[0], attempts[1]
	if primary.Name() != "attempt primary" {
		primary, hedged = hedged, primary
	}
	if primary.Name() != "attempt primary" || hedged.Name() != "attempt hedge" {
		t.Fatalf("attempt spans %q and %q; want one primary and one hedge", primary.Name(), hedged.Name())
	}
	if call.Parent().SpanID() != handle.SpanContext().SpanID() || primary.Parent().SpanID() != call.SpanContext().SpanID() || hedged.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Errorf("parents: call under %v (want the caller's span %v), primary under %v and hedge under %v (want the call %v)",
			call.Parent().SpanID(), handle.SpanContext().SpanID(), primary.Parent().SpanID(), hedged.Parent().SpanID(), call.SpanContext().SpanID())
	}
	for _, a := range attempts {
		if a.EndTime().After(call.EndTime()) {
			t.Errorf("%s ends after its call", a.Name())
		}
	}
	if v, _ := value(call, "deadlinekit.hedge.won"); !v.AsBool() {
		t.Error("the call span does not record that its hedge won")
	}
	if v, _ := value(call, "deadlinekit.attempts"); v.AsInt64() != 2 {
		t.Errorf("the call span records %d attempts; want 2", v.AsInt64())
	}
	if v, _ := value(hedged, "deadlinekit.attempt.number"); v.AsInt64() != 2 {
		t.Errorf("the hedge is attempt %d; want 2", v.AsInt64())
	}
	for _, kv := range primary.Attributes() {
		if kv.Key == "deadlinekit.attempts" || kv.Key == "deadlinekit.hedge.won" {
			t.Errorf("the attempt span carries the call's %s", kv.Key)
		}
	}
	// The primary lost: retry's attempt, which it shares, ends as the primary did,
	// not with the call's answer.
	if v, _ := value(primary, "deadlinekit.attempt.outcome"); v.AsString() != "canceled" || primary.Status().Code.String() == "Error" {
		t.Errorf("the primary that lost ended %q, status %v; want canceled, no error", v.AsString(), primary.Status())
	}
	if v, _ := value(hedged, "deadlinekit.attempt.outcome"); v.AsString() != "success" {
		t.Errorf("the hedge that won ended %q; want success", v.AsString())
	}
	parents := map[trace.SpanID]bool{}
	for _, r := range rpcs {
		parents[r.Parent().SpanID()] = true
	}
	if !parents[primary.SpanContext().SpanID()] || !parents[hedged.SpanContext().SpanID()] {
		t.Errorf("client RPC spans' parents %v; want the primary attempt and the hedge attempt", parents)
	}
}
