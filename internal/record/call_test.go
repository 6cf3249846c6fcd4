package record

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/otelattr"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// A client span made for the call (otelhttp's transport, grpc-go's A72 plugin) is
// the call's span: the totals go on it, and its owner, not the toolkit, ends it.
func TestCallUsesTheUsersClientSpan(t *testing.T) {
	tp, rec, _ := withSDK(t)
	ctx, client := tp.Tracer("otelhttp").Start(context.Background(), "HTTP GET", trace.WithSpanKind(trace.SpanKindClient))
	cctx, call := StartCall(ctx, HTTP, "GET")
	if !call.Owner() || trace.SpanFromContext(cctx) != client {
		t.Fatal("the call did not take the user's client span as its own")
	}
	_, a := StartAttempt(cctx, HTTP, KindPrimary, 1)
	a.End(OutcomeSuccess, nil)
	RetryCall(cctx, 1, StopAnswered)
	call.End(errors.New("ignored: the span is the user's"))
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("%d spans ended before the user ended theirs; want the attempt only", n)
	}
	client.End()
	spans := rec.Ended()
	if spans[0].Parent().SpanID() != client.SpanContext().SpanID() {
		t.Error("the attempt is not a child of the user's client span")
	}
	testkit.WantAttrs(t, spans[1], otelattr.AttemptsKey.Int(1), otelattr.RetryCountKey.Int(0), otelattr.RetryStopReasonKey.String("answered"))
	if spans[1].Status().Code.String() == "Error" {
		t.Error("the toolkit set the status of a span it does not own")
	}
}

// Two calls made from one handler have two call spans, each with its own totals,
// and the handler's server span carries none of them.
func TestTwoCallsFromOneHandler(t *testing.T) {
	tp, rec, _ := withSDK(t)
	ctx, server := tp.Tracer("otelgrpc").Start(context.Background(), "pkg.Svc/Handle", trace.WithSpanKind(trace.SpanKindServer))
	for i, stop := range []StopReason{StopAnswered, StopAttemptsExhausted} {
		cctx, call := StartCall(ctx, GRPC, "/pkg.Down/Get")
		for n := 1; n <= i+1; n++ {
			_, a := StartAttempt(cctx, GRPC, KindPrimary, n)
			a.End(OutcomeFailure, errors.New("unavailable"))
		}
		RetryCall(cctx, i+1, stop)
		call.End(errors.New("unavailable"))
	}
	server.End()
	var calls []int
	for i, s := range rec.Ended() {
		switch s.Name() {
		case "Sent.pkg.Down.Get":
			calls = append(calls, i)
			if s.Status().Code.String() != "Error" {
				t.Errorf("a failed call's span has status %v", s.Status().Code)
			}
		case "pkg.Svc/Handle":
			if len(s.Attributes()) != 0 {
				t.Errorf("the server span carries %v", s.Attributes())
			}
		}
	}
	if len(calls) != 2 {
		t.Fatalf("%d call spans; want 2", len(calls))
	}
	spans := rec.Ended()
	testkit.WantAttrs(t, spans[calls[0]], otelattr.AttemptsKey.Int(1), otelattr.RetryStopReasonKey.String("answered"))
	testkit.WantAttrs(t, spans[calls[1]], otelattr.AttemptsKey.Int(2), otelattr.RetryStopReasonKey.String("attempts_exhausted"))
}

// A span that cannot say its kind (not the OTel SDK's) is not taken for a call span.
func TestCallUnderAnUnknownSpan(t *testing.T) {
	tp, rec, _ := withSDK(t)
	ctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	defer parent.End()
	ctx = trace.ContextWithSpan(ctx, opaqueSpan{parent})
	_, call := StartCall(ctx, HTTP, "PUT")
	call.End(nil)
	if s := rec.Ended(); len(s) != 1 || s[0].Name() != "PUT" {
		t.Fatalf("ended %d spans; want a call span of the toolkit's", len(s))
	}
}

// opaqueSpan hides the SDK span's methods beyond trace.Span.
type opaqueSpan struct{ trace.Span }

// Untraced: nothing is started, nothing is recorded, and nothing allocates.
func TestCallUntraced(t *testing.T) {
	ctx := trace.ContextWithSpan(context.Background(), noop.Span{})
	allocs := testing.AllocsPerRun(100, func() {
		cctx, call := StartCall(ctx, GRPC, "/a/b")
		if call.Recording() || cctx != ctx {
			t.Fatal("an untraced call started something")
		}
		RetryCall(cctx, 2, StopAnswered)
		HedgeCall(cctx, 0, false, HedgeSkipNotDue)
		call.End(nil)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per untraced call; want 0", allocs)
	}
}

// An HTTP call's span ends when its answer's body is done with, an error status
// marking it failed; a call with no body ends at once.
func TestCallEndHTTP(t *testing.T) {
	tp, rec, _ := withSDK(t)
	ctx, server := tp.Tracer("t").Start(context.Background(), "server", trace.WithSpanKind(trace.SpanKindServer))
	defer server.End()
	_, call := StartCall(ctx, HTTP, "GET")
	resp := &http.Response{StatusCode: 503, Body: io.NopCloser(strings.NewReader("busy"))}
	call.EndHTTP(resp, nil)
	if n := len(rec.Ended()); n != 0 {
		t.Fatal("the call span ended before its body was read")
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Status().Code != codes.Error || spans[0].Status().Description != "HTTP 503 Service Unavailable" {
		t.Fatalf("ended %d spans, status %v; want the call, failed with HTTP 503 Service Unavailable", len(spans), spans[0].Status())
	}
	_, call = StartCall(ctx, HTTP, "HEAD")
	call.EndHTTP(&http.Response{StatusCode: 200, Body: http.NoBody}, nil)
	if spans := rec.Ended(); len(spans) != 2 || spans[1].Status().Code == codes.Error {
		t.Fatal("a bodiless answer did not end its call, or ended it failed")
	}
}

// Under the user's client span (otelhttp's), the totals are written when the round
// trip returns: otelhttp ends its span on the body's Close before the layers beneath
// see it, so a caller who closes the body unread would otherwise lose them.
func TestCallEndHTTPUsersSpanTotalsAtReturn(t *testing.T) {
	tp, rec, _ := withSDK(t)
	ctx, client := tp.Tracer("otelhttp").Start(context.Background(), "HTTP GET", trace.WithSpanKind(trace.SpanKindClient))
	cctx, call := StartCall(ctx, HTTP, "GET")
	RetryCall(cctx, 2, StopAnswered)
	body := io.NopCloser(strings.NewReader("answer"))
	resp := &http.Response{StatusCode: 200, Body: body}
	call.EndHTTP(resp, nil)
	client.End() // as otelhttp's Close does, before the inner body's
	resp.Body.Close()
	testkit.WantAttrs(t, rec.Ended()[0], otelattr.AttemptsKey.Int(2), otelattr.RetryCountKey.Int(1))
	if resp.Body != body {
		t.Error("the body of a call whose span is the user's was wrapped: nothing of the toolkit's waits for it")
	}
}

// A round trip that panics ends the call's span at once, an error, and the panic
// goes on.
func TestRoundTripHTTPPanic(t *testing.T) {
	tp, rec, _ := withSDK(t)
	ctx, server := tp.Tracer("t").Start(context.Background(), "server", trace.WithSpanKind(trace.SpanKindServer))
	defer server.End()
	_, call := StartCall(ctx, HTTP, "GET")
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v; want the round trip's panic", r)
			}
		}()
		call.RoundTripHTTP(func() (*http.Response, error) { panic("boom") })
	}()
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Status().Code != codes.Error || spans[0].Status().Description != ErrPanicked.Error() {
		t.Fatalf("ended %d spans; want the call's, failed with %q", len(spans), ErrPanicked)
	}
}

// TestCallSpanNameRemembered: a gRPC call span's name is the same whether built or
// remembered, for methods past the cache's bound too.
func TestCallSpanNameRemembered(t *testing.T) {
	for i := range maxGRPCSpanNames + 10 {
		method := "/pkg.Svc/M" + strconv.Itoa(i)
		want := "Sent.pkg.Svc.M" + strconv.Itoa(i)
		for range 2 {
			if got := callSpanName(GRPC, method); got != want {
				t.Fatalf("callSpanName(%q) = %q; want %q", method, got, want)
			}
		}
	}
	if n := grpcSpanNameCount.Load(); n > maxGRPCSpanNames {
		t.Errorf("%d names remembered; want at most %d", n, maxGRPCSpanNames)
	}
	if got := callSpanName(HTTP, "POST"); got != "POST" {
		t.Errorf("HTTP: %q", got)
	}
}
