package retry_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/deadlinekit/deadlinekit/internal/testkit"
	"github.com/deadlinekit/deadlinekit/retry"
)

// A retried HTTP call as Jaeger will show it: one span per attempt under the call's
// span, each attempt's request carrying its own span as the downstream's parent, and
// the totals on the call's span.
func TestRetriedHTTPCallSpans(t *testing.T) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		defer tp.Shutdown(context.Background())
		base := &fakeRT{fn: func(n int, r *http.Request) (*http.Response, error) {
			if n < 3 {
				return httpStatus(http.StatusServiceUnavailable), nil
			}
			return httpStatus(http.StatusOK), nil
		}}
		ctx, call := tp.Tracer("test").Start(context.Background(), "GET /orders")
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://backend.test/orders", nil)
		resp, err := retry.NewTransport(base).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		call.End()

		spans := rec.Ended()
		if len(spans) != 5 {
			t.Fatalf("%d spans; want 3 attempts, the call and the caller's", len(spans))
		}
		callSpan := spans[3]
		if callSpan.Name() != "GET" || callSpan.SpanKind() != oteltrace.SpanKindClient || callSpan.Parent().SpanID() != call.SpanContext().SpanID() {
			t.Errorf("call span %q (%v) under %v; want the layer's client span GET under the caller's", callSpan.Name(), callSpan.SpanKind(), callSpan.Parent().SpanID())
		}
		if len(spans[4].Attributes()) != 0 {
			t.Errorf("the caller's span carries %v; want none of the call's totals", spans[4].Attributes())
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
			testkit.WantAttrs(t, s,
				attribute.Int("deadlinekit.attempt.number", n),
				attribute.String("deadlinekit.attempt.kind", kind),
				attribute.String("deadlinekit.attempt.outcome", outcome),
				attribute.Int("http.request.resend_count", n-1))
			if s.Parent().SpanID() != callSpan.SpanContext().SpanID() {
				t.Errorf("attempt %d is not a child of the call's span", n)
			}
			sent := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(base.reqs[i].Header))
			if got := oteltrace.SpanContextFromContext(sent).SpanID().String(); got != s.SpanContext().SpanID().String() {
				t.Errorf("attempt %d's request names parent %s; want its own span %s", n, got, s.SpanContext().SpanID())
			}
		}
		testkit.WantAttrs(t, callSpan,
			attribute.Int("deadlinekit.attempts", 3),
			attribute.Int("deadlinekit.retry.count", 2),
			attribute.String("deadlinekit.retry.stop_reason", "answered"))
	})
}

func TestRetryStopReasons(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []retry.Option
		budget   time.Duration
		attempts int
		reason   string
	}{
		{"attempts exhausted", nil, time.Second, 3, "attempts_exhausted"},
		{"budget empty", []retry.Option{retry.WithBudget(retry.NewBudget(0, 0, time.Second))}, time.Second, 1, "budget_empty"},
		{"deadline", nil, 30 * time.Millisecond, 1, "deadline"},
	} {
		synctest.Test(t, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			defer tp.Shutdown(context.Background())
			ctx, call := tp.Tracer("test").Start(context.Background(), "call")
			ctx, cancel := context.WithTimeout(ctx, tc.budget)
			defer cancel()
			invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				return status.Error(codes.Unavailable, "down")
			}
			_ = retry.UnaryClientInterceptor(tc.opts...)(ctx, "/svc/Get", nil, nil, nil, invoker)
			call.End()
			spans := rec.Ended()
			last := spans[len(spans)-2] // the layer's call span, then the caller's
			testkit.WantAttrs(t, last,
				attribute.Int("deadlinekit.attempts", tc.attempts),
				attribute.String("deadlinekit.retry.stop_reason", tc.reason))
			if got := len(spans) - 2; got != tc.attempts {
				t.Errorf("%s: %d attempt spans; want %d", tc.name, got, tc.attempts)
			}
			testkit.WantAttrs(t, spans[0], attribute.Int("previous-rpc-attempts", 0))
		})
	}
}
