package propagate_test

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/propagate"
)

// A base transport that panics: the call's span, which the transport started (the
// caller's span is a server's), ends at once, an error, and the panic goes on.
func TestTransportPanicEndsCallSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ctx, server := tp.Tracer("test").Start(context.Background(), "server", trace.WithSpanKind(trace.SpanKindServer))
	defer server.End()
	rt := propagate.NewTransport(testkit.RoundTripFunc(func(*http.Request) (*http.Response, error) { panic("base") }))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.invalid/", nil)
	func() {
		defer func() {
			if r := recover(); r != "base" {
				t.Errorf("recovered %v; want the base transport's panic", r)
			}
		}()
		_, _ = rt.RoundTrip(req)
	}()
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "GET" || spans[0].Status().Code != codes.Error {
		t.Fatalf("ended spans %v; want the call's, an error", spans)
	}
}
